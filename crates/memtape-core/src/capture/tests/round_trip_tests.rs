//! Files that round-trip: every record kind, address deltas, many blocks (files old versions
//! wrote are read in old_files_tests).

use super::super::*;
use super::fuzz::{Trickle, XorShift};
use super::owned::*;

#[test]
fn every_record_kind_round_trips() {
    let blocks = vec![every_kind()];
    let sample = write_file(&blocks, Some(TRAILER));
    let mut reader = CaptureReader::new(&sample.bytes[..]).unwrap();
    assert_eq!(reader.metadata_json(), METADATA);
    assert_eq!(reader.version(), super::super::FORMAT_VERSION);
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
            damage: Vec::new(),
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
fn a_block_longer_than_a_pipeline_chunk_round_trips() {
    let mut block = vec![Owned::Time(1), Owned::Marker("start".to_owned())];
    for i in 0..20_000u64 {
        block.push(Owned::Alloc {
            domain: 0,
            addr: 0x1000 + 16 * i,
            size: 16,
            stack: 1,
        });
        if i % 5000 == 0 {
            block.push(Owned::String(i as u32 + 1, format!("s{i}")));
        }
    }
    block.push(Owned::Free {
        domain: Some(7),
        addr: 0x1000,
    });
    let sample = write_file(&[block.clone(), block], Some(TRAILER));
    let (records, summary) = read_ok(&sample.bytes);
    assert_eq!(records, sample.records);
    assert_eq!((summary.blocks, summary.events), (2, 40_002));
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
