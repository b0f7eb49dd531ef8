//! Damaged and foreign files: truncation at every byte, byte flips, bad headers and
//! blocks; each is whole blocks or a clean error naming the offset.

use super::super::format::*;
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
