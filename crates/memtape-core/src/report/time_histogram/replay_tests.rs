//! Tests of [`time_histogram`](super).

use crate::report::record::Record;
use crate::report::replay::{Moment, Replay, ReplayOptions};

/// The histogram's live set at each bucket end equals the replay's own live set
/// taken at that moment, on a random stream of allocations and frees.
#[test]
fn live_at_each_bucket_matches_the_replay() {
    let mut records = Vec::new();
    let mut live: Vec<u64> = Vec::new();
    let mut x = 7u64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for i in 0..20_000u64 {
        if i % 50 == 0 {
            records.push(Record::Time { ns: i * 977 });
        }
        let r = next();
        if live.is_empty() || r % 3 != 0 {
            let addr = 0x1000 + i * 0x40;
            records.push(Record::Alloc {
                domain: 0,
                addr,
                size: 16 + r % 200,
                stack: 1 + (r >> 8) as u32 % 7,
            });
            live.push(addr);
        } else {
            let addr = live.swap_remove((r >> 16) as usize % live.len());
            records.push(Record::Free { domain: None, addr });
        }
    }
    let run = |moments| {
        let mut replay = Replay::new(ReplayOptions {
            moments,
            ..ReplayOptions::default()
        });
        for r in &records {
            replay.feed(r);
        }
        replay.finish()
    };
    let h = run(Vec::new()).time_histogram;
    assert!(h.buckets > 100, "{}", h.buckets);
    // The end of bucket t: after every event stamped before (t + 1) * width.
    let ends: Vec<Moment> = (0..h.buckets)
        .map(|t| Moment::Time((u64::from(t) + 1) * h.bucket_ns - 1))
        .collect();
    let r = run(ends);
    for t in 0..h.buckets {
        assert_eq!(Some(h.live_at(t)), r.moments[usize::from(t)], "bucket {t}");
    }
}
