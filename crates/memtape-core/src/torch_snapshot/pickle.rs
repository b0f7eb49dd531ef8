//! The pickle encoding: protocol 4, no FRAME, the memo only for shared values.

use super::encoding::{Encoding, INT_BYTES};

/// Items per `MARK ... APPENDS` (and pairs per `MARK ... SETITEMS`), as Python's pickler
/// batches them; the viewer's `arr.push(...items)` overflows the stack on huge batches.
pub(super) const BATCH: usize = 1000;

/// Pickle opcodes used (all in the viewer's VM).
pub(super) mod op {
    pub const PROTO: u8 = 0x80;
    pub const STOP: u8 = b'.';
    pub const MARK: u8 = b'(';
    pub const EMPTY_DICT: u8 = b'}';
    pub const SETITEMS: u8 = b'u';
    pub const EMPTY_LIST: u8 = b']';
    pub const APPENDS: u8 = b'e';
    pub const SHORT_BINUNICODE: u8 = 0x8c;
    pub const BINUNICODE: u8 = b'X';
    pub const BININT1: u8 = b'K';
    pub const BININT2: u8 = b'M';
    pub const BININT: u8 = b'J';
    pub const LONG1: u8 = 0x8a;
    pub const TUPLE2: u8 = 0x86;
    pub const NEWTRUE: u8 = 0x88;
    pub const NEWFALSE: u8 = 0x89;
    pub const MEMOIZE: u8 = 0x94;
    pub const BINGET: u8 = b'h';
    pub const LONG_BINGET: u8 = b'j';
}

/// Pickle protocol 4, no FRAME; the memo only for shared frames lists.
pub(super) struct Pickle;

impl Encoding for Pickle {
    fn header(out: &mut Vec<u8>) {
        out.extend_from_slice(&[op::PROTO, 4]);
    }

    fn footer(out: &mut Vec<u8>) {
        out.push(op::STOP);
    }

    fn dict_begin(out: &mut Vec<u8>) {
        out.push(op::EMPTY_DICT);
    }

    fn dict_key(out: &mut Vec<u8>, index: usize, key: &str) {
        batch_boundary(out, index, op::SETITEMS);
        Self::str(out, key);
    }

    fn dict_end(out: &mut Vec<u8>, len: usize) {
        if len > 0 {
            out.push(op::SETITEMS);
        }
    }

    fn list_begin(out: &mut Vec<u8>) {
        out.push(op::EMPTY_LIST);
    }

    fn list_item(out: &mut Vec<u8>, index: usize) {
        batch_boundary(out, index, op::APPENDS);
    }

    fn list_end(out: &mut Vec<u8>, len: usize) {
        if len > 0 {
            out.push(op::APPENDS);
        }
    }

    fn int(out: &mut Vec<u8>, value: i64) {
        let mut bytes = [0; INT_BYTES];
        let len = Self::int_into(&mut bytes, value);
        out.extend_from_slice(&bytes[..len]);
    }

    fn int_into(out: &mut [u8; INT_BYTES], value: i64) -> usize {
        if let Ok(small) = u8::try_from(value) {
            out[0] = op::BININT1;
            out[1] = small;
            2
        } else if let Ok(medium) = u16::try_from(value) {
            out[0] = op::BININT2;
            out[1..3].copy_from_slice(&medium.to_le_bytes());
            3
        } else if let Ok(word) = i32::try_from(value) {
            out[0] = op::BININT;
            out[1..5].copy_from_slice(&word.to_le_bytes());
            5
        } else {
            // Two's complement, little-endian, in the fewest bytes that keep the sign: the
            // value's significant bits plus a sign bit (at most 8 bytes for an i64).
            let significant = 64 - if value < 0 { !value } else { value }.leading_zeros();
            let len = (significant as usize + 1).div_ceil(8);
            out[0] = op::LONG1;
            out[1] = len as u8;
            // Eight bytes at once (one store, no copy loop); the caller keeps `2 + len`.
            out[2..10].copy_from_slice(&value.to_le_bytes());
            2 + len
        }
    }

    fn str(out: &mut Vec<u8>, value: &str) {
        // BINUNICODE8 is not in the viewer's VM: cut a (pathological) ≥ 4 GiB string.
        let value = truncate_at_char_boundary(value, u32::MAX as usize);
        if let Ok(len) = u8::try_from(value.len()) {
            out.extend_from_slice(&[op::SHORT_BINUNICODE, len]);
        } else {
            out.push(op::BINUNICODE);
            out.extend_from_slice(&(value.len() as u32).to_le_bytes());
        }
        out.extend_from_slice(value.as_bytes());
    }

    fn bool(out: &mut Vec<u8>, value: bool) {
        out.push(if value { op::NEWTRUE } else { op::NEWFALSE });
    }

    fn int_pair(out: &mut Vec<u8>, first: i64, second: i64) {
        Self::int(out, first);
        Self::int(out, second);
        out.push(op::TUPLE2);
    }

    const HAS_MEMO: bool = true;

    fn memoize(out: &mut Vec<u8>) -> bool {
        out.push(op::MEMOIZE);
        true
    }

    fn dict_key_slot(out: &mut Vec<u8>, index: usize) {
        batch_boundary(out, index, op::SETITEMS);
    }

    fn memo_get(out: &mut Vec<u8>, index: u32) {
        if let Ok(short) = u8::try_from(index) {
            out.extend_from_slice(&[op::BINGET, short]);
        } else {
            out.push(op::LONG_BINGET);
            out.extend_from_slice(&index.to_le_bytes());
        }
    }
}

/// Opens a `MARK` at the start of every batch, closing the previous batch with `close`.
fn batch_boundary(out: &mut Vec<u8>, index: usize, close: u8) {
    if index % BATCH == 0 {
        if index > 0 {
            out.push(close);
        }
        out.push(op::MARK);
    }
}

pub(super) fn truncate_at_char_boundary(value: &str, max_len: usize) -> &str {
    if value.len() <= max_len {
        return value;
    }
    let mut end = max_len;
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    &value[..end]
}
