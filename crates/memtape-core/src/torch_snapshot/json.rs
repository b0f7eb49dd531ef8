//! The JSON encoding: compact, UTF-8, tuples as arrays.

use super::encoding::Encoding;

/// Compact JSON.
pub(super) struct Json;

impl Encoding for Json {
    fn header(_out: &mut Vec<u8>) {}

    fn footer(out: &mut Vec<u8>) {
        out.push(b'\n');
    }

    fn dict_begin(out: &mut Vec<u8>) {
        out.push(b'{');
    }

    fn dict_key(out: &mut Vec<u8>, index: usize, key: &str) {
        if index > 0 {
            out.push(b',');
        }
        Self::str(out, key);
        out.push(b':');
    }

    fn dict_end(out: &mut Vec<u8>, _len: usize) {
        out.push(b'}');
    }

    fn list_begin(out: &mut Vec<u8>) {
        out.push(b'[');
    }

    fn list_item(out: &mut Vec<u8>, index: usize) {
        if index > 0 {
            out.push(b',');
        }
    }

    fn list_end(out: &mut Vec<u8>, _len: usize) {
        out.push(b']');
    }

    fn int(out: &mut Vec<u8>, value: i64) {
        let mut digits = [0u8; 20];
        let mut at = digits.len();
        let mut rest = value.unsigned_abs();
        loop {
            at -= 1;
            digits[at] = b'0' + (rest % 10) as u8;
            rest /= 10;
            if rest == 0 {
                break;
            }
        }
        if value < 0 {
            out.push(b'-');
        }
        out.extend_from_slice(&digits[at..]);
    }

    fn str(out: &mut Vec<u8>, value: &str) {
        push_json_string(out, value);
    }

    fn bool(out: &mut Vec<u8>, value: bool) {
        out.extend_from_slice(if value { b"true" } else { b"false" });
    }

    fn int_pair(out: &mut Vec<u8>, first: i64, second: i64) {
        out.push(b'[');
        Self::int(out, first);
        out.push(b',');
        Self::int(out, second);
        out.push(b']');
    }
}

/// Appends `value` as a JSON string: `"` and `\` escaped, control characters as `\n`,
/// `\t`, ... or `\u00XX`, everything else (non-ASCII included) as its UTF-8 bytes.
pub fn push_json_string(out: &mut Vec<u8>, value: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let bytes = value.as_bytes();
    let mut clean_from = 0;
    for (at, &byte) in bytes.iter().enumerate() {
        let escape: &[u8] = match byte {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0x00..=0x1f => &[],
            _ => continue,
        };
        out.extend_from_slice(&bytes[clean_from..at]);
        if escape.is_empty() {
            out.extend_from_slice(b"\\u00");
            out.extend_from_slice(&[HEX[usize::from(byte >> 4)], HEX[usize::from(byte & 0xf)]]);
        } else {
            out.extend_from_slice(escape);
        }
        clean_from = at + 1;
    }
    out.extend_from_slice(&bytes[clean_from..]);
    out.push(b'"');
}
