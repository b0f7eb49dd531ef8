//! The process-wide recorder: interned stacks, live blocks, the events staged for the event
//! store ([`event_stage`]), framework allocator state and the code objects stacks
//! reference, behind one spin lock.
//!
//! Two sinks share the stacks: tracemalloc (live traces, in the live table) and the event
//! recorder (the last N events, in the event store with its own table of blocks). Stacks
//! are forgotten only when neither needs them.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use memtape_core::{
    Action, AllocatorState, Event, LiveTable, StackId, StackTable, TickScale, EMPTY_STACK,
};
use pyo3::ffi;
use rustc_hash::{FxHashMap, FxHashSet};

use crate::record::event_clock;
use crate::record::event_stage::{self, Staged, StagedKind, Staging, StoreGuard};
use crate::record::op_context::{self, OpContext};
use crate::record::spin_lock::SpinLock;
use crate::sinks::capture_sink::CaptureSink;

/// Largest traceback limit, as in tracemalloc.
pub(crate) const MAX_NFRAME: u32 = 65535;

/// True while tracemalloc traces: checked first by every hook (relaxed), then again under
/// the lock.
pub(crate) static TRACING: AtomicBool = AtomicBool::new(false);

/// True while Python-heap events are recorded.
pub(crate) static HEAP_EVENTS: AtomicBool = AtomicBool::new(false);

/// True while events are recorded (any source): what `capture_traceback` checks when it
/// takes a thread's unchanged stack without the lock.
pub(crate) static EVENTS_RECORDING: AtomicBool = AtomicBool::new(false);

/// True while a capture file is being recorded.
pub(crate) static CAPTURING: AtomicBool = AtomicBool::new(false);

/// True while the recorder follows the Python heap (`TRACING`, `HEAP_EVENTS` or
/// `CAPTURING`): the hooks' first test, one load where there were three.
static HEAP_FOLLOWED: AtomicBool = AtomicBool::new(false);

/// The traceback limit (tracemalloc's `nframe`); kept after `stop()`.
pub(crate) static NFRAME: AtomicU32 = AtomicU32::new(1);

/// The recorder's generation, readable without the lock. It is stored when stacks are
/// forgotten, before their code objects are released: a thread's capture cache trusts the
/// code objects of its last walk to be alive only while it is unchanged.
pub(crate) static GENERATION: AtomicU64 = AtomicU64::new(0);

/// The recorder; `None` until first used.
pub(crate) static RECORDER: SpinLock<Option<Recorder>> = SpinLock::new(None);

/// Whether the hooks have anything to do.
#[inline(always)]
pub(crate) fn hooks_active() -> bool {
    HEAP_FOLLOWED.load(Ordering::Relaxed)
        || crate::record::native_state::ACTIVE.load(Ordering::Relaxed)
}

/// How events are being recorded. The kept events are in the event store
/// ([`event_stage`]), staged here on their way.
pub(crate) struct EventSink {
    /// Events staged since the last hand-over; their `time_ns` holds clock ticks
    /// ([`event_clock`]) until read.
    pub(crate) staging: Staging,
    /// Turns the ring's ticks into wall time; fixed for the recording, so that its events
    /// read the same times every time they are read.
    scale: TickScale,
    /// False once recording was turned off: the kept events stay readable.
    pub(crate) recording: bool,
    pub(crate) min_size: u64,
    pub(crate) python_heap: bool,
    pub(crate) framework: bool,
    /// Native blocks are recorded too (device [`memtape_core::NATIVE_DEVICE`]).
    pub(crate) native: bool,
    /// Frames kept per event stack when events are read.
    pub(crate) max_frames: u32,
}

impl EventSink {
    /// Converts the kept events' ticks into wall time.
    pub(crate) fn tick_scale(&self) -> TickScale {
        self.scale
    }

    /// Keeps `event` as it is.
    #[inline(always)]
    pub(crate) fn push(&mut self, event: Event) {
        self.staging.push(event);
    }

    /// The store with every staged event applied, locked: what readers of the kept
    /// events take.
    pub(crate) fn settle(&mut self) -> StoreGuard {
        self.staging.settle()
    }

    #[inline(always)]
    fn accepts(&self, action: Action, size: u64) -> bool {
        self.recording
            && size >= self.min_size
            && if action.is_python_heap() {
                self.python_heap
            } else {
                self.framework
            }
    }
}

/// Interned op names; id 0 is "no op".
#[derive(Default)]
pub(crate) struct OpNames {
    names: Vec<String>,
    ids: FxHashMap<String, u32>,
}

impl OpNames {
    pub(crate) fn intern(&mut self, name: &str) -> u32 {
        if self.names.is_empty() {
            self.names.push(String::new());
        }
        if let Some(id) = self.ids.get(name) {
            return *id;
        }
        let id = self.names.len() as u32;
        self.names.push(name.to_owned());
        self.ids.insert(name.to_owned(), id);
        id
    }

    pub(crate) fn all(&self) -> Vec<String> {
        if self.names.is_empty() {
            vec![String::new()]
        } else {
            self.names.clone()
        }
    }
}

/// Everything recorded.
pub(crate) struct Recorder {
    /// tracemalloc is tracing (re-checked under the lock).
    pub(crate) tracing: bool,
    /// Bumped whenever stacks are forgotten: stack ids and traceback handles from older
    /// generations are stale.
    pub(crate) generation: u64,
    pub(crate) stacks: StackTable,
    /// The live Python-heap blocks, while [`Recorder::keep_live`] says so.
    pub(crate) live: LiveTable,
    /// Whether `live` is kept: tracemalloc's traces need it, and a capture that drops small
    /// blocks finds their frees' sizes there (the event recorder's frees find theirs in
    /// the event store). A capture
    /// without a minimum size does not (the replay finds each free's block), and is spared
    /// the table's cache misses and memory: its frees are recorded by address alone.
    pub(crate) keep_live: bool,
    /// tracemalloc traces, a capture records, or events record the Python heap: what
    /// [`Recorder::follows_heap`] says, decided when the flags are published.
    heap_followed: bool,
    pub(crate) events: Option<EventSink>,
    /// The capture file being recorded, if any.
    pub(crate) capture: Option<CaptureSink>,
    pub(crate) allocators: AllocatorState,
    pub(crate) ops: OpNames,
    /// Code objects referenced by `stacks`, each holding one strong reference, so that
    /// their addresses stay unique and their line tables readable until forgotten.
    codes: FxHashSet<usize>,
    /// Native memory (blocks and mappings seen by the GOT hooks).
    pub(crate) native: crate::record::native_state::NativeState,
    /// Set while interning the stack of a thread that does not hold the GIL (a native
    /// hook): code objects seen for the first time are referenced later, by the next
    /// interning with the GIL (their frames keep them alive meanwhile).
    pub(crate) without_gil: bool,
    /// Code objects in `codes` not referenced yet (see `without_gil`).
    unreferenced_codes: Vec<usize>,
}

/// Code objects whose references must be dropped with the GIL held and the lock released.
#[must_use]
pub(crate) struct ReleasedCodes(Vec<usize>);

/// What an event is attributed to, decided before the lock is taken.
#[derive(Clone, Copy)]
pub(crate) struct Attribution {
    pub(crate) op: Option<OpContext>,
    /// When, in [`event_clock`] ticks.
    pub(crate) ticks: u64,
    pub(crate) thread: u32,
}

impl Recorder {
    fn new(generation: u64) -> Self {
        Self {
            tracing: false,
            generation,
            stacks: StackTable::new(),
            live: LiveTable::new(),
            keep_live: false,
            heap_followed: false,
            events: None,
            capture: None,
            allocators: AllocatorState::new(),
            ops: OpNames::default(),
            codes: FxHashSet::default(),
            native: crate::record::native_state::NativeState::default(),
            without_gil: false,
            unreferenced_codes: Vec::new(),
        }
    }

    /// Whether Python-heap blocks are being followed (by any sink), as last published.
    #[inline(always)]
    pub(crate) fn follows_heap(&self) -> bool {
        self.heap_followed
    }

    /// Whether stack ids must stay valid (events or a capture refer to them).
    fn stacks_in_use(&self) -> bool {
        self.events.is_some() || self.capture.is_some()
    }

    /// Interns one frame; takes a reference on a code object seen for the first time.
    /// Must be called with the GIL held. `None` when the stack table is full.
    #[inline]
    pub(crate) fn intern_frame(
        &mut self,
        parent: StackId,
        code: usize,
        lasti: i32,
    ) -> Option<StackId> {
        self.reference_pending_codes();
        let (id, created) = self.stacks.intern(parent, code, lasti)?;
        if created && self.codes.insert(code) {
            if self.without_gil {
                self.unreferenced_codes.push(code);
            } else {
                // SAFETY: `code` is the code object of a frame of the calling thread,
                // which holds the GIL; taking a strong reference neither allocates nor
                // runs code.
                unsafe { ffi::Py_INCREF(code as *mut ffi::PyObject) };
            }
        }
        Some(id)
    }

    /// Takes the references that interning without the GIL left for later, when the GIL is
    /// held. Returns whether every code object in the stacks is referenced now (false
    /// while interning without the GIL with some pending).
    #[inline(always)]
    pub(crate) fn reference_pending_codes(&mut self) -> bool {
        self.unreferenced_codes.is_empty() || self.reference_pending_codes_now()
    }

    #[cold]
    fn reference_pending_codes_now(&mut self) -> bool {
        if self.without_gil {
            return false;
        }
        for code in std::mem::take(&mut self.unreferenced_codes) {
            // SAFETY: the GIL is held (interning is, `without_gil` aside). Each code object was interned from a
            // live frame of a thread running C code without the GIL; that frame keeps
            // it alive until its thread takes the GIL back and returns. The reference
            // is taken by the first interning with the GIL after that, by any thread:
            // only code that dies in between, with no new frame interned anywhere
            // meanwhile (compiled at run time and dropped right after its C call),
            // could be missed (README, native memory, what is not seen).
            unsafe { ffi::Py_INCREF(code as *mut ffi::PyObject) };
        }
        true
    }

    /// The stack an event is attributed to: the op context's traceback when it is valid,
    /// else `own`.
    #[inline]
    pub(crate) fn attributed_stack(&self, op: Option<OpContext>, own: StackId) -> (StackId, u32) {
        attribute(op, own, self.generation)
    }

    /// Records the allocation event of Python-heap block `addr` of `size` bytes in
    /// `domain`, allocated at `own`, if the event sink wants it: the block is staged for
    /// the event store's table (its free's size), and its event for the ring.
    #[inline(always)]
    pub(crate) fn stage_heap_alloc(
        &mut self,
        domain: u32,
        addr: u64,
        size: u64,
        own: StackId,
        at: &Attribution,
    ) {
        let generation = self.generation;
        let Some(sink) = self.events.as_mut() else {
            return;
        };
        // A block too small to be recorded is not staged: its free finds no block, and
        // has no event either, as a free of that size would not.
        if !sink.accepts(Action::Alloc, size) {
            return;
        }
        let (stack, op) = attribute(at.op, own, generation);
        sink.staging.stage(Staged {
            kind: StagedKind::HeapAlloc,
            domain,
            addr,
            size,
            ticks: at.ticks,
            stack,
            own,
            op,
            thread: at.thread,
        });
    }

    /// Records the free of Python-heap block `addr` in `domain` if the event sink wants
    /// it, at `own` (`None`: the block's own stack, a realloc's old block). Its size is
    /// the store's to find: a block not recorded since the recording began has no event.
    #[inline(always)]
    pub(crate) fn stage_heap_free(
        &mut self,
        domain: u32,
        addr: u64,
        own: Option<StackId>,
        at: &Attribution,
    ) {
        let generation = self.generation;
        let Some(sink) = self.events.as_mut() else {
            return;
        };
        // Any free of the Python heap while it is recorded: the minimum size is checked
        // by its block, which the store's table has only when it was large enough.
        if !(sink.recording && sink.python_heap) {
            return;
        }
        let (op_stack, op) = op_stack(at.op, generation);
        let (stack, kind) = match (op_stack, own) {
            (Some(stack), _) | (None, Some(stack)) => (stack, StagedKind::HeapFree),
            (None, None) => (EMPTY_STACK, StagedKind::HeapFreeBlockStack),
        };
        sink.staging.stage(Staged {
            kind,
            domain,
            addr,
            size: 0,
            ticks: at.ticks,
            stack,
            own: EMPTY_STACK,
            op,
            thread: at.thread,
        });
    }

    /// Records a framework event if the sink wants it.
    pub(crate) fn push_framework_event(&mut self, event: Event) {
        if let Some(sink) = self.events.as_mut() {
            if sink.accepts(event.action, event.size) {
                sink.push(event);
            }
        }
    }

    /// Forgets all stacks and live blocks, returning the code objects to release.
    fn forget_stacks(&mut self) -> ReleasedCodes {
        let unreferenced: FxHashSet<usize> = std::mem::take(&mut self.unreferenced_codes)
            .into_iter()
            .collect();
        let codes = std::mem::take(&mut self.codes)
            .into_iter()
            .filter(|c| !unreferenced.contains(c))
            .collect();
        self.stacks.clear();
        self.live.clear();
        self.allocators.forget_stacks();
        self.generation += 1;
        GENERATION.store(self.generation, Ordering::Release);
        ReleasedCodes(codes)
    }

    /// Bytes used by the recorder's tables.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.stacks.memory_bytes()
            + self.live.memory_bytes()
            + self.codes.capacity() * std::mem::size_of::<usize>()
            + self.events.as_ref().map_or(0, |e| e.staging.memory_bytes())
            + event_stage::store_memory_bytes()
    }
}

impl ReleasedCodes {
    /// Drops the references. Call with the GIL held and the recorder unlocked: freeing a
    /// code object runs our free hook, which takes the lock.
    pub(crate) fn release(self, _py: pyo3::Python<'_>) {
        for code in self.0 {
            // SAFETY: we took exactly one strong reference on each of these code objects
            // in `intern_frame`, and the GIL is held (proved by `_py`).
            unsafe { ffi::Py_DECREF(code as *mut ffi::PyObject) };
        }
    }
}

/// The stack an event is attributed to in recorder generation `generation`: the op
/// context's traceback when it is valid, else `own`.
#[inline(always)]
fn attribute(op: Option<OpContext>, own: StackId, generation: u64) -> (StackId, u32) {
    let (stack, op) = op_stack(op, generation);
    (stack.unwrap_or(own), op)
}

/// The op context's stack, when its traceback is valid in recorder generation
/// `generation`, and its op (0 without one).
#[inline(always)]
fn op_stack(op: Option<OpContext>, generation: u64) -> (Option<StackId>, u32) {
    match op {
        Some(ctx) => match op_context::resolve(ctx.traceback, generation) {
            Some(Some(stack)) => (Some(stack), ctx.op),
            Some(None) | None => (None, ctx.op),
        },
        None => (None, 0),
    }
}

/// Runs `f` on the recorder, creating it first if needed.
pub(crate) fn with_recorder<R>(f: impl FnOnce(&mut Recorder) -> R) -> R {
    let mut guard = RECORDER.lock();
    let rec = guard.get_or_insert_with(|| Recorder::new(0));
    f(rec)
}

/// Makes the hooks' quick flags match the recorder, and decides whether the live table is
/// kept (dropping its blocks when it is not).
fn publish_flags(rec: &mut Recorder) {
    let heap_events = rec
        .events
        .as_ref()
        .is_some_and(|e| e.recording && e.python_heap);
    // The event recorder's frees find their blocks in the event store's own table.
    rec.keep_live = rec.tracing || rec.capture.as_ref().is_some_and(|c| c.min_size() > 0);
    if !rec.keep_live {
        rec.live.clear();
    }
    rec.heap_followed = rec.tracing || heap_events || rec.capture.is_some();
    TRACING.store(rec.tracing, Ordering::Release);
    HEAP_EVENTS.store(heap_events, Ordering::Release);
    let recording = rec.events.as_ref().is_some_and(|e| e.recording);
    EVENTS_RECORDING.store(recording, Ordering::Release);
    CAPTURING.store(rec.capture.is_some(), Ordering::Release);
    HEAP_FOLLOWED.store(rec.heap_followed, Ordering::Release);
}

/// Makes the hooks' quick flags match the recorder.
pub(crate) fn publish() {
    with_recorder(publish_flags);
}

/// tracemalloc's start: traces from now on (earlier blocks are forgotten).
pub(crate) fn start_tracing() {
    with_recorder(|rec| {
        rec.live.clear();
        rec.tracing = true;
        publish_flags(rec);
    });
}

/// tracemalloc's stop: traces are cleared; stacks too unless events still need them.
pub(crate) fn stop_tracing() -> Option<ReleasedCodes> {
    with_recorder(|rec| {
        rec.tracing = false;
        publish_flags(rec);
        // Without stacks in use, they go; either way `publish_flags` dropped the live
        // blocks unless something still keeps them.
        (!rec.stacks_in_use()).then(|| rec.forget_stacks())
    })
}

/// A capture's start: the stacks interned before it are forgotten unless tracemalloc or
/// the event recorder still refer to them. A capture writes every stack interned since it
/// began to be needed (and its reader reads them all back), so a process that records one
/// capture after another (the pytest plugin, a capture per test) would otherwise write, and
/// read, every stack of every earlier capture again each time.
pub(crate) fn forget_stacks_for_capture() -> Option<ReleasedCodes> {
    with_recorder(|rec| (!rec.tracing && !rec.stacks_in_use()).then(|| rec.forget_stacks()))
}

/// tracemalloc's clear_traces.
pub(crate) fn clear_traces() -> Option<ReleasedCodes> {
    with_recorder(|rec| {
        if !rec.stacks_in_use() {
            Some(rec.forget_stacks())
        } else {
            rec.live.clear();
            None
        }
    })
}

/// Settings of an event recording.
pub(crate) struct EventSettings {
    pub(crate) max_entries: usize,
    pub(crate) min_size: u64,
    pub(crate) python_heap: bool,
    pub(crate) framework: bool,
    pub(crate) native: bool,
    pub(crate) max_frames: u32,
}

/// Starts a new event recording (earlier events are dropped).
pub(crate) fn start_events(settings: EventSettings) -> Option<ReleasedCodes> {
    // Before the lock: deciding may read a file (allocations the native hooks see), and
    // the first recording waits for the clock's calibration.
    event_clock::decide();
    let scale = event_clock::recording_scale();
    with_recorder(|rec| {
        let released = (!rec.tracing && rec.capture.is_none()).then(|| rec.forget_stacks());
        // The events staged for the recording before are dropped with it.
        event_stage::lock_store().restart(settings.max_entries);
        rec.events = Some(EventSink {
            staging: Staging::new(),
            scale,
            recording: true,
            min_size: settings.min_size,
            python_heap: settings.python_heap,
            framework: settings.framework,
            native: settings.native,
            max_frames: settings.max_frames,
        });
        publish_flags(rec);
        released
    })
}

/// Stops recording events; the kept events stay readable.
pub(crate) fn stop_events() {
    with_recorder(|rec| {
        if let Some(sink) = rec.events.as_mut() {
            sink.recording = false;
            sink.staging.stop();
        }
        publish_flags(rec);
    });
}

/// Whether events are being recorded now.
pub(crate) fn events_recording() -> bool {
    RECORDER
        .lock()
        .as_ref()
        .and_then(|r| r.events.as_ref())
        .is_some_and(|e| e.recording)
}
