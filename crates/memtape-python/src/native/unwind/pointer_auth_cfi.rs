//! `.eh_frame` as framehop can read it where return addresses are signed.
//!
//! Code built with pointer authentication (aarch64 with `-mbranch-protection`, the default
//! of Debian's and most distributions' arm64 builds) says in its CFI where the return
//! address starts being signed: `DW_CFA_AARCH64_negate_ra_state` (one opcode byte, no
//! operands), in nearly every function that saves the link register. framehop parses
//! `.eh_frame` with gimli without telling it the section is AArch64's, and gimli only
//! knows that opcode for that vendor: every such entry fails to parse, and framehop falls
//! back to the frame-pointer chain for the frame, which loses any caller whose return
//! address sits in a frame that keeps no frame record (libffi's closure entry, for one).
//!
//! The opcode changes no rule of the CFA or of a register: it only tells an unwinder to
//! strip (or authenticate) the signed address, which memtape does for every return
//! address with its pointer-authentication mask (`crate::arch::unwind_registers`). So the
//! unwinder reads a copy of such a `.eh_frame` in which each of these opcodes is a
//! `DW_CFA_nop` (the same length: every offset, and `.eh_frame_hdr`'s table, stay right).
//! Only opcodes at instruction boundaries are replaced (an operand byte may equal the
//! opcode); an entry that holds anything this walker does not know is left as it is from
//! there on. A `.eh_frame` without the opcodes is read in place; on x86-64, where code
//! signs no return address, none is scanned (`crate::arch::SIGNED_RETURN_ADDRESSES`).

use std::collections::HashMap;
use std::sync::Mutex;

/// `DW_CFA_AARCH64_negate_ra_state`.
const NEGATE_RA_STATE: u8 = 0x2d;
/// `DW_CFA_AARCH64_negate_ra_state_with_pc` (`-mbranch-protection=pac-ret+pc`): the same,
/// for return addresses signed with their call site too.
const NEGATE_RA_STATE_WITH_PC: u8 = 0x2c;
const NOP: u8 = 0x00;

/// Copies made so far, by where the `.eh_frame` is mapped and its length: each object's
/// is scanned and copied once, however often the unwinder is rebuilt (after every
/// `dlopen`). The copies live as long as the process, like the snapshots that use them.
static COPIES: Mutex<Option<Copies>> = Mutex::new(None);

/// What the unwinder reads, by the mapped section's address and length.
type Copies = HashMap<(usize, usize), &'static [u8]>;

/// `eh_frame` itself when no entry holds a pointer-authentication opcode, else a copy
/// (made once per mapped section) with each of them replaced by `DW_CFA_nop`.
pub(super) fn readable_eh_frame(eh_frame: &'static [u8]) -> &'static [u8] {
    let key = (eh_frame.as_ptr() as usize, eh_frame.len());
    let mut copies = COPIES.lock().unwrap_or_else(|e| e.into_inner());
    let copies = copies.get_or_insert_with(HashMap::new);
    if let Some(known) = copies.get(&key) {
        return known;
    }
    let found = ra_state_opcodes(eh_frame);
    let readable: &'static [u8] = if found.is_empty() {
        eh_frame
    } else {
        let mut copy = eh_frame.to_vec();
        for at in found {
            copy[at] = NOP;
        }
        Box::leak(copy.into_boxed_slice())
    };
    copies.insert(key, readable);
    readable
}

/// The offsets in `eh_frame` of every pointer-authentication opcode that begins a call
/// frame instruction, in a CIE's initial instructions or an FDE's.
pub(super) fn ra_state_opcodes(eh_frame: &[u8]) -> Vec<usize> {
    let mut found = Vec::new();
    // The FDE pointer encoding of each CIE seen so far, by offset.
    let mut encodings: HashMap<usize, Cie> = HashMap::new();
    let mut at = 0;
    while let Some(entry) = Entry::at(eh_frame, at) {
        at = entry.end;
        if entry.cie_pointer == 0 {
            if let Some(cie) = Cie::parse(eh_frame, entry.body, entry.end) {
                instructions(
                    eh_frame,
                    cie.instructions,
                    entry.end,
                    cie.encoding,
                    &mut found,
                );
                encodings.insert(entry.start, cie);
            }
            continue;
        }
        // An FDE's CIE pointer counts back from the pointer's own offset.
        let Some(cie) = (entry.body - 4)
            .checked_sub(entry.cie_pointer as usize)
            .and_then(|cie| encodings.get(&cie))
        else {
            continue;
        };
        if let Some(start) = fde_instructions(eh_frame, entry.body, entry.end, cie) {
            instructions(eh_frame, start, entry.end, cie.encoding, &mut found);
        }
    }
    found
}

/// One CIE or FDE: where it starts, where its body (past the CIE id or pointer) starts,
/// where it ends, and the CIE id or pointer (0 for a CIE).
struct Entry {
    start: usize,
    body: usize,
    end: usize,
    cie_pointer: u32,
}

impl Entry {
    /// The entry at `at`, `None` at the terminator or the end of the data.
    fn at(data: &[u8], at: usize) -> Option<Entry> {
        let length = u32_at(data, at)?;
        if length == 0 || length == u32::MAX {
            // The terminator; or a 64-bit length, which `.eh_frame` never uses.
            return None;
        }
        let end = (at + 4).checked_add(length as usize)?;
        if end > data.len() {
            return None;
        }
        Some(Entry {
            start: at,
            body: at + 8,
            end,
            cie_pointer: u32_at(data, at + 4)?,
        })
    }
}

/// What an FDE needs from its CIE.
struct Cie {
    /// Where the CIE's initial instructions start.
    instructions: usize,
    /// How the FDE's addresses (and `DW_CFA_set_loc`'s) are encoded
    /// (`DW_EH_PE_absptr` unless the augmentation says otherwise).
    encoding: u8,
    /// Whether FDEs carry augmentation data (a `z` augmentation).
    augmented: bool,
}

impl Cie {
    fn parse(data: &[u8], body: usize, end: usize) -> Option<Cie> {
        let mut r = Reader {
            data,
            at: body,
            end,
        };
        let version = r.u8()?;
        if !matches!(version, 1 | 3 | 4) {
            return None;
        }
        let augmentation = r.c_str()?;
        if augmentation.starts_with(b"eh") {
            r.skip(8)?; // GCC's old "eh" data: a pointer
        }
        if version == 4 {
            r.skip(2)?; // address size, segment selector size
        }
        r.uleb()?; // code alignment
        r.sleb()?; // data alignment
        if version == 1 {
            r.u8()?;
        } else {
            r.uleb()?;
        }
        let mut cie = Cie {
            instructions: 0,
            encoding: 0,
            augmented: augmentation.first() == Some(&b'z'),
        };
        if cie.augmented {
            let length = usize::try_from(r.uleb()?).ok()?;
            let data_end = r.at.checked_add(length)?;
            for &letter in &augmentation[1..] {
                match letter {
                    b'R' => cie.encoding = r.u8()?,
                    b'L' => {
                        r.u8()?;
                    }
                    b'P' => {
                        let encoding = r.u8()?;
                        r.pointer(encoding)?;
                    }
                    b'S' | b'B' | b'G' => {}
                    _ => break, // not known: the length says where the data ends
                }
            }
            r.at = data_end;
        } else if !augmentation.is_empty() {
            return None;
        }
        (r.at <= end).then_some(Cie {
            instructions: r.at,
            ..cie
        })
    }
}

/// Where an FDE's instructions start, past its address range and augmentation data.
fn fde_instructions(data: &[u8], body: usize, end: usize, cie: &Cie) -> Option<usize> {
    let mut r = Reader {
        data,
        at: body,
        end,
    };
    r.pointer(cie.encoding)?; // initial location
    r.pointer(cie.encoding & 0x0f)?; // address range: the same size, never relative
    if cie.augmented {
        let length = usize::try_from(r.uleb()?).ok()?;
        r.skip(length)?;
    }
    Some(r.at)
}

/// Walks the call frame instructions in `[at, end)`, adding the offset of each
/// pointer-authentication opcode to `found`; stops at the first opcode it does not know.
fn instructions(data: &[u8], at: usize, end: usize, encoding: u8, found: &mut Vec<usize>) {
    let mut r = Reader { data, at, end };
    while r.at < end {
        let here = r.at;
        let Some(op) = r.u8() else { return };
        let operands = match (op >> 6, op & 0x3f) {
            (1, _) | (3, _) => Some(()), // advance_loc, restore: the operand is in the opcode
            (2, _) => r.uleb().map(drop), // offset
            (_, 0x00 | 0x0a | 0x0b) => Some(()), // nop, remember_state, restore_state
            (_, 0x01) => r.pointer(encoding).map(drop), // set_loc
            (_, 0x02) => r.skip(1),
            (_, 0x03) => r.skip(2),
            (_, 0x04) => r.skip(4),
            // offset_extended, register, def_cfa, val_offset, GNU_negative_offset_extended
            (_, 0x05 | 0x09 | 0x0c | 0x14 | 0x2f) => r.uleb().and_then(|_| r.uleb()).map(drop),
            // restore_extended, undefined, same_value, def_cfa_register, def_cfa_offset,
            // GNU_args_size
            (_, 0x06 | 0x07 | 0x08 | 0x0d | 0x0e | 0x2e) => r.uleb().map(drop),
            (_, 0x0f) => r.block(), // def_cfa_expression
            (_, 0x10 | 0x16) => r.uleb().and_then(|_| r.block()), // expression, val_expression
            // offset_extended_sf, def_cfa_sf, val_offset_sf
            (_, 0x11 | 0x12 | 0x15) => r.uleb().and_then(|_| r.sleb()).map(drop),
            (_, 0x13) => r.sleb().map(drop), // def_cfa_offset_sf
            (_, NEGATE_RA_STATE | NEGATE_RA_STATE_WITH_PC) => {
                found.push(here);
                Some(())
            }
            _ => None,
        };
        if operands.is_none() {
            return;
        }
    }
}

/// Reads LEB128 numbers, encoded pointers and bytes from `data[at..end]`.
struct Reader<'a> {
    data: &'a [u8],
    at: usize,
    end: usize,
}

impl<'a> Reader<'a> {
    fn u8(&mut self) -> Option<u8> {
        let byte = *self.data.get(self.at).filter(|_| self.at < self.end)?;
        self.at += 1;
        Some(byte)
    }

    fn skip(&mut self, n: usize) -> Option<()> {
        let to = self.at.checked_add(n).filter(|&to| to <= self.end)?;
        self.at = to;
        Some(())
    }

    fn uleb(&mut self) -> Option<u64> {
        let (mut value, mut shift) = (0u64, 0u32);
        loop {
            let byte = self.u8()?;
            if shift < 64 {
                value |= u64::from(byte & 0x7f) << shift;
            }
            shift += 7;
            if byte & 0x80 == 0 {
                return Some(value);
            }
        }
    }

    fn sleb(&mut self) -> Option<()> {
        // Only its length matters here.
        while self.u8()? & 0x80 != 0 {}
        Some(())
    }

    fn block(&mut self) -> Option<()> {
        let length = usize::try_from(self.uleb()?).ok()?;
        self.skip(length)
    }

    fn c_str(&mut self) -> Option<&'a [u8]> {
        let start = self.at;
        while self.u8()? != 0 {}
        Some(&self.data[start..self.at - 1])
    }

    /// Skips a pointer of `encoding`'s format (its low four bits; `DW_EH_PE_omit`: none).
    fn pointer(&mut self, encoding: u8) -> Option<()> {
        if encoding == 0xff {
            return Some(());
        }
        match encoding & 0x0f {
            0x00 | 0x04 | 0x0c => self.skip(8), // absptr (64-bit), udata8, sdata8
            0x01 => self.uleb().map(drop),
            0x09 => self.sleb(),
            0x02 | 0x0a => self.skip(2),
            0x03 | 0x0b => self.skip(4),
            _ => None,
        }
    }
}

fn u32_at(data: &[u8], at: usize) -> Option<u32> {
    let bytes = data.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes(bytes.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    //! `.eh_frame` written by hand as GCC writes it for a signed-return-address function
    //! on aarch64 (`paciasp; stp x29, x30, [sp, #-32]!; ...` with no frame record), and
    //! framehop's aarch64 unwinder (which runs on any host) walking out of it.

    use framehop::aarch64::{CacheAarch64, PtrAuthMask, UnwindRegsAarch64, UnwinderAarch64};
    use framehop::{ExplicitModuleSectionInfo, FrameAddress, Module, Unwinder};

    use super::*;

    const TEXT: u64 = 0x1000;
    const EH_FRAME: u64 = 0x3000;

    /// A CIE (`zR`, pc-relative 4-byte addresses, code alignment 4, data alignment -8,
    /// CFA = sp) and one FDE for `[TEXT, TEXT + 0x40)` with `instructions`, then the
    /// terminator. Returns the section and where the FDE's instructions start.
    fn eh_frame_with(instructions: &[u8]) -> (Vec<u8>, usize) {
        let mut out = Vec::new();
        let cie_body = [
            0, 0, 0, 0, // CIE id
            1, b'z', b'R', 0, // version, augmentation
            4, 0x78, 30, // code alignment 4, data alignment -8, return address x30
            1, 0x1b, // augmentation data: pc-relative sdata4
            0x0c, 31, 0, // def_cfa sp + 0
        ];
        out.extend_from_slice(&(cie_body.len() as u32).to_le_bytes());
        out.extend_from_slice(&cie_body);
        let fde = out.len();
        let mut body = Vec::new();
        body.extend_from_slice(&((fde + 4) as u32).to_le_bytes()); // back to the CIE
        let pc_field = EH_FRAME + fde as u64 + 8;
        body.extend_from_slice(&((TEXT.wrapping_sub(pc_field)) as u32).to_le_bytes());
        body.extend_from_slice(&0x40u32.to_le_bytes());
        body.push(0); // no augmentation data
        let start = fde + 4 + body.len();
        body.extend_from_slice(instructions);
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend_from_slice(&body);
        out.extend_from_slice(&[0; 4]);
        (out, start)
    }

    /// `paciasp` at TEXT (the return address is signed from TEXT + 4), then
    /// `stp x29, x30, [sp, #-32]!` (CFA = sp + 32, x29 and x30 at CFA - 32 and - 24).
    const SIGNED_FRAME: [u8; 9] = [
        0x41, // advance_loc 4
        NEGATE_RA_STATE,
        0x41, // advance_loc 4
        0x0e,
        32, // def_cfa_offset 32
        0x9d,
        4, // offset x29, CFA - 32
        0x9e,
        3, // offset x30, CFA - 24
    ];

    #[test]
    fn finds_the_opcode_where_an_instruction_starts_only() {
        // The opcode's byte also as an operand: advance_loc1 by 0x2d, def_cfa_offset 0x2d,
        // a set_loc address holding it, and an expression block made of it.
        let instructions = [
            0x02,
            0x2d, // advance_loc1 0x2d
            NEGATE_RA_STATE,
            0x0e,
            0x2d, // def_cfa_offset 0x2d
            0x01,
            0x2d,
            0x2d,
            0x2d,
            0x2d, // set_loc (sdata4)
            0x0f,
            2,
            0x2d,
            0x2d, // def_cfa_expression of 2 bytes
            NEGATE_RA_STATE_WITH_PC,
            0x10,
            30,
            1,
            0x2d, // expression x30, 1 byte
            0x11,
            0x9d,
            0x2d,
            0x7f, // offset_extended_sf: uleb 0x169d, sleb -1
            NEGATE_RA_STATE,
        ];
        let (section, start) = eh_frame_with(&instructions);
        assert_eq!(
            ra_state_opcodes(&section),
            [start + 2, start + 14, start + 23]
        );
    }

    #[test]
    fn an_unknown_opcode_ends_the_walk_of_its_entry_only() {
        // 0x2b is no opcode this walker knows: what follows it may be an operand.
        let (section, start) = eh_frame_with(&[NEGATE_RA_STATE, 0x2b, NEGATE_RA_STATE]);
        assert_eq!(ra_state_opcodes(&section), [start]);
        // A section without the opcodes is read in place, not copied.
        let (plain, _) = eh_frame_with(&SIGNED_FRAME[2..]);
        let plain: &'static [u8] = Box::leak(plain.into_boxed_slice());
        assert!(ra_state_opcodes(plain).is_empty());
        assert!(std::ptr::eq(readable_eh_frame(plain), plain));
    }

    /// Unwinds one frame from `TEXT + 0x10` (not the innermost frame) of a module whose
    /// `.eh_frame` is `section`, over a stack where the signed frame saved a return
    /// address at sp + 8 and x29 still points at an older frame record.
    fn caller_of_signed_frame(section: &'static [u8]) -> Option<u64> {
        let info = ExplicitModuleSectionInfo {
            base_svma: 0,
            text_svma: Some(TEXT..TEXT + 0x1000),
            eh_frame_svma: Some(EH_FRAME..EH_FRAME + section.len() as u64),
            eh_frame: Some(section),
            ..Default::default()
        };
        let mut unwinder = UnwinderAarch64::new();
        unwinder.add_module(Module::new("signed".into(), TEXT..TEXT + 0x3000, 0, info));
        let sp = 0x7000_0000u64;
        let older_record = sp + 0x100;
        // The return address as `paciasp` left it: a pointer-authentication code above
        // the 48 address bits.
        let signed_return = 0x002a_0000_0000_2468u64;
        let stack = |addr: u64| -> Result<u64, ()> {
            match addr - sp {
                0 => Ok(older_record),
                8 => Ok(signed_return),
                0x100 => Ok(sp + 0x200),
                0x108 => Ok(0x9999), // the older frame's return address
                _ => Err(()),
            }
        };
        let mut regs = UnwindRegsAarch64::new_with_ptr_auth_mask(
            PtrAuthMask(u64::MAX >> 16),
            0,
            sp,
            older_record,
        );
        let mut cache = CacheAarch64::new();
        let frame = FrameAddress::from_return_address(TEXT + 0x10)?;
        unwinder
            .unwind_frame(frame, &mut regs, &mut cache, &mut { stack })
            .ok()
            .flatten()
    }

    #[test]
    fn a_signed_frame_unwinds_by_its_cfi_once_the_opcode_is_a_nop() {
        let (section, _) = eh_frame_with(&SIGNED_FRAME);
        let section: &'static [u8] = Box::leak(section.into_boxed_slice());
        // Read as it is, the entry does not parse (gimli knows the opcode for AArch64
        // only, and framehop does not say so): framehop follows x29 instead, past the
        // caller to the older frame.
        assert_eq!(caller_of_signed_frame(section), Some(0x9999));
        let readable = readable_eh_frame(section);
        assert!(!std::ptr::eq(readable, section));
        assert_eq!(readable.len(), section.len());
        // The return address saved at CFA - 24, its authentication code stripped.
        assert_eq!(caller_of_signed_frame(readable), Some(0x2468));
        // The copy is made once.
        assert!(std::ptr::eq(readable_eh_frame(section), readable));
    }
}
