//! Keeping the recorder consistent across `fork()`.
//!
//! Before the fork the forking thread takes every lock another thread of memtape may hold
//! (the capture writer's wake-up lock, then the recorder lock, then the event store's), so that no other thread is
//! in the middle of an update, and stops recording its own allocations; both parent and
//! child release them afterwards. The child keeps tracing with the inherited traces, as
//! tracemalloc does.
//!
//! The other locks memtape uses are taken only with the GIL held and released before it
//! is (the capture's writer handle and failure message), and `fork()` runs with the GIL
//! held, so no other thread can hold them across it. Nothing is imported on a path that
//! starts or stops recording (`memtape._numpy_bridge` registers itself when `memtape` is
//! imported): a child forked while another thread imported would wait for that module's
//! import lock forever.

use std::cell::Cell;
use std::sync::Once;

use crate::record::recorder::RECORDER;
use crate::thread::hook_mode::{self, HookMode};

thread_local! {
    static MODE_BEFORE_FORK: Cell<HookMode> = const { Cell::new(HookMode::Idle) };
}

extern "C" fn prepare() {
    MODE_BEFORE_FORK.with(|m| m.set(hook_mode::set(HookMode::Forking)));
    crate::sinks::flusher_wake::before_fork();
    RECORDER.acquire_for_fork();
    crate::record::event_stage::acquire_for_fork();
}

extern "C" fn after_in_parent() {
    crate::record::event_stage::release_after_fork();
    RECORDER.release_after_fork();
    crate::sinks::flusher_wake::after_fork();
    hook_mode::set(MODE_BEFORE_FORK.with(Cell::get));
}

extern "C" fn after_in_child() {
    // First: the parent's other threads are gone, and their entries with them.
    crate::thread::thread_table::forget_all_in_child();
    crate::thread::first_touch::forget_all_in_child();
    // The child's thread has its own id; the cached one is the forking parent thread's.
    crate::thread::thread_id::forget();
    if let Some(t) = hook_mode::thread() {
        t.forget_tid();
    }
    crate::record::event_stage::release_after_fork();
    RECORDER.release_after_fork();
    crate::sinks::flusher_wake::after_fork();
    crate::record::clock_beat::forget_in_child();
    crate::record::event_stage::forget_in_child();
    // The only thread left is this one: locking cannot wait. A capture file belongs to
    // the parent (its writer thread is not in the child).
    if let Some(rec) = RECORDER.lock().as_mut() {
        crate::session::capture_session::forget_in_child(rec);
    }
    crate::record::recorder::publish();
    hook_mode::set(MODE_BEFORE_FORK.with(Cell::get));
}

/// Registers the fork handlers once per process.
pub(crate) fn register() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: the handlers are plain functions that never unwind; registering them
        // has no other precondition. A failure (ENOMEM) leaves fork unprotected, as before.
        let failed = unsafe {
            libc::pthread_atfork(Some(prepare), Some(after_in_parent), Some(after_in_child))
        };
        // The thread table must be cleared in a forked child: it is filled only then.
        if failed == 0 {
            crate::thread::thread_table::enable();
        }
    });
}
