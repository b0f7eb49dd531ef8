//! Whole-file tests: round trips, truncation at every byte, byte flips, foreign input, the
//! limits, a bounded stand-in for the fuzzer, and the size/speed measurement (ignored).

use std::io::{self, Read};

use super::format::*;
use super::*;

/// An owned copy of a [`Record`], to compare what was written with what was read.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Owned {
    Alloc {
        domain: u32,
        addr: u64,
        size: u64,
        stack: u32,
    },
    Free {
        domain: Option<u32>,
        addr: u64,
    },
    Time(u64),
    String(u32, String),
    Frame(u32, u32, u32, u32),
    Stack(u32, u32, u32),
    Marker(String),
    Dropped(u64),
    Module(u32, String, u64, Vec<u8>, Vec<(u64, u64)>),
    NativeFrame(u32, u32, u64),
}

impl From<Record<'_>> for Owned {
    fn from(record: Record<'_>) -> Self {
        match record {
            Record::Alloc {
                domain,
                addr,
                size,
                stack,
            } => Owned::Alloc {
                domain,
                addr,
                size,
                stack,
            },
            Record::Free { domain, addr } => Owned::Free { domain, addr },
            Record::Time { ns } => Owned::Time(ns),
            Record::String { id, value } => Owned::String(id, value.to_owned()),
            Record::Frame {
                id,
                filename,
                name,
                line,
            } => Owned::Frame(id, filename, name, line),
            Record::Stack { id, parent, frame } => Owned::Stack(id, parent, frame),
            Record::Marker { label } => Owned::Marker(label.to_owned()),
            Record::Dropped { count } => Owned::Dropped(count),
            Record::Module {
                id,
                path,
                base,
                build_id,
                segments,
            } => Owned::Module(
                id,
                path.to_owned(),
                base,
                build_id.to_vec(),
                segments.iter().collect(),
            ),
            Record::NativeFrame { id, module, offset } => Owned::NativeFrame(id, module, offset),
        }
    }
}

impl Owned {
    fn encode(&self, encoder: &mut BlockEncoder) {
        match *self {
            Owned::Alloc {
                domain,
                addr,
                size,
                stack,
            } => encoder.alloc(domain, addr, size, stack),
            Owned::Free { domain, addr } => encoder.free(domain, addr),
            Owned::Time(ns) => encoder.time(ns),
            Owned::String(id, ref value) => encoder.string(id, value),
            Owned::Frame(id, filename, name, line) => encoder.frame(id, filename, name, line),
            Owned::Stack(id, parent, frame) => encoder.stack(id, parent, frame),
            Owned::Marker(ref label) => encoder.marker(label),
            Owned::Dropped(count) => encoder.dropped(count),
            Owned::Module(id, ref path, base, ref build_id, ref segments) => {
                encoder.module(id, path, base, build_id, segments)
            }
            Owned::NativeFrame(id, module, offset) => encoder.native_frame(id, module, offset),
        }
    }
}

const METADATA: &str = r#"{"tool": "memtape", "tool_version": "0.1.0", "pid": 42, "argv": ["x.py"], "start_time_ns": 1700000000000000000, "nframe": 0}"#;
const TRAILER: &str = r#"{"events": 0, "end_time_ns": 5, "exit": "normal"}"#;

/// A written file and where each of its blocks ends.
struct Sample {
    bytes: Vec<u8>,
    header_len: u64,
    /// `(end offset, records so far)` after each records block.
    block_ends: Vec<(u64, usize)>,
    records: Vec<Owned>,
}

fn write_file(blocks: &[Vec<Owned>], trailer: Option<&str>) -> Sample {
    let mut writer = CaptureFileWriter::new(Vec::new(), METADATA).unwrap();
    let header_len = writer.bytes_written();
    let mut encoder = BlockEncoder::new();
    let mut block_ends = Vec::new();
    let mut records = Vec::new();
    for block in blocks {
        for record in block {
            record.encode(&mut encoder);
            records.push(record.clone());
        }
        writer.write_block(&encoder.take()).unwrap();
        block_ends.push((writer.bytes_written(), records.len()));
    }
    let bytes = match trailer {
        Some(trailer) => writer.finish(trailer).unwrap(),
        None => writer.get_ref().clone(),
    };
    Sample {
        bytes,
        header_len,
        block_ends,
        records,
    }
}

/// Reads `bytes` whole; on error, also what was streamed before it.
fn read(bytes: &[u8]) -> (Vec<Owned>, Result<ReadSummary, CaptureError>) {
    let mut records = Vec::new();
    let result = CaptureReader::new(bytes)
        .and_then(|mut reader| reader.for_each_record(|record| records.push(record.into())));
    (records, result)
}

fn read_ok(bytes: &[u8]) -> (Vec<Owned>, ReadSummary) {
    let (records, result) = read(bytes);
    (records, result.expect("a readable capture"))
}

fn error_message(bytes: &[u8]) -> String {
    read(bytes).1.expect_err("an error").to_string()
}

fn every_kind() -> Vec<Owned> {
    vec![
        Owned::Time(0),
        Owned::String(1, String::new()),
        Owned::String(2, "héllo wörld ✓ 𝄞 日本".to_owned()),
        Owned::String(u32::MAX, "/usr/lib/python3.11/json/decoder.py".to_owned()),
        Owned::Frame(1, 2, 3, 4),
        Owned::Frame(u32::MAX, u32::MAX, u32::MAX, u32::MAX),
        Owned::Stack(1, 0, 1),
        Owned::Stack(u32::MAX, u32::MAX - 1, u32::MAX),
        Owned::Module(
            1,
            "/usr/lib/libc.so.6".to_owned(),
            0x7f00_0000_0000,
            vec![7; 20],
            vec![(0, 0x28000), (0x28000, u64::MAX)],
        ),
        Owned::Module(u32::MAX, String::new(), 0, Vec::new(), Vec::new()),
        Owned::NativeFrame(3, 1, 0x2_8123),
        Owned::NativeFrame(u32::MAX, u32::MAX, u64::MAX),
        Owned::Alloc {
            domain: 0,
            addr: 0x7f12_3456_7890,
            size: 32,
            stack: 1,
        },
        Owned::Alloc {
            domain: 0,
            addr: 0x10,
            size: u64::MAX,
            stack: u32::MAX,
        },
        Owned::Alloc {
            domain: 389_047,
            addr: u64::MAX,
            size: 0,
            stack: 0,
        },
        Owned::Alloc {
            domain: u32::MAX,
            addr: 0,
            size: 1,
            stack: u32::MAX,
        },
        Owned::Free {
            domain: None,
            addr: u64::MAX,
        },
        Owned::Free {
            domain: Some(389_047),
            addr: 0,
        },
        Owned::Free {
            domain: Some(0),
            addr: 0x7f12_3456_7890,
        },
        Owned::Free {
            domain: None,
            addr: 0x7f12_3456_7880,
        },
        Owned::Time(u64::MAX),
        Owned::Marker(String::new()),
        Owned::Marker("après le chargement".to_owned()),
        Owned::Dropped(0),
        Owned::Dropped(u64::MAX),
    ]
}

/// Three blocks: one that compresses, one too small to, one mixed.
fn three_blocks() -> Vec<Vec<Owned>> {
    let mut first = vec![Owned::Time(10)];
    for i in 0..200u64 {
        first.push(Owned::Alloc {
            domain: 0,
            addr: 0x7f00_0000_0000 + 32 * i,
            size: 32,
            stack: 3 + (i % 4) as u32,
        });
        if i % 3 == 0 {
            first.push(Owned::Free {
                domain: None,
                addr: 0x7f00_0000_0000 + 32 * i,
            });
        }
    }
    let second = vec![Owned::Time(2000), Owned::Marker("mid".to_owned())];
    let mut third = every_kind();
    third.insert(0, Owned::Time(3000));
    vec![first, second, third]
}

#[test]
fn version_1_files_still_read() {
    // Version 1 is version 2 without the Module and NativeFrame records.
    let old: Vec<Owned> = every_kind()
        .into_iter()
        .filter(|r| !matches!(r, Owned::Module(..) | Owned::NativeFrame(..)))
        .collect();
    let mut sample = write_file(std::slice::from_ref(&old), Some(TRAILER));
    sample.bytes[8..10].copy_from_slice(&1u16.to_le_bytes());
    let mut reader = CaptureReader::new(&sample.bytes[..]).unwrap();
    assert_eq!(reader.version(), 1);
    let mut records = Vec::new();
    reader
        .for_each_record(|record| records.push(Owned::from(record)))
        .unwrap();
    assert_eq!(records, old);
}

#[test]
fn every_record_kind_round_trips() {
    let blocks = vec![every_kind()];
    let sample = write_file(&blocks, Some(TRAILER));
    let mut reader = CaptureReader::new(&sample.bytes[..]).unwrap();
    assert_eq!(reader.metadata_json(), METADATA);
    assert_eq!(reader.version(), super::FORMAT_VERSION);
    assert_eq!(reader.flags(), 0);
    let mut records = Vec::new();
    let summary = reader
        .for_each_record(|record| records.push(Owned::from(record)))
        .unwrap();
    assert_eq!(records, sample.records);
    assert_eq!(
        summary,
        ReadSummary {
            blocks: 1,
            records: sample.records.len() as u64,
            events: 8,
            complete: true,
            cut_short_at: None,
            trailer_json: Some(TRAILER.to_owned()),
        }
    );
    // A second call streams nothing and says the same about the ending.
    let again = reader
        .for_each_record(|_| panic!("no more records"))
        .unwrap();
    assert_eq!((again.records, again.complete), (0, true));
    assert_eq!(again.trailer_json.as_deref(), Some(TRAILER));
}

#[test]
fn address_deltas_work_both_ways_across_the_whole_range() {
    let addrs = [
        0,
        u64::MAX,
        1,
        u64::MAX - 1,
        1 << 63,
        (1 << 63) - 1,
        0x7fff_ffff_fff0,
        0x5555_5555_0000,
        0x5555_5555_0010,
        0x5555_5554_fff0,
    ];
    let block: Vec<Owned> = addrs
        .iter()
        .enumerate()
        .map(|(i, &addr)| {
            if i % 2 == 0 {
                Owned::Alloc {
                    domain: 0,
                    addr,
                    size: addr,
                    stack: addr as u32,
                }
            } else {
                Owned::Free { domain: None, addr }
            }
        })
        .collect();
    let sample = write_file(&[block.clone(), block], Some(TRAILER));
    let (records, summary) = read_ok(&sample.bytes);
    assert_eq!(records, sample.records);
    assert_eq!((summary.blocks, summary.events), (2, 20));
}

#[test]
fn many_blocks_round_trip() {
    let mut rng = XorShift::new(7);
    let blocks: Vec<Vec<Owned>> = (0..300)
        .map(|b| {
            let mut block = vec![Owned::Time(b * 1_000_000)];
            for _ in 0..rng.below(400) {
                block.push(Owned::Alloc {
                    domain: if rng.below(10) == 0 { 389_047 } else { 0 },
                    addr: 0x7f00_0000_0000 + rng.below(1 << 20) * 16,
                    size: rng.below(600),
                    stack: rng.below(300) as u32,
                });
                if rng.below(2) == 0 {
                    block.push(Owned::Free {
                        domain: None,
                        addr: 0x7f00_0000_0000 + rng.below(1 << 20) * 16,
                    });
                }
            }
            block
        })
        .collect();
    let sample = write_file(&blocks, Some(TRAILER));
    let (records, summary) = read_ok(&sample.bytes);
    assert_eq!(records, sample.records);
    assert_eq!(summary.blocks, 300);
    assert!(summary.complete);
    // Through a reader that hands out one byte at a time, the same.
    let mut records = Vec::new();
    let summary = CaptureReader::new(Trickle(&sample.bytes, 0))
        .unwrap()
        .for_each_record(|record| records.push(Owned::from(record)))
        .unwrap();
    assert_eq!(records, sample.records);
    assert!(summary.complete);
}

#[test]
fn empty_records_blocks_are_fine() {
    let sample = write_file(&[vec![], vec![Owned::Time(1)], vec![]], Some(TRAILER));
    let (records, summary) = read_ok(&sample.bytes);
    assert_eq!(records, [Owned::Time(1)]);
    assert_eq!(summary.blocks, 3);
}

#[test]
fn a_missing_trailer_reads_as_cut_short() {
    let sample = write_file(&three_blocks(), None);
    let (records, summary) = read_ok(&sample.bytes);
    assert_eq!(records, sample.records);
    assert_eq!(summary.blocks, 3);
    assert!(!summary.complete);
    assert_eq!(summary.cut_short_at, Some(sample.bytes.len() as u64));
    assert_eq!(summary.trailer_json, None);

    // Only the header.
    let (records, summary) = read_ok(&sample.bytes[..sample.header_len as usize]);
    assert!(records.is_empty());
    assert_eq!(summary.cut_short_at, Some(sample.header_len));
}

#[test]
fn every_truncation_gives_whole_blocks_or_a_clean_error() {
    let sample = write_file(&three_blocks(), Some(TRAILER));
    let full = sample.bytes.len();
    for len in 0..=full {
        let (records, result) = read(&sample.bytes[..len]);
        if (len as u64) < sample.header_len {
            let error = result.expect_err("a truncated header is an error");
            assert!(records.is_empty());
            let message = error.to_string();
            if len == 0 {
                assert_eq!(
                    message,
                    "not a memtape capture (the file is empty: no MEMTAPE magic at offset 0)"
                );
            } else {
                assert!(
                    message.starts_with("truncated capture: the file ends at offset"),
                    "{len}: {message}"
                );
                assert_eq!(error.offset(), len as u64, "{message}");
            }
            continue;
        }
        let summary = result.unwrap_or_else(|error| panic!("length {len}: {error}"));
        // Whole blocks only: the last block that ends within `len`.
        let (start, whole) = sample
            .block_ends
            .iter()
            .rev()
            .find(|(end, _)| *end <= len as u64)
            .copied()
            .unwrap_or((sample.header_len, 0));
        assert_eq!(records, sample.records[..whole], "length {len}");
        assert_eq!(summary.records, whole as u64);
        if len == full {
            assert!(summary.complete);
            assert_eq!(summary.cut_short_at, None);
        } else {
            assert!(!summary.complete, "length {len}");
            assert_eq!(summary.cut_short_at, Some(start), "length {len}");
        }
    }
}

#[test]
fn byte_flips_are_caught_or_harmless() {
    let sample = write_file(&three_blocks(), Some(TRAILER));
    let metadata_end = sample.header_len as usize; // metadata and its CRC
    let payloads = block_payload_ranges(&sample.bytes, sample.header_len as usize);
    let whole_block_counts: Vec<usize> = std::iter::once(0)
        .chain(sample.block_ends.iter().map(|&(_, n)| n))
        .collect();
    let mut rng = XorShift::new(0x5eed);
    let mut errors = 0;
    for _ in 0..4000 {
        let mut bytes = sample.bytes.clone();
        let at = rng.below(bytes.len() as u64) as usize;
        bytes[at] ^= 1 + rng.below(255) as u8;
        let (records, result) = read(&bytes);
        // Whatever happens, what was streamed is whole original blocks.
        assert!(
            whole_block_counts.contains(&records.len()),
            "flip at {at}: {} records",
            records.len()
        );
        assert_eq!(records, sample.records[..records.len()], "flip at {at}");
        let in_payload = payloads.iter().any(|range| range.contains(&at));
        let in_metadata = (16..metadata_end).contains(&at);
        match result {
            Ok(_) => {
                assert!(!in_payload, "a flip at {at} in a block payload went unseen");
                assert!(!in_metadata, "a flip at {at} in the metadata went unseen");
            }
            Err(_) => errors += 1,
        }
    }
    assert!(errors > 3000, "{errors}");
}

/// The byte ranges of every block's payload.
fn block_payload_ranges(bytes: &[u8], mut at: usize) -> Vec<std::ops::Range<usize>> {
    let mut ranges = Vec::new();
    while at + BLOCK_HEADER_LEN <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
        ranges.push(at + BLOCK_HEADER_LEN..at + BLOCK_HEADER_LEN + len);
        at += BLOCK_HEADER_LEN + len;
    }
    ranges
}

#[test]
fn foreign_input_is_a_clean_error() {
    let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x10\0\0\0\x10\x08\x06\0\0\0";
    let cases: [(&[u8], &str); 6] = [
        (b"", "not a memtape capture (the file is empty: no MEMTAPE magic at offset 0)"),
        (png, "not a memtape capture (no MEMTAPE magic at offset 0)"),
        (
            b"\x1f\x8b\x08\0",
            "not a memtape capture (no MEMTAPE magic at offset 0)",
        ),
        (
            b"{\"tool\": \"memtape\"}",
            "not a memtape capture (no MEMTAPE magic at offset 0)",
        ),
        (
            b"MEMTA",
            "truncated capture: the file ends at offset 5, inside the file header",
        ),
        (
            b"MEMTAPE\0\x07\0\0\0\0\0\0\0",
            "unsupported capture format version 7 at offset 8 (this memtape reads 1 to 2): a newer memtape wrote it, or the file is damaged",
        ),
    ];
    for (bytes, message) in cases {
        assert_eq!(error_message(bytes), message);
    }
}

/// A file header with the given metadata length field and metadata.
fn header(metadata_len: u32, metadata: &[u8]) -> Vec<u8> {
    let mut bytes = b"MEMTAPE\0\x01\0\0\0".to_vec();
    bytes.extend_from_slice(&metadata_len.to_le_bytes());
    bytes.extend_from_slice(metadata);
    bytes.extend_from_slice(&crc32fast::hash(metadata).to_le_bytes());
    bytes
}

/// A block with a correct CRC and the given header fields.
fn block(kind: u8, compression: u8, payload: &[u8], raw_len: u32) -> Vec<u8> {
    let mut bytes = b"MTBK".to_vec();
    bytes.extend_from_slice(&[kind, compression, 0, 0]);
    bytes.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    bytes.extend_from_slice(&raw_len.to_le_bytes());
    bytes.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    bytes.extend_from_slice(payload);
    bytes
}

#[test]
fn header_damage_names_the_offset() {
    assert_eq!(
        error_message(&header(u32::MAX, b"{}")[..]),
        "corrupt capture header at offset 12: metadata length 4294967295 is over the 1048576-byte limit"
    );
    let mut bad_crc = header(2, b"{}");
    bad_crc[18] ^= 1;
    assert_eq!(
        error_message(&bad_crc),
        "corrupt capture header at offset 16: metadata checksum mismatch"
    );
    assert_eq!(
        error_message(&header(3, b"{\xff}")),
        "corrupt capture header at offset 17: metadata is not UTF-8"
    );
    // Metadata length at the limit, but the file is short: no big allocation, a clean error.
    assert_eq!(
        error_message(&header(MAX_METADATA_LEN, b"{}")[..18]),
        "truncated capture: the file ends at offset 18, inside the metadata"
    );
    assert_eq!(
        error_message(&header(2, b"{}")[..20]),
        "truncated capture: the file ends at offset 20, inside the metadata checksum"
    );
    // Unknown flag bits are ignored.
    let mut flagged = header(2, b"{}");
    flagged[10] = 0xff;
    let (_, summary) = read_ok(&flagged);
    assert_eq!(summary.cut_short_at, Some(22));
}

#[test]
fn block_damage_names_the_offset() {
    let start = header(2, b"{}");
    let at = start.len(); // 22
    let with = |blocks: &[Vec<u8>]| {
        let mut bytes = start.clone();
        for block in blocks {
            bytes.extend_from_slice(block);
        }
        error_message(&bytes)
    };
    let time = [0x05, 0x00];
    let good = block(KIND_RECORDS, COMPRESSION_NONE, &time, 2);
    let second = at + good.len();
    let mut bad_crc = good.clone();
    bad_crc[20] ^= 0x40;
    assert_eq!(
        with(&[good.clone(), bad_crc]),
        format!("corrupt block at offset {second}: checksum mismatch")
    );
    assert_eq!(
        with(&[good.clone(), b"MTBX".to_vec()]),
        format!("corrupt block at offset {second}: no MTBK block magic")
    );
    assert_eq!(
        with(&[b"PK\x03\x04".to_vec()]),
        format!("corrupt block at offset {at}: no MTBK block magic")
    );
    assert_eq!(
        with(&[block(3, COMPRESSION_NONE, &time, 2)]),
        format!("corrupt block at offset {at}: unknown block kind 3")
    );
    assert_eq!(
        with(&[block(KIND_RECORDS, 2, &time, 2)]),
        format!("corrupt block at offset {at}: unknown compression 2")
    );
    assert_eq!(
        with(&[block(KIND_RECORDS, COMPRESSION_NONE, &time, 3)]),
        format!(
            "corrupt block at offset {at}: uncompressed block with payload length 2 but raw length 3"
        )
    );
    assert_eq!(
        with(&[block(
            KIND_RECORDS,
            COMPRESSION_ZSTD,
            &time,
            MAX_RAW_LEN + 1
        )]),
        format!(
            "corrupt block at offset {at}: raw length 268435457 is over the 268435456-byte limit"
        )
    );
    let mut huge = block(KIND_RECORDS, COMPRESSION_ZSTD, &time, 2);
    huge[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
    assert_eq!(
        with(&[huge]),
        format!("corrupt block at offset {at}: payload length 4294967295 is over the 67108864-byte limit")
    );
    assert_eq!(
        with(&[block(KIND_RECORDS, COMPRESSION_ZSTD, &time, 2)]),
        format!("corrupt block at offset {at}: the payload is not a zstd frame")
    );
    let frame = zstd::bulk::compress(&[0x05; 100], 3).unwrap();
    assert_eq!(
        with(&[block(KIND_RECORDS, COMPRESSION_ZSTD, &frame, 99)]),
        format!(
            "corrupt block at offset {at}: the zstd frame holds 100 bytes but the block header says 99"
        )
    );
    assert_eq!(
        with(&[block(KIND_TRAILER, COMPRESSION_ZSTD, &frame, 100)]),
        format!("corrupt block at offset {at}: the trailer block is compressed")
    );
    assert_eq!(
        with(&[block(KIND_TRAILER, COMPRESSION_NONE, b"\xff", 1)]),
        format!("corrupt block at offset {at}: the trailer is not UTF-8")
    );
    let trailer = block(KIND_TRAILER, COMPRESSION_NONE, b"{}", 2);
    let after = at + good.len() + trailer.len();
    assert_eq!(
        with(&[good.clone(), trailer, good.clone()]),
        format!("corrupt block at offset {after}: unexpected data after the trailer block")
    );
    // A record the block's CRC vouches for, but this version cannot decode.
    assert_eq!(
        with(&[
            good,
            block(KIND_RECORDS, COMPRESSION_NONE, &[0x05, 0x01, 0x5f], 3)
        ]),
        format!("corrupt record at offset 2 of the block at offset {second}: unknown tag 0x5f")
    );
}

#[test]
fn a_huge_payload_length_in_a_short_file_is_truncation_not_an_allocation() {
    let mut bytes = header(2, b"{}");
    let mut huge = block(KIND_RECORDS, COMPRESSION_ZSTD, b"abc", 1000);
    huge[8..12].copy_from_slice(&MAX_PAYLOAD_LEN.to_le_bytes());
    bytes.extend_from_slice(&huge);
    let (records, summary) = read_ok(&bytes);
    assert!(records.is_empty());
    assert_eq!(summary.cut_short_at, Some(22));
}

#[test]
fn bounded_fuzz_smoke() {
    fuzz_for(3_000, std::time::Duration::from_secs(20), 1);
}

/// The stand-in for `cargo fuzz` on stable: `MEMTAPE_FUZZ_ITERS` inputs (default 300k) or
/// `MEMTAPE_FUZZ_SECS` seconds (default 120), seed `MEMTAPE_FUZZ_SEED`.
#[test]
#[cfg(feature = "slow-tests")]
fn bounded_fuzz() {
    let env = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|value| value.parse().ok())
            .unwrap_or(default)
    };
    let iterations = env("MEMTAPE_FUZZ_ITERS", 300_000);
    let seconds = env("MEMTAPE_FUZZ_SECS", 120);
    let seed = env("MEMTAPE_FUZZ_SEED", 1);
    let (done, outcomes) = fuzz_for(iterations, std::time::Duration::from_secs(seconds), seed);
    eprintln!(
        "bounded fuzz: {done} inputs, seed {seed}; ok {} / err {}",
        outcomes.0, outcomes.1
    );
}

/// Feeds generated inputs to the reader; a panic fails the test. Returns the number of
/// inputs and `(ok, err)` outcomes.
fn fuzz_for(iterations: u64, limit: std::time::Duration, seed: u64) -> (u64, (u64, u64)) {
    let started = std::time::Instant::now();
    let mut rng = XorShift::new(seed);
    let valid = write_file(&three_blocks(), Some(TRAILER)).bytes;
    let mut outcomes = (0, 0);
    let mut done = 0;
    while done < iterations && started.elapsed() < limit {
        let input = match rng.below(4) {
            0 => rng.bytes(600),
            1 => mutate(&valid, &mut rng),
            2 => random_records_file(&mut rng),
            _ => random_blocks_file(&mut rng),
        };
        let mut records = 0u64;
        let result = CaptureReader::new(&input[..])
            .and_then(|mut reader| reader.for_each_record(|_| records += 1));
        match result {
            Ok(summary) => {
                assert_eq!(summary.records, records);
                outcomes.0 += 1;
            }
            Err(error) => {
                assert!(!error.to_string().is_empty());
                outcomes.1 += 1;
            }
        }
        done += 1;
    }
    (done, outcomes)
}

/// A valid file with a few random edits.
fn mutate(valid: &[u8], rng: &mut XorShift) -> Vec<u8> {
    let mut bytes = valid.to_vec();
    for _ in 0..1 + rng.below(4) {
        let len = bytes.len().max(1) as u64;
        let at = rng.below(len) as usize;
        match rng.below(7) {
            0 => {
                if let Some(byte) = bytes.get_mut(at) {
                    *byte ^= 1 << rng.below(8);
                }
            }
            1 => {
                let value = [0x00, 0xff, 0x7f, 0x80, 0x01, 0x02][rng.below(6) as usize];
                if let Some(byte) = bytes.get_mut(at) {
                    *byte = value;
                }
            }
            2 => bytes.truncate(at),
            3 => bytes.insert(at.min(bytes.len()), rng.next() as u8),
            4 => {
                if at < bytes.len() {
                    bytes.remove(at);
                }
            }
            5 => {
                let value = [
                    0,
                    1,
                    u32::MAX,
                    MAX_PAYLOAD_LEN,
                    MAX_RAW_LEN + 1,
                    0x8000_0000,
                ][rng.below(6) as usize];
                if at + 4 <= bytes.len() {
                    bytes[at..at + 4].copy_from_slice(&value.to_le_bytes());
                }
            }
            _ => {
                let end = (at + rng.below(64) as usize).min(bytes.len());
                let chunk = bytes[at.min(end)..end].to_vec();
                let to = rng.below(bytes.len() as u64 + 1) as usize;
                bytes.splice(to..to, chunk);
            }
        }
    }
    bytes
}

/// A valid header and blocks of random record-like bytes, so the record decoder (behind
/// the CRC) gets exercised.
fn random_records_file(rng: &mut XorShift) -> Vec<u8> {
    let mut writer = CaptureFileWriter::new(Vec::new(), "{}").unwrap();
    for _ in 0..1 + rng.below(3) {
        let mut raw = Vec::new();
        for _ in 0..rng.below(40) {
            raw.push(rng.below(12) as u8);
            for _ in 0..rng.below(6) {
                match rng.below(4) {
                    0 => raw.push(rng.below(0x80) as u8),
                    1 => {
                        let len = raw.len() + rng.below(12) as usize;
                        raw.resize(len, 0xff);
                    }
                    2 => raw.push(rng.next() as u8),
                    _ => varint::put_uv(&mut raw, rng.next() >> rng.below(64)),
                }
            }
        }
        writer.write_block(&raw).unwrap();
    }
    if rng.below(2) == 0 {
        writer.finish("{}").unwrap()
    } else {
        writer.get_ref().clone()
    }
}

/// A valid header and hand-made blocks with correct CRCs but random header fields and
/// zstd frames that may lie about their size.
fn random_blocks_file(rng: &mut XorShift) -> Vec<u8> {
    let mut bytes = header(2, b"{}");
    for _ in 0..1 + rng.below(3) {
        let raw = rng.bytes(300);
        let (compression, payload) = if rng.below(2) == 0 {
            (COMPRESSION_ZSTD, zstd::bulk::compress(&raw, 1).unwrap())
        } else {
            (rng.below(3) as u8, raw.clone())
        };
        let raw_len = match rng.below(3) {
            0 => raw.len() as u32,
            1 => rng.below(1 << 20) as u32,
            _ => payload.len() as u32,
        };
        bytes.extend(block(
            1 + rng.below(2) as u8,
            compression,
            &payload,
            raw_len,
        ));
    }
    bytes
}

/// A `Read` that hands out one byte per call, with an `Interrupted` every fifth call.
struct Trickle<'a>(&'a [u8], u32);

impl Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.1 += 1;
        if self.1 % 5 == 0 {
            return Err(io::ErrorKind::Interrupted.into());
        }
        let Some((&first, rest)) = self.0.split_first() else {
            return Ok(0);
        };
        let Some(slot) = buf.first_mut() else {
            return Ok(0);
        };
        *slot = first;
        self.0 = rest;
        Ok(1)
    }
}

/// xorshift64*: deterministic and good enough for test data.
struct XorShift(u64);

impl XorShift {
    fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform-ish in `0..n` (0 when n is 0).
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
        }
    }

    /// Up to `max_len - 1` random bytes.
    fn bytes(&mut self, max_len: u64) -> Vec<u8> {
        let len = self.below(max_len);
        (0..len).map(|_| self.next() as u8).collect()
    }
}

#[cfg(feature = "slow-tests")]
mod size {
    //! The size and speed measurement on a synthetic Python-like stream.

    use std::time::Instant;

    use super::*;

    /// One generated event.
    #[derive(Clone, Copy)]
    struct Event {
        addr: u64,
        /// 0 for a free.
        size: u32,
        stack: u32,
    }

    /// Where blocks land: pymalloc-like 16 KiB pools carved into one 16-byte size class
    /// each with LIFO reuse of freed blocks; larger requests from a malloc region, also
    /// reusing freed chunks of the same rounded size last-in first-out.
    struct Heap {
        free_lists: Vec<Vec<u64>>,
        bump: Vec<(u64, u64)>,
        next_pool: u64,
        malloc_free: rustc_hash::FxHashMap<u64, Vec<u64>>,
        malloc_next: u64,
    }

    impl Heap {
        const POOL: u64 = 16 << 10;

        fn new() -> Self {
            Self {
                free_lists: vec![Vec::new(); 33],
                bump: vec![(0, 0); 33],
                next_pool: 0x7f3a_1200_0000,
                malloc_free: Default::default(),
                malloc_next: 0x5600_0a00_0000,
            }
        }

        /// Size class of a request: 1..=32 for pymalloc, the rounded size above.
        fn class(size: u64) -> u64 {
            if size <= 512 {
                size.div_ceil(16).max(1)
            } else {
                (size + 15) & !15
            }
        }

        fn alloc(&mut self, size: u64) -> u64 {
            let class = Self::class(size);
            if class <= 32 {
                if let Some(addr) = self.free_lists[class as usize].pop() {
                    return addr;
                }
                let (next, end) = &mut self.bump[class as usize];
                if *next + class * 16 > *end {
                    *next = self.next_pool;
                    *end = self.next_pool + Self::POOL;
                    self.next_pool += Self::POOL;
                }
                let addr = *next;
                *next += class * 16;
                addr
            } else {
                if let Some(addr) = self.malloc_free.get_mut(&class).and_then(Vec::pop) {
                    return addr;
                }
                let addr = self.malloc_next;
                self.malloc_next += class + 16;
                addr
            }
        }

        fn free(&mut self, addr: u64, size: u64) {
            let class = Self::class(size);
            if class <= 32 {
                self.free_lists[class as usize].push(addr);
            } else {
                self.malloc_free.entry(class).or_default().push(addr);
            }
        }
    }

    /// One step of a function body.
    #[derive(Clone, Copy)]
    enum Op {
        /// Allocate object `slot` at call site `stack`, of `size` bytes plus up to `vary`.
        Alloc {
            slot: usize,
            stack: u32,
            size: u64,
            vary: u64,
        },
        /// Free object `slot` of this call.
        Free { slot: usize },
    }

    /// A Python-like program: ~40 functions with fixed bodies (sites with their usual
    /// sizes, temporaries freed in a fixed order, a few objects kept), run in loops within
    /// phases over a handful of functions; some sizes vary per call, some calls take
    /// another branch, and kept objects die in batches. About 400 stacks.
    fn python_like_events(count: usize, seed: u64) -> Vec<Event> {
        const COMMON: [u64; 12] = [24, 28, 32, 40, 48, 56, 64, 72, 80, 104, 136, 232];
        let mut rng = XorShift::new(seed);
        let mut next_stack = 1u32;
        let functions: Vec<Vec<Op>> = (0..40)
            .map(|_| {
                let allocs = 2 + rng.below(20) as usize;
                let mut free_at: Vec<Option<usize>> = Vec::new();
                let mut ops = Vec::new();
                for slot in 0..allocs {
                    // Each site is a stack; sites of one function have nearby ids.
                    let stack = next_stack;
                    next_stack += 1;
                    let (size, vary) = match rng.below(10) {
                        0..=6 => (COMMON[rng.below(12) as usize], 0),
                        7..=8 => (33 + rng.below(200), 8 + rng.below(120)),
                        _ => (600 + rng.below(8000), rng.below(4096)),
                    };
                    ops.push(Op::Alloc {
                        slot,
                        stack,
                        size,
                        vary,
                    });
                    // Temporaries die soon; one in twelve outlives the call.
                    free_at.push(if rng.below(12) == 0 {
                        None
                    } else {
                        Some(slot + rng.below(4) as usize)
                    });
                    for (dead, at) in free_at.iter().enumerate().rev() {
                        if *at == Some(slot) {
                            ops.push(Op::Free { slot: dead });
                        }
                    }
                }
                for (dead, at) in free_at.iter().enumerate().rev() {
                    if matches!(at, Some(at) if *at >= allocs) {
                        ops.push(Op::Free { slot: dead });
                    }
                }
                ops
            })
            .collect();

        let mut heap = Heap::new();
        let mut events = Vec::with_capacity(count + 64);
        let mut kept: Vec<(u64, u64)> = Vec::new();
        let mut slots: Vec<Option<(u64, u64)>> = Vec::new();
        let mut phase: Vec<usize> = Vec::new();
        let mut phase_left = 0usize;
        while events.len() < count {
            if phase_left == 0 {
                phase = (0..3 + rng.below(6))
                    .map(|_| rng.below(functions.len() as u64) as usize)
                    .collect();
                phase_left = 20_000 + rng.below(80_000) as usize;
                // Objects kept across calls die in batches, newest first.
                let keep = kept.len() / 4;
                while kept.len() > keep {
                    let Some((addr, size)) = kept.pop() else {
                        break;
                    };
                    heap.free(addr, size);
                    events.push(Event {
                        addr,
                        size: 0,
                        stack: 0,
                    });
                }
            }
            // A loop: one function of the phase, many times.
            let function = &functions[phase[rng.below(phase.len() as u64) as usize]];
            for _ in 0..1 + rng.below(40) {
                slots.clear();
                slots.resize(function.len(), None);
                // Another branch now and then: one site is skipped.
                let skip = if rng.below(8) == 0 {
                    rng.below(function.len() as u64) as usize
                } else {
                    usize::MAX
                };
                let before = events.len();
                for op in function {
                    match *op {
                        Op::Alloc {
                            slot,
                            stack,
                            size,
                            vary,
                        } => {
                            if slot == skip {
                                continue;
                            }
                            let size = size + rng.below(vary + 1);
                            let addr = heap.alloc(size);
                            slots[slot] = Some((addr, size));
                            events.push(Event {
                                addr,
                                size: size as u32,
                                stack,
                            });
                        }
                        Op::Free { slot } => {
                            if let Some((addr, size)) = slots[slot].take() {
                                heap.free(addr, size);
                                events.push(Event {
                                    addr,
                                    size: 0,
                                    stack: 0,
                                });
                            }
                        }
                    }
                }
                // What the body did not free is kept.
                kept.extend(slots.iter().flatten());
                phase_left = phase_left.saturating_sub(events.len() - before);
            }
        }
        events.truncate(count);
        events
    }

    /// A harder, high-entropy stream: each event drawn at random (stack among a phase's
    /// working set, size jittered, which object dies), nothing repeats exactly.
    fn random_events(count: usize, seed: u64) -> Vec<Event> {
        const STACKS: u64 = 400;
        let mut rng = XorShift::new(seed);
        let sites: Vec<(u64, u64)> = (0..STACKS)
            .map(|_| {
                let class = match rng.below(10) {
                    0..=5 => 2 + rng.below(3),
                    6..=8 => 4 + rng.below(12),
                    _ => 16 + rng.below(16),
                };
                (class, rng.below(3))
            })
            .collect();
        let mut heap = Heap::new();
        let mut live: Vec<(u64, u64)> = Vec::new();
        let mut phase: Vec<u32> = Vec::new();
        let mut events = Vec::with_capacity(count);
        while events.len() < count {
            if events.len() % 20_000 == 0 || phase.is_empty() {
                let base = rng.below(STACKS);
                phase = (0..2 + rng.below(10))
                    .map(|i| ((base + i * (1 + rng.below(3))) % STACKS) as u32 + 1)
                    .collect();
            }
            let threshold = if live.len() > 200_000 { 60 } else { 49 };
            if !live.is_empty() && rng.below(100) < threshold {
                let pick = match rng.below(10) {
                    0..=6 => live.len() - 1,
                    7..=8 => live.len() - 1 - rng.below(live.len().min(64) as u64) as usize,
                    _ => rng.below(live.len() as u64) as usize,
                };
                let (addr, size) = live.swap_remove(pick);
                heap.free(addr, size);
                events.push(Event {
                    addr,
                    size: 0,
                    stack: 0,
                });
                continue;
            }
            let stack = phase[rng.below(phase.len() as u64) as usize];
            let (class, spread) = sites[stack as usize - 1];
            let size = if rng.below(500) == 0 {
                513 + rng.below(64 << 10)
            } else {
                (class + rng.below(spread + 1)).clamp(1, 32) * 16 - rng.below(16)
            };
            let addr = heap.alloc(size);
            live.push((addr, size));
            events.push(Event {
                addr,
                size: size as u32,
                stack,
            });
        }
        events
    }

    struct Measured {
        file_bytes: usize,
        write_s: f64,
        read_s: f64,
        raw_bytes: usize,
    }

    fn measure(events: &[Event], level: i32, block_raw: usize, check: bool) -> Measured {
        let started = Instant::now();
        let mut writer = CaptureFileWriter::with_level(Vec::new(), METADATA, level).unwrap();
        let mut encoder = BlockEncoder::with_capacity(block_raw + 64);
        let mut raw_bytes = 0;
        let mut ns = 0u64;
        for (i, chunk) in events.chunks(4096).enumerate() {
            if i == 0 {
                for stack in 1..=450u32 {
                    encoder.string(stack, "/usr/lib/python3.11/site-packages/pkg/module.py");
                    encoder.frame(stack, stack, stack, 10 + stack);
                    encoder.stack(stack, 0, stack);
                }
            }
            ns += 400_000;
            if encoder.is_empty() || i % 2 == 0 {
                encoder.time(ns);
            }
            for event in chunk {
                if event.size == 0 {
                    encoder.free(None, event.addr);
                } else {
                    encoder.alloc(0, event.addr, u64::from(event.size), event.stack);
                }
                if encoder.len() >= block_raw {
                    raw_bytes += encoder.len();
                    writer.write_block(encoder.as_bytes()).unwrap();
                    encoder.clear();
                    encoder.time(ns);
                }
            }
        }
        raw_bytes += encoder.len();
        writer.write_block(encoder.as_bytes()).unwrap();
        let bytes = writer.finish(TRAILER).unwrap();
        let write_s = started.elapsed().as_secs_f64();

        let started = Instant::now();
        let mut reader = CaptureReader::new(&bytes[..]).unwrap();
        let mut total_size = 0u64;
        let mut frees = 0u64;
        let summary = reader
            .for_each_record(|record| match record {
                Record::Alloc { size, .. } => total_size += size,
                Record::Free { .. } => frees += 1,
                _ => {}
            })
            .unwrap();
        let read_s = started.elapsed().as_secs_f64();
        assert_eq!(summary.events, events.len() as u64);
        assert!(summary.complete);
        if check {
            let expected: u64 = events.iter().map(|event| u64::from(event.size)).sum();
            assert_eq!(total_size, expected);
            assert_eq!(
                frees,
                events.iter().filter(|event| event.size == 0).count() as u64
            );
        }
        Measured {
            file_bytes: bytes.len(),
            write_s,
            read_s,
            raw_bytes,
        }
    }

    /// `cargo test --release -p memtape-core capture -- --ignored --nocapture`
    #[test]
    #[cfg(feature = "slow-tests")]
    fn capture_size_and_speed() {
        let count: usize = std::env::var("MEMTAPE_SIZE_EVENTS")
            .ok()
            .and_then(|value| value.parse().ok())
            .unwrap_or(20_000_000);
        let tune = std::env::var_os("MEMTAPE_SIZE_TUNE").is_some();
        let configs: &[(i32, usize)] = if tune {
            &[
                (1, 256 << 10),
                (2, 256 << 10),
                (3, 256 << 10),
                (5, 256 << 10),
                (3, 64 << 10),
                (3, 1 << 20),
                (1, 1 << 20),
            ]
        } else {
            &[(ZSTD_LEVEL, 256 << 10)]
        };
        type Generator = fn(usize, u64) -> Vec<Event>;
        let streams: [(&str, Generator); 2] = [
            ("python-like", python_like_events),
            ("random (high entropy)", random_events),
        ];
        for (name, generate) in streams {
            let started = Instant::now();
            let events = generate(count, 42);
            let frees = events.iter().filter(|event| event.size == 0).count();
            eprintln!(
                "{name}: {count} events ({frees} frees) generated in {:.2} s",
                started.elapsed().as_secs_f64()
            );
            for &(level, block_raw) in configs {
                let m = measure(&events, level, block_raw, true);
                let per_event = m.file_bytes as f64 / count as f64;
                eprintln!(
                    "  level {level}, blocks of {} KiB raw: {per_event:.3} bytes/event \
                     ({:.3} raw), {} bytes; write {:.3} s ({:.1} ns/event), \
                     read {:.3} s ({:.1} ns/event, {:.0} M events/s)",
                    block_raw >> 10,
                    m.raw_bytes as f64 / count as f64,
                    m.file_bytes,
                    m.write_s,
                    m.write_s * 1e9 / count as f64,
                    m.read_s,
                    m.read_s * 1e9 / count as f64,
                    count as f64 / m.read_s / 1e6,
                );
                if name == "python-like" && level == ZSTD_LEVEL && block_raw == 256 << 10 {
                    assert!(per_event <= 2.0, "{per_event} bytes/event");
                }
            }
        }
    }
}
