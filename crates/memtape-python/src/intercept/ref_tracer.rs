//! Objects reused from a free list are not allocated again, so their block keeps the
//! traceback of its first allocation. CPython 3.13 lets a tracer see every new reference
//! (`PyRefTracer_SetTracer`), which we use to re-stamp such blocks with the current stack,
//! as tracemalloc does; 3.11 and 3.12 only notify their built-in tracer.
//!
//! CPython also reports an object that its finalizer resurrected (a `ResourceWarning`
//! whose record keeps the unclosed file alive does) as a new reference, from inside its
//! deallocation. tracemalloc re-stamps it there, so it blames the line that dropped the
//! object (`del f`). A resurrected object of a garbage-collected type is still tracked by
//! the collector at that moment, while an object reused from a free list is tracked only
//! after it is initialised: memtape keeps the traceback of the creation for the former.

#[cfg(Py_3_13)]
mod imp {
    use std::ffi::{c_int, c_void};
    use std::sync::atomic::{AtomicU64, Ordering};

    use pyo3::ffi;
    use pyo3::prelude::*;

    use crate::cpython::{object_block, thread_state};
    use crate::record::capture;
    use crate::record::recorder::{RECORDER, TRACING};
    use crate::thread::hook_mode::{self, HookMode};

    type RefTracer = extern "C" fn(*mut ffi::PyObject, c_int, *mut c_void) -> c_int;
    const PYREFTRACER_CREATE: c_int = 0;

    extern "C" {
        fn PyRefTracer_SetTracer(tracer: Option<RefTracer>, data: *mut c_void) -> c_int;
    }

    /// The block the MEM or OBJ hook recorded last, until the tracer sees the object made
    /// in it (0: none). Both run with the GIL held, and no other thread can take the GIL
    /// between an object's allocation and its report to the tracer: one word for the
    /// process is the GIL holder's.
    static NEW_BLOCK: AtomicU64 = AtomicU64::new(0);

    /// The hook recorded `block` with the GIL held (see [`NEW_BLOCK`]).
    #[inline(always)]
    pub(crate) fn note_new_block(block: *mut c_void) {
        NEW_BLOCK.store(block as u64, Ordering::Relaxed);
    }

    extern "C" fn on_ref_event(obj: *mut ffi::PyObject, event: c_int, _data: *mut c_void) -> c_int {
        if event != PYREFTRACER_CREATE {
            return 0;
        }
        // SAFETY: CPython calls the tracer with the GIL held and a live, initialised
        // object (its type is set before the tracer runs).
        let block = unsafe { object_block::block_address_of(obj) } as u64;
        // The commonest case by far: the object of the block the hook just recorded, with
        // the stack it recorded (no Python code ran in between). Forgotten once seen, so
        // an object reused later from a free list at the same address is not taken for it.
        if NEW_BLOCK.load(Ordering::Relaxed) == block {
            NEW_BLOCK.store(0, Ordering::Relaxed);
        } else {
            restamp(obj, block);
        }
        0
    }

    /// Gives the block of an object reused from a free list (not allocated again) the
    /// stack that reused it, as tracemalloc does. Out of line, so that the tracer's
    /// commonest case above saves no registers.
    #[cold]
    #[inline(never)]
    fn restamp(obj: *mut ffi::PyObject, block: u64) {
        if !TRACING.load(Ordering::Relaxed) {
            return;
        }
        let Some(t) = hook_mode::thread().filter(|t| t.mode() == HookMode::Idle) else {
            return;
        };
        // SAFETY: the tracer's live object, with the GIL held; PyObject_GC_IsTracked only
        // reads its type flags and GC header.
        if unsafe { ffi::PyObject_GC_IsTracked(obj) } != 0 {
            return; // resurrected by its finalizer: same object, same creation site
        }
        t.set_mode(HookMode::InAllocHook);
        let walked = capture::walk(Some(t), thread_state::attached_via(&t.state_word));
        {
            let mut guard = RECORDER.lock();
            if let Some(rec) = guard.as_mut().filter(|r| r.tracing) {
                if let Some(e) = rec.live.get(0, block) {
                    let stack = walked.intern(rec);
                    if stack != e.stack {
                        let _ = rec.live.insert(0, block, e.size, stack);
                    }
                }
            }
        }
        t.set_mode(HookMode::Idle);
    }

    pub(crate) fn install(_py: Python<'_>) {
        // SAFETY: GIL held; the tracer is a plain function valid for the process lifetime.
        unsafe { PyRefTracer_SetTracer(Some(on_ref_event), std::ptr::null_mut()) };
    }

    pub(crate) fn uninstall(_py: Python<'_>) {
        // SAFETY: GIL held; removes the tracer (tracemalloc's stop() does the same).
        unsafe { PyRefTracer_SetTracer(None, std::ptr::null_mut()) };
    }
}

#[cfg(not(Py_3_13))]
mod imp {
    pub(crate) fn install(_py: pyo3::Python<'_>) {}
    pub(crate) fn uninstall(_py: pyo3::Python<'_>) {}
    #[inline(always)]
    pub(crate) fn note_new_block(_block: *mut std::ffi::c_void) {}
}

pub(crate) use imp::{install, note_new_block, uninstall};
