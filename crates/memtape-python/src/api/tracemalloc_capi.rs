//! CPython's tracemalloc C API, answered by memtape's tracer while it runs: extension
//! modules that report blocks of their own (`PyTraceMalloc_Track`, `_Untrack`) and read
//! a block's traceback (`_PyTraceMalloc_GetTraceback`) reach these functions instead of
//! the stopped builtin tracer, through their GOT slots ([`redirect`] at start,
//! [`restore`] at stop). Their contracts are the standard library's: `-2` while memtape
//! does not trace; `Track` takes the GIL itself, so it may be called without it and
//! records the calling thread's stack; `Untrack` never needs the GIL; a block tracked
//! again gets its new size and traceback.

use std::ffi::{c_int, c_uint, c_void, CStr};
use std::sync::atomic::Ordering;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::api::trace_set_py::raw_traces;
use crate::cpython::thread_state;
use crate::intercept::heap_record::{attribution, record_alloc, record_free};
use crate::native::symbol_redirect;
use crate::record::recorder::TRACING;
use crate::session::trace_collect;
use crate::thread::hook_mode::{self, HookMode};

/// CPython's names, in the order of [`hooks`].
const NAMES: [&CStr; 3] = [
    c"PyTraceMalloc_Track",
    c"PyTraceMalloc_Untrack",
    c"_PyTraceMalloc_GetTraceback",
];

fn hooks() -> [usize; 3] {
    [
        track as *const () as usize,
        untrack as *const () as usize,
        get_traceback as *const () as usize,
    ]
}

/// Points extension modules' calls of the C API at memtape (tracing starts).
pub(crate) fn redirect() {
    symbol_redirect::redirect(&NAMES, &hooks());
}

/// Gives the calls back to the interpreter (tracing stops).
pub(crate) fn restore() {
    symbol_redirect::restore();
}

/// `int PyTraceMalloc_Track(unsigned int domain, uintptr_t ptr, size_t size)`.
extern "C" fn track(domain: c_uint, ptr: usize, size: usize) -> c_int {
    // Checked before taking the GIL: a call late in the interpreter's finalization must
    // not try to.
    if !TRACING.load(Ordering::Acquire) {
        return -2;
    }
    // SAFETY: PyGILState_Ensure may be called by any thread, holding the GIL or not, while
    // the interpreter runs (it does: memtape traces); it is paired with the release below.
    let gil = unsafe { ffi::PyGILState_Ensure() };
    let result = track_holding_gil(domain, ptr, size);
    // SAFETY: releases exactly what the Ensure above took.
    unsafe { ffi::PyGILState_Release(gil) };
    result
}

fn track_holding_gil(domain: c_uint, ptr: usize, size: usize) -> c_int {
    if !TRACING.load(Ordering::Acquire) {
        return -2;
    }
    let Some(t) = hook_mode::thread() else {
        return -1;
    };
    let previous = t.set_mode(HookMode::InAllocHook);
    let tstate = thread_state::attached_via(&t.state_word);
    let none = std::ptr::null_mut();
    let block = ptr as *mut c_void;
    record_alloc(t, domain, tstate, block, size, none, attribution(Some(t)));
    t.set_mode(previous);
    0
}

/// `int PyTraceMalloc_Untrack(unsigned int domain, uintptr_t ptr)`.
extern "C" fn untrack(domain: c_uint, ptr: usize) -> c_int {
    if !TRACING.load(Ordering::Acquire) {
        return -2;
    }
    let thread = hook_mode::thread();
    let tstate =
        |t: &hook_mode::HookThread| thread_state::attached_if_holding_gil_via(&t.state_word);
    record_free(thread, domain, tstate, ptr as *mut c_void);
    0
}

/// `PyObject *_PyTraceMalloc_GetTraceback(unsigned int domain, uintptr_t ptr)`: a new
/// reference to the block's frames (most recent first), None if it has no trace; called
/// with the GIL held.
extern "C" fn get_traceback(domain: c_uint, ptr: usize) -> *mut ffi::PyObject {
    // SAFETY: CPython's contract for this function: the caller holds the GIL.
    let py = unsafe { Python::assume_attached() };
    match block_frames(py, domain, ptr as u64) {
        Ok(Some(frames)) => frames.into_ptr(),
        Ok(None) => py.None().into_ptr(),
        Err(e) => {
            e.restore(py);
            std::ptr::null_mut()
        }
    }
}

/// The frames tuple (most recent first) of the block at `addr` in `domain`, or None when
/// it has no trace or memtape does not trace.
pub(crate) fn block_frames(
    py: Python<'_>,
    domain: u32,
    addr: u64,
) -> PyResult<Option<Bound<'_, PyAny>>> {
    if !TRACING.load(Ordering::Acquire) {
        return Ok(None);
    }
    let Some(set) = trace_collect::block_trace(py, domain, addr) else {
        return Ok(None);
    };
    let traces = raw_traces(py, &set)?;
    match traces.iter().next() {
        Some(t) => Ok(Some(t.cast::<PyTuple>()?.get_item(2)?)),
        None => Ok(None),
    }
}
