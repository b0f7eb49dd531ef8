//! `memtape run`'s end-of-run summary without a second pass over the file: a thread of
//! memtape's own analyzes the capture while the program runs, reading each block as the
//! flusher writes it ([`Following`]). When the program ends, only the last blocks are left
//! to read, and the analysis is the one `analyze_capture` gives on the finished file.
//!
//! The thread is started before the capture, as memtape's other threads are
//! ([`spawn_own_thread`]: no asynchronous signals, its start-up over while nothing is
//! traced), then handed the file once the capture has created it. Nothing it allocates or
//! frees is recorded. It costs a share of a second CPU
//! and the analysis' memory (the live blocks' table) in the traced process.

use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use memtape_core::capture::{CaptureError, CaptureReader, Following, ReadSummary};
use memtape_core::report::{Analysis, ReplayOptions};
use pyo3::exceptions::{PyOSError, PyRuntimeError};
use pyo3::prelude::*;

use super::capture_analysis::PyCapture;
use super::capture_file::capture_error;
use super::report_api::{analyzed, import_frames};
use crate::session::signal_mask::spawn_own_thread;
use crate::thread::hook_mode::HookMode;

/// The longest the thread sleeps at the end of the file before looking again (it is
/// woken at once when the capture ends).
const POLL: Duration = Duration::from_millis(50);

/// What the thread read: the analysis, the header's metadata and how the file ended.
type Analyzed = Result<(Analysis, String, ReadSummary), CaptureError>;

/// The summary's analysis, following a capture file while it is written.
#[pyclass(name = "CaptureFollower", module = "memtape._native")]
pub(crate) struct CaptureFollower {
    /// Hands the opened file to the thread (dropped: the thread ends without reading).
    start: Option<SyncSender<File>>,
    /// Set once the writer has written its last byte.
    finished: Arc<AtomicBool>,
    thread: Option<JoinHandle<Option<Analyzed>>>,
    /// The process that started the thread (a forked child has no such thread).
    pid: u32,
}

/// The thread: it waits for the file, then analyzes it as it grows. `None`: no file came.
fn follow(file: Receiver<File>, finished: Arc<AtomicBool>) -> Option<Analyzed> {
    // Behind the program on a busy machine: what it has not read by the end, it reads
    // then, as the summary did before it.
    // SAFETY: two system calls about this thread only; no memory is passed.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 10) };
    let file = file.recv().ok()?;
    let input = BufReader::with_capacity(1 << 20, Following::new(file, finished, POLL));
    Some((|| {
        let mut reader = CaptureReader::new(input)?;
        let options = ReplayOptions {
            time_histogram: false,
            ..ReplayOptions::default()
        };
        let mut analysis = Analysis::new(options);
        let summary = reader.visit_records(&mut analysis)?;
        Ok((analysis, reader.metadata_json().to_owned(), summary))
    })())
}

#[pymethods]
impl CaptureFollower {
    /// Starts the thread; it waits for [`Self::follow`].
    #[new]
    fn new() -> PyResult<Self> {
        let (start, file) = sync_channel(1);
        let finished = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&finished);
        // memtape's own module is not among the libraries whose allocations are followed;
        // should any call of this thread reach a hook all the same, it passes through.
        let thread = spawn_own_thread("memtape-summary", HookMode::InAllocHook, move || {
            follow(file, flag)
        })
        .map_err(|e| PyOSError::new_err(format!("cannot start the summary thread: {e}")))?;
        Ok(Self {
            start: Some(start),
            finished,
            thread: Some(thread),
            pid: std::process::id(),
        })
    }

    /// Begins reading `path`, the capture file being written.
    fn follow(&mut self, path: PathBuf) -> PyResult<()> {
        let file = File::open(&path)
            .map_err(|e| PyOSError::new_err(format!("cannot open {}: {e}", path.display())))?;
        // A pipe or a device read here would take bytes from its reader, not follow them.
        if !file.metadata().is_ok_and(|m| m.is_file()) {
            return Err(PyOSError::new_err(format!(
                "{} is not a regular file: the summary reads it at the end",
                path.display()
            )));
        }
        let start = self
            .start
            .take()
            .ok_or_else(|| PyRuntimeError::new_err("the follower already follows a file"))?;
        start
            .send(file)
            .map_err(|_| PyRuntimeError::new_err("the summary thread has ended"))
    }

    /// The analysis of the file, once the capture has ended (its writer has written its
    /// last byte): reads what is left and returns what `analyze_capture(path,
    /// time_window=False, imports=imports)` returns, the file named `path` in it.
    #[pyo3(signature = (path, *, imports="hide"))]
    fn finish(&mut self, py: Python<'_>, path: PathBuf, imports: &str) -> PyResult<PyCapture> {
        let imports = import_frames(imports)?;
        self.finished.store(true, Ordering::Release);
        self.start = None;
        let thread = self
            .thread
            .take()
            .filter(|_| self.pid == std::process::id())
            .ok_or_else(|| PyRuntimeError::new_err("the summary thread is not running here"))?;
        thread.thread().unpark();
        let outcome = py
            .detach(|| thread.join())
            .map_err(|_| PyRuntimeError::new_err("the summary thread failed"))?;
        match outcome {
            None => Err(PyRuntimeError::new_err("the follower was given no file")),
            Some(Err(e)) => Err(capture_error(&path, &e)),
            Some(Ok((analysis, metadata, summary))) => {
                Ok(analyzed(path, &[], analysis, metadata, summary, imports))
            }
        }
    }
}

impl Drop for CaptureFollower {
    fn drop(&mut self) {
        // Unfinished (the summary was not printed): let the thread end on its own.
        self.finished.store(true, Ordering::Release);
        self.start = None;
        if let Some(thread) = self.thread.take() {
            if self.pid == std::process::id() {
                thread.thread().unpark();
            } else {
                // A forked child's copy names a thread of the parent's.
                std::mem::forget(thread);
            }
        }
    }
}
