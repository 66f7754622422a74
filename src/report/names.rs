//! How threads, events and frames are spelled in the outputs.
//!
//! A frame has two spellings:
//! - its **label**, printed in perf_script.out as `<label>+0x<offset> (<module>)`: the symbol, or
//!   `<module basename>+0x<offset>` when there is none (never a bare address);
//! - its **folded name(s)**, used in folded_stacks.out, the flame graph and the top table: the label put through the
//!   rules stackcollapse-perf applies (as inferno 0.12 implements them in `inferno::collapse::perf`), so that
//!   `inferno-collapse-perf perf_script.out` reproduces folded_stacks.out byte for byte. Those rules drop a top-level
//!   argument list (`App::Fib(int32)[OptimizedTier1]` → `App::Fib`), turn `;` into `:`, undo half-done Rust
//!   demangling, split Java-style `a->b` inlining into two frames (`b_[i]`), and drop frames whose name starts with
//!   `(`. Matching them exactly is what lets FlameScope-style pipelines and ours agree on the same file.
//!
//! Why an unnamed frame's label is `module+0x<offset>` and is printed with a second `+0x<frame offset>`: inferno
//! strips one trailing `+0x<hex>` from every symbol (perf's symbol offset). Printing
//! `System.Private.CoreLib.dll+0x455d12+0x0` makes it strip only the `+0x0` and keep the name we want.
//!
//! Text that would break a reader is rewritten once here and used by every output: control characters become `?`,
//! module paths lose spaces and parentheses (readers find the module as the last `(...)` word), and a thread name
//! that could be mistaken for a `PID/TID` field (a word after the first starting with a digit or `/`) gets `_` for
//! its spaces. A thread name with `;` gets `:` (it becomes the root frame of the folded stacks), a leading `#`
//! becomes `_` (inferno skips `#` lines as comments), a leading digit gets a `_` before it (PerfView reads it as
//! the PID), an empty name becomes `:<tid>` as perf prints it.

use crate::symbolize::Frame;
use std::borrow::Cow;

/// Whether the frame has a usable symbol (a blank one counts as none).
pub fn is_named(frame: &Frame) -> bool {
    // Asked for every frame of every sample: a symbol that starts with a visible ASCII character is the answer
    // without trimming it.
    frame.symbol().is_some_and(|s| s.as_bytes().first().is_some_and(u8::is_ascii_graphic) || !s.trim().is_empty())
}

/// The label of a frame: its trimmed symbol, or `<module basename>+0x<offset>` when it has none.
pub fn frame_label(frame: &Frame) -> Cow<'_, str> {
    match frame.symbol().map(str::trim) {
        Some(symbol) if !symbol.is_empty() => without_controls(symbol),
        _ => {
            let module = script_module(frame.module());
            Cow::Owned(format!("{}+{:#x}", basename(&module), frame.offset()))
        }
    }
}

/// A module as perf_script.out prints it inside `(...)`: no whitespace or parentheses (they would split the line
/// wrongly), no ` (deleted)` suffix, `[unknown]` when empty.
pub fn script_module(module: &str) -> Cow<'_, str> {
    let module = module.trim();
    let module = module.strip_suffix(" (deleted)").unwrap_or(module);
    if module.is_empty() {
        return Cow::Borrowed("[unknown]");
    }
    if !module.chars().any(|c| c.is_whitespace() || c.is_control() || c == '(' || c == ')') {
        return Cow::Borrowed(module);
    }
    Cow::Owned(
        module
            .chars()
            .map(|c| match c {
                c if c.is_control() => '?',
                c if c.is_whitespace() || c == '(' || c == ')' => '_',
                c => c,
            })
            .collect(),
    )
}

/// A thread name as perf_script.out prints it at the start of a sample (see the module documentation).
pub fn script_comm(comm: &str, tid: u32) -> Cow<'_, str> {
    let trimmed = comm.trim();
    if trimmed.is_empty() {
        return Cow::Owned(format!(":{tid}"));
    }
    let mut words = trimmed.split(' ').filter(|w| !w.is_empty());
    words.next();
    let looks_like_pid = words.any(|w| w.starts_with(|c: char| c.is_ascii_digit() || c == '/'));
    let starts_badly = trimmed.starts_with(|c: char| c == '#' || c.is_ascii_digit());
    let clean = !looks_like_pid && !starts_badly && !trimmed.contains(|c: char| c.is_control() || c == ';');
    if clean {
        return Cow::Borrowed(trimmed);
    }
    let mut out: String = trimmed
        .chars()
        .map(|c| match c {
            c if c.is_control() => '?',
            ';' => ':',
            ' ' if looks_like_pid => '_',
            c => c,
        })
        .collect();
    if out.starts_with('#') {
        out.replace_range(..1, "_");
    } else if out.starts_with(|c: char| c.is_ascii_digit()) {
        // PerfView takes a leading number for the PID and then fails on the whole file.
        out.insert(0, '_');
    }
    Cow::Owned(out)
}

/// An event name as perf_script.out prints it before its `:`.
pub fn script_event(event: &str) -> Cow<'_, str> {
    let event = event.trim();
    if event.is_empty() {
        return Cow::Borrowed("unknown");
    }
    if !event.contains(|c: char| c.is_whitespace() || c.is_control()) {
        return Cow::Borrowed(event);
    }
    Cow::Owned(event.chars().map(|c| if c.is_whitespace() || c.is_control() { '_' } else { c }).collect())
}

/// The part of a printed event name that stackcollapse-perf compares to pick the samples it folds (everything up
/// to the first `:`; `sched:sched_switch` counts as `sched`).
pub fn event_key(script_event: &str) -> &str {
    script_event.split(':').next().unwrap_or(script_event)
}

/// The root frame of a folded stack: the printed thread name with spaces as `_`.
pub fn folded_root(script_comm: &str) -> String {
    script_comm.replace(' ', "_")
}

/// Whether stackcollapse-perf applies its Java name tidying to this thread's frames (it does for every thread
/// whose name starts with `java`).
pub fn is_java_thread(folded_root: &str) -> bool {
    folded_root.starts_with("java")
}

/// Appends the folded names of one frame, root-most first: usually one name, none when the label starts with `(`,
/// several for `a->b` inlining. `module` is the printed module ([`script_module`]).
pub fn push_folded_names(label: &str, module: &str, java_thread: bool, out: &mut Vec<String>) {
    if label.starts_with('(') {
        // stackcollapse-perf takes a parenthesised frame for a process name and leaves it out.
        return;
    }
    let label = undo_rust_legacy_mangling(label);
    for (i, piece) in label.split("->").enumerate() {
        let mut name = if piece == "[unknown]" {
            if module == "[unknown]" {
                piece.to_string()
            } else {
                format!("[{}]", basename(module))
            }
        } else {
            piece.to_string()
        };
        name = without_argument_list(name);
        if java_thread && name.starts_with('L') && name.contains('/') {
            // Java type descriptors (`Lorg/foo/Bar;.run`) lose their `L`.
            name.remove(0);
        }
        if i > 0 && !name.contains("_[i]") {
            name.push_str("_[i]");
        }
        out.push(name);
    }
}

/// `;` separates frames in folded stacks, so it becomes `:`; then everything from the first top-level `(` is cut,
/// except Go receivers (`pkg.(*T).M`, a `(` right after `.`) and C++ `(anonymous namespace)`. `(` nested in
/// `<>`, `{}` or `[]` does not count, so templates, lambdas and .NET `[Assembly]` prefixes survive.
fn without_argument_list(name: String) -> String {
    let mut name = if name.contains(';') { name.replace(';', ":") } else { name };
    let mut depth: i64 = 0;
    let mut after_dot = false;
    let mut cut = None;
    for (idx, c) in name.char_indices() {
        match c {
            '<' | '{' | '[' => depth += 1,
            '>' | '}' | ']' | ')' => depth -= 1,
            '(' => {
                if depth == 0 && !after_dot && !name[idx..].starts_with("(anonymous namespace)") {
                    cut = Some(idx);
                    break;
                }
                depth += 1;
            }
            _ => {}
        }
        after_dot = c == '.';
    }
    if let Some(idx) = cut {
        name.truncate(idx);
    }
    name
}

/// Rust's legacy mangling escapes (`$LT$`, `$u20$`, `..` for `::`) as they appear when a tool printed a symbol
/// without fully demangling it; only applied when the name ends in a Rust hash (`h` + 16 hex digits).
const RUST_ESCAPES: [(&str, &str); 20] = [
    ("$SP$", "@"),
    ("$BP$", "*"),
    ("$RF$", "&"),
    ("$LT$", "<"),
    ("$GT$", ">"),
    ("$LP$", "("),
    ("$RP$", ")"),
    ("$C$", ","),
    ("$u7e$", "~"),
    ("$u20$", " "),
    ("$u27$", "'"),
    ("$u3d$", "="),
    ("$u5b$", "["),
    ("$u5d$", "]"),
    ("$u7b$", "{"),
    ("$u7d$", "}"),
    ("$u3b$", ";"),
    ("$u2b$", "+"),
    ("$u21$", "!"),
    ("$u22$", "\""),
];

fn undo_rust_legacy_mangling(name: &str) -> Cow<'_, str> {
    const HASH_LEN: usize = 17;
    let Some(split) = name.len().checked_sub(HASH_LEN) else { return Cow::Borrowed(name) };
    let (Some(mut rest), Some(hash)) = (name.get(..split), name.get(split..)) else { return Cow::Borrowed(name) };
    if !(hash.starts_with('h') && hash[1..].bytes().all(|b| b.is_ascii_hexdigit())) {
        return Cow::Borrowed(name);
    }
    rest = rest.strip_suffix("::").unwrap_or(rest);
    if rest.starts_with("_$") {
        rest = &rest[1..];
    }
    let mut out = String::with_capacity(rest.len());
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("..") {
            out.push_str("::");
            rest = after;
        } else if let Some(after) = rest.strip_prefix('.') {
            out.push('.');
            rest = after;
        } else if rest.starts_with('$') {
            match RUST_ESCAPES.iter().find(|(escape, _)| rest.starts_with(escape)) {
                Some((escape, plain)) => {
                    out.push_str(plain);
                    rest = &rest[escape.len()..];
                }
                None => {
                    out.push_str(rest);
                    break;
                }
            }
        } else {
            let end = rest.find(['$', '.']).unwrap_or(rest.len());
            out.push_str(&rest[..end]);
            rest = &rest[end..];
        }
    }
    Cow::Owned(out)
}

fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

fn without_controls(text: &str) -> Cow<'_, str> {
    if text.contains(char::is_control) {
        Cow::Owned(text.chars().map(|c| if c.is_control() { '?' } else { c }).collect())
    } else {
        Cow::Borrowed(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folded(label: &str, module: &str, java: bool) -> Vec<String> {
        let mut out = Vec::new();
        push_folded_names(label, module, java, &mut out);
        out
    }

    #[test]
    fn argument_lists_are_cut_at_top_level_only() {
        for (input, expected) in [
            ("int64 [App] App::Fib(int32)[OptimizedTier1]", "int64 [App] App::Fib"),
            (
                "std::vector<int, std::allocator<int> >::push_back(int const&)",
                "std::vector<int, std::allocator<int> >::push_back",
            ),
            ("std::function<void (int)>::operator()(int) const", "std::function<void (int)>::operator"),
            ("{lambda(int)#1}::operator()", "{lambda(int)#1}::operator"),
            ("net/http.(*Client).Do", "net/http.(*Client).Do"),
            ("(anonymous namespace)::worker()", "(anonymous namespace)::worker"),
            ("a;b(c;d)", "a:b"),
            (
                "stub<1> AllocateTemporaryEntryPoints<PRECODE_FIXUP>",
                "stub<1> AllocateTemporaryEntryPoints<PRECODE_FIXUP>",
            ),
        ] {
            assert_eq!(without_argument_list(input.to_string()), expected, "{input}");
        }
    }

    #[test]
    fn rust_hashes_and_escapes_are_undone() {
        assert_eq!(undo_rust_legacy_mangling("std::fs::read::h0123456789abcdef"), "std::fs::read");
        assert_eq!(
            undo_rust_legacy_mangling("_$LT$alloc..vec..Vec$LT$T$GT$$u20$as$u20$Drop$GT$::drop::h0123456789abcdef"),
            "<alloc::vec::Vec<T> as Drop>::drop"
        );
        assert_eq!(undo_rust_legacy_mangling("no_hash_here"), "no_hash_here");
        // Multi-byte text where the hash would start must not panic.
        assert_eq!(undo_rust_legacy_mangling("ééééééééééééé"), "ééééééééééééé");
    }

    #[test]
    fn inlining_parentheses_unknown_and_java() {
        assert_eq!(folded("a->b(int)->c", "/x", false), ["a", "b_[i]", "c_[i]"]);
        assert!(folded("(anonymous namespace)::f()", "/x", false).is_empty());
        assert_eq!(folded("[unknown]", "/usr/lib/libc.so.6", false), ["[libc.so.6]"]);
        assert_eq!(folded("[unknown]", "[unknown]", false), ["[unknown]"]);
        assert_eq!(folded("Lorg/x/Y;.run()V", "/tmp/perf-1.map", true), ["org/x/Y:.run"]);
        assert_eq!(folded("Lorg/x/Y;.run()V", "/tmp/perf-1.map", false), ["Lorg/x/Y:.run"]);
    }

    #[test]
    fn comm_spelling() {
        assert_eq!(script_comm(".NET ThreadPool", 5), ".NET ThreadPool");
        assert_eq!(script_comm("worker 2", 5), "worker_2");
        assert_eq!(script_comm("a /1", 5), "a_/1");
        assert_eq!(script_comm("", 5), ":5");
        assert_eq!(script_comm("#x;y\n", 5), "_x:y");
        assert_eq!(script_comm("  dotnet  ", 5), "dotnet");
        assert_eq!(script_comm("1stWorker", 5), "_1stWorker");
    }

    #[test]
    fn unnamed_frames_get_module_and_offset() {
        use crate::symbolize::FrameKind;
        let (addr, offset) = (0x7f00_0045_5d12, 0x455d12);
        let frame =
            Frame::new(addr, None, offset, "/usr/share/dotnet/System.Private.CoreLib.dll".into(), FrameKind::Unknown);
        assert_eq!(frame_label(&frame), "System.Private.CoreLib.dll+0x455d12");
        let blank =
            Frame::new(addr, Some(" ".into()), offset, "/memfd:doublemapper (deleted)".into(), FrameKind::Unknown);
        assert_eq!(frame_label(&blank), "memfd:doublemapper+0x455d12");
        assert_eq!(script_module("/a b/c(1)"), "/a_b/c_1_");
    }
}
