//! Format version 3's back references: a free names an allocation earlier in the block,
//! an allocation names a free at its address; both decode to the same records, shrink
//! Python-like streams, and a reference before the block's start is a clean error.

use super::super::record::tag;
use super::super::*;
use super::fuzz::XorShift;
use super::owned::*;

/// A Python-like churn: allocations freed soon after (last in, first out), addresses
/// reused from a small pool, in domain 0 and others, frees with and without a domain.
fn churn(events: usize, seed: u64) -> Vec<Owned> {
    let mut rng = XorShift::new(seed);
    let mut free_pool: Vec<u64> = (0..64).map(|i| 0x7f00_0000_0000 + i * 64).collect();
    let mut live: Vec<(u32, u64)> = Vec::new();
    let mut out = Vec::new();
    while out.len() < events {
        if live.len() < 8 || (rng.below(3) == 0 && !free_pool.is_empty()) {
            let domain = if rng.below(10) == 0 { 389_047 } else { 0 };
            let addr = free_pool
                .pop()
                .unwrap_or(0x5500_0000 + rng.below(1 << 20) * 16);
            live.push((domain, addr));
            out.push(Owned::Alloc {
                domain,
                addr,
                size: 16 + rng.below(200),
                stack: 1 + rng.below(5) as u32,
            });
        } else {
            let at = live.len() - 1 - (rng.below(4) as usize).min(live.len() - 1);
            let (domain, addr) = live.remove(at);
            free_pool.push(addr);
            let domain = (rng.below(2) == 0).then_some(domain);
            out.push(Owned::Free { domain, addr });
        }
    }
    out
}

/// Encodes `records` into `encoder`, counting the AllocReuse and FreeBack records.
fn encode_counting(records: &[Owned], encoder: &mut BlockEncoder) -> (usize, usize) {
    let mut counts = (0, 0);
    for record in records {
        let before = encoder.len();
        record.encode(encoder);
        match encoder.as_bytes()[before] {
            tag::ALLOC_REUSE => counts.0 += 1,
            tag::FREE_BACK | tag::FREE_BACK_IN_DOMAIN => counts.1 += 1,
            _ => {}
        }
    }
    counts
}

#[test]
fn back_references_round_trip_and_shrink_the_block() {
    let records = churn(20_000, 7);
    let mut with = BlockEncoder::new();
    let mut without = BlockEncoder::new().without_back_references();
    let (reuses, frees) = encode_counting(&records, &mut with);
    assert_eq!(encode_counting(&records, &mut without), (0, 0));
    assert!(
        reuses > 1000 && frees > 1000,
        "{reuses} reuses, {frees} back frees"
    );
    assert!(with.len() < without.len());

    // Across several blocks, through the file: the same records come back.
    let blocks: Vec<Vec<Owned>> = records.chunks(3000).map(<[Owned]>::to_vec).collect();
    let sample = write_file(&blocks, Some(TRAILER));
    let (read_back, summary) = read_ok(&sample.bytes);
    assert_eq!(read_back, records);
    assert!(summary.complete);
}

#[test]
fn a_reference_before_the_block_start_is_a_clean_error() {
    for (raw, message) in [
        (
            vec![tag::FREE_BACK, 0],
            "the alloc reference of a FreeBack refers 0 back, before the block's start",
        ),
        (
            vec![tag::ALLOC, 0x10, 8, 2, tag::ALLOC_REUSE, 0, 8, 0],
            "the free reference of an AllocReuse refers 0 back, before the block's start",
        ),
        (
            vec![tag::ALLOC, 0x10, 8, 2, tag::FREE_BACK_IN_DOMAIN, 0, 1],
            "the alloc reference of a FreeBack refers 1 back, before the block's start",
        ),
    ] {
        let mut writer = CaptureFileWriter::new(Vec::new(), METADATA).unwrap();
        writer.write_block(&raw).unwrap();
        let bytes = writer.finish(TRAILER).unwrap();
        let message_read = error_message(&bytes);
        assert!(
            message_read.contains(message),
            "{message_read:?} should contain {message:?}"
        );
    }
}
