//! [`BlockBuffer`]: the bytes of the raw block being encoded, and [`EventRecord`], the
//! writer of one Alloc or Free record into it.
//!
//! The encoder's hot path. Pushing a record byte by byte onto a `Vec` re-checks the
//! capacity and reloads and stores the length at every byte (a `u8` store may alias the
//! `Vec`'s own fields). Here the `Vec` is kept initialised (zeros, or bytes of records
//! since dropped) a little beyond the block's end; room for the longest event record is
//! made once per record, and the record's bytes are stored at offsets from its start,
//! with its length in a register, then the block's end moves past them. The bytes are those
//! of [`put_uv`](super::varint::put_uv) and [`put_sv`](super::varint::put_sv), in the
//! same order.

use super::varint::zigzag;

/// Room made before each event record: more than the longest, a tag (1) plus a domain
/// (`uv` of a u32: 5), an address delta (`sv` of 64 bits: 10), a size (`uv` of 64 bits:
/// 10) and a stack delta (`sv` of 33 bits: 5), 31 in all. 256: a `u8` offset indexes it
/// without a bounds check or a mask.
const EVENT_ROOM: usize = 256;

/// Bytes zeroed at a time past the end when the room runs out: small steps, so that a
/// new block's buffer is zeroed as it fills (each byte once), not all at its start.
const GROW_STEP: usize = 2048;

/// A raw block's bytes: `bytes[..end]`. The bytes of `bytes` after `end` are initialised,
/// and meaningless.
#[derive(Debug, Clone, Default)]
pub(super) struct BlockBuffer {
    bytes: Vec<u8>,
    end: usize,
    /// Where the rare records are put together before they are appended.
    scratch: Vec<u8>,
}

impl BlockBuffer {
    /// An empty block whose buffer holds `capacity` bytes before it grows.
    pub(super) fn with_capacity(capacity: usize) -> Self {
        BlockBuffer {
            bytes: Vec::with_capacity(capacity),
            ..BlockBuffer::default()
        }
    }

    /// The block so far.
    #[inline]
    pub(super) fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.end]
    }

    /// Bytes so far.
    #[inline]
    pub(super) fn len(&self) -> usize {
        self.end
    }

    /// Starts an Alloc or Free record with `tag`.
    #[inline(always)]
    pub(super) fn event(&mut self, tag: u8) -> EventRecord<'_> {
        match self.end.checked_add(EVENT_ROOM) {
            Some(room_end) if room_end <= self.bytes.len() => self.record_at_end(tag),
            // A call of its own, not a branch that joins the path above: there, the test
            // is the slice's bounds check.
            _ => self.event_after_growing(tag),
        }
    }

    /// [`event`](Self::event) when the room ran out.
    #[cold]
    #[inline(never)]
    fn event_after_growing(&mut self, tag: u8) -> EventRecord<'_> {
        self.grow(EVENT_ROOM);
        self.record_at_end(tag)
    }

    /// A record with `tag` at the end, where there is room for it.
    #[inline(always)]
    fn record_at_end(&mut self, tag: u8) -> EventRecord<'_> {
        let BlockBuffer { bytes, end, .. } = self;
        let out: &mut [u8; EVENT_ROOM] = (&mut bytes[*end..*end + EVENT_ROOM])
            .try_into()
            .expect("EVENT_ROOM bytes");
        out[0] = tag;
        EventRecord { out, end, len: 1 }
    }

    /// Appends a record put together by `write` (the rare records: strings, frames,
    /// stacks, modules, markers, times).
    pub(super) fn rare(&mut self, write: impl FnOnce(&mut Vec<u8>)) {
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        write(&mut scratch);
        if self.bytes.len() - self.end < scratch.len() {
            self.grow(scratch.len());
        }
        self.bytes[self.end..self.end + scratch.len()].copy_from_slice(&scratch);
        self.end += scratch.len();
        self.scratch = scratch;
    }

    /// Makes room for `more` bytes after the end (the `Vec`'s capacity grows as usual).
    fn grow(&mut self, more: usize) {
        self.bytes.resize(self.end + more.max(GROW_STEP), 0);
    }

    /// Hands the block out and starts an empty one in a buffer of the same capacity.
    pub(super) fn take(&mut self) -> Vec<u8> {
        let capacity = self.bytes.capacity();
        let mut block = std::mem::replace(&mut self.bytes, Vec::with_capacity(capacity));
        block.truncate(self.end);
        self.end = 0;
        block
    }

    /// Drops the block and starts an empty one in the same buffer.
    pub(super) fn clear(&mut self) {
        self.end = 0;
    }
}

/// An Alloc or Free record being written at the end of a [`BlockBuffer`]; it becomes part
/// of the block on [`finish`](Self::finish).
pub(super) struct EventRecord<'a> {
    out: &'a mut [u8; EVENT_ROOM],
    end: &'a mut usize,
    len: u8,
}

impl EventRecord<'_> {
    #[inline(always)]
    fn byte(&mut self, byte: u8) {
        debug_assert!(self.len < 31);
        self.out[usize::from(self.len)] = byte;
        self.len += 1;
    }

    /// Appends `value` as an unsigned LEB128 varint.
    #[inline(always)]
    pub(super) fn uv(&mut self, value: u64) {
        if value < 0x80 {
            self.byte(value as u8);
        } else if value < 0x4000 {
            self.byte((value as u8) | 0x80);
            self.byte((value >> 7) as u8);
        } else {
            self.uv_long(value);
        }
    }

    /// [`uv`](Self::uv) of 3 bytes or more.
    #[inline(always)]
    fn uv_long(&mut self, mut value: u64) {
        while value >= 0x80 {
            self.byte((value as u8) | 0x80);
            value >>= 7;
        }
        self.byte(value as u8);
    }

    /// Appends `value` zigzag-encoded, then as LEB128.
    #[inline(always)]
    pub(super) fn sv(&mut self, value: i64) {
        self.uv(zigzag(value));
    }

    /// Ends the record: the block now holds it.
    #[inline(always)]
    pub(super) fn finish(self) {
        *self.end += usize::from(self.len);
    }
}

#[cfg(test)]
mod tests {
    use super::super::varint::{put_sv, put_uv};
    use super::*;

    #[test]
    fn writes_the_bytes_of_put_uv_and_put_sv() {
        let unsigned = [0, 1, 0x7f, 0x80, 0x3fff, 0x4000, 1 << 35, u64::MAX];
        let signed = [0, -1, 1, -64, 64, -8192, 8192, i64::MIN, i64::MAX];
        let mut buffer = BlockBuffer::default();
        let mut expected = Vec::new();
        for (u, s) in unsigned.into_iter().zip(signed) {
            let mut record = buffer.event(0x0D);
            record.uv(u);
            record.sv(s);
            record.finish();
            expected.push(0x0D);
            put_uv(&mut expected, u);
            put_sv(&mut expected, s);
            assert_eq!(buffer.as_bytes(), expected, "{u:#x} {s}");
        }
    }

    #[test]
    fn the_longest_record_fits_and_rare_records_follow() {
        let mut buffer = BlockBuffer::with_capacity(40);
        let mut record = buffer.event(0x02);
        record.uv(u64::from(u32::MAX));
        record.sv(i64::MIN);
        record.uv(u64::MAX);
        record.sv(-i64::from(u32::MAX));
        assert_eq!(record.len, 31);
        record.finish();
        assert_eq!(buffer.len(), 31);
        buffer.rare(|out| out.extend_from_slice(&[7; 100]));
        assert_eq!(buffer.len(), 131);
        assert_eq!(&buffer.as_bytes()[31..], &[7; 100]);
        let block = buffer.take();
        assert_eq!(block.len(), 131);
        assert_eq!(buffer.len(), 0);
        buffer.event(0x03).finish();
        assert_eq!(buffer.as_bytes(), [0x03]);
    }
}
