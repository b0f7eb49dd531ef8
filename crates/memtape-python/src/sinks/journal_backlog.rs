//! A bound on the capture journal: the flusher takes the journal every few milliseconds,
//! but on a busy machine it may get a small share of a CPU, and the journal the hooks
//! append to would then grow for as long as the program runs (on alloc_heavy, tens of
//! MiB in the traced process, and twice that allocated: the flusher's spare journal keeps
//! its size). Once the journal holds [`JOURNAL_LIMIT`] entries, a thread recording a
//! Python-heap block waits, outside the recorder lock, until the flusher has taken it:
//! the program then runs at the pace its capture is written, as with a tracer that writes
//! from the allocating thread.
//!
//! Only the Python-heap hooks wait (the bulk of the events, made where CPython may wait
//! anyway); a native hook may run inside the loader or libc with their locks held, and
//! never waits. Should the flusher not take the journal within [`GIVE_UP_AFTER`] (it is
//! stuck, or gone without saying so), the capture stops waiting for good and the journal
//! grows as before: memory, not a stalled program.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::flusher_wake::wake_flusher;

/// Journal entries after which the flusher is woken early (it takes the journal anyway
/// every `FLUSH_INTERVAL`, which bounds what a killed process loses): 768 KiB of entries,
/// about a fourth of a block.
pub(crate) const JOURNAL_TARGET: usize = 32 * 1024;
/// Journal entries (24 bytes each) at which recording threads wait for the flusher:
/// 3 MiB, four times the size at which the flusher is woken (the journal's capacity
/// then stops at 3.1 MiB: its first size doubled twice).
pub(crate) const JOURNAL_LIMIT: usize = 4 * JOURNAL_TARGET;

/// The longest one wait lasts before the capture stops waiting. Long: a flusher starved
/// of CPU (a busy machine, a low priority) still takes the journal, late, and the bound
/// must hold then; only a flusher that stopped for good should end it.
const GIVE_UP_AFTER: Duration = Duration::from_secs(10);

/// How long a waiting thread sleeps between two looks (its CPU goes to the flusher).
const NAP: Duration = Duration::from_micros(100);

/// True while the journal holds [`JOURNAL_LIMIT`] entries or more.
static FULL: AtomicBool = AtomicBool::new(false);

/// True once a wait gave up in this capture: nothing waits any more.
static GAVE_UP: AtomicBool = AtomicBool::new(false);

/// A new capture (or a forked child's, whose flusher is gone): nothing waits.
pub(crate) fn reset() {
    FULL.store(false, Ordering::Release);
    GAVE_UP.store(false, Ordering::Release);
}

/// The journal holds `len` entries (the sink looks every few hundred events, under the
/// recorder lock).
#[inline]
pub(crate) fn note_len(len: usize) {
    if len >= JOURNAL_LIMIT && !GAVE_UP.load(Ordering::Relaxed) {
        FULL.store(true, Ordering::Release);
    }
}

/// The flusher took the journal (under the recorder lock): the waiting threads go on.
#[inline]
pub(crate) fn taken() {
    FULL.store(false, Ordering::Release);
}

/// Whether the journal is full: a thread recording a block now waits for the flusher.
#[inline(always)]
pub(crate) fn is_full() -> bool {
    FULL.load(Ordering::Relaxed)
}

/// Whether a thread that recorded a block must wait for the flusher (one load).
/// `capturing` says whether a capture is still recorded (the recorder's flag, given by
/// the caller: the sinks sit below the recorder); a wait ends when it turns false.
#[inline(always)]
pub(crate) fn wait_if_full(capturing: &AtomicBool) {
    if is_full() {
        wait_for_flusher(capturing);
    }
}

/// Waits until the flusher has taken the full journal, the capture has ended, or the
/// wait has lasted [`GIVE_UP_AFTER`]. Called without the recorder lock; allocates
/// nothing.
#[cold]
#[inline(never)]
fn wait_for_flusher(capturing: &AtomicBool) {
    let start = Instant::now();
    wake_flusher();
    while FULL.load(Ordering::Acquire) {
        if !capturing.load(Ordering::Acquire) {
            FULL.store(false, Ordering::Release);
            return;
        }
        if start.elapsed() >= GIVE_UP_AFTER {
            GAVE_UP.store(true, Ordering::Release);
            FULL.store(false, Ordering::Release);
            return;
        }
        std::thread::sleep(NAP);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_journal_is_flagged_until_taken() {
        reset();
        note_len(JOURNAL_LIMIT - 1);
        assert!(!FULL.load(Ordering::Acquire));
        note_len(JOURNAL_LIMIT);
        assert!(FULL.load(Ordering::Acquire));
        taken();
        assert!(!FULL.load(Ordering::Acquire));
        // No capture records here: a wait returns at once, and clears the flag.
        note_len(JOURNAL_LIMIT);
        wait_if_full(&AtomicBool::new(false));
        assert!(!FULL.load(Ordering::Acquire));
        reset();
    }
}
