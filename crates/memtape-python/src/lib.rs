//! `memtape._native`: the CPython-facing half of memtape. Everything that knows CPython
//! lives here (hooks, frame layouts, object layouts); the data structures live in
//! `memtape-core`.

// In the order an event travels: it enters through an interception (`intercept`,
// `native`), has its stack captured and is recorded (`record`, reading CPython through
// `cpython` and the thread's state through `thread`), and leaves through a sink (`sinks`);
// `session` starts, drains and stops recordings and `api` is what Python calls; `arch`
// holds what differs between processor architectures.
mod api;
mod arch;
mod cpython;
mod intercept;
mod native;
mod record;
mod session;
mod sinks;
mod thread;

use pyo3::exceptions::PyImportError;
use pyo3::prelude::*;

/// memtape's own heap is counted (see `session::process_memory`): reports tell it apart
/// from the program's memory. Not in unit tests, which count allocations their own way.
#[cfg(not(test))]
#[global_allocator]
static OWN_HEAP: session::process_memory::CountingAllocator =
    session::process_memory::CountingAllocator;

/// How this extension was built: "pgo" (profile-guided, scripts/pgo_build.sh),
/// "instrumented" (that script's counting build) or "plain"; benchmarks report it.
const BUILD_KIND: &str = match option_env!("MEMTAPE_BUILD_KIND") {
    Some(kind) => kind,
    None => "plain",
};

// The recorder relies on the GIL (free-threaded builds are refused at build time).
#[pymodule(gil_used = true)]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let running = py.version_info();
    let (major, minor) = cpython::frames::BUILT_FOR;
    if (running.major, running.minor) != (major, minor) {
        return Err(PyImportError::new_err(format!(
            "memtape._native was built for CPython {major}.{minor} but this is {}.{}; \
             reinstall memtape for this interpreter",
            running.major, running.minor
        )));
    }
    if let Err(why) = cpython::frames::init(py) {
        return Err(PyImportError::new_err(format!(
            "memtape cannot read the Python frames of this interpreter (CPython {}): {why}. \
             memtape supports the default builds of CPython 3.11 to 3.15; please report \
             this with the output of `python -VV`",
            Python::version_str()
        )));
    }
    session::fork_safety::register();
    api::c_api::export(m)?;
    m.add("BUILT_FOR", (major, minor))?;
    m.add("BUILD_KIND", BUILD_KIND)?;
    m.add_class::<api::trace_set_py::PyTraceSet>()?;
    m.add_function(wrap_pyfunction!(api::tracemalloc_api::start, m)?)?;
    m.add_function(wrap_pyfunction!(api::tracemalloc_api::stop, m)?)?;
    m.add_function(wrap_pyfunction!(api::tracemalloc_api::is_tracing, m)?)?;
    m.add_function(wrap_pyfunction!(api::tracemalloc_api::clear_traces, m)?)?;
    m.add_function(wrap_pyfunction!(
        api::tracemalloc_api::get_traceback_limit,
        m
    )?)?;
    m.add_function(wrap_pyfunction!(
        api::tracemalloc_api::get_traced_memory,
        m
    )?)?;
    m.add_function(wrap_pyfunction!(api::tracemalloc_api::reset_peak, m)?)?;
    m.add_function(wrap_pyfunction!(
        api::tracemalloc_api::get_tracemalloc_memory,
        m
    )?)?;
    m.add_function(wrap_pyfunction!(api::tracemalloc_api::_get_traces, m)?)?;
    m.add_function(wrap_pyfunction!(
        api::tracemalloc_api::_get_object_traceback,
        m
    )?)?;
    m.add_function(wrap_pyfunction!(api::tracemalloc_api::_take_trace_set, m)?)?;
    m.add_function(wrap_pyfunction!(
        api::tracemalloc_api::_reads_thread_state_directly,
        m
    )?)?;
    m.add_function(wrap_pyfunction!(api::tracemalloc_api::_frame_layout, m)?)?;
    m.add_function(wrap_pyfunction!(
        session::launcher_frames::_hide_launcher_frames,
        m
    )?)?;
    m.add_function(wrap_pyfunction!(api::event_api::record_memory_events, m)?)?;
    m.add_function(wrap_pyfunction!(
        api::event_api::is_recording_memory_events,
        m
    )?)?;
    m.add_function(wrap_pyfunction!(api::event_api::memory_event_counts, m)?)?;
    m.add_function(wrap_pyfunction!(api::event_api::get_memory_events, m)?)?;
    m.add_function(wrap_pyfunction!(api::event_api::dump_snapshot, m)?)?;
    m.add_function(wrap_pyfunction!(api::framework_api::capture_traceback, m)?)?;
    m.add_function(wrap_pyfunction!(
        api::framework_api::_traceback_stack_reads,
        m
    )?)?;
    m.add_function(wrap_pyfunction!(api::framework_api::_push_op, m)?)?;
    m.add_function(wrap_pyfunction!(api::framework_api::_pop_op, m)?)?;
    m.add_function(wrap_pyfunction!(
        api::framework_api::record_allocator_event,
        m
    )?)?;
    m.add_function(wrap_pyfunction!(api::capture_api::_start_capture, m)?)?;
    m.add_function(wrap_pyfunction!(api::capture_api::_stop_capture, m)?)?;
    m.add_function(wrap_pyfunction!(api::capture_api::_capture_series, m)?)?;
    m.add_function(wrap_pyfunction!(api::capture_api::mark, m)?)?;
    m.add_function(wrap_pyfunction!(api::own_work::_own_work_begin, m)?)?;
    m.add_function(wrap_pyfunction!(api::own_work::_call_as_program, m)?)?;
    m.add_function(wrap_pyfunction!(
        api::own_work::_call_as_program_with_floor,
        m
    )?)?;
    m.add_function(wrap_pyfunction!(api::own_work::_exec_as_program, m)?)?;
    m.add_function(wrap_pyfunction!(
        session::process_memory::_process_memory,
        m
    )?)?;
    m.add_function(wrap_pyfunction!(session::process_memory::_own_memory, m)?)?;
    m.add_function(wrap_pyfunction!(
        thread::thread_filter::_record_threads_except,
        m
    )?)?;
    m.add_function(wrap_pyfunction!(api::own_work::_work_end, m)?)?;
    m.add_function(wrap_pyfunction!(
        api::own_work::_events_or_capture_recording,
        m
    )?)?;
    m.add_function(wrap_pyfunction!(api::capture_api::native_counters, m)?)?;
    m.add("NATIVE_DOMAIN", native::NATIVE_DOMAIN)?;
    m.add_function(wrap_pyfunction!(api::mlx_api::_mlx_attach, m)?)?;
    m.add_function(wrap_pyfunction!(api::mlx_api::_mlx_detach, m)?)?;
    m.add_function(wrap_pyfunction!(api::mlx_api::_mlx_sync, m)?)?;
    m.add_function(wrap_pyfunction!(api::mlx_api::_mlx_status, m)?)?;
    m.add("MLX_DOMAIN", memtape_core::MLX_DOMAIN)?;
    m.add_function(wrap_pyfunction!(
        intercept::numpy_handler::install_numpy_handler,
        m
    )?)?;
    m.add_function(wrap_pyfunction!(
        intercept::numpy_handler::uninstall_numpy_handler,
        m
    )?)?;
    m.add_function(wrap_pyfunction!(
        intercept::numpy_handler::_set_numpy_bridge,
        m
    )?)?;
    m.add("NUMPY_DOMAIN", intercept::numpy_handler::NUMPY_DOMAIN)?;
    m.add_class::<api::capture_analysis::PyCapture>()?;
    m.add_class::<api::analysis_alongside::AnalysisAlongside>()?;
    m.add_function(wrap_pyfunction!(
        api::analysis_alongside::_analyze_alongside,
        m
    )?)?;
    m.add_function(wrap_pyfunction!(
        api::analysis_alongside::_follower_ready,
        m
    )?)?;
    m.add_class::<api::capture_follow::CaptureFollower>()?;
    m.add_class::<api::capture_live::LiveCapture>()?;
    m.add_function(wrap_pyfunction!(
        api::followed_analysis::_analyze_followed_capture,
        m
    )?)?;
    m.add_function(wrap_pyfunction!(api::report_api::analyze_capture, m)?)?;
    m.add_function(wrap_pyfunction!(api::report_api::capture_metadata, m)?)?;
    m.add(
        "CaptureFileError",
        py.get_type::<api::capture_file::CaptureFileError>(),
    )?;
    Ok(())
}
