//! Integer key mixing for the open-addressing tables (Fx-style multiply and fold).

const K1: u64 = 0x517c_c1b7_2722_0a95;
const K2: u64 = 0x9e37_79b9_7f4a_7c15;

/// Mixes two 64-bit words into a well-spread hash; the high bits are the best ones.
#[inline]
pub(crate) fn mix2(a: u64, b: u64) -> u64 {
    let h = (a.wrapping_mul(K1) ^ b).wrapping_mul(K2);
    h ^ (h >> 29)
}

/// Maps a hash onto `0..=mask` using its high bits (`mask + 1` is a power of two).
#[inline]
pub(crate) fn slot_of(hash: u64, mask: usize) -> usize {
    (hash.rotate_left(20) as usize) & mask
}
