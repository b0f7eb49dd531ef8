//! The host heap (Python-heap events, [`HOST_DEVICE`](crate::HOST_DEVICE)) as memory_viz
//! segments: **one segment per block**, allocated with the block and freed with it.
//!
//! memory_viz's "Allocator State History" replays the allocator backwards from the final
//! `segments` and needs every live block inside a segment at every point of the trace,
//! or it throws when an event is selected. The host allocators memtape hooks report
//! blocks only: pymalloc's arenas and pools and malloc's heap are never seen, so any
//! grouping of blocks into larger segments would be invented (and would change as
//! events fall out of the ring). A segment per block is exact instead: reserved memory
//! equals active memory, as it does for an allocator without a cache, and it stays
//! consistent when the ring lost the allocation of a block it later frees (that block
//! and its segment are live from the start of the trace until the free).
//!
//! The replay here decides, for each host event in order, which entries it becomes; the
//! writer runs it once to find the blocks live at the end (the final `segments`) and once
//! more while it writes the trace, so both always agree.

use rustc_hash::FxHashMap;

use crate::event::Event;

/// The size of a block's segment: its size, but never 0 (the viewer finds a block's
/// segment by `segment.addr <= addr < segment.addr + size`, so an empty one holds nothing).
pub(super) fn segment_size(block_size: u64) -> u64 {
    block_size.max(1)
}

/// What one host event becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum HostStep {
    /// `segment_alloc` + `alloc`. `replaces`: the alloc event of a block still live at
    /// the same address (its free was never recorded); it ends first, with
    /// `free_requested`, `free_completed` and `segment_free`.
    Alloc { replaces: Option<usize> },
    /// `free_requested`, `free_completed` and `segment_free` of a block of `size` bytes:
    /// the live block's size, or the event's own for a block allocated before the trace.
    Free { size: u64 },
    /// Nothing: a segment-only action reported on the host (no host allocator does).
    Skip,
}

/// Blocks live so far, by address: the index of their alloc event.
#[derive(Default)]
pub(super) struct HostReplay {
    live: FxHashMap<u64, usize>,
}

impl HostReplay {
    /// Applies `events[index]` (a host event), returning what it becomes.
    pub(super) fn step(&mut self, events: &[Event], index: usize) -> HostStep {
        let event = &events[index];
        if event.action.allocates_block() {
            HostStep::Alloc {
                replaces: self.live.insert(event.addr, index),
            }
        } else if event.action.frees_block() {
            let size = match self.live.remove(&event.addr) {
                Some(alloc) => events[alloc].size,
                None => event.size,
            };
            HostStep::Free { size }
        } else {
            HostStep::Skip
        }
    }

    /// The alloc events of the blocks live at the end, in address order.
    pub(super) fn live_at_end(self, events: &[Event]) -> Vec<usize> {
        let mut live: Vec<usize> = self.live.into_values().collect();
        live.sort_unstable_by_key(|&index| events[index].addr);
        live
    }
}
