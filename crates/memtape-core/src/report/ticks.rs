//! Live bytes per clock tick: what adding several processes' memory over time needs.
//!
//! A capture's clock advances in `Time` records, written at most every millisecond, so
//! events between two of them share a time. [`Ticks`] cuts time into ticks of `2^shift`
//! ns (about 1 ms to begin with) and keeps, for each tick that saw an event, the highest
//! live bytes in it and the live bytes at its end. Between ticks, live bytes stay at the
//! last tick's end. Summing several processes' ticks on a common clock then gives their
//! combined live memory at each moment, at tick resolution (within a tick, each process
//! counts at its highest). When there would be more than `max_points` ticks, neighbouring
//! ticks merge in pairs and the tick doubles, so a long run stays bounded.
//!
//! The replay feeds it once per stretch of events that share a time stamp (see
//! [`super::stretch_top`]): their highest live bytes and the live bytes after the last.

/// One tick that saw allocations or frees.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tick {
    /// The tick's number: it covers `[index << shift, (index + 1) << shift)` ns since the
    /// start of the recording.
    pub index: u64,
    /// The highest live bytes during the tick.
    pub max_bytes: u64,
    /// Live bytes at the end of the tick.
    pub end_bytes: u64,
}

/// The first tick: 2^20 ns, about a millisecond (the capture clock's resolution).
pub const FIRST_TICK_SHIFT: u32 = 20;
/// The default bound on the number of ticks kept.
pub const DEFAULT_MAX_TICKS: usize = 1 << 16;

/// Live bytes per tick, built while streaming.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ticks {
    shift: u32,
    max_points: usize,
    points: Vec<Tick>,
}

impl Default for Ticks {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_TICKS)
    }
}

impl Ticks {
    /// An empty series of at most `max_points` (at least 2) ticks.
    pub fn new(max_points: usize) -> Self {
        Self {
            shift: FIRST_TICK_SHIFT,
            max_points: max_points.max(2),
            points: Vec::new(),
        }
    }

    /// Takes in a stretch of events at `time_ns`: live bytes rose to `max_bytes` at most
    /// and were `end_bytes` after the last. The same as taking in each event's live bytes
    /// in turn.
    pub fn add_stretch(&mut self, time_ns: u64, max_bytes: u64, end_bytes: u64) {
        let index = time_ns >> self.shift;
        match self.points.last_mut() {
            Some(t) if t.index == index => {
                t.max_bytes = t.max_bytes.max(max_bytes);
                t.end_bytes = end_bytes;
            }
            _ => {
                self.points.push(Tick {
                    index,
                    max_bytes,
                    end_bytes,
                });
                if self.points.len() > self.max_points {
                    self.coarsen();
                }
            }
        }
    }

    /// Doubles the tick: neighbours merge, keeping the higher max and the later end.
    fn coarsen(&mut self) {
        self.shift += 1;
        let mut merged: Vec<Tick> = Vec::with_capacity(self.points.len() / 2 + 1);
        for t in &self.points {
            let index = t.index >> 1;
            match merged.last_mut() {
                Some(m) if m.index == index => {
                    m.max_bytes = m.max_bytes.max(t.max_bytes);
                    m.end_bytes = t.end_bytes;
                }
                _ => merged.push(Tick { index, ..*t }),
            }
        }
        self.points = merged;
    }

    /// The tick's width in ns.
    pub fn width_ns(&self) -> u64 {
        1u64 << self.shift
    }

    /// The ticks that saw events, in time order.
    pub fn points(&self) -> &[Tick] {
        &self.points
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_each_ticks_max_and_end() {
        let mut t = Ticks::new(100);
        let ms = 1u64 << FIRST_TICK_SHIFT;
        t.add_stretch(0, 10, 10);
        t.add_stretch(1, 30, 20);
        t.add_stretch(5 * ms, 5, 5);
        assert_eq!(t.width_ns(), ms);
        assert_eq!(
            t.points(),
            &[
                Tick {
                    index: 0,
                    max_bytes: 30,
                    end_bytes: 20
                },
                Tick {
                    index: 5,
                    max_bytes: 5,
                    end_bytes: 5
                }
            ]
        );
    }

    #[test]
    fn coarsens_to_stay_bounded_without_losing_the_max() {
        let mut t = Ticks::new(4);
        let ms = 1u64 << FIRST_TICK_SHIFT;
        for i in 0..64u64 {
            let bytes = if i == 37 { 1000 } else { i };
            t.add_stretch(i * ms, bytes, bytes);
        }
        assert!(t.points().len() <= 4, "{:?}", t.points());
        assert_eq!(t.points().iter().map(|p| p.max_bytes).max(), Some(1000));
        assert_eq!(t.points().last().unwrap().end_bytes, 63);
        assert!(t.width_ns() >= 16 * ms);
    }
}
