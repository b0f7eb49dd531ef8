//! Tests of [`flamegraph`](super).

use super::*;
use crate::report::import_frames::ImportFrames;
use crate::report::live_by_stack::st;
use crate::report::record::Record;

const HOSTILE_SCRIPT: &str = "</script><script>alert(1)</script>";
const HOSTILE_ATTR: &str = "\"><img src=x onerror=alert(1)>";

fn symbols() -> Symbols {
    let mut s = Symbols::new();
    let records = [
        Record::String {
            id: 1,
            value: "main.py",
        },
        Record::String {
            id: 2,
            value: "<module>",
        },
        Record::String {
            id: 3,
            value: HOSTILE_SCRIPT,
        },
        Record::String {
            id: 4,
            value: HOSTILE_ATTR,
        },
        Record::String {
            id: 5,
            value: "semi;colon",
        },
        Record::Frame {
            id: 1,
            filename: 1,
            name: 2,
            line: 1,
        },
        Record::Frame {
            id: 2,
            filename: 4,
            name: 3,
            line: 7,
        },
        Record::Frame {
            id: 3,
            filename: 1,
            name: 5,
            line: 9,
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
        Record::Stack {
            id: 3,
            parent: 1,
            frame: 3,
        },
    ];
    for r in &records {
        s.feed(r);
    }
    s
}

#[test]
fn folded_stacks_merge_and_sort() {
    let s = symbols();
    let table = [
        st(1, 10, 1),
        st(3, 5, 1),
        st(0, 3, 1),
        st(99, 2, 1),
        st(2, 0, 1),
    ];
    assert_eq!(
        folded(&table, &s),
        concat!(
            "<module> (main.py:1) 10\n",
            "<module> (main.py:1);semi,colon (main.py:9) 5\n",
            "<unresolved> 2\n",
            "[no Python frame] 3\n",
        )
    );
}

#[test]
fn tree_values_and_json() {
    let s = symbols();
    let table = [st(1, 10, 1), st(3, 5, 1), st(2, 20, 1), st(0, 3, 1)];
    let g = FlameGraph::new(&table, &s);
    assert_eq!(g.total(), 38);
    assert_eq!(g.node_count(), 5);
    let json = g.to_json();
    // Root, then <module> (35) with its children biggest first, then no-frame (3).
    assert!(
        json.contains(r#""nodes":[[-1,38,2],[0,35,2],[1,20,0],[2,5,0],[3,3,0]]"#),
        "{json}"
    );
}

#[test]
fn hostile_names_render_as_text() {
    let s = symbols();
    let html = flamegraph_html(
        &[st(2, 100, 1), st(3, 5, 1)],
        &s,
        HOSTILE_SCRIPT,
        HOSTILE_ATTR,
    );
    assert!(!html.contains(HOSTILE_SCRIPT));
    assert!(!html.contains(HOSTILE_ATTR));
    assert!(!html.contains("<img"));
    assert!(!html.contains("alert(1)</script>"));
    assert!(!html.to_lowercase().contains("http"));
    // One inline script and one data block, nothing else.
    assert_eq!(html.matches("<script").count(), 2);
    assert_eq!(html.matches("</script>").count(), 2);
    assert!(html.contains(r#"\u003c/script\u003e\u003cscript\u003ealert(1)"#));
    assert!(html.contains("&lt;/script&gt;&lt;script&gt;alert(1)"));
    assert!(!html.contains("innerHTML"));
}

#[test]
fn the_page_says_how_it_shows_import_machinery() {
    let mut s = symbols();
    let table = [st(2, 100, 1)];
    let page = |s: &Symbols| flamegraph_html(&table, s, "t", "");
    // Never set: as recorded.
    assert!(page(&s).contains("id=\"import-mode\" data-mode=\"show\""));
    for (mode, name) in [(ImportFrames::Hide, "hide"), (ImportFrames::Fold, "fold")] {
        s.set_import_frames(mode);
        let html = page(&s);
        assert!(
            html.contains(&format!("id=\"import-mode\" data-mode=\"{name}\"")),
            "{html}"
        );
        assert!(html.contains("--imports"));
    }
}
