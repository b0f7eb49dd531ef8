//! memtape's pure-Rust core: it knows nothing of CPython.
//!
//! - [`StackTable`] interns call stacks as a trie of `(parent, code, instruction offset)`,
//!   so a whole traceback is one `u32`.
//! - [`LiveTable`] maps live blocks `(domain, address) -> (size, stack)` inline, with
//!   current/peak accounting.
//! - [`TraceSet`] is a snapshot of traces with resolved frames, and computes the
//!   tracemalloc-style statistics on it.
#![forbid(unsafe_code)]

mod address_table;
pub mod allocator_state;
pub mod cache_mirror;
pub mod capture;
mod chunk_index;
mod chunked_table;
pub mod event;
pub mod event_ring;
mod key_hash;
mod live_entry;
pub mod live_table;
pub mod memory_snapshot;
pub mod memory_source;
pub mod mmap_ranges;
pub mod report;
mod ring_entry;
pub mod stack_table;
pub mod tick_scale;
pub mod torch_snapshot;
pub mod trace_set;

pub use allocator_state::{AllocatorError, AllocatorReport, AllocatorState, Applied};
pub use cache_mirror::{CacheMirror, CachedBuffer};
pub use event::{Action, Event, Source, HOST_DEVICE};
pub use event_ring::EventRing;
pub use live_table::{LiveEntry, LiveTable, TableFull};
pub use memory_snapshot::{MemorySnapshot, ResolvedFrame, SegmentState};
pub use memory_source::{
    MemorySource, SourceSplit, MLX_DOMAIN, NATIVE_DEVICE, NATIVE_DOMAIN, NUMPY_DOMAIN,
    PYTHON_DOMAIN,
};
pub use mmap_ranges::{MappedPiece, MmapRanges, RangeChange};
pub use stack_table::{
    native_frame_code, native_frame_ip, StackId, StackNode, StackTable, EMPTY_STACK,
    NATIVE_FRAME_BIT,
};
pub use tick_scale::{ClockAnchor, TickScale};
pub use torch_snapshot::{PieceSink, TorchSnapshotStats, TorchSnapshotWriter};
pub use trace_set::{GroupBy, GroupStat, StatsError, TraceRecord, TraceSet, TraceSetBuilder};
