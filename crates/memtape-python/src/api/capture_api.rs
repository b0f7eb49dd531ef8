//! The capture functions Python calls (`memtape run` drives them).

use pyo3::prelude::*;

use crate::api::own_work::own_work;
use crate::native as native_memory;
use crate::session::{capture_session, process_memory};

/// Whether the running capture asked for native stacks.
static NATIVE_STACKS_ON: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Starts recording every allocation and free into a capture file (with the native
/// stack of each allocation too when `native_stacks`). `in_memory`: the capture is held
/// in memory until it grows past 1 MiB, and one that ends smaller never makes its file:
/// only `_analyze_alongside(path)`'s result reads it then (the pytest plugin's capture of
/// a test whose file is not kept).
#[pyfunction]
#[pyo3(signature = (path, metadata_json, min_size=0, native=false, native_stacks=false, in_memory=false))]
pub(crate) fn _start_capture<'py>(
    py: Python<'py>,
    path: std::path::PathBuf,
    metadata_json: &str,
    min_size: u64,
    native: bool,
    native_stacks: bool,
    in_memory: bool,
) -> PyResult<Bound<'py, PyAny>> {
    own_work(py, || {
        capture_session::start(py, &path, metadata_json, min_size, in_memory)?;
        if native_stacks {
            native_memory::unwind::native_stacks::enable();
            NATIVE_STACKS_ON.store(true, std::sync::atomic::Ordering::Release);
        }
        // Where libc cannot be hooked the capture records the Python heap only; the
        // trailer says so (no patched slots).
        if native {
            native_memory::start(native_memory::SINK_CAPTURE);
        }
        Ok(())
    })
}

/// Finishes the capture file, noting how the program ended (`exit`: "normal",
/// "exception" or "signal", and its exit status; None where there is none to give: an
/// attached process goes on running) in the trailer, with the process' memory now unless
/// `process_memory` is false (the pytest plugin's capture per test, read and deleted at
/// once: the reading costs more than a tiny test's capture). Returns `(events, bytes
/// written)`. Builds the trailer in Rust: nothing is allocated on the Python heap while
/// the capture still records.
#[pyfunction]
#[pyo3(signature = (exit="normal", exit_code=Some(0), process_memory=true))]
pub(crate) fn _stop_capture(
    py: Python<'_>,
    exit: &str,
    exit_code: Option<i64>,
    process_memory: bool,
) -> PyResult<(u64, u64)> {
    let exit = serde_json::Value::from(exit);
    let exit_code = serde_json::Value::from(exit_code);
    let (slots, unknown_frees, _, _) = native_memory::counters();
    let reentered = native_memory::reentered();
    let private: Vec<serde_json::Value> = if slots > 0 {
        native_memory::private_allocators()
            .into_iter()
            .map(|p| serde_json::json!({"path": p.path, "allocator": p.allocator, "symbol": p.symbol}))
            .collect()
    } else {
        Vec::new()
    };
    let private = serde_json::Value::from(private);
    if NATIVE_STACKS_ON.swap(false, std::sync::atomic::Ordering::AcqRel) {
        native_memory::unwind::native_stacks::disable();
    }
    native_memory::stop(native_memory::SINK_CAPTURE);
    let (rss_at_end, max_rss) = if process_memory {
        let (rss_at_end, peak_rss) = process_memory::reading_json_and_peak();
        (
            rss_at_end.unwrap_or_else(|| "null".to_owned()),
            max_rss_bytes(peak_rss).to_string(),
        )
    } else {
        ("null".to_owned(), "null".to_owned())
    };
    capture_session::stop(
        py,
        &format!(
            ", \"exit\": {exit}, \"exit_code\": {exit_code}, \"max_rss_bytes\": {max_rss}, \
             \"rss_at_end\": {rss_at_end}, \"memtape_own_peak_bytes\": {}, \
             \"native\": {{\"patched_slots\": {slots}, \"unknown_frees\": {unknown_frees}, \
             \"missed_reentrant\": {reentered}, \"private_allocators\": {private}}}",
            process_memory::own_growth_at_peak()
        ),
    )
}

/// _capture_series(on): while on, one capture follows another (the pytest plugin's, a
/// test after another): native memory's slots stay pointed at the hooks between them
/// (passing every call through while nothing records) and the writer thread waits for
/// the next capture, instead of both being set up and taken down at each. Off: the slots
/// are restored and the thread ends, now or when the running capture stops.
#[pyfunction]
pub(crate) fn _capture_series(py: Python<'_>, on: bool) {
    capture_session::keep_writer_thread(py, on);
    native_memory::linger(on);
}

/// mark(label) -> bool: records a named moment in the running capture (for
/// `memtape diff --from LABEL`). False when no capture is running.
#[pyfunction]
pub(crate) fn mark(label: &str) -> bool {
    capture_session::mark(label)
}

/// native_counters() -> (patched slots, unknown frees, live native bytes, peak native
/// bytes): how native tracing is doing.
#[pyfunction]
pub(crate) fn native_counters() -> (usize, u64, u64, u64) {
    native_memory::counters()
}

/// The process' peak resident set size so far, in bytes (0 if unknown): this image's
/// (`VmHWM`) where the kernel says, else `getrusage`'s.
fn max_rss_bytes(peak_rss: Option<u64>) -> u64 {
    if let Some(peak) = peak_rss {
        return peak;
    }
    // SAFETY: getrusage fills the struct it is given; no other precondition.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid, writable rusage.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return 0;
    }
    // Linux reports kilobytes.
    u64::try_from(usage.ru_maxrss).unwrap_or(0) * 1024
}
