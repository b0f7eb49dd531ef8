//! What the recorder keeps of native memory (under its lock), and the switch every
//! native hook checks first. The hooks that feed it live in [`crate::native`].

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use memtape_core::{LiveTable, MmapRanges};

/// Sinks that follow native memory (a bit each).
pub(crate) const SINK_CAPTURE: u8 = 1;
pub(crate) const SINK_EVENTS: u8 = 2;
pub(crate) const SINK_TRACEMALLOC: u8 = 4;

/// True while slots point at our hooks and something follows native memory: checked
/// first by every hook.
pub(crate) static ACTIVE: AtomicBool = AtomicBool::new(false);

/// Native calls that arrived while their thread held the recorder (a signal handler
/// that allocates, interrupting memtape's own code), or that waited past the hooks'
/// patience for another thread's hold (a handler that interrupted libc's allocator, see
/// `native_record::lock`): passed through unrecorded. Atomic, since it is counted exactly
/// when the recorder cannot be locked.
pub(crate) static REENTERED: AtomicU64 = AtomicU64::new(0);

/// Native calls passed through unrecorded because their thread was inside the recorder
/// (see [`REENTERED`]).
pub(crate) fn reentered() -> u64 {
    REENTERED.load(Ordering::Relaxed)
}

/// Native memory as the recorder keeps it (inside the recorder, under its lock).
#[derive(Default)]
pub(crate) struct NativeState {
    /// Which sinks follow native memory ([`SINK_CAPTURE`] ...).
    pub(crate) sinks: u8,
    /// Live native blocks and mapped pieces, in `NATIVE_DOMAIN`.
    pub(crate) live: LiveTable,
    /// Live anonymous mappings.
    pub(crate) ranges: MmapRanges,
    /// Frees, munmaps and mremaps of memory we never saw allocated (made before tracing
    /// started, or by an object we did not patch): ignored, only counted.
    pub(crate) unknown_frees: u64,
}

impl NativeState {
    pub(crate) fn clear(&mut self) {
        self.live.clear();
        self.ranges.clear();
        self.unknown_frees = 0;
        REENTERED.store(0, Ordering::Relaxed);
    }
}
