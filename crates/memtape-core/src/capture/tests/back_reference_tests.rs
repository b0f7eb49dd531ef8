//! Back references: a free names an allocation earlier in the block (FreeBack in format
//! version 3, FreeStep from version 4), an allocation names a free at its address
//! (AllocReuse); all decode to the same records, shrink Python-like streams, and a
//! reference outside the block's records so far is a clean error.

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

/// Encodes `records` into `encoder`, counting the AllocReuse and FreeStep records.
fn encode_counting(records: &[Owned], encoder: &mut BlockEncoder) -> (usize, usize) {
    let mut counts = (0, 0);
    for record in records {
        let before = encoder.len();
        record.encode(encoder);
        match encoder.as_bytes()[before] {
            tag::ALLOC_REUSE => counts.0 += 1,
            tag::FREE_STEP | tag::FREE_STEP_IN_DOMAIN => counts.1 += 1,
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
        (
            // The largest distance: one past it would overflow (found by the fuzz stand-in).
            [tag::ALLOC, 0x10, 8, 2, tag::FREE_BACK]
                .into_iter()
                .chain([0xff; 9])
                .chain([0x01])
                .collect(),
            "the alloc reference of a FreeBack refers 18446744073709551615 back, before the block's start",
        ),
        (
            vec![tag::FREE_STEP, 1],
            "the alloc reference of a FreeStep names allocation -1 of the block, which has 0",
        ),
        (
            vec![tag::ALLOC, 0x10, 8, 2, tag::FREE_STEP_IN_DOMAIN, 0, 2],
            "the alloc reference of a FreeStep names allocation 1 of the block, which has 1",
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

/// A list of `OBJECTS` built then dropped, as deep_recursion does: four size classes in
/// pools of their own (256 KiB in all), interleaved as the loop builds its items, then
/// freed in the order they were built. Each free is a FreeStep one on from the last: two
/// bytes. Address deltas, or distances from the latest allocation, take three.
#[test]
fn frees_in_build_order_take_two_bytes_each() {
    const OBJECTS: u64 = 4000;
    let addr = |i: u64| 0x7f00_0000_0000 + (i % 4) * 0x1_0000 + (i / 4) * 64;
    let mut encoder = BlockEncoder::new();
    let mut records = Vec::new();
    for i in 0..OBJECTS {
        records.push(Owned::Alloc {
            domain: 0,
            addr: addr(i),
            size: 64,
            stack: 3,
        });
        records.last().unwrap().encode(&mut encoder);
    }
    let frees_start = encoder.len();
    for i in 0..OBJECTS {
        records.push(Owned::Free {
            domain: None,
            addr: addr(i),
        });
        records.last().unwrap().encode(&mut encoder);
    }
    let free_bytes = &encoder.as_bytes()[frees_start..];
    assert_eq!(free_bytes.len() as u64, 2 * OBJECTS);
    assert!(free_bytes.chunks(2).all(|free| free[0] == tag::FREE_STEP));

    let sample = write_file(&[records.clone()], Some(TRAILER));
    assert_eq!(read_ok(&sample.bytes).0, records);
}

#[test]
fn far_reuses_are_written_with_their_address() {
    let mut encoder = BlockEncoder::new();
    for i in 0..3000u64 {
        encoder.alloc(0, 0x1000 + i * 16, 16, 1);
    }
    for i in 0..3000u64 {
        encoder.free(None, 0x1000 + i * 16);
    }
    let near = encoder.len();
    encoder.alloc(0, 0x1000 + 2999 * 16, 16, 1);
    assert_eq!(encoder.as_bytes()[near], tag::ALLOC_REUSE);
    let far = encoder.len();
    encoder.alloc(0, 0x1000, 16, 1);
    assert_eq!(encoder.as_bytes()[far], tag::ALLOC);
}
