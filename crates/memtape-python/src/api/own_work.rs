//! memtape's own work stays out of the user's recording: its API calls run with the
//! calling thread's hook mode set to [`HookMode::Untraced`], so the Python objects they
//! build (event dicts, tracebacks ids, result tuples) are never recorded. Objects handed
//! back to the user are then untracked, and their later frees are ignored.
//!
//! Python code in the `memtape` package marks its own work with the token pair
//! `_own_work_begin()` / `_work_end(token)` (both take and return only small ints, so the
//! calls themselves allocate nothing), and runs the user's program through
//! `_call_as_program`, which records exactly the call: an exception leaving the program
//! reaches memtape's frames (and gets their traceback entries) unrecorded again.

use std::sync::atomic::Ordering;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyCode, PyDict, PyTuple};
use pyo3::IntoPyObjectExt;

use crate::record::recorder::{CAPTURING, HEAP_EVENTS};
use crate::record::stack_floor;
use crate::thread::hook_mode::{self, HookMode};

/// Runs `f` and turns its result (or its error) into a Python object with the calling
/// thread's allocations unrecorded: pyo3 would otherwise build the returned object, or
/// the exception, after the guard is gone.
pub(crate) fn own_work<'py, T>(
    py: Python<'py>,
    f: impl FnOnce() -> PyResult<T>,
) -> PyResult<Bound<'py, PyAny>>
where
    T: IntoPyObject<'py>,
{
    hook_mode::untraced(|| {
        f().and_then(|value| value.into_bound_py_any(py))
            .map_err(|err| {
                // Build the exception object now, inside the guard: raised and fetched
                // back, not normalized in place (PyO3 then leaves and re-enters the
                // interpreter, which panics while it starts up: memtape can start from a
                // `.pth` file, before `Py_IsInitialized`).
                err.restore(py);
                PyErr::fetch(py)
            })
    })
}

/// The mode a token stands for.
fn mode_of(token: u8) -> PyResult<HookMode> {
    HookMode::from_code(token)
        .ok_or_else(|| PyValueError::new_err(format!("not a hook-mode token: {token}")))
}

/// Marks the calling thread as doing memtape's own work (its allocations are not
/// recorded) until `_work_end(token)`. Returns the token.
#[pyfunction]
pub(crate) fn _own_work_begin() -> u8 {
    hook_mode::set(HookMode::Untraced).code()
}

/// Calls `function(*args)` as the program's own code: the calling thread's allocations
/// are recorded during the call, whatever memtape's mode around it. Only the call itself:
/// the result or the exception is taken up afterwards, unrecorded. Positional arguments
/// only, so that the call unpacks no keywords (an allocation) before the program runs.
#[pyfunction]
#[pyo3(signature = (function, *args))]
pub(crate) fn _call_as_program<'py>(
    py: Python<'py>,
    function: &Bound<'py, PyAny>,
    args: &Bound<'py, PyTuple>,
) -> PyResult<Bound<'py, PyAny>> {
    call_as_program(py, function, args)
}

/// `_call_as_program`, with the thread's stacks captured during the call ending at the
/// calling frame while nothing but a capture file records (see
/// [`crate::record::stack_floor`]); the floor it replaced comes back when the call ends,
/// by an exception too. A function of its own rather than a keyword: a keyword beside
/// unpacked arguments (`f(*args, k=v)`) builds a dict at every call, whose free changes
/// the interpreter's free lists, and so what the program's next objects allocate.
#[pyfunction]
#[pyo3(signature = (function, *args))]
pub(crate) fn _call_as_program_with_floor<'py>(
    py: Python<'py>,
    function: &Bound<'py, PyAny>,
    args: &Bound<'py, PyTuple>,
) -> PyResult<Bound<'py, PyAny>> {
    // SAFETY: the GIL is held (`py`), so this thread has a thread state.
    let floor = unsafe { stack_floor::enter(ffi::PyThreadState_Get()) };
    let result = call_as_program(py, function, args);
    if let Some(saved) = floor {
        stack_floor::leave(saved);
    }
    result
}

/// `function(*args)` with the calling thread recording during the call only.
fn call_as_program<'py>(
    py: Python<'py>,
    function: &Bound<'py, PyAny>,
    args: &Bound<'py, PyTuple>,
) -> PyResult<Bound<'py, PyAny>> {
    let result = hook_mode::with_mode(HookMode::Idle, || {
        // SAFETY: the GIL is held (`py`); both pointers are live objects borrowed for the
        // call, and a null kwargs is allowed. Returns a new reference or null with an
        // exception set.
        unsafe { ffi::PyObject_Call(function.as_ptr(), args.as_ptr(), std::ptr::null_mut()) }
    });
    // SAFETY: `result` is the new reference PyObject_Call returned, or null with the
    // exception set, which `from_owned_ptr_or_err` fetches.
    unsafe { Bound::from_owned_ptr_or_err(py, result) }
}

/// Profile function installed by [`_exec_as_program`] until the program's first frame
/// starts: from then on the thread records (the program's own code runs), and the
/// profile function is removed, so it costs one call in all.
unsafe extern "C" fn program_started(
    _obj: *mut ffi::PyObject,
    _frame: *mut ffi::PyFrameObject,
    _what: std::os::raw::c_int,
    _arg: *mut ffi::PyObject,
) -> std::os::raw::c_int {
    hook_mode::set(HookMode::Idle);
    // SAFETY: called by the interpreter with the GIL held, as a profile function, which
    // may remove itself.
    unsafe { ffi::PyEval_SetProfile(None, std::ptr::null_mut()) };
    0
}

/// _exec_as_program(code, globals, locals=None, /)
/// ``exec(code, globals, locals)`` as the program's own code, returning the code's value
/// (``eval`` code: the expression's). The thread records from the first event of the
/// code's own frame on: what the interpreter allocates to start the frame (the function
/// object ``exec`` makes), while the caller's frame is still the innermost, is not the
/// program's and is not recorded, nor is what follows the frame. Where a profiler is
/// already set (``sys.getprofile()``), it is left in place and recording starts at the
/// call; called from code that records already, it is a plain ``exec``. Used by ``memtape run`` (runpy's ``exec``, ``-c``) and the notebook magics, so
/// that no allocation of memtape's runner, runpy or the kernel is the program's. Where the
/// recording starts here, the code's stacks end at the calling frame while only a capture
/// file records ([`stack_floor`]): the runner's frames outside it are launcher files of
/// every capture that runs code this way, which no report shows.
#[pyfunction]
#[pyo3(signature = (code, globals, locals=None, /))]
pub(crate) fn _exec_as_program<'py>(
    py: Python<'py>,
    code: &Bound<'py, PyAny>,
    globals: &Bound<'py, PyDict>,
    locals: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let prev = hook_mode::set(HookMode::Untraced);
    let started = hook_mode::untraced(|| -> PyResult<bool> {
        let code = code.cast::<PyCode>()?;
        let free: usize = code.getattr("co_freevars")?.len()?;
        if free > 0 {
            return Err(PyTypeError::new_err(
                "code object passed to exec() may not contain free variables",
            ));
        }
        // As exec() does: the globals get the builtins when they have none.
        if !globals.contains("__builtins__")? {
            // SAFETY: the GIL is held; a borrowed reference to the current builtins.
            let builtins = unsafe { Bound::from_borrowed_ptr(py, ffi::PyEval_GetBuiltins()) };
            globals.set_item("__builtins__", builtins)?;
        }
        // The caller's frame object, made now if it has none: an exception leaving the
        // code makes it otherwise, as the code's frame ends (its traceback links to it),
        // and that allocation is the runner's, not the program's.
        // SAFETY: the GIL is held; the frame is borrowed and not kept.
        let _ = unsafe { ffi::PyEval_GetFrame() };
        // Called from code that records already (a module the program imports, while
        // runpy's loading shadows the import system's exec): a plain exec.
        let profiled =
            prev == HookMode::Idle || !py.import("sys")?.getattr("getprofile")?.call0()?.is_none();
        if !profiled {
            // SAFETY: the GIL is held; the function removes itself at its first call.
            unsafe { ffi::PyEval_SetProfile(Some(program_started), std::ptr::null_mut()) };
        }
        Ok(profiled)
    });
    let profiled = match started {
        Ok(profiled) => profiled,
        Err(err) => {
            hook_mode::set(prev);
            return Err(err);
        }
    };
    if profiled {
        hook_mode::set(HookMode::Idle);
    }
    let locals = locals.unwrap_or(globals.as_any());
    // The recording starts here: the program's stacks end at the calling frame (memtape's
    // runner, the import system's or the notebook kernel's, all launcher files of the
    // capture, which no report shows), while nothing but a capture file records.
    let floor = if prev == HookMode::Idle {
        None
    } else {
        // SAFETY: the GIL is held (`py`), so this thread has a thread state.
        unsafe { stack_floor::enter(ffi::PyThreadState_Get()) }
    };
    // SAFETY: the GIL is held; `code` is a code object (checked), `globals` a dict and
    // `locals` a live object, all borrowed for the call. Returns a new reference or null
    // with an exception set.
    let result = unsafe { ffi::PyEval_EvalCode(code.as_ptr(), globals.as_ptr(), locals.as_ptr()) };
    if let Some(saved) = floor {
        stack_floor::leave(saved);
    }
    let still_waiting = !profiled && hook_mode::set(HookMode::Untraced) == HookMode::Untraced;
    if still_waiting {
        // The code never started (it raised first): take the profile function back.
        // SAFETY: the GIL is held.
        unsafe { ffi::PyEval_SetProfile(None, std::ptr::null_mut()) };
    }
    // SAFETY: `result` is the new reference PyEval_EvalCode returned, or null with the
    // exception set, which `from_owned_ptr_or_err` fetches (unrecorded: the thread is
    // untraced until the mode is restored below).
    let out = unsafe { Bound::from_owned_ptr_or_err(py, result) };
    hook_mode::set(prev);
    out
}

/// True while Python-heap events or a capture file are being recorded: memtape's
/// tracemalloc keeps its own Python-level work out of them (it stays traced for
/// tracemalloc alone, as the standard library traces its own).
#[pyfunction]
pub(crate) fn _events_or_capture_recording() -> bool {
    HEAP_EVENTS.load(Ordering::Relaxed) || CAPTURING.load(Ordering::Relaxed)
}

/// Restores the mode the thread had before the `_own_work_begin` that returned `token`.
#[pyfunction]
pub(crate) fn _work_end(token: u8) -> PyResult<()> {
    hook_mode::set(mode_of(token)?);
    Ok(())
}
