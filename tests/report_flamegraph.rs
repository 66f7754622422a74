//! flamegraph.svg opened in a real browser (headless Chromium): it renders frames, its built-in search (the
//! `?s=` URL parameter) finds the hot method, and a screenshot is taken for a human to look at. Chromium is a
//! required test tool (`apt-get install -y chromium`); the test fails when it is missing.
//!
//! Set PROFCPU_KEEP_SVG=<dir> to keep the SVG and the screenshot in <dir>.

mod support;

use profcpu::report::flamegraph::{frame_color, write_svg, FlameOptions};
use profcpu::report::metadata_txt::Metadata;
use profcpu::report::Weight;
use profcpu::symbolize::{FrameKind, ResolvedSample};
use std::path::{Path, PathBuf};
use std::time::Instant;
use support::chromium::chromium;
use support::fixtures::{frame, jit, kernel, native, sample, CORECLR, CORELIB};
use support::report::render_weighted;

/// A .NET-looking profile: 70% in `App::HotMethod`, the rest spread over other frames of every kind.
fn profile() -> Vec<ResolvedSample> {
    let mut samples = Vec::new();
    for i in 0..1000u64 {
        let base = vec![
            native("start_thread", "/usr/lib/x86_64-linux-gnu/libc.so.6", 0x7f20_0000_1234),
            native("ThreadNative::KickOffThread(void*)", CORECLR, 0x7f30_0000_1000),
            jit("void [App] App.Server::Serve(class System.Net.Sockets.Socket)[OptimizedTier1]", 0x7f00_1000),
        ];
        let mut frames = base;
        match i % 10 {
            0..=6 => frames.push(jit("int64 [App] App.Work::HotMethod(int32)[OptimizedTier1]", 0x7f00_2000)),
            7 => frames.push(frame(None, CORELIB, FrameKind::Unknown, 0x7f10_0045_5d12, 0x455d12)),
            8 => {
                frames.push(native("write", "/usr/lib/x86_64-linux-gnu/libc.so.6", 0x7f20_0000_2000));
                frames.push(kernel("ksys_write", 0xffff_ffff_8120_0000));
            }
            _ => frames.push(jit("void [App] App.Work::ColdMethod()[QuickJitted]", 0x7f00_3000)),
        }
        samples.push(sample(
            ".NET ThreadPool",
            4250 + (i % 3) as u32,
            1_000_000_000_000 + i * 10_101_010,
            10_101_010,
            frames,
        ));
    }
    samples
}

fn metadata() -> Metadata {
    Metadata {
        pid: Some(4242),
        ns_pid: Some(1),
        comm: "dotnet".into(),
        command_line: "dotnet App.dll --urls http://0.0.0.0:5000".into(),
        duration_secs: Some(10.1),
        frequency_hz: Some(99),
        event: "cpu-clock".into(),
        samples: 1000,
        lost: 7,
        ..Metadata::for_this_host()
    }
}

fn work_dir(name: &str) -> PathBuf {
    let dir = match std::env::var_os("PROFCPU_KEEP_SVG") {
        Some(keep) => PathBuf::from(keep),
        None => std::env::temp_dir().join(format!("profcpu-{name}-{}", std::process::id())),
    };
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn write_profile_svg(dir: &Path) -> (PathBuf, String) {
    let folded = render_weighted(&profile(), Weight::Period).profile.folded;
    let opts = FlameOptions::for_profile(&metadata(), Weight::Period);
    let path = dir.join("flamegraph.svg");
    let mut out = Vec::new();
    write_svg(&folded, &opts, &mut out).unwrap();
    std::fs::write(&path, &out).unwrap();
    (path, String::from_utf8(out).unwrap())
}

#[test]
fn svg_has_titles_colours_by_kind_and_tooltips() {
    let dir = work_dir("svg-static");
    let (_, svg) = write_profile_svg(&dir);
    assert!(svg.contains("dotnet App.dll --urls http://0.0.0.0:5000 (PID 4242, 1 in its namespace)"), "title");
    assert!(svg.contains("10.1 s at 99 Hz (cpu-clock) · 1000 samples · 7 lost"), "subtitle");
    // Tooltips: µs of CPU (period weighting) and the share of the hot method.
    assert!(svg.contains("<title>int64 [App] App.Work::HotMethod (7,070,707 µs, 70.00%)</title>"), "hot tooltip");
    // Each kind in its own colour.
    for (kind, name) in [
        (Some(FrameKind::Jit), "int64 [App] App.Work::HotMethod"),
        (Some(FrameKind::Native), "start_thread"),
        (Some(FrameKind::Kernel), "ksys_write"),
        (Some(FrameKind::Unknown), "System.Private.CoreLib.dll+0x455d12"),
        (None, ".NET_ThreadPool"),
    ] {
        let (r, g, b) = frame_color(kind, name);
        let expected = format!("fill=\"rgb({r},{g},{b})\"");
        let at = svg.find(&format!("<title>{name} (")).unwrap_or_else(|| panic!("no frame {name}"));
        let rect = &svg[at..at + svg[at..].find("/>").unwrap()];
        assert!(rect.contains(&expected), "{name}: {rect}");
    }
    assert!(frame_color(Some(FrameKind::Jit), "x").1 > frame_color(Some(FrameKind::Jit), "x").0, "JIT is green");
    if std::env::var_os("PROFCPU_KEEP_SVG").is_none() {
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// Frame names and the command line come from the profiled process (a perf map, its argv): markup in them is
/// text in the SVG, never elements or attributes a browser would run (the SVG is opened from archives people share).
#[test]
fn markup_in_names_and_the_command_line_stays_text() {
    let evil = r#"</text></g><script>alert(1)</script><g onload="alert(2)">"#;
    let mut samples = profile();
    for s in samples.iter_mut().step_by(2) {
        let mut frames = s.frames.to_vec();
        frames.push(jit(&format!("void [App] {evil}[Optimized]"), 0x7f00_4000));
        s.frames = frames.into();
    }
    let folded = render_weighted(&samples, Weight::Period).profile.folded;
    let meta = Metadata { command_line: format!("dotnet {evil}"), comm: evil.into(), ..metadata() };
    let mut out = Vec::new();
    write_svg(&folded, &FlameOptions::for_profile(&meta, Weight::Period), &mut out).unwrap();
    let svg = String::from_utf8(out).unwrap();
    assert!(!svg.contains(evil) && !svg.contains("<script>alert") && !svg.contains("onload=\"alert"), "{svg}");
    assert_eq!(svg.matches("<script").count(), 1, "inferno's own script only");
    assert!(svg.contains("&lt;script&gt;alert(1)&lt;/script&gt;"), "the name is shown, escaped");
}

#[test]
fn chromium_renders_the_svg_and_its_search_finds_the_hot_method() {
    let dir = work_dir("svg-chromium");
    let (path, _) = write_profile_svg(&dir);
    let url = format!("file://{}?s=HotMethod", path.display());
    let started = Instant::now();

    let dom = chromium(&["--virtual-time-budget=2000", "--dump-dom"], &url, &dir.join("chromium-profile-1"));
    // inferno's script ran (it replaces the title placeholder text of the details line and the search button)...
    assert!(dom.contains("Reset Search"), "search did not run on load:\n{}", &dom[..dom.len().min(3000)]);
    // ...and highlighted the hot method's frames in the search colour, reporting the matched share.
    let matched = dom.split("id=\"matched\"").nth(1).expect("no matched element");
    let matched = &matched[matched.find('>').unwrap() + 1..];
    let matched = &matched[..matched.find('<').unwrap()];
    assert!(matched.contains("Matched: 70.0%"), "matched text: {matched:?}");
    let highlighted = dom.matches("fill=\"rgb(230,0,230)\"").count();
    assert!(highlighted >= 1, "no frame highlighted");
    let frames = dom.matches("<rect ").count();
    assert!(frames >= 10, "only {frames} frames rendered");

    // Zoom, restored from the URL the way a click records it (`?x=<fg:x>&y=<y>` of the clicked frame): the hot
    // method fills the view, its sibling is hidden.
    let svg = std::fs::read_to_string(&path).unwrap();
    let hot = &svg[svg.find("<title>int64 [App] App.Work::HotMethod").unwrap()..];
    let rect = &hot[..hot.find("/>").unwrap()];
    let attr = |name: &str| {
        let at = rect.find(&format!(" {name}=\"")).unwrap() + name.len() + 3;
        rect[at..at + rect[at..].find('"').unwrap()].to_string()
    };
    let zoom_url = format!("file://{}?x={}&y={}", path.display(), attr("fg:x"), attr("y"));
    let zoomed = chromium(&["--virtual-time-budget=2000", "--dump-dom"], &zoom_url, &dir.join("chromium-profile-zoom"));
    let group_of = |dom: &str, name: &str| {
        let at = dom.find(&format!("<title>{name} (")).unwrap_or_else(|| panic!("no {name} in the DOM"));
        let open = dom[..at].rfind("<g").unwrap();
        dom[open..at].to_string()
    };
    assert!(group_of(&zoomed, "void [App] App.Work::ColdMethod").contains("hide"), "sibling not hidden by zoom");
    assert!(group_of(&zoomed, "void [App] App.Server::Serve").contains("parent"), "ancestor not marked by zoom");
    assert!(!group_of(&zoomed, "int64 [App] App.Work::HotMethod").contains("hide"), "zoomed frame hidden");

    let screenshot = dir.join("flamegraph.png");
    chromium(
        &["--virtual-time-budget=2000", "--window-size=1200,500", &format!("--screenshot={}", screenshot.display())],
        &url,
        &dir.join("chromium-profile-2"),
    );
    let png = std::fs::read(&screenshot).expect("no screenshot written");
    assert!(png.starts_with(b"\x89PNG") && png.len() > 10_000, "screenshot is not a real image ({} bytes)", png.len());
    eprintln!("chromium checks took {:?}; screenshot {}", started.elapsed(), screenshot.display());
    if std::env::var_os("PROFCPU_KEEP_SVG").is_none() {
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
