//! The series and the ticks, fed once per stretch of events that share a time stamp,
//! against the same fed after every event.

use super::*;
use crate::report::series::MemorySeries;

/// A pseudo-random walk of allocations and frees, with time stamps that mostly rise but
/// repeat and step back now and then.
fn records() -> Vec<Record<'static>> {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |n: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % n
    };
    let mut out = Vec::new();
    let mut live: Vec<u64> = Vec::new();
    let mut time = 0u64;
    for _ in 0..400_000 {
        match next(8) {
            0 | 1 => {
                time = match next(20) {
                    0 => time.saturating_sub(3 << 20),
                    1 => time,
                    _ => time + (1 + next(3)) * (1 << 20),
                };
                out.push(Record::Time { ns: time });
            }
            2..=4 => {
                let addr = 0x10_0000 + 16 * next(50_000);
                live.push(addr);
                out.push(Record::Alloc {
                    domain: if next(10) == 0 { 7 } else { 0 },
                    addr,
                    size: 1 + next(300),
                    stack: 1 + next(5) as u32,
                });
            }
            _ => {
                let addr = if live.is_empty() || next(10) == 0 {
                    0x9000_0000 + next(1000)
                } else {
                    live.swap_remove(next(live.len() as u64) as usize)
                };
                out.push(Record::Free { domain: None, addr });
            }
        }
    }
    out
}

#[test]
fn per_stretch_points_equal_per_event_points() {
    let records = records();
    let options = ReplayOptions {
        max_series_points: 16,
        ..ReplayOptions::default()
    };
    let mut replay = Replay::new(options.clone());
    let mut series = MemorySeries::new(options.max_series_points);
    let mut ticks = Ticks::new(crate::report::DEFAULT_MAX_TICKS);
    let (mut time, mut index) = (0, 0);
    for r in &records {
        replay.feed(r);
        match *r {
            Record::Time { ns } => time = ns,
            Record::Alloc { .. } | Record::Free { .. } => {
                let bytes = replay.current_bytes();
                series.push(time, bytes, index, &replay.by_source);
                ticks.add_stretch(time, bytes, bytes);
                index += 1;
            }
            _ => {}
        }
    }
    let result = replay.finish();
    assert!(
        result.ticks.width_ns() > 1 << 20,
        "the ticks never coarsened"
    );
    assert_eq!(result.series, series.points());
    assert_eq!(result.ticks, ticks);
}
