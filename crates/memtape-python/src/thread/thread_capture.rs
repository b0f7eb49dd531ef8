//! A thread's stack-capture cache: the frames (Python, then native) of its previous
//! capture and their stack ids, kept in the thread's [`HookThread`] so that a hook reaches
//! it with the same thread-local lookup as its mode. [`crate::record::capture`] fills it.
//!
//! [`HookThread`]: super::hook_mode::HookThread

use memtape_core::{StackId, EMPTY_STACK};

use crate::cpython::frames::{self, ChainFrame, InnermostFrame, RawFrame};

/// Room for the native frames of one capture: as many as the unwinder returns (its
/// `MAX_NATIVE_FRAMES`; [`crate::record::capture`] hands this buffer to it, so the two
/// cannot differ without a type error).
pub(crate) const NATIVE_FRAMES: usize = 64;

/// Room for the eval-loop frames one interleaved capture splits (the unwinder's
/// `MAX_CUTS`; checked by type the same way).
pub(crate) const CUTS: usize = 16;

/// One thread's capture cache (lives in the thread's [`HookThread`]).
pub(crate) struct ThreadCapture {
    /// Scratch: the frames just walked, innermost first.
    pub(crate) walked: Vec<RawFrame>,
    /// The previous capture's frames, outermost first, and the stack id ending at each.
    pub(crate) frames: Vec<RawFrame>,
    pub(crate) ids: Vec<StackId>,
    /// The recorder generation the ids belong to.
    pub(crate) generation: u64,
    /// What the last walk found (see [`frames::Walk`]).
    pub(crate) outcome: frames::Walk,
    /// The physical frame chain behind `frames` (outermost first), for the next walk to
    /// verify instead of following it pointer by pointer.
    pub(crate) chain: Vec<ChainFrame>,
    /// Scratch: the physical frames the walk just went through, innermost first.
    pub(crate) fresh: Vec<ChainFrame>,
    /// The innermost physical frame of the stack `frames` holds, when that stack was
    /// interned completely and `chain` ends at this frame's caller: a walk that finds the
    /// same frame there, unchanged, with the chain unchanged, has the same stack.
    pub(crate) last_innermost: Option<InnermostFrame>,
    /// Scratch: what the last walk found from `last_innermost` alone: the stack of
    /// `frames`, that stack with its innermost frame moved on, or neither (it walked).
    pub(crate) found: frames::Innermost,
    /// Scratch: the native frames just unwound (innermost first), when native stacks are
    /// on: they continue the Python stack.
    pub(crate) native: [u64; NATIVE_FRAMES],
    pub(crate) native_len: usize,
    /// Scratch, when C code called back into Python: how many of `native`'s frames lie
    /// inside each eval-loop frame (innermost first), and, in `ends`, how many of
    /// `walked`'s frames lie inside the end of each interpreter activation (see
    /// `intern_interleaved` in [`crate::record::capture`]).
    pub(crate) cut: [u8; CUTS],
    pub(crate) cuts: usize,
    pub(crate) ends: Vec<usize>,
    /// The previous native capture, outermost first, with the stack id ending at each
    /// frame and the Python stack it continued: its unchanged outer part is reused.
    pub(crate) prev_native: [u64; NATIVE_FRAMES],
    pub(crate) prev_native_ids: [StackId; NATIVE_FRAMES],
    pub(crate) prev_native_len: usize,
    pub(crate) prev_native_base: StackId,
    pub(crate) prev_native_generation: u64,
}

impl ThreadCapture {
    /// An empty cache.
    pub(crate) const EMPTY: ThreadCapture = ThreadCapture {
        walked: Vec::new(),
        frames: Vec::new(),
        ids: Vec::new(),
        generation: u64::MAX,
        outcome: frames::Walk {
            same: None,
            reused: None,
            innermost: None,
        },
        chain: Vec::new(),
        fresh: Vec::new(),
        last_innermost: None,
        found: frames::Innermost::Changed,
        native: [0; NATIVE_FRAMES],
        native_len: 0,
        cut: [0; CUTS],
        cuts: 0,
        ends: Vec::new(),
        prev_native: [0; NATIVE_FRAMES],
        prev_native_ids: [EMPTY_STACK; NATIVE_FRAMES],
        prev_native_len: 0,
        prev_native_base: EMPTY_STACK,
        prev_native_generation: u64::MAX,
    };
}
