//! Damaged and foreign files: truncation at every byte, byte flips, bad headers and
//! blocks; each is whole blocks or a clean error naming the offset.

use super::super::format::*;
use super::super::Damage;
use super::fuzz::XorShift;
use super::owned::*;

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
    let blocks = block_spans(&sample);
    let mut rng = XorShift::new(0x5eed);
    let mut damaged = 0;
    for _ in 0..4000 {
        let mut bytes = sample.bytes.clone();
        let at = rng.below(bytes.len() as u64) as usize;
        bytes[at] ^= 1 + rng.below(255) as u8;
        let (records, result) = read(&bytes);
        let Some(hit) = blocks.iter().position(|b| b.bytes.contains(&at)) else {
            // The file header: refused, or a flip in a field readers ignore.
            assert!(at < metadata_end);
            match result {
                Ok(summary) => {
                    // An older format version (which reads the same) or the flags.
                    assert!(
                        (8..12).contains(&at),
                        "a flip at {at} in the header went unseen"
                    );
                    assert_eq!((records, summary.damage), (sample.records.clone(), vec![]));
                }
                Err(error) => assert!(!error.to_string().is_empty()),
            }
            continue;
        };
        let block = &blocks[hit];
        let summary = result.unwrap_or_else(|error| panic!("flip at {at}: {error}"));
        let in_header = at - block.bytes.start;
        if (6..8).contains(&in_header) {
            // The reserved bytes: not read.
            assert_eq!((&records, summary.damage.len()), (&sample.records, 0));
            continue;
        }
        damaged += 1;
        if (4..6).contains(&in_header) {
            // Kind and compression are outside the checksum: a block may then read as
            // another kind (records as a trailer). The blocks before it read whole.
            assert_eq!(
                records[..block.records.start],
                sample.records[..block.records.start]
            );
            assert!(!summary.damage.is_empty(), "flip at {at}");
            continue;
        }
        // Everything but the damaged block reads, and the damage names it.
        let mut expected = sample.records.clone();
        expected.drain(block.records.clone());
        assert_eq!(records, expected, "flip at {at} in block {hit}");
        let next = blocks.get(hit + 1).map(|b| b.bytes.start as u64);
        assert_eq!(
            summary.damage.len(),
            1,
            "flip at {at}: {:?}",
            summary.damage
        );
        let damage = &summary.damage[0];
        assert_eq!(damage.offset, block.bytes.start as u64, "flip at {at}");
        assert_eq!(damage.resumed_at, next, "flip at {at}");
        let end = next.unwrap_or(sample.bytes.len() as u64);
        assert_eq!(damage.skipped_bytes, end - damage.offset, "flip at {at}");
        assert_eq!(
            summary.blocks,
            blocks.len() as u64 - 2 + u64::from(next.is_none())
        );
        assert_eq!(summary.complete, next.is_some(), "flip at {at}");
    }
    assert!(damaged > 3000, "{damaged}");
}

/// Where a block lies in a sample file, and which of its records it holds.
struct BlockSpan {
    bytes: std::ops::Range<usize>,
    records: std::ops::Range<usize>,
}

/// The records blocks and the trailer of `sample`, in file order.
fn block_spans(sample: &Sample) -> Vec<BlockSpan> {
    let mut spans = Vec::new();
    let mut start = sample.header_len as usize;
    let mut first_record = 0;
    for &(end, records) in &sample.block_ends {
        spans.push(BlockSpan {
            bytes: start..end as usize,
            records: first_record..records,
        });
        (start, first_record) = (end as usize, records);
    }
    spans.push(BlockSpan {
        bytes: start..sample.bytes.len(),
        records: first_record..first_record,
    });
    spans
}

#[test]
fn a_damaged_block_in_the_middle_is_read_around() {
    let sample = write_file(&three_blocks(), Some(TRAILER));
    let blocks = block_spans(&sample);
    let middle = &blocks[1];
    let mut bytes = sample.bytes.clone();
    // The middle block's magic and its whole payload overwritten.
    for byte in &mut bytes[middle.bytes.clone()] {
        *byte = 0x55;
    }
    let (records, summary) = read_ok(&bytes);
    assert_eq!(
        records[..blocks[0].records.end],
        sample.records[..blocks[0].records.end]
    );
    assert_eq!(
        records[blocks[0].records.end..],
        sample.records[blocks[2].records.clone()]
    );
    assert_eq!((summary.blocks, summary.complete), (2, true));
    assert_eq!(
        summary.damage,
        vec![Damage {
            offset: middle.bytes.start as u64,
            resumed_at: Some(middle.bytes.end as u64),
            skipped_bytes: middle.bytes.len() as u64,
            records_read: 0,
            reason: "no MTBK block magic".to_owned(),
        }]
    );
}

#[test]
fn a_damaged_length_is_read_around_not_taken_for_truncation() {
    let sample = write_file(&three_blocks(), Some(TRAILER));
    let blocks = block_spans(&sample);
    let first = blocks[0].bytes.start;
    let mut bytes = sample.bytes.clone();
    // The first block's payload length far past the end of the file.
    bytes[first + 8..first + 12].copy_from_slice(&(1u32 << 20).to_le_bytes());
    let (records, summary) = read_ok(&bytes);
    assert_eq!(records, sample.records[blocks[1].records.start..]);
    assert!(summary.complete && summary.cut_short_at.is_none());
    assert_eq!(summary.damage.len(), 1);
    assert_eq!(
        summary.damage[0].reason,
        "its length (1048576 bytes) runs past the end of the file"
    );
    assert_eq!(
        summary.damage[0].resumed_at,
        Some(blocks[1].bytes.start as u64)
    );
}

#[test]
fn every_damaged_block_is_listed_and_no_readable_block_is_an_error() {
    let sample = write_file(&three_blocks(), None);
    let blocks = block_spans(&sample);
    let flip = |bytes: &mut Vec<u8>, block: usize| bytes[blocks[block].bytes.end - 1] ^= 0x80;
    let mut two = sample.bytes.clone();
    flip(&mut two, 0);
    flip(&mut two, 2);
    let (records, summary) = read_ok(&two);
    assert_eq!(records, sample.records[blocks[1].records.clone()]);
    let offsets: Vec<_> = summary
        .damage
        .iter()
        .map(|d| (d.offset, d.resumed_at))
        .collect();
    let at = |block: usize| blocks[block].bytes.start as u64;
    assert_eq!(offsets, [(at(0), Some(at(1))), (at(2), None)]);
    assert_eq!(summary.cut_short_at, None);
    let mut all = two.clone();
    flip(&mut all, 1);
    assert_eq!(
        error_message(&all),
        format!(
            "corrupt block at offset {}: checksum mismatch; no records block after it checks out",
            at(0)
        )
    );
}

#[test]
fn a_file_full_of_false_block_headers_is_searched_in_bounded_time() {
    // After a damaged first block, 1 MiB of block headers that each look valid and claim
    // a 512 KiB payload their checksum does not match: without a bound, 26 GB of checksums.
    let mut bytes = header(2, b"{}");
    let good = block(KIND_RECORDS, COMPRESSION_NONE, &[0x05, 0x00], 2);
    let mut bad = good.clone();
    bad[20] ^= 1;
    bytes.extend_from_slice(&good);
    bytes.extend_from_slice(&bad);
    let fake = {
        let mut fake = block(KIND_RECORDS, COMPRESSION_NONE, &[], 0);
        fake[8..16].copy_from_slice(&[0, 0, 8, 0, 0, 0, 8, 0]); // P = R = 512 KiB
        fake
    };
    while bytes.len() < (1 << 20) {
        bytes.extend_from_slice(&fake);
    }
    let started = std::time::Instant::now();
    let (records, summary) = read_ok(&bytes);
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    assert_eq!(records, [Owned::Time(0)]);
    let damage = &summary.damage[0];
    assert!(
        damage.reason.starts_with(
            "checksum mismatch; the search for a good block after it gave up at offset"
        ),
        "{}",
        damage.reason
    );
    assert_eq!(damage.resumed_at, None);
}

#[test]
fn foreign_input_is_a_clean_error() {
    let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x10\0\0\0\x10\x08\x06\0\0\0";
    let cases: [(&[u8], &str); 7] = [
        (b"", "not a memtape capture (the file is empty: no MEMTAPE magic at offset 0)"),
        (png, "not a memtape capture (no MEMTAPE magic at offset 0)"),
        (
            b"\x1f\x8b\x08\0",
            "not a memtape capture: this is a gzip-compressed file: if it holds a capture, decompress it first (gunzip -k FILE)",
        ),
        (
            b"memray\0\x0d\0\0\0\x0b\x03",
            "not a memtape capture: this is a memray capture (memray's own reader opens it: memray stats FILE)",
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
            "unsupported capture format version 7 at offset 8 (this memtape reads 1 to 4): a newer memtape wrote it, or the file is damaged",
        ),
    ];
    for (bytes, message) in cases {
        assert_eq!(error_message(bytes), message);
    }
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
    let bytes_of = |blocks: &[Vec<u8>]| {
        let mut bytes = start.clone();
        for block in blocks {
            bytes.extend_from_slice(block);
        }
        bytes
    };
    // A damaged block alone: nothing to read, an error.
    let with = |blocks: &[Vec<u8>]| error_message(&bytes_of(blocks));
    // A good block first: read, and the damage listed.
    let after_good = |blocks: &[Vec<u8>]| {
        let (_, summary) = read_ok(&bytes_of(blocks));
        assert_eq!(summary.blocks, 1);
        let [damage] = &summary.damage[..] else {
            panic!("{:?}", summary.damage)
        };
        format!("{}: {}", damage.offset, damage.reason)
    };
    let lone = |reason: &str| {
        format!("corrupt block at offset {at}: {reason}; no records block after it checks out")
    };
    let time = [0x05, 0x00];
    let good = block(KIND_RECORDS, COMPRESSION_NONE, &time, 2);
    let second = at + good.len();
    let mut bad_crc = good.clone();
    bad_crc[20] ^= 0x40;
    assert_eq!(
        after_good(&[good.clone(), bad_crc.clone()]),
        format!("{second}: checksum mismatch")
    );
    assert_eq!(with(&[bad_crc]), lone("checksum mismatch"));
    assert_eq!(
        after_good(&[good.clone(), b"MTBX".to_vec()]),
        format!("{second}: no MTBK block magic")
    );
    assert_eq!(with(&[b"PK\x03\x04".to_vec()]), lone("no MTBK block magic"));
    assert_eq!(
        with(&[block(3, COMPRESSION_NONE, &time, 2)]),
        lone("unknown block kind 3")
    );
    assert_eq!(
        with(&[block(KIND_RECORDS, 2, &time, 2)]),
        lone("unknown compression 2")
    );
    assert_eq!(
        with(&[block(KIND_RECORDS, COMPRESSION_NONE, &time, 3)]),
        lone("uncompressed block with payload length 2 but raw length 3")
    );
    assert_eq!(
        with(&[block(
            KIND_RECORDS,
            COMPRESSION_ZSTD,
            &time,
            MAX_RAW_LEN + 1
        )]),
        lone("raw length 268435457 is over the 268435456-byte limit")
    );
    let mut huge = block(KIND_RECORDS, COMPRESSION_ZSTD, &time, 2);
    huge[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
    assert_eq!(
        with(&[huge]),
        lone("payload length 4294967295 is over the 67108864-byte limit")
    );
    assert_eq!(
        with(&[block(KIND_RECORDS, COMPRESSION_ZSTD, &time, 2)]),
        lone("the payload is not a zstd frame")
    );
    let frame = zstd::bulk::compress(&[0x05; 100], 3).unwrap();
    assert_eq!(
        with(&[block(KIND_RECORDS, COMPRESSION_ZSTD, &frame, 99)]),
        lone("the zstd frame holds 100 bytes but the block header says 99")
    );
    assert_eq!(
        after_good(&[
            good.clone(),
            block(KIND_TRAILER, COMPRESSION_ZSTD, &frame, 100)
        ]),
        format!("{second}: the trailer block is compressed")
    );
    assert_eq!(
        after_good(&[
            good.clone(),
            block(KIND_TRAILER, COMPRESSION_NONE, b"\xff", 1)
        ]),
        format!("{second}: the trailer is not UTF-8")
    );
    let trailer = block(KIND_TRAILER, COMPRESSION_NONE, b"{}", 2);
    let after = at + good.len() + trailer.len();
    let (records, summary) = read_ok(&bytes_of(&[good.clone(), trailer, good.clone()]));
    assert_eq!((records, summary.complete), (vec![Owned::Time(0)], true));
    assert_eq!(
        summary.damage,
        [Damage {
            offset: after as u64,
            resumed_at: None,
            skipped_bytes: good.len() as u64,
            records_read: 0,
            reason: "unexpected data after the trailer block".to_owned(),
        }]
    );
    // A record the block's CRC vouches for, but this version cannot decode: the records
    // before it are read, the rest of its block skipped, the next block read.
    let undecodable = block(KIND_RECORDS, COMPRESSION_NONE, &[0x05, 0x01, 0x5f], 3);
    let (records, summary) = read_ok(&bytes_of(&[
        good.clone(),
        undecodable.clone(),
        good.clone(),
    ]));
    assert_eq!(records, [Owned::Time(0), Owned::Time(1), Owned::Time(0)]);
    assert_eq!(
        summary.damage,
        [Damage {
            offset: second as u64,
            resumed_at: Some((second + undecodable.len()) as u64),
            skipped_bytes: undecodable.len() as u64,
            records_read: 1,
            reason: "corrupt record at offset 2 of the block: unknown tag 0x5f".to_owned(),
        }]
    );
    assert_eq!((summary.blocks, summary.records), (2, 3));
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
