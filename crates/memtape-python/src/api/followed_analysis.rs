//! The helper's side of `memtape run`'s summary ([`super::capture_follow`]): in a process
//! of its own, it takes the capture's path from the socket, analyzes the file as it grows,
//! and, once told the capture has ended, returns the analysis that `analyze_capture(path,
//! time_window=False)` gives on the finished file. Its tables are this process' memory,
//! not the traced one's.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::os::fd::{BorrowedFd, RawFd};
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use memtape_core::capture::{CaptureError, CaptureReader, Following, ReadSummary};
use memtape_core::report::{Analysis, ReplayOptions};
use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;

use super::capture_analysis::PyCapture;
use super::capture_file::capture_error;
use super::report_api::{analyzed, import_frames};

/// The longest the reader sleeps at the end of the file before looking again (it is
/// woken at once when the capture ends).
const POLL: Duration = Duration::from_millis(50);

/// The analysis `analyze_capture(path, time_window=False)` gives, of a capture file read
/// as it grows until `finished` is set (the writer has written its last byte), looking
/// again every `poll` at most at its end: the metadata and what the reading found too.
pub(super) fn analyze_following<R: Read>(
    file: R,
    finished: Arc<AtomicBool>,
    poll: Duration,
) -> Result<(Analysis, String, ReadSummary), CaptureError> {
    analyze_input(BufReader::with_capacity(
        1 << 20,
        Following::new(file, finished, poll),
    ))
}

/// The analysis of a whole capture read from `input` (as [`analyze_following`]'s); a
/// capture held in memory is read from its bytes as they are, without the 1 MiB buffer
/// (zeroed once per reader) that reading a file as it grows wants.
pub(super) fn analyze_input<R: Read>(
    input: R,
) -> Result<(Analysis, String, ReadSummary), CaptureError> {
    let mut reader = CaptureReader::new(input)?;
    let mut analysis = Analysis::new(ReplayOptions {
        time_histogram: false,
        ..ReplayOptions::default()
    });
    let summary = reader.visit_records(&mut analysis)?;
    Ok((analysis, reader.metadata_json().to_owned(), summary))
}

/// _analyze_followed_capture(fd, imports="hide") -> Capture | None
///
/// In `memtape run`'s summary process: reads the capture's path (up to a NUL) from the
/// socket `fd`, follows the file until the socket says `F` (the capture has ended), and
/// returns its analysis. None when the socket closes before a path came; when it closes
/// before `F`, the process ends at once (nobody waits for the summary).
#[pyfunction]
#[pyo3(signature = (fd, imports="hide"))]
pub(crate) fn _analyze_followed_capture(
    py: Python<'_>,
    fd: RawFd,
    imports: &str,
) -> PyResult<Option<PyCapture>> {
    let imports = import_frames(imports)?;
    // Behind the program on a busy machine: what it has not read by the end, it reads then.
    // SAFETY: a system call about this process only; no memory is passed.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 10) };
    // SAFETY: `fd` is open for the whole call (the caller's socket, which it keeps open);
    // the borrow does not outlive the call.
    let socket = unsafe { BorrowedFd::borrow_raw(fd) }
        .try_clone_to_owned()
        .map(std::os::unix::net::UnixStream::from)
        .map_err(|e| PyOSError::new_err(format!("cannot read the capture's path: {e}")))?;
    let mut control = BufReader::new(socket);
    let mut path = Vec::new();
    control
        .read_until(0, &mut path)
        .map_err(|e| PyOSError::new_err(format!("cannot read the capture's path: {e}")))?;
    if path.pop() != Some(0) {
        return Ok(None);
    }
    let path = PathBuf::from(std::ffi::OsString::from_vec(path));
    let file = File::open(&path)
        .map_err(|e| PyOSError::new_err(format!("cannot open {}: {e}", path.display())))?;
    let finished = Arc::new(AtomicBool::new(false));
    let reader_thread = std::thread::current();
    let flag = Arc::clone(&finished);
    std::thread::Builder::new()
        .name("memtape-summary-end".into())
        .spawn(move || {
            let mut end = [0u8; 1];
            match control.read(&mut end) {
                Ok(1) if end[0] == b'F' => {
                    flag.store(true, Ordering::Release);
                    reader_thread.unpark();
                }
                // SAFETY: ends this process, which has nothing to flush: nobody waits
                // for its summary.
                _ => unsafe { libc::_exit(0) },
            }
        })
        .map_err(|e| PyOSError::new_err(format!("cannot start the summary's end watch: {e}")))?;
    let outcome = py.detach(|| analyze_following(file, finished, POLL));
    match outcome {
        Ok((analysis, metadata, summary)) => Ok(Some(analyzed(
            path,
            &[],
            analysis,
            metadata,
            summary,
            imports,
        ))),
        Err(e) => Err(capture_error(&path, &e)),
    }
}
