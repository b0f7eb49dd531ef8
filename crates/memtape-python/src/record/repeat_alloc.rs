//! The commonest allocations, recorded without the general capture: a Python-heap block
//! allocated by a thread whose stack is the one of its last capture (C code under one
//! Python line allocating again), or that stack with its innermost frame at another
//! instruction (the next line of the same function), while only tracemalloc or a capture
//! file follows the heap (no events, no native stacks).
//!
//! It does what [`crate::record::capture::walk`], `intern_walked` and
//! [`crate::intercept::hooks::record_alloc`] do on that path, in one piece: the same checks
//! of the innermost frame and its callers, the last stack id, the live table and the
//! capture sink. Anything else (a changed stack, another recorder generation, a code object
//! not referenced yet, events, native stacks, a realloc) is left to the general path, so
//! both always record the same thing.

use std::sync::atomic::Ordering;

use memtape_core::EMPTY_STACK;
use pyo3::ffi;

use crate::cpython::frames;
use crate::native::unwind::native_stacks;
use crate::record::recorder::{GENERATION, HEAP_EVENTS, RECORDER};
use crate::thread::hook_mode::HookThread;

/// Records the new block `block` of `size` bytes in the Python domain when the calling
/// thread's stack is the one it captured last, or that one with its innermost frame moved
/// on; false when that is not known to be so, and nothing was recorded (the caller then
/// takes the general path).
///
/// `thread` must be the calling thread's hook state, and `tstate` its thread state with
/// the GIL held, or null (then false).
#[inline(always)]
pub(crate) fn record_repeat_alloc(
    thread: &HookThread,
    tstate: *mut ffi::PyThreadState,
    block: u64,
    size: u64,
) -> bool {
    if HEAP_EVENTS.load(Ordering::Relaxed) || native_stacks::enabled() {
        return false;
    }
    let Ok(mut cap) = thread.capture.try_borrow_mut() else {
        return false;
    };
    let Some(last) = cap.last_innermost else {
        return false;
    };
    // The ids and the chain belong to the generation current now: the chain's code
    // objects are still referenced (as `walk` checks before trusting the chain).
    if cap.generation != GENERATION.load(Ordering::Acquire) || cap.ids.len() != cap.frames.len() {
        return false;
    }
    let Some(&stack) = cap.ids.last() else {
        return false;
    };
    // SAFETY: `tstate` is this thread's state with the GIL held (caller), or null; `last`
    // and the chain come from this thread's last complete walk, whose code objects are
    // referenced in the current generation (checked just above), as `walk` requires.
    let moved = match unsafe { frames::innermost_state(tstate, last, &cap.chain) } {
        frames::Innermost::Unchanged => None,
        frames::Innermost::Moved(frame, innermost) => Some((frame, innermost)),
        frames::Innermost::Changed => return false,
    };
    let mut guard = RECORDER.lock();
    let Some(rec) = guard.as_mut() else {
        return false;
    };
    if rec.generation != cap.generation || !rec.follows_heap() {
        return false;
    }
    let stack = match moved {
        None => stack,
        Some((frame, innermost)) => {
            // The last stack's caller part, then this frame: what `intern_walked` interns
            // when a walk reaches the unchanged chain right past the innermost frame.
            let n = cap.ids.len();
            let parent = if n >= 2 { cap.ids[n - 2] } else { EMPTY_STACK };
            let Some(id) = rec.intern_frame(parent, frame.code, frame.lasti) else {
                return false;
            };
            cap.frames[n - 1] = frame;
            cap.ids[n - 1] = id;
            cap.last_innermost = Some(innermost);
            id
        }
    };
    if !rec.reference_pending_codes() {
        // As `intern_walked` does: the next walk must not trust a chain whose code
        // objects are not all referenced.
        cap.chain.clear();
        cap.last_innermost = None;
    }
    // A full table drops this one trace; the traced program keeps running.
    let _ = rec.live.insert(0, block, size, stack);
    if let Some(sink) = rec.capture.as_mut() {
        sink.alloc(0, block, size, stack);
    }
    true
}
