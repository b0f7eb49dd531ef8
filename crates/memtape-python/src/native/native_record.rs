//! Recording what the native hooks saw: blocks and mapped ranges, in the native live
//! table and the capture file, each with the calling thread's Python stack.
//!
//! The stack is the thread's own, also when it released the GIL (NumPy, BLAS, ctypes
//! calls do): while a thread runs C code its Python frames cannot change, and no other
//! thread pushes or pops them. A thread that never ran Python has no thread state and
//! gets the empty stack (its thread id is in the event). We chose this over Fil's
//! "creator's stack" because pool threads (BLAS, OpenMP, framework workers) outlive the
//! code that created them and serve every later caller: the creator's line would take
//! the blame for all of their memory.

use std::time::Duration;

use memtape_core::{
    Action, Event, LiveEntry, LiveTable, RangeChange, StackId, EMPTY_STACK, NATIVE_DEVICE,
};
use pyo3::ffi;

use super::{NATIVE_DOMAIN, REENTERED, SINK_TRACEMALLOC};
use crate::cpython::thread_state;
use crate::record::capture::{self, Walked};
use crate::record::recorder::{Recorder, RECORDER};
use crate::record::spin_lock::SpinGuard;
use crate::thread::hook_mode::HookThread;
use crate::thread::thread_id;

/// The calling thread's Python stack, walked before the recorder is locked; true when
/// the thread holds the GIL.
pub(crate) fn walk(t: &HookThread) -> (Walked<'_>, bool) {
    let held = thread_state::attached_if_holding_gil_via(&t.state_word);
    if !held.is_null() {
        return (capture::walk(Some(t), held), true);
    }
    // SAFETY: reads this thread's TSS slot: no allocation, no lock, no GIL needed.
    let own = unsafe { ffi::PyGILState_GetThisThreadState() };
    // The thread's own state, whose frames do not change while it runs C code (module
    // documentation): walking them without the GIL reads the same memory the GIL holder
    // never writes.
    (capture::walk(Some(t), own), false)
}

fn intern(rec: &mut Recorder, walked: Walked<'_>, gil: bool) -> StackId {
    if gil {
        walked.intern(rec)
    } else {
        rec.without_gil = true;
        let id = walked.intern(rec);
        rec.without_gil = false;
        id
    }
}

/// How long a native hook waits for a recorder another thread holds. The recorder is
/// held for microseconds; a wait this long means its holder waits for this thread (see
/// [`lock`]).
const PATIENCE: Duration = Duration::from_millis(250);

/// The recorder, locked, unless this thread holds it already: a signal handler that
/// allocates, run while its thread was inside memtape's recorder (recording a Python
/// block, or memtape's own work). Waiting would wait for itself, so the call passes
/// unrecorded and is counted ([`REENTERED`]). The same when another thread has held it
/// for [`PATIENCE`]: a handler that interrupted its thread inside libc's allocator (in
/// memtape's own work, or in libc itself, where no hook runs) while the recorder's holder
/// allocates and waits for that arena's lock, which the handler's thread holds until the
/// handler returns.
#[inline(always)]
fn lock() -> Option<SpinGuard<'static, Option<Recorder>>> {
    let guard = RECORDER.lock_for_hook(PATIENCE);
    if guard.is_none() {
        REENTERED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    guard
}

/// The recorder, when something follows native memory (and this thread can lock it).
macro_rules! native_recorder {
    ($guard:ident) => {
        match $guard.as_mut().and_then(|g| g.as_mut()) {
            Some(rec) if rec.native.sinks != 0 => rec,
            _ => return,
        }
    };
}

/// Records an event for the event recorder when it follows native memory. Native events
/// carry no op context (reading it could set up another thread-local from inside a hook),
/// and a free carries no stack.
fn push_event(rec: &mut Recorder, action: Action, addr: u64, size: u64, stack: StackId) {
    let Some(sink) = rec.events.as_mut() else {
        return;
    };
    if !(sink.recording && sink.native) || size < sink.min_size {
        return;
    }
    sink.push(Event {
        action,
        addr,
        size,
        requested_size: size,
        device: NATIVE_DEVICE,
        stream: 0,
        thread: thread_id::current(),
        time_ns: crate::record::event_clock::ticks(),
        stack,
        op: 0,
    });
}

/// Where native blocks live: tracemalloc's own table when it asked for them (so its
/// snapshots and totals include them), else the native table.
fn table(rec: &mut Recorder) -> &mut LiveTable {
    if rec.tracing && rec.native.sinks & SINK_TRACEMALLOC != 0 {
        &mut rec.live
    } else {
        &mut rec.native.live
    }
}

fn begin(rec: &mut Recorder, addr: u64, size: u64, stack: StackId) {
    // A full table drops this one block; the traced program keeps running.
    let _ = table(rec).insert(NATIVE_DOMAIN, addr, size, stack);
    if let Some(sink) = rec.capture.as_mut() {
        sink.alloc(NATIVE_DOMAIN, addr, size, stack);
    }
    push_event(rec, Action::Alloc, addr, size, stack);
}

fn end(rec: &mut Recorder, addr: u64) -> Option<LiveEntry> {
    let old = table(rec).remove(NATIVE_DOMAIN, addr)?;
    if let Some(sink) = rec.capture.as_mut() {
        sink.free(NATIVE_DOMAIN, old.addr, old.size);
    }
    push_event(rec, Action::Free, old.addr, old.size, EMPTY_STACK);
    Some(old)
}

fn apply(rec: &mut Recorder, change: RangeChange) {
    for piece in change.ended {
        end(rec, piece.start);
    }
    for piece in change.began {
        begin(rec, piece.start, piece.len, piece.stack);
    }
}

/// A new block (and, for a resize, the end of the block at `moved_from`, 0 if none).
pub(crate) fn alloc(t: &HookThread, block: u64, size: u64, moved_from: u64) {
    let (walked, gil) = walk(t);
    let mut guard = lock();
    let rec = native_recorder!(guard);
    if moved_from != 0 && end(rec, moved_from).is_none() {
        rec.native.unknown_frees += 1;
    }
    let stack = intern(rec, walked, gil);
    begin(rec, block, size, stack);
}

/// A block is being freed; blocks we never saw allocated are only counted.
pub(crate) fn free(block: u64) {
    let mut guard = lock();
    let rec = native_recorder!(guard);
    if end(rec, block).is_none() {
        rec.native.unknown_frees += 1;
    }
}

/// A new anonymous private mapping.
pub(crate) fn mapped(t: &HookThread, start: u64, len: u64) {
    let (walked, gil) = walk(t);
    let mut guard = lock();
    let rec = native_recorder!(guard);
    let stack = intern(rec, walked, gil);
    let change = rec.native.ranges.map(start, len, stack);
    apply(rec, change);
}

/// `munmap(start, len)`: whatever it covers of our ranges ends.
pub(crate) fn unmapped(start: u64, len: u64) {
    let mut guard = lock();
    let rec = native_recorder!(guard);
    let change = rec.native.ranges.unmap(start, len);
    if change.is_empty() {
        rec.native.unknown_frees += 1;
    }
    apply(rec, change);
}

/// `mremap`: a followed mapping moved or changed size.
pub(crate) fn remapped(old: u64, old_len: u64, new: u64, new_len: u64) {
    let mut guard = lock();
    let rec = native_recorder!(guard);
    let change = rec.native.ranges.remap(old, old_len, new, new_len);
    if change.is_empty() {
        rec.native.unknown_frees += 1;
    }
    apply(rec, change);
}
