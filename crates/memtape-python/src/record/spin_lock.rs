//! A tiny spin lock for the recorder.
//!
//! Allocation hooks run with the GIL held (MEM/OBJ) or without it (RAW), so the recorder
//! needs its own lock; it is held for a few hundred nanoseconds at most and never across a
//! call into Python. A spin lock (rather than a parking lock) can be reset in a forked
//! child, where the thread that held it no longer exists.

//!
//! The lock word holds the holder's thread token (0 when free), taken in the same atomic
//! step as the lock, so a signal handler that runs on the holding thread and reaches an
//! allocation hook can tell that waiting would wait for itself
//! ([`SpinLock::lock_unless_held_here`]).

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::thread::thread_id::thread_token;

/// Mutual exclusion by spinning, yielding the CPU after a short while.
pub(crate) struct SpinLock<T> {
    /// 0 when free, else the holding thread's [`thread_token`].
    locked: AtomicUsize,
    value: UnsafeCell<T>,
}

// SAFETY: access to `value` is serialized by `locked` (acquire on lock, release on unlock),
// so sharing the lock between threads is sound when T itself can move between threads.
unsafe impl<T: Send> Sync for SpinLock<T> {}

/// Proof of holding the lock; unlocks on drop. A pointer in registers and calls
/// (`repr(transparent)`: the free hook hands it to an `extern "C"` helper).
#[repr(transparent)]
pub(crate) struct SpinGuard<'a, T> {
    lock: &'a SpinLock<T>,
}

impl<T> SpinLock<T> {
    pub(crate) const fn new(value: T) -> Self {
        Self {
            locked: AtomicUsize::new(0),
            value: UnsafeCell::new(value),
        }
    }

    #[inline(always)]
    pub(crate) fn lock(&self) -> SpinGuard<'_, T> {
        let me = thread_token();
        if self
            .locked
            .compare_exchange_weak(0, me, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_contended(me);
        }
        SpinGuard { lock: self }
    }

    /// Waits for the lock held by another thread (or for a spurious failure to pass).
    #[cold]
    fn lock_contended(&self, me: usize) {
        let mut spins = 0u32;
        while self
            .locked
            .compare_exchange_weak(0, me, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// The lock if it is free now (one atomic step), else `None`, whoever holds it.
    #[inline(always)]
    pub(crate) fn try_lock(&self) -> Option<SpinGuard<'_, T>> {
        self.locked
            .compare_exchange(0, thread_token(), Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| SpinGuard { lock: self })
    }

    /// Like [`SpinLock::lock`], but `None` when the calling thread holds the lock already:
    /// an allocation hook reached from a signal handler that interrupted the holder
    /// (waiting would never end).
    #[inline]
    pub(crate) fn lock_unless_held_here(&self) -> Option<SpinGuard<'_, T>> {
        self.lock_for_hook(Duration::MAX)
    }

    /// Like [`SpinLock::lock_unless_held_here`] (this with no end to the patience), but
    /// also `None` once another thread has held the lock for `patience` while this one
    /// waited. A native hook's way in: a
    /// signal handler that allocates can interrupt its thread inside libc's allocator,
    /// holding the arena's lock, while another thread holds this lock and waits for that
    /// arena; waiting on would never end, and the handler must return for either thread
    /// to go on. The clock is read only after the spinning, once in 64 yields
    /// (`clock_gettime` is async-signal-safe).
    #[inline]
    pub(crate) fn lock_for_hook(&self, patience: Duration) -> Option<SpinGuard<'_, T>> {
        let me = thread_token();
        let mut spins = 0u32;
        let mut since: Option<Instant> = None;
        while let Err(holder) =
            self.locked
                .compare_exchange_weak(0, me, Ordering::Acquire, Ordering::Relaxed)
        {
            if holder == me {
                return None;
            }
            spins = spins.wrapping_add(1);
            if spins < 64 {
                std::hint::spin_loop();
                continue;
            }
            std::thread::yield_now();
            if spins % 64 == 0 && since.get_or_insert_with(Instant::now).elapsed() >= patience {
                return None;
            }
        }
        Some(SpinGuard { lock: self })
    }

    /// Takes the lock and keeps it until [`SpinLock::release_after_fork`]: used around
    /// `fork()` so that the child never inherits a half-updated recorder.
    pub(crate) fn acquire_for_fork(&self) {
        std::mem::forget(self.lock());
    }

    /// Releases a lock taken with [`SpinLock::acquire_for_fork`] (in the parent, or in the
    /// child where the only thread left is the one that forked).
    pub(crate) fn release_after_fork(&self) {
        self.locked.store(0, Ordering::Release);
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
        self.lock.locked.store(0, Ordering::Release);
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
        assert_ne!(lock.locked.load(Ordering::Relaxed), 0);
        lock.release_after_fork();
        assert_eq!(*lock.lock(), 1);
    }

    #[test]
    fn the_holder_is_told_instead_of_waiting() {
        let lock = Arc::new(SpinLock::new(0u32));
        let held = lock.lock();
        assert!(lock.lock_unless_held_here().is_none());
        let other = Arc::clone(&lock);
        let waiter = std::thread::spawn(move || *other.lock_unless_held_here().unwrap() + 1);
        std::thread::sleep(std::time::Duration::from_millis(20));
        drop(held);
        assert_eq!(waiter.join().unwrap(), 1);
        assert!(lock.lock_unless_held_here().is_some());
    }

    #[test]
    fn a_hook_waits_for_the_holder_but_not_past_its_patience() {
        let lock = Arc::new(SpinLock::new(0u32));
        let held = lock.lock();
        let patience = Duration::from_millis(40);
        assert!(
            lock.lock_for_hook(patience).is_none(),
            "held by this thread"
        );
        // Held by another thread that never lets go (the handler's deadlock): given up.
        let other = Arc::clone(&lock);
        let start = Instant::now();
        let waited = std::thread::spawn(move || other.lock_for_hook(patience).is_none());
        assert!(waited.join().unwrap());
        assert!(start.elapsed() >= patience);
        // Held for less than the patience: the waiter gets the lock.
        let other = Arc::clone(&lock);
        let waiter = std::thread::spawn(move || {
            other.lock_for_hook(Duration::from_secs(30)).map(|mut g| {
                *g += 1;
                *g
            })
        });
        std::thread::sleep(Duration::from_millis(20));
        drop(held);
        assert_eq!(waiter.join().unwrap(), Some(1));
        assert_eq!(*lock.lock_for_hook(patience).unwrap(), 1);
    }

    #[test]
    fn try_lock_takes_only_a_free_lock() {
        let lock = Arc::new(SpinLock::new(0u32));
        let held = lock.try_lock().unwrap();
        assert!(lock.try_lock().is_none());
        let other = Arc::clone(&lock);
        assert!(std::thread::spawn(move || other.try_lock().is_none())
            .join()
            .unwrap());
        drop(held);
        *lock.try_lock().unwrap() += 1;
        assert_eq!(*lock.lock(), 1);
    }
}
