//! Tests of [`symbols`](super).

use super::*;

fn feed(s: &mut Symbols, records: &[Record<'_>]) {
    for r in records {
        s.feed(r);
    }
}

fn triples(s: &Symbols, stack: u32) -> Vec<(&str, &str, u32)> {
    s.frames_of(stack)
        .into_iter()
        .map(|f| (f.filename, f.function, f.line))
        .collect()
}

#[test]
fn frames_are_innermost_first_and_stacks_may_come_late() {
    let mut s = Symbols::new();
    feed(
        &mut s,
        &[
            Record::Stack {
                id: 7,
                parent: 3,
                frame: 2,
            },
            Record::String {
                id: 1,
                value: "a.py",
            },
            Record::String { id: 2, value: "f" },
            Record::String { id: 3, value: "g" },
            Record::Frame {
                id: 1,
                filename: 1,
                name: 2,
                line: 10,
            },
            Record::Frame {
                id: 2,
                filename: 1,
                name: 3,
                line: 20,
            },
            Record::Stack {
                id: 3,
                parent: 0,
                frame: 1,
            },
        ],
    );
    assert_eq!(triples(&s, 7), vec![("a.py", "g", 20), ("a.py", "f", 10)]);
    assert_eq!(triples(&s, 3), vec![("a.py", "f", 10)]);
    assert!(triples(&s, 0).is_empty());
}

#[test]
fn files_show_as_their_given_names_and_launcher_files_match_recorded_names() {
    let mut s = Symbols::new();
    feed(
        &mut s,
        &[
            Record::String {
                id: 1,
                value: "/tmp/ipykernel_1/42.py",
            },
            Record::String {
                id: 2,
                value: "/tmp/ipykernel_1/7.py",
            },
            Record::String { id: 3, value: "f" },
            Record::Frame {
                id: 1,
                filename: 1,
                name: 3,
                line: 5,
            },
            Record::Frame {
                id: 2,
                filename: 2,
                name: 3,
                line: 1,
            },
            Record::Stack {
                id: 1,
                parent: 0,
                frame: 2,
            },
            Record::Stack {
                id: 2,
                parent: 1,
                frame: 1,
            },
        ],
    );
    let names = [
        ("/tmp/ipykernel_1/42.py".to_owned(), "Cell In[3]".to_owned()),
        ("/tmp/ipykernel_1/7.py".to_owned(), "Cell In[3]".to_owned()),
    ];
    s.show_files_as(&names.into_iter().collect());
    s.hide_launcher_frames(vec!["/tmp/ipykernel_1/7.py".into()]);
    assert_eq!(triples(&s, 2), vec![("Cell In[3]", "f", 5)]);
}

#[test]
fn unresolved_stacks_frames_and_cycles() {
    let mut s = Symbols::new();
    feed(
        &mut s,
        &[
            Record::Stack {
                id: 5,
                parent: 99,
                frame: 42,
            },
            Record::Stack {
                id: 8,
                parent: 9,
                frame: 42,
            },
            Record::Stack {
                id: 9,
                parent: 8,
                frame: 42,
            },
        ],
    );
    let u = (UNRESOLVED, UNRESOLVED, 0);
    assert_eq!(triples(&s, 1234), vec![u]);
    // Frame 42 is undefined and so is parent 99.
    assert_eq!(triples(&s, 5), vec![u, u]);
    // A cycle ends instead of looping.
    let cycle = triples(&s, 8);
    assert_eq!(cycle.len(), 4);
    assert_eq!(cycle[3], u);
}
