//! The live set: `(domain, address) -> (size, stack)` for every traced block that has not
//! been freed, with the current and peak traced bytes.
//!
//! Small blocks of domain 0 (the bulk: pymalloc's objects) live in a [`ChunkedTable`]
//! indexed by address, which keeps neighbouring blocks in neighbouring slots; everything
//! else lives in an open-addressing [`AddressTable`]. Neither allocates per block.

use crate::address_table::AddressTable;
use crate::chunked_table::{fits, is_granule, is_small, ChunkedTable};
use crate::stack_table::StackId;

pub use crate::live_entry::{LiveEntry, TableFull};

/// Live blocks plus current/peak accounting.
#[derive(Debug, Default)]
pub struct LiveTable {
    small: ChunkedTable,
    other: AddressTable,
    /// Whether `other` may hold small blocks of domain 0: those whose stack id is too
    /// large for a slot of `small` ([`fits`]). An address is in at most one of the two
    /// tables; while this is set, an insert into `small` also looks in `other`.
    small_elsewhere: bool,
    current: u64,
    peak: u64,
}

const SMALL_DOMAIN: u32 = 0;

impl LiveTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of live blocks.
    pub fn len(&self) -> usize {
        self.small.len() + self.other.len()
    }

    /// True when nothing is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sum of the sizes of live blocks.
    pub fn current(&self) -> u64 {
        self.current
    }

    /// Highest `current` since the last clear or peak reset.
    pub fn peak(&self) -> u64 {
        self.peak
    }

    /// Sets the peak to the current traced size.
    pub fn reset_peak(&mut self) {
        self.peak = self.current;
    }

    /// Bytes held by the table itself.
    pub fn memory_bytes(&self) -> usize {
        self.small.memory_bytes() + self.other.memory_bytes()
    }

    /// Drops every entry and zeroes the counters.
    pub fn clear(&mut self) {
        *self = Self::new();
    }

    /// The entry for a block, if it is live.
    #[inline]
    pub fn get(&self, domain: u32, addr: u64) -> Option<LiveEntry> {
        if addr == 0 {
            return None;
        }
        if domain == SMALL_DOMAIN && is_granule(addr) {
            if let Some((size, stack)) = self.small.get(addr) {
                return Some(LiveEntry {
                    addr,
                    size,
                    stack,
                    domain,
                });
            }
        }
        self.other.get(domain, addr).copied()
    }

    /// Records a block, replacing (and un-counting) an entry at the same address of the
    /// same size class. A block resized in place across the small-block threshold must be
    /// removed first (the recorder's realloc path does): checking the other table on every
    /// insert would cost a failed probe per allocation. Returns the replaced entry. `addr`
    /// 0 is ignored. Always inlined, like [`LiveTable::remove`]: every traced allocation
    /// calls it.
    #[inline(always)]
    pub fn insert(
        &mut self,
        domain: u32,
        addr: u64,
        size: u64,
        stack: StackId,
    ) -> Result<Option<LiveEntry>, TableFull> {
        if addr == 0 {
            return Ok(None);
        }
        let replaced = if domain == SMALL_DOMAIN && is_small(addr, size) {
            if !fits(stack) {
                return self.insert_small_elsewhere(addr, size, stack);
            }
            match self.small.insert(addr, size, stack)? {
                Some((size, stack)) => Some(LiveEntry {
                    addr,
                    size,
                    stack,
                    domain,
                }),
                None if self.small_elsewhere => self.other.remove(domain, addr),
                None => None,
            }
        } else {
            self.other.insert(domain, addr, size, stack)?
        };
        if let Some(old) = replaced {
            self.current -= old.size;
        }
        self.current += size;
        self.peak = self.peak.max(self.current);
        Ok(replaced)
    }

    /// [`LiveTable::insert`] of a small block of domain 0 whose stack id does not fit a
    /// slot of the small-block table: it goes to the other table, replacing what either
    /// held at its address.
    #[cold]
    fn insert_small_elsewhere(
        &mut self,
        addr: u64,
        size: u64,
        stack: StackId,
    ) -> Result<Option<LiveEntry>, TableFull> {
        self.small_elsewhere = true;
        let in_small = self.small.remove(addr).map(|(size, stack)| LiveEntry {
            addr,
            size,
            stack,
            domain: SMALL_DOMAIN,
        });
        let replaced = match self.other.insert(SMALL_DOMAIN, addr, size, stack) {
            Ok(replaced) => replaced.or(in_small),
            Err(full) => {
                // The block is not recorded; the one it replaced is gone all the same.
                if let Some(old) = in_small {
                    self.current -= old.size;
                }
                return Err(full);
            }
        };
        if let Some(old) = replaced {
            self.current -= old.size;
        }
        self.current += size;
        self.peak = self.peak.max(self.current);
        Ok(replaced)
    }

    /// Forgets a block; returns its entry if it was live. Always inlined: every traced
    /// free calls it, and as a call it cost a prologue, an epilogue and an entry returned
    /// through memory (about 15 instructions of 60).
    #[inline(always)]
    pub fn remove(&mut self, domain: u32, addr: u64) -> Option<LiveEntry> {
        if addr == 0 {
            return None;
        }
        let removed = if domain == SMALL_DOMAIN && is_granule(addr) {
            match self.small.remove(addr) {
                Some((size, stack)) => Some(LiveEntry {
                    addr,
                    size,
                    stack,
                    domain,
                }),
                None => self.other.remove(domain, addr),
            }
        } else {
            self.other.remove(domain, addr)
        }?;
        self.current -= removed.size;
        Some(removed)
    }

    /// Forgets a small block of domain 0 when that is quick: `addr` starts a granule, its
    /// chunk is the one the small-block index used last for that cache entry, and the
    /// block is live there. True when it was forgotten, exactly as [`LiveTable::remove`]
    /// would; false when nothing changed (then `remove` decides).
    #[inline(always)]
    pub fn remove_small_quickly(&mut self, addr: u64) -> bool {
        if addr == 0 || !is_granule(addr) {
            return false;
        }
        match self.small.remove_cached(addr) {
            Some(size) => {
                self.current -= size;
                true
            }
            None => false,
        }
    }

    /// Every live entry.
    pub fn iter(&self) -> impl Iterator<Item = LiveEntry> + '_ {
        self.small
            .iter()
            .map(|(addr, size, stack)| LiveEntry {
                addr,
                size,
                stack,
                domain: SMALL_DOMAIN,
            })
            .chain(self.other.iter().copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn accounting_follows_inserts_replacements_and_removals() {
        let mut t = LiveTable::new();
        assert_eq!(t.insert(0, 0x1000, 100, 1), Ok(None));
        assert_eq!(t.insert(0, 0x2000, 5000, 2), Ok(None));
        assert_eq!((t.current(), t.peak()), (5100, 5100));
        let old = t.insert(0, 0x1000, 10, 3).unwrap().unwrap();
        assert_eq!(old.size, 100);
        assert_eq!((t.current(), t.peak()), (5010, 5100));
        assert_eq!(t.remove(0, 0x2000).map(|e| e.stack), Some(2));
        assert_eq!(t.remove(0, 0x2000), None);
        assert_eq!(t.current(), 10);
        t.reset_peak();
        assert_eq!(t.peak(), 10);
        // Same address, other domain: a distinct block.
        t.insert(7, 0x1000, 5, 4).unwrap();
        assert_eq!(t.get(0, 0x1000).unwrap().size, 10);
        assert_eq!(t.get(7, 0x1000).unwrap().size, 5);
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn a_block_resized_in_place_across_size_classes_is_counted_once() {
        let mut t = LiveTable::new();
        t.insert(0, 0x4000, 64, 1).unwrap();
        // realloc grew it in place past the small threshold: remove, then insert.
        assert_eq!(t.remove(0, 0x4000).map(|e| e.size), Some(64));
        assert_eq!(t.insert(0, 0x4000, 4096, 2).unwrap(), None);
        assert_eq!((t.len(), t.current()), (1, 4096));
        // ...and shrank it again.
        assert_eq!(t.remove(0, 0x4000).map(|e| e.size), Some(4096));
        t.insert(0, 0x4000, 8, 3).unwrap();
        assert_eq!((t.len(), t.current()), (1, 8));
        assert_eq!(t.remove(0, 0x4000).map(|e| e.stack), Some(3));
        assert!(t.is_empty());
    }

    #[test]
    fn small_blocks_whose_stack_does_not_fit_a_slot_are_kept_elsewhere() {
        use crate::chunked_table::MAX_SLOT_STACK;
        let big = MAX_SLOT_STACK + 1;
        let mut t = LiveTable::new();
        assert_eq!(t.insert(0, 0x1000, 64, big), Ok(None));
        assert_eq!(t.get(0, 0x1000).map(|e| (e.size, e.stack)), Some((64, big)));
        // A new block at that address (its free was missed) replaces it, from either side.
        let old = t.insert(0, 0x1000, 32, 7).unwrap().unwrap();
        assert_eq!((old.size, old.stack), (64, big));
        assert_eq!((t.len(), t.current()), (1, 32));
        let old = t.insert(0, 0x1000, 16, u32::MAX).unwrap().unwrap();
        assert_eq!((old.size, old.stack), (32, 7));
        assert_eq!((t.len(), t.current(), t.peak()), (1, 16, 64));
        assert!(!t.remove_small_quickly(0x1000));
        assert_eq!(t.remove(0, 0x1000).map(|e| e.stack), Some(u32::MAX));
        assert!(t.is_empty() && t.current() == 0);
    }

    #[test]
    fn matches_a_hashmap_under_random_churn() {
        use crate::chunked_table::MAX_SLOT_STACK;
        let mut t = LiveTable::new();
        let mut model: HashMap<u64, (u64, StackId)> = HashMap::new();
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let size_of = |e: Option<LiveEntry>| e.map(|e| (e.size, e.stack));
        for _ in 0..400_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Mixed alignments and sizes: both internal tables get traffic.
            let addr = ((x >> 8) % 20_000 + 1) * 8;
            if x & 3 == 0 {
                assert_eq!(size_of(t.remove(0, addr)), model.remove(&addr));
            } else if x & 3 == 1 {
                // The free hook's quick path first, the full removal when it declines.
                let before = (t.len(), t.current());
                if t.remove_small_quickly(addr) {
                    let (size, _) = model.remove(&addr).expect("only live blocks are forgotten");
                    assert!(size <= 512 && addr % 16 == 0);
                    assert_eq!((t.len() + 1, t.current() + size), before);
                } else {
                    assert_eq!((t.len(), t.current()), before);
                    assert_eq!(size_of(t.remove(0, addr)), model.remove(&addr));
                }
            } else {
                let size = (x >> 40) % 1500;
                // One stack in eight too large for a small block's slot.
                let stack = if (x >> 20) & 7 == 0 {
                    MAX_SLOT_STACK + 1 + ((x >> 24) % 5) as StackId
                } else {
                    ((x >> 24) % 1000) as StackId
                };
                let small = |size: u64| size <= 512 && addr % 16 == 0;
                let replaced = match model.get(&addr) {
                    // A missed free: a small block replaces a small one wherever it is.
                    Some(&(old, _)) if small(old) && small(size) => {
                        size_of(t.insert(0, addr, size, stack).unwrap())
                    }
                    // The recorder removes first when a block is resized in place.
                    _ => {
                        let old = size_of(t.remove(0, addr));
                        assert_eq!(t.insert(0, addr, size, stack).unwrap(), None);
                        old
                    }
                };
                assert_eq!(replaced, model.insert(addr, (size, stack)));
            }
        }
        assert_eq!(t.len(), model.len());
        assert_eq!(t.current(), model.values().map(|v| v.0).sum::<u64>());
        for (addr, value) in &model {
            assert_eq!(size_of(t.get(0, *addr)), Some(*value));
        }
        assert_eq!(t.iter().count(), model.len());
    }
}
