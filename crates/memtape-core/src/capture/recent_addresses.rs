//! The encoder's memory of the block's recent allocations and frees, for the back
//! references: a free of a block allocated earlier in the same block names that
//! allocation (`FreeStep`), and an allocation at the address of a block freed earlier in
//! the same block names that free (`AllocReuse`). Python's allocators hand out the block
//! freed last of a size class first, and programs often free what they built in the
//! order they built it, so the references repeat in patterns that compress far better
//! than addresses. An allocation gets a distance, a free an ordinal (the encoder turns
//! it into a step).
//!
//! A direct-mapped table per kind, keyed by address: one load and one store per record
//! on the recording path, no probing. A miss (a collision, or an event of an earlier
//! block) only falls back to the address delta; a hit is exact, because the slot holds
//! the address it was written for.

/// Slots per table (a power of two): 2 × 256 KiB, one slot per 16 bytes of a 256 KiB
/// span of addresses. Smaller tables lost most references on deep_recursion, whose few
/// thousand live objects spread over a few hundred KiB (section 26 of
/// `benchmarks/RESULTS.md`).
pub(super) const SLOTS: usize = 1 << 14;

/// One remembered record: its address, its ordinal in the block, and the block it was
/// written in.
#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    addr: u64,
    ordinal: u32,
    block: u32,
}

/// Recent allocations and frees of the current block, by address.
#[derive(Clone, Debug)]
pub(super) struct RecentAddresses {
    /// Arrays of a known length: a masked index needs no bounds check.
    allocs: Box<[Slot; SLOTS]>,
    frees: Box<[Slot; SLOTS]>,
    /// Allocation and free records so far in this block.
    alloc_count: u32,
    free_count: u32,
    /// The current block's number; slots of other blocks never match. Starts at 1, so
    /// the zeroed slots belong to no block.
    block: u32,
}

impl Default for RecentAddresses {
    fn default() -> Self {
        RecentAddresses {
            allocs: empty_table(),
            frees: empty_table(),
            alloc_count: 0,
            free_count: 0,
            block: 1,
        }
    }
}

/// A table of zeroed slots, built on the heap (it is too large for a thread's stack).
fn empty_table() -> Box<[Slot; SLOTS]> {
    vec![Slot::default(); SLOTS]
        .into_boxed_slice()
        .try_into()
        .expect("SLOTS slots")
}

#[inline]
fn slot_of(addr: u64) -> usize {
    // pymalloc's and malloc's blocks are 16-byte aligned on 64-bit systems; neighbours
    // land in neighbouring slots.
    ((addr >> 4) as usize) & (SLOTS - 1)
}

impl RecentAddresses {
    /// Records an allocation at `addr`; returns how many frees back in this block one at
    /// the same address was, if the table remembers one less than `max_back` back.
    #[inline(always)]
    pub(super) fn alloc(&mut self, addr: u64, max_back: u32) -> Option<u32> {
        let i = slot_of(addr);
        let freed = self.frees[i];
        let back = (freed.block == self.block && freed.addr == addr)
            .then(|| self.free_count - 1 - freed.ordinal)
            .filter(|&back| back < max_back);
        self.allocs[i] = Slot {
            addr,
            ordinal: self.alloc_count,
            block: self.block,
        };
        self.alloc_count += 1;
        back
    }

    /// Records a free at `addr`; returns the ordinal in this block of the allocation at
    /// the same address, if the table remembers one.
    #[inline(always)]
    pub(super) fn free(&mut self, addr: u64) -> Option<u32> {
        let i = slot_of(addr);
        let allocated = self.allocs[i];
        let back =
            (allocated.block == self.block && allocated.addr == addr).then_some(allocated.ordinal);
        self.frees[i] = Slot {
            addr,
            ordinal: self.free_count,
            block: self.block,
        };
        self.free_count += 1;
        back
    }

    /// Starts a new block: nothing before it is referred to.
    pub(super) fn new_block(&mut self) {
        self.alloc_count = 0;
        self.free_count = 0;
        self.block = self.block.wrapping_add(1);
        if self.block == 0 {
            // After 2**32 blocks: forget every slot rather than match a block of old.
            *self = RecentAddresses::default();
        }
    }
}
