//! Time buckets while streaming, and which bucket each block was allocated and freed in.
//!
//! Time is cut into at most [`MAX_BUCKETS`] buckets of `2^shift` ns; when a time stamp
//! falls past the last one the width doubles (like [`super::series`]). The length of the
//! recording is unknown until its end, so a block remembers the *id* of the stretch of
//! time it was allocated in, a `u16`: a new id starts whenever a time stamp enters a new
//! bucket at the width of that moment. Every time stamp of an id falls in one bucket of
//! the final (coarsest) width, so ids map to final buckets at the end, exactly.
//!
//! A block freed in the stretch it was allocated in counts in no query (it is live at no
//! bucket end and in no window: see [`super::time_histogram`]), so frees cost a compare;
//! only longer-lived blocks add to a `(stack slot, allocation id, free id)` table, which
//! is re-keyed whenever the width doubles so it never holds more than the final
//! buckets' pairs, and which widens the buckets when it outgrows [`MAX_PAIRS`].

use rustc_hash::FxHashMap;

use super::time_histogram::{HistRow, TimeHistogram};

/// The most buckets of the final cut.
pub const MAX_BUCKETS: u64 = 256;

/// The most `(slot, allocation id, free id)` pairs held while streaming (about 32 bytes
/// each): past it the buckets widen until half of it is left. Blocks freed at random
/// times from thousands of stacks fill every pair; this keeps the replay's memory bounded
/// at the cost of fewer, wider buckets.
const MAX_PAIRS: usize = 1 << 16;

#[derive(Clone, Copy, Debug, Default)]
struct Cell {
    bytes: u64,
    count: u64,
}

#[inline]
fn key(slot: u32, born: u16, freed: u16) -> u64 {
    (u64::from(slot) << 32) | (u64::from(born) << 16) | u64::from(freed)
}

#[inline]
fn unkey(k: u64) -> (u32, u16, u16) {
    ((k >> 32) as u32, (k >> 16) as u16, k as u16)
}

#[derive(Debug)]
pub(crate) struct BucketClock {
    shift: u32,
    /// The current id's bucket at the current width.
    bucket: u64,
    /// The first time stamp of each id; the last id is the current one.
    first_ns: Vec<u64>,
    /// Blocks freed after the stretch they were allocated in.
    freed: FxHashMap<u64, Cell>,
}

impl Default for BucketClock {
    fn default() -> Self {
        Self {
            shift: 0,
            bucket: 0,
            first_ns: vec![0],
            freed: FxHashMap::default(),
        }
    }
}

impl BucketClock {
    /// The id of the current stretch of time: what a block allocated now keeps.
    #[inline]
    pub(crate) fn id(&self) -> u16 {
        (self.first_ns.len() - 1) as u16
    }

    /// Events from now on are stamped `ns`.
    #[inline]
    pub(crate) fn time(&mut self, ns: u64) {
        if ns >> self.shift == self.bucket {
            return;
        }
        self.advance(ns);
    }

    #[cold]
    fn advance(&mut self, ns: u64) {
        let last = self.first_ns[self.first_ns.len() - 1];
        if ns < last {
            return; // Time stamps never go back; a damaged capture's do not move buckets.
        }
        if ns >> self.shift >= MAX_BUCKETS {
            while ns >> self.shift >= MAX_BUCKETS {
                self.shift += 1;
            }
            self.bucket = last >> self.shift;
            self.compact();
        }
        // ids stay below u16::MAX: at most MAX_BUCKETS + MAX_BUCKETS / 2 per doubling.
        if ns >> self.shift > self.bucket && self.first_ns.len() < usize::from(u16::MAX) {
            self.bucket = ns >> self.shift;
            self.first_ns.push(ns);
        }
    }

    /// A block of `size` bytes allocated in stretch `born`, of stack slot `slot`, is freed
    /// now.
    #[inline]
    pub(crate) fn freed(&mut self, slot: u32, born: u16, size: u64) {
        let now = self.id();
        if born != now {
            let c = self.freed.entry(key(slot, born, now)).or_default();
            c.bytes += size;
            c.count += 1;
            if self.freed.len() > MAX_PAIRS {
                self.widen();
            }
        }
    }

    /// Doubles the bucket width until at most half of [`MAX_PAIRS`] pairs are left.
    #[cold]
    fn widen(&mut self) {
        let last = self.first_ns[self.first_ns.len() - 1];
        while self.freed.len() > MAX_PAIRS / 2 && self.shift < 63 {
            self.shift += 1;
            self.bucket = last >> self.shift;
            self.compact();
        }
    }

    /// Each id's first id in the same bucket at width `2^shift`.
    fn canonical(&self, shift: u32) -> Vec<u16> {
        let mut canon = Vec::with_capacity(self.first_ns.len());
        for (i, &ns) in self.first_ns.iter().enumerate() {
            let same = i > 0 && self.first_ns[i - 1] >> shift == ns >> shift;
            canon.push(if same { canon[i - 1] } else { i as u16 });
        }
        canon
    }

    /// Merges the pairs whose ids now share buckets.
    fn compact(&mut self) {
        let canon = self.canonical(self.shift);
        let old = std::mem::take(&mut self.freed);
        for (k, c) in old {
            let (slot, born, freed) = unkey(k);
            let (born, freed) = (canon[usize::from(born)], canon[usize::from(freed)]);
            if born != freed {
                let e = self.freed.entry(key(slot, born, freed)).or_default();
                e.bytes += c.bytes;
                e.count += c.count;
            }
        }
    }

    /// The histogram of the whole recording: `live` yields `(size, slot, born)` of each
    /// block still live at the end, `stack_of` maps slots to stack ids.
    pub(crate) fn finish(
        self,
        live: impl Iterator<Item = (u64, u32, u16)>,
        stack_of: impl Fn(u32) -> u32,
    ) -> TimeHistogram {
        let last = self.first_ns[self.first_ns.len() - 1];
        let bucket_of: Vec<u16> = self
            .first_ns
            .iter()
            .map(|&ns| (ns >> self.shift) as u16)
            .collect();
        let never = (last >> self.shift) as u16 + 1;
        let mut rows: FxHashMap<(u32, u16, u16), Cell> = FxHashMap::default();
        for (k, c) in self.freed {
            let (slot, born, freed) = unkey(k);
            let (a, f) = (bucket_of[usize::from(born)], bucket_of[usize::from(freed)]);
            if a != f {
                let e = rows.entry((stack_of(slot), a, f)).or_default();
                e.bytes += c.bytes;
                e.count += c.count;
            }
        }
        for (size, slot, born) in live {
            let e = rows
                .entry((stack_of(slot), bucket_of[usize::from(born)], never))
                .or_default();
            e.bytes += size;
            e.count += 1;
        }
        let mut rows: Vec<HistRow> = rows
            .into_iter()
            .map(|((stack, alloc, freed), c)| HistRow {
                stack,
                alloc,
                freed,
                bytes: c.bytes,
                count: c.count,
            })
            .collect();
        rows.sort_unstable_by_key(|r| (r.stack, r.alloc, r.freed));
        TimeHistogram {
            bucket_ns: 1u64 << self.shift,
            buckets: never,
            rows,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Replays `(time, action)` where an action allocates (slot, size) as block `i` or
    /// frees block `i`; returns the histogram.
    enum Op {
        Time(u64),
        Alloc(usize, u32, u64),
        Free(usize),
    }

    fn run(ops: &[Op]) -> TimeHistogram {
        let mut clock = BucketClock::default();
        let mut blocks: FxHashMap<usize, (u64, u32, u16)> = FxHashMap::default();
        for op in ops {
            match *op {
                Op::Time(ns) => clock.time(ns),
                Op::Alloc(i, slot, size) => {
                    blocks.insert(i, (size, slot, clock.id()));
                }
                Op::Free(i) => {
                    let (size, slot, born) = blocks.remove(&i).unwrap();
                    clock.freed(slot, born, size);
                }
            }
        }
        clock.finish(blocks.into_values(), |slot| slot + 100)
    }

    fn brief(h: &TimeHistogram) -> Vec<(u32, u16, u16, u64, u64)> {
        h.rows
            .iter()
            .map(|r| (r.stack, r.alloc, r.freed, r.bytes, r.count))
            .collect()
    }

    #[test]
    fn short_lived_blocks_leave_no_row_and_buckets_widen() {
        use Op::*;
        let h = run(&[
            Alloc(0, 1, 10), // bucket 0, never freed
            Alloc(1, 2, 20),
            Free(1), // same stretch: no row
            Time(100),
            Alloc(2, 1, 5),
            Time(1_000),
            Free(2), // 100 -> 1,000
            Alloc(3, 2, 7),
            Time(300_000), // widens to 2^11 ns buckets: 0..146
            Free(3),       // 1,000 -> 300,000
        ]);
        assert_eq!(h.bucket_ns, 2048);
        assert_eq!(h.buckets, 147); // 300,000 / 2,048 + 1
                                    // 100 and 1,000 ns share bucket 0 at the final width: that free leaves no row.
        assert_eq!(
            brief(&h),
            vec![(101, 0, h.buckets, 10, 1), (102, 0, 146, 7, 1)]
        );
    }

    #[test]
    fn too_many_pairs_widen_the_buckets() {
        let mut clock = BucketClock::default();
        let mut live = Vec::new();
        // 2,000 stacks, a block each per time stamp, freed at the next: 2,000 pairs per
        // time stamp, far more than MAX_PAIRS at full resolution.
        let mut freed = 0u64;
        for t in 0..255u64 {
            clock.time(t);
            for (size, slot, born) in live.drain(..) {
                clock.freed(slot, born, size);
                freed += 1;
            }
            live.extend((0..2000u32).map(|slot| (1u64, slot, clock.id())));
            assert!(clock.freed.len() <= MAX_PAIRS);
        }
        let kept = live.len() as u64;
        let h = clock.finish(live.into_iter(), |s| s);
        assert!(
            h.buckets < 255 && h.bucket_ns > 1,
            "{} x {}",
            h.buckets,
            h.bucket_ns
        );
        // Every block still counts: freed ones in rows (unless freed in their own, now
        // wider, bucket), live ones as never freed.
        let never: u64 = h
            .rows
            .iter()
            .filter(|r| r.freed == h.buckets)
            .map(|r| r.count)
            .sum();
        assert_eq!(never, kept);
        assert!(h.rows.iter().map(|r| r.count).sum::<u64>() <= kept + freed);
    }

    #[test]
    fn many_doublings_keep_ids_in_range() {
        let mut clock = BucketClock::default();
        let mut born = Vec::new();
        for i in 0..10_000u64 {
            clock.time(i * i * 1_000);
            born.push((8, 1, clock.id()));
        }
        let h = clock.finish(born.into_iter(), |s| s);
        assert!(h.buckets as u64 <= MAX_BUCKETS);
        assert_eq!(h.rows.iter().map(|r| r.count).sum::<u64>(), 10_000);
        assert!(h.rows.iter().all(|r| r.alloc < h.buckets));
    }
}
