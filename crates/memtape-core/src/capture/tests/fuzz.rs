//! A bounded stand-in for the fuzzer: mutated and random files never panic the reader.

use std::io::{self, Read};

use super::super::format::*;
use super::super::*;
use super::owned::*;

#[test]
pub(super) fn bounded_fuzz_smoke() {
    fuzz_for(3_000, std::time::Duration::from_secs(20), 1);
}

/// The stand-in for `cargo fuzz` on stable: `MEMTAPE_FUZZ_ITERS` inputs (default 300k) or
/// `MEMTAPE_FUZZ_SECS` seconds (default 120), seed `MEMTAPE_FUZZ_SEED`.
#[test]
#[cfg(feature = "slow-tests")]
pub(super) fn bounded_fuzz() {
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
    // Inputs the reader accepts and inputs it refuses: both paths were exercised.
    assert!(outcomes.0 > 0 && outcomes.1 > 0, "{outcomes:?} of {done}");
}

/// Feeds generated inputs to the reader; a panic fails the test. Returns the number of
/// inputs and `(ok, err)` outcomes.
pub(super) fn fuzz_for(
    iterations: u64,
    limit: std::time::Duration,
    seed: u64,
) -> (u64, (u64, u64)) {
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
pub(super) fn mutate(valid: &[u8], rng: &mut XorShift) -> Vec<u8> {
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
pub(super) fn random_records_file(rng: &mut XorShift) -> Vec<u8> {
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
pub(super) fn random_blocks_file(rng: &mut XorShift) -> Vec<u8> {
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
pub(super) struct Trickle<'a>(pub(super) &'a [u8], pub(super) u32);

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
pub(super) struct XorShift(u64);

impl XorShift {
    pub(super) fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    pub(super) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform-ish in `0..n` (0 when n is 0).
    pub(super) fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
        }
    }

    /// Up to `max_len - 1` random bytes.
    pub(super) fn bytes(&mut self, max_len: u64) -> Vec<u8> {
        let len = self.below(max_len);
        (0..len).map(|_| self.next() as u8).collect()
    }
}
