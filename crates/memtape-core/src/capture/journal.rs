//! [`Journal`]: a capture's records as the recording thread leaves them, for the flusher
//! to encode.
//!
//! Encoding an allocation costs the recording thread about 70 instructions (address and
//! stack deltas, varints) and a look into [`RecentAddresses`](super::recent_addresses),
//! a 512 KiB table that misses the cache about once a record. A journal entry is three
//! stores: the flusher, on its own core, encodes the entries in the same order with a
//! [`BlockEncoder`], so the blocks it writes are byte for byte those the recording thread
//! would have encoded (section 34 of `benchmarks/RESULTS.md`).
//!
//! The records that are not allocations or frees are encoded at once into a side buffer
//! (they carry no delta state) and an entry points at their bytes.

use super::encoder::BlockEncoder;
use super::rare_records::RareRecords;

/// `Entry::size` of a free without a domain.
const FREE: u64 = u64::MAX;
/// `Entry::size` of a free with a domain.
const FREE_IN_DOMAIN: u64 = u64::MAX - 1;
/// `Entry::size` of rare records: `addr` is where their bytes start in `Journal::rare`,
/// `stack` how many bytes.
const RARE: u64 = u64::MAX - 2;
/// `Entry::size` of a Time record: `addr` is the time (kept apart from the rare records:
/// the encoder remembers it, to start a block cut after it with it).
const TIME: u64 = u64::MAX - 3;
/// The largest allocation size an entry holds as is (a larger one is clamped; no
/// allocation succeeds at such a size, since sizes above `isize::MAX` fail).
const MAX_SIZE: u64 = TIME - 1;

/// One allocation, free or run of rare records. 24 bytes.
#[derive(Clone, Copy, Debug)]
struct Entry {
    addr: u64,
    /// The allocation's size, or [`FREE`], [`FREE_IN_DOMAIN`], [`RARE`] or [`TIME`].
    size: u64,
    stack: u32,
    domain: u32,
}

/// The records appended since the flusher last took them: events as fixed-size entries,
/// other records already encoded. Cleared (keeping its memory) to be filled again.
#[derive(Debug, Default)]
pub struct Journal {
    entries: Vec<Entry>,
    rare: Vec<u8>,
    /// Entries that are not allocations or frees.
    rare_entries: usize,
}

impl Journal {
    /// An empty journal with room for `entries` events before it grows.
    pub fn with_capacity(entries: usize) -> Self {
        Journal {
            entries: Vec::with_capacity(entries),
            ..Journal::default()
        }
    }

    /// An allocation of `size` bytes at `addr` in tracemalloc `domain`, by `stack`.
    #[inline(always)]
    pub fn alloc(&mut self, domain: u32, addr: u64, size: u64, stack: u32) {
        self.entries.push(Entry {
            addr,
            size: size.min(MAX_SIZE),
            stack,
            domain,
        });
    }

    /// A free of the block at `addr`, in `domain` when the recorder knows it.
    #[inline(always)]
    pub fn free(&mut self, domain: Option<u32>, addr: u64) {
        let (size, domain) = match domain {
            Some(domain) => (FREE_IN_DOMAIN, domain),
            None => (FREE, 0),
        };
        self.entries.push(Entry {
            addr,
            size,
            stack: 0,
            domain,
        });
    }

    /// The time of the records that follow, in ns since the metadata's `start_time_ns`.
    pub fn time(&mut self, ns_since_start: u64) {
        self.entries.push(Entry {
            addr: ns_since_start,
            size: TIME,
            stack: 0,
            domain: 0,
        });
        self.rare_entries += 1;
    }

    /// Entries so far (events, and runs of other records).
    #[inline]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether one more entry fits without the journal growing.
    #[inline(always)]
    pub fn has_room(&self) -> bool {
        self.entries.len() < self.entries.capacity()
    }

    /// Whether the journal holds nothing.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Entries it has room for before it grows.
    pub fn capacity(&self) -> usize {
        self.entries.capacity()
    }

    /// Whether entry `at` is a Time record.
    #[inline]
    pub fn is_time(&self, at: usize) -> bool {
        self.entries.get(at).is_some_and(|e| e.size == TIME)
    }

    /// Allocations and frees so far.
    #[inline]
    pub fn events(&self) -> u64 {
        (self.entries.len() - self.rare_entries) as u64
    }

    /// Empties the journal, keeping its memory.
    pub fn clear(&mut self) {
        self.entries.clear();
        self.rare.clear();
        self.rare_entries = 0;
    }

    /// Encodes entries from `from` on into `encoder`, in order, until the end or until
    /// the encoder's block holds `block_target` bytes or more; returns where it stopped.
    pub fn encode_into(
        &self,
        encoder: &mut BlockEncoder,
        from: usize,
        block_target: usize,
    ) -> usize {
        let mut at = from;
        while at < self.entries.len() && encoder.len() < block_target {
            let e = self.entries[at];
            match e.size {
                FREE => encoder.free(None, e.addr),
                FREE_IN_DOMAIN => encoder.free(Some(e.domain), e.addr),
                TIME => encoder.time(e.addr),
                RARE => {
                    let start = e.addr as usize;
                    let bytes = &self.rare[start..start + e.stack as usize];
                    encoder.append_rare(|out| out.extend_from_slice(bytes));
                }
                size => encoder.alloc(e.domain, e.addr, size, e.stack),
            }
            at += 1;
        }
        at
    }
}

impl RareRecords for Journal {
    /// Writes the records into the side buffer, behind one entry naming their bytes.
    fn append_rare<F: FnOnce(&mut Vec<u8>)>(&mut self, write: F) {
        let start = self.rare.len();
        write(&mut self.rare);
        let len = u32::try_from(self.rare.len() - start).unwrap_or(u32::MAX);
        self.entries.push(Entry {
            addr: start as u64,
            size: RARE,
            stack: len,
            domain: 0,
        });
        self.rare_entries += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind of record, into a journal and straight into an encoder.
    fn both(f: impl Fn(&mut dyn FnMut(Step))) -> (Journal, BlockEncoder) {
        let mut journal = Journal::default();
        let mut direct = BlockEncoder::new();
        f(&mut |step| match step {
            Step::Alloc(d, a, s, k) => {
                journal.alloc(d, a, s, k);
                direct.alloc(d, a, s, k);
            }
            Step::Free(d, a) => {
                journal.free(d, a);
                direct.free(d, a);
            }
            Step::Time(ns) => {
                journal.time(ns);
                direct.time(ns);
            }
            Step::Others => {
                journal.string(1, "f.py");
                direct.string(1, "f.py");
                journal.frame(1, 1, 1, 7);
                direct.frame(1, 1, 1, 7);
                journal.stack(3, 0, 1);
                direct.stack(3, 0, 1);
                journal.module(1, "/lib/x.so", 0x7f00, &[1, 2], &[(0, 0x1000)]);
                direct.module(1, "/lib/x.so", 0x7f00, &[1, 2], &[(0, 0x1000)]);
                journal.native_frame(2, 1, 0x44);
                direct.native_frame(2, 1, 0x44);
                journal.marker("here");
                direct.marker("here");
                journal.dropped(5);
                direct.dropped(5);
            }
        });
        (journal, direct)
    }

    enum Step {
        Alloc(u32, u64, u64, u32),
        Free(Option<u32>, u64),
        Time(u64),
        Others,
    }

    fn program(emit: &mut dyn FnMut(Step)) {
        emit(Step::Time(0));
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for i in 0..20_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let addr = 0x7f00_0000_0000 + (x % 4096) * 16;
            match x % 7 {
                0..=2 => emit(Step::Alloc(0, addr, x % 600, (x % 90) as u32)),
                3 => emit(Step::Alloc(389_047, addr, 1 << 20, 4)),
                4..=5 => emit(Step::Free(None, addr)),
                _ => emit(Step::Free(Some((x % 3) as u32), addr)),
            }
            if i % 5000 == 0 {
                emit(Step::Others);
                emit(Step::Time(i * 1000));
            }
        }
    }

    #[test]
    fn a_journal_encodes_to_the_bytes_of_direct_encoding() {
        let (journal, direct) = both(program);
        assert_eq!(journal.events(), 20_000);
        let mut encoder = BlockEncoder::new();
        let end = journal.encode_into(&mut encoder, 0, usize::MAX);
        assert_eq!(end, journal.len());
        assert!(encoder.as_bytes() == direct.as_bytes(), "the same bytes");
        assert_eq!(encoder.events(), direct.events());
        assert_eq!(encoder.last_time(), direct.last_time());
    }

    /// The records of `raw`, as text.
    fn records(raw: &[u8]) -> Vec<String> {
        let mut out = Vec::new();
        crate::capture::tests_support::decode(raw, |r| out.push(format!("{r:?}")));
        out
    }

    #[test]
    fn encoding_stops_at_the_block_target_and_goes_on_from_there() {
        let (journal, _) = both(program);
        let mut whole = BlockEncoder::new();
        journal.encode_into(&mut whole, 0, usize::MAX);
        let mut encoder = BlockEncoder::new();
        let mut read = Vec::new();
        let mut at = 0;
        let mut blocks = 0;
        while at < journal.len() {
            at = journal.encode_into(&mut encoder, at, 4096);
            assert!(
                encoder.len() < 4096 + 64,
                "one record past the target at most"
            );
            read.extend(records(&encoder.take()));
            blocks += 1;
        }
        assert!(blocks > 10, "{blocks} blocks");
        assert_eq!(read, records(whole.as_bytes()));
    }

    #[test]
    fn sizes_that_would_read_as_a_kind_are_clamped() {
        let mut journal = Journal::default();
        journal.alloc(0, 16, u64::MAX, 1);
        journal.alloc(0, 32, RARE, 1);
        journal.alloc(0, 48, TIME, 1);
        let mut encoder = BlockEncoder::new();
        journal.encode_into(&mut encoder, 0, usize::MAX);
        let mut sizes = Vec::new();
        crate::capture::tests_support::decode(encoder.as_bytes(), |r| {
            if let crate::capture::Record::Alloc { size, .. } = r {
                sizes.push(size);
            }
        });
        assert_eq!(sizes, [MAX_SIZE; 3]);
    }

    #[test]
    fn clear_keeps_memory_and_empties() {
        let (mut journal, _) = both(program);
        let capacity = journal.entries.capacity();
        journal.clear();
        assert!(journal.is_empty());
        assert_eq!(journal.events(), 0);
        assert_eq!(journal.entries.capacity(), capacity);
        journal.free(None, 32);
        let mut encoder = BlockEncoder::new();
        journal.encode_into(&mut encoder, 0, usize::MAX);
        assert_eq!(encoder.events(), 1);
    }
}
