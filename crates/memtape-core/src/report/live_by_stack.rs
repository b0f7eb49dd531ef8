//! Live bytes and blocks per stack, with an exact saved copy (the live set at the peak).
//!
//! Stacks get dense slots on first use (found through a flat table: the recorder's stack
//! ids are dense), so the live set stores a slot and a free updates its totals without a
//! lookup. Saving copies only the slots changed since the
//! previous save, so saving at every new peak costs O(events) over a whole replay, not
//! O(events x stacks).

use rustc_hash::FxHashMap;

/// Live bytes and blocks of one stack.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StackTotal {
    /// The capture's stack id.
    pub stack: u32,
    /// Live bytes.
    pub bytes: u64,
    /// Live blocks.
    pub count: u64,
}

/// A table row, for tests.
#[cfg(test)]
pub(crate) fn st(stack: u32, bytes: u64, count: u64) -> StackTotal {
    StackTotal {
        stack,
        bytes,
        count,
    }
}

/// Sum of the bytes of a table.
pub fn total_bytes(table: &[StackTotal]) -> u64 {
    table.iter().map(|t| t.bytes).sum()
}

#[derive(Clone, Copy, Debug, Default)]
struct Cell {
    bytes: u64,
    count: u64,
}

/// A slot's live totals and the save epoch in which they last changed, side by side.
#[derive(Clone, Copy, Debug)]
struct LiveCell {
    cell: Cell,
    stamp: u64,
}

/// Per-stack running totals plus one saved copy.
/// Stack ids below this index a flat table (the recorder's ids are dense from 1); larger
/// ones go through a hash map.
const DIRECT_IDS: u32 = 1 << 22;
/// Flat-table entry for an id with no slot yet.
const NO_SLOT: u32 = u32::MAX;

#[derive(Debug, Default)]
pub(crate) struct LiveByStack {
    /// Slot of each stack id below [`DIRECT_IDS`] (grown on demand).
    direct: Vec<u32>,
    /// Slot of each larger stack id.
    sparse: FxHashMap<u32, u32>,
    ids: Vec<u32>,
    live: Vec<LiveCell>,
    saved: Vec<Cell>,
    /// Slots changed since the last save.
    dirty: Vec<u32>,
    epoch: u64,
}

impl LiveByStack {
    /// The slot of `stack`, created on first use.
    #[inline]
    pub(crate) fn slot(&mut self, stack: u32) -> u32 {
        if let Some(&slot) = self.direct.get(stack as usize) {
            if slot != NO_SLOT {
                return slot;
            }
        }
        self.slot_slow(stack)
    }

    #[cold]
    fn slot_slow(&mut self, stack: u32) -> u32 {
        let next = self.ids.len() as u32;
        let slot = if stack < DIRECT_IDS {
            let i = stack as usize;
            if i >= self.direct.len() {
                let len = (i + 1).next_power_of_two().min(DIRECT_IDS as usize);
                self.direct.resize(len, NO_SLOT);
            }
            if self.direct[i] == NO_SLOT {
                self.direct[i] = next;
            }
            self.direct[i]
        } else {
            *self.sparse.entry(stack).or_insert(next)
        };
        if slot == next {
            self.ids.push(stack);
            self.live.push(LiveCell {
                cell: Cell::default(),
                stamp: u64::MAX,
            });
            self.saved.push(Cell::default());
        }
        slot
    }

    /// The stack id of `slot`.
    pub(crate) fn stack_of(&self, slot: u32) -> u32 {
        self.ids[slot as usize]
    }

    #[inline]
    fn touch(&mut self, slot: u32) -> &mut Cell {
        let live = &mut self.live[slot as usize];
        if live.stamp != self.epoch {
            live.stamp = self.epoch;
            self.dirty.push(slot);
        }
        &mut live.cell
    }

    /// One more live block of `size` bytes in `slot`.
    #[inline]
    pub(crate) fn add(&mut self, slot: u32, size: u64) {
        let c = self.touch(slot);
        c.bytes += size;
        c.count += 1;
    }

    /// One live block of `size` bytes in `slot` fewer.
    #[inline]
    pub(crate) fn sub(&mut self, slot: u32, size: u64) {
        let c = self.touch(slot);
        c.bytes = c.bytes.saturating_sub(size);
        c.count = c.count.saturating_sub(1);
    }

    /// Makes the saved copy equal to the live totals.
    pub(crate) fn save(&mut self) {
        for &slot in &self.dirty {
            self.saved[slot as usize] = self.live[slot as usize].cell;
        }
        self.dirty.clear();
        self.epoch += 1;
    }

    fn table<'c>(&self, cells: impl Iterator<Item = &'c Cell>) -> Vec<StackTotal> {
        let mut out: Vec<StackTotal> = self
            .ids
            .iter()
            .zip(cells)
            .filter(|(_, c)| c.count > 0)
            .map(|(&stack, c)| StackTotal {
                stack,
                bytes: c.bytes,
                count: c.count,
            })
            .collect();
        out.sort_unstable_by_key(|t| t.stack);
        out
    }

    /// The live totals now, by stack id, stacks with live blocks only.
    pub(crate) fn live_table(&self) -> Vec<StackTotal> {
        self.table(self.live.iter().map(|l| &l.cell))
    }

    /// The totals at the last save.
    pub(crate) fn saved_table(&self) -> Vec<StackTotal> {
        self.table(self.saved.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saved_copy_is_exact_after_many_saves() {
        let mut t = LiveByStack::default();
        let a = t.slot(10);
        let b = t.slot(20);
        t.add(a, 5);
        t.save();
        t.add(b, 7);
        t.add(a, 1);
        t.save();
        t.sub(a, 5);
        let c = t.slot(u32::MAX);
        t.add(c, 100);
        assert_eq!((t.slot(u32::MAX), t.slot(10)), (c, a));
        assert_eq!(
            t.saved_table(),
            vec![
                StackTotal {
                    stack: 10,
                    bytes: 6,
                    count: 2
                },
                StackTotal {
                    stack: 20,
                    bytes: 7,
                    count: 1
                },
            ]
        );
        t.save();
        assert_eq!(t.saved_table(), t.live_table());
        assert_eq!(t.live_table()[2].stack, u32::MAX);
        assert_eq!(total_bytes(&t.live_table()), 108);
    }
}
