//! A thread's stack floor: while it runs a call made with `_call_as_program_with_floor`
//! (the pytest plugin's call of a test) or code run by `_exec_as_program` as the recording
//! starts (`memtape run`'s program, a notebook cell), the stacks captured on that thread
//! end at the frame that made the call. The frames outside it (pytest's, pluggy's, the
//! launcher's: some 40 under pytest; memtape's runner and runpy, 11 under `memtape run`)
//! are the same at every allocation of the call and no report of such a recording shows
//! them (its `launcher_files` drop them), yet each capture would walk and compare them all.
//!
//! The calling frame itself stays in the stacks: a stack that held only runner frames
//! (an allocation made while the called function's frame is still being set up) keeps
//! the innermost of them, as the report's trimming does, so every report is the same
//! with or without the floor.
//!
//! Only a capture file follows the floor. tracemalloc (its tracebacks are the user's to
//! read, frame by frame, up to `nframe`), the event recorder and native stacks (whose
//! interleaved C frames no launcher trimming covers) share the walk and the stack table
//! with the capture, so while any of them records, every thread walks its whole stack.

use std::sync::atomic::Ordering;

use pyo3::ffi;

use crate::cpython::frames;
use crate::native::unwind::native_stacks;
use crate::record::recorder::{EVENTS_RECORDING, TRACING};
use crate::thread::hook_mode;

/// Whether a thread's floor is followed now: while nothing but a capture file records.
#[inline]
pub(crate) fn honoured() -> bool {
    !TRACING.load(Ordering::Relaxed)
        && !EVENTS_RECORDING.load(Ordering::Relaxed)
        && !native_stacks::enabled()
}

/// The floor a call restores when it ends (see [`enter`]).
pub(crate) struct SavedFloor(usize);

/// Sets the calling thread's floor to its current frame (the frame calling into
/// `_call_as_program_with_floor`), returning the floor to restore with [`leave`]: `None` when the
/// thread has no hook state (nothing then changes).
///
/// # Safety
/// `tstate` must be the calling thread's thread state, with the GIL held.
pub(crate) unsafe fn enter(tstate: *mut ffi::PyThreadState) -> Option<SavedFloor> {
    // SAFETY: as guaranteed by the caller.
    let stop = unsafe { frames::innermost_caller(tstate) };
    set(stop).map(SavedFloor)
}

/// Restores the floor [`enter`] replaced.
pub(crate) fn leave(saved: SavedFloor) {
    set(saved.0);
}

/// Sets the calling thread's floor to `stop`, returning the one it had.
fn set(stop: usize) -> Option<usize> {
    let thread = hook_mode::thread()?;
    // Not inside a hook (the caller holds the GIL in ordinary code): the cache is free.
    let mut cap = thread.capture.try_borrow_mut().ok()?;
    Some(std::mem::replace(&mut cap.floor, stop))
}
