//! Tests of [`replay`](super).

use super::*;
use crate::report::live_by_stack::st;

fn alloc(addr: u64, size: u64, stack: u32) -> Record<'static> {
    Record::Alloc {
        domain: 0,
        addr,
        size,
        stack,
    }
}

fn free(addr: u64) -> Record<'static> {
    Record::Free { domain: None, addr }
}

fn run(options: ReplayOptions, records: &[Record<'_>]) -> ReplayResult {
    let mut r = Replay::new(options);
    for rec in records {
        r.feed(rec);
    }
    r.finish()
}

#[test]
fn peak_in_the_middle_then_frees() {
    let r = run(
        ReplayOptions::default(),
        &[
            Record::Time { ns: 10 },
            alloc(0x1000, 100, 1),
            alloc(0x2000, 50, 2),
            Record::Time { ns: 20 },
            alloc(0x3000, 30, 1), // peak: 180 at event 2, t=20
            Record::Time { ns: 30 },
            free(0x1000),
            free(0x2000),
            alloc(0x4000, 60, 3), // 90
            Record::Time { ns: 40 },
        ],
    );
    assert_eq!(
        r.peak,
        Peak {
            bytes: 180,
            blocks: 3,
            time_ns: 20,
            event_index: 2
        }
    );
    assert_eq!(r.live_at_peak, vec![st(1, 130, 2), st(2, 50, 1)]);
    assert_eq!(r.live_at_end, vec![st(1, 30, 1), st(3, 60, 1)]);
    assert_eq!((r.end_bytes, r.end_blocks), (90, 2));
    assert_eq!(r.duration_ns, 40);
    assert_eq!(r.events, 6);
    assert_eq!(
        r.totals,
        Totals {
            allocs: 4,
            frees: 2,
            bytes_allocated: 240,
            bytes_freed: 150,
            ..Totals::default()
        }
    );
    assert_eq!(r.series.iter().map(|p| p.bytes).max(), Some(180));
}

#[test]
fn equal_peaks_report_the_first() {
    let r = run(
        ReplayOptions::default(),
        &[
            alloc(0x10, 100, 1),
            Record::Time { ns: 5 },
            free(0x10),
            alloc(0x20, 60, 2),
            alloc(0x30, 40, 3), // 100 again, event 3
            free(0x20),
        ],
    );
    assert_eq!(
        (r.peak.bytes, r.peak.time_ns, r.peak.event_index),
        (100, 0, 0)
    );
    assert_eq!(r.live_at_peak, vec![st(1, 100, 1)]);
}

#[test]
fn peak_at_the_end_is_the_end() {
    let r = run(
        ReplayOptions::default(),
        &[
            alloc(0x10, 1, 1),
            free(0x10),
            alloc(0x20, 5, 2),
            alloc(0x30, 5, 2),
        ],
    );
    assert_eq!((r.peak.bytes, r.peak.event_index), (10, 3));
    assert_eq!(r.live_at_peak, r.live_at_end);
    assert_eq!(r.live_at_peak, vec![st(2, 10, 2)]);
}

#[test]
fn unknown_frees_are_counted_and_harmless() {
    let r = run(
        ReplayOptions::default(),
        &[
            free(0xdead),
            alloc(0x10, 8, 1),
            Record::Free {
                domain: Some(7),
                addr: 0x10,
            },
            free(0x10),
            free(0x10),
        ],
    );
    assert_eq!(r.totals.unknown_frees, 3);
    assert_eq!((r.end_bytes, r.peak.bytes), (0, 8));
    assert!(r.live_at_end.is_empty());
}

#[test]
fn domains_and_replaced_addresses() {
    let r = run(
        ReplayOptions::default(),
        &[
            Record::Alloc {
                domain: 389047,
                addr: 0x100,
                size: 1000,
                stack: 4,
            },
            alloc(0x100, 10, 5),
            free(0x100), // domain 0 first
            alloc(0x200, 20, 5),
            alloc(0x200, 5, 6), // replaces a live block: a fall from 1020
            free(0x100),        // then any other domain
            Record::Dropped { count: 3 },
            Record::Dropped { count: 2 },
        ],
    );
    assert_eq!(r.peak.bytes, 1020);
    assert_eq!(r.live_at_peak, vec![st(4, 1000, 1), st(5, 20, 1)]);
    assert_eq!(r.live_at_end, vec![st(6, 5, 1)]);
    assert_eq!((r.totals.replaced, r.totals.unknown_frees), (1, 0));
    assert_eq!(r.dropped, 5);
}

#[test]
fn markers_and_moments() {
    let r = run(
        ReplayOptions {
            moments: vec![
                Moment::Marker("after-load".into()),
                Moment::Time(15),
                Moment::Marker("never".into()),
                Moment::Time(1_000),
            ],
            ..ReplayOptions::default()
        },
        &[
            Record::Time { ns: 10 },
            alloc(0x10, 100, 1),
            Record::Marker {
                label: "after-load",
            },
            alloc(0x20, 7, 2),
            Record::Time { ns: 20 },
            free(0x10),
        ],
    );
    assert_eq!(
        r.markers,
        vec![MarkerAt {
            label: "after-load".into(),
            time_ns: 10,
            event_index: 1
        }]
    );
    assert_eq!(r.moments[0], Some(vec![st(1, 100, 1)]));
    assert_eq!(r.moments[1], Some(vec![st(1, 100, 1), st(2, 7, 1)]));
    assert_eq!(r.moments[2], None);
    assert_eq!(r.moments[3], Some(vec![st(2, 7, 1)]));
}

#[test]
fn nothing_recorded() {
    let r = run(ReplayOptions::default(), &[]);
    assert_eq!(r, ReplayResult::default());
}

#[test]
fn now_gives_what_finish_would_give_if_the_records_ended_here() {
    let records = [
        Record::Time { ns: 10 },
        alloc(0x1000, 100, 1),
        Record::Time { ns: 20 },
        alloc(0x2000, 50, 2), // 150, rising: the peak so far is now
        Record::Time { ns: 30 },
        free(0x1000),
        alloc(0x3000, 20, 1), // 70: the peak stays 150 at t=20
    ];
    let mut r = Replay::default();
    for (i, rec) in records.iter().enumerate() {
        r.feed(rec);
        let now = r.now();
        let mut alone = Replay::default();
        for earlier in &records[..=i] {
            alone.feed(earlier);
        }
        let live = r.live_table_now();
        let finished = alone.finish();
        assert_eq!(now.peak, finished.peak, "after record {i}");
        assert_eq!(now.peak_by_source, finished.peak_by_source);
        assert_eq!(now.current_bytes, finished.end_bytes);
        assert_eq!(now.current_by_source, finished.end_by_source);
        assert_eq!(now.blocks, finished.end_blocks);
        assert_eq!(now.totals, finished.totals);
        assert_eq!(now.time_ns, finished.duration_ns);
        assert_eq!(live, finished.live_at_end);
    }
    assert_eq!(r.now().peak.bytes, 150);
    assert_eq!(r.live_table_now(), vec![st(1, 20, 1), st(2, 50, 1)]);
}

#[test]
fn series_now_is_the_series_up_to_the_last_time_stamp() {
    let records = [
        Record::Time { ns: 10 },
        alloc(0x1000, 100, 1),
        alloc(0x2000, 50, 2),
        Record::Time { ns: 20 },
        free(0x1000),
        Record::Time { ns: 30 },
        alloc(0x3000, 20, 1), // after the last time stamp: not in the series yet
    ];
    let mut r = Replay::default();
    for rec in &records {
        r.feed(rec);
    }
    let points: Vec<(u64, u64)> = r
        .series_now()
        .iter()
        .map(|p| (p.time_ns, p.bytes))
        .collect();
    assert_eq!(points, [(10, 150), (20, 50)]);
    let mut upto = Replay::default();
    for rec in &records[..6] {
        upto.feed(rec);
    }
    assert_eq!(r.series_now(), upto.finish().series);
}
