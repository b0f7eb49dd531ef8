//! A hint to the cache: start loading a line that a store will soon need.

/// How many pushes ahead the event ring's slot is loaded: 8 slots of 32 bytes, four cache
/// lines before the store. Measured in section 38 of benchmarks/RESULTS.md; 16 did not help.
pub(crate) const RING_AHEAD: usize = 8;

/// How many events ahead a staged batch's slot is loaded ([`crate::record::event_stage`]):
/// 48-byte slots, six cache lines before the store.
pub(crate) const STAGE_AHEAD: usize = 8;

/// Starts loading the cache line at `addr`, which a store will soon need.
#[inline(always)]
pub(crate) fn prefetch(addr: *const u8) {
    crate::arch::prefetch_write(addr);
}
