//! Small blocks in address order: one slot per 16-byte granule, in 64 KiB chunks.
//!
//! Consecutive small allocations come from the same allocator pool, so their slots share
//! cache lines; a hash table would scatter them and pay a cache miss per operation.

use crate::chunk_index::ChunkIndex;
use crate::live_entry::TableFull;
use crate::stack_table::StackId;

/// Granule: every block handled here is 16-byte aligned.
pub(crate) const GRANULE_SHIFT: u32 = 4;
/// Chunk: 64 KiB of address space, 4096 slots.
const CHUNK_SHIFT: u32 = 16;
pub(crate) const SLOTS_PER_CHUNK: usize = 1 << (CHUNK_SHIFT - GRANULE_SHIFT);
/// Largest block kept here (pymalloc's small-request threshold).
pub(crate) const MAX_SMALL_SIZE: u64 = 512;

/// A slot: `size + 1` in the low [`SIZE_BITS`] bits (0: empty; small sizes need 10) and
/// the stack id above them, in 4 bytes. Half the 8 bytes a separate size and id took:
/// the table is a shadow of the small-object heap (a slot per 16-byte granule), so its
/// size is what every allocation and free pulls through the cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Slot(u32);

/// Bits of a slot that hold `size + 1`.
const SIZE_BITS: u32 = 10;

/// The largest stack id a slot holds; a block with a larger one lives in the live
/// table's other table ([`fits`]).
pub(crate) const MAX_SLOT_STACK: StackId = StackId::MAX >> SIZE_BITS;

impl Slot {
    #[inline(always)]
    fn new(size: u64, stack: StackId) -> Self {
        debug_assert!(size <= MAX_SMALL_SIZE && stack <= MAX_SLOT_STACK);
        Self((size as u32 + 1) | (stack << SIZE_BITS))
    }

    #[inline(always)]
    fn is_empty(self) -> bool {
        self.0 == 0
    }

    #[inline(always)]
    fn size(self) -> u64 {
        u64::from((self.0 & ((1 << SIZE_BITS) - 1)) - 1)
    }

    #[inline(always)]
    fn stack(self) -> StackId {
        self.0 >> SIZE_BITS
    }
}

/// A chunk's slots: a fixed-size array, so a slot index masked to the chunk needs no
/// bounds check.
type Chunk = Box<[Slot; SLOTS_PER_CHUNK]>;

/// Small, granule-aligned blocks of domain 0.
#[derive(Debug, Default)]
pub(crate) struct ChunkedTable {
    index: ChunkIndex,
    /// By chunk number: one pointer each, so that the hooks' path through this array
    /// stays small in the cache.
    chunks: Vec<Chunk>,
    /// Each chunk's first address, by chunk number (read only to list the blocks).
    bases: Vec<u64>,
    len: usize,
}

/// Whether an address starts a granule (only those have a slot here).
#[inline]
pub(crate) fn is_granule(addr: u64) -> bool {
    addr & ((1 << GRANULE_SHIFT) - 1) == 0
}

/// Whether a block belongs in the chunked table.
#[inline]
pub(crate) fn is_small(addr: u64, size: u64) -> bool {
    size <= MAX_SMALL_SIZE && is_granule(addr)
}

/// Whether a small block's stack id fits a slot.
#[inline(always)]
pub(crate) fn fits(stack: StackId) -> bool {
    stack <= MAX_SLOT_STACK
}

/// `(chunk key, slot in the chunk)` of an address.
#[inline]
pub(crate) fn split(addr: u64) -> (u64, usize) {
    (
        addr >> CHUNK_SHIFT,
        ((addr >> GRANULE_SHIFT) as usize) & (SLOTS_PER_CHUNK - 1),
    )
}

impl ChunkedTable {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn memory_bytes(&self) -> usize {
        self.chunks.len() * (SLOTS_PER_CHUNK * std::mem::size_of::<Slot>() + 16)
            + self.index.capacity() * 16
    }

    /// `(size, stack)` of a live block (`addr` must start a granule).
    #[inline]
    pub(crate) fn get(&self, addr: u64) -> Option<(u64, StackId)> {
        debug_assert!(is_granule(addr));
        let (key, slot) = split(addr);
        let i = self.index.peek(key)?;
        let s = self.chunks[i as usize][slot];
        (!s.is_empty()).then(|| (s.size(), s.stack()))
    }

    /// Stores a block ([`is_small`], and its stack [`fits`]); returns the `(size, stack)`
    /// it replaces.
    #[inline(always)]
    pub(crate) fn insert(
        &mut self,
        addr: u64,
        size: u64,
        stack: StackId,
    ) -> Result<Option<(u64, StackId)>, TableFull> {
        debug_assert!(is_small(addr, size) && fits(stack));
        let (key, slot) = split(addr);
        let i = match self.index.get(key) {
            Some(i) => i,
            None => self.new_chunk(key)?,
        };
        let old = std::mem::replace(&mut self.chunks[i as usize][slot], Slot::new(size, stack));
        if old.is_empty() {
            self.len += 1;
            Ok(None)
        } else {
            Ok(Some((old.size(), old.stack())))
        }
    }

    /// Forgets a block (`addr` must start a granule); returns its `(size, stack)` if it
    /// was live.
    #[inline(always)]
    pub(crate) fn remove(&mut self, addr: u64) -> Option<(u64, StackId)> {
        debug_assert!(is_granule(addr));
        let (key, slot) = split(addr);
        let i = self.index.get(key)?;
        let old = std::mem::take(&mut self.chunks[i as usize][slot]);
        if old.is_empty() {
            return None;
        }
        self.len -= 1;
        Some((old.size(), old.stack()))
    }

    /// [`remove`](Self::remove) of a live block whose chunk is in the index's cache, or
    /// `None` with nothing changed: the chunk is not cached, or the slot is empty. Only the
    /// size is returned, for the free hook's path that needs nothing else.
    #[inline(always)]
    pub(crate) fn remove_cached(&mut self, addr: u64) -> Option<u64> {
        debug_assert!(is_granule(addr));
        let (key, slot) = split(addr);
        let i = self.index.cached(key)?;
        let chunk = &mut self.chunks[i as usize];
        let old = chunk[slot];
        if old.is_empty() {
            return None;
        }
        chunk[slot] = Slot::default();
        self.len -= 1;
        Some(old.size())
    }

    /// Every live block as `(addr, size, stack)`, in address order within a chunk.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, u64, StackId)> + '_ {
        self.chunks.iter().zip(&self.bases).flat_map(|(c, &base)| {
            c.iter()
                .enumerate()
                .filter(|(_, s)| !s.is_empty())
                .map(move |(i, s)| (base + ((i as u64) << GRANULE_SHIFT), s.size(), s.stack()))
        })
    }

    #[cold]
    fn new_chunk(&mut self, key: u64) -> Result<u32, TableFull> {
        let i = u32::try_from(self.chunks.len()).map_err(|_| TableFull)?;
        let mut slots = Vec::new();
        slots
            .try_reserve_exact(SLOTS_PER_CHUNK)
            .map_err(|_| TableFull)?;
        slots.resize(SLOTS_PER_CHUNK, Slot::default());
        let slots: Box<[Slot; SLOTS_PER_CHUNK]> =
            slots.into_boxed_slice().try_into().map_err(|_| TableFull)?;
        self.chunks.try_reserve(1).map_err(|_| TableFull)?;
        self.bases.try_reserve(1).map_err(|_| TableFull)?;
        self.chunks.push(slots);
        self.bases.push(key << CHUNK_SHIFT);
        self.index.insert(key, i);
        Ok(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stores_replaces_and_removes_by_address() {
        let mut t = ChunkedTable::default();
        assert_eq!(t.insert(0x10_0000, 32, 1), Ok(None));
        assert_eq!(t.insert(0x10_0010, 0, 2), Ok(None));
        assert_eq!(t.insert(0x90_0000, 512, 3), Ok(None));
        assert_eq!(t.get(0x10_0010), Some((0, 2)));
        assert_eq!(t.insert(0x10_0000, 48, 4), Ok(Some((32, 1))));
        assert_eq!(t.len(), 3);
        assert_eq!(t.remove(0x10_0000), Some((48, 4)));
        assert_eq!(t.remove(0x10_0000), None);
        assert_eq!(t.remove(0x20_0000), None);
        let all: Vec<_> = t.iter().collect();
        assert_eq!(all, vec![(0x10_0010, 0, 2), (0x90_0000, 512, 3)]);
        assert!(is_small(0x10, 512) && !is_small(0x18, 8) && !is_small(0x10, 513));
    }

    #[test]
    fn a_slot_holds_every_small_size_and_the_largest_stack_it_takes() {
        let mut t = ChunkedTable::default();
        for size in 0..=MAX_SMALL_SIZE {
            let addr = 0x40_0000 + size * 16;
            assert_eq!(t.insert(addr, size, MAX_SLOT_STACK - size as u32), Ok(None));
        }
        for size in 0..=MAX_SMALL_SIZE {
            let addr = 0x40_0000 + size * 16;
            assert_eq!(t.get(addr), Some((size, MAX_SLOT_STACK - size as u32)));
        }
        assert_eq!(t.insert(0x40_0000, 512, 0), Ok(Some((0, MAX_SLOT_STACK))));
        assert_eq!(t.remove_cached(0x40_0000), Some(512));
        assert_eq!(t.remove_cached(0x40_0000), None);
        assert!(fits(MAX_SLOT_STACK) && !fits(MAX_SLOT_STACK + 1));
        assert_eq!(t.len(), MAX_SMALL_SIZE as usize);
    }
}
