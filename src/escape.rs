//! Text from outside profcpu — a frame name from a perf map, an entry name from an archive, a process's command
//! name, a path — ends up in messages on a terminal, and a terminal obeys the control characters in what it
//! prints: `ESC ] 0 ; … BEL` retitles the window, other sequences move the cursor, erase or rewrite what was shown.
//! Every message is passed through here where it is printed, so such characters show as escapes (`\x1b`,
//! `\u{9b}`) instead. Everything else — ordinary UTF-8 in any script — is left alone.

use std::borrow::Cow;
use std::fmt::Write;

/// A message of one line: every control character is escaped, line breaks too (a name with a newline must not
/// start a line that looks like profcpu's own).
pub fn line(text: &str) -> Cow<'_, str> {
    escape(text, false)
}

/// A message of several lines (a table): like [`line`], but line breaks stay.
pub fn lines(text: &str) -> Cow<'_, str> {
    escape(text, true)
}

fn escape(text: &str, keep_newlines: bool) -> Cow<'_, str> {
    let needs_escape = |c: char| c.is_control() && c != '\t' && !(keep_newlines && c == '\n');
    if !text.contains(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if !needs_escape(c) {
            out.push(c);
        } else if (c as u32) < 0x80 {
            // C0 controls and DEL, as C and Rust write them.
            let _ = write!(out, "\\x{:02x}", c as u32);
        } else {
            // C1 controls (U+0080–U+009F): some terminals read U+009B as CSI.
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_shown_not_obeyed() {
        assert_eq!(line("entry \"\x1b]0;PWN\x07\""), "entry \"\\x1b]0;PWN\\x07\"");
        assert_eq!(line("a\nb\rc\u{7f}d\u{9b}2J"), "a\\x0ab\\x0dc\\x7fd\\u{9b}2J");
        assert_eq!(lines("table\n\x1b[2Jrow\n"), "table\n\\x1b[2Jrow\n");
    }

    #[test]
    fn ordinary_text_is_left_alone() {
        for text in ["plain", "int64 [App] Ns.Type::Method(int32)[OptimizedTier1]", "Größe 名前 имя", "tab\there"]
        {
            assert!(matches!(line(text), Cow::Borrowed(t) if t == text));
        }
    }
}
