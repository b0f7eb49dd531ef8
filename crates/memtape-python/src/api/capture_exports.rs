//! Exports that read a capture file a second time: the blocks live at the end as
//! tracemalloc raw traces, and the last events as a PyTorch memory_viz snapshot.

use std::path::Path;

use memtape_core::capture::Record;
use memtape_core::{
    Action, Event, EventRing, LiveTable, MemorySnapshot, TorchSnapshotWriter, HOST_DEVICE,
};
use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};
use rustc_hash::FxHashMap;

use super::capture_analysis::PyCapture;
use super::capture_file::{free_in, stream};
use super::snapshot_file::SnapshotFile;

/// Every block live at the end as tracemalloc raw traces
/// `(domain, size, frames most recent first, total_nframe)` (reads the file again).
pub(super) fn live_traces<'py>(
    cap: &PyCapture,
    py: Python<'py>,
    progress: Option<&Bound<'_, PyAny>>,
) -> PyResult<Bound<'py, PyList>> {
    let mut live = LiveTable::new();
    stream(py, &cap.path, progress, |r| match *r {
        Record::Alloc {
            domain,
            addr,
            size,
            stack,
        } => {
            let _ = live.insert(domain, addr, size, stack);
        }
        Record::Free { domain, addr } => {
            free_in(&mut live, domain, addr);
        }
        _ => {}
    })?;
    let limit = if cap.nframe == 0 {
        usize::MAX
    } else {
        cap.nframe
    };
    let mut tuples: FxHashMap<u32, (Bound<'py, PyTuple>, usize)> = FxHashMap::default();
    let out = PyList::empty(py);
    for e in live.iter() {
        if let std::collections::hash_map::Entry::Vacant(slot) = tuples.entry(e.stack) {
            let all = cap.frames_of(e.stack, 0);
            let mut frames = all
                .iter()
                .take(limit)
                .map(|f| (f.filename.as_str(), f.line).into_pyobject(py))
                .collect::<PyResult<Vec<_>>>()?;
            if frames.is_empty() {
                frames.push(("<unknown>", 0u32).into_pyobject(py)?);
            }
            slot.insert((PyTuple::new(py, frames)?, all.len().max(1)));
        }
        let (frames, total) = &tuples[&e.stack];
        out.append((e.domain, e.size, frames.clone(), *total))?;
    }
    Ok(out)
}

/// Writes the last `max_entries` events as a PyTorch memory_viz snapshot (pickle or
/// JSON) at `out`; returns the number of trace entries (reads the file again).
pub(super) fn export_torch(
    cap: &PyCapture,
    py: Python<'_>,
    out: &Path,
    max_entries: usize,
    json: bool,
    progress: Option<&Bound<'_, PyAny>>,
) -> PyResult<u64> {
    let start_ns = cap.info.start_time_ns.unwrap_or(0);
    let mut live = LiveTable::new();
    let mut ring = EventRing::new(max_entries.max(1));
    let mut now = 0u64;
    let push = |ring: &mut EventRing, action, addr, size, stack, now: u64| {
        ring.push(Event {
            action,
            addr,
            size,
            requested_size: size,
            device: HOST_DEVICE,
            stream: 0,
            thread: 0,
            time_ns: start_ns + now,
            stack,
            op: 0,
        });
    };
    stream(py, &cap.path, progress, |r| match *r {
        Record::Time { ns } => now = ns,
        Record::Alloc {
            domain,
            addr,
            size,
            stack,
        } => {
            let _ = live.insert(domain, addr, size, stack);
            push(&mut ring, Action::Alloc, addr, size, stack, now);
        }
        Record::Free { domain, addr } => {
            if let Some(e) = free_in(&mut live, domain, addr) {
                push(&mut ring, Action::Free, addr, e.size, e.stack, now);
            }
        }
        _ => {}
    })?;
    let events: Vec<Event> = ring.iter().collect();
    let mut stacks = FxHashMap::default();
    for e in &events {
        stacks
            .entry(e.stack)
            .or_insert_with(|| cap.frames_of(e.stack, cap.nframe));
    }
    let snapshot = MemorySnapshot {
        events,
        stacks,
        op_names: vec![String::new()],
        segments: Vec::new(),
    };
    let cannot_write =
        |e: std::io::Error| PyOSError::new_err(format!("cannot write {}: {e}", out.display()));
    let file = SnapshotFile::create(py, out).map_err(cannot_write)?;
    py.detach(|| {
        let writer = TorchSnapshotWriter::new(&snapshot).share_frames(true);
        file.write(|pieces| {
            if json {
                writer.write_json_pieces(pieces)
            } else {
                writer.write_pickle_pieces(pieces)
            }
        })
    })
    .map(|stats| stats.trace_entries)
    .map_err(cannot_write)
}
