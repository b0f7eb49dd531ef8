//! The event clock's beat: a count that memtape's clock thread moves on every
//! millisecond while Python-heap events are recorded, so that a thread's event can tell
//! whether its thread's last counter reading is still recent without reading the counter
//! ([`super::event_clock::ticks_on`]).
//!
//! Beat 0 means no beat: no clock thread (none started yet, or a forked child, which has
//! none), or one resting because no event read the counter for [`QUIET_BEATS`]
//! beats. Every event then reads the counter. A beat is never reused, so a reading kept
//! from an earlier beat never matches a later one.
//!
//! The thread costs one wake-up a millisecond while the program records events (about
//! 20 µs of CPU each on the developers' VM, 2 % of a core), one each
//! [`REST`] while it rests, and none once the recording stops: it ends then.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// How often the beat moves while events are read: the longest an event's time can lag
/// behind the event (see [`super::event_clock`]), scheduling delays aside.
pub(crate) const PERIOD: Duration = Duration::from_millis(1);

/// Beats with no counter reading (no event on any thread) after which the beat rests.
const QUIET_BEATS: u32 = 8;

/// How long a resting clock thread sleeps between looks for events.
const REST: Duration = Duration::from_millis(5);

/// The current beat; 0 while there is none.
static BEAT: AtomicU64 = AtomicU64::new(0);

/// The last beat given, by any clock thread of the process (or of the parent it was
/// forked from): beats are counted on from it.
static GIVEN: AtomicU64 = AtomicU64::new(0);

/// Moved on by every counter reading (racy: only whether it moved is read).
static READINGS: AtomicU64 = AtomicU64::new(0);

/// Whether a clock thread runs (or is being started).
static RUNNING: AtomicBool = AtomicBool::new(false);

/// The current beat (0: none).
#[inline(always)]
pub(crate) fn current() -> u64 {
    BEAT.load(Ordering::Relaxed)
}

/// Tells the clock thread that an event read the counter. A plain load and store, not a
/// read-modify-write: a lost update still moves the value.
#[inline(always)]
pub(crate) fn note_reading() {
    READINGS.store(
        READINGS.load(Ordering::Relaxed).wrapping_add(1),
        Ordering::Relaxed,
    );
}

/// Claims the right to run the clock thread: true when none runs, and the caller must
/// then run [`run`] on a thread of its own (or call [`not_started`]).
pub(crate) fn claim() -> bool {
    !RUNNING.swap(true, Ordering::AcqRel)
}

/// The clock thread claimed by [`claim`] could not be started.
pub(crate) fn not_started() {
    RUNNING.store(false, Ordering::Release);
}

/// In a forked child (its fork handler): the parent's clock thread is not in the child,
/// so there is no beat, and a new recording starts a thread again.
pub(crate) fn forget_in_child() {
    BEAT.store(0, Ordering::Relaxed);
    RUNNING.store(false, Ordering::Release);
}

/// The clock thread's body: beats while events are recorded (`recording`) and read, rests
/// while none are read, and returns once no recording runs.
pub(crate) fn run(recording: impl Fn() -> bool) {
    let mut seen = READINGS.load(Ordering::Relaxed);
    let mut quiet = 0;
    loop {
        if !recording() && !keep_running(&recording) {
            return;
        }
        std::thread::sleep(if quiet >= QUIET_BEATS { REST } else { PERIOD });
        let readings = READINGS.load(Ordering::Relaxed);
        if readings != seen {
            seen = readings;
            quiet = 0;
        } else {
            quiet = quiet.saturating_add(1);
        }
        if quiet >= QUIET_BEATS {
            BEAT.store(0, Ordering::Relaxed);
        } else {
            // Never 0, never one given before (the count cannot wrap in practice).
            let beat = GIVEN.fetch_add(1, Ordering::Relaxed) + 1;
            BEAT.store(beat, Ordering::Relaxed);
        }
    }
}

/// No recording runs: the beat stops and the thread gives up its claim, unless a
/// recording started again meanwhile and no other thread claimed it (then it goes on).
fn keep_running(recording: impl Fn() -> bool) -> bool {
    BEAT.store(0, Ordering::Relaxed);
    RUNNING.store(false, Ordering::Release);
    recording() && claim()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    /// Polls `f` until it gives `Some`, for at most five seconds.
    fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Some(v) = f() {
                return v;
            }
            assert!(Instant::now() < deadline, "timed out waiting: {what}");
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    #[test]
    fn beats_while_read_rests_while_not_and_ends_with_the_recording() {
        let recording = Arc::new(AtomicBool::new(true));
        let flag = Arc::clone(&recording);
        assert!(claim());
        assert!(!claim(), "one clock thread at a time");
        let thread = std::thread::spawn(move || run(|| flag.load(Ordering::Acquire)));
        let first = wait_for("a first beat", || {
            note_reading();
            Some(current()).filter(|&b| b != 0)
        });
        let later = wait_for("the beat to move on", || {
            note_reading();
            Some(current()).filter(|&b| b > first)
        });
        wait_for("the beat to rest without readings", || {
            (current() == 0).then_some(())
        });
        let resumed = wait_for("a reading to wake the beat", || {
            note_reading();
            Some(current()).filter(|&b| b != 0)
        });
        assert!(resumed > later, "a beat is never given twice");
        recording.store(false, Ordering::Release);
        thread.join().unwrap();
        assert_eq!(current(), 0, "no beat once the thread ended");
        assert!(claim(), "the thread gave up its claim");
        not_started();
    }
}
