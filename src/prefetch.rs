//! Hints to the CPU to fetch memory into its caches before it is read.
//!
//! Data that one thread built and another reads (a batch of named samples), or that lies far apart in a large file
//! (the records of a recording, in time order), is seldom in the reader's caches: asking for it a few items ahead
//! overlaps the waits instead of taking them one after another.

/// The cache line holding the byte at `address`. Any address will do: a prefetch reads nothing the program sees
/// and never faults.
pub fn at(address: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint, valid for any address (see above).
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(address.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = address;
}

/// Every cache line of `items`.
pub fn all<T>(items: &[T]) {
    let start = items.as_ptr().cast::<u8>();
    for offset in (0..std::mem::size_of_val(items)).step_by(64) {
        at(start.wrapping_add(offset));
    }
}
