//! A capture analysed while it is recorded, by a thread of memtape's own in the same
//! process: the pytest plugin's capture of one test's call (HISTORY section 47).
//!
//! A test that runs for long has its capture read block by block as the writer flushes
//! it, on the other CPU, so that when the test ends only the last blocks are left to read
//! (`test_primes` of more-itertools: 207 M events, 3 s of analysis that the run used to
//! wait for after the test). A short test's capture is read at the end on the calling
//! thread, as `analyze_capture` reads it: the follower starts only once a capture has run
//! [`SHORT`], so the many tests of a few milliseconds cost no hand-off. Either way the
//! result is `analyze_capture(path, time_window=False)`'s: the same reader and analysis.
//!
//! One follower thread per process, started before the first capture and kept (a native
//! thread: the program's `threading.enumerate()` does not list it). Handing it a capture
//! wakes nothing: it looks at its queue every [`IDLE_LOOK`] (a wake-up per test, and the
//! caller's for the end of a short one, cost a tiny test more than its reading); only a
//! capture it reads is woken for at the end.
//! A forked child has no follower: its own captures start one of their own, and a capture
//! its parent started is read at the end on the calling thread. The follower never takes
//! the GIL and touches nothing of the program's.

use std::collections::VecDeque;
use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::Thread;
use std::time::{Duration, Instant};

use memtape_core::capture::{CaptureError, ReadSummary};
use memtape_core::report::{Analysis, ImportFrames};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

use super::capture_analysis::PyCapture;
use super::capture_file::capture_error;
use super::followed_analysis::{analyze_following, analyze_input};
use super::report_api::{analyze_capture, analyzed, import_frames};
use crate::session::capture_output;
use crate::session::signal_mask::spawn_own_thread;
use crate::thread::hook_mode::HookMode;

/// How long a capture runs before the follower starts reading it; a shorter one is read
/// by the caller once it has ended.
const SHORT: Duration = Duration::from_millis(20);

/// The longest the follower sleeps at the end of the file before looking again (it is
/// woken at once when the capture ends).
const POLL: Duration = Duration::from_millis(20);

/// How often the follower, with no capture to read, looks for one that has run
/// [`SHORT`].
const IDLE_LOOK: Duration = Duration::from_millis(10);

/// A job's state: nobody reads it yet; the caller reads it (it ended before the follower
/// came to it); the follower reads it.
const WAITING: u8 = 0;
const BY_CALLER: u8 = 1;
const BY_FOLLOWER: u8 = 2;

type Outcome = Result<(Analysis, String, ReadSummary), CaptureError>;

/// One capture to follow.
struct Job {
    path: PathBuf,
    started: Instant,
    state: AtomicU8,
    /// Set once the capture's writer has written its last byte.
    finished: Arc<AtomicBool>,
    outcome: Mutex<Option<Outcome>>,
    done: Condvar,
    /// Set when the capture was read from memory: it never made its file, and there is
    /// none to remove.
    read_from_memory: AtomicBool,
}

/// What the follower is handed: a capture to follow, or a file to remove (a capture
/// whose analysis is over, removed off the program's thread).
enum Task {
    Follow(Arc<Job>),
    Remove(PathBuf),
}

/// The tasks handed to the follower, oldest first.
type Queue = Arc<Mutex<VecDeque<Task>>>;

/// The process' follower thread.
struct Follower {
    pid: u32,
    jobs: Queue,
    thread: Thread,
}

static FOLLOWER: Mutex<Option<Follower>> = Mutex::new(None);

/// This process' follower's job queue and thread, started if need be (again in a forked
/// child: the parent's thread is not in it); None when no thread could be started.
fn follower() -> Option<(Queue, Thread)> {
    let mut follower = FOLLOWER.lock().unwrap_or_else(PoisonError::into_inner);
    let pid = std::process::id();
    if follower.as_ref().is_some_and(|f| f.pid != pid) {
        // The parent's, copied by a fork: its thread is not in this process.
        std::mem::forget(follower.take());
    }
    if follower.is_none() {
        let jobs: Queue = Arc::default();
        let queue = Arc::clone(&jobs);
        // Untraced from its first own allocation; but a new thread's start allocates in
        // libc before that (its thread-locals' destructors: 32 bytes), which a capture
        // already recording would count: hence [`_follower_ready`] before the capture.
        let thread = spawn_own_thread("memtape-follow", HookMode::Untraced, move || {
            follow_each(queue)
        })
        .ok()?
        .thread()
        .clone();
        *follower = Some(Follower { pid, jobs, thread });
    }
    follower
        .as_ref()
        .map(|f| (f.jobs.clone(), f.thread.clone()))
}

/// Hands `job` to this process' follower (without waking it) and returns the follower's
/// thread; None when there is no follower.
fn hand_over(job: &Arc<Job>) -> Option<Thread> {
    let (jobs, thread) = follower()?;
    jobs.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push_back(Task::Follow(Arc::clone(job)));
    Some(thread)
}

/// Removes the file at `path`: on this process' follower thread at its next look when
/// there is one, else now.
fn remove_later(path: PathBuf) {
    let follower = FOLLOWER.lock().unwrap_or_else(PoisonError::into_inner);
    match follower.as_ref().filter(|f| f.pid == std::process::id()) {
        Some(f) => f
            .jobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push_back(Task::Remove(path)),
        None => {
            drop(follower);
            let _ = std::fs::remove_file(path);
        }
    }
}

/// _follower_ready() -> bool
///
/// Starts this process' follower thread if it is not running, before a capture whose
/// analysis will go alongside it starts (so that nothing of the thread's start is
/// recorded); whether it runs.
#[pyfunction]
pub(crate) fn _follower_ready() -> bool {
    follower().is_some()
}

/// The follower's loop: each job, once it has run [`SHORT`] and the caller has not taken
/// it, is read to its end.
fn follow_each(queue: Queue) -> ! {
    loop {
        let next = queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop_front();
        let job = match next {
            Some(Task::Follow(job)) => job,
            Some(Task::Remove(path)) => {
                let _ = std::fs::remove_file(path); // gone already: nothing to do
                continue;
            }
            None => {
                std::thread::park_timeout(IDLE_LOOK);
                continue;
            }
        };
        let due = job.started + SHORT;
        loop {
            if job.state.load(Ordering::Acquire) != WAITING {
                break;
            }
            let now = Instant::now();
            if now >= due {
                break;
            }
            std::thread::park_timeout(due - now);
        }
        if job
            .state
            .compare_exchange(WAITING, BY_FOLLOWER, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            continue;
        }
        let outcome = read_following(&job);
        *job.outcome.lock().unwrap_or_else(PoisonError::into_inner) = Some(outcome);
        job.done.notify_all();
    }
}

/// The analysis of the job's file, read as it grows until the writer has finished; or
/// of its bytes, when the capture ended in memory (its file was never made).
fn read_following(job: &Job) -> Outcome {
    loop {
        // Finished is read before the file is looked for: a capture that ended in memory
        // had handed its bytes over by then.
        let finished = job.finished.load(Ordering::Acquire);
        match File::open(&job.path) {
            Ok(file) => return analyze_following(file, Arc::clone(&job.finished), POLL),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !finished => {
                // Held in memory so far: it makes its file once it grows, or ends there.
                std::thread::park_timeout(POLL);
            }
            Err(source) => {
                return match capture_output::take_finished(&job.path) {
                    Some(bytes) => analyze_in_memory(job, &bytes),
                    None => Err(CaptureError::Io { offset: 0, source }),
                };
            }
        }
    }
}

/// The analysis of `job`'s capture, which ended in memory (`bytes`).
fn analyze_in_memory(job: &Job, bytes: &[u8]) -> Outcome {
    job.read_from_memory.store(true, Ordering::Release);
    analyze_input(bytes)
}

/// _analyze_alongside(path) -> AnalysisAlongside
///
/// Starts following the capture being written to `path` (the capture has created it);
/// `result()` once the capture has stopped returns what `analyze_capture(path,
/// time_window=False)` would.
#[pyfunction]
pub(crate) fn _analyze_alongside(path: PathBuf) -> AnalysisAlongside {
    let job = Arc::new(Job {
        path,
        started: Instant::now(),
        state: AtomicU8::new(WAITING),
        finished: Arc::new(AtomicBool::new(false)),
        outcome: Mutex::new(None),
        done: Condvar::new(),
        read_from_memory: AtomicBool::new(false),
    });
    let follower = hand_over(&job);
    if follower.is_none() {
        job.state.store(BY_CALLER, Ordering::Release);
    }
    AnalysisAlongside {
        job,
        follower,
        pid: std::process::id(),
        ended: false,
    }
}

/// A capture's analysis made alongside its recording (see [`_analyze_alongside`]).
#[pyclass(name = "AnalysisAlongside", module = "memtape._native")]
pub(crate) struct AnalysisAlongside {
    job: Arc<Job>,
    follower: Option<Thread>,
    /// The process that handed the job over (a forked child's copy reads for itself).
    pid: u32,
    ended: bool,
}

impl AnalysisAlongside {
    /// Tells the follower that the file is whole, and wakes it if it reads the file.
    fn end_following(&mut self) {
        if !self.ended {
            self.ended = true;
            self.job.finished.store(true, Ordering::Release);
            if let Some(thread) = &self.follower {
                if self.job.state.load(Ordering::Acquire) == BY_FOLLOWER {
                    thread.unpark();
                }
            }
        }
    }

    fn analysis(&mut self, py: Python<'_>, imports: &str) -> PyResult<PyCapture> {
        if self.ended {
            return Err(PyRuntimeError::new_err("this analysis' result was taken"));
        }
        let imports_mode = import_frames(imports)?;
        let by_follower = self.pid == std::process::id()
            && self
                .job
                .state
                .compare_exchange(WAITING, BY_CALLER, Ordering::AcqRel, Ordering::Acquire)
                .is_err_and(|state| state == BY_FOLLOWER);
        self.end_following();
        let job = Arc::clone(&self.job);
        if !by_follower {
            // Short (or in a forked child): read here, as `analyze_capture` reads it.
            match capture_output::take_finished(&job.path) {
                Some(bytes) => {
                    let outcome = py.detach(|| analyze_in_memory(&job, &bytes));
                    return self.answer(outcome, imports_mode);
                }
                None => {
                    return analyze_capture(py, job.path.clone(), Vec::new(), None, false, imports)
                }
            }
        }
        let outcome = py.detach(move || {
            let mut outcome = job.outcome.lock().unwrap_or_else(PoisonError::into_inner);
            loop {
                if let Some(done) = outcome.take() {
                    return done;
                }
                outcome = job
                    .done
                    .wait(outcome)
                    .unwrap_or_else(PoisonError::into_inner);
            }
        });
        self.answer(outcome, imports_mode)
    }

    fn answer(&self, outcome: Outcome, imports: ImportFrames) -> PyResult<PyCapture> {
        match outcome {
            Ok((analysis, metadata, summary)) => Ok(analyzed(
                self.job.path.clone(),
                &[],
                analysis,
                metadata,
                summary,
                imports,
            )),
            Err(e) => Err(capture_error(&self.job.path, &e)),
        }
    }
}

#[pymethods]
impl AnalysisAlongside {
    /// True when the follower thread read the capture (it ran long enough), False when
    /// the caller reads it (or has not asked yet and the follower has not come to it).
    #[getter]
    fn followed(&self) -> bool {
        self.job.state.load(Ordering::Acquire) == BY_FOLLOWER
    }

    /// result(imports="hide", remove=False) -> Capture
    ///
    /// The capture's analysis; call it once the capture has stopped (its writer has
    /// written the last byte). Waits for the follower without the GIL. `remove`: the file
    /// is removed once read (or unreadable), by the follower thread (soon after: it costs
    /// the caller nothing) or here when there is none.
    #[pyo3(signature = (imports="hide", remove=false))]
    fn result(&mut self, py: Python<'_>, imports: &str, remove: bool) -> PyResult<PyCapture> {
        let analysis = self.analysis(py, imports);
        // The analysis is over: a capture read from memory made no file.
        if remove && !self.job.read_from_memory.load(Ordering::Acquire) {
            remove_later(self.job.path.clone());
        }
        analysis
    }
}

impl Drop for AnalysisAlongside {
    /// Dropped without its result (the capture's stop failed): the follower must not wait
    /// for bytes that will never come.
    fn drop(&mut self) {
        self.job.state.fetch_max(BY_CALLER, Ordering::AcqRel);
        self.end_following();
    }
}
