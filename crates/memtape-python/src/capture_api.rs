//! The capture functions Python calls (`memtape run` drives them).

use pyo3::prelude::*;

use crate::capture_sink;

/// Starts recording every allocation and free into a capture file.
#[pyfunction]
#[pyo3(signature = (path, metadata_json, min_size=0))]
pub(crate) fn _start_capture(
    py: Python<'_>,
    path: std::path::PathBuf,
    metadata_json: &str,
    min_size: u64,
) -> PyResult<()> {
    capture_sink::start(py, &path, metadata_json, min_size)
}

/// Finishes the capture file; `trailer_fields` is appended to the trailer JSON object
/// (it must start with a comma when not empty). Returns `(events, bytes written)`.
#[pyfunction]
#[pyo3(signature = (trailer_fields=""))]
pub(crate) fn _stop_capture(py: Python<'_>, trailer_fields: &str) -> PyResult<(u64, u64)> {
    capture_sink::stop(py, trailer_fields)
}

/// mark(label) -> bool: records a named moment in the running capture (for
/// `memtape diff --from LABEL`). False when no capture is running.
#[pyfunction]
pub(crate) fn mark(label: &str) -> bool {
    capture_sink::mark(label)
}
