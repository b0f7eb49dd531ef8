//! The framework API as Python sees it: `capture_traceback`, `op_context`'s push and
//! pop, and `record_allocator_event`, over [`crate::record::framework_events`].

use memtape_core::Action;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::IntoPyObjectExt;

use crate::api::own_work::own_work;
use crate::record::framework_events::{
    capture_traceback_now, pop_op, push_op, record_allocator_event_checked, recording_events,
    Report, FRAMEWORK_ACTIONS,
};
use crate::record::op_context::{TracebackHandle, NO_TRACEBACK};
use crate::record::recorder::hooks_active;
use crate::thread::hook_mode;

/// capture_traceback() -> int
///
/// The current Python stack as an id to hand to `op_context` later (0 while events are
/// not being recorded: then it returns at once, without looking at the stack). Ids go
/// stale when a new recording starts.
#[pyfunction]
pub(crate) fn capture_traceback(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    if !recording_events() {
        // At once, and unguarded: 0 is one of CPython's cached small ints, so nothing is
        // allocated (the thread's mode is not even looked up).
        return NO_TRACEBACK.into_bound_py_any(py);
    }
    if !hooks_active() {
        // Only framework events are recorded: no hook records the id's int, and none can
        // start to while this call holds the GIL. No guard needed.
        return capture_traceback_now().into_bound_py_any(py);
    }
    own_work(py, || Ok(capture_traceback_now()))
}

/// _traceback_stack_reads() -> int
///
/// How many times `capture_traceback` (from Python or through the C ABI) read the calling
/// thread's stack: for tests (none while no recording is on).
#[pyfunction]
pub(crate) fn _traceback_stack_reads() -> u64 {
    hook_mode::thread().map_or(0, |t| t.traceback_reads())
}

/// Enters an op context (use `memtape.op_context`).
#[pyfunction]
pub(crate) fn _push_op<'py>(
    py: Python<'py>,
    name: &str,
    traceback: TracebackHandle,
) -> PyResult<Bound<'py, PyAny>> {
    own_work(py, || Ok(push_op(name, traceback)?))
}

/// Leaves the innermost op context (use `memtape.op_context`).
#[pyfunction]
pub(crate) fn _pop_op(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    own_work(py, || Ok(pop_op()?))
}

fn whole(value: &Bound<'_, PyAny>, name: &str, max: u128) -> PyResult<u64> {
    if value.is_instance_of::<pyo3::types::PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "{name} must be an integer, not bool"
        )));
    }
    let index = value.call_method0("__index__").map_err(|_| {
        let ty = value
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default();
        PyTypeError::new_err(format!("{name} must be an integer, not {ty}"))
    })?;
    let n: i128 = index.extract().map_err(|_| {
        PyValueError::new_err(format!("{name} is out of range: expected 0 to {max}"))
    })?;
    if n < 0 {
        return Err(PyValueError::new_err(format!(
            "{name} must be >= 0, got {n}"
        )));
    }
    if n as u128 > max {
        return Err(PyValueError::new_err(format!(
            "{name} is out of range: expected 0 to {max}"
        )));
    }
    Ok(n as u64)
}

/// record_allocator_event(action, address, size, *, device=0, stream=0, requested_size=None)
///
/// Reports one caching-allocator event: AllocNew, AllocReuse, AllocMakeBuffer,
/// FreeActiveToCache, FreeActiveToOS, Release or FreeCacheToOS. A report that contradicts
/// earlier ones raises ValueError and changes nothing.
#[pyfunction]
#[pyo3(signature = (action, address, size, *, device=None, stream=None, requested_size=None))]
pub(crate) fn record_allocator_event<'py>(
    py: Python<'py>,
    action: &Bound<'py, PyAny>,
    address: &Bound<'py, PyAny>,
    size: &Bound<'py, PyAny>,
    device: Option<&Bound<'py, PyAny>>,
    stream: Option<&Bound<'py, PyAny>>,
    requested_size: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    own_work(py, || {
        report_from_python(action, address, size, device, stream, requested_size)
    })
}

fn report_from_python(
    action: &Bound<'_, PyAny>,
    address: &Bound<'_, PyAny>,
    size: &Bound<'_, PyAny>,
    device: Option<&Bound<'_, PyAny>>,
    stream: Option<&Bound<'_, PyAny>>,
    requested_size: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    let name: String = action.extract().map_err(|_| {
        let ty = action
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default();
        PyTypeError::new_err(format!("action must be a str, not {ty}"))
    })?;
    let action = Action::from_name(&name)
        .filter(|a| !a.is_python_heap())
        .ok_or_else(|| {
            PyValueError::new_err(format!(
                "unknown allocator action '{name}': expected one of {FRAMEWORK_ACTIONS}"
            ))
        })?;
    let addr = whole(address, "address", u128::from(u64::MAX))?;
    let size = whole(size, "size", (1u128 << 53) - 1)?;
    let device = match device {
        Some(d) => whole(d, "device", i32::MAX as u128)? as i32,
        None => 0,
    };
    let stream = match stream {
        Some(s) => whole(s, "stream", (1u128 << 53) - 1)?,
        None => 0,
    };
    let requested_size = match requested_size {
        Some(r) if !r.is_none() => Some(whole(r, "requested_size", (1u128 << 53) - 1)?),
        _ => None,
    };
    Ok(record_allocator_event_checked(&Report {
        action,
        addr,
        size,
        requested_size,
        device,
        stream,
    })?)
}
