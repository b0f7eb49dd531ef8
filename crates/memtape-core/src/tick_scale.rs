//! Turning a fast clock's ticks into wall time: linear between two anchors, each a tick
//! count and the wall time (nanoseconds since the Unix epoch) read together.

/// A tick count and the wall time read at the same moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockAnchor {
    /// The fast clock's count.
    pub ticks: u64,
    /// Nanoseconds since the Unix epoch.
    pub ns: u64,
}

/// Ticks to nanoseconds since the Unix epoch, interpolated between a start and an end
/// anchor (taken before the first and after the last tick to convert). When ticks are
/// already nanoseconds of the wall clock, conversion is the identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TickScale {
    /// Ticks are wall-clock nanoseconds.
    Identity,
    /// Ticks of a counter running at a constant rate.
    Linear {
        /// Read before the first tick converted.
        start: ClockAnchor,
        /// Read after the last tick converted.
        end: ClockAnchor,
    },
}

impl TickScale {
    /// The wall time of `ticks`. Order is kept: a later tick never converts to an earlier
    /// time. Ticks before the start anchor convert to its time; a span with no ticks or
    /// no time (a wall clock stepped back) converts everything to the start time.
    pub fn ns(&self, ticks: u64) -> u64 {
        match *self {
            TickScale::Identity => ticks,
            TickScale::Linear { start, end } => {
                let span_ticks = end.ticks.saturating_sub(start.ticks);
                let span_ns = end.ns.saturating_sub(start.ns);
                if span_ticks == 0 {
                    return start.ns;
                }
                let dt = u128::from(ticks.saturating_sub(start.ticks));
                let offset = dt * u128::from(span_ns) / u128::from(span_ticks);
                start
                    .ns
                    .saturating_add(u64::try_from(offset).unwrap_or(u64::MAX))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interpolates_between_anchors_and_keeps_order() {
        // A 3 GHz counter: 3 ticks per nanosecond.
        let scale = TickScale::Linear {
            start: ClockAnchor {
                ticks: 1_000,
                ns: 1_700_000_000_000_000_000,
            },
            end: ClockAnchor {
                ticks: 1_000 + 3_000_000_000,
                ns: 1_700_000_001_000_000_000,
            },
        };
        assert_eq!(scale.ns(1_000), 1_700_000_000_000_000_000);
        assert_eq!(scale.ns(1_000 + 3_000), 1_700_000_000_000_001_000);
        assert_eq!(scale.ns(1_000 + 3_000_000_000), 1_700_000_001_000_000_000);
        assert_eq!(scale.ns(0), 1_700_000_000_000_000_000);
        let times: Vec<u64> = (0..1000u64).map(|t| scale.ns(1_000 + t * 7)).collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(TickScale::Identity.ns(42), 42);
    }

    #[test]
    fn degenerate_spans_give_the_start_time() {
        let start = ClockAnchor { ticks: 10, ns: 500 };
        let still = TickScale::Linear { start, end: start };
        assert_eq!(still.ns(99), 500);
        let stepped_back = TickScale::Linear {
            start,
            end: ClockAnchor { ticks: 20, ns: 100 },
        };
        assert_eq!(stepped_back.ns(15), 500);
    }
}
