//! Method patterns: which named code a `-method` pattern means.
//!
//! A name is matched in the two spellings a user may have in mind: the full name as profcpu names frames (without
//! a .NET tier tag: `int64 [App] MyApp.Books::Reconcile(int32)`) and the qualified name inside it
//! (`MyApp.Books::Reconcile`; for a native function the symbol itself). A pattern that equals a qualified or full
//! name means exactly the methods so named; otherwise a pattern is a substring of the full name, or, with glob
//! characters (`*`, `?`, `[…]`), a glob that matches one of the two spellings whole.

use std::cmp::Reverse;

/// How many methods one run probes at most: more is a pattern that says too little.
pub const MAX_METHODS: usize = 100;

/// A method name in its two spellings.
pub struct Name<'a> {
    pub full: &'a str,
    pub qualified: &'a str,
}

impl<'a> Name<'a> {
    /// Splits a name without its tier tag: the qualified name is what lies between a .NET name's `[Assembly] ` and
    /// its parameter list, else the whole name.
    pub fn of(full: &'a str) -> Name<'a> {
        let qualified = match (full.find("] "), full.find("::")) {
            (Some(assembly_end), Some(sep)) if assembly_end < sep => {
                let rest = &full[assembly_end + 2..];
                rest.split_once('(').map_or(rest, |(q, _)| q)
            }
            _ => full,
        };
        Name { full, qualified }
    }
}

/// The tier tag at the end of a .NET name (`[QuickJitted]`, `[OptimizedTier1]`, `[PreJIT]`), split off: `(name,
/// Some(tier))`. Names without one come back whole.
pub fn split_tier(name: &str) -> (&str, Option<&str>) {
    if let Some(open) = name.strip_suffix(']').and_then(|n| n.rfind('[')) {
        let tier = &name[open + 1..name.len() - 1];
        if !tier.is_empty() && tier.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
            return (&name[..open], Some(tier));
        }
    }
    (name, None)
}

/// How a pattern matched a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Match {
    Exact,
    Partial,
}

/// Whether `pattern` means `name`, and how.
pub fn matches(pattern: &str, name: &Name) -> Option<Match> {
    if pattern == name.qualified || pattern == name.full {
        return Some(Match::Exact);
    }
    // Brackets are also part of names (`uint8[]`): a pattern found as it is matches as a substring.
    let hit = name.full.contains(pattern)
        || (is_glob(pattern)
            && (glob(pattern.as_bytes(), name.qualified.as_bytes()) || glob(pattern.as_bytes(), name.full.as_bytes())));
    hit.then_some(Match::Partial)
}

fn is_glob(pattern: &str) -> bool {
    pattern.contains(['*', '?', '['])
}

/// Shell-style glob: `*` any run, `?` one character (byte), `[abc]`/`[a-z]`/`[!x]` one of a set.
fn glob(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    // Where the last `*` was, and the text position it currently covers up to.
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, t));
                p += 1;
                continue;
            }
            Some(b'?') => {
                p += 1;
                t += 1;
                continue;
            }
            Some(b'[') => {
                if let Some((matched, next)) = class(&pattern[p..], text[t]) {
                    if matched {
                        p += next;
                        t += 1;
                        continue;
                    }
                } else if text[t] == b'[' {
                    p += 1;
                    t += 1;
                    continue;
                }
            }
            Some(&c) if c == text[t] => {
                p += 1;
                t += 1;
                continue;
            }
            _ => {}
        }
        match star {
            Some((sp, st)) => {
                p = sp + 1;
                t = st + 1;
                star = Some((sp, st + 1));
            }
            None => return false,
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// A `[…]` class at the start of `pattern`: whether `c` is in it, and the class's length; `None` when the class is
/// not closed (then `[` is literal).
fn class(pattern: &[u8], c: u8) -> Option<(bool, usize)> {
    let mut i = 1;
    let negate = matches!(pattern.get(i), Some(b'!' | b'^'));
    if negate {
        i += 1;
    }
    let mut found = false;
    let first = i;
    while let Some(&b) = pattern.get(i) {
        if b == b']' && i > first {
            return Some((found != negate, i + 1));
        }
        if pattern.get(i + 1) == Some(&b'-') && pattern.get(i + 2).is_some_and(|&e| e != b']') {
            found |= (b..=pattern[i + 2]).contains(&c);
            i += 3;
        } else {
            found |= b == c;
            i += 1;
        }
    }
    None
}

/// Up to `n` names closest to what `pattern` seems to mean, best first: names containing it in any case, then the
/// smallest edit distance between it and the qualified name (or that name's last `::` part).
pub fn closest<'a>(pattern: &str, names: impl Iterator<Item = &'a str>, n: usize) -> Vec<&'a str> {
    let wanted: String = pattern.chars().filter(|c| !matches!(c, '*' | '?' | '[' | ']')).collect::<String>();
    let wanted = wanted.to_lowercase();
    let wanted_member = wanted.rsplit("::").next().unwrap_or(&wanted).to_string();
    let mut scored: Vec<(usize, &str)> = names
        .map(|full| {
            let name = Name::of(full);
            let qualified = name.qualified.to_lowercase();
            let member = qualified.rsplit("::").next().unwrap_or(&qualified);
            let score = if !wanted.is_empty() && qualified.contains(&wanted) {
                0
            } else {
                1 + edit_distance(&wanted, &qualified).min(edit_distance(&wanted_member, member))
            };
            (score, full)
        })
        .collect();
    scored.sort_by_key(|&(score, name)| (score, name.len(), Reverse(name.contains("::")), name));
    let mut out: Vec<&str> = Vec::new();
    for (_, name) in scored {
        if !out.contains(&name) {
            out.push(name);
        }
        if out.len() == n {
            break;
        }
    }
    out
}

/// Levenshtein distance (on characters), bounded in cost by the short names it is used on.
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().take(256).collect(), b.chars().take(256).collect());
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (diagonal + usize::from(ca != cb)).min(row[j] + 1).min(above + 1);
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    const RECONCILE: &str = "int64 [App] MyApp.Books::Reconcile(int32)";

    #[test]
    fn names_split_into_their_spellings() {
        let n = Name::of(RECONCILE);
        assert_eq!(n.qualified, "MyApp.Books::Reconcile");
        assert_eq!(Name::of("instance void [App] Ledger::Post()").qualified, "Ledger::Post");
        assert_eq!(Name::of("count_me").qualified, "count_me");
        assert_eq!(Name::of("std::vector<int>::push_back").qualified, "std::vector<int>::push_back");
        assert_eq!(
            split_tier("int64 [App] B::R(int32)[OptimizedTier1]"),
            ("int64 [App] B::R(int32)", Some("OptimizedTier1"))
        );
        assert_eq!(split_tier("x [App] B::R()[PreJit-cold]"), ("x [App] B::R()", Some("PreJit-cold")));
        assert_eq!(split_tier("int32[] [App] B::Arr()"), ("int32[] [App] B::Arr()", None));
        assert_eq!(split_tier("f(int[2])"), ("f(int[2])", None));
    }

    #[test]
    fn exact_substring_and_glob() {
        let n = Name::of(RECONCILE);
        assert_eq!(matches("MyApp.Books::Reconcile", &n), Some(Match::Exact));
        assert_eq!(matches(RECONCILE, &n), Some(Match::Exact));
        assert_eq!(matches("Books::Recon", &n), Some(Match::Partial));
        assert_eq!(matches("*Books::Reconcile", &n), Some(Match::Partial));
        assert_eq!(matches("*Books::Reconcile(int32)", &n), Some(Match::Partial));
        assert_eq!(matches("*Books::Rec?ncile", &n), Some(Match::Partial));
        assert_eq!(matches("My[A-Z]pp.*::Reconcile", &n), Some(Match::Partial));
        assert_eq!(matches("*Books::Reconcile2", &n), None);
        assert_eq!(matches("books::reconcile", &n), None);
        assert_eq!(matches("[!M]*::Reconcile", &n), None);
        let arrays = Name::of("string [System.Private.CoreLib] System.Convert::ToBase64String(uint8[])");
        assert_eq!(matches("System.Convert::ToBase64String(uint8[])", &arrays), Some(Match::Partial));
    }

    #[test]
    fn glob_edge_cases() {
        assert!(glob(b"*", b""));
        assert!(glob(b"a*b*c", b"axxbyyc"));
        assert!(!glob(b"a*b*c", b"axxbyy"));
        assert!(glob(b"[ab", b"[ab"));
        assert!(glob(b"*[0-9]", b"x7"));
    }

    #[test]
    fn closest_names_rank_typos_and_case() {
        let names = [RECONCILE, "int64 [App] MyApp.Books::Audit(int32)", "void [App] MyApp.Ledger::Post()", "malloc"];
        assert_eq!(closest("Books::Reconcil", names.iter().copied(), 2)[0], RECONCILE);
        assert_eq!(closest("books::reconcile", names.iter().copied(), 1), [RECONCILE]);
        assert_eq!(closest("Ledger::Pst", names.iter().copied(), 1), ["void [App] MyApp.Ledger::Post()"]);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
