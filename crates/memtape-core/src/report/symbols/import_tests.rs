//! Tests of import machinery in [`symbols`](super): the three modes on real-looking stacks.

use super::*;

/// Frames (file, function, line), by id from 1, and stacks as frame ids outermost first
/// (stack ids from 1, each the extension of the trie).
fn symbols(frames: &[(&str, &str, u32)], stacks: &[&[u32]]) -> (Symbols, Vec<u32>) {
    let mut s = Symbols::new();
    let mut strings: Vec<String> = Vec::new();
    let mut string = |s: &mut Symbols, v: &str| -> u32 {
        if let Some(i) = strings.iter().position(|x| x == v) {
            return i as u32 + 1;
        }
        strings.push(v.to_owned());
        let id = strings.len() as u32;
        s.feed(&Record::String { id, value: v });
        id
    };
    for (i, &(file, function, line)) in frames.iter().enumerate() {
        let filename = string(&mut s, file);
        let name = string(&mut s, function);
        s.feed(&Record::Frame {
            id: i as u32 + 1,
            filename,
            name,
            line,
        });
    }
    let mut next = 1u32;
    let mut tips = Vec::new();
    let mut trie: Vec<(u32, u32, u32)> = Vec::new(); // (parent, frame, id)
    for path in stacks {
        let mut parent = 0;
        for &frame in *path {
            parent = match trie.iter().find(|t| t.0 == parent && t.1 == frame) {
                Some(t) => t.2,
                None => {
                    s.feed(&Record::Stack {
                        id: next,
                        parent,
                        frame,
                    });
                    trie.push((parent, frame, next));
                    next += 1;
                    next - 1
                }
            };
        }
        tips.push(parent);
    }
    (s, tips)
}

const FRAMES: [(&str, &str, u32); 8] = [
    ("/home/me/main.py", "<module>", 3), // 1: import pandas
    ("<frozen importlib._bootstrap>", "_find_and_load", 1176), // 2
    ("<frozen importlib._bootstrap_external>", "exec_module", 940), // 3
    (
        "/v/lib/python3.11/site-packages/pandas/__init__.py",
        "<module>",
        5,
    ), // 4
    ("/v/lib/python3.11/site-packages/pandas/core.py", "table", 9), // 5
    ("<frozen importlib._bootstrap_external>", "get_code", 1073), // 6
    (
        "<frozen importlib._bootstrap_external>",
        "_compile_bytecode",
        729,
    ), // 7
    ("/home/me/main.py", "work", 8),     // 8: after the import
];

/// (1) pandas' own table at import, (2) compiling pandas, (3) the program's own work.
const STACKS: [&[u32]; 3] = [&[1, 2, 3, 4, 5], &[1, 2, 6, 7], &[1, 8]];

fn shown(s: &Symbols, stack: u32) -> Vec<String> {
    s.frames_of(stack)
        .iter()
        .rev()
        .map(|f| {
            format!(
                "{}:{} {}",
                f.filename.rsplit('/').next().unwrap(),
                f.line,
                f.function
            )
        })
        .collect()
}

#[test]
fn frames_are_as_recorded_until_a_mode_is_set_and_with_show() {
    let (mut s, tips) = symbols(&FRAMES, &STACKS);
    assert_eq!(shown(&s, tips[1]).len(), 4);
    s.set_import_frames(ImportFrames::Show);
    assert_eq!(s.import_frames(), ImportFrames::Show);
    assert_eq!(
        shown(&s, tips[1]),
        [
            "main.py:3 <module>",
            "<frozen importlib._bootstrap>:1176 _find_and_load",
            "<frozen importlib._bootstrap_external>:1073 get_code",
            "<frozen importlib._bootstrap_external>:729 _compile_bytecode",
        ]
    );
}

#[test]
fn hide_puts_the_machinery_on_the_importing_line_and_keeps_module_code() {
    let (mut s, tips) = symbols(&FRAMES, &STACKS);
    s.set_import_frames(ImportFrames::Hide);
    assert_eq!(
        shown(&s, tips[0]),
        [
            "main.py:3 <module>",
            "__init__.py:5 <module>",
            "core.py:9 table"
        ]
    );
    assert_eq!(shown(&s, tips[1]), ["main.py:3 <module>"]);
    assert_eq!(shown(&s, tips[2]), ["main.py:3 <module>", "main.py:8 work"]);
}

#[test]
fn fold_sums_each_import_in_one_frame_named_after_the_module() {
    let (mut s, tips) = symbols(&FRAMES, &STACKS);
    s.set_import_frames(ImportFrames::Fold);
    // The compile stack shows no module of its own: it is named from its sibling's.
    for tip in &tips[..2] {
        assert_eq!(
            shown(&s, *tip),
            ["main.py:3 <module>", "main.py:3 [import pandas]"]
        );
    }
    assert_eq!(s.frame_keys(tips[0]), s.frame_keys(tips[1]));
    assert_eq!(shown(&s, tips[2]), ["main.py:3 <module>", "main.py:8 work"]);
}

#[test]
fn a_tower_at_the_outer_end_keeps_one_frame() {
    // Machinery with nothing around it (runpy's find_spec once the launcher is hidden).
    let frames = [
        ("<frozen importlib._bootstrap>", "_find_and_load", 1),
        (
            "<frozen importlib._bootstrap_external>",
            "_compile_bytecode",
            2,
        ),
    ];
    let (mut s, tips) = symbols(&frames, &[&[1, 2]]);
    s.set_import_frames(ImportFrames::Hide);
    assert_eq!(
        shown(&s, tips[0]),
        ["<frozen importlib._bootstrap_external>:2 _compile_bytecode"]
    );
    s.set_import_frames(ImportFrames::Fold);
    let folded = s.frames_of(tips[0]);
    assert_eq!(folded.len(), 1);
    assert_eq!((folded[0].function, folded[0].filename), ("[import]", ""));
}
