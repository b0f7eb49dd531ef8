//! The ten functions of CPython's `_tracemalloc`, with the same behaviour, messages and
//! tuple layouts, backed by memtape's recorder.

use std::sync::atomic::Ordering;

use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use crate::api::own_work::own_work;
use crate::api::trace_set_py::{raw_traces, PyTraceSet};
use crate::api::tracemalloc_capi;
use crate::cpython::{object_block, thread_state};
use crate::intercept::{hooks, numpy_handler, ref_tracer};
use crate::native as native_memory;
use crate::record::recorder::{self, MAX_NFRAME, NFRAME, RECORDER, TRACING};
use crate::session::trace_collect;

fn parse_nframe(args: &Bound<'_, PyTuple>, kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<u32> {
    if kwargs.is_some_and(|k| !k.is_empty()) {
        return Err(PyTypeError::new_err(
            "_tracemalloc.start() takes no keyword arguments",
        ));
    }
    match args.len() {
        0 => Ok(1),
        1 => {
            let arg = args.get_item(0)?;
            let index = arg.call_method0("__index__").map_err(|_| {
                PyTypeError::new_err(format!(
                    "'{}' object cannot be interpreted as an integer",
                    arg.get_type()
                        .name()
                        .map(|n| n.to_string())
                        .unwrap_or_default()
                ))
            })?;
            let value: i64 = index.extract().unwrap_or(i64::MAX);
            if i32::try_from(value).is_err() {
                return Err(PyOverflowError::new_err(
                    "Python int too large to convert to C int",
                ));
            }
            if !(1..=i64::from(MAX_NFRAME)).contains(&value) {
                return Err(PyValueError::new_err(format!(
                    "the number of frames must be in range [1; {MAX_NFRAME}]"
                )));
            }
            Ok(value as u32)
        }
        n => Err(PyTypeError::new_err(format!(
            "start expected at most 1 argument, got {n}"
        ))),
    }
}

/// start(nframe=1, /)
/// Start tracing Python memory allocations, storing at most nframe frames per traceback.
#[pyfunction]
#[pyo3(signature = (*args, **kwargs))]
pub(crate) fn start(
    py: Python<'_>,
    args: &Bound<'_, PyTuple>,
    kwargs: Option<&Bound<'_, PyDict>>,
) -> PyResult<()> {
    let nframe = parse_nframe(args, kwargs)?;
    if TRACING.load(Ordering::Acquire) {
        return Ok(());
    }
    NFRAME.store(nframe, Ordering::Relaxed);
    numpy_handler::sync(py, true);
    hooks::install(py);
    ref_tracer::install(py);
    recorder::start_tracing();
    tracemalloc_capi::redirect();
    if native_memory::wanted_by_tracemalloc() {
        native_memory::start(native_memory::SINK_TRACEMALLOC);
    }
    Ok(())
}

/// Stop tracing Python memory allocations and clear the traces.
#[pyfunction]
pub(crate) fn stop(py: Python<'_>) {
    if !TRACING.load(Ordering::Acquire) {
        return;
    }
    native_memory::stop(native_memory::SINK_TRACEMALLOC);
    tracemalloc_capi::restore();
    let released = recorder::stop_tracing();
    ref_tracer::uninstall(py);
    if !recorder::hooks_active() {
        hooks::uninstall(py);
        numpy_handler::sync(py, false);
    }
    if let Some(codes) = released {
        codes.release(py);
    }
}

/// True if memtape is tracing Python memory allocations.
#[pyfunction]
pub(crate) fn is_tracing() -> bool {
    TRACING.load(Ordering::Acquire)
}

/// Clear the traces and the traced-memory counters (no-op when not tracing).
#[pyfunction]
pub(crate) fn clear_traces(py: Python<'_>) {
    if !TRACING.load(Ordering::Acquire) {
        return;
    }
    if let Some(codes) = recorder::clear_traces() {
        codes.release(py);
    }
}

/// The maximum number of frames stored per traceback.
#[pyfunction]
pub(crate) fn get_traceback_limit() -> u32 {
    NFRAME.load(Ordering::Relaxed)
}

/// (current, peak) traced bytes; (0, 0) when not tracing.
#[pyfunction]
pub(crate) fn get_traced_memory() -> (u64, u64) {
    let guard = RECORDER.lock();
    guard
        .as_ref()
        .filter(|r| r.tracing)
        .map_or((0, 0), |r| (r.live.current(), r.live.peak()))
}

/// Set the peak traced size to the current traced size.
#[pyfunction]
pub(crate) fn reset_peak() {
    if let Some(r) = RECORDER.lock().as_mut().filter(|r| r.tracing) {
        r.live.reset_peak();
    }
}

/// Bytes used by memtape's own tables.
#[pyfunction]
pub(crate) fn get_tracemalloc_memory() -> usize {
    RECORDER.lock().as_ref().map_or(0, |r| r.memory_bytes())
}

/// Every live trace as `(domain, size, frames, total_nframe)`, frames most recent first.
#[pyfunction]
pub(crate) fn _get_traces(py: Python<'_>) -> PyResult<Bound<'_, PyList>> {
    match trace_collect::snapshot(py) {
        Some(set) => raw_traces(py, &set),
        None => Ok(PyList::empty(py)),
    }
}

/// The frames tuple of the block holding `obj`, or None.
#[pyfunction]
pub(crate) fn _get_object_traceback<'py>(
    py: Python<'py>,
    obj: &Bound<'py, PyAny>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    tracemalloc_capi::block_frames(py, 0, object_block::block_address(obj) as u64)
}

/// All live traces as a `TraceSet` (statistics in Rust), or None when not tracing.
#[pyfunction]
pub(crate) fn _take_trace_set(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    // memtape's own object, untraced; the Python-level Snapshot built around it is
    // traced, as the standard library traces its own Snapshot construction.
    own_work(py, || {
        Ok(trace_collect::snapshot(py).map(|inner| PyTraceSet { inner }))
    })
}

/// Whether the hooks read the current thread state without a call into CPython (where
/// `arch::getter_code` knows the getter's shapes: x86-64;
/// once the hooks have been installed); for tests.
#[pyfunction]
pub(crate) fn _reads_thread_state_directly() -> bool {
    thread_state::read_directly()
}

/// The frame layout memtape reads (field -> offset, and where it came from); for tests.
#[pyfunction]
pub(crate) fn _frame_layout(py: Python<'_>) -> PyResult<Bound<'_, pyo3::types::PyDict>> {
    let out = pyo3::types::PyDict::new(py);
    if let Some((source, fields)) = crate::cpython::frames::describe() {
        out.set_item("source", source)?;
        for (name, offset) in fields {
            out.set_item(name, offset)?;
        }
    }
    Ok(out)
}
