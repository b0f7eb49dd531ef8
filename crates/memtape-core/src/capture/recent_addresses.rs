//! The encoder's memory of the block's recent allocations and frees, for the back
//! references: a free of a block allocated earlier in the same block names that
//! allocation (`FreeStep`), and an allocation at the address of a block freed earlier in
//! the same block names that free (`AllocReuse`). Python's allocators hand out the block
//! freed last of a size class first, and programs often free what they built in the
//! order they built it, so the references repeat in patterns that compress far better
//! than addresses. An allocation gets a distance, a free an ordinal (the encoder turns
//! it into a step).
//!
//! A direct-mapped table keyed by address, each entry the last allocation and the last
//! free at its slot side by side (an allocation looks at the free and writes the
//! allocation: one cache line): one load and one store per record on the recording path,
//! no probing. A miss (a collision, or an event of an earlier block) only falls back to
//! the address delta; a hit is exact, because the slot holds the address it was written
//! for.

/// Entries in the table (a power of two): 512 KiB, one entry per 16 bytes of a 256 KiB
/// span of addresses. Smaller tables lost most references on deep_recursion, whose few
/// thousand live objects spread over a few hundred KiB (section 26 of
/// `benchmarks/RESULTS.md`).
pub(super) const SLOTS: usize = 1 << 14;

/// One remembered record: its address and its stamp, 1 + how many records of its kind
/// the encoder wrote before it, in any block (0: no record). A stamp up to the count
/// at the block's start is of an earlier block.
#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    addr: u64,
    stamp: u64,
}

/// The last allocation and the last free at a slot (aligned: within one cache line).
#[derive(Clone, Copy, Debug, Default)]
#[repr(align(32))]
struct Entry {
    alloc: Slot,
    free: Slot,
}

/// Recent allocations and frees of the current block, by address.
#[derive(Debug)]
pub(super) struct RecentAddresses {
    /// An array of a known length: a masked index needs no bounds check. None only once
    /// dropped (the table goes back to [`SPARE`]).
    table: Option<Box<[Entry; SLOTS]>>,
    /// Allocation and free records written, in every block (of every encoder that used
    /// the table before: see [`SPARE`]).
    allocs: u64,
    frees: u64,
    /// `allocs` and `frees` when the current block began: stamps up to these are of
    /// earlier blocks, and never match.
    block_allocs: u64,
    block_frees: u64,
}

/// A table an encoder dropped, with its counts: the next encoder starts from it as from
/// a new block (its entries' stamps are all up to the counts, so none matches) instead
/// of writing 512 KiB of zeroes, which a capture per test (the pytest plugin) paid at
/// each test's start in page faults. Holds one table at most.
static SPARE: std::sync::Mutex<Option<Spare>> = std::sync::Mutex::new(None);

/// A table and the allocation and free counts its stamps were written with.
type Spare = (Box<[Entry; SLOTS]>, u64, u64);

impl Default for RecentAddresses {
    fn default() -> Self {
        let spare = SPARE.lock().unwrap_or_else(|e| e.into_inner()).take();
        let (table, allocs, frees) = spare.unwrap_or_else(|| {
            let table = vec![Entry::default(); SLOTS]
                .into_boxed_slice()
                .try_into()
                .expect("SLOTS entries");
            (table, 0, 0)
        });
        RecentAddresses {
            table: Some(table),
            allocs,
            frees,
            block_allocs: allocs,
            block_frees: frees,
        }
    }
}

impl Clone for RecentAddresses {
    fn clone(&self) -> Self {
        RecentAddresses {
            table: self.table.clone(),
            ..*self
        }
    }
}

impl Drop for RecentAddresses {
    fn drop(&mut self) {
        if let Some(table) = self.table.take() {
            *SPARE.lock().unwrap_or_else(|e| e.into_inner()) =
                Some((table, self.allocs, self.frees));
        }
    }
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
        let entry = &mut self.table.as_deref_mut()?[slot_of(addr)];
        let freed = entry.free;
        // The frees written after it.
        let back = self.frees - freed.stamp;
        let found = (freed.addr == addr && freed.stamp > self.block_frees)
            .then_some(back)
            .filter(|&back| back < u64::from(max_back))
            .map(|back| back as u32);
        self.allocs += 1;
        entry.alloc = Slot {
            addr,
            stamp: self.allocs,
        };
        found
    }

    /// Records a free at `addr`; returns the ordinal in this block of the allocation at
    /// the same address, if the table remembers one.
    #[inline(always)]
    pub(super) fn free(&mut self, addr: u64) -> Option<u32> {
        let entry = &mut self.table.as_deref_mut()?[slot_of(addr)];
        let allocated = entry.alloc;
        let found = (allocated.addr == addr && allocated.stamp > self.block_allocs)
            .then(|| (allocated.stamp - 1 - self.block_allocs) as u32);
        self.frees += 1;
        entry.free = Slot {
            addr,
            stamp: self.frees,
        };
        found
    }

    /// Allocation and free records in this block.
    #[inline]
    pub(super) fn block_events(&self) -> u64 {
        (self.allocs - self.block_allocs) + (self.frees - self.block_frees)
    }

    /// Starts a new block: nothing before it is referred to.
    pub(super) fn new_block(&mut self) {
        self.block_allocs = self.allocs;
        self.block_frees = self.frees;
    }
}
