//! What a Python-heap hook records, shared by the PEP 445 hooks ([`super::hooks`]) and
//! NumPy's data allocator ([`super::numpy_handler`]): whether the calling thread records,
//! the event's attribution, and the general path that walks the stack and hands the block
//! to the recorder. The hooks' quick paths for the commonest cases sit in front of it.

use std::ffi::c_void;
use std::sync::atomic::Ordering;

use memtape_core::EMPTY_STACK;

use crate::record::recorder::{hooks_active, Attribution, HEAP_EVENTS, RECORDER};
use crate::record::repeat_alloc::record_repeat_free;
use crate::record::{capture, event_clock, op_context};
use crate::thread::hook_mode::{self, HookMode, HookThread};
use crate::thread::thread_filter;
use crate::thread::thread_id;

/// What an event needs besides the block, read before the lock (only when events are on).
/// Acquire (a plain load on x86-64): seeing events on, the hook also sees the event
/// clock's source, decided before they were turned on.
#[inline(always)]
pub(crate) fn attribution(thread: Option<&HookThread>) -> Option<Attribution> {
    if !HEAP_EVENTS.load(Ordering::Acquire) {
        return None;
    }
    let (ticks, thread) = match thread {
        Some(t) => (event_clock::ticks_on(&t.clock), t.tid()),
        None => (event_clock::ticks(), thread_id::current()),
    };
    Some(Attribution {
        op: op_context::current(),
        ticks,
        thread,
    })
}

/// Records a new block (and the end of the block it replaces, for a realloc) in `domain`.
/// `thread` is the calling thread's hook state; `tstate` its thread state if it holds the
/// GIL, else null; `at` the event's [`attribution`].
#[inline]
pub(crate) fn record_alloc(
    thread: &HookThread,
    domain: u32,
    tstate: *mut pyo3::ffi::PyThreadState,
    block: *mut c_void,
    size: usize,
    moved_from: *mut c_void,
    at: Option<Attribution>,
) {
    let walked = capture::walk(Some(thread), tstate);
    let mut guard = RECORDER.lock();
    let Some(rec) = guard.as_mut().filter(|r| r.follows_heap()) else {
        return;
    };
    if !moved_from.is_null() {
        rec.end_heap_block(domain, moved_from as u64);
        if let Some(at) = &at {
            rec.stage_heap_free(domain, moved_from as u64, None, at);
        }
    }
    let stack = walked.intern(rec);
    rec.begin_heap_block(domain, block as u64, size as u64, stack);
    if let Some(at) = &at {
        rec.stage_heap_alloc(domain, block as u64, size as u64, stack, at);
    }
}

/// Forgets a block of `domain` that is being freed.
#[inline]
pub(crate) fn record_free(
    thread: Option<&HookThread>,
    domain: u32,
    tstate: impl FnOnce(&HookThread) -> *mut pyo3::ffi::PyThreadState,
    block: *mut c_void,
) {
    // Events record where a block was freed; memtape's own frees have no user stack.
    let at = attribution(thread);
    if at.is_none() && !crate::record::native_state::ACTIVE.load(Ordering::Relaxed) {
        // No walk, and no native hook that a signal handler could reach while the block
        // is forgotten: the thread's mode needs no guard.
        forget_block(domain, block, None, None);
        return;
    }
    let idle = thread.is_some_and(|t| t.mode() == HookMode::Idle);
    // While this thread walks and records, a native hook reached from a signal handler
    // that interrupts it passes straight through (the walk's buffers and the recorder
    // are this thread's, mid-update).
    let prev = thread.map(|t| t.set_mode(HookMode::InAllocHook));
    let walked = match (&at, thread) {
        (Some(a), Some(t)) if idle => {
            let tstate = tstate(t);
            if record_repeat_free(t, tstate, domain, block as u64, a) {
                None
            } else {
                Some(Some(capture::walk(Some(t), tstate)))
            }
        }
        _ => Some(None),
    };
    if let Some(walked) = walked {
        forget_block(domain, block, at.as_ref(), walked);
    }
    if let (Some(t), Some(prev)) = (thread, prev) {
        t.set_mode(prev);
    }
}

/// The locked part of [`record_free`].
#[inline(always)]
fn forget_block(
    domain: u32,
    block: *mut c_void,
    at: Option<&Attribution>,
    walked: Option<capture::Walked<'_>>,
) {
    let mut guard = RECORDER.lock();
    let Some(rec) = guard.as_mut().filter(|r| r.follows_heap()) else {
        return;
    };
    rec.end_heap_block(domain, block as u64);
    if let Some(at) = at {
        let stack = walked.map_or(EMPTY_STACK, |w| w.intern(rec));
        rec.stage_heap_free(domain, block as u64, Some(stack), at);
    }
}

/// The calling thread's state when this allocation should be recorded: something records,
/// the thread is not inside our own code and not left out ([`thread_filter`]). One TLS
/// lookup.
#[inline(always)]
pub(crate) fn recording_thread() -> Option<&'static HookThread> {
    if !hooks_active() {
        return None;
    }
    hook_mode::thread().filter(|t| t.mode() == HookMode::Idle && thread_filter::records(t))
}

/// Whether this free should be recorded, and the thread's state (None while the thread is
/// torn down: the free is still recorded). Frees made by memtape's own bookkeeping must
/// be seen; nested frees inside our hooks are seen by the outer hook.
#[inline(always)]
pub(crate) fn free_recording() -> Option<Option<&'static HookThread>> {
    if !hooks_active() {
        return None;
    }
    // Inside the thread's first touch of memtape's thread-locals: touch nothing.
    let thread = hook_mode::lookup().ok()?;
    // A thread being torn down (no state) is like one in memtape's own work.
    match thread {
        Some(t) if !t.mode().records_frees() => None,
        _ => Some(thread),
    }
}
