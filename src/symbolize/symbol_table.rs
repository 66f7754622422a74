//! Named ranges of a file (ELF symbols, a capture's saved tables) whose names all live in one string: a library has
//! tens of thousands of symbols and a profile hits a few hundred, so a table costs one allocation for every name,
//! and a name is turned into what a frame shows (demangled, capped) the first time a lookup finds it.

use super::demangle::{demangle, MAX_MANGLED_LEN};
use super::name_limit;
use super::ranges::{Range, RangeTable};
use std::sync::{Arc, OnceLock};

#[derive(Debug, Default)]
pub struct SymbolTable {
    ranges: RangeTable<NameRef>,
    names: Box<str>,
    /// Whether names are mangled (an ELF file's) or already as shown (a capture's).
    mangled: bool,
}

#[derive(Debug)]
struct NameRef {
    at: u32,
    len: u32,
    shown: OnceLock<Arc<str>>,
}

impl SymbolTable {
    /// The range holding `offset` and its name as shown.
    pub fn lookup(&self, offset: u64) -> Option<(u64, u64, Arc<str>)> {
        let r = self.ranges.lookup(offset)?;
        let shown = r.value.shown.get_or_init(|| {
            let raw = self.names.get(r.value.at as usize..(r.value.at + r.value.len) as usize).unwrap_or_default();
            match self.mangled && raw.len() <= MAX_MANGLED_LEN {
                // A demangled name can be longer than the mangled one (templates spelled out).
                true => name_limit::cap_arc(&demangle(raw).unwrap_or_else(|| raw.to_string())),
                false => name_limit::cap_arc(raw),
            }
        });
        Some((r.start, r.end, shown.clone()))
    }

    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Every range with its name as shown, in address order (each name is made as for a lookup).
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64, Arc<str>)> + '_ {
        self.ranges.iter().filter_map(|r| self.lookup(r.start))
    }
}

/// Collects a [`SymbolTable`]'s ranges.
pub struct SymbolTableBuilder {
    names: String,
    ranges: Vec<Range<NameRef>>,
    mangled: bool,
}

impl SymbolTableBuilder {
    /// For names as a file spells them (`mangled`: demangled when shown) or as they are to be shown.
    pub fn new(mangled: bool) -> Self {
        SymbolTableBuilder { names: String::new(), ranges: Vec::new(), mangled }
    }

    pub fn push(&mut self, start: u64, end: u64, name: &str) {
        // Offsets into one string are 32-bit: a table never holds 4 GB of names (files are capped far below).
        let (Ok(at), Ok(len)) = (u32::try_from(self.names.len()), u32::try_from(name.len())) else { return };
        if at.checked_add(len).is_none() {
            return;
        }
        self.names.push_str(name);
        self.ranges.push(Range { start, end, value: NameRef { at, len, shown: OnceLock::new() } });
    }

    /// The table; where ranges overlap, as [`RangeTable::from_unsorted`] resolves it.
    pub fn build(self) -> SymbolTable {
        SymbolTable {
            ranges: RangeTable::from_unsorted(self.ranges),
            names: self.names.into_boxed_str(),
            mangled: self.mangled,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_shown_demangled_and_capped_once_found() {
        let mut b = SymbolTableBuilder::new(true);
        b.push(0x100, 0x200, "_ZN3WKS7gc_heap18mark_object_simpleEPPh");
        b.push(0x200, 0x300, "memcpy");
        b.push(0x300, 0x400, &"x".repeat(100_000));
        b.push(0x400, 0x500, "_Zzzz");
        let t = b.build();
        assert_eq!(t.len(), 4);
        assert_eq!(t.lookup(0x150).unwrap(), (0x100, 0x200, Arc::from("WKS::gc_heap::mark_object_simple")));
        assert_eq!(t.lookup(0x2ff).unwrap().2.as_ref(), "memcpy");
        assert!(t.lookup(0x300).unwrap().2.len() <= name_limit::MAX_NAME_BYTES);
        assert_eq!(t.lookup(0x400).unwrap().2.as_ref(), "_Zzzz");
        assert!(t.lookup(0x500).is_none() && t.lookup(0xff).is_none());
        let mut plain = SymbolTableBuilder::new(false);
        plain.push(0, 10, "_ZN3WKS7gc_heap18mark_object_simpleEPPh");
        assert_eq!(plain.build().lookup(5).unwrap().2.as_ref(), "_ZN3WKS7gc_heap18mark_object_simpleEPPh");
    }
}
