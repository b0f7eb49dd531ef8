//! The live set: `(domain, address) -> (size, stack)` for every traced block that has not
//! been freed, stored inline in one open-addressing table (linear probing, backward-shift
//! deletion, no tombstones), with the current and peak traced bytes.

use crate::key_hash::{mix2, slot_of};
use crate::stack_table::StackId;

/// One traced block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct LiveEntry {
    /// Block address; 0 marks an empty slot (no allocator returns NULL for a live block).
    pub addr: u64,
    /// Requested size in bytes.
    pub size: u64,
    /// The stack that allocated it.
    pub stack: StackId,
    /// tracemalloc's domain: 0 for the Python allocators.
    pub domain: u32,
}

/// The table could not grow: the block was not recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the live table could not grow: out of memory")]
pub struct TableFull;

/// Live blocks plus current/peak accounting.
#[derive(Debug)]
pub struct LiveTable {
    slots: Vec<LiveEntry>,
    mask: usize,
    len: usize,
    current: u64,
    peak: u64,
}

const INITIAL_SLOTS: usize = 1 << 10;

impl Default for LiveTable {
    fn default() -> Self {
        Self::new()
    }
}

#[inline]
fn hash_key(domain: u32, addr: u64) -> u64 {
    mix2(addr >> 3, u64::from(domain))
}

impl LiveTable {
    /// An empty table.
    pub fn new() -> Self {
        Self {
            slots: vec![LiveEntry::default(); INITIAL_SLOTS],
            mask: INITIAL_SLOTS - 1,
            len: 0,
            current: 0,
            peak: 0,
        }
    }

    /// Number of live blocks.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when nothing is live.
    pub fn is_empty(&self) -> bool {
        self.len == 0
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
        self.slots.capacity() * std::mem::size_of::<LiveEntry>()
    }

    /// Drops every entry and zeroes the counters.
    pub fn clear(&mut self) {
        *self = Self::new();
    }

    #[inline]
    fn find(&self, domain: u32, addr: u64) -> Result<usize, usize> {
        let mut slot = slot_of(hash_key(domain, addr), self.mask);
        loop {
            let e = &self.slots[slot];
            if e.addr == 0 {
                return Err(slot);
            }
            if e.addr == addr && e.domain == domain {
                return Ok(slot);
            }
            slot = (slot + 1) & self.mask;
        }
    }

    /// The entry for a block, if it is live.
    #[inline]
    pub fn get(&self, domain: u32, addr: u64) -> Option<&LiveEntry> {
        if addr == 0 {
            return None;
        }
        self.find(domain, addr).ok().map(|s| &self.slots[s])
    }

    /// Records a block, replacing (and un-counting) any entry at the same address.
    /// Returns the replaced entry. `addr` 0 is ignored.
    #[inline]
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
        let entry = LiveEntry {
            addr,
            size,
            stack,
            domain,
        };
        let replaced = match self.find(domain, addr) {
            Ok(slot) => {
                let old = std::mem::replace(&mut self.slots[slot], entry);
                self.current -= old.size;
                Some(old)
            }
            Err(slot) => {
                if (self.len + 1) * 4 > self.slots.len() * 3 {
                    self.grow()?;
                    let slot = self.find(domain, addr).unwrap_err();
                    self.slots[slot] = entry;
                } else {
                    self.slots[slot] = entry;
                }
                self.len += 1;
                None
            }
        };
        self.current += size;
        self.peak = self.peak.max(self.current);
        Ok(replaced)
    }

    /// Forgets a block; returns its entry if it was live.
    #[inline]
    pub fn remove(&mut self, domain: u32, addr: u64) -> Option<LiveEntry> {
        if addr == 0 {
            return None;
        }
        let mut hole = self.find(domain, addr).ok()?;
        let removed = self.slots[hole];
        self.current -= removed.size;
        self.len -= 1;
        // Backward-shift: pull later members of the probe run into the hole.
        let mut probe = hole;
        loop {
            probe = (probe + 1) & self.mask;
            let e = self.slots[probe];
            if e.addr == 0 {
                break;
            }
            let home = slot_of(hash_key(e.domain, e.addr), self.mask);
            // Move e if its home is not in the cyclic range (hole, probe].
            let in_range = if hole <= probe {
                hole < home && home <= probe
            } else {
                hole < home || home <= probe
            };
            if !in_range {
                self.slots[hole] = e;
                hole = probe;
            }
        }
        self.slots[hole] = LiveEntry::default();
        Some(removed)
    }

    /// Every live entry, in table order.
    pub fn iter(&self) -> impl Iterator<Item = &LiveEntry> + '_ {
        self.slots.iter().filter(|e| e.addr != 0)
    }

    fn grow(&mut self) -> Result<(), TableFull> {
        let new_len = self.slots.len() * 2;
        let mut slots = Vec::new();
        slots.try_reserve_exact(new_len).map_err(|_| TableFull)?;
        slots.resize(new_len, LiveEntry::default());
        let mask = new_len - 1;
        for e in self.slots.iter().filter(|e| e.addr != 0) {
            let mut slot = slot_of(hash_key(e.domain, e.addr), mask);
            while slots[slot].addr != 0 {
                slot = (slot + 1) & mask;
            }
            slots[slot] = *e;
        }
        self.slots = slots;
        self.mask = mask;
        Ok(())
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
        assert_eq!(t.insert(0, 0x2000, 50, 2), Ok(None));
        assert_eq!((t.current(), t.peak()), (150, 150));
        let old = t.insert(0, 0x1000, 10, 3).unwrap().unwrap();
        assert_eq!(old.size, 100);
        assert_eq!((t.current(), t.peak()), (60, 150));
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
    fn matches_a_hashmap_under_random_churn() {
        let mut t = LiveTable::new();
        let mut model: HashMap<u64, u64> = HashMap::new();
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for _ in 0..400_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let addr = ((x >> 8) % 20_000 + 1) * 16;
            if x & 3 == 0 {
                assert_eq!(t.remove(0, addr).map(|e| e.size), model.remove(&addr));
            } else {
                let size = x % 1000;
                let old = t.insert(0, addr, size, 1).unwrap().map(|e| e.size);
                assert_eq!(old, model.insert(addr, size));
            }
        }
        assert_eq!(t.len(), model.len());
        assert_eq!(t.current(), model.values().sum::<u64>());
        for (addr, size) in &model {
            assert_eq!(t.get(0, *addr).unwrap().size, *size);
        }
        assert_eq!(t.iter().count(), model.len());
    }
}
