//! `(domain, address) -> (size, stack)` in one open-addressing table (linear probing,
//! backward-shift deletion, no tombstones): the live table's home for large blocks and
//! blocks of other domains.

use crate::key_hash::{mix2, slot_of};

use crate::live_entry::{LiveEntry, TableFull};
use crate::stack_table::StackId;

/// Blocks keyed by `(domain, address)`; address 0 marks an empty slot.
#[derive(Debug)]
pub(crate) struct AddressTable {
    slots: Vec<LiveEntry>,
    mask: usize,
    len: usize,
}

const INITIAL_SLOTS: usize = 1 << 10;

impl Default for AddressTable {
    fn default() -> Self {
        Self::new()
    }
}

#[inline]
fn hash_key(domain: u32, addr: u64) -> u64 {
    mix2(addr >> 3, u64::from(domain))
}

impl AddressTable {
    /// An empty table; it allocates its slots at its first insert (a table made per
    /// capture or analysis often holds nothing: 24 KiB zeroed for nothing, under the pytest
    /// plugin at every test).
    pub(crate) fn new() -> Self {
        Self {
            slots: Vec::new(),
            mask: 0,
            len: 0,
        }
    }

    /// Number of blocks.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Bytes held by the table itself.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<LiveEntry>()
    }

    #[inline]
    fn find(&self, domain: u32, addr: u64) -> Result<usize, usize> {
        if self.slots.is_empty() {
            return Err(0);
        }
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
    pub(crate) fn get(&self, domain: u32, addr: u64) -> Option<&LiveEntry> {
        if addr == 0 {
            return None;
        }
        self.find(domain, addr).ok().map(|s| &self.slots[s])
    }

    /// Records a block, replacing (and un-counting) any entry at the same address.
    /// Returns the replaced entry. `addr` 0 is ignored.
    #[inline]
    pub(crate) fn insert(
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
            Ok(slot) => Some(std::mem::replace(&mut self.slots[slot], entry)),
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
        Ok(replaced)
    }

    /// Forgets a block; returns its entry if it was live.
    #[inline]
    pub(crate) fn remove(&mut self, domain: u32, addr: u64) -> Option<LiveEntry> {
        if addr == 0 {
            return None;
        }
        let mut hole = self.find(domain, addr).ok()?;
        let removed = self.slots[hole];
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
    pub(crate) fn iter(&self) -> impl Iterator<Item = &LiveEntry> + '_ {
        self.slots.iter().filter(|e| e.addr != 0)
    }

    fn grow(&mut self) -> Result<(), TableFull> {
        let new_len = (self.slots.len() * 2).max(INITIAL_SLOTS);
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
    fn an_empty_table_holds_no_slots_until_its_first_insert() {
        let mut t = AddressTable::new();
        assert_eq!(t.memory_bytes(), 0);
        assert!(t.get(0, 0x1000).is_none());
        assert!(t.remove(0, 0x1000).is_none());
        assert_eq!(t.iter().count(), 0);
        t.insert(2, 0x1000, 64, 5).unwrap();
        assert_eq!(
            t.memory_bytes(),
            INITIAL_SLOTS * std::mem::size_of::<LiveEntry>()
        );
        assert_eq!(t.get(2, 0x1000).map(|e| (e.size, e.stack)), Some((64, 5)));
        assert_eq!(t.remove(2, 0x1000).map(|e| e.size), Some(64));
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn matches_a_hashmap_under_random_churn() {
        let mut t = AddressTable::new();
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
        for (addr, size) in &model {
            assert_eq!(t.get(0, *addr).unwrap().size, *size);
        }
        assert_eq!(t.iter().count(), model.len());
    }
}
