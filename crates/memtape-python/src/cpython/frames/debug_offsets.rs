//! CPython's own table of where its fields live (`_Py_DebugOffsets`, 3.13 and later): the
//! first member of `_PyRuntime`, written for debuggers and profilers that read the
//! interpreter from outside. memtape reads it once, at import, instead of hard-coding each
//! version's structs, so that a patch release or a build flag that moves a field is read
//! correctly, and a table it does not understand stops the import instead of a hook
//! reading garbage.
//!
//! The table is all 64-bit words after an 8-byte cookie. Its own shape changes between
//! minor versions but, as CPython promises beside its definition
//! (`Include/internal/pycore_runtime_structs.h`), not between patch releases of one: so
//! each minor version says at which word each section starts ([`TableShape`], read off
//! that version's `Include/internal/pycore_debug_offsets.h`), and the values in it come
//! from the running interpreter.

use std::ffi::CStr;

/// `_Py_Debug_Cookie`.
const COOKIE: &[u8; 8] = b"xdebugpy";

/// Where, in words of the table (the cookie is word 0), one minor version keeps the
/// sections memtape reads. Each section starts with the size of its struct.
#[derive(Clone, Copy, Debug)]
pub(super) struct TableShape {
    /// `thread_state`: `current_frame` is its word 4.
    thread_state: usize,
    /// `thread_state.base_frame` (3.15+: the frame at the bottom of every chain).
    base_frame: Option<usize>,
    /// `interpreter_frame`: `previous`, `executable`, `instr_ptr` are its words 1 to 3,
    /// `owner` its word 5.
    interpreter_frame: usize,
    /// `code_object`: `co_code_adaptive` is its word 9.
    code_object: usize,
}

impl TableShape {
    /// How many words of the table memtape reads: up to `co_code_adaptive`.
    pub(super) const fn words(&self) -> usize {
        self.code_object + 10
    }
}

/// 3.13: cookie, version, free_threaded (words 0-2), runtime_state (3 words),
/// interpreter_state (13), thread_state (9), interpreter_frame (6), code_object.
#[allow(dead_code)]
pub(super) const SHAPE_3_13: TableShape = TableShape {
    thread_state: 19,
    base_frame: None,
    interpreter_frame: 28,
    code_object: 34,
};

/// 3.14: interpreter_state grows to 16 words (threads_main, code_object_generation,
/// tlbc_generation), interpreter_frame to 8 (stackpointer, tlbc_index).
#[allow(dead_code)]
pub(super) const SHAPE_3_14: TableShape = TableShape {
    thread_state: 22,
    base_frame: None,
    interpreter_frame: 31,
    code_object: 39,
};

/// 3.15: thread_state grows to 16 words (base_frame, the remote profiler's
/// last_profiled_frame and its sequence after current_frame; holds_gil, gil_requested,
/// current_exception, exc_state at its end), and a one-word err_stackitem section
/// follows it.
#[allow(dead_code)]
pub(super) const SHAPE_3_15: TableShape = TableShape {
    thread_state: 22,
    base_frame: Some(22 + 5),
    interpreter_frame: 39,
    code_object: 47,
};

/// What memtape takes from the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct TableOffsets {
    /// `PY_VERSION_HEX` of the running interpreter.
    pub(super) version_hex: u64,
    pub(super) free_threaded: bool,
    pub(super) current_frame: usize,
    pub(super) base_frame: Option<usize>,
    pub(super) frame_previous: usize,
    pub(super) frame_executable: usize,
    pub(super) frame_instr: usize,
    pub(super) frame_owner: usize,
    pub(super) code_adaptive: usize,
}

/// Why the table could not be used.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum TableError {
    Missing,
    Cookie([u8; 8]),
    Version { found: u64, built_for: (u8, u8) },
    FreeThreaded,
    Implausible(&'static str, u64),
}

impl std::fmt::Display for TableError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Missing => write!(f, "_PyRuntime is not exported by this interpreter"),
            Self::Cookie(c) => write!(
                f,
                "_PyRuntime does not start with the _Py_DebugOffsets cookie (found {:?})",
                String::from_utf8_lossy(c)
            ),
            Self::Version { found, built_for } => write!(
                f,
                "_Py_DebugOffsets is of CPython {}.{} (PY_VERSION_HEX {found:#x}) but memtape \
                 was built for {}.{}",
                (found >> 24) & 0xff,
                (found >> 16) & 0xff,
                built_for.0,
                built_for.1
            ),
            Self::FreeThreaded => write!(f, "this is a free-threaded build"),
            Self::Implausible(what, v) => {
                write!(f, "_Py_DebugOffsets gives an implausible {what} ({v})")
            }
        }
    }
}

/// Reads the table from `words` (the table as 64-bit words, the cookie's included) for
/// an interpreter of `built_for` whose table has the shape `shape`, checking that it is
/// one: the cookie, the version, a GIL build, and sizes and offsets that a frame reader
/// can trust (each field inside its struct, the pointers aligned, no two fields at one
/// offset).
pub(super) fn parse(
    words: &[u64],
    shape: TableShape,
    built_for: (u8, u8),
) -> Result<TableOffsets, TableError> {
    let word = |i: usize| words.get(i).copied().ok_or(TableError::Missing);
    let cookie = word(0)?.to_le_bytes();
    if &cookie != COOKIE {
        return Err(TableError::Cookie(cookie));
    }
    let version_hex = word(1)?;
    let (major, minor) = ((version_hex >> 24) & 0xff, (version_hex >> 16) & 0xff);
    if (major, minor) != (u64::from(built_for.0), u64::from(built_for.1)) {
        return Err(TableError::Version {
            found: version_hex,
            built_for,
        });
    }
    if word(2)? != 0 {
        return Err(TableError::FreeThreaded);
    }
    // An offset inside a struct of `size` bytes, aligned to `align`.
    let field = |section: usize, index: usize, size: u64, align: u64, what: &'static str| {
        let at = word(section + index)?;
        if at + align > size || at % align != 0 {
            return Err(TableError::Implausible(what, at));
        }
        Ok(at as usize)
    };
    // A struct's size, in the range a frame reader can believe.
    let size = |section: usize, what: &'static str, range: std::ops::RangeInclusive<u64>| {
        let s = word(section)?;
        if range.contains(&s) {
            Ok(s)
        } else {
            Err(TableError::Implausible(what, s))
        }
    };
    let ptr = 8;
    let ts = shape.thread_state;
    let ts_size = size(ts, "PyThreadState size", 64..=65536)?;
    let fr = shape.interpreter_frame;
    let fr_size = size(fr, "_PyInterpreterFrame size", 48..=1024)?;
    let co = shape.code_object;
    let co_size = size(co, "PyCodeObject size", 64..=4096)?;
    let offsets = TableOffsets {
        version_hex,
        free_threaded: false,
        current_frame: field(ts, 4, ts_size, ptr, "current_frame offset")?,
        base_frame: match shape.base_frame {
            Some(at) => Some(field(0, at, ts_size, ptr, "base_frame offset")?),
            None => None,
        },
        frame_previous: field(fr, 1, fr_size, ptr, "previous frame offset")?,
        frame_executable: field(fr, 2, fr_size, ptr, "f_executable offset")?,
        frame_instr: field(fr, 3, fr_size, ptr, "instr_ptr offset")?,
        frame_owner: field(fr, 5, fr_size, 1, "owner offset")?,
        // The bytecode is the variable part at the end of the code object.
        code_adaptive: field(co, 9, co_size + 2, 2, "co_code_adaptive offset")?,
    };
    let frame_fields = [
        offsets.frame_previous,
        offsets.frame_executable,
        offsets.frame_instr,
    ];
    let overlaps = |a: usize, b: usize| a.abs_diff(b) < 8;
    if overlaps(frame_fields[0], frame_fields[1])
        || overlaps(frame_fields[1], frame_fields[2])
        || overlaps(frame_fields[0], frame_fields[2])
        || frame_fields
            .iter()
            .any(|&f| overlaps(f, offsets.frame_owner) && f <= offsets.frame_owner)
    {
        return Err(TableError::Implausible(
            "frame layout (two fields at one offset)",
            offsets.frame_owner as u64,
        ));
    }
    Ok(offsets)
}

/// The table of this process's interpreter as 64-bit words: the first `words` words of
/// `_PyRuntime`, or `None` when the interpreter does not export it.
pub(super) fn runtime_table(words: usize) -> Option<&'static [u64]> {
    const NAME: &CStr = c"_PyRuntime";
    // SAFETY: dlsym in the global scope with a NUL-terminated name; it only looks the
    // name up in the loaded objects' symbol tables.
    let at = unsafe { libc::dlsym(libc::RTLD_DEFAULT, NAME.as_ptr()) };
    if at.is_null() || (at as usize) % std::mem::align_of::<u64>() != 0 {
        return None;
    }
    // SAFETY: `_PyRuntime` is the interpreter's runtime state, a static that lives as
    // long as the process, whose first member is the table (3.13+, the only callers),
    // written once at start-up, before any extension module is imported. `words` is what
    // the running minor version's shape says it holds up to `co_code_adaptive`, and the
    // runtime state goes on far past the table.
    Some(unsafe { std::slice::from_raw_parts(at.cast::<u64>(), words) })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table of `shape` with plausible sizes and offsets (3.14's), for `version`.
    fn table(shape: TableShape, version: u64) -> Vec<u64> {
        let mut w = vec![0u64; shape.code_object + 11];
        w[0] = u64::from_le_bytes(*COOKIE);
        w[1] = version;
        w[shape.thread_state] = 200;
        w[shape.thread_state + 4] = 72;
        w[shape.interpreter_frame] = 80;
        w[shape.interpreter_frame + 1] = 8;
        w[shape.interpreter_frame + 2] = 0;
        w[shape.interpreter_frame + 3] = 56;
        w[shape.interpreter_frame + 5] = 74;
        w[shape.code_object] = 224;
        w[shape.code_object + 9] = 216;
        if let Some(b) = shape.base_frame {
            w[b] = 96;
        }
        w
    }

    #[test]
    fn a_plausible_table_is_read() {
        let t = parse(&table(SHAPE_3_14, 0x030e0aa0), SHAPE_3_14, (3, 14)).unwrap();
        assert_eq!(
            (
                t.current_frame,
                t.frame_previous,
                t.frame_executable,
                t.frame_instr
            ),
            (72, 8, 0, 56)
        );
        assert_eq!(
            (t.frame_owner, t.code_adaptive, t.base_frame),
            (74, 216, None)
        );
        let t = parse(&table(SHAPE_3_15, 0x030f02f0), SHAPE_3_15, (3, 15)).unwrap();
        assert_eq!(t.base_frame, Some(96));
    }

    #[test]
    fn another_version_or_cookie_is_refused() {
        let t = table(SHAPE_3_14, 0x030f02f0);
        assert!(matches!(
            parse(&t, SHAPE_3_14, (3, 14)),
            Err(TableError::Version { .. })
        ));
        let mut t = table(SHAPE_3_14, 0x030e0aa0);
        t[0] = u64::from_le_bytes(*b"xdebugpz");
        assert!(matches!(
            parse(&t, SHAPE_3_14, (3, 14)),
            Err(TableError::Cookie(_))
        ));
    }

    #[test]
    fn a_free_threaded_table_is_refused() {
        let mut t = table(SHAPE_3_14, 0x030e0aa0);
        t[2] = 1;
        assert_eq!(
            parse(&t, SHAPE_3_14, (3, 14)),
            Err(TableError::FreeThreaded)
        );
    }

    #[test]
    fn implausible_offsets_are_refused() {
        // instr_ptr outside the frame
        let mut t = table(SHAPE_3_13, 0x030d00f0);
        t[SHAPE_3_13.interpreter_frame + 3] = 4096;
        assert!(matches!(
            parse(&t, SHAPE_3_13, (3, 13)),
            Err(TableError::Implausible(..))
        ));
        // a misaligned pointer field
        let mut t = table(SHAPE_3_13, 0x030d00f0);
        t[SHAPE_3_13.thread_state + 4] = 73;
        assert!(matches!(
            parse(&t, SHAPE_3_13, (3, 13)),
            Err(TableError::Implausible(..))
        ));
        // two fields at one offset
        let mut t = table(SHAPE_3_13, 0x030d00f0);
        t[SHAPE_3_13.interpreter_frame + 3] = 8;
        assert!(matches!(
            parse(&t, SHAPE_3_13, (3, 13)),
            Err(TableError::Implausible(..))
        ));
        // a table cut short
        let t = table(SHAPE_3_13, 0x030d00f0);
        assert_eq!(
            parse(&t[..20], SHAPE_3_13, (3, 13)),
            Err(TableError::Missing)
        );
    }
}
