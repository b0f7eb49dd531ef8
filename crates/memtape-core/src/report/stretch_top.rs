//! The highest live bytes of a stretch of events that share a time stamp.
//!
//! A capture's clock advances in `Time` records (alloc_heavy: 4,032 of them for 36 M
//! events), so every event between two of them has the same time. The memory series and
//! the clock ticks keep, per time bucket, the highest live bytes (the first event to reach
//! it) and the live bytes at the end; fed once per stretch with its top and its end, they
//! come out the same as fed after every event, for a compare per event instead of their
//! bucket arithmetic.

use crate::memory_source::SourceSplit;

/// The top of one stretch: its highest live bytes, when, and by source then.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Top {
    pub(crate) bytes: u64,
    pub(crate) event_index: u64,
    pub(crate) by_source: SourceSplit,
}

/// The top of the stretch being read.
#[derive(Debug, Default)]
pub(crate) struct StretchTop {
    /// 0 before the stretch's first event, else the top's bytes + 1: one compare takes
    /// the first event and every later one above the top, and ties keep the first.
    bar: u64,
    top: Top,
}

impl StretchTop {
    /// Live bytes were `bytes` after event `event_index`.
    #[inline(always)]
    pub(crate) fn observe(&mut self, bytes: u64, event_index: u64, by_source: &SourceSplit) {
        if bytes >= self.bar {
            self.raise(bytes, event_index, by_source);
        }
    }

    #[inline(always)]
    fn raise(&mut self, bytes: u64, event_index: u64, by_source: &SourceSplit) {
        self.bar = bytes.saturating_add(1);
        self.top = Top {
            bytes,
            event_index,
            by_source: *by_source,
        };
    }

    /// Ends the stretch: its top, when it saw an event.
    #[inline]
    pub(crate) fn end(&mut self) -> Option<Top> {
        let seen = self.bar != 0;
        self.bar = 0;
        seen.then_some(self.top)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_first_event_at_the_highest_bytes() {
        let none = SourceSplit::default();
        let mut s = StretchTop::default();
        assert_eq!(s.end(), None);
        // A stretch whose first event is its top even at 0 bytes.
        s.observe(0, 0, &none);
        s.observe(0, 1, &none);
        assert_eq!(s.end().map(|t| (t.bytes, t.event_index)), Some((0, 0)));
        s.observe(5, 2, &none);
        s.observe(9, 3, &none);
        s.observe(9, 4, &none);
        s.observe(7, 5, &none);
        assert_eq!(s.end().map(|t| (t.bytes, t.event_index)), Some((9, 3)));
        assert_eq!(s.end(), None);
    }
}
