//! NumPy array buffers: numpy allocates array data with its own handler (NEP 49), not
//! through PyMem, so the PEP 445 hooks never see it. We wrap numpy's current handler with
//! one that records each buffer in tracemalloc's NumPy domain (389047, the domain numpy
//! itself reports to the built-in tracer) and in the event recorder.
//!
//! numpy keeps a reference to the handler in every array it allocates and frees the array
//! through it, so our handler and the allocator it wraps stay valid for the process'
//! lifetime; `uninstall` only stops new arrays from using it.
//!
//! numpy stores the handler in a context variable: installing affects the context (thread)
//! that installs it, as NEP 49 specifies.

use std::cell::UnsafeCell;
use std::ffi::{c_char, c_void, CStr};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

use pyo3::exceptions::PyRuntimeError;
use pyo3::ffi;
use pyo3::prelude::*;

use crate::cpython::thread_state;
use crate::intercept::heap_record::{
    attribution, free_recording, record_alloc, record_free, recording_thread,
};
use crate::native::beneath_wrapper;
use crate::thread::hook_mode::{HookMode, HookThread};

/// tracemalloc's domain for NumPy buffers (numpy's `NPY_TRACE_DOMAIN`).
pub(crate) const NUMPY_DOMAIN: u32 = 389_047;

/// Slots of `PyDataMem_SetHandler` and `PyDataMem_GetHandler` in numpy's `_ARRAY_API`
/// table (stable since numpy 1.22's C-API version).
const SET_HANDLER_SLOT: usize = 304;
const GET_HANDLER_SLOT: usize = 305;
const CAPSULE_NAME: &CStr = c"mem_handler";

/// numpy's `PyDataMemAllocator`.
#[repr(C)]
#[derive(Clone, Copy)]
struct DataMemAllocator {
    ctx: *mut c_void,
    malloc: Option<extern "C" fn(*mut c_void, usize) -> *mut c_void>,
    calloc: Option<extern "C" fn(*mut c_void, usize, usize) -> *mut c_void>,
    realloc: Option<extern "C" fn(*mut c_void, *mut c_void, usize) -> *mut c_void>,
    free: Option<extern "C" fn(*mut c_void, *mut c_void, usize)>,
}

/// numpy's `PyDataMem_Handler`.
#[repr(C)]
struct DataMemHandler {
    name: [c_char; 127],
    version: u8,
    allocator: DataMemAllocator,
}

/// The allocator we forward to: written once, before our handler is first installed.
struct Wrapped(UnsafeCell<DataMemAllocator>);

// SAFETY: written only in `install` with the GIL held and before any buffer can reach our
// handler (guarded by WRAPPED_SET); read-only afterwards.
unsafe impl Sync for Wrapped {}

static WRAPPED: Wrapped = Wrapped(UnsafeCell::new(DataMemAllocator {
    ctx: ptr::null_mut(),
    malloc: None,
    calloc: None,
    realloc: None,
    free: None,
}));
static WRAPPED_SET: AtomicBool = AtomicBool::new(false);
/// The handler whose allocator WRAPPED copies.
static WRAPPED_HANDLER: AtomicPtr<DataMemHandler> = AtomicPtr::new(ptr::null_mut());
/// The handler capsule that was current before ours, to put back on uninstall.
static PREVIOUS: AtomicPtr<ffi::PyObject> = AtomicPtr::new(ptr::null_mut());
/// Our handler capsule while it is installed.
static OURS: AtomicPtr<ffi::PyObject> = AtomicPtr::new(ptr::null_mut());

const fn handler_name() -> [c_char; 127] {
    let text = b"memtape_tracing_handler";
    let mut name = [0 as c_char; 127];
    let mut i = 0;
    while i < text.len() {
        name[i] = text[i] as c_char;
        i += 1;
    }
    name
}

struct Handler(DataMemHandler);
// SAFETY: immutable after construction; numpy only reads it.
unsafe impl Sync for Handler {}

static HANDLER: Handler = Handler(DataMemHandler {
    name: handler_name(),
    version: 1,
    allocator: DataMemAllocator {
        ctx: ptr::null_mut(),
        malloc: Some(np_malloc),
        calloc: Some(np_calloc),
        realloc: Some(np_realloc),
        free: Some(np_free),
    },
});

#[inline(always)]
fn wrapped() -> &'static DataMemAllocator {
    // SAFETY: see `Wrapped`; our functions run only after WRAPPED was written.
    unsafe { &*WRAPPED.0.get() }
}

fn record_new(t: &HookThread, block: *mut c_void, size: usize, moved_from: *mut c_void) {
    t.set_mode(HookMode::InAllocHook);
    let tstate = thread_state::attached_if_holding_gil_via(&t.state_word);
    record_alloc(
        t,
        NUMPY_DOMAIN,
        tstate,
        block,
        size,
        moved_from,
        attribution(Some(t)),
    );
    t.set_mode(HookMode::Idle);
}

/// Calls the allocator numpy's handler wraps, as the allocator beneath a recorded block:
/// neither the PEP 445 hooks (numpy 2.5's default handler allocates with
/// `PyMem_RawMalloc`) nor the native hooks record what it does, when `thread` (the
/// calling thread, in ordinary code) records. Without that, each buffer was recorded
/// twice, and its Python-heap copy never freed.
#[inline(always)]
fn beneath<R>(thread: Option<&HookThread>, call: impl FnOnce() -> R) -> R {
    let previous = thread.map(|t| t.set_mode(HookMode::InAllocHook));
    let result = beneath_wrapper(call);
    if let (Some(t), Some(previous)) = (thread, previous) {
        t.set_mode(previous);
    }
    result
}

extern "C" fn np_malloc(_ctx: *mut c_void, size: usize) -> *mut c_void {
    let w = wrapped();
    let Some(malloc) = w.malloc else {
        return ptr::null_mut();
    };
    let thread = recording_thread();
    let block = beneath(thread, || malloc(w.ctx, size));
    if let Some(t) = thread.filter(|_| !block.is_null()) {
        record_new(t, block, size, ptr::null_mut());
    }
    block
}

extern "C" fn np_calloc(_ctx: *mut c_void, nelem: usize, elsize: usize) -> *mut c_void {
    let w = wrapped();
    let Some(calloc) = w.calloc else {
        return ptr::null_mut();
    };
    let thread = recording_thread();
    let block = beneath(thread, || calloc(w.ctx, nelem, elsize));
    if let Some(t) = thread.filter(|_| !block.is_null()) {
        record_new(t, block, nelem.saturating_mul(elsize), ptr::null_mut());
    }
    block
}

extern "C" fn np_realloc(_ctx: *mut c_void, old: *mut c_void, size: usize) -> *mut c_void {
    let w = wrapped();
    let Some(realloc) = w.realloc else {
        return ptr::null_mut();
    };
    let thread = recording_thread();
    let block = beneath(thread, || realloc(w.ctx, old, size));
    if let Some(t) = thread.filter(|_| !block.is_null()) {
        record_new(t, block, size, old);
    }
    block
}

extern "C" fn np_free(_ctx: *mut c_void, block: *mut c_void, size: usize) {
    let w = wrapped();
    let recording = free_recording().filter(|_| !block.is_null());
    if let Some(thread) = recording {
        record_free(
            thread,
            NUMPY_DOMAIN,
            |t| thread_state::attached_if_holding_gil_via(&t.state_word),
            block,
        );
    }
    if let Some(free) = w.free {
        // The free beneath the buffer's own is not recorded again (a thread in memtape's
        // own work frees through here too: then it is marked alike).
        let thread = recording.flatten().filter(|t| t.mode().records_frees());
        beneath(thread, || free(w.ctx, block, size));
    }
}

type SetHandler = unsafe extern "C" fn(*mut ffi::PyObject) -> *mut ffi::PyObject;
type GetHandler = unsafe extern "C" fn() -> *mut ffi::PyObject;

/// numpy's SetHandler and GetHandler once found (numpy is never unloaded), so that
/// installing and removing the handler imports nothing after the first time.
static NUMPY_API: std::sync::OnceLock<(SetHandler, GetHandler)> = std::sync::OnceLock::new();

fn numpy_api(py: Python<'_>) -> PyResult<(SetHandler, GetHandler)> {
    if let Some(api) = NUMPY_API.get() {
        return Ok(*api);
    }
    let api = find_numpy_api(py)?;
    Ok(*NUMPY_API.get_or_init(|| api))
}

fn find_numpy_api(py: Python<'_>) -> PyResult<(SetHandler, GetHandler)> {
    let module = py
        .import("numpy._core._multiarray_umath")
        .or_else(|_| py.import("numpy.core._multiarray_umath"))?;
    let capsule = module.getattr("_ARRAY_API")?;
    // SAFETY: `_ARRAY_API` is numpy's C-API capsule (unnamed) holding `void **PyArray_API`;
    // slots 304/305 hold PyDataMem_SetHandler/GetHandler for every numpy whose C API is at
    // least 1.22, which we check through `PyDataMem_GetHandler`'s presence below.
    unsafe {
        let table =
            ffi::PyCapsule_GetPointer(capsule.as_ptr(), ptr::null()) as *const *const c_void;
        if table.is_null() {
            return Err(PyErr::fetch(py));
        }
        let set = *table.add(SET_HANDLER_SLOT);
        let get = *table.add(GET_HANDLER_SLOT);
        if set.is_null() || get.is_null() {
            return Err(PyRuntimeError::new_err(
                "this numpy has no memory handler API (NEP 49, numpy >= 1.22)",
            ));
        }
        Ok((
            std::mem::transmute::<*const c_void, SetHandler>(set),
            std::mem::transmute::<*const c_void, GetHandler>(get),
        ))
    }
}

/// Makes numpy allocate new arrays through our handler (in the current context).
#[pyfunction]
pub(crate) fn install_numpy_handler(py: Python<'_>) -> PyResult<bool> {
    let (set_handler, get_handler) = numpy_api(py)?;
    // SAFETY: GIL held; GetHandler returns a new reference to the current handler capsule.
    let current = unsafe { Bound::from_owned_ptr_or_err(py, get_handler())? };
    // SAFETY: a "mem_handler" capsule holds a PyDataMem_Handler that lives as long as the
    // capsule; we only read it.
    let handler = unsafe { ffi::PyCapsule_GetPointer(current.as_ptr(), CAPSULE_NAME.as_ptr()) }
        as *const DataMemHandler;
    if handler.is_null() {
        return Err(PyErr::fetch(py));
    }
    if ptr::eq(handler, &HANDLER.0) {
        return Ok(false);
    }
    if !WRAPPED_SET.load(Ordering::Acquire) {
        // SAFETY: first install, GIL held: no buffer has reached our handler yet. The
        // handler we wrap stays alive: numpy's default is static, and we keep a
        // reference to any other in PREVIOUS.
        unsafe { *WRAPPED.0.get() = (*handler).allocator };
        WRAPPED_HANDLER.store(handler.cast_mut(), Ordering::Release);
        WRAPPED_SET.store(true, Ordering::Release);
    } else if !ptr::eq(handler, WRAPPED_HANDLER.load(Ordering::Acquire)) {
        // Someone else's handler is current now: wrapping it too would need a second
        // table. Leave numpy as it is.
        return Ok(false);
    }
    // SAFETY: GIL held; the capsule points at a static handler and has no destructor.
    let ours = unsafe {
        Bound::from_owned_ptr_or_err(
            py,
            ffi::PyCapsule_New(
                ptr::from_ref(&HANDLER.0).cast_mut().cast(),
                CAPSULE_NAME.as_ptr(),
                None,
            ),
        )?
    };
    // SAFETY: GIL held; SetHandler returns a new reference to the previous handler.
    let previous = unsafe { Bound::from_owned_ptr_or_err(py, set_handler(ours.as_ptr()))? };
    let old = PREVIOUS.swap(previous.into_ptr(), Ordering::AcqRel);
    let old_ours = OURS.swap(ours.into_ptr(), Ordering::AcqRel);
    // SAFETY: GIL held; these were references we owned (or null).
    unsafe {
        ffi::Py_XDECREF(old);
        ffi::Py_XDECREF(old_ours);
    }
    Ok(true)
}

/// Puts back the handler numpy had before ours, if ours is still the current one.
#[pyfunction]
pub(crate) fn uninstall_numpy_handler(py: Python<'_>) -> PyResult<bool> {
    let previous = PREVIOUS.load(Ordering::Acquire);
    if previous.is_null() {
        return Ok(false);
    }
    let (set_handler, get_handler) = numpy_api(py)?;
    // SAFETY: GIL held; new reference.
    let current = unsafe { Bound::from_owned_ptr_or_err(py, get_handler())? };
    // SAFETY: as in `install_numpy_handler`.
    let handler = unsafe { ffi::PyCapsule_GetPointer(current.as_ptr(), CAPSULE_NAME.as_ptr()) };
    if !ptr::eq(handler.cast_const().cast(), &HANDLER.0) {
        return Ok(false);
    }
    // SAFETY: GIL held; `previous` is a reference we own; SetHandler returns a new one.
    let replaced = unsafe { set_handler(previous) };
    // SAFETY: GIL held; drop the returned reference (our capsule, also kept in OURS).
    unsafe { ffi::Py_XDECREF(replaced) };
    Ok(true)
}

/// `memtape._numpy_bridge.sync`, registered when `memtape` is imported (a strong
/// reference, or null). Nothing is imported on a start/stop path: an import there holds
/// the module's import lock, and a child forked meanwhile by another thread would wait
/// for that lock forever.
static BRIDGE_SYNC: AtomicPtr<ffi::PyObject> = AtomicPtr::new(ptr::null_mut());

/// Registers the function that `sync` calls (`memtape._numpy_bridge` does, on import).
#[pyfunction]
pub(crate) fn _set_numpy_bridge(_py: Python<'_>, sync: Bound<'_, PyAny>) {
    let old = BRIDGE_SYNC.swap(sync.into_ptr(), Ordering::AcqRel);
    // SAFETY: GIL held (the `_py` token); `old` was a strong reference we owned, or null.
    unsafe { ffi::Py_XDECREF(old) };
}

/// Tells the Python side whether any sink records now, so that it installs or removes the
/// NumPy handler. Errors are swallowed: NumPy support must never break the traced program.
pub(crate) fn sync(py: Python<'_>, active: bool) {
    let sync = BRIDGE_SYNC.load(Ordering::Acquire);
    if sync.is_null() {
        return;
    }
    // SAFETY: GIL held; `sync` is a live object (we own a reference to it); the new strong
    // reference keeps it alive even if the call registers another one.
    let sync = unsafe { Bound::from_borrowed_ptr(py, sync) };
    let _ = sync.call1((active,));
}
