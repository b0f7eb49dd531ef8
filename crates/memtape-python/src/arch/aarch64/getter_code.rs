//! The shapes of CPython's current-thread-state getter that `cpython::thread_state`
//! knows on aarch64, decoded into where each loads from: the local-exec load of an
//! executable with libpython linked in (Debian's `python3.X`). Plain word reading, built
//! for every version (and, for its tests, on every host: `arch/mod.rs`).
//!
//! Not decoded yet, so the hooks call the getter there (one call per hooked allocation;
//! the answers are the same): the initial-exec load (`adrp`/`ldr` of the offset from the
//! GOT, then `mrs`/`ldr`), the TLS descriptor call of a shared libpython
//! (`adrp`/`ldr`/`add`/`blr`, general dynamic, whose descriptor replaces x86-64's
//! `__tls_get_addr` index), and before 3.12 `adrp`/`ldr` of `_PyRuntime`'s word.

use std::ops::Range;

/// Where static TLS lies from the thread pointer: aarch64 keeps it after the 16-byte
/// thread control block (TLS variant I).
#[cfg_attr(not(Py_3_12), allow(dead_code))]
pub(crate) const STATIC_TLS: Range<isize> = 16..(1 << 20);

/// The address of `_PyRuntime`'s current-thread-state word that the getter's `code`
/// (found at `at`) loads: not decoded on aarch64.
#[cfg_attr(Py_3_12, allow(dead_code))]
pub(crate) fn decode_runtime_word(
    _code: &[u8],
    _at: usize,
    _read_word: impl Fn(usize) -> Option<usize>,
) -> Option<usize> {
    None
}

/// The address of the TLS index the getter's `code` hands to `__tls_get_addr`: aarch64
/// uses TLS descriptors instead, not decoded.
#[cfg_attr(not(Py_3_12), allow(dead_code))]
pub(crate) fn decode_tls_index(_code: &[u8], _at: usize) -> Option<usize> {
    None
}

/// The offset from the thread pointer of the word that a getter of this shape returns,
/// the thread-local being in static TLS (local exec):
///
/// ```text
/// [bti c] mrs xT, tpidr_el0 ; (add xT, xT, #imm [, lsl #12] | nop)... ; ldr x0, [xT, #off] ; ret
/// ```
///
/// (the linker relaxes an unneeded high part to a `nop`). `code` is the getter's first
/// bytes; `at` and `read_word` are for the shapes that load through the GOT (none yet).
#[cfg_attr(not(Py_3_12), allow(dead_code))]
pub(crate) fn decode_tp_offset(
    code: &[u8],
    _at: usize,
    _read_word: impl Fn(usize) -> Option<usize>,
) -> Option<isize> {
    const BTI_C: u32 = 0xd503_245f;
    const NOP: u32 = 0xd503_201f;
    const RET: u32 = 0xd65f_03c0;
    /// `mrs xT, tpidr_el0`, T in the low 5 bits.
    const MRS_TPIDR_EL0: u32 = 0xd53b_d040;
    /// `add xD, xN, #imm12 [, lsl #12]` (64-bit, immediate): the fixed bits.
    const ADD_IMM: u32 = 0x9100_0000;
    /// `ldr xT, [xN, #imm12 * 8]` (64-bit, unsigned offset): the fixed bits.
    const LDR_IMM: u32 = 0xf940_0000;
    let mut words = code
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        .peekable();
    words.next_if_eq(&BTI_C);
    let mrs = words.next()?;
    if mrs & !0x1f != MRS_TPIDR_EL0 {
        return None;
    }
    let tp = mrs & 0x1f;
    let mut offset: isize = 0;
    while let Some(word) = words.next() {
        let (rd, rn) = (word & 0x1f, (word >> 5) & 0x1f);
        let imm12 = ((word >> 10) & 0xfff) as isize;
        if word == NOP {
            continue;
        }
        if word & 0xff80_0000 == ADD_IMM && rd == tp && rn == tp {
            let shift = if word & (1 << 22) != 0 { 12 } else { 0 };
            offset += imm12 << shift;
            continue;
        }
        if word & 0xffc0_0000 == LDR_IMM && rd == 0 && rn == tp {
            return (words.next() == Some(RET)).then_some(offset + imm12 * 8);
        }
        return None;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    const AT: usize = 0x1000;

    fn code(words: &[u32]) -> Vec<u8> {
        words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    #[test]
    fn the_local_exec_load() {
        // Debian's python3.14 (arm64): bti c ; mrs x0, tpidr_el0 ; nop ;
        // add x0, x0, #0x18 ; ldr x0, [x0] ; ret
        let getter = code(&[
            0xd503_245f,
            0xd53b_d040,
            0xd503_201f,
            0x9100_6000,
            0xf940_0000,
            0xd65f_03c0,
        ]);
        assert_eq!(decode_tp_offset(&getter, AT, |_| None), Some(0x18));
    }

    #[test]
    fn a_high_part_and_a_load_offset_add_up() {
        // mrs x1, tpidr_el0 ; add x1, x1, #0x1, lsl #12 ; add x1, x1, #0x20 ;
        // ldr x0, [x1, #0x10] ; ret
        let getter = code(&[
            0xd53b_d041,
            0x9140_0421,
            0x9100_8021,
            0xf940_0820,
            0xd65f_03c0,
        ]);
        assert_eq!(
            decode_tp_offset(&getter, AT, |_| None),
            Some(0x1000 + 0x20 + 0x10)
        );
    }

    #[test]
    fn other_code_is_not_a_thread_pointer_load() {
        // the load without its ret
        let getter = code(&[0xd53b_d040, 0x9100_6000, 0xf940_0000, 0xd503_201f]);
        assert_eq!(decode_tp_offset(&getter, AT, |_| None), None);
        // an add into another register than the thread pointer's
        let getter = code(&[0xd53b_d040, 0x9100_6001, 0xf940_0000, 0xd65f_03c0]);
        assert_eq!(decode_tp_offset(&getter, AT, |_| None), None);
        // a function that starts with a frame (paciasp ; stp x29, x30, [sp, #-64]!)
        let getter = code(&[0xd503_233f, 0xa9bc_7bfd, 0xd65f_03c0]);
        assert_eq!(decode_tp_offset(&getter, AT, |_| None), None);
        // cut short
        assert_eq!(decode_tp_offset(&code(&[0xd53b_d040]), AT, |_| None), None);
        assert_eq!(decode_tp_offset(&[0x40, 0xd0], AT, |_| None), None);
    }
}
