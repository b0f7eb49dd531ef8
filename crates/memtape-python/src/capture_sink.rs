//! Streaming a recording to a `.mtape` capture file (docs/capture-format.md).
//!
//! Hooks append compact records to an in-memory block under the recorder lock (tens of
//! nanoseconds); a flusher thread swaps full blocks out every few milliseconds and
//! compresses and writes them without the lock or the GIL, so a killed process leaves
//! every flushed block readable. Frames are resolved on the main thread through
//! `Py_AddPendingCall` (Python runs it between bytecodes, with the GIL): no thread ever
//! waits for the GIL on our behalf.

use std::ffi::{c_int, c_void};
use std::fs::File;
use std::io::BufWriter;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use memtape_core::capture::{BlockEncoder, CaptureFileWriter};
use pyo3::exceptions::{PyOSError, PyRuntimeError};
use pyo3::ffi;
use pyo3::prelude::*;
use rustc_hash::FxHashMap;

use crate::frame_resolve::{FrameResolver, HeldCodes};
use crate::frames::RawFrame;
use crate::native::loaded_modules::{loaded_modules, LoadedModule};
use crate::recorder::{self, with_recorder, RECORDER};
use crate::{hook_mode, hooks, numpy_handler, thread_id};

/// Raw bytes after which the flusher is woken early.
const BLOCK_TARGET: usize = 256 * 1024;
/// How often the flusher looks at the block when nothing wakes it.
const FLUSH_INTERVAL: Duration = Duration::from_millis(25);
/// Events between two looks at the clock in the hooks.
const CLOCK_EVERY: u32 = 256;

type FileWriter = CaptureFileWriter<BufWriter<File>>;

/// What a capture records, appended to by the hooks under the recorder lock.
pub(crate) struct CaptureSink {
    encoder: BlockEncoder,
    min_size: u64,
    /// False once stopping began: nothing more is recorded.
    accepting: bool,
    start: Instant,
    last_time_ns: u64,
    tick: u32,
    /// Stack nodes `1..=resolved_upto` have been written as Stack records.
    resolved_upto: usize,
    strings: FxHashMap<String, u32>,
    frames: FxHashMap<(u32, u32, u32), u32>,
    /// Native frames written, by return address (their ids share the frames' space).
    native_frames: FxHashMap<u64, u32>,
    /// Modules written, by `(load bias, path)`.
    modules: FxHashMap<(u64, String), u32>,
    events: u64,
}

impl CaptureSink {
    #[inline]
    fn clock(&mut self) {
        self.tick = self.tick.wrapping_add(1);
        if self.tick % CLOCK_EVERY == 0 {
            let ns = self.start.elapsed().as_nanos() as u64;
            if ns.saturating_sub(self.last_time_ns) >= 1_000_000 {
                self.encoder.time(ns);
                self.last_time_ns = ns;
            }
        }
    }

    /// Records an allocation (if it is at least `min_size`).
    #[inline]
    pub(crate) fn alloc(&mut self, domain: u32, addr: u64, size: u64, stack: u32) {
        if !self.accepting || size < self.min_size {
            return;
        }
        self.clock();
        self.encoder.alloc(domain, addr, size, stack);
        self.events += 1;
        if self.encoder.len() >= BLOCK_TARGET {
            wake_flusher();
        }
    }

    /// Records a free of a block of `size` bytes (dropped like its allocation was).
    #[inline]
    pub(crate) fn free(&mut self, domain: u32, addr: u64, size: u64) {
        if !self.accepting || size < self.min_size {
            return;
        }
        self.clock();
        self.encoder.free((domain != 0).then_some(domain), addr);
        self.events += 1;
    }

    fn take_block(&mut self) -> Option<Vec<u8>> {
        if self.encoder.is_empty() {
            return None;
        }
        let block = self.encoder.take();
        let ns = self.start.elapsed().as_nanos() as u64;
        self.encoder.time(ns);
        self.last_time_ns = ns;
        Some(block)
    }

    fn intern_string(&mut self, value: &str) -> u32 {
        if let Some(id) = self.strings.get(value) {
            return *id;
        }
        let id = self.strings.len() as u32 + 1;
        self.encoder.string(id, value);
        self.strings.insert(value.to_owned(), id);
        id
    }

    fn next_frame_id(&self) -> u32 {
        (self.frames.len() + self.native_frames.len()) as u32 + 1
    }

    fn intern_frame(&mut self, filename: &str, name: &str, line: u32) -> u32 {
        let key = (self.intern_string(filename), self.intern_string(name), line);
        if let Some(id) = self.frames.get(&key) {
            return *id;
        }
        let id = self.next_frame_id();
        self.encoder.frame(id, key.0, key.1, key.2);
        self.frames.insert(key, id);
        id
    }
}

impl CaptureSink {
    /// The frame id of the native frame at `ip` in `module` (None: in no known module),
    /// writing the Module and NativeFrame records the first time.
    fn intern_native_frame(&mut self, ip: u64, module: Option<&LoadedModule>) -> u32 {
        if let Some(id) = self.native_frames.get(&ip) {
            return *id;
        }
        let (module_id, offset) = match module {
            Some(m) => (self.intern_module(m), ip.wrapping_sub(m.base)),
            None => (0, ip),
        };
        let id = self.next_frame_id();
        self.encoder.native_frame(id, module_id, offset);
        self.native_frames.insert(ip, id);
        id
    }

    fn intern_module(&mut self, m: &LoadedModule) -> u32 {
        let key = (m.base, m.path.clone());
        if let Some(id) = self.modules.get(&key) {
            return *id;
        }
        let id = self.modules.len() as u32 + 1;
        let segments: Vec<(u64, u64)> = m.segments.iter().map(|s| (s.0, s.1)).collect();
        self.encoder
            .module(id, &m.path, m.base, &m.build_id, &segments);
        self.modules.insert(key, id);
        id
    }
}

/// The objects loaded, as last listed (by stack resolution, with the GIL).
static MODULES: Mutex<Vec<LoadedModule>> = Mutex::new(Vec::new());

/// The loaded object holding `ip` (listing them again when none does). Never called
/// with the recorder locked: listing takes the loader's lock.
fn module_of(ip: u64) -> Option<LoadedModule> {
    let mut modules = MODULES.lock().unwrap_or_else(|e| e.into_inner());
    let probe = ip.saturating_sub(1);
    if let Some(m) = modules.iter().find(|m| m.contains(probe)) {
        return Some(m.clone());
    }
    *modules = loaded_modules();
    modules.iter().find(|m| m.contains(probe)).cloned()
}

/// A stack node's innermost frame, resolved.
enum Resolved {
    Python(String, String, u32),
    Native(u64, Option<LoadedModule>),
}

struct Flusher {
    handle: JoinHandle<std::io::Result<FileWriter>>,
    pid: u32,
}

struct Wake {
    flag: Mutex<(bool, bool)>, // (work to do, stop)
    cond: Condvar,
}

static WAKE: std::sync::OnceLock<Arc<Wake>> = std::sync::OnceLock::new();
static FLUSHER: Mutex<Option<Flusher>> = Mutex::new(None);
static FAILURE: Mutex<Option<String>> = Mutex::new(None);
static RESOLVE_QUEUED: AtomicBool = AtomicBool::new(false);
static CAPTURE_PID: AtomicU32 = AtomicU32::new(0);

fn wake() -> &'static Arc<Wake> {
    WAKE.get_or_init(|| {
        Arc::new(Wake {
            flag: Mutex::new((false, false)),
            cond: Condvar::new(),
        })
    })
}

fn wake_flusher() {
    if let Ok(mut f) = wake().flag.try_lock() {
        f.0 = true;
        wake().cond.notify_one();
    }
}

extern "C" fn resolve_pending(_arg: *mut c_void) -> c_int {
    RESOLVE_QUEUED.store(false, Ordering::Release);
    // SAFETY: Python runs pending calls on the main thread with the GIL held.
    let py = unsafe { Python::assume_gil_acquired() };
    resolve_new_stacks(py);
    0
}

/// Asks the main thread to resolve the stacks interned since the last resolution.
fn queue_resolution() {
    if RESOLVE_QUEUED.swap(true, Ordering::AcqRel) {
        return;
    }
    // SAFETY: Py_AddPendingCall may be called from any thread without the GIL; the
    // callback is a plain function that never raises.
    if unsafe { ffi::Py_AddPendingCall(Some(resolve_pending), std::ptr::null_mut()) } != 0 {
        RESOLVE_QUEUED.store(false, Ordering::Release);
    }
}

fn flusher_loop(
    mut writer: FileWriter,
    wake: Arc<Wake>,
    ready: std::sync::mpsc::SyncSender<()>,
) -> std::io::Result<FileWriter> {
    // Whatever libc allocates for this thread is memtape's, not the program's. The
    // thread's start-up (its thread-locals' destructors, registered through libc) is over
    // by now: `start` waits for this before native tracing can begin.
    hook_mode::set(hook_mode::HookMode::Untraced);
    // The receiver only goes away if `start` failed; the loop runs either way.
    let _ = ready.send(());
    loop {
        let stopping = {
            let guard = wake.flag.lock().unwrap_or_else(|e| e.into_inner());
            let (mut guard, _) = wake
                .cond
                .wait_timeout_while(guard, FLUSH_INTERVAL, |f| !f.0 && !f.1)
                .unwrap_or_else(|e| e.into_inner());
            guard.0 = false;
            guard.1
        };
        let (block, unresolved) = {
            let mut guard = RECORDER.lock();
            match guard.as_mut() {
                Some(rec) => {
                    let len = rec.stacks.len();
                    match rec.capture.as_mut() {
                        Some(sink) => (sink.take_block(), sink.resolved_upto < len),
                        None => (None, false),
                    }
                }
                None => (None, false),
            }
        };
        if unresolved {
            queue_resolution();
        }
        if let Some(block) = block {
            if let Err(e) = writer.write_block(&block) {
                // Disk full or gone: stop capturing, keep the program running.
                with_recorder(|rec| rec.capture = None);
                recorder::publish();
                return Err(e);
            }
        }
        if stopping {
            return Ok(writer);
        }
    }
}

/// Writes Stack (and String/Frame) records for every stack interned since the last call.
/// Runs with the GIL (a pending call, or `stop_capture`).
pub(crate) fn resolve_new_stacks(py: Python<'_>) {
    hook_mode::untraced(|| {
        let (from, nodes, _held) = {
            let guard = RECORDER.lock();
            let Some(rec) = guard.as_ref() else { return };
            let Some(sink) = rec.capture.as_ref() else {
                return;
            };
            let from = sink.resolved_upto;
            let to = rec.stacks.len();
            if from >= to {
                return;
            }
            let nodes: Vec<(u32, u32, RawFrame)> = ((from + 1)..=to)
                .filter_map(|id| {
                    let n = rec.stacks.node(id as u32)?;
                    Some((
                        id as u32,
                        n.parent,
                        RawFrame {
                            code: n.code,
                            lasti: n.lasti,
                        },
                    ))
                })
                .collect();
            let ids: Vec<u32> = nodes.iter().map(|n| n.0).collect();
            let held = HeldCodes::hold(py, &rec.stacks, ids.iter(), 1);
            (from, nodes, held)
        };
        let mut resolver = FrameResolver::new(py);
        let resolved: Vec<(u32, u32, Resolved)> = nodes
            .iter()
            .map(|&(id, parent, f)| {
                let frame = match memtape_core::native_frame_ip(f.code) {
                    Some(ip) => Resolved::Native(ip, module_of(ip)),
                    None => {
                        let (file, name) = resolver.names(f.code).clone();
                        Resolved::Python(file, name, resolver.line(f))
                    }
                };
                (id, parent, frame)
            })
            .collect();
        with_recorder(|rec| {
            let Some(sink) = rec.capture.as_mut() else {
                return;
            };
            if sink.resolved_upto != from {
                return; // another resolution won the race and wrote these
            }
            for (id, parent, frame) in &resolved {
                let frame = match frame {
                    Resolved::Python(file, name, line) => sink.intern_frame(file, name, *line),
                    Resolved::Native(ip, module) => sink.intern_native_frame(*ip, module.as_ref()),
                };
                sink.encoder.stack(*id, *parent, frame);
            }
            sink.resolved_upto = from + resolved.len();
        });
    });
}

/// Starts capturing to `path` (created or truncated) with the given metadata.
pub(crate) fn start(
    py: Python<'_>,
    path: &std::path::Path,
    metadata_json: &str,
    min_size: u64,
) -> PyResult<()> {
    if with_recorder(|rec| rec.capture.is_some()) {
        return Err(PyRuntimeError::new_err(
            "a capture is already being recorded in this process",
        ));
    }
    let file = File::create(path)
        .map_err(|e| PyOSError::new_err(format!("cannot create {}: {e}", path.display())))?;
    let writer = CaptureFileWriter::new(BufWriter::with_capacity(1 << 20, file), metadata_json)
        .map_err(|e| PyOSError::new_err(format!("cannot write {}: {e}", path.display())))?;
    *FAILURE.lock().unwrap_or_else(|e| e.into_inner()) = None;
    {
        let mut f = wake().flag.lock().unwrap_or_else(|e| e.into_inner());
        *f = (false, false);
    }
    let wake = Arc::clone(wake());
    let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel(1);
    let handle = std::thread::Builder::new()
        .name("memtape-flusher".into())
        .spawn(move || flusher_loop(writer, wake, ready_tx))
        .map_err(|e| PyOSError::new_err(format!("cannot start the capture writer thread: {e}")))?;
    // Native tracing may start right after this returns: the writer thread's own start-up
    // allocations must be over by then, or they would be recorded as a stackless native
    // block of the program's. An error means the thread already ended (it is joined, and
    // its failure reported, at stop). The thread never needs the GIL to get here.
    let _ = ready_rx.recv();
    CAPTURE_PID.store(std::process::id(), Ordering::Release);
    *FLUSHER.lock().unwrap_or_else(|e| e.into_inner()) = Some(Flusher {
        handle,
        pid: std::process::id(),
    });
    numpy_handler::sync(py, true);
    hooks::install(py);
    with_recorder(|rec| {
        let mut encoder = BlockEncoder::new();
        encoder.time(0);
        rec.capture = Some(CaptureSink {
            encoder,
            min_size,
            accepting: true,
            start: Instant::now(),
            last_time_ns: 0,
            tick: 0,
            resolved_upto: 0,
            strings: FxHashMap::default(),
            frames: FxHashMap::default(),
            native_frames: FxHashMap::default(),
            modules: FxHashMap::default(),
            events: 0,
        });
    });
    recorder::publish();
    Ok(())
}

/// Adds a marker to the capture (for diffs between moments).
pub(crate) fn mark(label: &str) -> bool {
    with_recorder(|rec| match rec.capture.as_mut() {
        Some(sink) if sink.accepting => {
            sink.encoder.marker(label);
            true
        }
        _ => false,
    })
}

/// Ends the capture: resolves the last stacks, writes the last block and the trailer.
/// Returns `(events, bytes written)`.
pub(crate) fn stop(py: Python<'_>, trailer_fields: &str) -> PyResult<(u64, u64)> {
    with_recorder(|rec| {
        if let Some(sink) = rec.capture.as_mut() {
            sink.accepting = false;
        }
    });
    resolve_new_stacks(py);
    let (last_block, events) = with_recorder(|rec| match rec.capture.take() {
        Some(mut sink) => (sink.take_block(), sink.events),
        None => (None, 0),
    });
    recorder::publish();
    if !recorder::hooks_active() {
        hooks::uninstall(py);
        numpy_handler::sync(py, false);
    }
    let flusher = FLUSHER.lock().unwrap_or_else(|e| e.into_inner()).take();
    let Some(flusher) = flusher else {
        return Err(PyRuntimeError::new_err("no capture is being recorded"));
    };
    if flusher.pid != std::process::id() {
        return Err(PyRuntimeError::new_err(
            "the capture belongs to the parent process",
        ));
    }
    {
        let mut f = wake().flag.lock().unwrap_or_else(|e| e.into_inner());
        *f = (true, true);
        wake().cond.notify_one();
    }
    let joined = py.allow_threads(|| flusher.handle.join());
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
    py.allow_threads(|| -> std::io::Result<u64> {
        if let Some(block) = last_block {
            writer.write_block(&block)?;
        }
        let bytes = writer.bytes_written();
        writer.finish(&trailer)?;
        Ok(bytes)
    })
    .map(|bytes| (events, bytes))
    .map_err(|e| PyOSError::new_err(format!("cannot finish the capture: {e}")))
}

thread_local! {
    /// The writer's wake-up lock, held by the forking thread across `fork()`.
    static WAKE_HELD_FOR_FORK: std::cell::RefCell<Option<MutexGuard<'static, (bool, bool)>>> =
        const { std::cell::RefCell::new(None) };
}

/// Before `fork()`: takes the writer's wake-up lock (the writer thread holds it only for a
/// moment), so that the child never inherits it locked by a thread it does not have.
pub(crate) fn before_fork() {
    if let Some(wake) = WAKE.get() {
        let guard = wake.flag.lock().unwrap_or_else(|e| e.into_inner());
        // A thread whose thread-locals are gone (exiting) forks unprotected, as before.
        let _ = WAKE_HELD_FOR_FORK.try_with(|held| *held.borrow_mut() = Some(guard));
    }
}

/// After `fork()`, in the parent or the child: releases what `before_fork` took.
pub(crate) fn after_fork() {
    let _ = WAKE_HELD_FOR_FORK.try_with(|held| held.borrow_mut().take());
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
    RESOLVE_QUEUED.store(false, Ordering::Release);
    // FLUSHER is only ever locked with the GIL held, which the forking thread held.
    if let Ok(mut flusher) = FLUSHER.try_lock() {
        if flusher
            .as_ref()
            .is_some_and(|f| f.pid != std::process::id())
        {
            std::mem::forget(flusher.take());
        }
    }
}
