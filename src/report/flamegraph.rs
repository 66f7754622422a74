//! `flamegraph.svg`: the folded stacks drawn by inferno (as a library), coloured by the kind of code of each frame
//! (JIT/managed green, native yellow, kernel orange, unknown red, thread roots blue-grey) through inferno's palette
//! map, so the folded file itself stays plain. The SVG keeps inferno's script: click to zoom, Ctrl+F or the
//! Search button to highlight, and a `?s=<regex>` URL parameter that searches on load.

use super::folded::Folded;
use super::metadata_txt::Metadata;
use super::Weight;
use crate::symbolize::FrameKind;
use anyhow::{bail, Context, Result};
use inferno::flamegraph::color::{BackgroundColor, Color, PaletteMap};
use inferno::flamegraph::{self, Options};
use std::io::Write;

/// What the flame graph says about itself.
#[derive(Debug, Clone, PartialEq)]
pub struct FlameOptions {
    pub title: String,
    /// Second line under the title (duration, frequency, samples, lost).
    pub subtitle: Option<String>,
    /// Unit shown in each frame's tooltip ("samples", "µs", …).
    pub count_name: String,
    /// Multiplier from folded counts to `count_name` units.
    pub factor: f64,
    /// Append the colour legend to the subtitle.
    pub legend: bool,
    /// Frames narrower than this percentage of the total are left out (keeps huge profiles fast to open).
    pub min_width_percent: f64,
}

impl Default for FlameOptions {
    fn default() -> Self {
        FlameOptions {
            title: "CPU flame graph".into(),
            subtitle: None,
            count_name: "samples".into(),
            factor: 1.0,
            legend: true,
            min_width_percent: 0.01,
        }
    }
}

/// Events whose period is a time in nanoseconds.
const CLOCK_EVENTS: [&str; 2] = ["cpu-clock", "task-clock"];

impl FlameOptions {
    /// Title and subtitle from a profile's metadata: `<command line> (PID <pid>)`, and
    /// `<duration> at <freq> Hz (<event>) · <samples> samples · <lost> lost`. Counts are shown in µs of CPU when
    /// stacks are weighted by a clock event's period, else in samples (or the event's period units).
    pub fn for_profile(meta: &Metadata, weight: Weight) -> Self {
        let target = if meta.command_line.trim().is_empty() { meta.comm.clone() } else { meta.command_line.clone() };
        let target = shorten(&without_directories(&target), 100);
        let title = match (meta.pid, meta.ns_pid) {
            (Some(pid), Some(ns)) if ns != pid => format!("{target} (PID {pid}, {ns} in its namespace)"),
            (Some(pid), _) => format!("{target} (PID {pid})"),
            (None, _) if target.is_empty() => "CPU flame graph".to_string(),
            (None, _) => target,
        };
        let mut parts = Vec::new();
        match (meta.duration_secs, meta.frequency_hz) {
            (Some(d), Some(f)) => parts.push(format!("{d:.1} s at {f} Hz ({})", meta.event)),
            (Some(d), None) => parts.push(format!("{d:.1} s ({})", meta.event)),
            (None, Some(f)) => parts.push(format!("{f} Hz ({})", meta.event)),
            (None, None) => {}
        }
        parts.push(format!("{} samples", meta.samples));
        parts.push(format!("{} lost", meta.lost));
        if let Some(trigger) = &meta.trigger {
            parts.push(format!("started by {}", trigger.summary()));
        }
        let (count_name, factor) = count_unit(&meta.event, weight);
        FlameOptions { title, subtitle: Some(parts.join(" · ")), count_name, factor, ..FlameOptions::default() }
    }

    /// The same graph restricted to one thread: the title names it.
    pub fn for_thread(&self, tid: u32, comm: &str) -> Self {
        let mut opts = self.clone();
        opts.title = format!("{} — thread {tid} ({comm})", self.title);
        opts
    }
}

/// The tooltip unit and factor for folded counts of `event` weighted by `weight`.
pub fn count_unit(event: &str, weight: Weight) -> (String, f64) {
    match weight {
        Weight::Samples => ("samples".into(), 1.0),
        Weight::Period if CLOCK_EVENTS.contains(&event) => ("µs".into(), 1e-3),
        Weight::Period => (format!("{event} period"), 1.0),
    }
}

const LEGEND: &str = "green JIT · yellow native · orange kernel · red unknown · blue thread";

/// Renders `folded` as an interactive SVG. Fails (writing nothing) when there is no stack to draw.
pub fn write_svg(folded: &Folded, opts: &FlameOptions, out: impl Write) -> Result<()> {
    if folded.is_empty() {
        bail!("no stacks to draw: no samples with a callchain passed the filters");
    }
    if folded.total() == 0 {
        bail!("no stacks to draw: every sample has period 0 (fold with Weight::Samples)");
    }
    let mut palette = PaletteMap::default();
    palette.insert("", rgb(200, 200, 200));
    for (name, kind) in folded.kinds() {
        let (r, g, b) = frame_color(Some(kind), name);
        palette.insert(name, rgb(r, g, b));
    }
    let mut lines = Vec::with_capacity(folded.stacks().len());
    for (stack, count) in folded.stacks() {
        let root = stack.split(';').next().unwrap_or_default();
        if palette.get(root).is_none() {
            let (r, g, b) = frame_color(None, root);
            palette.insert(root, rgb(r, g, b));
        }
        let drawn = protect_trailing_number(stack);
        if drawn.len() != stack.len() {
            let (leaf, drawn_leaf) = (stack.rsplit(';').next(), drawn.rsplit(';').next());
            if let (Some(leaf), Some(drawn_leaf)) = (leaf, drawn_leaf) {
                let color = palette.get(leaf).unwrap_or_else(|| rgb(200, 200, 200));
                palette.insert(drawn_leaf, color);
            }
        }
        lines.push(format!("{drawn} {count}"));
    }

    let mut options = Options::default();
    options.title = opts.title.clone();
    options.subtitle = match (&opts.subtitle, opts.legend) {
        (Some(s), true) => Some(format!("{s} · {LEGEND}")),
        (Some(s), false) => Some(s.clone()),
        (None, true) => Some(LEGEND.to_string()),
        (None, false) => None,
    };
    options.count_name = opts.count_name.clone();
    options.factor = opts.factor;
    options.min_width = opts.min_width_percent;
    options.bgcolors = Some(BackgroundColor::Grey);
    options.deterministic = true;
    options.palette_map = Some(&mut palette);
    flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), out).context("drawing the flame graph")
}

/// A colour for a frame: the hue says the kind of code, a shade derived from the name tells neighbours apart and
/// stays the same across runs.
pub fn frame_color(kind: Option<FrameKind>, name: &str) -> (u8, u8, u8) {
    let v = shade(name);
    let mix = |base: u8, span: u8| base.saturating_add((v * span as f64) as u8);
    match kind {
        Some(FrameKind::Jit) => (mix(40, 60), mix(170, 60), mix(40, 60)),
        Some(FrameKind::Native) => (mix(190, 50), mix(180, 50), mix(40, 40)),
        Some(FrameKind::Kernel) => (mix(210, 45), mix(110, 50), mix(0, 40)),
        Some(FrameKind::Unknown) => (mix(200, 55), mix(60, 50), mix(60, 50)),
        None => (mix(120, 40), mix(150, 40), mix(200, 40)),
    }
}

/// A stable number in [0, 1) from a name (FNV-1a).
fn shade(name: &str) -> f64 {
    let mut h: u32 = 0x811c_9dc5;
    for b in name.bytes() {
        h = (h ^ b as u32).wrapping_mul(0x0100_0193);
    }
    (h % 1000) as f64 / 1000.0
}

fn rgb(r: u8, g: u8, b: u8) -> Color {
    Color { r, g, b }
}

/// inferno reads the last space-separated number(s) of a line as counts, so a leaf named e.g. `Worker 2` would be
/// taken for a second (differential) count. A no-break space keeps the name looking the same in the graph.
fn protect_trailing_number(stack: &str) -> std::borrow::Cow<'_, str> {
    if let Some(space) = stack.rfind(' ') {
        let tail = &stack[space + 1..];
        let numeric =
            !tail.is_empty() && tail.bytes().all(|b| b.is_ascii_digit() || b == b'.') && tail.matches('.').count() <= 1;
        if numeric {
            return format!("{}\u{a0}{tail}", &stack[..space]).into();
        }
    }
    stack.into()
}

/// `/usr/share/dotnet/dotnet /app/App.dll --port 80` → `dotnet App.dll --port 80`: the title has room for about 100
/// characters, and the directories are in metadata.txt.
fn without_directories(command_line: &str) -> String {
    command_line
        .split(' ')
        .map(|word| match word.rsplit_once('/') {
            Some((dir, base)) if dir.starts_with('/') && !base.is_empty() && !dir.contains(['\'', '"']) => base,
            _ => word,
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn shorten(text: &str, max_chars: usize) -> String {
    if text.chars().count() <= max_chars {
        text.to_string()
    } else {
        text.chars().take(max_chars - 1).chain(['…']).collect()
    }
}

#[cfg(test)]
mod title_tests {
    use super::without_directories;

    #[test]
    fn titles_drop_directories_of_absolute_paths_only() {
        assert_eq!(
            without_directories("/root/.cache/dotnet/bin/dotnet /srv/app/App.dll --port 80 ./rel/x"),
            "dotnet App.dll --port 80 ./rel/x"
        );
        assert_eq!(without_directories("node '/a b/c.js'"), "node '/a b/c.js'");
    }
}
