//! Tests of [`html_report`](super).

use super::*;
use crate::report::record::Record;
use crate::report::replay::{Replay, ReplayOptions};

const HOSTILE_SCRIPT: &str = "</script><script>alert(1)</script>";
const HOSTILE_ATTR: &str = "\"><img src=x onerror=alert(1)>";

fn records() -> Vec<Record<'static>> {
    vec![
        Record::String {
            id: 1,
            value: "app.py",
        },
        Record::String {
            id: 2,
            value: HOSTILE_SCRIPT,
        },
        Record::String {
            id: 3,
            value: HOSTILE_ATTR,
        },
        Record::Frame {
            id: 1,
            filename: 1,
            name: 2,
            line: 4,
        },
        Record::Frame {
            id: 2,
            filename: 3,
            name: 3,
            line: 8,
        },
        Record::Time { ns: 1_000 },
        Record::Alloc {
            domain: 0,
            addr: 0x1000,
            size: 4096,
            stack: 1,
        },
        Record::Alloc {
            domain: 0,
            addr: 0x3000,
            size: 100,
            stack: 2,
        },
        Record::Marker {
            label: HOSTILE_SCRIPT,
        },
        Record::Time { ns: 2_000_000 },
        Record::Free {
            domain: None,
            addr: 0x1000,
        },
        Record::Alloc {
            domain: 0,
            addr: 0x5000,
            size: 7,
            stack: 77,
        },
        Record::Stack {
            id: 1,
            parent: 0,
            frame: 1,
        },
        Record::Stack {
            id: 2,
            parent: 1,
            frame: 2,
        },
    ]
}

fn report(run: &RunInfo) -> String {
    let mut symbols = Symbols::new();
    let mut replay = Replay::new(ReplayOptions::default());
    for r in &records() {
        symbols.feed(r);
        replay.feed(r);
    }
    html_report(
        run,
        &replay.finish(),
        &symbols,
        &HtmlReportOptions::default(),
    )
}

#[test]
fn report_has_its_sections_and_no_network() {
    let run = RunInfo {
        argv: vec!["app.py".into(), HOSTILE_ATTR.into()],
        python: Some("3.11.7".into()),
        pid: Some(1234),
        cut_short: true,
        ..RunInfo::default()
    };
    let html = report(&run);
    for id in [
        "id=\"run-metadata\"",
        "id=\"memory-chart\"",
        "id=\"peak-marker\"",
        "id=\"flamegraph\"",
        "id=\"top-sites\"",
        "id=\"leaks\"",
        "data-key=\"cut-short\"",
    ] {
        assert!(html.contains(id), "missing {id}");
    }
    assert!(!html.to_lowercase().contains("http"));
    assert!(!html.contains("innerHTML"));
    assert!(html.contains("id=\"peak-bytes\" data-bytes=\"4196\""));
    // Top sites at the peak: app.py:4 (4096 B), then the hostile file's line 8.
    let top = &html[html.find("id=\"top-sites\"").unwrap()..];
    let rows: Vec<&str> = top.split("<tr class=\"site\"").skip(1).take(2).collect();
    assert!(rows[0].contains("data-bytes=\"4096\""));
    assert!(rows[1].contains("data-bytes=\"100\""));
    // Leaks: the unresolved stack's 7 B and the 100 B block.
    let leaks = &html[html.find("id=\"leaks\"").unwrap()..];
    assert!(leaks.contains("&lt;unresolved&gt;"));
    assert_eq!(leaks.matches("<tr class=\"site\"").count(), 2);
}

#[test]
fn hostile_names_render_as_text() {
    let run = RunInfo {
        argv: vec![HOSTILE_SCRIPT.into(), HOSTILE_ATTR.into()],
        source: Some(HOSTILE_ATTR.into()),
        ..RunInfo::default()
    };
    let html = report(&run);
    assert!(!html.contains(HOSTILE_SCRIPT));
    assert!(!html.contains(HOSTILE_ATTR));
    assert!(!html.contains("<img"));
    // The script, the flame graph's data, the time-window data and the CSV.
    assert_eq!(html.matches("<script").count(), 4);
    assert_eq!(html.matches("</script>").count(), 4);
    assert!(html.contains("&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;"));
}

#[test]
fn empty_recording_still_renders() {
    let html = html_report(
        &RunInfo::default(),
        &ReplayResult::default(),
        &Symbols::new(),
        &HtmlReportOptions::default(),
    );
    assert!(html.contains("id=\"no-leaks\""));
    assert!(html.contains("id=\"top-sites\" data-rows=\"0\""));
    assert!(!html.contains("NaN"));
}
