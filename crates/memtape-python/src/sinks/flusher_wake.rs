//! Waking the capture's flusher thread: the sink does when a block is full, the flusher
//! waits on it between looks. Held across `fork()` so that a child never inherits it
//! locked.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// Wake-ups posted so far (for tests: one per full block, not one per event).
static POSTED: AtomicU64 = AtomicU64::new(0);

/// How many wake-ups [`wake_flusher`] has posted in this process.
#[cfg(test)]
pub(crate) fn posted() -> u64 {
    POSTED.load(Ordering::Relaxed)
}

/// What the flusher waits on: `(work to do, stop)`.
pub(crate) struct Wake {
    pub(crate) flag: Mutex<(bool, bool)>, // (work to do, stop)
    pub(crate) cond: Condvar,
}

static WAKE: std::sync::OnceLock<Arc<Wake>> = std::sync::OnceLock::new();

/// The flusher's wake-up.
pub(crate) fn wake() -> &'static Arc<Wake> {
    WAKE.get_or_init(|| {
        Arc::new(Wake {
            flag: Mutex::new((false, false)),
            cond: Condvar::new(),
        })
    })
}

/// Wakes the flusher early (never waits: a busy flag means it is awake anyway). Returns
/// whether the wake-up was posted; when not, the caller may try again later (the flusher
/// also looks by itself every few milliseconds).
pub(crate) fn wake_flusher() -> bool {
    match wake().flag.try_lock() {
        Ok(mut f) => {
            f.0 = true;
            wake().cond.notify_one();
            POSTED.fetch_add(1, Ordering::Relaxed);
            true
        }
        Err(_) => false,
    }
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
