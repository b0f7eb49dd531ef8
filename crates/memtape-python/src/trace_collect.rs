//! Copying traces out of the recorder and resolving their frames to `(filename, line)`.
//!
//! The copy is taken under the recorder lock; resolving needs Python (filenames, line
//! tables) and so happens after the lock is released, with a reference held on every code
//! object involved so that nothing can free them meanwhile.

use memtape_core::{StackId, TraceSet, TraceSetBuilder};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyString;
use rustc_hash::FxHashMap;

use crate::frames::RawFrame;
use crate::hook_mode;
use crate::recorder::{MAX_NFRAME, NFRAME, RECORDER};

/// A stack truncated to the traceback limit, innermost first, with its full depth.
struct CollectedStack {
    frames: Vec<RawFrame>,
    total_nframe: u64,
}

/// Traces and stacks copied out of the recorder, holding a reference on each code object.
struct Collected {
    traces: Vec<(u32, u64, StackId)>,
    stacks: FxHashMap<StackId, CollectedStack>,
    codes: Vec<usize>,
}

impl Drop for Collected {
    fn drop(&mut self) {
        for code in self.codes.drain(..) {
            // SAFETY: one reference was taken on each code in `collect`, with the GIL,
            // and `Collected` never leaves the GIL-holding call that created it.
            unsafe { ffi::Py_DECREF(code as *mut ffi::PyObject) };
        }
    }
}

fn collect(_py: Python<'_>, only: Option<(u32, u64)>) -> Option<Collected> {
    let nframe = NFRAME.load(std::sync::atomic::Ordering::Relaxed) as usize;
    let guard = RECORDER.lock();
    let rec = guard.as_ref().filter(|r| r.tracing)?;
    let traces: Vec<(u32, u64, StackId)> = match only {
        Some((domain, addr)) => {
            let e = rec.live.get(domain, addr)?;
            vec![(e.domain, e.size, e.stack)]
        }
        None => rec
            .live
            .iter()
            .map(|e| (e.domain, e.size, e.stack))
            .collect(),
    };
    let mut stacks = FxHashMap::default();
    let mut codes = rustc_hash::FxHashSet::default();
    for &(_, _, stack) in &traces {
        stacks.entry(stack).or_insert_with(|| {
            let frames: Vec<RawFrame> = rec
                .stacks
                .frames(stack, nframe)
                .map(|n| RawFrame {
                    code: n.code,
                    lasti: n.lasti,
                })
                .collect();
            codes.extend(frames.iter().map(|f| f.code));
            let total_nframe = u64::from(rec.stacks.depth(stack).min(MAX_NFRAME));
            CollectedStack {
                frames,
                total_nframe,
            }
        });
    }
    let codes: Vec<usize> = codes.into_iter().collect();
    for &code in &codes {
        // SAFETY: the recorder holds a reference on every code in its stack table and we
        // hold the GIL (proved by `_py`), so the object is alive; INCREF does not allocate.
        unsafe { ffi::Py_INCREF(code as *mut ffi::PyObject) };
    }
    Some(Collected {
        traces,
        stacks,
        codes,
    })
}

/// Turns code objects and instruction offsets into interned `(filename, line)` frames.
struct FrameResolver<'a, 'py> {
    py: Python<'py>,
    builder: &'a mut TraceSetBuilder,
    filenames: FxHashMap<usize, u32>,
    frames: FxHashMap<RawFrame, u32>,
}

impl FrameResolver<'_, '_> {
    fn frame(&mut self, f: RawFrame) -> u32 {
        if let Some(id) = self.frames.get(&f) {
            return *id;
        }
        let file = self.filename(f.code);
        // SAFETY: `f.code` is a live code object (a reference is held by `Collected`) and
        // the GIL is held; PyCode_Addr2Line only reads the line table.
        let line = unsafe {
            ffi::PyCode_Addr2Line(f.code as *mut ffi::PyCodeObject, f.lasti.saturating_mul(2))
        };
        let id = self.builder.frame(file, i64::from(line.max(0)));
        self.frames.insert(f, id);
        id
    }

    fn filename(&mut self, code: usize) -> u32 {
        if let Some(id) = self.filenames.get(&code) {
            return *id;
        }
        // SAFETY: as in `frame`: a live code object, borrowed while we hold the GIL.
        let code_obj = unsafe { Bound::from_borrowed_ptr(self.py, code as *mut ffi::PyObject) };
        let name = code_obj
            .getattr("co_filename")
            .ok()
            .and_then(|n| n.downcast_into::<PyString>().ok())
            .map_or_else(
                || "<unknown>".to_owned(),
                |s| s.to_string_lossy().into_owned(),
            );
        let id = self.builder.filename(&name);
        self.filenames.insert(code, id);
        id
    }
}

fn resolve(py: Python<'_>, collected: &Collected) -> TraceSet {
    let mut builder = TraceSetBuilder::new();
    let mut tracebacks: FxHashMap<StackId, u32> = FxHashMap::default();
    {
        let mut resolver = FrameResolver {
            py,
            builder: &mut builder,
            filenames: FxHashMap::default(),
            frames: FxHashMap::default(),
        };
        for (&id, stack) in &collected.stacks {
            let mut frames: Vec<u32> = stack.frames.iter().map(|f| resolver.frame(*f)).collect();
            if frames.is_empty() {
                // No Python frame (startup, C threads): tracemalloc's placeholder.
                let file = resolver.builder.filename("<unknown>");
                frames.push(resolver.builder.frame(file, 0));
            }
            let tb = resolver.builder.traceback(frames, Some(stack.total_nframe));
            tracebacks.insert(id, tb);
        }
    }
    for &(domain, size, stack) in &collected.traces {
        builder.trace(u64::from(domain), size, tracebacks[&stack]);
    }
    builder.build()
}

/// A snapshot of every live trace, or `None` when not tracing.
pub(crate) fn snapshot(py: Python<'_>) -> Option<TraceSet> {
    hook_mode::untraced(|| {
        let collected = collect(py, None)?;
        Some(resolve(py, &collected))
    })
}

/// The trace of one block, or `None` when it is not traced.
pub(crate) fn block_trace(py: Python<'_>, domain: u32, addr: u64) -> Option<TraceSet> {
    hook_mode::untraced(|| {
        let collected = collect(py, Some((domain, addr)))?;
        Some(resolve(py, &collected))
    })
}
