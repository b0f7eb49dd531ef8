//! A tiny spin lock for the recorder.
//!
//! Allocation hooks run with the GIL held (MEM/OBJ) or without it (RAW), so the recorder
//! needs its own lock; it is held for a few hundred nanoseconds at most and never across a
//! call into Python. A spin lock (rather than a parking lock) can be reset in a forked
//! child, where the thread that held it no longer exists.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};

/// Mutual exclusion by spinning, yielding the CPU after a short while.
pub(crate) struct SpinLock<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: access to `value` is serialized by `locked` (acquire on lock, release on unlock),
// so sharing the lock between threads is sound when T itself can move between threads.
unsafe impl<T: Send> Sync for SpinLock<T> {}

/// Proof of holding the lock; unlocks on drop.
pub(crate) struct SpinGuard<'a, T> {
    lock: &'a SpinLock<T>,
}

impl<T> SpinLock<T> {
    pub(crate) const fn new(value: T) -> Self {
        Self {
            locked: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    #[inline]
    pub(crate) fn lock(&self) -> SpinGuard<'_, T> {
        let mut spins = 0u32;
        while self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        SpinGuard { lock: self }
    }

    /// Takes the lock and keeps it until [`SpinLock::release_after_fork`]: used around
    /// `fork()` so that the child never inherits a half-updated recorder.
    pub(crate) fn acquire_for_fork(&self) {
        std::mem::forget(self.lock());
    }

    /// Releases a lock taken with [`SpinLock::acquire_for_fork`] (in the parent, or in the
    /// child where the only thread left is the one that forked).
    pub(crate) fn release_after_fork(&self) {
        self.locked.store(false, Ordering::Release);
    }
}

impl<T> Deref for SpinGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard exists only while this thread holds the lock.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for SpinGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard exists only while this thread holds the lock, and `&mut self`
        // makes this the only reference derived from it.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for SpinGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.locked.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn counts_exactly_under_contention() {
        let lock = Arc::new(SpinLock::new(0u64));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let lock = Arc::clone(&lock);
                std::thread::spawn(move || {
                    for _ in 0..50_000 {
                        *lock.lock() += 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*lock.lock(), 200_000);
    }

    #[test]
    fn fork_acquire_and_release() {
        let lock = SpinLock::new(1);
        lock.acquire_for_fork();
        assert!(lock.locked.load(Ordering::Relaxed));
        lock.release_after_fork();
        assert_eq!(*lock.lock(), 1);
    }
}
