//! The commonest allocations (and tracebacks), recorded without the general capture: a
//! Python-heap block allocated by a thread whose stack is the one of its last capture (C
//! code under one Python line allocating again), or that stack with its innermost frame at
//! another instruction (the next line of the same function), while native stacks are off.
//!
//! It makes the checks [`crate::record::capture::walk`] makes on the innermost frame and
//! its callers, takes the stack id as `intern_walked` would (`intern_repeat`, shared), and
//! records the block as [`crate::intercept::heap_record::record_alloc`] does, in one piece.
//! Anything else (a changed stack, another recorder generation, native stacks, a realloc)
//! is left to the general path, so both always record the same thing.

use std::sync::atomic::Ordering;

use memtape_core::{StackId, PYTHON_DOMAIN};
use pyo3::ffi;

use crate::cpython::frames;
use crate::native::unwind::native_stacks;
use crate::record::event_clock;
use crate::record::op_context::{self, TracebackHandle};
use crate::record::recorder::{Attribution, Recorder, EVENTS_RECORDING, GENERATION, RECORDER};
use crate::record::spin_lock::SpinGuard;
use crate::record::stack_floor;
use crate::thread::hook_mode::{HookMode, HookThread};
use crate::thread::thread_capture::ThreadCapture;

/// Whether the calling thread's stack repeats its last capture (the same stack, or its
/// innermost frame moved on), judged before the recorder is locked; `None` when that is
/// not known to be so (the general path).
///
/// `cap` must be the calling thread's capture cache, and `tstate` its thread state with
/// the GIL held, or null (then `None`).
#[inline(always)]
fn repeated(cap: &ThreadCapture, tstate: *mut ffi::PyThreadState) -> Option<frames::Innermost> {
    if native_stacks::enabled() {
        return None;
    }
    let last = cap.last_innermost.as_ref()?;
    // The chain's code objects are still referenced: the ids' generation is the current
    // one (as `walk` checks before trusting the chain).
    if cap.generation != GENERATION.load(Ordering::Acquire) {
        return None;
    }
    // Walked with the stop in effect now.
    let stop = cap.chain_stop_in_effect(stack_floor::honoured)?;
    // SAFETY: `tstate` is this thread's state with the GIL held (caller), or null; `last`
    // and the chain come from this thread's last complete walk, whose code objects are
    // referenced in the current generation (checked just above), as `walk` requires.
    match unsafe { frames::innermost_state(tstate, last, &cap.chain, stop) } {
        frames::Innermost::Changed => None,
        found => Some(found),
    }
}

/// Records the new block `block` of `size` bytes in the Python domain when the calling
/// thread's stack is the one it captured last, or that one with its innermost frame moved
/// on; false when that is not known to be so, and nothing was recorded (the caller then
/// takes the general path).
///
/// `thread` must be the calling thread's hook state, and `tstate` its thread state with
/// the GIL held, or null (then false); `at` the event's attribution while events are
/// recorded.
#[inline(always)]
pub(crate) fn record_repeat_alloc(
    thread: &HookThread,
    tstate: *mut ffi::PyThreadState,
    block: u64,
    size: u64,
    at: Option<&Attribution>,
) -> bool {
    let Some((mut guard, stack)) = lock_repeated_stack(thread, tstate) else {
        return false;
    };
    let Some(rec) = guard.as_mut() else {
        return false;
    };
    rec.begin_heap_block(PYTHON_DOMAIN, block, size, stack);
    if let Some(at) = at {
        rec.stage_heap_alloc(PYTHON_DOMAIN, block, size, stack, at);
    }
    true
}

/// Records the free of `block` in `domain` with the calling thread's stack, while events
/// are recorded (`at`), when that stack is the one it captured last or that one with its
/// innermost frame moved on: what [`crate::intercept::heap_record::record_free`]'s walk and
/// `forget_block` record, without the walk. False when that is not known to be so and
/// nothing was done (the caller then takes the general path); true when the free was
/// handled, recorded or not (a block the recorder does not know).
///
/// `thread` and `tstate` as for [`record_repeat_alloc`]; the caller guards the thread's
/// mode as for the walk.
#[inline(always)]
pub(crate) fn record_repeat_free(
    thread: &HookThread,
    tstate: *mut ffi::PyThreadState,
    domain: u32,
    block: u64,
    at: &Attribution,
) -> bool {
    repeat_free(thread, tstate, domain, block, || *at)
}

/// The event recorder's commonest free, in one piece: a Python-heap block freed by a
/// thread in ordinary code (`thread`'s mode idle) whose stack is the one it captured last,
/// or that one with its innermost frame moved on. It records what
/// [`crate::intercept::heap_record::record_free`] records for that free (the block
/// forgotten, its free event with that stack), reading the thread's state, the recorder's
/// option and the event's attribution once each instead of once per step. False when the
/// stack is not known to repeat, and nothing was done (the caller then takes the general
/// path); true when the free was handled, recorded or not.
///
/// `thread` must be the calling thread's hook state, idle, while heap events are recorded;
/// `tstate` its thread state with the GIL held, or null (then false).
#[inline(always)]
pub(crate) fn record_repeat_event_free(
    thread: &HookThread,
    tstate: *mut ffi::PyThreadState,
    block: u64,
) -> bool {
    // As the general path, the mode first: a native hook that a signal handler runs on
    // this thread meanwhile passes, and finds the cache borrowed.
    let prev = thread.set_mode(HookMode::InAllocHook);
    let handled = repeat_event_free_guarded(thread, tstate, block);
    thread.set_mode(prev);
    handled
}

/// [`record_repeat_event_free`] with the thread's mode set.
#[inline(always)]
fn repeat_event_free_guarded(
    thread: &HookThread,
    tstate: *mut ffi::PyThreadState,
    block: u64,
) -> bool {
    repeat_free(thread, tstate, PYTHON_DOMAIN, block, || Attribution {
        op: op_context::current(),
        ticks: event_clock::ticks_on(&thread.clock),
        thread: thread.tid(),
    })
}

/// What [`record_repeat_free`] and [`record_repeat_event_free`] record, with the event's
/// attribution made by `at` once the stack is known to repeat (the quick free reads the
/// clock only then). The recorder's option, the thread's cache and the stack id are each
/// read once (HISTORY section 55).
#[inline(always)]
fn repeat_free(
    thread: &HookThread,
    tstate: *mut ffi::PyThreadState,
    domain: u32,
    block: u64,
    at: impl FnOnce() -> Attribution,
) -> bool {
    let Ok(mut cap) = thread.capture.try_borrow_mut() else {
        return false;
    };
    let Some(found) = repeated(&cap, tstate) else {
        return false;
    };
    let at = at();
    let mut guard = RECORDER.lock();
    let Some(rec) = guard.as_mut().filter(|r| r.follows_heap()) else {
        return true;
    };
    let Some(stack) = cap.intern_repeat(rec, found) else {
        return false;
    };
    rec.end_heap_block(domain, block);
    rec.stage_heap_free(domain, block, Some(stack), &at);
    true
}

/// Locks the recorder and takes the stack id of the calling thread's stack when that
/// stack is the one it captured last or that one with its innermost frame moved on, and
/// the recorder follows the Python heap; `None` otherwise (the general path).
/// `thread` and `tstate` as for [`record_repeat_alloc`].
#[inline(always)]
fn lock_repeated_stack(
    thread: &HookThread,
    tstate: *mut ffi::PyThreadState,
) -> Option<(SpinGuard<'static, Option<Recorder>>, StackId)> {
    let mut cap = thread.capture.try_borrow_mut().ok()?;
    let found = repeated(&cap, tstate)?;
    let mut guard = RECORDER.lock();
    let rec = guard.as_mut().filter(|r| r.follows_heap())?;
    // The stack first: when it cannot be had here, the general path does everything.
    let stack = cap.intern_repeat(rec, found)?;
    Some((guard, stack))
}

/// `capture_traceback`'s handle for the calling thread's stack when it repeats its last
/// capture, while events are recorded; `None` when that is not known to be so (the
/// general path). `thread` and `tstate` as for [`record_repeat_alloc`].
#[inline]
pub(crate) fn repeat_traceback(
    thread: &HookThread,
    tstate: *mut ffi::PyThreadState,
) -> Option<TracebackHandle> {
    let mut cap = thread.capture.try_borrow_mut().ok()?;
    let found = repeated(&cap, tstate)?;
    if let frames::Innermost::Unchanged = found {
        if let Some(handle) = unchanged_traceback(&cap) {
            return Some(handle);
        }
    }
    let mut guard = RECORDER.lock();
    let rec = guard
        .as_mut()
        .filter(|r| r.events.as_ref().is_some_and(|e| e.recording))?;
    let stack = cap.intern_repeat(rec, found)?;
    Some(op_context::handle(rec.generation, stack))
}

/// The handle of the calling thread's last captured stack, found unchanged, without the
/// recorder's lock: while events are recorded and the ids are complete and of the
/// recorder's generation (`repeated` compared it). What the locked path returns, at the
/// moment `GENERATION` was read; a recording stopped or restarted since then makes the
/// same difference as one stopped or restarted just after a locked capture (the handle is
/// stale when the generation moved on, and resolving it says so). Unlike the locked path
/// it takes no pending code reference ([`crate::record::recorder::Recorder::intern_frame`]):
/// it interns no frame, and those references wait for the next interning as they would
/// if this capture had not happened.
#[inline(always)]
fn unchanged_traceback(cap: &ThreadCapture) -> Option<TracebackHandle> {
    let n = cap.ids.len();
    if n == 0 || n != cap.frames.len() || !EVENTS_RECORDING.load(Ordering::Acquire) {
        return None;
    }
    Some(op_context::handle(cap.generation, cap.ids[n - 1]))
}
