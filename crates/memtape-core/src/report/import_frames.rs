//! Import machinery in stacks: what counts as it, and the three ways reports show it.
//!
//! **What counts.** A frame is import machinery when its file is importlib's bootstrap
//! (`<frozen importlib._bootstrap>`, `<frozen importlib._bootstrap_external>`, or their
//! source files `importlib/_bootstrap.py` and `importlib/_bootstrap_external.py` when
//! frozen modules are off), zipimport (`<frozen zipimport>`, `zipimport.py`), or one of
//! importlib's own entry points (`importlib/__init__.py`: `import_module`, `reload`;
//! `importlib/util.py`: `find_spec`, the lazy loader; `importlib/_abc.py`), and its
//! function is not a module's top level (`<module>`). Those are the frames Python itself
//! runs between an `import` statement (or `importlib.import_module`) and the first line of
//! the imported module. `importlib.metadata` and `importlib.resources` read files for
//! the program and are not machinery.
//!
//! **The import tower.** Read from the outermost frame in, a tower starts at a machinery
//! frame and runs to the next `<module>` frame that is not machinery: the imported
//! module's own code, which is the program's again. Frames inside a tower that are not
//! machinery themselves (a meta-path finder, pytest's assertion rewriter, a lazy
//! module's `__getattr__`) belong to the import too.
//!
//! **The modes.**
//! - [`ImportFrames::Hide`] (the default) removes each tower: what the machinery itself
//!   allocated (compiled code objects, module objects, finder caches) is attributed to
//!   the line that ran the import, and what a module's top-level code allocated stays on
//!   that module's line, under the importing line.
//! - [`ImportFrames::Fold`] cuts the stack at its outermost tower and ends it with one
//!   frame, `[import NAME]` at the importing line: everything that import did, nested
//!   imports included, summed in one frame ("import pandas cost 20 MiB at line 3").
//! - [`ImportFrames::Show`] keeps every frame, as recorded.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::str::FromStr;

/// How reports show import machinery (see the module documentation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ImportFrames {
    /// Every frame as recorded.
    Show,
    /// Towers removed; allocations go to the importing line or the module's own line.
    #[default]
    Hide,
    /// Each stack cut at its outermost tower, which becomes one `[import NAME]` frame.
    Fold,
}

impl ImportFrames {
    /// The mode's name as the CLI takes it.
    pub fn name(self) -> &'static str {
        match self {
            ImportFrames::Show => "show",
            ImportFrames::Hide => "hide",
            ImportFrames::Fold => "fold",
        }
    }
}

impl FromStr for ImportFrames {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "show" => Ok(ImportFrames::Show),
            "hide" => Ok(ImportFrames::Hide),
            "fold" => Ok(ImportFrames::Fold),
            _ => Err(format!(
                "imports must be 'show', 'hide' or 'fold', not {s:?}"
            )),
        }
    }
}

/// The line a page shows about its import machinery (`#import-mode`, its mode in
/// `data-mode`): how the page was made, and how to make it another way.
pub(crate) fn import_mode_note(out: &mut String, mode: ImportFrames) {
    let text = match mode {
        ImportFrames::Hide => {
            "hidden: what an import allocated is on the line that imported, or on the \
             imported module's own lines (--imports fold or show to see it)"
        }
        ImportFrames::Fold => {
            "each import folded into one [import NAME] frame at the importing line \
             (--imports hide or show)"
        }
        ImportFrames::Show => "every frame shown (--imports hide or fold)",
    };
    let _ = writeln!(
        out,
        "<p class=\"note\" id=\"import-mode\" data-mode=\"{}\">Import machinery: {text}.</p>",
        mode.name()
    );
}

/// The function name of a module's top-level code.
pub(crate) const MODULE_BODY: &str = "<module>";

/// Whether frames in `filename` (as recorded) may be import machinery; a frame is
/// machinery when this holds and its function is not [`MODULE_BODY`].
pub(crate) fn is_machinery_file(filename: &str) -> bool {
    const FROZEN: [&str; 3] = [
        "<frozen importlib._bootstrap>",
        "<frozen importlib._bootstrap_external>",
        "<frozen zipimport>",
    ];
    const SOURCE: [&str; 5] = [
        "importlib/_bootstrap.py",
        "importlib/_bootstrap_external.py",
        "importlib/__init__.py",
        "importlib/util.py",
        "importlib/_abc.py",
    ];
    if FROZEN.contains(&filename) {
        return true;
    }
    SOURCE
        .iter()
        .chain(&["zipimport.py"])
        .any(|tail| ends_in_file(filename, tail))
}

/// Whether `path` ends in `/` and then `tail` (a path with `/` between its parts),
/// reading `\\` in `path` as `/`; without allocating (each frame's file is asked once
/// per analysis, and the pytest plugin analyses a capture per test).
fn ends_in_file(path: &str, tail: &str) -> bool {
    let (path, tail) = (path.as_bytes(), tail.as_bytes());
    let Some(start) = path.len().checked_sub(tail.len() + 1) else {
        return false;
    };
    let slash = |b: u8| if b == b'\\' { b'/' } else { b };
    path[start..]
        .iter()
        .zip(std::iter::once(&b'/').chain(tail))
        .all(|(&p, &t)| slash(p) == t)
}

/// The dotted name of the module whose file is `filename`, as far as the path tells:
/// the part after `site-packages/`, `dist-packages/` or the standard library's
/// `lib/pythonX.Y/` when there is one, else the file's stem (a package's directory for
/// its `__init__.py`); `<frozen os>` is `os`.
pub fn module_name(filename: &str) -> String {
    if let Some(frozen) = filename
        .strip_prefix("<frozen ")
        .and_then(|s| s.strip_suffix('>'))
    {
        return frozen.to_owned();
    }
    let path = filename.replace('\\', "/");
    let stem = ["py", "pyc", "pyw"]
        .iter()
        .find_map(|ext| path.strip_suffix(&format!(".{ext}")))
        .unwrap_or(&path);
    let stem = stem.strip_suffix("/__init__").unwrap_or(stem);
    let mut root = None;
    for marker in ["/site-packages/", "/dist-packages/"] {
        if let Some(i) = stem.rfind(marker) {
            root = Some(i + marker.len());
            break;
        }
    }
    if root.is_none() {
        if let Some(i) = stem.rfind("/lib/python") {
            let rest = &stem[i + "/lib/python".len()..];
            if let Some(slash) = rest.find('/') {
                root = Some(i + "/lib/python".len() + slash + 1);
            }
        }
    }
    match root {
        Some(i) => stem[i..].replace('/', "."),
        None => stem.rsplit('/').next().unwrap_or(stem).to_owned(),
    }
}

/// The fold frame's name for the modules an import was seen to load: `[import pandas]`,
/// `[import a, b]`, `[import a, b and 3 more]`; `[import]` when no module's code ran
/// under it in any stack (its allocations were all the machinery's).
pub fn fold_name(modules: &BTreeSet<String>) -> String {
    let shown: Vec<&str> = modules.iter().take(2).map(String::as_str).collect();
    match modules.len() {
        0 => "[import]".to_owned(),
        1 | 2 => format!("[import {}]", shown.join(", ")),
        n => format!("[import {} and {} more]", shown.join(", "), n - 2),
    }
}

/// Where the outermost tower of an innermost-first stack is: `(start, module)` with
/// `start` the index of its outermost frame and `module` the index of the imported
/// module's top-level frame that ends it (None: the tower reaches the innermost end).
pub(crate) fn outermost_tower(
    frames_len: usize,
    is_machinery: impl Fn(usize) -> bool,
    is_module_body: impl Fn(usize) -> bool,
) -> Option<(usize, Option<usize>)> {
    let start = (0..frames_len).rev().find(|&i| is_machinery(i))?;
    let module = (0..start)
        .rev()
        .find(|&i| is_module_body(i) && !is_machinery(i));
    Some((start, module))
}

/// Which frames of an innermost-first stack [`ImportFrames::Hide`] keeps.
pub(crate) fn kept_when_hidden(
    frames_len: usize,
    is_machinery: impl Fn(usize) -> bool,
    is_module_body: impl Fn(usize) -> bool,
) -> Vec<bool> {
    let mut keep = vec![true; frames_len];
    let mut in_tower = false;
    for i in (0..frames_len).rev() {
        if in_tower {
            if is_module_body(i) && !is_machinery(i) {
                in_tower = false;
            } else {
                keep[i] = false;
            }
        } else if is_machinery(i) {
            in_tower = true;
            keep[i] = false;
        }
    }
    if frames_len > 0 && !keep.contains(&true) {
        keep[0] = true;
    }
    keep
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn machinery_files() {
        for f in [
            "<frozen importlib._bootstrap>",
            "<frozen importlib._bootstrap_external>",
            "<frozen zipimport>",
            "/usr/lib/python3.11/importlib/__init__.py",
            "/usr/lib/python3.11/importlib/_bootstrap.py",
            "/usr/lib/python3.12/importlib/util.py",
            "C:\\Python311\\Lib\\importlib\\__init__.py",
            "C:\\Python311\\Lib\\zipimport.py",
            "/usr/lib/python3.11/zipimport.py",
        ] {
            assert!(is_machinery_file(f), "{f}");
        }
        for f in [
            "<frozen runpy>",
            "<frozen os>",
            "/usr/lib/python3.11/importlib/metadata/__init__.py",
            "/usr/lib/python3.11/importlib/resources/_common.py",
            "/home/me/myimportlib/__init__.py.txt",
            "/home/me/myimportlib/util.py",
            "/home/me/myzipimport.py",
            "zipimport.py",
            "app.py",
        ] {
            assert!(!is_machinery_file(f), "{f}");
        }
    }

    #[test]
    fn module_names_from_paths() {
        let cases = [
            (
                "/v/lib/python3.11/site-packages/pandas/__init__.py",
                "pandas",
            ),
            (
                "/v/lib/python3.11/site-packages/pandas/core/frame.py",
                "pandas.core.frame",
            ),
            ("/usr/lib/python3/dist-packages/yaml/__init__.py", "yaml"),
            ("/usr/lib/python3.11/json/decoder.py", "json.decoder"),
            ("/home/me/project/helper_mod.py", "helper_mod"),
            ("/home/me/project/pkg/__init__.py", "pkg"),
            ("<frozen os>", "os"),
            (
                "C:\\Python\\Lib\\site-packages\\click\\core.py",
                "click.core",
            ),
        ];
        for (path, name) in cases {
            assert_eq!(module_name(path), name, "{path}");
        }
    }

    #[test]
    fn fold_names() {
        let set = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<BTreeSet<_>>();
        assert_eq!(fold_name(&set(&[])), "[import]");
        assert_eq!(fold_name(&set(&["pandas"])), "[import pandas]");
        assert_eq!(fold_name(&set(&["b", "a"])), "[import a, b]");
        assert_eq!(
            fold_name(&set(&["a", "b", "c", "d"])),
            "[import a, b and 2 more]"
        );
    }

    /// Frames innermost first as (machinery?, module body?).
    fn hide(frames: &[(bool, bool)]) -> Vec<bool> {
        kept_when_hidden(frames.len(), |i| frames[i].0, |i| frames[i].1)
    }

    #[test]
    fn hiding_removes_each_tower_and_keeps_module_code() {
        const M: (bool, bool) = (true, false); // machinery
        const B: (bool, bool) = (false, true); // a module's top level
        const F: (bool, bool) = (false, false); // a function
                                                // main <module> -> tower -> mod <module> -> f -> tower -> sub <module> -> alloc in g
        let stack = [F, B, M, M, F, B, M, F, M, B];
        assert_eq!(
            hide(&stack),
            vec![true, true, false, false, true, true, false, false, false, true]
        );
        // Machinery allocating itself (compiling): the importing line is innermost.
        assert_eq!(hide(&[M, M, F, B]), vec![false, false, true, true]);
        // A tower at the outer end with nothing else: one frame stays.
        assert_eq!(hide(&[M, M]), vec![true, false]);
        assert_eq!(
            outermost_tower(stack.len(), |i| stack[i].0, |i| stack[i].1),
            Some((8, Some(5)))
        );
        assert_eq!(outermost_tower(2, |_| false, |_| true), None);
    }
}
