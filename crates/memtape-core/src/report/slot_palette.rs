//! The distinct `(size, stack slot, time bucket)` values of the replay's small blocks,
//! each named by a 16-bit id.
//!
//! A run allocates its small blocks from few sites in few sizes (alloc_heavy's 36 M
//! events: 330 distinct values), so a 2-byte id per block stands for the 8 bytes the
//! value takes ([`super::small_blocks`]). Ids are never reused: once all 65,535 are taken,
//! [`SlotPalette::id`] says so and the caller stores the value itself.

use rustc_hash::FxHashMap;

/// A packed block value: `(size + 1) << 48 | tag << 32 | stack slot`; never 0.
pub(crate) type Packed = u64;

/// Packs a small block's size (at most 512), stack slot and tag.
#[inline]
pub(crate) fn pack(size: u64, stack: u32, tag: u16) -> Packed {
    ((size + 1) << 48) | (u64::from(tag) << 32) | u64::from(stack)
}

/// `(size, stack slot, tag)` of a packed value.
#[inline]
pub(crate) fn unpack(p: Packed) -> (u64, u32, u16) {
    ((p >> 48) - 1, p as u32, (p >> 32) as u16)
}

/// Entries of the direct-mapped cache in front of the hash map.
const CACHE_BITS: u32 = 8;

#[derive(Debug)]
pub(crate) struct SlotPalette {
    /// The value of id `i + 1`.
    values: Vec<Packed>,
    ids: FxHashMap<Packed, u16>,
    /// Recently named values, direct-mapped by a hash of the value: an allocation site
    /// mostly repeats its sizes.
    cache: Box<[(Packed, u16); 1 << CACHE_BITS]>,
}

impl Default for SlotPalette {
    fn default() -> Self {
        Self {
            values: Vec::new(),
            ids: FxHashMap::default(),
            cache: Box::new([(0, 0); 1 << CACHE_BITS]),
        }
    }
}

impl SlotPalette {
    /// The id of `value` (from 1), made on first use; `None` when every id is taken.
    #[inline]
    pub(crate) fn id(&mut self, value: Packed) -> Option<u16> {
        let h = (value.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - CACHE_BITS)) as usize;
        let entry = &mut self.cache[h];
        if entry.0 == value {
            return Some(entry.1);
        }
        let id = match self.ids.get(&value) {
            Some(&id) => id,
            None => self.add(value)?,
        };
        self.cache[h] = (value, id);
        Some(id)
    }

    #[cold]
    fn add(&mut self, value: Packed) -> Option<u16> {
        let id = u16::try_from(self.values.len() + 1).ok()?;
        self.values.push(value);
        self.ids.insert(value, id);
        Some(id)
    }

    /// The value of an id [`id`](Self::id) handed out.
    #[inline]
    pub(crate) fn value(&self, id: u16) -> Packed {
        self.values[usize::from(id) - 1]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_each_value_once_until_the_ids_run_out() {
        let mut p = SlotPalette::default();
        let a = pack(512, 7, 3);
        assert_eq!(unpack(a), (512, 7, 3));
        assert_eq!(unpack(pack(0, u32::MAX, u16::MAX)), (0, u32::MAX, u16::MAX));
        assert_eq!(p.id(a), Some(1));
        assert_eq!(p.id(pack(16, 7, 3)), Some(2));
        assert_eq!(p.id(a), Some(1));
        assert_eq!(p.value(2), pack(16, 7, 3));
        for stack in 0..65_533 {
            assert!(p.id(pack(8, 100 + stack, 0)).is_some());
        }
        assert_eq!(p.id(pack(8, 1, 0)), None);
        assert_eq!(p.id(a), Some(1));
        assert_eq!(p.value(65_535), pack(8, 100 + 65_532, 0));
    }
}
