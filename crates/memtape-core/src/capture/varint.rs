//! LEB128 varints (`uv`), zigzag-encoded signed varints (`sv`), and the cursor that reads
//! them back from a raw block without ever reading past its end.

/// Why a field could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum VarintError {
    /// The block ends inside the field.
    Truncated,
    /// A varint longer than 10 bytes, or a 10th byte carrying bits past the 64th.
    Overlong,
}

/// Appends `value` as an unsigned LEB128 varint.
#[inline]
pub(crate) fn put_uv(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Appends `value` zigzag-encoded, then as LEB128 (what the encoder's event records do;
/// the tests' reference).
#[cfg(test)]
pub(crate) fn put_sv(out: &mut Vec<u8>, value: i64) {
    put_uv(out, zigzag(value));
}

/// Maps signed to unsigned so that small magnitudes stay small: 0, -1, 1, -2 -> 0, 1, 2, 3.
#[inline]
pub(crate) fn zigzag(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

/// The inverse of [`zigzag`].
#[inline]
pub(crate) fn unzigzag(value: u64) -> i64 {
    ((value >> 1) as i64) ^ -((value & 1) as i64)
}

/// Reads fields from a byte slice, front to back.
pub(crate) struct ByteCursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> ByteCursor<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, pos: 0 }
    }

    /// The offset of the next unread byte.
    #[inline]
    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    /// The bytes from offset `start` up to the next unread one.
    pub(crate) fn slice_from(&self, start: usize) -> &'a [u8] {
        &self.bytes[start.min(self.pos)..self.pos]
    }

    /// Whether every byte has been read.
    #[inline]
    pub(crate) fn at_end(&self) -> bool {
        self.pos >= self.bytes.len()
    }

    /// Reads one byte.
    #[inline]
    pub(crate) fn byte(&mut self) -> Result<u8, VarintError> {
        let byte = *self.bytes.get(self.pos).ok_or(VarintError::Truncated)?;
        self.pos += 1;
        Ok(byte)
    }

    /// Reads a `uv`.
    #[inline]
    pub(crate) fn uv(&mut self) -> Result<u64, VarintError> {
        let first = self.byte()?;
        if first < 0x80 {
            return Ok(u64::from(first));
        }
        let mut value = u64::from(first & 0x7f);
        let mut shift = 7u32;
        loop {
            let byte = self.byte()?;
            if shift == 63 && byte > 1 {
                // The 10th byte may only carry the 64th bit, and must end the varint.
                return Err(VarintError::Overlong);
            }
            value |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                return Ok(value);
            }
            shift += 7;
        }
    }

    /// Reads an `sv`.
    #[inline]
    pub(crate) fn sv(&mut self) -> Result<i64, VarintError> {
        self.uv().map(unzigzag)
    }

    /// Reads `len` bytes.
    #[inline]
    pub(crate) fn bytes(&mut self, len: u64) -> Result<&'a [u8], VarintError> {
        let remaining = self.bytes.len().saturating_sub(self.pos);
        let len = usize::try_from(len)
            .ok()
            .filter(|&len| len <= remaining)
            .ok_or(VarintError::Truncated)?;
        let start = self.pos;
        self.pos += len;
        self.bytes
            .get(start..self.pos)
            .ok_or(VarintError::Truncated)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(value: u64) -> Vec<u8> {
        let mut out = Vec::new();
        put_uv(&mut out, value);
        out
    }

    #[test]
    fn uv_round_trips_edge_values() {
        let values = [
            0,
            1,
            0x7f,
            0x80,
            0x3fff,
            0x4000,
            u64::from(u32::MAX),
            1 << 62,
            (1 << 63) - 1,
            1 << 63,
            u64::MAX - 1,
            u64::MAX,
        ];
        for value in values {
            let bytes = encoded(value);
            // The longest `uv`: 10 bytes hold 64 bits (9 * 7 + 1).
            assert!(bytes.len() <= 10);
            let mut cursor = ByteCursor::new(&bytes);
            assert_eq!(cursor.uv(), Ok(value), "{value:#x}");
            assert!(cursor.at_end());
        }
        assert_eq!(encoded(0), [0]);
        assert_eq!(encoded(0x80), [0x80, 0x01]);
        assert_eq!(encoded(u64::MAX).len(), 10);
    }

    #[test]
    fn sv_round_trips_edge_values() {
        for value in [0, 1, -1, 63, -64, 64, -65, i64::MAX, i64::MIN, i64::MIN + 1] {
            let mut out = Vec::new();
            put_sv(&mut out, value);
            assert_eq!(ByteCursor::new(&out).sv(), Ok(value), "{value}");
        }
        assert_eq!(zigzag(0), 0);
        assert_eq!(zigzag(-1), 1);
        assert_eq!(zigzag(1), 2);
        assert_eq!(zigzag(i64::MIN), u64::MAX);
    }

    #[test]
    fn uv_rejects_overlong_and_truncated() {
        // 10th byte with more than the 64th bit.
        let mut bytes = vec![0xff; 9];
        bytes.push(0x02);
        assert_eq!(ByteCursor::new(&bytes).uv(), Err(VarintError::Overlong));
        // 11 bytes.
        let mut bytes = vec![0x80; 10];
        bytes.push(0x00);
        assert_eq!(ByteCursor::new(&bytes).uv(), Err(VarintError::Overlong));
        // Ends inside the varint.
        assert_eq!(ByteCursor::new(&[0x80]).uv(), Err(VarintError::Truncated));
        assert_eq!(ByteCursor::new(&[]).uv(), Err(VarintError::Truncated));
    }

    #[test]
    fn bytes_never_reads_past_the_end() {
        let data = [1, 2, 3];
        let mut cursor = ByteCursor::new(&data);
        assert_eq!(cursor.bytes(2), Ok(&data[..2]));
        assert_eq!(cursor.bytes(2), Err(VarintError::Truncated));
        assert_eq!(cursor.bytes(u64::MAX), Err(VarintError::Truncated));
        assert_eq!(cursor.bytes(1), Ok(&data[2..]));
        assert!(cursor.at_end());
    }
}
