//! Several framehop caches per unwind, used as one set-associative cache.
//!
//! framehop keeps the unwind rules it computed in a direct-mapped cache: slot
//! `address % 509`, one address per slot. Two return addresses of one stack that share a
//! slot evict each other, so every unwind of that stack misses on both and evaluates
//! their DWARF CFI again, from the start of their function's entry to the address.
//!
//! That is cheap for small functions, and ruinous for the interpreter's eval loop in
//! Debian's CPython 3.14 and 3.15 (GCC with profile feedback): its split-off part has
//! one entry of 1,133 rows, evaluated row by row. A program whose stack holds the eval
//! loop at two call sites sharing a slot (a signal handler nested in a signal handler:
//! 0x44cd14 and 0x44fccc in /usr/bin/python3.14) paid tens of microseconds per
//! allocation, and a 2 kHz Python signal handler could no longer finish between two
//! signals (tests/test_native_signals.py hung). A thread's first frames (0x592eac in
//! python3.14, and `start_thread` in libc) shared a slot in one run out of a few too.
//!
//! So each unwind holds [`WAYS`] framehop caches, and remembers which address it last
//! sent to each of them for each slot: an address goes back to the cache that holds it,
//! a new one to the slot's next cache in turn. Up to `WAYS` addresses of one slot stay
//! cached together. A cache is 48 bytes and about 20 KiB on the heap, and the tags are
//! 16 KiB, so each of the pool's 16 unwinds holds about 100 KiB.

use framehop::{CacheNative, MustNotAllocateDuringUnwind};

/// The caches one unwind holds.
const WAYS: usize = 4;

/// framehop's rule cache size (`CACHE_ENTRY_COUNT` in its `rule_cache.rs`, framehop
/// 0.16): the modulus of its slot index.
const FRAMEHOP_SLOTS: usize = 509;

pub(crate) type NativeCache = CacheNative<MustNotAllocateDuringUnwind>;

/// The caches of one unwind, and which address each was last asked for, per slot.
pub(crate) struct RuleWays {
    caches: [NativeCache; WAYS],
    /// `tags[slot][way]`: the lookup address last sent to `way` for that slot.
    tags: [[u64; WAYS]; FRAMEHOP_SLOTS],
    /// The way a new address of the slot goes to.
    next: [u8; FRAMEHOP_SLOTS],
}

impl RuleWays {
    pub(crate) fn new() -> Box<RuleWays> {
        Box::new(RuleWays {
            caches: std::array::from_fn(|_| NativeCache::new_in()),
            tags: [[0; WAYS]; FRAMEHOP_SLOTS],
            next: [0; FRAMEHOP_SLOTS],
        })
    }

    /// The cache to look `lookup` (a frame's lookup address) up in.
    #[inline]
    pub(crate) fn for_address(&mut self, lookup: u64) -> &mut NativeCache {
        let way = self.way_of(lookup);
        &mut self.caches[way]
    }

    /// framehop's hits, over the ways.
    #[cfg(test)]
    pub(crate) fn hit_count(&self) -> u64 {
        self.caches.iter().map(|c| c.stats().hit_count).sum()
    }

    fn way_of(&mut self, lookup: u64) -> usize {
        let slot = (lookup % FRAMEHOP_SLOTS as u64) as usize;
        let tags = &mut self.tags[slot];
        if let Some(way) = tags.iter().position(|&t| t == lookup) {
            return way;
        }
        // framehop fills this way's slot with `lookup` (when its rule can be cached).
        let way = usize::from(self.next[slot]) % WAYS;
        self.next[slot] = ((way + 1) % WAYS) as u8;
        tags[way] = lookup;
        way
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_sharing_a_framehop_slot_keep_their_own_caches() {
        let mut ways = RuleWays::new();
        // The two call sites of python3.14's eval loop that evicted each other, and two
        // more addresses of their slot.
        let slots = FRAMEHOP_SLOTS as u64;
        let (a, b) = (0x44cd14 - 1, 0x44fccc - 1);
        assert_eq!(a % slots, b % slots);
        let slot_mates = [a, b, a + slots * 7, b + slots * 1000];
        let first: Vec<usize> = slot_mates.iter().map(|&x| ways.way_of(x)).collect();
        assert_eq!(first, (0..WAYS).collect::<Vec<_>>());
        // Asked again, in any order, each goes back to its cache.
        for _ in 0..3 {
            for (i, &x) in slot_mates.iter().enumerate().rev() {
                assert_eq!(ways.way_of(x), first[i]);
            }
        }
        // Another slot is not disturbed, and does not disturb.
        assert_eq!(ways.way_of(a + 1), 0);
        assert_eq!(ways.way_of(b), first[1]);
    }

    #[test]
    fn a_fifth_address_of_a_slot_replaces_the_oldest() {
        let mut ways = RuleWays::new();
        let mates: Vec<u64> = (0..=WAYS as u64)
            .map(|i| 0x7f00_0000_0000 + i * FRAMEHOP_SLOTS as u64)
            .collect();
        for &x in &mates[..WAYS] {
            ways.way_of(x);
        }
        assert_eq!(ways.way_of(mates[WAYS]), 0);
        // The replaced one comes back in the next way in turn; the others stay.
        assert_eq!(ways.way_of(mates[2]), 2);
        assert_eq!(ways.way_of(mates[0]), 1);
    }

    #[test]
    fn a_way_is_one_of_the_caches() {
        let mut ways = RuleWays::new();
        for address in [0, 1, 508, 509, u64::MAX] {
            let cache: *const NativeCache = ways.for_address(address);
            assert!(ways.caches.iter().any(|c| std::ptr::eq(c, cache)));
        }
    }
}
