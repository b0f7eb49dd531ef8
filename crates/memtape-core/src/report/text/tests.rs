//! Tests of [`text`](super).

use super::*;
use crate::report::replay::{MarkerAt, Peak, Totals};

fn frame(file: &str, function: &str, line: u32) -> Frame {
    Frame {
        filename: file.into(),
        function: function.into(),
        line,
    }
}

#[test]
fn top_table_is_aligned() {
    let sites = vec![
        Site {
            frames: vec![frame("app.py", "load", 12), frame("app.py", "<module>", 3)],
            bytes: 12_897_485,
            count: 1234,
        },
        Site {
            frames: vec![],
            bytes: 512,
            count: 1,
        },
        Site {
            frames: vec![frame("b.py", "", 0)],
            bytes: 5,
            count: 1,
        },
    ];
    let text = top_text(&sites, 12_897_485 + 517, 2);
    assert_eq!(
        text,
        concat!(
            "#      Size   Share  Count  Location\n",
            "1  12.3 MiB  100.0%  1,234  app.py:12 in load\n",
            "                            called from app.py:3 in <module>\n",
            "2     512 B    0.0%      1  [no Python frame]\n",
            "... and 1 more sites (5 B)\n",
        )
    );
}

#[test]
fn diff_table_signs_and_totals() {
    let rows = vec![SiteDiff {
        frames: vec![frame("a.py", "f", 1)],
        bytes: 2048,
        bytes_diff: -1024,
        count: 2,
        count_diff: -1,
    }];
    assert_eq!(
        diff_text(&rows, 10),
        concat!(
            "   Size      Diff  Count  Diff  Location\n",
            "2.0 KiB  -1.0 KiB      2    -1  a.py:1 in f\n",
            "Total: 2.0 KiB (-1.0 KiB)\n",
        )
    );
}

#[test]
fn stats_mention_cut_short_and_markers() {
    let run = RunInfo {
        argv: vec!["app.py".into(), "--fast".into()],
        cut_short: true,
        ..RunInfo::default()
    };
    let r = ReplayResult {
        totals: Totals {
            allocs: 3,
            frees: 1,
            bytes_allocated: 3000,
            bytes_freed: 1000,
            unknown_frees: 1,
            ..Totals::default()
        },
        peak: Peak {
            bytes: 2048,
            blocks: 2,
            time_ns: 1_500_000_000,
            event_index: 2,
        },
        duration_ns: 2_000_000_000,
        markers: vec![MarkerAt {
            label: "loaded".into(),
            time_ns: 1_000_000,
            event_index: 1,
        }],
        ..ReplayResult::default()
    };
    let text = stats_text(&run, &r);
    assert!(text.contains("Command line: app.py --fast\n"), "{text}");
    assert!(text.contains("Duration:     2.000 s (cut short"), "{text}");
    assert!(text.contains("Peak memory:  2.0 KiB in 2 blocks at 1.500 s (event 2)"));
    assert!(text.contains("1 block not seen allocated (from before the capture)"));
    assert!(text.contains("Marker:       loaded at 1.0 ms (event 1)"));
    let f = frame("evil\u{1b}[2J.py", "f\n", 3);
    assert_eq!(frame_location(&f), "evil\\u{1b}[2J.py:3 in f\\n");
}
