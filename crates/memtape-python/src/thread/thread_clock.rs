//! A thread's last reading of the event clock's counter, which the thread's next events
//! may reuse: [`crate::record::event_clock`] decides when (an event reuses it only while
//! the clock's beat has not moved since, and for a few events at most).

use std::cell::Cell;

/// The calling thread's last counter reading.
pub(crate) struct ThreadClock {
    /// The beat the reading was made in ([`crate::record::clock_beat`]).
    beat: Cell<u64>,
    /// Events that may still reuse the reading.
    left: Cell<u32>,
    /// The reading, in event-clock ticks.
    ticks: Cell<u64>,
}

impl ThreadClock {
    /// No reading yet.
    pub(crate) const fn new() -> Self {
        Self {
            beat: Cell::new(0),
            left: Cell::new(0),
            ticks: Cell::new(0),
        }
    }

    /// The last reading when it was made in `beat` and may serve one more event (which
    /// this counts), else `None`.
    #[inline(always)]
    pub(crate) fn reuse(&self, beat: u64) -> Option<u64> {
        let left = self.left.get();
        if beat != self.beat.get() || left == 0 {
            return None;
        }
        self.left.set(left - 1);
        Some(self.ticks.get())
    }

    /// Keeps `ticks`, read in `beat`, for the next `reuses` events.
    #[inline(always)]
    pub(crate) fn keep(&self, beat: u64, ticks: u64, reuses: u32) {
        self.beat.set(beat);
        self.left.set(reuses);
        self.ticks.set(ticks);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reading_serves_its_beat_for_as_many_events_as_kept() {
        let c = ThreadClock::new();
        assert_eq!(c.reuse(0), None, "no reading yet");
        c.keep(5, 1000, 2);
        assert_eq!(c.reuse(5), Some(1000));
        assert_eq!(c.reuse(5), Some(1000));
        assert_eq!(c.reuse(5), None, "used up");
        c.keep(5, 2000, 2);
        assert_eq!(c.reuse(6), None, "the beat moved");
        c.keep(0, 3000, 0);
        assert_eq!(c.reuse(0), None, "kept for no event");
    }
}
