//! The process-wide recorder: interned stacks, live blocks and the code objects they
//! reference, behind one spin lock.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use memtape_core::{LiveTable, StackId, StackTable};
use pyo3::ffi;
use rustc_hash::FxHashSet;

use crate::spin_lock::SpinLock;

/// Largest traceback limit, as in tracemalloc.
pub(crate) const MAX_NFRAME: u32 = 65535;

/// True while tracing: checked first by every hook (relaxed), then again under the lock.
pub(crate) static TRACING: AtomicBool = AtomicBool::new(false);

/// The traceback limit (tracemalloc's `nframe`); kept after `stop()`.
pub(crate) static NFRAME: AtomicU32 = AtomicU32::new(1);

/// The recorder; `None` until the first `start()`.
pub(crate) static RECORDER: SpinLock<Option<Recorder>> = SpinLock::new(None);

/// Everything recorded since the last clear.
pub(crate) struct Recorder {
    /// Re-checked under the lock so that a hook racing with `stop()` records nothing.
    pub(crate) tracing: bool,
    /// Bumped by every clear: per-thread caches of stack ids from older generations are
    /// dropped.
    pub(crate) generation: u64,
    pub(crate) stacks: StackTable,
    pub(crate) live: LiveTable,
    /// Code objects referenced by `stacks`, each holding one strong reference, so that
    /// their addresses stay unique and their line tables readable until the next clear.
    codes: FxHashSet<usize>,
}

/// Code objects whose references must be dropped with the GIL held and the lock released.
#[must_use]
pub(crate) struct ReleasedCodes(Vec<usize>);

impl Recorder {
    pub(crate) fn new(generation: u64) -> Self {
        Self {
            tracing: false,
            generation,
            stacks: StackTable::new(),
            live: LiveTable::new(),
            codes: FxHashSet::default(),
        }
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
        let (id, created) = self.stacks.intern(parent, code, lasti)?;
        if created && self.codes.insert(code) {
            // SAFETY: `code` is the code object of a frame of the calling thread, which
            // holds the GIL; taking a strong reference neither allocates nor runs code.
            unsafe { ffi::Py_INCREF(code as *mut ffi::PyObject) };
        }
        Some(id)
    }

    /// Forgets all traces and stacks (keeping `tracing`), returning the code objects to
    /// release once the lock is dropped.
    pub(crate) fn clear(&mut self) -> ReleasedCodes {
        let codes = std::mem::take(&mut self.codes).into_iter().collect();
        self.stacks.clear();
        self.live.clear();
        self.generation += 1;
        ReleasedCodes(codes)
    }

    /// Bytes used by the recorder's tables.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.stacks.memory_bytes()
            + self.live.memory_bytes()
            + self.codes.capacity() * std::mem::size_of::<usize>()
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

/// Sets the tracing flag (atomic and under the lock).
pub(crate) fn set_tracing(on: bool) {
    let mut guard = RECORDER.lock();
    let generation = guard.as_ref().map_or(0, |r| r.generation);
    guard
        .get_or_insert_with(|| Recorder::new(generation))
        .tracing = on;
    TRACING.store(on, Ordering::Release);
}

/// Clears the recorder (if any) and hands back the code references to release.
pub(crate) fn clear() -> Option<ReleasedCodes> {
    RECORDER.lock().as_mut().map(Recorder::clear)
}
