//! `flamegraph.svg`: the folded stacks drawn by inferno (as a library), coloured by the kind of code of each frame
//! (JIT/managed green, native yellow, kernel orange, unknown red, thread roots blue-grey) through inferno's palette
//! map, so the folded file itself stays plain. Off-CPU time is drawn in cold colours of the same kinds (blue
//! managed, cyan native, violet kernel): the whole graph of an off-CPU profile, the frames whose time was mostly
//! waiting in a wall-clock one. The SVG keeps inferno's script: click to zoom, Ctrl+F or the
//! Search button to highlight, and a `?s=<regex>` URL parameter that searches on load.

use super::folded::{push_count, Folded, FoldedStack};
use super::metadata_txt::Metadata;
use super::Weight;
use crate::symbolize::FrameKind;
use anyhow::{bail, Context, Result};
use inferno::flamegraph::color::{BackgroundColor, Color, PaletteMap};
use inferno::flamegraph::{self, Options};
use rustc_hash::FxHashSet;
use std::borrow::Cow;
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
    pub palette: Palette,
}

/// Which colours the frames get.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Palette {
    /// Warm colours by kind of code.
    #[default]
    OnCpu,
    /// Cold colours by kind of code: every frame is time off the CPU.
    OffCpu,
    /// Warm for frames whose time was mostly on the CPU, cold for those mostly off it.
    Wall,
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
            palette: Palette::OnCpu,
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
        let (palette, kind) = match meta.mode.as_str() {
            "offcpu" => (Palette::OffCpu, Some("off-CPU time")),
            "wall" => (Palette::Wall, Some("wall-clock time")),
            _ => (Palette::OnCpu, None),
        };
        let title = match (meta.pid, meta.ns_pid) {
            (Some(pid), Some(ns)) if ns != pid => format!("{target} (PID {pid}, {ns} in its namespace)"),
            (Some(pid), _) => format!("{target} (PID {pid})"),
            (None, _) if target.is_empty() => "CPU flame graph".to_string(),
            (None, _) => target,
        };
        let title = match kind {
            Some(kind) if title == "CPU flame graph" => format!("{kind} flame graph"),
            Some(kind) => format!("{kind}: {title}"),
            None => title,
        };
        let mut parts = Vec::new();
        match (meta.duration_secs, meta.frequency_hz) {
            (Some(d), Some(f)) => parts.push(format!("{d:.1} s at {f} Hz ({})", meta.event)),
            (Some(d), None) => parts.push(format!("{d:.1} s ({})", meta.event)),
            (None, Some(f)) => parts.push(format!("{f} Hz ({})", meta.event)),
            (None, None) => {}
        }
        match (palette, meta.switch_outs) {
            (Palette::OffCpu, Some(n)) => parts.push(format!("{n} switch-outs")),
            (Palette::Wall, Some(n)) => {
                parts.push(format!("{} samples, {n} switch-outs", meta.samples - n.min(meta.samples)))
            }
            _ => parts.push(format!("{} samples", meta.samples)),
        }
        parts.push(format!("{} lost", meta.lost));
        if weight == Weight::Time {
            parts.push(match palette {
                Palette::Wall => "µs on and off CPU".to_string(),
                _ => "µs off CPU".to_string(),
            });
        }
        if let Some(trigger) = &meta.trigger {
            parts.push(format!("started by {}", trigger.summary()));
        }
        let (count_name, factor) = count_unit(&meta.event, weight);
        FlameOptions {
            title,
            subtitle: Some(parts.join(" · ")),
            count_name,
            factor,
            palette,
            ..FlameOptions::default()
        }
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
        Weight::Time => ("µs".into(), 1.0),
        Weight::Period if CLOCK_EVENTS.contains(&event) => ("µs".into(), 1e-3),
        Weight::Period => (format!("{event} period"), 1.0),
    }
}

const LEGEND: &str = "green JIT · yellow native · orange kernel · red unknown · blue thread";
const OFF_CPU_LEGEND: &str = "blue managed · cyan native · violet kernel · grey [runnable]";
const WALL_LEGEND: &str = "warm: mostly on CPU · cold: mostly waiting";

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
        let cold = match opts.palette {
            Palette::OnCpu => false,
            Palette::OffCpu => true,
            Palette::Wall => folded.is_mostly_off_cpu(name),
        };
        let (r, g, b) = if cold { cold_color(Some(kind), name) } else { frame_color(Some(kind), name) };
        palette.insert(name, rgb(r, g, b));
    }
    // inferno adds the counts up in 64 bits: weights a hostile recording gives can pass that together, and are then
    // drawn in proportion (halved until their sum fits).
    let sum: u128 = folded.stacks().map(|(_, count)| u128::from(count)).sum();
    let halvings = (u128::BITS - sum.leading_zeros()).saturating_sub(u64::BITS);
    let total = u64::try_from(sum >> halvings).unwrap_or(u64::MAX);
    let (mut roots, mut leaves) = (FxHashSet::default(), FxHashSet::default());
    for (stack, _) in folded.stacks() {
        roots.insert(stack.ids()[0]);
        leaves.insert(*stack.ids().last().expect("a stack has frames"));
    }
    for root in roots.into_iter().map(|id| &*folded.names()[id as usize]) {
        if palette.get(root).is_none() {
            let (r, g, b) = match opts.palette {
                Palette::OffCpu => cold_color(None, root),
                _ => frame_color(None, root),
            };
            palette.insert(root, rgb(r, g, b));
        }
    }
    for leaf in leaves.into_iter().map(|id| &*folded.names()[id as usize]) {
        if let Cow::Owned(drawn) = protect_trailing_number(leaf) {
            let color = palette.get(leaf).unwrap_or_else(|| rgb(200, 200, 200));
            palette.insert(drawn, color);
        }
    }
    let lines = drawn_lines(folded, halvings, total, opts.min_width_percent);

    let mut options = Options::default();
    options.title = opts.title.clone();
    let legend = match opts.palette {
        Palette::OnCpu => LEGEND,
        Palette::OffCpu => OFF_CPU_LEGEND,
        Palette::Wall => WALL_LEGEND,
    };
    options.subtitle = match (&opts.subtitle, opts.legend) {
        (Some(s), true) => Some(format!("{s} · {legend}")),
        (Some(s), false) => Some(s.clone()),
        (None, true) => Some(legend.to_string()),
        (None, false) => None,
    };
    options.count_name = opts.count_name.clone();
    options.factor = opts.factor;
    options.min_width = opts.min_width_percent;
    options.bgcolors = Some(BackgroundColor::Grey);
    options.deterministic = true;
    options.palette_map = Some(&mut palette);
    options.no_sort = true;
    flamegraph::from_lines(&mut options, lines.iter(), out).context("drawing the flame graph")
}

/// Lines of text one after another in one buffer: tens of thousands of short lines in one allocation, not one each.
#[derive(Default)]
struct Lines {
    text: Vec<u8>,
    ends: Vec<usize>,
}

impl Lines {
    /// Ends the line whose bytes were appended to `text` since the last one ended.
    fn end_line(&mut self) {
        self.ends.push(self.text.len());
    }

    fn len(&self) -> usize {
        self.ends.len()
    }

    /// Keeps the first `len` lines.
    fn truncate(&mut self, len: usize) {
        self.ends.truncate(len);
        self.text.truncate(self.ends.last().copied().unwrap_or(0));
    }

    /// Adds the line of drawn frames `ids` (the last one protected) with `count`, or adds `count` to the last line
    /// where that reads the same (`last`: where its count begins, and the count). Unless `forced`, only in the
    /// order inferno takes lines in (sorted); false, adding nothing, otherwise.
    fn add_drawn(
        &mut self,
        last: &mut Option<(usize, u64)>,
        names: &[Box<str>],
        ids: &[u32],
        count: u64,
        forced: bool,
    ) -> bool {
        let at = self.text.len();
        push_names(names, ids, &mut self.text);
        let last_start = self.ends.len().checked_sub(2).map_or(0, |i| self.ends[i]);
        if let Some((count_at, sum)) = last {
            if self.text[last_start..*count_at] == self.text[at..] {
                *sum = sum.saturating_add(count);
                self.text.truncate(*count_at);
                push_count(&mut self.text, *sum);
                *self.ends.last_mut().expect("a last line") = self.text.len();
                return true;
            }
        }
        let count_at = self.text.len();
        push_count(&mut self.text, count);
        let before = self.ends.last().map_or(&[][..], |&end| &self.text[last_start..end]);
        if forced || before <= &self.text[at..] {
            self.end_line();
            *last = Some((count_at, count));
            return true;
        }
        self.text.truncate(at);
        false
    }

    fn iter(&self) -> impl Iterator<Item = &str> + Clone {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts.zip(&self.ends).map(|(start, &end)| std::str::from_utf8(&self.text[start..end]).expect("names are text"))
    }
}

/// The lines inferno draws the graph from (`STACK COUNT`, in the folded order, counts halved `halvings` times, a leaf
/// ending in a number protected), cut to the frames it draws: it leaves out every frame narrower than
/// `min_width_percent` of `total` (and so everything above it). Each stack is cut before its first such frame, and
/// the stacks that become the same, one after the other, are added up: under a drawn frame, all the narrow ones
/// become one line. inferno then merges a few frames per line instead of every frame of every stack (a profile where
/// nearly every stack is distinct spent most of its drawing time merging frames it then left out), and draws exactly
/// the same graph. The frames are compared by their name ids, and only the lines drawn are made into text.
///
/// Where that cut would end a line in a name ending in a number (inferno would read it as a count), or out of
/// inferno's order (`a;b` after `a;b;c`: it takes sorted lines only), the stack is cut after its first narrow frame
/// instead, keeping the `;` after it (inferno reads an empty frame there, as narrow as its parent, and leaves it
/// out); stacks cut so at narrow frames side by side share a line while together they stay narrow. Stacks inferno
/// would trim or skip (white space at their ends, a `# ` comment) are drawn whole, each on its own line.
fn drawn_lines(folded: &Folded, halvings: u32, total: u64, min_width_percent: f64) -> Lines {
    let names = folded.names();
    let mut stacks: Vec<(FoldedStack, u64)> =
        folded.stacks().map(|(stack, count)| (stack, count >> halvings)).collect();
    // The folded order is the lines' but where a name sorts otherwise once a count follows it (`f 2` before `f 2x`,
    // a leaf protected).
    let mut tails = (Vec::new(), Vec::new());
    let mut line_order = |a: &(FoldedStack, u64), b: &(FoldedStack, u64)| {
        let (x, y) = (a.0.ids(), b.0.ids());
        // The lines are the same before the first name that differs and before a leaf (which may be protected).
        let same = x.iter().zip(y).take_while(|(p, q)| p == q).count();
        let from = same.min(x.len().min(y.len()).saturating_sub(1));
        let (p, q) = (drawn_name(&a.0, from), drawn_name(&b.0, from));
        if let Some((p, q)) = p.bytes().zip(q.bytes()).find(|(p, q)| p != q) {
            // What follows a differing byte does not count.
            return p.cmp(&q);
        }
        tails.0.clear();
        tails.1.clear();
        push_line_tail(names, &a.0, a.1, from, &mut tails.0);
        push_line_tail(names, &b.0, b.1, from, &mut tails.1);
        tails.0.cmp(&tails.1)
    };
    // Where a stack's text begins another's, the line's space sorts below what follows in the other; so only names
    // holding a space or a control character (a protected leaf among them) can put two lines in another order.
    let spaced = names.iter().any(|name| name.bytes().any(|b| b <= b' '));
    if spaced && !stacks.windows(2).all(|w| line_order(&w[0], &w[1]).is_le()) {
        stacks.sort_by(line_order);
    }
    let whole = |stack: &FoldedStack, count: u64, lines: &mut Lines| {
        push_line_tail(names, stack, count, 0, &mut lines.text);
        lines.end_line();
    };
    let plain = |stack: &FoldedStack| {
        let (root, leaf) = (&names[stack.ids()[0] as usize], &names[*stack.ids().last().unwrap_or(&0) as usize]);
        !root.starts_with(char::is_whitespace) && !root.starts_with("# ") && !leaf.ends_with(char::is_whitespace)
    };
    // Every stack whole, in the order inferno needs.
    let every_stack = || {
        let mut lines = Lines::default();
        for (stack, count) in &stacks {
            whole(stack, *count, &mut lines);
        }
        lines
    };
    if !stacks.iter().all(|(stack, _)| plain(stack)) {
        return every_stack();
    }
    // inferno's own arithmetic (flamegraph::from_lines), so that every frame is kept or left out as it decides.
    let widthpertime_pct = 100.0 / total as f64;
    let minwidth_time = min_width_percent / widthpertime_pct;
    let narrow = |width: u64| (width as f64) < minwidth_time;
    // Whether a name ends in a number (protected where it is a leaf), by id.
    let mut protects = vec![None; names.len()];
    let mut protected = |id: u32| {
        *protects[id as usize]
            .get_or_insert_with(|| matches!(protect_trailing_number(&names[id as usize]), Cow::Owned(_)))
    };
    // A frame as inferno tells frames apart: its name, in which a leaf ending in a number is another name.
    let mut drawn = |stack: &FoldedStack, depth: usize| {
        let id = stack.ids()[depth];
        (id, depth + 1 == stack.ids().len() && protected(id))
    };
    // How many frames of each stack to keep: up to its first narrow frame. A frame is a run of consecutive stacks
    // with the same frames up to its own, as inferno merges them.
    // (And when the first narrow frame started.)
    let mut keep = vec![(usize::MAX, 0u64); stacks.len()];
    // The frames of the stack before, by depth: start time and first stack.
    let mut open: Vec<(u64, usize)> = Vec::new();
    let mut time = 0u64;
    let mut close_from = |depth: usize, open: &mut Vec<(u64, usize)>, time: u64, upto: usize| {
        for (d, &(start, first)) in open.iter().enumerate().skip(depth) {
            if narrow(time - start) {
                for k in &mut keep[first..upto] {
                    if d + 1 < k.0 {
                        *k = (d + 1, start);
                    }
                }
            }
        }
        open.truncate(depth);
    };
    for (i, (stack, count)) in stacks.iter().enumerate() {
        let shared = match i.checked_sub(1) {
            Some(before) => {
                let before = &stacks[before].0;
                let same = before.ids().iter().zip(stack.ids()).take_while(|(p, q)| p == q).count();
                // Only the last of them can be a leaf, and so drawn as another name.
                match same.checked_sub(1) {
                    Some(last) if drawn(before, last) != drawn(stack, last) => last,
                    _ => same,
                }
            }
            None => 0,
        };
        close_from(shared, &mut open, time, i);
        open.resize(stack.ids().len(), (time, i));
        time = time.saturating_add(*count);
    }
    close_from(0, &mut open, time, stacks.len());

    // The lines, each from one stack or from several one after the other.
    let mut lines = Lines::default();
    // The last line when it holds only drawn frames: where its count begins, and the count.
    let mut drawn_line: Option<(usize, u64)> = None;
    // The line being made of stacks cut after a narrow frame: their frames, their count, and how wide its narrow
    // frame is (from before its first stack too: inferno merges it with the frame of the line before where that has
    // the same name).
    let mut cut: Option<(&[u32], u64, u64)> = None;
    let end_cut = |cut: Option<(&[u32], u64, u64)>, lines: &mut Lines, drawn_line: &mut Option<(usize, u64)>| {
        if let Some((ids, count, _)) = cut {
            for &id in ids {
                lines.text.extend_from_slice(names[id as usize].as_bytes());
                lines.text.push(b';');
            }
            push_count(&mut lines.text, count);
            lines.end_line();
            *drawn_line = None;
        }
    };
    let mut time = 0u64;
    for ((stack, count), &(keep, narrow_start)) in stacks.iter().zip(&keep) {
        let start = time;
        time = time.saturating_add(*count);
        let ids = stack.ids();
        // Its frames before the first narrow one, where the last of them ends in no number; else, where only its
        // leaf is narrow or none is, the whole stack.
        let cut_before = (keep <= ids.len() && keep >= 2 && !protected(ids[keep - 2])).then(|| &ids[..keep - 1]);
        let drawn_to_leaf = keep >= ids.len();
        if cut_before.is_some() || drawn_to_leaf {
            let (pending, lines_before, last_before) = (cut, lines.len(), drawn_line);
            end_cut(cut.take(), &mut lines, &mut drawn_line);
            let added = cut_before.is_some_and(|ids| lines.add_drawn(&mut drawn_line, names, ids, *count, false))
                || (drawn_to_leaf && lines.add_drawn(&mut drawn_line, names, ids, *count, true));
            if added {
                continue;
            }
            // Taken back: this stack joins the line being made.
            lines.truncate(lines_before);
            (cut, drawn_line) = (pending, last_before);
        }
        let ids = &ids[..keep];
        let siblings = |before: &[u32]| before.len() == ids.len() && before[..keep - 1] == ids[..keep - 1];
        match &mut cut {
            Some((before, sum, width)) if siblings(before) && narrow(width.saturating_add(*count)) => {
                *sum = sum.saturating_add(*count);
                *width = width.saturating_add(*count);
            }
            _ => {
                let width = start.saturating_sub(narrow_start).saturating_add(*count);
                end_cut(cut.replace((ids, *count, width)), &mut lines, &mut drawn_line);
            }
        }
    }
    end_cut(cut, &mut lines, &mut drawn_line);
    tracing::debug!("{} stacks drawn as {} lines", stacks.len(), lines.len());
    // The cut lines are in order but where a cut leaves a name that sorted otherwise with what followed it.
    let in_order = lines.iter().zip(lines.iter().skip(1)).all(|(a, b)| a <= b);
    match in_order {
        true => lines,
        false => every_stack(),
    }
}

/// The name inferno reads for a stack's frame at `depth`: a leaf ending in a number protected.
fn drawn_name<'a>(stack: &FoldedStack<'a>, depth: usize) -> Cow<'a, str> {
    let name = stack.name(stack.ids()[depth]);
    match depth + 1 == stack.ids().len() {
        true => protect_trailing_number(name),
        false => Cow::Borrowed(name),
    }
}

/// Appends a stack's line as inferno reads it, from its frame `from` on: its names ([`push_names`]), a space and the
/// count.
fn push_line_tail(names: &[Box<str>], stack: &FoldedStack, count: u64, from: usize, out: &mut Vec<u8>) {
    push_names(names, &stack.ids()[from..], out);
    push_count(out, count);
}

/// Appends the names of `ids` joined by `;`, the last one protected ([`protect_trailing_number`]): a stack's leaf,
/// or a frame a stack is cut after, which never ends in a number.
fn push_names(names: &[Box<str>], ids: &[u32], out: &mut Vec<u8>) {
    for (i, &id) in ids.iter().enumerate() {
        if i > 0 {
            out.push(b';');
        }
        let name = &*names[id as usize];
        match i + 1 == ids.len() {
            true => out.extend_from_slice(protect_trailing_number(name).as_bytes()),
            false => out.extend_from_slice(name.as_bytes()),
        }
    }
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

/// The cold counterpart of [`frame_color`], for time off the CPU; the `[runnable]` frame is grey.
pub fn cold_color(kind: Option<FrameKind>, name: &str) -> (u8, u8, u8) {
    let v = shade(name);
    let mix = |base: u8, span: u8| base.saturating_add((v * span as f64) as u8);
    if name == crate::symbolize::RUNNABLE_FRAME {
        return (190, 195, 205);
    }
    match kind {
        Some(FrameKind::Jit) => (mix(40, 50), mix(110, 60), mix(200, 50)),
        Some(FrameKind::Native) => (mix(60, 50), mix(170, 50), mix(200, 50)),
        Some(FrameKind::Kernel) => (mix(130, 50), mix(100, 50), mix(200, 50)),
        Some(FrameKind::Unknown) => (mix(150, 40), mix(160, 40), mix(190, 40)),
        None => (mix(100, 40), mix(120, 40), mix(150, 40)),
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
fn protect_trailing_number(stack: &str) -> Cow<'_, str> {
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

#[cfg(test)]
mod drawn_lines_tests {
    use super::{drawn_lines, protect_trailing_number};
    use crate::report::folded::Folded;
    use inferno::flamegraph::{self, Options};

    fn svg<'a>(lines: impl IntoIterator<Item = &'a str>, min_width: f64) -> String {
        let mut options = Options::default();
        options.min_width = min_width;
        options.deterministic = true;
        options.no_sort = true;
        let mut out = Vec::new();
        flamegraph::from_lines(&mut options, lines, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    /// Random profiles, in a quarter of them with names that sort below `;` (`f(`, `f.x`, `f x`, `f1`/`f12`) and
    /// names ending in numbers: the cut lines draw exactly what every stack drawn whole draws.
    #[test]
    fn the_cut_lines_draw_the_same_graph() {
        let plain = ["a", "b", "c", "f", "g", "h", "Main", "[k]"];
        let tricky = ["a", "b", "f", "f(int)", "f.x", "f x", "Worker 2", "f1", "f12", "[k]"];
        let mut rng = crate::random_inputs::Rng::new(0xf1a3e);
        let (mut cut_some, mut out_of_order) = (0, 0);
        for round in 0..300 {
            let names: &[&str] = if round % 4 == 0 { &tricky } else { &plain };
            let mut stacks = std::collections::BTreeMap::new();
            for _ in 0..1 + rng.below(200) {
                let depth = 1 + rng.below(if round % 3 == 0 { 3 } else { 12 });
                let ids: Box<[u32]> = (0..depth).map(|_| rng.below(names.len()) as u32).collect();
                *stacks.entry(ids).or_insert(0u64) += 1 + rng.below(if round % 2 == 0 { 3 } else { 50 }) as u64;
            }
            let folded = Folded::of_stacks(names.iter().map(|&n| n.into()).collect(), stacks.into_iter().collect());
            // Every stack whole, as inferno would read the folded file's lines (a leaf ending in a number
            // protected), in the folded order.
            let mut whole: Vec<String> = folded
                .stacks()
                .map(|(stack, n)| format!("{} {n}", protect_trailing_number(&stack.to_string())))
                .collect();
            out_of_order += usize::from(!whole.windows(2).all(|w| w[0] <= w[1]));
            whole.sort_unstable();
            let drawn = drawn_lines(&folded, 0, folded.total(), 0.5);
            let cut: Vec<&str> = drawn.iter().collect();
            cut_some += usize::from(cut != whole);
            let (cut_svg, whole_svg) = (svg(cut.iter().copied(), 0.5), svg(whole.iter().map(String::as_str), 0.5));
            assert!(cut_svg == whole_svg, "round {round}: {whole:?} cut to {cut:?}");
        }
        assert!(cut_some > 150, "only {cut_some} of 300 profiles were cut");
        assert!(out_of_order > 20, "only {out_of_order} of 300 profiles had lines out of the folded order");
    }

    /// The cut lines of `stacks` of `names` where frames narrower than 5% are left out, checked to draw what the
    /// whole stacks draw.
    fn cut_lines(names: &[&str], stacks: &[(&[u32], u64)]) -> Vec<String> {
        let names = names.iter().map(|&n| n.into()).collect();
        let folded = Folded::of_stacks(names, stacks.iter().map(|&(ids, n)| (ids.into(), n)).collect());
        let mut whole: Vec<String> =
            folded.stacks().map(|(stack, n)| format!("{} {n}", protect_trailing_number(&stack.to_string()))).collect();
        whole.sort_unstable();
        let drawn = drawn_lines(&folded, 0, folded.total(), 5.0);
        let cut: Vec<String> = drawn.iter().map(String::from).collect();
        assert_eq!(svg(cut.iter().map(String::as_str), 5.0), svg(whole.iter().map(String::as_str), 5.0));
        cut
    }

    /// Stacks cut before their first narrow frame read the same and share one line: here everything under `a`.
    #[test]
    fn the_narrow_frames_under_a_drawn_one_become_one_line() {
        let names = ["main", "a", "f1", "f2", "f3", "f4", "x"];
        let stacks = [(&[0, 1][..], 100), (&[0, 1, 2], 2), (&[0, 1, 2, 6], 2), (&[0, 1, 3, 6], 2), (&[0, 1, 4, 6], 2)];
        assert_eq!(cut_lines(&names, &stacks), ["main;a 108"]);
    }

    /// Narrow frames one after another under the same parent share a line while together they stay narrow, counted
    /// from where the first one's frame began: here `f1` also has a line of its own before (its leaf), and drawn with
    /// `f2` it would be wide. They are cut after the narrow frame because the parent ends in a number (drawn
    /// protected where it is a leaf, so that line sorts last).
    #[test]
    fn narrow_siblings_share_a_line_while_they_stay_narrow() {
        let names = ["main", "Worker 2", "f1", "f2", "f3", "f4", "x"];
        let stacks = [(&[0, 1][..], 100), (&[0, 1, 2], 2), (&[0, 1, 2, 6], 2), (&[0, 1, 3, 6], 2), (&[0, 1, 4, 6], 2)];
        let stacks = [&stacks[..], &[(&[0, 1, 5, 6][..], 2)]].concat();
        // 5 % of 110: frames narrower than 5.5 are left out.
        assert_eq!(
            cut_lines(&names, &stacks),
            [
                "main;Worker 2;f1 2",
                "main;Worker 2;f1; 2",
                "main;Worker 2;f2; 4",
                "main;Worker 2;f4; 2",
                "main;Worker\u{a0}2 100"
            ],
            "f2 and f3 share a line, f1's cut stack does not take f2's (f1 would be 6 wide)"
        );
    }

    /// A narrow frame after a drawn sibling is cut after, not before: `main;a 2` after `main;a;b 100` would be out
    /// of inferno's order.
    #[test]
    fn narrow_frames_after_a_drawn_sibling_keep_their_frame() {
        let names = ["main", "a", "b", "z", "x", "y"];
        let stacks = [(&[0, 1, 2][..], 100), (&[0, 1, 3, 4], 1), (&[0, 1, 3, 5], 1)];
        assert_eq!(cut_lines(&names, &stacks), ["main;a;b 100", "main;a;z; 2"]);
    }
}
