//! A self-contained, resolved view of recorded events: what every exporter writes from.

use rustc_hash::FxHashMap;

use crate::event::Event;
use crate::stack_table::StackId;

/// One resolved Python frame.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ResolvedFrame {
    /// `co_filename`.
    pub filename: String,
    /// `co_qualname` (3.11+) of the function.
    pub name: String,
    /// Line number (0 when unknown).
    pub line: u32,
}

/// A buffer a caching allocator still holds at the end of the recording: one segment
/// with one block, active or cached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentState {
    /// Device index (≥ 0).
    pub device: i32,
    /// Address of the buffer.
    pub addr: u64,
    /// Size of the buffer.
    pub size: u64,
    /// Bytes asked for when it was last handed out.
    pub requested_size: u64,
    /// Stream it was allocated on.
    pub stream: u64,
    /// Handed out (true) or sitting in the allocator's cache (false).
    pub active: bool,
    /// Where it was (last) handed out.
    pub stack: StackId,
    /// Op name id (0: none).
    pub op: u32,
}

/// Events with everything needed to write them out, independent of the live process.
#[derive(Clone, Debug, Default)]
pub struct MemorySnapshot {
    /// The events, oldest first.
    pub events: Vec<Event>,
    /// Frames of each stack used by `events` and `segments`, **innermost first**, at most
    /// the recording's frame limit. A stack missing here has no frames.
    pub stacks: FxHashMap<StackId, Vec<ResolvedFrame>>,
    /// Op names; index 0 is the empty name (no op).
    pub op_names: Vec<String>,
    /// Caching-allocator buffers live at the end, in address order per device.
    pub segments: Vec<SegmentState>,
}

impl MemorySnapshot {
    /// The frames of a stack, innermost first (empty for unknown stacks).
    pub fn frames(&self, stack: StackId) -> &[ResolvedFrame] {
        self.stacks.get(&stack).map_or(&[], Vec::as_slice)
    }

    /// The op name of an event, or None.
    pub fn op_name(&self, op: u32) -> Option<&str> {
        if op == 0 {
            return None;
        }
        self.op_names.get(op as usize).map(String::as_str)
    }
}
