//! A sorted table of non-overlapping address ranges with a value each: the lookup structure behind every symbol
//! source (ELF, perf map, kallsyms, captured tables).

use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Range<T> {
    pub start: u64,
    /// Exclusive.
    pub end: u64,
    pub value: T,
}

/// Ranges sorted by start, never overlapping, so a lookup is one binary search.
#[derive(Debug, Clone)]
pub struct RangeTable<T> {
    ranges: Vec<Range<T>>,
}

impl<T> Default for RangeTable<T> {
    fn default() -> Self {
        RangeTable { ranges: Vec::new() }
    }
}

impl<T> RangeTable<T> {
    /// Builds a table from ranges in any order. Where ranges overlap, the one with the lower start keeps the
    /// address space up to the next start (the way perf clips symbols); empty ranges are dropped.
    pub fn from_unsorted(mut ranges: Vec<Range<T>>) -> Self {
        ranges.retain(|r| r.end > r.start);
        ranges.sort_by_key(|r| r.start);
        for i in 1..ranges.len() {
            let next_start = ranges[i].start;
            let prev = &mut ranges[i - 1];
            if prev.end > next_start {
                prev.end = next_start;
            }
        }
        ranges.retain(|r| r.end > r.start);
        RangeTable { ranges }
    }

    pub fn lookup(&self, addr: u64) -> Option<&Range<T>> {
        let i = self.ranges.partition_point(|r| r.start <= addr);
        let r = self.ranges.get(i.checked_sub(1)?)?;
        (addr < r.end).then_some(r)
    }

    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Range<T>> {
        self.ranges.iter()
    }
}

/// Builds a [`RangeTable`] from ranges given in order, where a later range wins over the parts of earlier ranges it
/// overlaps (perf map semantics: a method re-JITted into reused memory replaces the old name there).
pub struct LaterWinsBuilder<T> {
    /// start -> (end, value); kept non-overlapping after every insert.
    map: BTreeMap<u64, (u64, T)>,
}

impl<T: Clone> Default for LaterWinsBuilder<T> {
    fn default() -> Self {
        LaterWinsBuilder { map: BTreeMap::new() }
    }
}

impl<T: Clone> LaterWinsBuilder<T> {
    pub fn insert(&mut self, start: u64, end: u64, value: T) {
        if end <= start {
            return;
        }
        // A range starting before `start` may reach into the new one: clip it, keeping any tail beyond `end`.
        if let Some((&s, (e, _))) = self.map.range(..start).next_back() {
            if *e > start {
                let (old_end, old_value) = self.map.remove(&s).expect("key just seen");
                self.map.insert(s, (start, old_value.clone()));
                if old_end > end {
                    self.map.insert(end, (old_end, old_value));
                }
            }
        }
        // Ranges starting inside the new one are replaced; a tail beyond `end` survives.
        let inside: Vec<u64> = self.map.range(start..end).map(|(&s, _)| s).collect();
        for s in inside {
            let (old_end, old_value) = self.map.remove(&s).expect("key just seen");
            if old_end > end {
                self.map.insert(end, (old_end, old_value));
            }
        }
        self.map.insert(start, (end, value));
    }

    pub fn build(self) -> RangeTable<T> {
        let ranges = self.map.into_iter().map(|(start, (end, value))| Range { start, end, value }).collect();
        RangeTable { ranges }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(t: &RangeTable<&'static str>) -> Vec<(u64, u64, &'static str)> {
        t.iter().map(|r| (r.start, r.end, r.value)).collect()
    }

    #[test]
    fn lookup_finds_the_containing_range_only() {
        let t = RangeTable::from_unsorted(vec![
            Range { start: 0x200, end: 0x300, value: "b" },
            Range { start: 0x100, end: 0x180, value: "a" },
        ]);
        assert_eq!(t.lookup(0x100).unwrap().value, "a");
        assert_eq!(t.lookup(0x17f).unwrap().value, "a");
        assert!(t.lookup(0x180).is_none());
        assert!(t.lookup(0xff).is_none());
        assert_eq!(t.lookup(0x2ff).unwrap().value, "b");
        assert!(t.lookup(0x300).is_none());
        assert!(t.lookup(u64::MAX).is_none());
    }

    #[test]
    fn overlapping_unsorted_ranges_are_clipped_at_the_next_start() {
        let t = RangeTable::from_unsorted(vec![
            Range { start: 0x100, end: 0x400, value: "outer" },
            Range { start: 0x200, end: 0x250, value: "inner" },
            Range { start: 0x500, end: 0x500, value: "empty" },
        ]);
        assert_eq!(names(&t), vec![(0x100, 0x200, "outer"), (0x200, 0x250, "inner")]);
    }

    #[test]
    fn later_ranges_win_where_they_overlap() {
        let mut b = LaterWinsBuilder::default();
        b.insert(0x100, 0x200, "old");
        b.insert(0x180, 0x190, "middle");
        b.insert(0x1f0, 0x220, "straddle");
        b.insert(0x300, 0x310, "x");
        b.insert(0x2f0, 0x400, "cover");
        assert_eq!(
            names(&b.build()),
            vec![
                (0x100, 0x180, "old"),
                (0x180, 0x190, "middle"),
                (0x190, 0x1f0, "old"),
                (0x1f0, 0x220, "straddle"),
                (0x2f0, 0x400, "cover"),
            ]
        );
    }

    #[test]
    fn same_range_twice_keeps_the_second() {
        let mut b = LaterWinsBuilder::default();
        b.insert(0x10, 0x20, "QuickJitted");
        b.insert(0x10, 0x20, "OptimizedTier1");
        assert_eq!(names(&b.build()), vec![(0x10, 0x20, "OptimizedTier1")]);
    }
}
