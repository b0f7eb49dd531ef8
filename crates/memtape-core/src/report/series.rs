//! Memory over time, downsampled while streaming to a bounded number of points.
//!
//! Time is cut into at most `max_points` buckets of `2^shift` ns. When a time falls past
//! the last bucket, neighbouring buckets merge in pairs and the width doubles. Each bucket
//! keeps its highest value (the first one, on ties) and when it happened, so no peak is
//! lost however much the series shrinks.

use crate::memory_source::SourceSplit;

/// One point: the highest live bytes within a bucket and when it was reached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SeriesPoint {
    /// Nanoseconds since the start of the recording.
    pub time_ns: u64,
    /// Live bytes.
    pub bytes: u64,
    /// Index of the event that reached `bytes`.
    pub event_index: u64,
    /// `bytes` by source (Python heap, native, framework, MLX) at that moment.
    pub by_source: SourceSplit,
}

/// The default bound on the number of points.
pub const DEFAULT_MAX_POINTS: usize = 2000;

#[derive(Debug)]
pub(crate) struct MemorySeries {
    /// Bucket `i` holds the highest point of times `i << shift ..= (i + 1) << shift`;
    /// only as many as the latest time needs (a short capture's analysis does not fill
    /// in thousands of empty buckets).
    buckets: Vec<Option<SeriesPoint>>,
    max_points: usize,
    shift: u32,
}

impl MemorySeries {
    /// An empty series of at most `max_points` (at least 2) points.
    pub(crate) fn new(max_points: usize) -> Self {
        Self {
            buckets: Vec::new(),
            max_points: max_points.max(2),
            shift: 0,
        }
    }

    /// Live bytes were `bytes` (`by_source` by source) after event `event_index`, at
    /// `time_ns`.
    #[inline]
    pub(crate) fn push(
        &mut self,
        time_ns: u64,
        bytes: u64,
        event_index: u64,
        by_source: &SourceSplit,
    ) {
        let mut i = time_ns >> self.shift;
        while i >= self.max_points as u64 {
            self.halve();
            i = time_ns >> self.shift;
        }
        if i as usize >= self.buckets.len() {
            self.buckets.resize(i as usize + 1, None);
        }
        let b = &mut self.buckets[i as usize];
        match b {
            Some(p) if p.bytes >= bytes => {}
            _ => {
                *b = Some(SeriesPoint {
                    time_ns,
                    bytes,
                    event_index,
                    by_source: *by_source,
                })
            }
        }
    }

    fn halve(&mut self) {
        let n = self.buckets.len();
        let kept = n.div_ceil(2);
        for i in 0..kept {
            let a = self.buckets[2 * i];
            let b = self.buckets.get(2 * i + 1).copied().flatten();
            self.buckets[i] = match (a, b) {
                (Some(a), Some(b)) => Some(if b.bytes > a.bytes { b } else { a }),
                (a, b) => a.or(b),
            };
        }
        self.buckets.truncate(kept);
        self.shift += 1;
    }

    /// The points in time order.
    pub(crate) fn points(&self) -> Vec<SeriesPoint> {
        self.buckets.iter().flatten().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn downsampling_keeps_each_buckets_max() {
        let mut s = MemorySeries::new(10);
        // A sawtooth over 10,000 ns with one spike at 7,777 ns.
        for t in 0..10_000u64 {
            let bytes = if t == 7_777 { 1_000_000 } else { t % 100 };
            s.push(t, bytes, t, &SourceSplit::default());
        }
        let points = s.points();
        assert!(points.len() <= 10, "{}", points.len());
        assert!(points.windows(2).all(|w| w[0].time_ns < w[1].time_ns));
        let max = points.iter().max_by_key(|p| p.bytes).unwrap();
        assert_eq!(
            (max.time_ns, max.bytes, max.event_index),
            (7_777, 1_000_000, 7_777)
        );
        // Every other bucket still shows the sawtooth's top, first occurrence.
        assert!(points.iter().all(|p| p.bytes >= 99));
    }

    #[test]
    fn a_short_series_holds_only_the_buckets_it_needs() {
        let mut s = MemorySeries::new(DEFAULT_MAX_POINTS);
        let none = SourceSplit::default();
        s.push(3, 10, 0, &none);
        s.push(40, 30, 1, &none);
        assert_eq!(s.buckets.len(), 41);
        assert_eq!(s.points().len(), 2);
        s.push(1_000_000, 5, 2, &none);
        assert!(s.buckets.len() <= DEFAULT_MAX_POINTS);
        let points = s.points();
        assert_eq!(points.last().map(|p| p.bytes), Some(5));
        assert_eq!(points.iter().map(|p| p.bytes).max(), Some(30));
    }

    #[test]
    fn equal_values_keep_the_first() {
        let mut s = MemorySeries::new(2);
        let none = SourceSplit::default();
        s.push(0, 5, 0, &none);
        s.push(1, 5, 1, &none);
        s.push(3, 5, 2, &none);
        s.push(100, 1, 3, &none);
        let points = s.points();
        assert_eq!(points[0].event_index, 0);
        assert!(points.len() <= 2);
    }
}
