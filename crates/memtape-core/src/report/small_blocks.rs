//! The replay's small blocks of domain 0 in address order: one 2-byte slot per 16-byte
//! granule, in 64 KiB chunks.
//!
//! Like the recorder's [`crate::chunked_table`], consecutive small allocations share
//! cache lines here; but a slot holds a [`SlotPalette`] id, not the block's value, so the
//! table takes a quarter of the memory (the bulk of a report's memory on a big capture:
//! 2,328 chunks for alloc_heavy, 18 MiB instead of 73). A chunk whose block has a value
//! the palette cannot name (all ids taken) turns wide: 8 bytes per slot, the value itself.

use super::slot_palette::{Packed, SlotPalette};
use crate::chunk_index::ChunkIndex;
use crate::chunked_table::{split, SLOTS_PER_CHUNK};

#[derive(Debug)]
enum Slots {
    /// Palette ids (0: empty).
    Narrow(Box<[u16]>),
    /// Packed values (0: empty).
    Wide(Box<[Packed]>),
}

/// Small, granule-aligned blocks by address, each as a [`Packed`] value.
#[derive(Debug, Default)]
pub(crate) struct SmallBlocks {
    index: ChunkIndex,
    chunks: Vec<Slots>,
    palette: SlotPalette,
}

/// Memory for a chunk's slots could not be had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NoMemory;

/// A zeroed boxed slice, or `NoMemory`.
fn zeroed<T: Copy + Default>(len: usize) -> Result<Box<[T]>, NoMemory> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| NoMemory)?;
    v.resize(len, T::default());
    Ok(v.into_boxed_slice())
}

impl SmallBlocks {
    /// Stores `value` at `addr` (granule-aligned); returns the value it replaces.
    #[inline]
    pub(crate) fn insert(&mut self, addr: u64, value: Packed) -> Result<Option<Packed>, NoMemory> {
        let (key, slot) = split(addr);
        let i = match self.index.get(key) {
            Some(i) => i,
            None => self.new_chunk(key)?,
        } as usize;
        let old = match &mut self.chunks[i] {
            Slots::Narrow(ids) => match self.palette.id(value) {
                Some(id) => std::mem::replace(&mut ids[slot], id),
                None => return self.insert_widening(i, slot, value),
            },
            Slots::Wide(values) => return Ok(nonzero(std::mem::replace(&mut values[slot], value))),
        };
        Ok((old != 0).then(|| self.palette.value(old)))
    }

    /// Widens narrow chunk `i`, whose new value has no id, then stores the value.
    #[cold]
    fn insert_widening(
        &mut self,
        i: usize,
        slot: usize,
        value: Packed,
    ) -> Result<Option<Packed>, NoMemory> {
        self.widen(i)?;
        match &mut self.chunks[i] {
            Slots::Wide(values) => Ok(nonzero(std::mem::replace(&mut values[slot], value))),
            Slots::Narrow(_) => unreachable!("the chunk was just widened"),
        }
    }

    /// Forgets the block at `addr` (granule-aligned); returns its value if it was live.
    #[inline(always)]
    pub(crate) fn remove(&mut self, addr: u64) -> Option<Packed> {
        let (key, slot) = split(addr);
        let i = self.index.get(key)?;
        match &mut self.chunks[i as usize] {
            Slots::Narrow(ids) => {
                let old = std::mem::take(&mut ids[slot]);
                (old != 0).then(|| self.palette.value(old))
            }
            Slots::Wide(values) => nonzero(std::mem::take(&mut values[slot])),
        }
    }

    /// Every live block's value.
    pub(crate) fn values(&self) -> impl Iterator<Item = Packed> + '_ {
        self.chunks.iter().flat_map(move |c| {
            let (narrow, wide): (&[u16], &[Packed]) = match c {
                Slots::Narrow(ids) => (ids, &[]),
                Slots::Wide(values) => (&[], values),
            };
            let named = narrow
                .iter()
                .filter(|&&id| id != 0)
                .map(|&id| self.palette.value(id));
            named.chain(wide.iter().copied().filter(|&v| v != 0))
        })
    }

    #[cold]
    fn widen(&mut self, i: usize) -> Result<(), NoMemory> {
        let mut values = zeroed::<Packed>(SLOTS_PER_CHUNK)?;
        if let Slots::Narrow(ids) = &self.chunks[i] {
            for (v, &id) in values.iter_mut().zip(ids.iter()) {
                if id != 0 {
                    *v = self.palette.value(id);
                }
            }
        }
        self.chunks[i] = Slots::Wide(values);
        Ok(())
    }

    #[cold]
    fn new_chunk(&mut self, key: u64) -> Result<u32, NoMemory> {
        let i = u32::try_from(self.chunks.len()).map_err(|_| NoMemory)?;
        let ids = zeroed::<u16>(SLOTS_PER_CHUNK)?;
        self.chunks.try_reserve(1).map_err(|_| NoMemory)?;
        self.chunks.push(Slots::Narrow(ids));
        self.index.insert(key, i);
        Ok(i)
    }
}

#[inline]
fn nonzero(v: Packed) -> Option<Packed> {
    (v != 0).then_some(v)
}

#[cfg(test)]
mod tests {
    use super::super::slot_palette::pack;
    use super::*;

    #[test]
    fn stores_replaces_and_removes_by_address() {
        let mut t = SmallBlocks::default();
        let (a, b, c) = (pack(32, 1, 0), pack(0, 2, 5), pack(512, 3, 0));
        assert_eq!(t.insert(0x10_0000, a), Ok(None));
        assert_eq!(t.insert(0x10_0010, b), Ok(None));
        assert_eq!(t.insert(0x90_0000, c), Ok(None));
        assert_eq!(t.insert(0x10_0000, c), Ok(Some(a)));
        assert_eq!(t.remove(0x10_0000), Some(c));
        assert_eq!(t.remove(0x10_0000), None);
        assert_eq!(t.remove(0x20_0000), None);
        let mut all: Vec<_> = t.values().collect();
        all.sort_unstable();
        assert_eq!(all, vec![b, c]);
    }

    #[test]
    fn a_chunk_turns_wide_when_the_palette_is_full() {
        let mut t = SmallBlocks::default();
        // 65,535 distinct values fill the palette; chunk 0x10 stays narrow throughout.
        for n in 0..65_535u64 {
            let addr = 0x10_0000 + ((n % 4096) << 4);
            t.insert(addr, pack(16, n as u32, 0)).unwrap();
        }
        assert!(matches!(t.chunks[0], Slots::Narrow(_)));
        let kept = t.remove(0x10_0000).unwrap();
        assert_eq!(t.insert(0x10_0000, kept), Ok(None));
        // A new value in an existing chunk widens it and keeps what it held.
        let fresh = pack(48, 1 << 30, 9);
        assert_eq!(t.insert(0x10_0020, fresh), Ok(Some(pack(16, 61_442, 0))));
        assert!(matches!(t.chunks[0], Slots::Wide(_)));
        assert_eq!(t.remove(0x10_0000), Some(kept));
        assert_eq!(t.remove(0x10_0020), Some(fresh));
        assert_eq!(t.insert(0x10_0020, fresh), Ok(None));
        // A new chunk starts narrow and widens on its first unnamed value.
        assert_eq!(t.insert(0x50_0000, pack(64, 1 << 31, 1)), Ok(None));
        assert!(matches!(t.chunks[1], Slots::Wide(_)));
        assert_eq!(t.values().count(), 4096);
    }
}
