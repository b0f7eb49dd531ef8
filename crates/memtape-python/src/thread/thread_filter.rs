//! Threads left out of a recording: a `%%memtape` cell records the cell's thread and the
//! threads started while it runs, not the kernel's own threads (its I/O, heartbeat and
//! control threads, ZeroMQ's), whose work goes on beside the cell and is not the cell's.
//!
//! The threads are named by their kernel thread ids when the recording starts. Each
//! thread decides once per filter (an epoch) whether it is one of them, at its first
//! allocation after the filter was set, and keeps the answer in its [`HookThread`]: the
//! hooks then pay one relaxed load and a compare.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

use pyo3::prelude::*;

use super::hook_mode::HookThread;

/// The current filter's epoch; 0: no filter, every thread records.
static EPOCH: AtomicU32 = AtomicU32::new(0);

/// The kernel thread ids left out by the current filter.
static LEFT_OUT: Mutex<Vec<i64>> = Mutex::new(Vec::new());

/// _record_threads_except(thread_ids, /)
/// Leaves the threads with these kernel thread ids (`threading.get_native_id()`, the
/// entries of `/proc/self/task`) out of what is recorded from now on: their allocations
/// are not recorded (their frees are, as memtape's own). An empty list records every
/// thread again.
#[pyfunction]
pub(crate) fn _record_threads_except(thread_ids: Vec<i64>) {
    let mut left_out = LEFT_OUT.lock().unwrap_or_else(|e| e.into_inner());
    let empty = thread_ids.is_empty();
    *left_out = thread_ids;
    if empty {
        EPOCH.store(0, Ordering::Release);
    } else {
        // Skips 0 when it wraps: 0 means no filter.
        let next = EPOCH.load(Ordering::Relaxed).wrapping_add(1).max(1);
        EPOCH.store(next, Ordering::Release);
    }
}

/// Whether the calling thread's allocations are recorded under the current filter.
#[inline(always)]
pub(crate) fn records(t: &HookThread) -> bool {
    let epoch = EPOCH.load(Ordering::Relaxed);
    if epoch == 0 {
        return true;
    }
    if t.filter_epoch.get() == epoch {
        return !t.left_out.get();
    }
    decide(t, epoch)
}

#[cold]
#[inline(never)]
fn decide(t: &HookThread, epoch: u32) -> bool {
    // SAFETY: gettid takes no arguments and cannot fail.
    let me = unsafe { libc::syscall(libc::SYS_gettid) };
    // A search of the list, no allocation (a hook may be running).
    let left_out = LEFT_OUT
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains(&me);
    t.left_out.set(left_out);
    t.filter_epoch.set(epoch);
    !left_out
}
