//! One streaming pass over the events: the live set, totals, the peak and what was live
//! at it, what was still live at the end, memory over time, markers.
//!
//! The peak is exact. Live bytes only fall on a free (or an allocation over a live
//! address), so the highest value is the one just before such an event: there, if live
//! bytes beat the best peak so far (strictly, so the first of equal peaks wins), the
//! per-stack totals are saved (see [`LiveByStack`]).

use super::bucket_clock::BucketClock;
use super::live_by_stack::{LiveByStack, StackTotal};
use super::live_set::LiveSet;
use super::record::Record;
use super::series::{MemorySeries, SeriesPoint, DEFAULT_MAX_POINTS};
use super::stretch_top::StretchTop;
use super::ticks::Ticks;
use super::time_histogram::TimeHistogram;
use crate::capture::HeapEvent;
use crate::memory_source::SourceSplit;

/// A moment of the recording to take the live set at (for diffs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Moment {
    /// After every event stamped at or before this many ns since the start (the end,
    /// if the recording is shorter).
    Time(u64),
    /// Where the first marker with this label was set.
    Marker(String),
}

/// What to compute besides the defaults.
#[derive(Clone, Debug)]
pub struct ReplayOptions {
    /// Moments to take the live set at, by stack.
    pub moments: Vec<Moment>,
    /// Most points in the memory-over-time series.
    pub max_series_points: usize,
    /// Whether to build [`ReplayResult::time_histogram`] (the HTML report's time-window
    /// view); it costs a table update per block that outlives its time bucket.
    pub time_histogram: bool,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        Self {
            moments: Vec::new(),
            max_series_points: DEFAULT_MAX_POINTS,
            time_histogram: true,
        }
    }
}

/// Event counts and byte sums.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Allocation events.
    pub allocs: u64,
    /// Free events (known block or not).
    pub frees: u64,
    /// Sum of the sizes of every allocation.
    pub bytes_allocated: u64,
    /// Sum of the sizes of the blocks freed.
    pub bytes_freed: u64,
    /// Frees of an address that was not live (allocated before tracing began, or its
    /// allocation was dropped): counted, otherwise ignored.
    pub unknown_frees: u64,
    /// Of those, the frees after the first damaged part of the capture that the reader
    /// skipped: mostly of blocks allocated in what was lost.
    pub unknown_frees_after_damage: u64,
    /// Allocations at an address that was still live: the old block counts as freed.
    pub replaced: u64,
    /// Of those, the ones after the first damaged part the reader skipped: mostly blocks
    /// whose free was lost with it.
    pub replaced_after_damage: u64,
    /// Allocations that could not be tracked (address 0, or out of memory).
    pub untracked: u64,
}

/// The highest live bytes and when they were reached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Peak {
    /// Live bytes at the peak.
    pub bytes: u64,
    /// Live blocks at the peak.
    pub blocks: u64,
    /// Time of the event that reached it, ns since the start.
    pub time_ns: u64,
    /// Index (from 0, over allocations and frees) of the event that reached it.
    pub event_index: u64,
}

/// A marker and where it fell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MarkerAt {
    /// The user's label.
    pub label: String,
    /// Time, ns since the start.
    pub time_ns: u64,
    /// Events before it.
    pub event_index: u64,
}

/// Everything one pass found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplayResult {
    /// Event counts and byte sums.
    pub totals: Totals,
    /// Allocation and free events.
    pub events: u64,
    /// The peak.
    pub peak: Peak,
    /// Live bytes at the peak, by source (Python heap, native, framework, MLX).
    pub peak_by_source: SourceSplit,
    /// Live bytes at the end of the recording.
    pub end_bytes: u64,
    /// Live bytes at the end, by source.
    pub end_by_source: SourceSplit,
    /// Live blocks at the end of the recording.
    pub end_blocks: u64,
    /// The last time stamp, ns since the start.
    pub duration_ns: u64,
    /// Memory over time, each point the highest value of its stretch of time.
    pub series: Vec<SeriesPoint>,
    /// Live bytes per clock tick (for adding several processes' memory over time).
    pub ticks: Ticks,
    /// Markers in recording order.
    pub markers: Vec<MarkerAt>,
    /// Events the recorder dropped.
    pub dropped: u64,
    /// The live set at the peak, by stack id.
    pub live_at_peak: Vec<StackTotal>,
    /// The live set at the end (never freed: leaks), by stack id.
    pub live_at_end: Vec<StackTotal>,
    /// The live set at each requested moment, in request order; `None` for a marker
    /// that never appeared.
    pub moments: Vec<Option<Vec<StackTotal>>>,
    /// Bytes by stack and by the time buckets they were allocated and freed in (one
    /// empty bucket unless [`ReplayOptions::time_histogram`]).
    pub time_histogram: TimeHistogram,
}

/// Where a pass stands after the records taken in so far (a view of a capture that is
/// still being written).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplayNow {
    /// Live bytes now.
    pub current_bytes: u64,
    /// Live bytes now, by source.
    pub current_by_source: SourceSplit,
    /// Live blocks now.
    pub blocks: u64,
    /// The highest live bytes so far (the current value when it is the highest).
    pub peak: Peak,
    /// Live bytes at that peak, by source.
    pub peak_by_source: SourceSplit,
    /// Event counts and byte sums so far.
    pub totals: Totals,
    /// The last time stamp, ns since the start.
    pub time_ns: u64,
}

/// The streaming pass: [`feed`](Replay::feed) every record, then
/// [`finish`](Replay::finish).
#[derive(Debug)]
pub struct Replay {
    live: LiveSet,
    by_stack: LiveByStack,
    current: u64,
    by_source: SourceSplit,
    peak_by_source: SourceSplit,
    blocks: u64,
    time_ns: u64,
    duration_ns: u64,
    events: u64,
    totals: Totals,
    peak: Peak,
    /// When live bytes last went up: the peak's time if they fall next.
    rise: (u64, u64),
    series: MemorySeries,
    ticks: Ticks,
    /// The highest live bytes since the last time stamp: the series and the ticks take
    /// one point per stretch.
    stretch: StretchTop,
    markers: Vec<MarkerAt>,
    dropped: u64,
    moments: Vec<(Moment, Option<Vec<StackTotal>>)>,
    pending_time_moments: usize,
    clock: Option<BucketClock>,
    /// `totals.unknown_frees` and `totals.replaced` when the reader first skipped a
    /// damaged part.
    at_damage: Option<(u64, u64)>,
}

impl Default for Replay {
    fn default() -> Self {
        Self::new(ReplayOptions::default())
    }
}

impl Replay {
    /// A pass computing `options` besides the defaults.
    pub fn new(options: ReplayOptions) -> Self {
        let pending_time_moments = options
            .moments
            .iter()
            .filter(|m| matches!(m, Moment::Time(_)))
            .count();
        Self {
            live: LiveSet::default(),
            by_stack: LiveByStack::default(),
            current: 0,
            by_source: SourceSplit::default(),
            peak_by_source: SourceSplit::default(),
            blocks: 0,
            time_ns: 0,
            duration_ns: 0,
            events: 0,
            totals: Totals::default(),
            peak: Peak::default(),
            rise: (0, 0),
            series: MemorySeries::new(options.max_series_points),
            ticks: Ticks::default(),
            stretch: StretchTop::default(),
            markers: Vec::new(),
            dropped: 0,
            moments: options.moments.into_iter().map(|m| (m, None)).collect(),
            pending_time_moments,
            clock: options.time_histogram.then(BucketClock::default),
            at_damage: None,
        }
    }

    /// The reader skipped a damaged part of the capture here (see
    /// [`crate::capture::RecordVisitor::damage`]): frees of unknown blocks and allocations
    /// at live addresses from now on are counted apart.
    pub fn damage(&mut self) {
        self.at_damage
            .get_or_insert((self.totals.unknown_frees, self.totals.replaced));
    }

    /// Takes in one record.
    #[inline]
    pub fn feed(&mut self, record: &Record<'_>) {
        match *record {
            Record::Alloc {
                domain,
                addr,
                size,
                stack,
            } => self.alloc(domain, addr, size, stack),
            Record::Free { domain, addr } => self.free(domain, addr),
            Record::Time { ns } => self.time(ns),
            Record::Marker { label } => self.marker(label),
            Record::Dropped { count } => self.dropped = self.dropped.saturating_add(count),
            Record::String { .. }
            | Record::Frame { .. }
            | Record::Stack { .. }
            | Record::Module { .. }
            | Record::NativeFrame { .. } => {}
        }
    }

    /// Takes in a run of allocations and frees, in one loop (see
    /// [`crate::capture::RecordVisitor::events`]).
    pub fn events(&mut self, events: &[HeapEvent]) {
        for event in events {
            match *event {
                HeapEvent::Alloc {
                    domain,
                    stack,
                    addr,
                    size,
                } => self.alloc(domain, addr, size, stack),
                HeapEvent::Free { domain, addr } => self.free(domain, addr),
            }
        }
    }

    /// Live bytes right now.
    pub fn current_bytes(&self) -> u64 {
        self.current
    }

    /// Where the pass stands now: the numbers [`finish`](Replay::finish) would give if
    /// the records ended here (the peak is the current value when that is the highest).
    pub fn now(&self) -> ReplayNow {
        let (peak, peak_by_source) = if self.current > self.peak.bytes {
            let peak = Peak {
                bytes: self.current,
                blocks: self.blocks,
                time_ns: self.rise.0,
                event_index: self.rise.1,
            };
            (peak, self.by_source)
        } else {
            (self.peak, self.peak_by_source)
        };
        ReplayNow {
            current_bytes: self.current,
            current_by_source: self.by_source,
            blocks: self.blocks,
            peak,
            peak_by_source,
            totals: self.totals,
            time_ns: self.duration_ns,
        }
    }

    /// The live set now, by stack id.
    pub fn live_table_now(&self) -> Vec<StackTotal> {
        self.by_stack.live_table()
    }

    /// Memory over time up to the last time stamp (the events after it join the series
    /// at the next one, or at [`finish`](Replay::finish)).
    pub fn series_now(&self) -> Vec<SeriesPoint> {
        self.series.points()
    }

    /// Saves the live set if live bytes are about to fall from a new best.
    #[inline]
    fn before_fall(&mut self) {
        if self.current > self.peak.bytes {
            self.peak = Peak {
                bytes: self.current,
                blocks: self.blocks,
                time_ns: self.rise.0,
                event_index: self.rise.1,
            };
            self.peak_by_source = self.by_source;
            self.by_stack.save();
        }
    }

    /// Takes in an allocation (a [`Record::Alloc`]).
    #[inline]
    pub fn alloc(&mut self, domain: u32, addr: u64, size: u64, stack: u32) {
        let index = self.events;
        self.events += 1;
        self.totals.allocs += 1;
        self.totals.bytes_allocated = self.totals.bytes_allocated.saturating_add(size);
        let slot = self.by_stack.slot(stack);
        let before = self.current;
        match self.live.insert(
            domain,
            addr,
            (size, slot, self.clock.as_ref().map_or(0, BucketClock::id)),
        ) {
            Ok(replaced) => {
                if let Some((old_size, old_slot, old_born)) = replaced {
                    if let Some(clock) = &mut self.clock {
                        clock.freed(old_slot, old_born, old_size);
                    }
                    self.before_fall();
                    self.totals.replaced += 1;
                    self.totals.bytes_freed = self.totals.bytes_freed.saturating_add(old_size);
                    self.current -= old_size;
                    self.by_source.sub(domain, old_size);
                    self.blocks -= 1;
                    self.by_stack.sub(old_slot, old_size);
                }
                self.current += size;
                self.by_source.add(domain, size);
                self.blocks += 1;
                self.by_stack.add(slot, size);
            }
            Err(_) => self.totals.untracked += 1,
        }
        if self.current > before {
            self.rise = (self.time_ns, index);
        }
        self.stretch.observe(self.current, index, &self.by_source);
    }

    /// Takes in a free (a [`Record::Free`]).
    #[inline]
    pub fn free(&mut self, domain: Option<u32>, addr: u64) {
        let index = self.events;
        self.events += 1;
        self.totals.frees += 1;
        match self.live.remove_from(domain, addr) {
            Some((domain, (size, slot, born))) => {
                if let Some(clock) = &mut self.clock {
                    clock.freed(slot, born, size);
                }
                self.before_fall();
                self.totals.bytes_freed = self.totals.bytes_freed.saturating_add(size);
                self.current -= size;
                self.by_source.sub(domain, size);
                self.blocks -= 1;
                self.by_stack.sub(slot, size);
            }
            None => self.totals.unknown_frees += 1,
        }
        self.stretch.observe(self.current, index, &self.by_source);
    }

    /// Hands the top of the stretch of events since the last time stamp to the series
    /// and the ticks.
    fn end_stretch(&mut self) {
        if let Some(top) = self.stretch.end() {
            self.series
                .push(self.time_ns, top.bytes, top.event_index, &top.by_source);
            self.ticks
                .add_stretch(self.time_ns, top.bytes, self.current);
        }
    }

    fn time(&mut self, ns: u64) {
        self.end_stretch();
        if self.pending_time_moments > 0 {
            let mut taken = 0;
            for (m, table) in &mut self.moments {
                if let (Moment::Time(t), None) = (&*m, &*table) {
                    if ns > *t {
                        *table = Some(self.by_stack.live_table());
                        taken += 1;
                    }
                }
            }
            self.pending_time_moments -= taken;
        }
        self.time_ns = ns;
        self.duration_ns = self.duration_ns.max(ns);
        if let Some(clock) = &mut self.clock {
            clock.time(ns);
        }
    }

    fn marker(&mut self, label: &str) {
        for (m, table) in &mut self.moments {
            if let (Moment::Marker(l), None) = (&*m, &*table) {
                if l == label {
                    *table = Some(self.by_stack.live_table());
                }
            }
        }
        self.markers.push(MarkerAt {
            label: label.to_owned(),
            time_ns: self.time_ns,
            event_index: self.events,
        });
    }

    /// Ends the pass.
    pub fn finish(mut self) -> ReplayResult {
        self.end_stretch();
        self.before_fall();
        let live_at_end = self.by_stack.live_table();
        let moments = self
            .moments
            .into_iter()
            .map(|(m, table)| match m {
                Moment::Time(_) => Some(table.unwrap_or_else(|| live_at_end.clone())),
                Moment::Marker(_) => table,
            })
            .collect();
        let by_stack = &self.by_stack;
        let time_histogram = match self.clock {
            Some(clock) => clock.finish(self.live.blocks(), |slot| by_stack.stack_of(slot)),
            None => TimeHistogram::default(),
        };
        if let Some((unknown_frees, replaced)) = self.at_damage {
            self.totals.unknown_frees_after_damage = self.totals.unknown_frees - unknown_frees;
            self.totals.replaced_after_damage = self.totals.replaced - replaced;
        }
        ReplayResult {
            totals: self.totals,
            events: self.events,
            peak: self.peak,
            peak_by_source: self.peak_by_source,
            end_bytes: self.current,
            end_by_source: self.by_source,
            end_blocks: self.blocks,
            duration_ns: self.duration_ns,
            series: self.series.points(),
            ticks: self.ticks,
            markers: self.markers,
            dropped: self.dropped,
            live_at_peak: self.by_stack.saved_table(),
            live_at_end,
            moments,
            time_histogram,
        }
    }
}

#[cfg(test)]
mod source_tests;
#[cfg(test)]
mod stretch_tests;
#[cfg(test)]
mod tests;
