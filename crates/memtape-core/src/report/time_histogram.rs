//! Memory by stack and time bucket: what was live at any bucket's end, and what a window
//! of buckets allocated and did not free by its end, exact at bucket resolution.
//!
//! Each row holds the blocks of one stack allocated in bucket `alloc` and freed in bucket
//! `freed` (`buckets`: never freed). A block is live at the end of bucket `t` when
//! `alloc <= t < freed`, and belongs to window `[a, b]` when `a <= alloc <= b < freed`.
//! A block freed in its own bucket is in no such set, so it has no row.
//!
//! [`TimeHistogram::bounded`] keeps the stacks that matter (those near the top of some
//! bucket's live set, of what some bucket added, of the leaks or of the peak) within a
//! budget of rows and lumps every other stack into one "other" histogram, so every total
//! stays exact.

use rustc_hash::{FxHashMap, FxHashSet};

use super::live_by_stack::StackTotal;

/// Blocks of one stack allocated in one bucket and freed in another (or never).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HistRow {
    /// The capture's stack id.
    pub stack: u32,
    /// Bucket of the allocations.
    pub alloc: u16,
    /// Bucket of the frees; [`TimeHistogram::buckets`] for blocks never freed.
    pub freed: u16,
    /// Bytes.
    pub bytes: u64,
    /// Blocks.
    pub count: u64,
}

/// Rows by stack and bucket pair.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimeHistogram {
    /// Width of a bucket in ns; bucket `t` covers `[t * bucket_ns, (t + 1) * bucket_ns)`.
    pub bucket_ns: u64,
    /// Number of buckets.
    pub buckets: u16,
    /// Rows sorted by stack, then buckets.
    pub rows: Vec<HistRow>,
}

impl Default for TimeHistogram {
    /// One bucket of 1 ns, no rows: what an empty recording has.
    fn default() -> Self {
        Self {
            bucket_ns: 1,
            buckets: 1,
            rows: Vec::new(),
        }
    }
}

/// A histogram cut to a budget: the stacks kept, and every other stack summed per bucket
/// pair (`stack` 0 in its rows).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BoundedHistogram {
    /// The stacks kept, with their rows.
    pub kept: TimeHistogram,
    /// The other stacks, lumped.
    pub other: TimeHistogram,
}

fn table<'r>(rows: impl Iterator<Item = &'r HistRow>) -> Vec<StackTotal> {
    let mut by: FxHashMap<u32, StackTotal> = FxHashMap::default();
    for r in rows {
        let t = by.entry(r.stack).or_insert(StackTotal {
            stack: r.stack,
            bytes: 0,
            count: 0,
        });
        t.bytes += r.bytes;
        t.count += r.count;
    }
    let mut out: Vec<StackTotal> = by.into_values().collect();
    out.sort_unstable_by_key(|t| t.stack);
    out
}

/// Rank positions recorded per stack: a stack is kept when it ranks below `k` somewhere.
const MAX_RANK: usize = 32;

impl TimeHistogram {
    /// The live set at the end of bucket `t`, by stack.
    pub fn live_at(&self, t: u16) -> Vec<StackTotal> {
        table(self.rows.iter().filter(|r| r.alloc <= t && t < r.freed))
    }

    /// What buckets `a..=b` allocated and did not free by the end of `b`, by stack.
    pub fn window(&self, a: u16, b: u16) -> Vec<StackTotal> {
        table(
            self.rows
                .iter()
                .filter(|r| a <= r.alloc && r.alloc <= b && b < r.freed),
        )
    }

    /// For each stack, the best rank it reaches in any bucket's live set, in what any
    /// bucket added and kept, in the leaks or in `peak` (ranks from 0, capped at
    /// [`MAX_RANK`]).
    fn best_ranks(&self, peak: &[StackTotal]) -> FxHashMap<u32, usize> {
        let mut best: FxHashMap<u32, usize> = FxHashMap::default();
        let mut rank = |values: &mut Vec<(u64, u32)>| {
            let n = values.len().min(MAX_RANK);
            if n == 0 {
                return;
            }
            if values.len() > n {
                values.select_nth_unstable_by(n - 1, |x, y| y.cmp(x));
                values.truncate(n);
            }
            values.sort_unstable_by(|x, y| y.cmp(x));
            for (i, &(_, stack)) in values.iter().enumerate() {
                let b = best.entry(stack).or_insert(MAX_RANK);
                *b = (*b).min(i);
            }
        };
        // Dense stack indexes, and the rows starting and ending at each bucket.
        let mut index: FxHashMap<u32, usize> = FxHashMap::default();
        let mut stacks = Vec::new();
        let n = usize::from(self.buckets);
        let mut starts: Vec<Vec<usize>> = vec![Vec::new(); n + 1];
        let mut ends: Vec<Vec<usize>> = vec![Vec::new(); n + 1];
        for (i, r) in self.rows.iter().enumerate() {
            index.entry(r.stack).or_insert_with(|| {
                stacks.push(r.stack);
                stacks.len() - 1
            });
            starts[usize::from(r.alloc)].push(i);
            ends[usize::from(r.freed).min(n)].push(i);
        }
        let mut live = vec![0u64; stacks.len()];
        let mut values = Vec::new();
        for t in 0..n {
            let mut added: FxHashMap<u32, u64> = FxHashMap::default();
            for &i in &starts[t] {
                let r = &self.rows[i];
                live[index[&r.stack]] += r.bytes;
                *added.entry(r.stack).or_default() += r.bytes;
            }
            for &i in &ends[t] {
                let r = &self.rows[i];
                live[index[&r.stack]] -= r.bytes;
            }
            values.clear();
            values.extend(
                live.iter()
                    .zip(&stacks)
                    .filter(|(&b, _)| b > 0)
                    .map(|(&b, &s)| (b, s)),
            );
            rank(&mut values);
            values.clear();
            values.extend(added.into_iter().map(|(s, b)| (b, s)));
            rank(&mut values);
        }
        values.clear();
        values.extend(
            table(ends[n].iter().map(|&i| &self.rows[i]))
                .into_iter()
                .map(|t| (t.bytes, t.stack)),
        );
        rank(&mut values);
        values.clear();
        values.extend(peak.iter().map(|t| (t.bytes, t.stack)));
        rank(&mut values);
        best
    }

    /// At most `max_rows` rows in all: the stacks ranking best anywhere (see
    /// [`TimeHistogram::best_ranks`]) are kept while their rows fit, with the rows of
    /// the other stacks summed per bucket pair. `peak` is the live set at the peak.
    pub fn bounded(&self, peak: &[StackTotal], max_rows: usize) -> BoundedHistogram {
        let ranks = self.best_ranks(peak);
        let mut rows_of: FxHashMap<u32, usize> = FxHashMap::default();
        for r in &self.rows {
            *rows_of.entry(r.stack).or_default() += 1;
        }
        // Best rank first, then most bytes at the rank's table order: the stack id breaks
        // ties so the choice is stable.
        let mut order: Vec<(usize, u32)> = ranks.iter().map(|(&s, &r)| (r, s)).collect();
        order.sort_unstable();
        // The other stacks' rows take at most one per bucket pair in use.
        let pairs: FxHashSet<(u16, u16)> = self.rows.iter().map(|r| (r.alloc, r.freed)).collect();
        let mut budget = max_rows.saturating_sub(pairs.len());
        let mut keep: FxHashSet<u32> = FxHashSet::default();
        for (_, stack) in order {
            let cost = rows_of.get(&stack).copied().unwrap_or(0);
            if cost > budget {
                continue;
            }
            budget -= cost;
            keep.insert(stack);
        }
        let mut other: FxHashMap<(u16, u16), (u64, u64)> = FxHashMap::default();
        let mut kept = Vec::new();
        for r in &self.rows {
            if keep.contains(&r.stack) {
                kept.push(*r);
            } else {
                let o = other.entry((r.alloc, r.freed)).or_default();
                o.0 += r.bytes;
                o.1 += r.count;
            }
        }
        let mut other: Vec<HistRow> = other
            .into_iter()
            .map(|((alloc, freed), (bytes, count))| HistRow {
                stack: 0,
                alloc,
                freed,
                bytes,
                count,
            })
            .collect();
        other.sort_unstable_by_key(|r| (r.alloc, r.freed));
        let shape = |rows| TimeHistogram {
            bucket_ns: self.bucket_ns,
            buckets: self.buckets,
            rows,
        };
        BoundedHistogram {
            kept: shape(kept),
            other: shape(other),
        }
    }
}

#[cfg(test)]
mod replay_tests;
#[cfg(test)]
mod tests;
