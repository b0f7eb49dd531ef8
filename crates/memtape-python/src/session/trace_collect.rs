//! Copying traces out of the recorder and resolving their frames to `(filename, line)`,
//! for tracemalloc's snapshots.
//!
//! The copy is taken under the recorder lock; resolving needs Python (filenames, line
//! tables) and so happens after the lock is released, with a reference held on every code
//! object involved so that nothing can free them meanwhile.

use std::sync::atomic::Ordering;

use memtape_core::report::is_launcher_file;
use memtape_core::{StackId, TraceSet, TraceSetBuilder};
use pyo3::prelude::*;
use rustc_hash::FxHashMap;

use crate::cpython::frame_resolve::{raw_frames, FrameResolver, HeldCodes};
use crate::cpython::frames::RawFrame;
use crate::record::recorder::{MAX_NFRAME, NFRAME, RECORDER};
use crate::session::launcher_frames;
use crate::thread::hook_mode;

/// A stack truncated to the traceback limit (whole when launcher frames are hidden),
/// innermost first, with its full depth.
struct CollectedStack {
    frames: Vec<RawFrame>,
    total_nframe: u64,
}

/// Traces and stacks copied out of the recorder.
struct Collected {
    traces: Vec<(u32, u64, StackId)>,
    stacks: FxHashMap<StackId, CollectedStack>,
    nframe: usize,
    launcher_files: Vec<String>,
    _codes: HeldCodes,
}

fn collect(py: Python<'_>, only: Option<(u32, u64)>) -> Option<Collected> {
    let nframe = NFRAME.load(Ordering::Relaxed) as usize;
    let launcher_files = launcher_frames::files();
    // Launcher frames are found from the outer end: take whole stacks then.
    let limit = if launcher_files.is_empty() {
        nframe
    } else {
        usize::MAX
    };
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
    for &(_, _, stack) in &traces {
        stacks.entry(stack).or_insert_with(|| CollectedStack {
            frames: raw_frames(&rec.stacks, stack, limit),
            total_nframe: u64::from(rec.stacks.depth(stack).min(MAX_NFRAME)),
        });
    }
    let codes = HeldCodes::hold(py, &rec.stacks, stacks.keys(), limit);
    Some(Collected {
        traces,
        stacks,
        nframe,
        launcher_files,
        _codes: codes,
    })
}

fn resolve(py: Python<'_>, collected: &Collected) -> TraceSet {
    let mut builder = TraceSetBuilder::new();
    let mut resolver = FrameResolver::new(py);
    let mut files: FxHashMap<usize, u32> = FxHashMap::default();
    let mut tracebacks: FxHashMap<StackId, u32> = FxHashMap::default();
    for (&id, stack) in &collected.stacks {
        let mut total_nframe = stack.total_nframe;
        let mut shown = &stack.frames[..];
        if !collected.launcher_files.is_empty() {
            let mut keep = shown.len();
            while keep > 1
                && is_launcher_file(
                    &collected.launcher_files,
                    &resolver.names(shown[keep - 1].code).0,
                )
            {
                keep -= 1;
            }
            total_nframe = total_nframe.min(keep as u64);
            shown = &shown[..keep.min(collected.nframe)];
        }
        let mut frames: Vec<u32> = Vec::with_capacity(shown.len());
        for f in shown {
            let file = match files.get(&f.code) {
                Some(file) => *file,
                None => {
                    let file = builder.filename(&resolver.names(f.code).0);
                    files.insert(f.code, file);
                    file
                }
            };
            let line = resolver.line(*f);
            frames.push(builder.frame(file, i64::from(line)));
        }
        if frames.is_empty() {
            // No Python frame (startup, C threads): tracemalloc's placeholder.
            let file = builder.filename("<unknown>");
            frames.push(builder.frame(file, 0));
        }
        tracebacks.insert(id, builder.traceback(frames, Some(total_nframe)));
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
