//! The event recorder's clock: a tick count on the hot path, wall time when events are
//! read.
//!
//! Where the kernel itself keeps time with the CPU's invariant time-stamp counter
//! (x86-64, clocksource `tsc`: the kernel checked that the counters of all CPUs agree and
//! switches away when they do not; [`arch::cycle_counter_keeps_time`]), a tick is one
//! `rdtsc`, about 11 ns on the 2-core VM against 30 ns for `CLOCK_REALTIME` through the
//! vDSO (which adds a fence, a sequence lock and the conversion). Elsewhere a tick is a nanosecond of `CLOCK_REALTIME`.
//!
//! Most Python-heap events do not read the counter ([`ticks_on`]): a thread's event reuses
//! the thread's last reading for up to 15 events while the beat of memtape's clock thread
//! ([`clock_beat`], a millisecond) has not moved, so its time is its own or at most a
//! beat early, and the first event after a pause of a beat or more reads. On the
//! developers' VM that spares about 12 ns of `rdtsc` (microcoded on AMD) on 15 events of
//! 16; native and framework events read every time.
//!
//! Each recording fixes its conversion when it starts, so that reading its events twice
//! gives the same times: the wall time read with the ticks at its start, plus ticks at the
//! counter's rate, measured between the first anchor of the process and the recording's
//! start (at least [`CALIBRATION_NS`] apart: the first recording of a process waits for
//! that once). The conversion resolves below a nanosecond; the event ring keeps times in ring
//! order and the conversion is increasing, so the viewer's `time_us` never goes back.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

use memtape_core::{ClockAnchor, TickScale};

use super::clock_beat;
use crate::arch;
use crate::thread::thread_clock::ThreadClock;
use crate::thread::thread_id;

const UNDECIDED: u8 = 0;
const TSC: u8 = 1;
const REALTIME: u8 = 2;

/// The shortest span over which the counter's rate is measured.
const CALIBRATION_NS: u64 = 5_000_000;

/// The first anchor of the process, read when the source was decided.
static FIRST: OnceLock<ClockAnchor> = OnceLock::new();

/// What a tick is; decided once, before the first recording starts, and never changed
/// (so that every kept event counts in the same ticks).
static SOURCE: AtomicU8 = AtomicU8::new(UNDECIDED);

/// Events one counter reading serves on a thread, itself included, within one beat.
const READING_SERVES: u32 = 16;

/// The tick count of an event of the thread whose clock state is `clock`: the thread's
/// last reading while the clock's beat has not moved since and that reading has served
/// fewer than [`READING_SERVES`] events, else a new reading. So an event's time is its
/// own, or that of an event at most 15 before it on its thread and in the same beat (at
/// most [`clock_beat::PERIOD`] earlier, while the clock thread keeps time). With no beat
/// (no clock thread, or one resting), every event reads.
#[inline(always)]
pub(crate) fn ticks_on(clock: &ThreadClock) -> u64 {
    let beat = clock_beat::current();
    if let Some(ticks) = clock.reuse(beat) {
        return ticks;
    }
    let now = ticks();
    clock.keep(beat, now, if beat == 0 { 0 } else { READING_SERVES - 1 });
    clock_beat::note_reading();
    now
}

/// The current tick count.
#[inline(always)]
pub(crate) fn ticks() -> u64 {
    if SOURCE.load(Ordering::Relaxed) == TSC {
        // Only where the kernel keeps time with an invariant, synchronized counter (see
        // `decide`).
        return arch::cycle_counter();
    }
    thread_id::now_ns()
}

/// Decides what a tick is (once per process). Call before any event is recorded.
pub(crate) fn decide() {
    if SOURCE.load(Ordering::Acquire) == UNDECIDED {
        let source = if tsc_keeps_time() { TSC } else { REALTIME };
        let _ = SOURCE.compare_exchange(UNDECIDED, source, Ordering::AcqRel, Ordering::Acquire);
    }
    FIRST.get_or_init(anchor);
}

/// Whether the cycle counter keeps time (see [`arch::cycle_counter_keeps_time`]), unless
/// `MEMTAPE_EVENT_CLOCK=realtime` asks for the wall clock.
fn tsc_keeps_time() -> bool {
    if std::env::var_os("MEMTAPE_EVENT_CLOCK").is_some_and(|v| v == "realtime") {
        return false;
    }
    arch::cycle_counter_keeps_time()
}

/// Ticks and wall time read together: the ticks halfway through the wall-clock read, of
/// the tightest of three tries (a thread preempted in between would skew the pair).
pub(crate) fn anchor() -> ClockAnchor {
    let mut best = (u64::MAX, ClockAnchor { ticks: 0, ns: 0 });
    for _ in 0..3 {
        let before = ticks();
        let ns = thread_id::now_ns();
        let window = ticks().saturating_sub(before);
        if window < best.0 {
            let ticks = before + window / 2;
            best = (window, ClockAnchor { ticks, ns });
        }
    }
    best.1
}

/// The conversion of a recording starting now (after [`decide`]): its start anchor and
/// the counter's rate since the process's first anchor, waiting until that span is at
/// least [`CALIBRATION_NS`] long.
pub(crate) fn recording_scale() -> TickScale {
    if SOURCE.load(Ordering::Relaxed) != TSC {
        return TickScale::Identity;
    }
    let first = *FIRST.get_or_init(anchor);
    let start = loop {
        let now = anchor();
        if now.ns.saturating_sub(first.ns) >= CALIBRATION_NS || now.ns < first.ns {
            break now;
        }
        std::hint::spin_loop();
    };
    // The same rate as from `first` to `start`, laid from `start`.
    let end = ClockAnchor {
        ticks: start.ticks + start.ticks.saturating_sub(first.ticks),
        ns: start.ns + start.ns.saturating_sub(first.ns),
    };
    TickScale::Linear { start, end }
}
