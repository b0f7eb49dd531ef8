//! The one event model every source feeds and every output reads.

use crate::stack_table::StackId;

/// What happened to a block of memory.
///
/// `Alloc`/`Free` come from the Python heap (PEP 445 hooks). The other seven are the
/// caching-allocator actions frameworks report (the MLX prototype's names):
/// active memory is `alloc`/`free_completed`, reserved memory is
/// `segment_alloc`/`segment_free`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Action {
    /// A Python-heap block was allocated.
    Alloc = 0,
    /// A Python-heap block was freed.
    Free = 1,
    /// A new buffer was taken from the OS/device and handed out (segment + block).
    AllocNew = 2,
    /// A cached buffer was handed out again (block only).
    AllocReuse = 3,
    /// Foreign memory was wrapped without a copy (segment + block).
    AllocMakeBuffer = 4,
    /// An active buffer went back to the cache (block freed, segment kept).
    FreeActiveToCache = 5,
    /// An active buffer went straight back to the OS/device (block and segment freed).
    FreeActiveToOs = 6,
    /// A wrapped foreign buffer was released (block and segment freed).
    Release = 7,
    /// A cached buffer was given back to the OS/device (segment freed).
    FreeCacheToOs = 8,
}

impl Action {
    /// Every action, in code order.
    pub const ALL: [Action; 9] = [
        Action::Alloc,
        Action::Free,
        Action::AllocNew,
        Action::AllocReuse,
        Action::AllocMakeBuffer,
        Action::FreeActiveToCache,
        Action::FreeActiveToOs,
        Action::Release,
        Action::FreeCacheToOs,
    ];

    /// The name users and files see.
    pub fn name(self) -> &'static str {
        match self {
            Action::Alloc => "alloc",
            Action::Free => "free",
            Action::AllocNew => "AllocNew",
            Action::AllocReuse => "AllocReuse",
            Action::AllocMakeBuffer => "AllocMakeBuffer",
            Action::FreeActiveToCache => "FreeActiveToCache",
            Action::FreeActiveToOs => "FreeActiveToOS",
            Action::Release => "Release",
            Action::FreeCacheToOs => "FreeCacheToOS",
        }
    }

    /// The action named `name` (as [`Action::name`] spells it).
    pub fn from_name(name: &str) -> Option<Action> {
        Action::ALL.into_iter().find(|a| a.name() == name)
    }

    /// The action with code `code` (its `repr(u8)` value).
    pub fn from_code(code: u8) -> Option<Action> {
        Action::ALL.get(usize::from(code)).copied()
    }

    /// True for actions that make a block active.
    pub fn allocates_block(self) -> bool {
        matches!(
            self,
            Action::Alloc | Action::AllocNew | Action::AllocReuse | Action::AllocMakeBuffer
        )
    }

    /// True for actions that end an active block.
    pub fn frees_block(self) -> bool {
        matches!(
            self,
            Action::Free | Action::FreeActiveToCache | Action::FreeActiveToOs | Action::Release
        )
    }

    /// True for actions that reserve a segment.
    pub fn allocates_segment(self) -> bool {
        matches!(self, Action::AllocNew | Action::AllocMakeBuffer)
    }

    /// True for actions that give a segment back.
    pub fn frees_segment(self) -> bool {
        matches!(
            self,
            Action::FreeActiveToOs | Action::Release | Action::FreeCacheToOs
        )
    }

    /// True for the Python heap's own actions.
    pub fn is_python_heap(self) -> bool {
        matches!(self, Action::Alloc | Action::Free)
    }
}

/// Where an event came from, for filtering.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// The Python allocators (PEP 445).
    PythonHeap,
    /// A framework or allocator reporting through the framework API.
    Framework,
}

impl Action {
    /// The source that reports this action.
    pub fn source(self) -> Source {
        if self.is_python_heap() {
            Source::PythonHeap
        } else {
            Source::Framework
        }
    }
}

/// The device of Python-heap events.
pub const HOST_DEVICE: i32 = -1;

/// One memory event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    /// What happened.
    pub action: Action,
    /// Block address.
    pub addr: u64,
    /// Size in bytes (for frees: the size of the freed block when known, else 0).
    pub size: u64,
    /// Bytes the caller asked for (≤ `size` for caching allocators; = `size` otherwise).
    pub requested_size: u64,
    /// Device index; [`HOST_DEVICE`] for the Python heap.
    pub device: i32,
    /// Stream (0: the default stream).
    pub stream: u64,
    /// Small per-process thread number (see the recorder's thread table).
    pub thread: u32,
    /// Nanoseconds since the Unix epoch.
    pub time_ns: u64,
    /// The stack the event is attributed to (the op context's, or where it happened).
    pub stack: StackId,
    /// Interned op name; 0 when the event had no op context.
    pub op: u32,
}
