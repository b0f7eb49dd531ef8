//! [`BlockEncoder`]: appends records to a raw block.

use super::block_buffer::BlockBuffer;
use super::rare_records::{self, RareRecords};
use super::recent_addresses::RecentAddresses;
use super::record::{tag, Record};

/// The farthest free an AllocReuse names. A reuse farther back is written with its
/// address delta instead: on allocation-heavy code, far reuses are rare and irregular,
/// and their distances compressed worse than the addresses did (section 26 of
/// `benchmarks/RESULTS.md`).
pub(super) const REUSE_LIMIT: u32 = 2048;

/// Appends records to an in-memory raw block with the delta state of the spec
/// (`prev_addr`, `prev_stack`, `prev_freed`, all 0 at the block start) and back
/// references to the block's earlier allocations and frees ([`RecentAddresses`]): an
/// AllocReuse names a recent free by its distance (format version 3), a FreeStep names
/// an allocation by its ordinal's step from the previous FreeStep's (version 4), small
/// when a program frees what it built in the order it built it.
///
/// Hand the block to [`CaptureFileWriter::write_block`](super::CaptureFileWriter::write_block)
/// with [`take`](Self::take) (or [`as_bytes`](Self::as_bytes) then [`clear`](Self::clear),
/// which keeps the buffer). The spec wants a Time record at every block start: writing it
/// is the caller's job.
#[derive(Debug, Clone, Default)]
pub struct BlockEncoder {
    buf: BlockBuffer,
    prev_addr: u64,
    prev_stack: u32,
    /// The block ordinal of the allocation the last FreeStep freed.
    prev_freed: u32,
    recent: RecentAddresses,
    /// The time of the last Time record written.
    last_time: u64,
    /// Set only to write version-2 blocks in tests.
    #[cfg(test)]
    no_back_references: bool,
}

impl BlockEncoder {
    /// An empty block.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty block whose buffer holds `bytes` before it grows.
    pub fn with_capacity(bytes: usize) -> Self {
        Self {
            buf: BlockBuffer::with_capacity(bytes),
            ..Self::default()
        }
    }

    /// An allocation of `size` bytes at `addr` in tracemalloc `domain`, by `stack`.
    #[inline(always)]
    pub fn alloc(&mut self, domain: u32, addr: u64, size: u64, stack: u32) {
        let reused = self
            .recent
            .alloc(addr, REUSE_LIMIT)
            .filter(|_| self.back_references());
        let stack_step = i64::from(stack) - i64::from(self.prev_stack);
        self.prev_stack = stack;
        let mut record;
        match (domain, reused) {
            (0, Some(back)) => {
                record = self.buf.event(tag::ALLOC_REUSE);
                record.uv(u64::from(back));
            }
            (0, None) => {
                let step = self.addr_step(addr);
                record = self.buf.event(tag::ALLOC);
                record.sv(step);
            }
            _ => {
                let step = self.addr_step(addr);
                record = self.buf.event(tag::ALLOC_IN_DOMAIN);
                record.uv(u64::from(domain));
                record.sv(step);
            }
        }
        record.uv(size);
        record.sv(stack_step);
        record.finish();
    }

    /// A free of the block at `addr`, in `domain` when the recorder knows it.
    #[inline(always)]
    pub fn free(&mut self, domain: Option<u32>, addr: u64) {
        let allocated = self.recent.free(addr).filter(|_| self.back_references());
        let mut record;
        match (domain, allocated) {
            (None, Some(alloc)) => {
                let step = self.freed_step(alloc);
                record = self.buf.event(tag::FREE_STEP);
                record.sv(step);
            }
            (Some(domain), Some(alloc)) => {
                let step = self.freed_step(alloc);
                record = self.buf.event(tag::FREE_STEP_IN_DOMAIN);
                record.uv(u64::from(domain));
                record.sv(step);
            }
            (None, None) => {
                let step = self.addr_step(addr);
                record = self.buf.event(tag::FREE);
                record.sv(step);
            }
            (Some(domain), None) => {
                let step = self.addr_step(addr);
                record = self.buf.event(tag::FREE_IN_DOMAIN);
                record.uv(u64::from(domain));
                record.sv(step);
            }
        }
        record.finish();
    }

    /// Writes blocks without back references, as format versions 1 and 2 did (to make
    /// old files in tests, and to measure what the references save).
    #[cfg(test)]
    pub(crate) fn without_back_references(mut self) -> Self {
        self.no_back_references = true;
        self
    }

    /// Whether records refer back to earlier ones (always, but in some tests).
    #[inline(always)]
    fn back_references(&self) -> bool {
        #[cfg(test)]
        return !self.no_back_references;
        #[cfg(not(test))]
        true
    }

    /// The time of the records that follow, in ns since the metadata's `start_time_ns`.
    pub fn time(&mut self, ns_since_start: u64) {
        self.last_time = ns_since_start;
        self.buf.rare(|out| rare_records::time(out, ns_since_start));
    }

    /// The time of the last Time record written (0 before any): what a block cut after
    /// it starts with.
    pub fn last_time(&self) -> u64 {
        self.last_time
    }

    /// Appends a record as read back from a capture (re-encoding, tests).
    pub fn record(&mut self, record: &Record<'_>) {
        match *record {
            Record::Alloc {
                domain,
                addr,
                size,
                stack,
            } => self.alloc(domain, addr, size, stack),
            Record::Free { domain, addr } => self.free(domain, addr),
            Record::Time { ns } => self.time(ns),
            Record::String { id, value } => self.string(id, value),
            Record::Frame {
                id,
                filename,
                name,
                line,
            } => self.frame(id, filename, name, line),
            Record::Stack { id, parent, frame } => self.stack(id, parent, frame),
            Record::Marker { label } => self.marker(label),
            Record::Dropped { count } => self.dropped(count),
            Record::Module {
                id,
                path,
                base,
                build_id,
                segments,
            } => self.module(
                id,
                path,
                base,
                build_id,
                &segments.iter().collect::<Vec<_>>(),
            ),
            Record::NativeFrame { id, module, offset } => self.native_frame(id, module, offset),
        }
    }

    /// Raw bytes so far.
    #[inline]
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Alloc and Free records so far in this block.
    #[inline]
    pub fn events(&self) -> u64 {
        self.recent.block_events()
    }

    /// Whether the block holds no record.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.buf.len() == 0
    }

    /// The raw block so far.
    pub fn as_bytes(&self) -> &[u8] {
        self.buf.as_bytes()
    }

    /// Hands the raw block out and starts a new one (delta state reset).
    pub fn take(&mut self) -> Vec<u8> {
        let raw = self.buf.take();
        self.reset_state();
        raw
    }

    /// Drops the records so far and starts a new block (delta state reset), keeping the
    /// buffer.
    pub fn clear(&mut self) {
        self.buf.clear();
        self.reset_state();
    }

    /// Drops the records so far and starts the first block of a new capture: as
    /// [`clear`](Self::clear), and the time of the last Time record is 0 again.
    pub fn restart(&mut self) {
        self.clear();
        self.last_time = 0;
    }

    fn reset_state(&mut self) {
        self.prev_addr = 0;
        self.prev_stack = 0;
        self.prev_freed = 0;
        self.recent.new_block();
    }

    /// The address delta of a record at `addr`, which becomes the previous address.
    #[inline(always)]
    fn addr_step(&mut self, addr: u64) -> i64 {
        // A wrapping difference reinterpreted as signed: exact for any pair of addresses,
        // and small when they are close in either direction.
        let step = addr.wrapping_sub(self.prev_addr) as i64;
        self.prev_addr = addr;
        step
    }

    /// A FreeStep's reference: the freed allocation's ordinal, as a step from the last.
    #[inline(always)]
    fn freed_step(&mut self, alloc: u32) -> i64 {
        let step = i64::from(alloc) - i64::from(self.prev_freed);
        self.prev_freed = alloc;
        step
    }
}

impl RareRecords for BlockEncoder {
    fn append_rare<F: FnOnce(&mut Vec<u8>)>(&mut self, write: F) {
        self.buf.rare(write);
    }
}

#[cfg(test)]
mod tests {
    use super::super::decoder::decode_block;
    use super::super::record::Record;
    use super::*;

    fn decode(raw: &[u8]) -> Vec<Record<'_>> {
        let mut out = Vec::new();
        decode_block(raw, &mut |record| out.push(record)).expect("valid block");
        out
    }

    /// Allocations and frees that reuse addresses (back references in both directions).
    fn churn(encoder: &mut BlockEncoder) -> Vec<u8> {
        for round in 0..50u64 {
            for i in 0..20u64 {
                encoder.alloc(0, 0x7f00_0000_0000 + i * 32, 32, (round % 7) as u32);
            }
            for i in 0..20u64 {
                encoder.free(None, 0x7f00_0000_0000 + i * 32);
            }
        }
        encoder.take()
    }

    #[test]
    fn an_encoder_after_another_writes_the_same_bytes() {
        // The second encoder starts from the table the first one left (with its stale
        // entries): a new block, whose references are the same as a fresh table's.
        let mut first = BlockEncoder::new();
        let written = churn(&mut first);
        drop(first);
        for _ in 0..3 {
            let mut next = BlockEncoder::new();
            assert_eq!(churn(&mut next), written);
        }
        let mut expected = Vec::new();
        for round in 0..50u64 {
            for i in 0..20u64 {
                expected.push(Record::Alloc {
                    domain: 0,
                    addr: 0x7f00_0000_0000 + i * 32,
                    size: 32,
                    stack: (round % 7) as u32,
                });
            }
            for i in 0..20u64 {
                expected.push(Record::Free {
                    domain: None,
                    addr: 0x7f00_0000_0000 + i * 32,
                });
            }
        }
        assert_eq!(decode(&written), expected);
    }

    #[test]
    fn deltas_are_small_for_nearby_addresses_and_stacks() {
        let mut encoder = BlockEncoder::new();
        encoder.alloc(0, 0x7f00_0000_1000, 32, 7);
        let first = encoder.len();
        encoder.alloc(0, 0x7f00_0000_1020, 32, 8);
        // tag, 1-byte delta (+0x20 zigzags to 0x40), size, stack delta.
        assert_eq!(encoder.len() - first, 4);
        encoder.free(None, 0x7f00_0000_1000);
        assert_eq!(encoder.len() - first, 4 + 2);
        assert_eq!(encoder.events(), 3);
        assert_eq!(
            decode(encoder.as_bytes()),
            [
                Record::Alloc {
                    domain: 0,
                    addr: 0x7f00_0000_1000,
                    size: 32,
                    stack: 7
                },
                Record::Alloc {
                    domain: 0,
                    addr: 0x7f00_0000_1020,
                    size: 32,
                    stack: 8
                },
                Record::Free {
                    domain: None,
                    addr: 0x7f00_0000_1000
                },
            ]
        );
    }

    #[test]
    fn take_and_clear_reset_the_delta_state() {
        let mut encoder = BlockEncoder::new();
        encoder.alloc(0, 1000, 1, 5);
        let block = encoder.take();
        assert!(encoder.is_empty());
        assert_eq!(encoder.events(), 0);
        encoder.alloc(0, 1000, 1, 5);
        assert_eq!(encoder.as_bytes(), &block[..]);
        encoder.clear();
        assert!(encoder.is_empty());
        encoder.alloc(0, 1000, 1, 5);
        assert_eq!(encoder.as_bytes(), &block[..]);
    }

    #[test]
    fn modules_and_native_frames_round_trip() {
        let mut encoder = BlockEncoder::new();
        encoder.module(
            3,
            "/lib/libx.so",
            0x7f00_0000_0000,
            &[0xab, 0xcd],
            &[(0, 0x1000), (0x2000, 0x500)],
        );
        encoder.native_frame(9, 3, 0x1234);
        let records = decode(encoder.as_bytes());
        let Record::Module {
            id,
            path,
            base,
            build_id,
            segments,
        } = records[0]
        else {
            panic!("not a module: {:?}", records[0]);
        };
        assert_eq!(
            (id, path, base, build_id),
            (3, "/lib/libx.so", 0x7f00_0000_0000, &[0xab, 0xcd][..])
        );
        assert_eq!(
            segments.iter().collect::<Vec<_>>(),
            [(0, 0x1000), (0x2000, 0x500)]
        );
        assert_eq!(
            records[1],
            Record::NativeFrame {
                id: 9,
                module: 3,
                offset: 0x1234
            }
        );
    }

    #[test]
    fn domain_zero_free_with_a_domain_keeps_the_domain() {
        let mut encoder = BlockEncoder::new();
        encoder.free(Some(0), 16);
        assert_eq!(encoder.as_bytes()[0], tag::FREE_IN_DOMAIN);
        assert_eq!(
            decode(encoder.as_bytes()),
            [Record::Free {
                domain: Some(0),
                addr: 16
            }]
        );
    }
}
