//! The size and speed measurement on a synthetic Python-like stream.

use std::time::Instant;

use super::super::*;
use super::owned::{METADATA, TRAILER};
use super::synthetic_stream::*;

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

/// The capture's size target: 2 bytes per event or less on a Python-like stream (each
/// configuration also reads back to the same events). Times are printed, not asserted.
/// Run by `MEMTAPE_SLOW_TESTS=1 bash scripts/test.sh`, or alone (`MEMTAPE_SIZE_TUNE=1`
/// compares zstd levels and block sizes):
/// `cargo nextest run --release -p memtape-core --features slow-tests -E 'test(capture_size)' --no-capture`
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
