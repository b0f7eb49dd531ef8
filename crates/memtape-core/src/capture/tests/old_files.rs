//! The captures memtape's old versions wrote (`tests/fixtures/old_captures/`), and what
//! each version's own reports said about its file: the expected values of
//! `old_files_tests`. Its README.md says how the files and the reports were made.

use crate::report::{Peak, Totals};

pub(super) const PROGRAM: &str = "/tmp/old-captures/program.py";
const BOOTSTRAP: &str = "<frozen importlib._bootstrap>";
const BOOTSTRAP_EXTERNAL: &str = "<frozen importlib._bootstrap_external>";
const RUNPY: &str = "<frozen runpy>";
const DISTUTILS_HACK_V1: &str =
    "/tmp/old-v1-venv/lib/python3.11/site-packages/_distutils_hack/__init__.py";
const DISTUTILS_HACK_V2: &str =
    "/tmp/old-v2-venv/lib/python3.11/site-packages/_distutils_hack/__init__.py";

pub(super) const LIBPYTHON: &str = "/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0";
pub(super) const LIBC: &str = "/lib/x86_64-linux-gnu/libc.so.6";
pub(super) const MMAP_SO: &str =
    "/root/.pyenv/versions/3.11.7/lib/python3.11/lib-dynload/mmap.cpython-311-x86_64-linux-gnu.so";
/// The GNU build id of `MMAP_SO`, as the native-stack files recorded it.
pub(super) const MMAP_SO_BUILD_ID: &str = "bed0a4b8bb6dd7a3aa4f26481568d2de540abd6e";
/// Where pyenv built CPython 3.11.7: the old versions named native frames by its sources.
const CPYTHON_SOURCES: &str = "/tmp/python-build.20260509073455.222/Python-3.11.7";

/// A frame as a report shows it.
#[derive(Clone, Copy, Debug)]
pub(super) enum Loc {
    /// A Python frame.
    Py {
        file: &'static str,
        line: u32,
        function: &'static str,
    },
    /// A native frame: the return address `offset` in `module`, and the place in
    /// CPython's sources the old version named from the module's file.
    Native {
        module: &'static str,
        offset: u64,
        source: &'static str,
        line: u32,
        function: &'static str,
    },
}

const fn py(file: &'static str, line: u32, function: &'static str) -> Loc {
    Loc::Py {
        file,
        line,
        function,
    }
}

/// A frame of `program.py`.
const fn prog(line: u32, function: &'static str) -> Loc {
    py(PROGRAM, line, function)
}

const fn native(
    module: &'static str,
    offset: u64,
    source: &'static str,
    line: u32,
    function: &'static str,
) -> Loc {
    Loc::Native {
        module,
        offset,
        source,
        line,
        function,
    }
}

impl Loc {
    /// As the file records it: `file:line in function`, a native frame as
    /// `module+0xoffset`.
    pub(super) fn recorded(self) -> String {
        match self {
            Loc::Py {
                file,
                line,
                function,
            } => format!("{file}:{line} in {function}"),
            Loc::Native { module, offset, .. } => format!("{module}+{offset:#x}"),
        }
    }

    /// As today's reports show it: a native frame as the old version named it where
    /// `symbolized(module)` (its file is on this machine, the same build), else as
    /// `module+offset`.
    pub(super) fn shown(self, symbolized: &impl Fn(&str) -> bool) -> String {
        match self {
            Loc::Native {
                module,
                source,
                line,
                function,
                ..
            } if symbolized(module) => format!("{CPYTHON_SOURCES}/{source}:{line} in {function}"),
            Loc::Native { module, offset, .. } => {
                let short = module.rsplit('/').next().unwrap_or(module);
                format!("{module}:0 in {short}+{offset:#x}")
            }
            py => py.recorded(),
        }
    }
}

/// Event counts and byte sums (no unknown frees, replaced or untracked blocks, and no
/// damage).
const fn totals(allocs: u64, frees: u64, bytes_allocated: u64, bytes_freed: u64) -> Totals {
    Totals {
        allocs,
        frees,
        bytes_allocated,
        bytes_freed,
        unknown_frees: 0,
        replaced: 0,
        untracked: 0,
        unknown_frees_after_damage: 0,
        replaced_after_damage: 0,
    }
}

const fn peak(bytes: u64, blocks: u64, time_ns: u64, event_index: u64) -> Peak {
    Peak {
        bytes,
        blocks,
        time_ns,
        event_index,
    }
}

/// The kept 1,000,000-byte bytearray's stack.
const KEPT: &[Loc] = &[prog(32, "load"), prog(41, "main"), prog(45, "<module>")];

/// The private mapping's stack, in the files without native stacks.
const MAPPING: &[Loc] = &[prog(42, "main"), prog(45, "<module>")];

/// The freed 300,000-byte bytearray's stack.
const SCRATCH: &[Loc] = &[
    prog(26, "scratch"),
    prog(34, "load"),
    prog(41, "main"),
    prog(45, "<module>"),
];

/// The mmap module's import (its exec), in the files without native stacks.
const MMAP_IMPORT: &[Loc] = &[
    py(BOOTSTRAP, 241, "_call_with_frames_removed"),
    py(BOOTSTRAP_EXTERNAL, 1241, "ExtensionFileLoader.exec_module"),
    py(BOOTSTRAP, 690, "_load_unlocked"),
    py(BOOTSTRAP, 1147, "_find_and_load_unlocked"),
    py(BOOTSTRAP, 1176, "_find_and_load"),
    prog(10, "<module>"),
];

/// The rows' stack.
const ROWS: &[Loc] = &[
    prog(21, "build_rows"),
    prog(37, "load"),
    prog(41, "main"),
    prog(45, "<module>"),
];

/// The mmap module's import, with the native frames v2-native.mtape recorded.
const MMAP_IMPORT_V2_NATIVE: &[Loc] = &[
    native(MMAP_SO, 0x3466, "Modules/mmapmodule.c", 1625, "mmap_exec"),
    native(
        LIBPYTHON,
        0x1a8b36,
        "Objects/moduleobject.c",
        419,
        "PyModule_ExecDef",
    ),
    native(
        LIBPYTHON,
        0x27ba3b,
        "Python/import.c",
        2345,
        "exec_builtin_or_dynamic",
    ),
    native(
        LIBPYTHON,
        0x1a6ee2,
        "Objects/methodobject.c",
        514,
        "cfunction_vectorcall_O",
    ),
    py(BOOTSTRAP, 241, "_call_with_frames_removed"),
    py(BOOTSTRAP_EXTERNAL, 1241, "ExtensionFileLoader.exec_module"),
    py(BOOTSTRAP, 690, "_load_unlocked"),
    py(BOOTSTRAP, 1147, "_find_and_load_unlocked"),
    py(BOOTSTRAP, 1176, "_find_and_load"),
    prog(10, "<module>"),
];

/// The mmap module's load in both version 3 files (one 6,512-byte block).
const MMAP_MODULE_LOAD_V3: &[Loc] = &[
    py(BOOTSTRAP, 702, "_load_unlocked"),
    py(BOOTSTRAP, 1147, "_find_and_load_unlocked"),
    py(BOOTSTRAP, 1176, "_find_and_load"),
    prog(10, "<module>"),
];

/// What an old version's `memtape stats --json`, `memtape stats`, `memtape top --at end`
/// and `memtape top --by traceback --limit 4 [--at end] --json` said about its capture.
pub(super) struct OldReports {
    pub(super) events: u64,
    pub(super) totals: Totals,
    pub(super) peak: Peak,
    /// Bytes and blocks live at the end, and the native bytes among them.
    pub(super) end: (u64, u64, u64),
    pub(super) duration_ns: u64,
    /// Where the marker "scratch freed" fell: time, events before it.
    pub(super) marker: (u64, u64),
    /// Sites by line at the peak and at the end: the ten listed plus "and N more".
    pub(super) sites_at_peak: usize,
    pub(super) sites_at_end: usize,
    /// The ten biggest sites by line: bytes, blocks, where.
    pub(super) top_at_peak: [(u64, u64, Loc); 10],
    pub(super) top_at_end: [(u64, u64, Loc); 10],
    /// The four biggest sites by traceback (launcher frames left out).
    pub(super) tracebacks_at_peak: [(u64, u64, &'static [Loc]); 4],
    pub(super) tracebacks_at_end: [(u64, u64, &'static [Loc]); 4],
}

/// One old capture and what is known of it.
pub(super) struct OldFile {
    pub(super) name: &'static str,
    pub(super) bytes: &'static [u8],
    pub(super) version: u16,
    /// Records blocks and records, as the file holds them.
    pub(super) blocks: u64,
    pub(super) records: u64,
    /// The header's launcher files: the old memtape's package, runpy, its command.
    pub(super) launcher_files: [&'static str; 4],
    /// The frames below the program's own in every stack, innermost first: runpy's and
    /// the old memtape's.
    pub(super) launcher_frames: [&'static str; 8],
    /// The native frames of the mmap region's stack, innermost first.
    pub(super) mmap_native_frames: &'static [Loc],
    /// The modules native frames refer to, by id from 1.
    pub(super) modules: &'static [&'static str],
    /// NativeFrame records.
    pub(super) native_frames: usize,
    pub(super) reports: OldReports,
}

macro_rules! fixture {
    ($name:literal) => {
        include_bytes!(concat!("../../../tests/fixtures/old_captures/", $name))
    };
}

pub(super) const OLD_FILES: [OldFile; 5] = [
    OldFile {
        name: "v1.mtape",
        bytes: fixture!("v1.mtape"),
        version: 1,
        blocks: 9,
        records: 3529,
        launcher_files: [
            "/work/old-v1/python/memtape/",
            "/root/.pyenv/versions/3.11.7/lib/python3.11/runpy.py",
            "<frozen runpy>",
            "/tmp/old-v1-venv/bin/memtape",
        ],
        launcher_frames: [
            "<frozen runpy>:88 in _run_code",
            "<frozen runpy>:98 in _run_module_code",
            "<frozen runpy>:291 in run_path",
            "/work/old-v1/python/memtape/_program.py:96 in run",
            "/work/old-v1/python/memtape/cli/run.py:205 in _record",
            "/work/old-v1/python/memtape/cli/run.py:183 in main",
            "/work/old-v1/python/memtape/cli/__init__.py:64 in main",
            "/tmp/old-v1-venv/bin/memtape:8 in <module>",
        ],
        mmap_native_frames: &[],
        modules: &[],
        native_frames: 0,
        reports: OldReports {
            events: 3175,
            totals: totals(1682, 1493, 1736561, 532118),
            peak: peak(1317116, 158, 100710066, 3021),
            end: (1204443, 189, 65536),
            duration_ns: 211019375,
            marker: (100710066, 3025),
            sites_at_peak: 23,
            sites_at_end: 19,
            top_at_peak: [
                (1000057, 2, prog(32, "load")),
                (300057, 2, prog(26, "scratch")),
                (9584, 85, py(BOOTSTRAP, 241, "_call_with_frames_removed")),
                (4057, 37, py(RUNPY, 259, "_get_code_from_file")),
                (768, 6, py(RUNPY, 96, "_run_module_code")),
                (400, 1, py(RUNPY, 81, "_run_code")),
                (248, 2, py(BOOTSTRAP_EXTERNAL, 1600, "FileFinder._get_spec")),
                (
                    242,
                    4,
                    py(BOOTSTRAP_EXTERNAL, 1659, "FileFinder._fill_cache"),
                ),
                (
                    216,
                    1,
                    py(BOOTSTRAP_EXTERNAL, 1667, "FileFinder._fill_cache"),
                ),
                (
                    182,
                    2,
                    py(DISTUTILS_HACK_V1, 95, "DistutilsMetaFinder.find_spec"),
                ),
            ],
            top_at_end: [
                (1000057, 2, prog(32, "load")),
                (122420, 41, prog(21, "build_rows")),
                (65632, 2, prog(42, "main")),
                (9584, 85, py(BOOTSTRAP, 241, "_call_with_frames_removed")),
                (4057, 37, py(RUNPY, 259, "_get_code_from_file")),
                (400, 1, py(RUNPY, 102, "_run_module_code")),
                (400, 1, py(RUNPY, 81, "_run_code")),
                (248, 2, py(BOOTSTRAP_EXTERNAL, 1600, "FileFinder._get_spec")),
                (
                    242,
                    4,
                    py(BOOTSTRAP_EXTERNAL, 1659, "FileFinder._fill_cache"),
                ),
                (
                    216,
                    1,
                    py(BOOTSTRAP_EXTERNAL, 1667, "FileFinder._fill_cache"),
                ),
            ],
            tracebacks_at_peak: [
                (1000057, 2, KEPT),
                (300057, 2, SCRATCH),
                (9243, 79, MMAP_IMPORT),
                (4057, 37, &[py(RUNPY, 259, "_get_code_from_file")]),
            ],
            tracebacks_at_end: [
                (1000057, 2, KEPT),
                (122420, 41, ROWS),
                (65632, 2, MAPPING),
                (9243, 79, MMAP_IMPORT),
            ],
        },
    },
    OldFile {
        name: "v2.mtape",
        bytes: fixture!("v2.mtape"),
        version: 2,
        blocks: 9,
        records: 3541,
        launcher_files: [
            "/work/old-v2/python/memtape/",
            "/root/.pyenv/versions/3.11.7/lib/python3.11/runpy.py",
            "<frozen runpy>",
            "/tmp/old-v2-venv/bin/memtape",
        ],
        launcher_frames: [
            "<frozen runpy>:88 in _run_code",
            "<frozen runpy>:98 in _run_module_code",
            "<frozen runpy>:291 in run_path",
            "/work/old-v2/python/memtape/_program.py:96 in run",
            "/work/old-v2/python/memtape/cli/run.py:263 in _record",
            "/work/old-v2/python/memtape/cli/run.py:216 in main",
            "/work/old-v2/python/memtape/cli/__init__.py:67 in main",
            "/tmp/old-v2-venv/bin/memtape:8 in <module>",
        ],
        mmap_native_frames: &[],
        modules: &[],
        native_frames: 0,
        reports: OldReports {
            events: 3187,
            totals: totals(1688, 1499, 1737322, 532446),
            peak: peak(1317549, 158, 100684508, 3033),
            end: (1204876, 189, 65536),
            duration_ns: 210923213,
            marker: (100684508, 3037),
            sites_at_peak: 23,
            sites_at_end: 19,
            top_at_peak: [
                (1000057, 2, prog(32, "load")),
                (300057, 2, prog(26, "scratch")),
                (9584, 85, py(BOOTSTRAP, 241, "_call_with_frames_removed")),
                (3929, 35, py(RUNPY, 259, "_get_code_from_file")),
                (768, 6, py(RUNPY, 96, "_run_module_code")),
                (
                    728,
                    2,
                    py(BOOTSTRAP_EXTERNAL, 1667, "FileFinder._fill_cache"),
                ),
                (400, 1, py(RUNPY, 81, "_run_code")),
                (
                    299,
                    5,
                    py(BOOTSTRAP_EXTERNAL, 1659, "FileFinder._fill_cache"),
                ),
                (240, 2, py(BOOTSTRAP_EXTERNAL, 1600, "FileFinder._get_spec")),
                (
                    182,
                    2,
                    py(DISTUTILS_HACK_V2, 95, "DistutilsMetaFinder.find_spec"),
                ),
            ],
            top_at_end: [
                (1000057, 2, prog(32, "load")),
                (122420, 41, prog(21, "build_rows")),
                (65632, 2, prog(42, "main")),
                (9584, 85, py(BOOTSTRAP, 241, "_call_with_frames_removed")),
                (3929, 35, py(RUNPY, 259, "_get_code_from_file")),
                (
                    728,
                    2,
                    py(BOOTSTRAP_EXTERNAL, 1667, "FileFinder._fill_cache"),
                ),
                (400, 1, py(RUNPY, 102, "_run_module_code")),
                (400, 1, py(RUNPY, 81, "_run_code")),
                (
                    299,
                    5,
                    py(BOOTSTRAP_EXTERNAL, 1659, "FileFinder._fill_cache"),
                ),
                (240, 2, py(BOOTSTRAP_EXTERNAL, 1600, "FileFinder._get_spec")),
            ],
            tracebacks_at_peak: [
                (1000057, 2, KEPT),
                (300057, 2, SCRATCH),
                (9243, 79, MMAP_IMPORT),
                (3929, 35, &[py(RUNPY, 259, "_get_code_from_file")]),
            ],
            tracebacks_at_end: [
                (1000057, 2, KEPT),
                (122420, 41, ROWS),
                (65632, 2, MAPPING),
                (9243, 79, MMAP_IMPORT),
            ],
        },
    },
    OldFile {
        name: "v2-native.mtape",
        bytes: fixture!("v2-native.mtape"),
        version: 2,
        blocks: 9,
        records: 3655,
        launcher_files: [
            "/work/old-v2/python/memtape/",
            "/root/.pyenv/versions/3.11.7/lib/python3.11/runpy.py",
            "<frozen runpy>",
            "/tmp/old-v2-venv/bin/memtape",
        ],
        launcher_frames: [
            "<frozen runpy>:88 in _run_code",
            "<frozen runpy>:98 in _run_module_code",
            "<frozen runpy>:291 in run_path",
            "/work/old-v2/python/memtape/_program.py:96 in run",
            "/work/old-v2/python/memtape/cli/run.py:263 in _record",
            "/work/old-v2/python/memtape/cli/run.py:216 in main",
            "/work/old-v2/python/memtape/cli/__init__.py:67 in main",
            "/tmp/old-v2-venv/bin/memtape:8 in <module>",
        ],
        mmap_native_frames: &[
            native(
                MMAP_SO,
                0x3232,
                "Modules/mmapmodule.c",
                1365,
                "new_mmap_object",
            ),
            native(
                LIBPYTHON,
                0x1c1415,
                "Objects/typeobject.c",
                1091,
                "type_call",
            ),
            native(
                LIBPYTHON,
                0x15861d,
                "Objects/call.c",
                214,
                "_PyObject_MakeTpCall",
            ),
        ],
        modules: &[LIBPYTHON, LIBC, MMAP_SO],
        native_frames: 53,
        reports: OldReports {
            events: 3190,
            totals: totals(1689, 1501, 1737386, 532554),
            peak: peak(1317505, 157, 97312835, 3036),
            end: (1204832, 188, 65536),
            duration_ns: 214043984,
            marker: (97312835, 3040),
            sites_at_peak: 56,
            sites_at_end: 53,
            top_at_peak: [
                (1000057, 2, prog(32, "load")),
                (300057, 2, prog(26, "scratch")),
                (
                    6321,
                    39,
                    native(MMAP_SO, 0x3466, "Modules/mmapmodule.c", 1625, "mmap_exec"),
                ),
                (3929, 35, py(RUNPY, 259, "_get_code_from_file")),
                (
                    831,
                    2,
                    native(MMAP_SO, 0x3613, "Modules/mmapmodule.c", 1686, "mmap_exec"),
                ),
                (768, 6, py(RUNPY, 96, "_run_module_code")),
                (
                    728,
                    2,
                    py(BOOTSTRAP_EXTERNAL, 1667, "FileFinder._fill_cache"),
                ),
                (400, 1, py(RUNPY, 81, "_run_code")),
                (
                    363,
                    6,
                    py(BOOTSTRAP_EXTERNAL, 1659, "FileFinder._fill_cache"),
                ),
                (241, 5, py(BOOTSTRAP, 241, "_call_with_frames_removed")),
            ],
            top_at_end: [
                (1000057, 2, prog(32, "load")),
                (122420, 41, prog(21, "build_rows")),
                (
                    65536,
                    1,
                    native(
                        MMAP_SO,
                        0x3232,
                        "Modules/mmapmodule.c",
                        1365,
                        "new_mmap_object",
                    ),
                ),
                (
                    6321,
                    39,
                    native(MMAP_SO, 0x3466, "Modules/mmapmodule.c", 1625, "mmap_exec"),
                ),
                (3929, 35, py(RUNPY, 259, "_get_code_from_file")),
                (
                    831,
                    2,
                    native(MMAP_SO, 0x3613, "Modules/mmapmodule.c", 1686, "mmap_exec"),
                ),
                (
                    728,
                    2,
                    py(BOOTSTRAP_EXTERNAL, 1667, "FileFinder._fill_cache"),
                ),
                (400, 1, py(RUNPY, 102, "_run_module_code")),
                (400, 1, py(RUNPY, 81, "_run_code")),
                (
                    363,
                    6,
                    py(BOOTSTRAP_EXTERNAL, 1659, "FileFinder._fill_cache"),
                ),
            ],
            tracebacks_at_peak: [
                (1000057, 2, KEPT),
                (300057, 2, SCRATCH),
                (6321, 39, MMAP_IMPORT_V2_NATIVE),
                (3929, 35, &[py(RUNPY, 259, "_get_code_from_file")]),
            ],
            tracebacks_at_end: [
                (1000057, 2, KEPT),
                (122420, 41, ROWS),
                (
                    65536,
                    1,
                    &[
                        native(
                            MMAP_SO,
                            0x3232,
                            "Modules/mmapmodule.c",
                            1365,
                            "new_mmap_object",
                        ),
                        native(
                            LIBPYTHON,
                            0x1c1415,
                            "Objects/typeobject.c",
                            1091,
                            "type_call",
                        ),
                        native(
                            LIBPYTHON,
                            0x15861d,
                            "Objects/call.c",
                            214,
                            "_PyObject_MakeTpCall",
                        ),
                        prog(42, "main"),
                        prog(45, "<module>"),
                    ],
                ),
                (6321, 39, MMAP_IMPORT_V2_NATIVE),
            ],
        },
    },
    OldFile {
        name: "v3.mtape",
        bytes: fixture!("v3.mtape"),
        version: 3,
        blocks: 9,
        records: 3548,
        launcher_files: [
            "/work/old-v3/python/memtape/",
            "/root/.pyenv/versions/3.11.7/lib/python3.11/runpy.py",
            "<frozen runpy>",
            "/tmp/old-v3-venv/bin/memtape",
        ],
        launcher_frames: [
            "<frozen runpy>:88 in _run_code",
            "<frozen runpy>:98 in _run_module_code",
            "<frozen runpy>:291 in run_path",
            "/work/old-v3/python/memtape/_program.py:96 in run",
            "/work/old-v3/python/memtape/cli/run.py:247 in _record",
            "/work/old-v3/python/memtape/cli/run.py:200 in main",
            "/work/old-v3/python/memtape/cli/__init__.py:67 in main",
            "/tmp/old-v3-venv/bin/memtape:8 in <module>",
        ],
        mmap_native_frames: &[],
        modules: &[],
        native_frames: 0,
        reports: OldReports {
            events: 3192,
            totals: totals(1692, 1500, 1744096, 532574),
            peak: peak(1324195, 161, 100718858, 3038),
            end: (1211522, 192, 65536),
            duration_ns: 203134584,
            marker: (100718858, 3042),
            sites_at_peak: 24,
            sites_at_end: 20,
            top_at_peak: [
                (1000057, 2, prog(32, "load")),
                (300057, 2, prog(26, "scratch")),
                (9584, 85, py(BOOTSTRAP, 241, "_call_with_frames_removed")),
                (6512, 1, py(BOOTSTRAP, 702, "_load_unlocked")),
                (3801, 33, py(RUNPY, 259, "_get_code_from_file")),
                (768, 6, py(RUNPY, 96, "_run_module_code")),
                (
                    728,
                    2,
                    py(BOOTSTRAP_EXTERNAL, 1667, "FileFinder._fill_cache"),
                ),
                (
                    561,
                    9,
                    py(BOOTSTRAP_EXTERNAL, 1659, "FileFinder._fill_cache"),
                ),
                (400, 1, py(RUNPY, 81, "_run_code")),
                (240, 2, py(BOOTSTRAP_EXTERNAL, 1600, "FileFinder._get_spec")),
            ],
            top_at_end: [
                (1000057, 2, prog(32, "load")),
                (122420, 41, prog(21, "build_rows")),
                (65632, 2, prog(42, "main")),
                (9584, 85, py(BOOTSTRAP, 241, "_call_with_frames_removed")),
                (6512, 1, py(BOOTSTRAP, 702, "_load_unlocked")),
                (3801, 33, py(RUNPY, 259, "_get_code_from_file")),
                (
                    728,
                    2,
                    py(BOOTSTRAP_EXTERNAL, 1667, "FileFinder._fill_cache"),
                ),
                (
                    561,
                    9,
                    py(BOOTSTRAP_EXTERNAL, 1659, "FileFinder._fill_cache"),
                ),
                (400, 1, py(RUNPY, 102, "_run_module_code")),
                (400, 1, py(RUNPY, 81, "_run_code")),
            ],
            tracebacks_at_peak: [
                (1000057, 2, KEPT),
                (300057, 2, SCRATCH),
                (9243, 79, MMAP_IMPORT),
                (6512, 1, MMAP_MODULE_LOAD_V3),
            ],
            tracebacks_at_end: [
                (1000057, 2, KEPT),
                (122420, 41, ROWS),
                (65632, 2, MAPPING),
                (9243, 79, MMAP_IMPORT),
            ],
        },
    },
    OldFile {
        name: "v3-native.mtape",
        bytes: fixture!("v3-native.mtape"),
        version: 3,
        blocks: 9,
        records: 3639,
        launcher_files: [
            "/work/old-v3/python/memtape/",
            "/root/.pyenv/versions/3.11.7/lib/python3.11/runpy.py",
            "<frozen runpy>",
            "/tmp/old-v3-venv/bin/memtape",
        ],
        launcher_frames: [
            "<frozen runpy>:88 in _run_code",
            "<frozen runpy>:98 in _run_module_code",
            "<frozen runpy>:291 in run_path",
            "/work/old-v3/python/memtape/_program.py:96 in run",
            "/work/old-v3/python/memtape/cli/run.py:247 in _record",
            "/work/old-v3/python/memtape/cli/run.py:200 in main",
            "/work/old-v3/python/memtape/cli/__init__.py:67 in main",
            "/tmp/old-v3-venv/bin/memtape:8 in <module>",
        ],
        mmap_native_frames: &[native(
            MMAP_SO,
            0x3232,
            "Modules/mmapmodule.c",
            1365,
            "new_mmap_object",
        )],
        modules: &[LIBC, MMAP_SO],
        native_frames: 43,
        reports: OldReports {
            events: 3193,
            totals: totals(1693, 1500, 1744160, 532574),
            peak: peak(1324259, 162, 100826629, 3039),
            end: (1211586, 193, 65536),
            duration_ns: 207047001,
            marker: (100826629, 3043),
            sites_at_peak: 57,
            sites_at_end: 54,
            top_at_peak: [
                (1000057, 2, prog(32, "load")),
                (300057, 2, prog(26, "scratch")),
                (6512, 1, py(BOOTSTRAP, 702, "_load_unlocked")),
                (
                    6321,
                    39,
                    native(MMAP_SO, 0x3466, "Modules/mmapmodule.c", 1625, "mmap_exec"),
                ),
                (3801, 33, py(RUNPY, 259, "_get_code_from_file")),
                (
                    831,
                    2,
                    native(MMAP_SO, 0x3613, "Modules/mmapmodule.c", 1686, "mmap_exec"),
                ),
                (768, 6, py(RUNPY, 96, "_run_module_code")),
                (
                    728,
                    2,
                    py(BOOTSTRAP_EXTERNAL, 1667, "FileFinder._fill_cache"),
                ),
                (
                    625,
                    10,
                    py(BOOTSTRAP_EXTERNAL, 1659, "FileFinder._fill_cache"),
                ),
                (400, 1, py(RUNPY, 81, "_run_code")),
            ],
            top_at_end: [
                (1000057, 2, prog(32, "load")),
                (122420, 41, prog(21, "build_rows")),
                (
                    65536,
                    1,
                    native(
                        MMAP_SO,
                        0x3232,
                        "Modules/mmapmodule.c",
                        1365,
                        "new_mmap_object",
                    ),
                ),
                (6512, 1, py(BOOTSTRAP, 702, "_load_unlocked")),
                (
                    6321,
                    39,
                    native(MMAP_SO, 0x3466, "Modules/mmapmodule.c", 1625, "mmap_exec"),
                ),
                (3801, 33, py(RUNPY, 259, "_get_code_from_file")),
                (
                    831,
                    2,
                    native(MMAP_SO, 0x3613, "Modules/mmapmodule.c", 1686, "mmap_exec"),
                ),
                (
                    728,
                    2,
                    py(BOOTSTRAP_EXTERNAL, 1667, "FileFinder._fill_cache"),
                ),
                (
                    625,
                    10,
                    py(BOOTSTRAP_EXTERNAL, 1659, "FileFinder._fill_cache"),
                ),
                (400, 1, py(RUNPY, 102, "_run_module_code")),
            ],
            tracebacks_at_peak: [
                (1000057, 2, KEPT),
                (300057, 2, SCRATCH),
                (6512, 1, MMAP_MODULE_LOAD_V3),
                (
                    6321,
                    39,
                    &[
                        native(MMAP_SO, 0x3466, "Modules/mmapmodule.c", 1625, "mmap_exec"),
                        py(BOOTSTRAP, 241, "_call_with_frames_removed"),
                        py(BOOTSTRAP_EXTERNAL, 1241, "ExtensionFileLoader.exec_module"),
                        py(BOOTSTRAP, 690, "_load_unlocked"),
                        py(BOOTSTRAP, 1147, "_find_and_load_unlocked"),
                        py(BOOTSTRAP, 1176, "_find_and_load"),
                        prog(10, "<module>"),
                    ],
                ),
            ],
            tracebacks_at_end: [
                (1000057, 2, KEPT),
                (122420, 41, ROWS),
                (
                    65536,
                    1,
                    &[
                        native(
                            MMAP_SO,
                            0x3232,
                            "Modules/mmapmodule.c",
                            1365,
                            "new_mmap_object",
                        ),
                        prog(42, "main"),
                        prog(45, "<module>"),
                    ],
                ),
                (6512, 1, MMAP_MODULE_LOAD_V3),
            ],
        },
    },
];
