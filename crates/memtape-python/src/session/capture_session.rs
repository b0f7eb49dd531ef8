//! A capture file's session: starting it (the file, the flusher thread, the hooks), the
//! flusher that writes full blocks without the lock or the GIL (so a killed process leaves
//! every flushed block readable), marks, stopping it, and a forked child's share.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use memtape_core::capture::{CaptureFileWriter, Journal, JournalWriter};
use pyo3::exceptions::{PyOSError, PyRuntimeError};
use pyo3::prelude::*;

use super::capture_output::CaptureOutput;
use super::signal_mask::spawn_own_thread;
use super::spare_buffers;
use super::stack_resolution::{self, queue_resolution, resolve_new_stacks};
use crate::intercept::{hooks, numpy_handler};
use crate::record::recorder::{self, with_recorder, RECORDER};
use crate::sinks::capture_sink::CaptureSink;
use crate::sinks::flusher_wake::{wake, Wake};
use crate::sinks::journal_backlog;
use crate::thread::hook_mode::HookMode;
use crate::thread::thread_id;

/// How often the flusher looks at the journal when nothing wakes it, and the longest a
/// record waits in memory before its block is written (what a killed process loses).
const FLUSH_INTERVAL: Duration = Duration::from_millis(25);
/// Raw bytes of a block. Larger blocks compress better: 1 MiB against 256 KiB made
/// alloc_heavy's capture 7 % smaller.
const BLOCK_TARGET: usize = 1024 * 1024;

type FileWriter = JournalWriter<CaptureOutput>;

/// The running capture's writer thread.
enum Flusher {
    /// A thread of the capture's own, joined at stop.
    Own {
        handle: JoinHandle<std::io::Result<FileWriter>>,
        pid: u32,
    },
    /// The kept thread ([`WORKER`]), which hands the writer back at stop.
    Kept { pid: u32 },
}

impl Flusher {
    fn pid(&self) -> u32 {
        match self {
            Flusher::Own { pid, .. } | Flusher::Kept { pid } => *pid,
        }
    }
}

/// A writer thread kept from one capture to the next while [`KEEP_WORKER`] is set (the
/// pytest plugin's capture per test), instead of a thread started and joined for each
/// capture. The capture's writer lies in `slot` while it records: the thread takes the
/// journal and writes under the slot's lock at each look, and the capture's stop takes
/// the writer out of it, without waking the thread and waiting for its answer (a round
/// trip between two threads, which a tiny test's whole capture cost less than).
struct Worker {
    slot: Arc<Mutex<Slot>>,
    ending: Arc<AtomicBool>,
    handle: JoinHandle<()>,
    pid: u32,
}

/// What the kept writer thread holds between captures and during one.
enum Slot {
    /// No capture records.
    Idle,
    /// A capture records: its writer, and since when records have been held unwritten.
    Writing(Box<FileWriter>, Option<Instant>),
    /// The capture's writing failed (disk full, the file gone): the capture stopped.
    Failed(std::io::Error),
}

static FLUSHER: Mutex<Option<Flusher>> = Mutex::new(None);
static WORKER: Mutex<Option<Worker>> = Mutex::new(None);
static KEEP_WORKER: AtomicBool = AtomicBool::new(false);
static FAILURE: Mutex<Option<String>> = Mutex::new(None);
static CAPTURE_PID: AtomicU32 = AtomicU32::new(0);

/// Takes the journal at each look (every `FLUSH_INTERVAL`, or when the hooks wake it for
/// a full one) and encodes it. A block is written when it reaches `BLOCK_TARGET`, at each
/// look the timer made, and once its first records have waited `FLUSH_INTERVAL`.
fn flusher_loop(writer: FileWriter, wake: Arc<Wake>) -> std::io::Result<FileWriter> {
    let mut journal = spare_buffers::journal();
    let written = flush_until_stopped(writer, &wake, &mut journal);
    spare_buffers::give_journal(journal);
    written
}

fn flush_until_stopped(
    mut writer: FileWriter,
    wake: &Wake,
    journal: &mut Journal,
) -> std::io::Result<FileWriter> {
    let mut held_since: Option<Instant> = None;
    loop {
        let (woken, stopping) = wait_for_look(wake);
        look(&mut writer, journal, &mut held_since, !woken || stopping)?;
        if stopping {
            return Ok(writer);
        }
    }
}

/// Waits until the hooks wake the flusher for a full journal, a stop asks for the last
/// look, or `FLUSH_INTERVAL` has passed; returns `(woken, stopping)`.
fn wait_for_look(wake: &Wake) -> (bool, bool) {
    let guard = wake.flag.lock().unwrap_or_else(|e| e.into_inner());
    let (mut guard, _) = wake
        .cond
        .wait_timeout_while(guard, FLUSH_INTERVAL, |f| !f.0 && !f.1)
        .unwrap_or_else(|e| e.into_inner());
    let woken = guard.0;
    guard.0 = false;
    (woken, guard.1)
}

/// One look: takes what the hooks appended to the capture's journal since the last one
/// (nothing, when no capture records) into `journal` (empty, and left empty), and
/// encodes and writes it ([`write_journal`]). On a write error the capture stops, the
/// program goes on.
fn look(
    writer: &mut FileWriter,
    journal: &mut Journal,
    held_since: &mut Option<Instant>,
    look_ends: bool,
) -> std::io::Result<()> {
    let unresolved = {
        let mut guard = RECORDER.lock();
        match guard.as_mut() {
            Some(rec) => {
                let len = rec.stacks.len();
                match rec.capture.as_mut() {
                    Some(sink) => {
                        sink.take_journal(journal);
                        sink.resolved_upto() < len
                    }
                    None => false,
                }
            }
            None => false,
        }
    };
    if unresolved {
        queue_resolution();
    }
    let written = write_journal(writer, journal, held_since, look_ends);
    journal.clear();
    if written.is_err() {
        // Disk full or gone: stop capturing, keep the program running.
        with_recorder(|rec| rec.capture = None);
        recorder::publish();
    }
    written
}

/// The kept writer thread ([`Worker`]): a look at each wake-up while `slot` holds a
/// capture's writer, until `ending`.
fn worker_loop(slot: &Mutex<Slot>, ending: &AtomicBool, wake: &Wake) {
    let mut journal = spare_buffers::journal();
    while !ending.load(Ordering::Acquire) {
        let (woken, _) = wait_for_look(wake);
        let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
        if let Slot::Writing(writer, held_since) = &mut *slot {
            if let Err(e) = look(writer, &mut journal, held_since, !woken) {
                *slot = Slot::Failed(e);
            }
        }
    }
    spare_buffers::give_journal(journal);
}

/// Encodes `journal`, and writes the block being filled when `look_ends`
/// (a look the timer made, or the last) or its records have waited `FLUSH_INTERVAL`.
fn write_journal(
    writer: &mut FileWriter,
    journal: &Journal,
    held_since: &mut Option<Instant>,
    look_ends: bool,
) -> std::io::Result<()> {
    let before = writer.bytes_written();
    writer.add(journal)?;
    if writer.bytes_written() != before {
        *held_since = None; // a full block went out: what is held is newer
    }
    if !writer.holds_records() {
        *held_since = None;
        return Ok(());
    }
    let since = *held_since.get_or_insert_with(Instant::now);
    if look_ends || since.elapsed() >= FLUSH_INTERVAL {
        writer.flush_block()?;
        *held_since = None;
    }
    Ok(())
}

/// Starts capturing to `path` (created or truncated) with the given metadata; `in_memory`:
/// held in memory until it grows large (see [`CaptureOutput`]).
pub(crate) fn start(
    py: Python<'_>,
    path: &std::path::Path,
    metadata_json: &str,
    min_size: u64,
    in_memory: bool,
) -> PyResult<()> {
    if with_recorder(|rec| rec.capture.is_some()) {
        return Err(PyRuntimeError::new_err(
            "a capture is already being recorded in this process",
        ));
    }
    if let Some(released) = recorder::forget_stacks_for_capture() {
        released.release(py);
    }
    super::process_memory::reset_own_peak();
    let output = if in_memory {
        CaptureOutput::in_memory(path)
    } else {
        CaptureOutput::create(path)
            .map_err(|e| PyOSError::new_err(format!("cannot create {}: {e}", path.display())))?
    };
    // Each block and the trailer go out whole (the writer frames them first): the buffer
    // holds the header only.
    let file = CaptureFileWriter::new(output, metadata_json)
        .map_err(|e| PyOSError::new_err(format!("cannot write {}: {e}", path.display())))?;
    let writer = match spare_buffers::encoder() {
        Some(encoder) => JournalWriter::with_encoder(file, BLOCK_TARGET, encoder),
        None => JournalWriter::new(file, BLOCK_TARGET),
    };
    *FAILURE.lock().unwrap_or_else(|e| e.into_inner()) = None;
    {
        let mut f = wake().flag.lock().unwrap_or_else(|e| e.into_inner());
        *f = (false, false);
    }
    let pid = std::process::id();
    let flusher = if KEEP_WORKER.load(Ordering::Acquire) {
        hand_to_worker(writer)?;
        Flusher::Kept { pid }
    } else {
        let wake = Arc::clone(wake());
        // Native tracing may start right after this: the writer thread's own start-up
        // allocations are over by then (else they would be a stackless native block of
        // the program's), and whatever it allocates later is memtape's (Untraced). Should
        // it end early, it is joined, and its failure reported, at stop.
        let handle = spawn_own_thread("memtape-flusher", HookMode::Untraced, move || {
            flusher_loop(writer, wake)
        })
        .map_err(writer_thread_error)?;
        Flusher::Own { handle, pid }
    };
    CAPTURE_PID.store(pid, Ordering::Release);
    *FLUSHER.lock().unwrap_or_else(|e| e.into_inner()) = Some(flusher);
    numpy_handler::sync(py, true);
    hooks::install(py);
    let journal = spare_buffers::journal();
    with_recorder(|rec| rec.capture = Some(CaptureSink::with_journal(min_size, journal)));
    recorder::publish();
    Ok(())
}

fn writer_thread_error(e: std::io::Error) -> PyErr {
    PyOSError::new_err(format!("cannot start the capture writer thread: {e}"))
}

/// Hands `writer` to the kept writer thread, started first if this process has none (a
/// forked child's parent had it).
fn hand_to_worker(writer: FileWriter) -> PyResult<()> {
    let mut worker = WORKER.lock().unwrap_or_else(|e| e.into_inner());
    if worker.as_ref().is_some_and(|w| w.pid != std::process::id()) {
        std::mem::forget(worker.take());
    }
    let running = match worker.take() {
        Some(running) => running,
        None => {
            let slot = Arc::new(Mutex::new(Slot::Idle));
            let ending = Arc::new(AtomicBool::new(false));
            let (s, e, wake) = (Arc::clone(&slot), Arc::clone(&ending), Arc::clone(wake()));
            // As for a capture's own thread: started before native tracing, Untraced.
            let handle = spawn_own_thread("memtape-flusher", HookMode::Untraced, move || {
                worker_loop(&s, &e, &wake);
            })
            .map_err(writer_thread_error)?;
            Worker {
                slot,
                ending,
                handle,
                pid: std::process::id(),
            }
        }
    };
    // Idle: the thread holds the lock only to see that (no capture records yet).
    *running.slot.lock().unwrap_or_else(|e| e.into_inner()) = Slot::Writing(Box::new(writer), None);
    *worker = Some(running);
    Ok(())
}

/// keep(on): while on, the captures that start keep their writer thread for the next
/// one (see [`Worker`]); turned off, the kept thread ends, now or when the running
/// capture stops.
pub(crate) fn keep_writer_thread(py: Python<'_>, on: bool) {
    KEEP_WORKER.store(on, Ordering::Release);
    spare_buffers::keep(on);
    let busy = FLUSHER
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .is_some_and(|f| matches!(f, Flusher::Kept { .. }));
    if !on && !busy {
        end_worker(py);
    }
}

/// Ends the kept writer thread, which waits for no capture now.
fn end_worker(py: Python<'_>) {
    let worker = WORKER.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(worker) = worker {
        end(py, worker);
    }
}

fn end(py: Python<'_>, worker: Worker) {
    if worker.pid != std::process::id() {
        std::mem::forget(worker); // the parent's: no such thread here
        return;
    }
    worker.ending.store(true, Ordering::Release);
    {
        let mut f = wake().flag.lock().unwrap_or_else(|e| e.into_inner());
        f.0 = true; // a wake-up, which it takes for the end
        wake().cond.notify_all();
    }
    let _ = py.detach(|| worker.handle.join());
}

/// After a capture's stop: `worker` waits for the next capture while threads are kept
/// and no other took its place meanwhile (a capture started by another thread while
/// this one waited); it ends otherwise.
fn keep_or_end(py: Python<'_>, worker: Worker) {
    if KEEP_WORKER.load(Ordering::Acquire) {
        let mut kept = WORKER.lock().unwrap_or_else(|e| e.into_inner());
        if kept.is_none() {
            *kept = Some(worker);
            return;
        }
    }
    end(py, worker);
}

/// Adds a marker to the capture (for diffs between moments).
pub(crate) fn mark(label: &str) -> bool {
    with_recorder(|rec| rec.capture.as_mut().is_some_and(|sink| sink.mark(label)))
}

/// Ends the capture: resolves the last stacks, writes the last block and the trailer.
/// Returns `(events, bytes written)`.
pub(crate) fn stop(py: Python<'_>, trailer_fields: &str) -> PyResult<(u64, u64)> {
    with_recorder(|rec| {
        if let Some(sink) = rec.capture.as_mut() {
            sink.stop_accepting();
        }
    });
    resolve_new_stacks(py);
    let mut last = Journal::default();
    let (events, sink) = with_recorder(|rec| match rec.capture.take() {
        Some(mut sink) => {
            sink.take_journal(&mut last);
            (sink.events(), Some(sink))
        }
        None => (0, None),
    });
    if let Some(sink) = sink {
        spare_buffers::give_journal(sink.into_journal()); // outside the recorder lock
    }
    recorder::publish();
    if !recorder::hooks_active() {
        hooks::uninstall(py);
        numpy_handler::sync(py, false);
    }
    let flusher = FLUSHER.lock().unwrap_or_else(|e| e.into_inner()).take();
    let Some(flusher) = flusher else {
        return Err(PyRuntimeError::new_err("no capture is being recorded"));
    };
    if flusher.pid() != std::process::id() {
        return Err(PyRuntimeError::new_err(
            "the capture belongs to the parent process",
        ));
    }
    let joined = match flusher {
        Flusher::Own { handle, .. } => {
            {
                let mut f = wake().flag.lock().unwrap_or_else(|e| e.into_inner());
                *f = (true, true);
                wake().cond.notify_one();
            }
            py.detach(|| handle.join())
        }
        Flusher::Kept { .. } => {
            // Taken out while waiting, so that no lock is held meanwhile (a fork then
            // would leave it locked in the child). The thread is not woken: the writer is
            // taken from it, once its look (if it is in one) has written what it took.
            let worker = WORKER.lock().unwrap_or_else(|e| e.into_inner()).take();
            let handed_back = worker.map(|w| {
                let slot = py.detach(|| {
                    let mut slot = w.slot.lock().unwrap_or_else(|e| e.into_inner());
                    std::mem::replace(&mut *slot, Slot::Idle)
                });
                keep_or_end(py, w);
                slot
            });
            match handed_back {
                Some(Slot::Writing(writer, _)) => Ok(Ok(*writer)),
                Some(Slot::Failed(e)) => Ok(Err(e)),
                _ => {
                    Err(Box::new("the kept writer thread is gone") as Box<dyn std::any::Any + Send>)
                }
            }
        }
    };
    let mut writer = match joined {
        Ok(Ok(writer)) => writer,
        Ok(Err(e)) => {
            let message = format!("the capture stopped early: {e}");
            *FAILURE.lock().unwrap_or_else(|e| e.into_inner()) = Some(message.clone());
            return Err(PyOSError::new_err(message));
        }
        Err(_) => return Err(PyRuntimeError::new_err("the capture writer thread failed")),
    };
    let end_ns = thread_id::now_ns();
    let trailer = format!("{{\"events\": {events}, \"end_time_ns\": {end_ns}{trailer_fields}}}");
    py.detach(|| -> std::io::Result<u64> {
        if writer.get_ref().is_in_memory() {
            // Read once from memory and dropped: the last block is not compressed.
            writer.store_blocks();
        }
        let added = writer.add(&last);
        spare_buffers::give_journal(last);
        added?;
        let (finished, encoder) = writer.finish_keeping_encoder(&trailer);
        spare_buffers::give_encoder(encoder);
        let (output, bytes) = finished?;
        output.finished();
        Ok(bytes)
    })
    .map(|bytes| (events, bytes))
    .map_err(|e| PyOSError::new_err(format!("cannot finish the capture: {e}")))
}

/// In a forked child: the capture belongs to the parent; stop recording into it. A stack
/// resolution the parent had queued is not the child's to wait for. The parent's writer
/// thread handle is leaked, never dropped: its thread does not exist here, and glibc may
/// give its descriptor to the child's next thread, which dropping (detaching) the stale
/// handle would then make unjoinable.
pub(crate) fn forget_in_child(rec: &mut recorder::Recorder) {
    if rec.capture.is_some() && CAPTURE_PID.load(Ordering::Acquire) != std::process::id() {
        rec.capture = None;
    }
    stack_resolution::forget_queued();
    journal_backlog::reset();
    // FLUSHER is only ever locked with the GIL held, which the forking thread held.
    if let Ok(mut flusher) = FLUSHER.try_lock() {
        if flusher
            .as_ref()
            .is_some_and(|f| f.pid() != std::process::id())
        {
            std::mem::forget(flusher.take());
        }
    }
    // So is WORKER (stop waits on it with the GIL released, but then no fork can happen
    // in the thread that holds it; another thread's fork finds it locked and leaves it:
    // the next start sees the parent's pid and forgets it then).
    if let Ok(mut worker) = WORKER.try_lock() {
        if worker.as_ref().is_some_and(|w| w.pid != std::process::id()) {
            std::mem::forget(worker.take());
        }
    }
}
