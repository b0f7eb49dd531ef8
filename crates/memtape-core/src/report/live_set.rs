//! The replay's live set: `(domain, address) -> (size, stack slot, time bucket)`.
//!
//! Small granule-aligned blocks of domain 0 (pymalloc's objects, the bulk) sit in
//! [`SmallBlocks`] by address; every other block in a hash map per domain. A block can
//! move between the two when an address is reused with another size, so an insert must
//! also clear the other table; for small inserts, a counter per 64 KiB region of how many
//! domain-0 blocks the hash map holds there skips that lookup in the common case (small
//! and big blocks come from different regions).

use rustc_hash::FxHashMap;

use super::slot_palette::{pack, unpack};
use super::small_blocks::SmallBlocks;
use crate::chunked_table::{is_granule, is_small};

/// `(size, stack slot, time bucket id)` of a block (see [`super::bucket_clock`]).
pub(crate) type Block = (u64, u32, u16);

const REGION_SHIFT: u32 = 16;
const REGION_COUNTERS: usize = 1 << 14;

#[inline]
fn region(addr: u64) -> usize {
    ((addr >> REGION_SHIFT) as usize) & (REGION_COUNTERS - 1)
}

/// The block could not be recorded (out of memory, or address 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NotTracked;

#[derive(Debug)]
pub(crate) struct LiveSet {
    small: SmallBlocks,
    /// Domain-0 blocks that are not small.
    big: FxHashMap<u64, Block>,
    /// Domain-0 blocks in `big` per region (regions alias modulo the counter count).
    big_per_region: Vec<u32>,
    /// Blocks of other domains.
    domains: Vec<(u32, FxHashMap<u64, Block>)>,
}

impl Default for LiveSet {
    fn default() -> Self {
        Self {
            small: SmallBlocks::default(),
            big: FxHashMap::default(),
            big_per_region: vec![0; REGION_COUNTERS],
            domains: Vec::new(),
        }
    }
}

impl LiveSet {
    #[inline]
    fn remove_big(&mut self, addr: u64) -> Option<Block> {
        let r = region(addr);
        if self.big_per_region[r] == 0 {
            return None;
        }
        let old = self.big.remove(&addr)?;
        self.big_per_region[r] -= 1;
        Some(old)
    }

    fn domain(&mut self, domain: u32) -> &mut FxHashMap<u64, Block> {
        let i = match self.domains.iter().position(|(d, _)| *d == domain) {
            Some(i) => i,
            None => {
                self.domains.push((domain, FxHashMap::default()));
                self.domains.len() - 1
            }
        };
        &mut self.domains[i].1
    }

    /// Records a block; returns the block it replaces at the same address and domain.
    #[inline]
    pub(crate) fn insert(
        &mut self,
        domain: u32,
        addr: u64,
        block: Block,
    ) -> Result<Option<Block>, NotTracked> {
        if addr == 0 {
            return Err(NotTracked);
        }
        if domain != 0 {
            return Ok(self.domain(domain).insert(addr, block));
        }
        if is_small(addr, block.0) {
            let old = self
                .small
                .insert(addr, pack(block.0, block.1, block.2))
                .map_err(|_| NotTracked)?;
            return Ok(old.map(unpack).or_else(|| self.remove_big(addr)));
        }
        let old = match self.big.insert(addr, block) {
            Some(old) => Some(old),
            None => {
                self.big_per_region[region(addr)] += 1;
                if is_granule(addr) {
                    self.small.remove(addr).map(unpack)
                } else {
                    None
                }
            }
        };
        Ok(old)
    }

    /// Every live block, in no particular order.
    pub(crate) fn blocks(&self) -> impl Iterator<Item = Block> + '_ {
        self.small
            .values()
            .map(unpack)
            .chain(self.big.values().copied())
            .chain(self.domains.iter().flat_map(|(_, b)| b.values().copied()))
    }

    /// Forgets a block of `domain` (`None`: domain 0 first, then any other); returns it.
    #[cfg(test)]
    pub(crate) fn remove(&mut self, domain: Option<u32>, addr: u64) -> Option<Block> {
        self.remove_from(domain, addr).map(|(_, b)| b)
    }

    /// [`remove`](Self::remove), also saying which domain the block was in.
    #[inline]
    pub(crate) fn remove_from(&mut self, domain: Option<u32>, addr: u64) -> Option<(u32, Block)> {
        match domain {
            Some(0) | None => {
                let found = if is_granule(addr) {
                    self.small.remove(addr).map(unpack)
                } else {
                    None
                };
                let found = found.or_else(|| self.remove_big(addr));
                match (found, domain) {
                    (Some(b), _) => Some((0, b)),
                    (None, None) => self
                        .domains
                        .iter_mut()
                        .find_map(|(d, blocks)| blocks.remove(&addr).map(|b| (*d, b))),
                    (None, Some(_)) => None,
                }
            }
            Some(d) => self
                .domains
                .iter_mut()
                .find(|(id, _)| *id == d)
                .and_then(|(_, blocks)| blocks.remove(&addr))
                .map(|b| (d, b)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_move_between_tables_and_domains_stay_apart() {
        let mut s = LiveSet::default();
        assert_eq!(s.insert(0, 0x1000, (4096, 1, 0)), Ok(None));
        // The same address reused for a small block replaces the big one.
        assert_eq!(s.insert(0, 0x1000, (16, 2, 1)), Ok(Some((4096, 1, 0))));
        assert_eq!(s.insert(0, 0x1000, (8192, 3, 2)), Ok(Some((16, 2, 1))));
        assert_eq!(s.insert(7, 0x1000, (5, 4, 3)), Ok(None));
        assert_eq!(s.insert(0, 0x1008, (8, 5, 4)), Ok(None)); // not granule-aligned
        assert_eq!(s.insert(0, 0, (8, 5, 0)), Err(NotTracked));
        let mut all: Vec<Block> = s.blocks().collect();
        all.sort_unstable();
        assert_eq!(all, vec![(5, 4, 3), (8, 5, 4), (8192, 3, 2)]);
        assert_eq!(s.remove(None, 0x1000), Some((8192, 3, 2)));
        assert_eq!(s.remove(Some(0), 0x1000), None);
        assert_eq!(s.remove(None, 0x1000), Some((5, 4, 3)));
        assert_eq!(s.remove(Some(0), 0x1008), Some((8, 5, 4)));
        assert_eq!(s.remove(Some(9), 0x1008), None);
        assert!(s.big_per_region.iter().all(|&c| c == 0));
    }
}
