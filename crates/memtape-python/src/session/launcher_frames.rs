//! The frames of a program launcher (`python -m memtape.tracemalloc`'s own code and
//! runpy) sit below the program's own frames in every stack it records. tracemalloc's
//! views (`_get_traces`, `_get_object_traceback`, snapshots) leave them out of the outer
//! end of each stack, keeping at least one frame, so tracebacks, their frame limit and
//! `total_nframe` are what `python -X tracemalloc` shows for the program alone.

use std::sync::Mutex;

use pyo3::prelude::*;

static LAUNCHER_FILES: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// _hide_launcher_frames(files, /)
/// Leave the outermost frames whose file is one of `files` (a directory when it ends in a
/// path separator) out of tracemalloc's tracebacks; an empty list shows them again.
#[pyfunction]
pub(crate) fn _hide_launcher_frames(files: Vec<String>) {
    *LAUNCHER_FILES.lock().unwrap_or_else(|e| e.into_inner()) = files;
}

/// The launcher files set by `_hide_launcher_frames` (empty: every frame is shown).
pub(crate) fn files() -> Vec<String> {
    LAUNCHER_FILES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
}
