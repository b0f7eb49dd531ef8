//! A hint to the cache: start loading a line that a store will soon need.

/// How many pushes ahead the event ring's slot is loaded: 8 slots of 32 bytes, four cache
/// lines before the store. Measured in section 38 of benchmarks/RESULTS.md; 16 did not help.
pub(crate) const RING_AHEAD: usize = 8;

/// Starts loading the cache line at `addr`; nothing on targets without the instruction.
#[inline(always)]
pub(crate) fn prefetch(addr: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint: it never faults and changes no memory, whatever the
    // address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(addr.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = addr;
}
