//! Tests of [`symbols`](super).

use super::*;

#[test]
fn launcher_frames_leave_the_outer_end_but_one_frame_stays() {
    let mut s = Symbols::new();
    let records = [
        Record::String {
            id: 1,
            value: "/lib/memtape/cli/run.py",
        },
        Record::String {
            id: 2,
            value: "<frozen runpy>",
        },
        Record::String {
            id: 3,
            value: "app.py",
        },
        Record::String { id: 4, value: "f" },
        Record::Frame {
            id: 1,
            filename: 1,
            name: 4,
            line: 1,
        },
        Record::Frame {
            id: 2,
            filename: 2,
            name: 4,
            line: 2,
        },
        Record::Frame {
            id: 3,
            filename: 3,
            name: 4,
            line: 3,
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
            parent: 2,
            frame: 3,
        },
        // A launcher frame above the program's: kept (only the outer end goes).
        Record::Stack {
            id: 4,
            parent: 3,
            frame: 2,
        },
    ];
    for r in &records {
        s.feed(r);
    }
    s.hide_launcher_frames(vec!["/lib/memtape/".into(), "<frozen runpy>".into()]);
    let files = |stack| {
        s.frames_of(stack)
            .iter()
            .map(|f| f.filename)
            .collect::<Vec<_>>()
    };
    assert_eq!(files(3), vec!["app.py"]);
    assert_eq!(files(4), vec!["<frozen runpy>", "app.py"]);
    // Launcher code only: the innermost frame stays.
    assert_eq!(files(2), vec!["<frozen runpy>"]);
    assert_eq!(files(0), Vec::<&str>::new());
}
