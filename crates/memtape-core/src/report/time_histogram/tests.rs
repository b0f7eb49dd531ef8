//! Tests of [`time_histogram`](super).

use super::*;
use crate::report::live_by_stack::{st, total_bytes};

fn row(stack: u32, alloc: u16, freed: u16, bytes: u64, count: u64) -> HistRow {
    HistRow {
        stack,
        alloc,
        freed,
        bytes,
        count,
    }
}

/// Four buckets. Stack 1: 100 B live in bucket 0 only (freed in 1). Stack 2: 50 B
/// from bucket 1 to 3, and 7 B from 2 never freed. Stack 3: 10 B from 0, never freed.
fn hist() -> TimeHistogram {
    TimeHistogram {
        bucket_ns: 1000,
        buckets: 4,
        rows: vec![
            row(1, 0, 1, 100, 2),
            row(2, 1, 3, 50, 1),
            row(2, 2, 4, 7, 1),
            row(3, 0, 4, 10, 1),
        ],
    }
}

#[test]
fn live_at_each_bucket_end() {
    let h = hist();
    assert_eq!(h.live_at(0), vec![st(1, 100, 2), st(3, 10, 1)]);
    assert_eq!(h.live_at(1), vec![st(2, 50, 1), st(3, 10, 1)]);
    assert_eq!(h.live_at(2), vec![st(2, 57, 2), st(3, 10, 1)]);
    assert_eq!(h.live_at(3), vec![st(2, 7, 1), st(3, 10, 1)]);
}

#[test]
fn windows_keep_what_they_allocated_and_did_not_free() {
    let h = hist();
    // Bucket 0 alone: stack 1's blocks are still live at its end.
    assert_eq!(h.window(0, 0), vec![st(1, 100, 2), st(3, 10, 1)]);
    // 0..=1: stack 1 freed them in bucket 1.
    assert_eq!(h.window(0, 1), vec![st(2, 50, 1), st(3, 10, 1)]);
    // 2..=3: only what bucket 2 allocated and kept.
    assert_eq!(h.window(2, 3), vec![st(2, 7, 1)]);
    // The whole run: the leaks.
    assert_eq!(h.window(0, 3), vec![st(2, 7, 1), st(3, 10, 1)]);
}

/// The sum of the kept and lumped tables of a query equals the full one.
fn assert_exact(h: &TimeHistogram, b: &BoundedHistogram) {
    for t in 0..h.buckets {
        let full = total_bytes(&h.live_at(t));
        assert_eq!(
            total_bytes(&b.kept.live_at(t)) + total_bytes(&b.other.live_at(t)),
            full
        );
        for a in 0..=t {
            let full = h.window(a, t);
            let kept = b.kept.window(a, t);
            let other = b.other.window(a, t);
            assert_eq!(total_bytes(&kept) + total_bytes(&other), total_bytes(&full));
            let count = |x: &[StackTotal]| x.iter().map(|s| s.count).sum::<u64>();
            assert_eq!(count(&kept) + count(&other), count(&full));
            // A kept stack's numbers are its own, unchanged.
            for k in &kept {
                assert!(full.contains(k));
            }
        }
    }
}

#[test]
fn lumping_keeps_totals_exact() {
    let h = hist();
    // Room for the lumped rows (4 bucket pairs in use) and two more rows.
    let b = h.bounded(&[st(1, 100, 2)], 4 + 2);
    let kept: FxHashSet<u32> = b.kept.rows.iter().map(|r| r.stack).collect();
    // Every stack tops something (1 the peak, 2 bucket 1, 3 the leaks); in id order,
    // 1 fits, 2's two rows do not fit the one row left, 3 does.
    assert_eq!(kept, [1, 3].into_iter().collect());
    assert!(b.other.rows.iter().all(|r| r.stack == 0));
    assert_exact(&h, &b);
    // With no room, everything is lumped; with plenty, nothing is.
    let none = h.bounded(&[], 0);
    assert!(none.kept.rows.is_empty());
    assert_exact(&h, &none);
    let all = h.bounded(&[], 1000);
    assert_eq!(all.kept, h);
    assert!(all.other.rows.is_empty());
}

#[test]
fn many_small_stacks_lump_into_other() {
    // 1,000 stacks, each live over a different stretch of 64 buckets; one big stack
    // that matters everywhere.
    let mut rows = vec![row(5000, 0, 64, 1 << 30, 1)];
    for s in 0..1000u32 {
        let a = (s % 60) as u16;
        rows.push(row(s, a, a + 1 + (s % 3) as u16, u64::from(s) + 1, 1));
    }
    rows.sort_unstable_by_key(|r| (r.stack, r.alloc, r.freed));
    let h = TimeHistogram {
        bucket_ns: 1,
        buckets: 64,
        rows,
    };
    let pairs: FxHashSet<(u16, u16)> = h.rows.iter().map(|r| (r.alloc, r.freed)).collect();
    let b = h.bounded(&[], 200 + pairs.len());
    assert!(b.kept.rows.len() <= 200, "{}", b.kept.rows.len());
    assert!(b.kept.rows.len() >= 100, "{}", b.kept.rows.len());
    assert!(b.kept.rows.iter().any(|r| r.stack == 5000));
    assert!(b.other.rows.len() <= pairs.len());
    assert_exact(&h, &b);
}
