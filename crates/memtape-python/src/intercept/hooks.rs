//! PEP 445 hooks on the RAW, MEM and OBJ domains.
//!
//! Each hook forwards to the allocator it wraps and, while tracing, records the block.
//! Rules (DESIGN.md, hot path): never take the GIL, never call into Python, never allocate
//! through a hooked allocator (Rust's own allocations go to libc `malloc`, big ones to
//! `mmap`: `session::process_memory`), and pass nested calls straight through.

use std::cell::UnsafeCell;
use std::ffi::c_void;
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};

use memtape_core::PYTHON_DOMAIN;
use pyo3::ffi::{self, PyMemAllocatorDomain, PyMemAllocatorEx};

use crate::cpython::thread_state;
use crate::intercept::heap_record::{
    attribution, free_recording, record_alloc, record_free, recording_thread,
};
use crate::intercept::{pymalloc_beneath, ref_tracer};
use crate::record::recorder::{hooks_active, Recorder, CAPTURING, HEAP_EVENTS, RECORDER};
use crate::record::repeat_alloc::{record_repeat_alloc, record_repeat_event_free};
use crate::record::spin_lock::SpinGuard;
use crate::sinks::journal_backlog;
use crate::thread::hook_mode::{HookMode, HookThread};

/// One wrapped domain: the allocator we forward to.
struct HookSlot {
    domain: PyMemAllocatorDomain,
    /// RAW hooks may run without the GIL; MEM and OBJ always hold it.
    gil_held: bool,
    wrapped: UnsafeCell<PyMemAllocatorEx>,
    /// Our hooks are somewhere in this domain's allocator chain (possibly wrapped by
    /// another tracer, so not removable).
    installed: AtomicBool,
}

// SAFETY: `wrapped` is written only by `install`, with the GIL held and while this slot's
// hooks are not installed; hooks only read it. The slots are statics that live forever,
// so a thread still inside a hook after `uninstall` keeps forwarding correctly.
unsafe impl Sync for HookSlot {}

const EMPTY_ALLOCATOR: PyMemAllocatorEx = PyMemAllocatorEx {
    ctx: ptr::null_mut(),
    malloc: None,
    calloc: None,
    realloc: None,
    free: None,
};

static SLOTS: [HookSlot; 3] = [
    HookSlot {
        domain: PyMemAllocatorDomain::PYMEM_DOMAIN_RAW,
        gil_held: false,
        wrapped: UnsafeCell::new(EMPTY_ALLOCATOR),
        installed: AtomicBool::new(false),
    },
    HookSlot {
        domain: PyMemAllocatorDomain::PYMEM_DOMAIN_MEM,
        gil_held: true,
        wrapped: UnsafeCell::new(EMPTY_ALLOCATOR),
        installed: AtomicBool::new(false),
    },
    HookSlot {
        domain: PyMemAllocatorDomain::PYMEM_DOMAIN_OBJ,
        gil_held: true,
        wrapped: UnsafeCell::new(EMPTY_ALLOCATOR),
        installed: AtomicBool::new(false),
    },
];

#[inline(always)]
fn slot(ctx: *mut c_void) -> &'static HookSlot {
    // SAFETY: our hooks are only ever installed with `ctx` pointing at one of `SLOTS`.
    unsafe { &*ctx.cast::<HookSlot>() }
}

#[inline(always)]
fn wrapped(slot: &HookSlot) -> &PyMemAllocatorEx {
    // SAFETY: see `HookSlot`: not written while the hooks that read it can run.
    unsafe { &*slot.wrapped.get() }
}

/// The calling thread's Python thread state when it holds the GIL (always for MEM/OBJ),
/// else null; `thread` is the calling thread's hook state.
#[inline(always)]
fn tstate_for(slot: &HookSlot, thread: &HookThread) -> *mut pyo3::ffi::PyThreadState {
    if slot.gil_held {
        thread_state::attached_via(&thread.state_word)
    } else {
        thread_state::attached_if_holding_gil_via(&thread.state_word)
    }
}

/// Records a block just allocated in the Python domain (not a realloc): the stack of the
/// thread's last capture when it is unchanged, else the general path.
#[inline(always)]
fn record_new_block(
    thread: &HookThread,
    tstate: *mut pyo3::ffi::PyThreadState,
    block: *mut c_void,
    size: usize,
) {
    let at = attribution(Some(thread));
    if !record_repeat_alloc(thread, tstate, block as u64, size as u64, at.as_ref()) {
        let none = ptr::null_mut();
        record_alloc(thread, PYTHON_DOMAIN, tstate, block, size, none, at);
    }
}

/// Whether a Python-heap free needs no more than the recorder: no event records where it
/// happened, so there is no walk whose buffers a native hook run from a signal handler
/// could find mid-update (such a hook finds the recorder locked by its own thread and
/// passes, counted: `native_record`'s lock). The thread's mode is then not looked up;
/// see [`free_plain_waiting`].
#[inline(always)]
fn plain_frees() -> bool {
    !HEAP_EVENTS.load(Ordering::Acquire)
}

/// Runs `alloc` as a recorded allocation on `thread`: nested calls pass through. Then,
/// when the capture's journal is full, waits for the flusher ([`journal_backlog`]).
#[inline(always)]
fn recorded(thread: &HookThread, alloc: impl FnOnce() -> *mut c_void) -> *mut c_void {
    thread.set_mode(HookMode::InAllocHook);
    let block = alloc();
    thread.set_mode(HookMode::Idle);
    journal_backlog::wait_if_full(&CAPTURING);
    block
}

extern "C" fn hook_malloc(ctx: *mut c_void, size: usize) -> *mut c_void {
    let s = slot(ctx);
    let w = wrapped(s);
    let Some(malloc) = w.malloc else {
        return ptr::null_mut();
    };
    let Some(t) = recording_thread() else {
        return malloc(w.ctx, size);
    };
    recorded(t, || {
        let block = malloc(w.ctx, size);
        if !block.is_null() {
            record_new_block(t, tstate_for(s, t), block, size);
            if s.gil_held {
                ref_tracer::note_new_block(block);
            }
        }
        block
    })
}

extern "C" fn hook_calloc(ctx: *mut c_void, nelem: usize, elsize: usize) -> *mut c_void {
    let s = slot(ctx);
    let w = wrapped(s);
    let Some(calloc) = w.calloc else {
        return ptr::null_mut();
    };
    let Some(t) = recording_thread() else {
        return calloc(w.ctx, nelem, elsize);
    };
    recorded(t, || {
        let block = calloc(w.ctx, nelem, elsize);
        if !block.is_null() {
            record_new_block(t, tstate_for(s, t), block, nelem.saturating_mul(elsize));
            if s.gil_held {
                ref_tracer::note_new_block(block);
            }
        }
        block
    })
}

extern "C" fn hook_realloc(ctx: *mut c_void, old: *mut c_void, size: usize) -> *mut c_void {
    let s = slot(ctx);
    let w = wrapped(s);
    let Some(realloc) = w.realloc else {
        return ptr::null_mut();
    };
    let Some(t) = recording_thread() else {
        let block = realloc(w.ctx, old, size);
        // memtape's own code resizing a traced block: the old trace is gone.
        if !block.is_null() && !old.is_null() && block != old {
            if let Some(thread) = free_recording() {
                record_free(thread, PYTHON_DOMAIN, |t| tstate_for(s, t), old);
            }
        }
        return block;
    };
    recorded(t, || {
        let block = realloc(w.ctx, old, size);
        if !block.is_null() {
            // Moved or resized in place, the old block ends (its free is recorded) and
            // the new one begins.
            let at = attribution(Some(t));
            record_alloc(t, PYTHON_DOMAIN, tstate_for(s, t), block, size, old, at);
            // A resized object (a bytes or tuple resized in place of a new one) is
            // reported to the reference tracer again.
            if s.gil_held {
                ref_tracer::note_new_block(block);
            }
        }
        block
    })
}

extern "C" fn hook_free(ctx: *mut c_void, block: *mut c_void) {
    // Forget the block before it is freed: once freed, another thread may get the same
    // address and record it.
    if !block.is_null() && hooks_active() {
        if !plain_frees() {
            return free_recorded(ctx, block);
        }
        // The commonest frees: no event, the recorder free, and either the block a small
        // one whose chunk the live table found last time (tracemalloc's), or a capture's
        // free that its journal takes as it is (`memtape run`'s). This path keeps to the
        // registers a call may clobber, so the hook needs no stack frame and ends in a
        // jump to the allocator beneath; everything else is a call away.
        let Some(mut guard) = RECORDER.try_lock() else {
            return free_plain_waiting(ctx, block);
        };
        if let Some(rec) = guard.as_mut().filter(|r| r.follows_heap()) {
            if !rec.end_heap_block_quickly(block as u64) {
                return free_plain_locked(guard, ctx, block);
            }
        }
        drop(guard);
    }
    forward_free(ctx, block);
}

/// Frees `block` with the allocator beneath hook `ctx`: a jump, unless native hooks run.
#[inline(always)]
fn forward_free(ctx: *mut c_void, block: *mut c_void) {
    if crate::record::native_state::ACTIVE.load(Ordering::Relaxed)
        && !(slot(ctx).gil_held && pymalloc_beneath::frees_stay_in_python())
    {
        return forward_free_beneath(ctx, block);
    }
    let w = wrapped(slot(ctx));
    if let Some(free) = w.free {
        free(w.ctx, block);
    }
}

/// [`forward_free`] while native hooks run: the libc free beneath is not a native free
/// of its own. The allocator beneath may hand the block on to another domain's free
/// (pymalloc gives its large blocks to PyMem_RawFree): the live table no longer knows the
/// block then, and the capture sink drops the repeated free.
#[inline(never)]
fn forward_free_beneath(ctx: *mut c_void, block: *mut c_void) {
    let w = wrapped(slot(ctx));
    if let Some(free) = w.free {
        crate::native::beneath_wrapper(|| free(w.ctx, block));
    }
}

/// [`hook_free`] while events are recorded: the free's stack and event.
#[inline(never)]
extern "C" fn free_recorded(ctx: *mut c_void, block: *mut c_void) {
    let recording = free_recording();
    if let Some(thread) = recording {
        // The commonest free in one piece; the rest (a stack to walk, memtape's own
        // frees, a thread torn down) a call away.
        let quick = thread.is_some_and(|t| {
            t.mode() == HookMode::Idle
                && record_repeat_event_free(t, tstate_for(slot(ctx), t), block as u64)
        });
        if !quick {
            free_event_general(thread, ctx, block);
        }
    }
    forward_free(ctx, block);
    // Not in a mode that records no frees: between fork preparation and the fork this
    // thread holds the recorder, which the flusher needs.
    if recording.is_some() {
        journal_backlog::wait_if_full(&CAPTURING);
    }
}

/// [`free_recorded`]'s general path: the free's stack walked, or no stack (memtape's own
/// frees, a thread torn down).
#[inline(never)]
fn free_event_general(thread: Option<&HookThread>, ctx: *mut c_void, block: *mut c_void) {
    record_free(thread, PYTHON_DOMAIN, |t| tstate_for(slot(ctx), t), block);
}

/// [`hook_free`] with no event to record, when the recorder was not free at once: it
/// waits, then forgets the block as [`free_plain_locked`] does.
///
/// No thread mode is looked up when [`plain_frees`] holds: the lock itself tells when this
/// thread holds the recorder already (between fork preparation and the fork, or in a
/// signal handler that interrupted a hook), and the free then passes unrecorded, as it
/// does in those modes. A free made inside one of our allocation hooks through another
/// domain's entry (an allocator beneath that does so; pymalloc does not) is recorded
/// here, where the mode would have skipped it: the outer hook then finds the block gone
/// from the live table, and the capture sink drops its repeated free, so the totals are
/// the same.
#[inline(never)]
extern "C" fn free_plain_waiting(ctx: *mut c_void, block: *mut c_void) {
    match RECORDER.lock_unless_held_here() {
        Some(guard) if guard.as_ref().is_some_and(|r| r.follows_heap()) => {
            free_plain_locked(guard, ctx, block);
        }
        _ => forward_free(ctx, block),
    }
}

/// [`hook_free`] with no event to record and the recorder locked (`guard`) and following
/// the heap, when the quick path could not forget the block (a capture, a large or
/// unaligned block, or a chunk not found in the index's cache), or after waiting for the
/// lock ([`free_plain_waiting`]).
#[inline(never)]
extern "C" fn free_plain_locked(
    mut guard: SpinGuard<'static, Option<Recorder>>,
    ctx: *mut c_void,
    block: *mut c_void,
) {
    if let Some(rec) = guard.as_mut() {
        rec.end_heap_block(PYTHON_DOMAIN, block as u64);
    }
    drop(guard);
    forward_free(ctx, block);
    // The lock was taken here, so this thread held no lock of the flusher's before.
    journal_backlog::wait_if_full(&CAPTURING);
}

fn is_ours(a: &PyMemAllocatorEx, s: &'static HookSlot) -> bool {
    // Our slot addresses are unique, so the context pointer identifies our hooks.
    a.ctx == ptr::from_ref(s).cast_mut().cast()
}

/// Installs the hooks on every domain where they are not installed yet.
pub(crate) fn install(py: pyo3::Python<'_>) {
    thread_state::locate(py);
    pymalloc_beneath::install(py, any_installed());
    for s in &SLOTS {
        let mut current = EMPTY_ALLOCATOR;
        // SAFETY: the GIL is held (proved by `py`), as PEP 445 requires for get/set.
        unsafe { ffi::PyMem_GetAllocator(s.domain, &mut current) };
        if s.installed.load(Ordering::Acquire) || is_ours(&current, s) {
            // Still in the chain since a stop that could not unwrap: re-wrapping would
            // make the chain call itself.
            continue;
        }
        // SAFETY: our hooks are not installed on this domain, so no hook reads the slot
        // while it is written (see `HookSlot`).
        unsafe { *s.wrapped.get() = current };
        let mut hooks = PyMemAllocatorEx {
            ctx: ptr::from_ref(s).cast_mut().cast(),
            malloc: Some(hook_malloc),
            calloc: Some(hook_calloc),
            realloc: Some(hook_realloc),
            free: Some(hook_free),
        };
        // SAFETY: GIL held; `hooks` wraps the allocator saved in the slot.
        unsafe { ffi::PyMem_SetAllocator(s.domain, &mut hooks) };
        s.installed.store(true, Ordering::Release);
    }
}

/// Removes the hooks where they are still the outermost allocator. Where someone wrapped
/// them since (another tracer), they stay installed and only forward, since unwrapping
/// would cut that tracer off.
pub(crate) fn uninstall(py: pyo3::Python<'_>) {
    for s in &SLOTS {
        let mut current = EMPTY_ALLOCATOR;
        // SAFETY: GIL held (proved by `py`).
        unsafe { ffi::PyMem_GetAllocator(s.domain, &mut current) };
        if is_ours(&current, s) {
            let mut original = *wrapped(s);
            // SAFETY: GIL held; restores exactly the allocator we wrapped.
            unsafe { ffi::PyMem_SetAllocator(s.domain, &mut original) };
            s.installed.store(false, Ordering::Release);
        }
    }
    pymalloc_beneath::uninstall(py, any_installed());
}

/// Whether our hooks are in some domain's chain.
fn any_installed() -> bool {
    SLOTS.iter().any(|s| s.installed.load(Ordering::Acquire))
}
