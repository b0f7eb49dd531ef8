//! `memtape._native`: the CPython-facing half of memtape. Everything that knows CPython
//! lives here (hooks, frame layouts, object layouts); the data structures live in
//! `memtape-core`.

mod c_api;
mod capture;
mod capture_api;
mod capture_sink;
mod event_api;
mod fork_safety;
mod frame_resolve;
mod frames;
mod framework_api;
mod hook_mode;
mod hooks;
mod launcher_frames;
mod mlx_api;
mod native;
mod numpy_handler;
mod object_block;
mod op_context;
mod own_work;
mod recorder;
mod ref_tracer;
mod report_api;
mod spin_lock;
mod thread_id;
mod thread_state;
mod trace_collect;
mod trace_set_py;
mod tracemalloc_api;

use pyo3::exceptions::PyImportError;
use pyo3::prelude::*;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let running = py.version_info();
    let (major, minor) = frames::BUILT_FOR;
    if (running.major, running.minor) != (major, minor) {
        return Err(PyImportError::new_err(format!(
            "memtape._native was built for CPython {major}.{minor} but this is {}.{}; \
             reinstall memtape for this interpreter",
            running.major, running.minor
        )));
    }
    fork_safety::register();
    c_api::export(m)?;
    m.add("BUILT_FOR", (major, minor))?;
    m.add_class::<trace_set_py::PyTraceSet>()?;
    m.add_function(wrap_pyfunction!(tracemalloc_api::start, m)?)?;
    m.add_function(wrap_pyfunction!(tracemalloc_api::stop, m)?)?;
    m.add_function(wrap_pyfunction!(tracemalloc_api::is_tracing, m)?)?;
    m.add_function(wrap_pyfunction!(tracemalloc_api::clear_traces, m)?)?;
    m.add_function(wrap_pyfunction!(tracemalloc_api::get_traceback_limit, m)?)?;
    m.add_function(wrap_pyfunction!(tracemalloc_api::get_traced_memory, m)?)?;
    m.add_function(wrap_pyfunction!(tracemalloc_api::reset_peak, m)?)?;
    m.add_function(wrap_pyfunction!(
        tracemalloc_api::get_tracemalloc_memory,
        m
    )?)?;
    m.add_function(wrap_pyfunction!(tracemalloc_api::_get_traces, m)?)?;
    m.add_function(wrap_pyfunction!(tracemalloc_api::_get_object_traceback, m)?)?;
    m.add_function(wrap_pyfunction!(tracemalloc_api::_take_trace_set, m)?)?;
    m.add_function(wrap_pyfunction!(launcher_frames::_hide_launcher_frames, m)?)?;
    m.add_function(wrap_pyfunction!(event_api::record_memory_events, m)?)?;
    m.add_function(wrap_pyfunction!(event_api::is_recording_memory_events, m)?)?;
    m.add_function(wrap_pyfunction!(event_api::memory_event_counts, m)?)?;
    m.add_function(wrap_pyfunction!(event_api::get_memory_events, m)?)?;
    m.add_function(wrap_pyfunction!(event_api::dump_snapshot, m)?)?;
    m.add_function(wrap_pyfunction!(framework_api::capture_traceback, m)?)?;
    m.add_function(wrap_pyfunction!(framework_api::_push_op, m)?)?;
    m.add_function(wrap_pyfunction!(framework_api::_pop_op, m)?)?;
    m.add_function(wrap_pyfunction!(framework_api::record_allocator_event, m)?)?;
    m.add_function(wrap_pyfunction!(capture_api::_start_capture, m)?)?;
    m.add_function(wrap_pyfunction!(capture_api::_stop_capture, m)?)?;
    m.add_function(wrap_pyfunction!(capture_api::mark, m)?)?;
    m.add_function(wrap_pyfunction!(own_work::_own_work_begin, m)?)?;
    m.add_function(wrap_pyfunction!(own_work::_call_as_program, m)?)?;
    m.add_function(wrap_pyfunction!(own_work::_work_end, m)?)?;
    m.add_function(wrap_pyfunction!(own_work::_events_or_capture_recording, m)?)?;
    m.add_function(wrap_pyfunction!(capture_api::native_counters, m)?)?;
    m.add("NATIVE_DOMAIN", native::NATIVE_DOMAIN)?;
    m.add_function(wrap_pyfunction!(mlx_api::_mlx_attach, m)?)?;
    m.add_function(wrap_pyfunction!(mlx_api::_mlx_detach, m)?)?;
    m.add_function(wrap_pyfunction!(mlx_api::_mlx_sync, m)?)?;
    m.add_function(wrap_pyfunction!(mlx_api::_mlx_status, m)?)?;
    m.add("MLX_DOMAIN", memtape_core::MLX_DOMAIN)?;
    m.add_function(wrap_pyfunction!(numpy_handler::install_numpy_handler, m)?)?;
    m.add_function(wrap_pyfunction!(numpy_handler::uninstall_numpy_handler, m)?)?;
    m.add_function(wrap_pyfunction!(numpy_handler::_set_numpy_bridge, m)?)?;
    m.add("NUMPY_DOMAIN", numpy_handler::NUMPY_DOMAIN)?;
    m.add_class::<report_api::PyCapture>()?;
    m.add_function(wrap_pyfunction!(report_api::analyze_capture, m)?)?;
    m.add_function(wrap_pyfunction!(report_api::capture_metadata, m)?)?;
    m.add(
        "CaptureFileError",
        py.get_type::<report_api::CaptureFileError>(),
    )?;
    Ok(())
}
