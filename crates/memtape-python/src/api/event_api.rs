//! `record_memory_events`, `get_memory_events` and the resolved [`MemorySnapshot`] that
//! every event export is written from.

use memtape_core::{Event, MemorySnapshot, ResolvedFrame, StackId};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use rustc_hash::{FxHashMap, FxHashSet};

use crate::api::own_work::own_work;
use crate::api::prefaulted;
use crate::api::snapshot_file::SnapshotFile;
use crate::cpython::frame_resolve::{raw_frames, FrameResolver, HeldCodes};
use crate::cpython::frames::RawFrame;
use crate::intercept::{hooks, numpy_handler};
use crate::native as native_memory;
use crate::record::recorder::{self, EventSettings, RECORDER};
use crate::session::{clock_thread, event_consumer};
use crate::thread::hook_mode;

/// Whether the event recording asked for native stacks.
static EVENT_NATIVE_STACKS: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Starts (with a fresh ring) or stops recording memory events.
#[pyfunction]
#[pyo3(signature = (enabled, max_entries, min_size, python_heap, framework, max_frames, native=false, native_stacks=false))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn record_memory_events(
    py: Python<'_>,
    enabled: bool,
    max_entries: usize,
    min_size: u64,
    python_heap: bool,
    framework: bool,
    max_frames: u32,
    native: bool,
    native_stacks: bool,
) -> PyResult<Bound<'_, PyAny>> {
    own_work(py, || {
        // A new recording, or none: native stacks for events start again if asked.
        if EVENT_NATIVE_STACKS.swap(false, std::sync::atomic::Ordering::AcqRel) {
            native_memory::unwind::native_stacks::disable();
        }
        if enabled && native_stacks {
            native_memory::unwind::native_stacks::enable();
            EVENT_NATIVE_STACKS.store(true, std::sync::atomic::Ordering::Release);
        }
        set_recording(
            py,
            enabled,
            EventSettings {
                max_entries,
                min_size,
                python_heap,
                framework,
                native,
                max_frames: max_frames.max(1),
            },
        )
    })
}

fn set_recording(py: Python<'_>, enabled: bool, settings: EventSettings) -> PyResult<()> {
    // A new recording, or none: native tracing for events starts again below if asked.
    native_memory::stop(native_memory::SINK_EVENTS);
    if !enabled {
        recorder::stop_events();
        if !recorder::hooks_active() {
            hooks::uninstall(py);
            numpy_handler::sync(py, false);
        }
        return Ok(());
    }
    if settings.max_entries == 0 {
        return Err(PyValueError::new_err("max_entries must be at least 1"));
    }
    if settings.python_heap || settings.native {
        // Native tracing needs the Python allocators wrapped too, so that the malloc
        // beneath a Python block is not recorded as native.
        numpy_handler::sync(py, true);
        hooks::install(py);
    }
    let native = settings.native;
    // Only Python-heap events reuse counter readings, so only they need the clock's beat.
    let python_heap = settings.python_heap;
    event_consumer::start();
    let released = recorder::start_events(settings);
    if python_heap {
        clock_thread::start();
    }
    if native {
        native_memory::start(native_memory::SINK_EVENTS);
    }
    if !recorder::hooks_active() {
        hooks::uninstall(py);
    }
    if let Some(codes) = released {
        codes.release(py);
    }
    Ok(())
}

/// True while memory events are being recorded.
#[pyfunction]
pub(crate) fn is_recording_memory_events() -> bool {
    recorder::events_recording()
}

/// `(kept, dropped)` counts of the current or last recording.
#[pyfunction]
pub(crate) fn memory_event_counts(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    own_work(py, || {
        Ok(RECORDER
            .lock()
            .as_mut()
            .and_then(|r| r.events.as_mut())
            .map_or((0, 0), |e| {
                let store = e.settle();
                (store.ring.len(), store.ring.dropped())
            }))
    })
}

struct CopiedEvents {
    snapshot: MemorySnapshot,
    raw: FxHashMap<StackId, Vec<RawFrame>>,
    _codes: HeldCodes,
}

fn copy_events(py: Python<'_>) -> CopiedEvents {
    // Room for the events, its pages mapped before the lock is held for the copy (a
    // recording still running may add some meanwhile: the vector then grows).
    let kept = RECORDER
        .lock()
        .as_mut()
        .and_then(|r| r.events.as_mut())
        .map_or(0, |e| e.settle().ring.len());
    let mut events: Vec<Event> = prefaulted::with_capacity(kept);
    let mut guard = RECORDER.lock();
    let Some(rec) = guard.as_mut() else {
        return CopiedEvents {
            snapshot: MemorySnapshot {
                op_names: vec![String::new()],
                ..Default::default()
            },
            raw: FxHashMap::default(),
            _codes: HeldCodes::default(),
        };
    };
    let limit = match rec.events.as_mut() {
        Some(sink) => {
            // The ring keeps the recording's clock ticks; events carry wall time.
            let scale = sink.tick_scale();
            // One pass: each event copied with its time converted.
            events.extend(sink.settle().ring.iter().map(|e| Event {
                time_ns: scale.ns(e.time_ns),
                ..e
            }));
            sink.max_frames as usize
        }
        None => 0,
    };
    let rec = &*rec;
    let segments = rec.allocators.segments();
    let mut stacks = used_stacks(&events);
    stacks.extend(segments.iter().filter(|s| s.active).map(|s| s.stack));
    let raw: FxHashMap<StackId, Vec<RawFrame>> = stacks
        .iter()
        .map(|&id| (id, raw_frames(&rec.stacks, id, limit.max(1))))
        .collect();
    let codes = HeldCodes::hold(py, &rec.stacks, raw.keys(), limit.max(1));
    CopiedEvents {
        snapshot: MemorySnapshot {
            events,
            stacks: FxHashMap::default(),
            op_names: rec.ops.all(),
            segments,
        },
        raw,
        _codes: codes,
    }
}

/// The stacks `events` use. Most events repeat a stack seen a few events before: a
/// small direct-mapped table of the stacks seen last skips most set insertions (this
/// runs under the recorder's lock).
fn used_stacks(events: &[Event]) -> FxHashSet<StackId> {
    const RECENT: usize = 64;
    let mut recent = [StackId::MAX; RECENT];
    let mut stacks = FxHashSet::default();
    for event in events {
        let seen = &mut recent[event.stack as usize % RECENT];
        if *seen != event.stack {
            *seen = event.stack;
            stacks.insert(event.stack);
        }
    }
    stacks
}

/// The recorded events with resolved frames (innermost first), plus allocator segments.
pub(crate) fn memory_snapshot(py: Python<'_>) -> MemorySnapshot {
    hook_mode::untraced(|| {
        // `_codes` keeps the code objects alive until the frames are resolved.
        let CopiedEvents {
            mut snapshot,
            raw,
            _codes,
        } = copy_events(py);
        let mut resolver = FrameResolver::new(py);
        for (&id, frames) in &raw {
            let resolved = frames
                .iter()
                .map(|f| {
                    let (filename, name) = resolver.names(f.code).clone();
                    ResolvedFrame {
                        filename,
                        name,
                        line: resolver.line(*f),
                    }
                })
                .collect();
            snapshot.stacks.insert(id, resolved);
        }
        snapshot
    })
}

/// One event as the dict users get: frames outermost first as (filename, name, line).
fn event_dict<'py>(
    py: Python<'py>,
    snapshot: &MemorySnapshot,
    e: &Event,
    frames_cache: &mut FxHashMap<StackId, Bound<'py, PyTuple>>,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("action", e.action.name())?;
    d.set_item("address", e.addr)?;
    d.set_item("size", e.size)?;
    d.set_item("requested_size", e.requested_size)?;
    d.set_item("device", e.device)?;
    d.set_item("stream", e.stream)?;
    d.set_item("thread", e.thread)?;
    d.set_item("timestamp_ns", e.time_ns)?;
    d.set_item("op", snapshot.op_name(e.op))?;
    let frames = match frames_cache.get(&e.stack) {
        Some(t) => t.clone(),
        None => {
            let items = snapshot
                .frames(e.stack)
                .iter()
                .rev()
                .map(|f| (f.filename.as_str(), f.name.as_str(), f.line).into_pyobject(py))
                .collect::<PyResult<Vec<_>>>()?;
            let t = PyTuple::new(py, items)?;
            frames_cache.insert(e.stack, t.clone());
            t
        }
    };
    d.set_item("frames", frames)?;
    Ok(d)
}

/// The kept events, oldest first, as dicts.
#[pyfunction]
pub(crate) fn get_memory_events(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    own_work(py, || {
        let snapshot = memory_snapshot(py);
        let list = PyList::empty(py);
        let mut cache = FxHashMap::default();
        for e in &snapshot.events {
            list.append(event_dict(py, &snapshot, e, &mut cache)?)?;
        }
        Ok(list)
    })
}

/// Rebuilds a snapshot from events as `get_memory_events` returned them (frames
/// outermost first). Their allocator state at the end is unknown, so no segments.
fn snapshot_from_dicts(events: &Bound<'_, PyAny>) -> PyResult<MemorySnapshot> {
    use memtape_core::Action;
    let mut snapshot = MemorySnapshot {
        op_names: vec![String::new()],
        ..Default::default()
    };
    let mut stack_ids: FxHashMap<Vec<(String, String, u32)>, StackId> = FxHashMap::default();
    let mut op_ids: FxHashMap<String, u32> = FxHashMap::default();
    for (index, item) in events.try_iter()?.enumerate() {
        let item = item?;
        let d = item.cast::<PyDict>().map_err(|_| {
            PyValueError::new_err(format!(
                "events[{index}] is not a dict from get_memory_events()"
            ))
        })?;
        let get = |key: &str| -> PyResult<Bound<'_, PyAny>> {
            d.get_item(key)?
                .ok_or_else(|| PyValueError::new_err(format!("events[{index}] has no {key:?} key")))
        };
        let bad =
            |key: &str| PyValueError::new_err(format!("events[{index}][{key:?}] is not valid"));
        let name: String = get("action")?.extract().map_err(|_| bad("action"))?;
        let action = Action::from_name(&name).ok_or_else(|| bad("action"))?;
        let frames: Vec<(String, String, u32)> =
            get("frames")?.extract().map_err(|_| bad("frames"))?;
        let next = stack_ids.len() as StackId + 1;
        let stack = *stack_ids.entry(frames.clone()).or_insert_with(|| {
            let resolved = frames
                .iter()
                .rev()
                .map(|(filename, name, line)| ResolvedFrame {
                    filename: filename.clone(),
                    name: name.clone(),
                    line: *line,
                })
                .collect();
            snapshot.stacks.insert(next, resolved);
            next
        });
        let op_name: Option<String> = get("op")?.extract().map_err(|_| bad("op"))?;
        let op = match op_name {
            Some(op) => *op_ids.entry(op.clone()).or_insert_with(|| {
                snapshot.op_names.push(op);
                (snapshot.op_names.len() - 1) as u32
            }),
            None => 0,
        };
        let int = |key: &str| -> PyResult<i128> { get(key)?.extract().map_err(|_| bad(key)) };
        let unsigned =
            |key: &str| -> PyResult<u64> { u64::try_from(int(key)?).map_err(|_| bad(key)) };
        snapshot.events.push(Event {
            action,
            addr: unsigned("address")?,
            size: unsigned("size")?,
            requested_size: unsigned("requested_size")?,
            device: i32::try_from(int("device")?).map_err(|_| bad("device"))?,
            stream: unsigned("stream")?,
            thread: u32::try_from(int("thread")?).map_err(|_| bad("thread"))?,
            time_ns: unsigned("timestamp_ns")?,
            stack,
            op,
        });
    }
    Ok(snapshot)
}

/// Writes the recorded events (or `events` saved from `get_memory_events`) for PyTorch's
/// memory viewer, as a pickle or as JSON. Returns `(trace entries, host device index)`.
#[pyfunction]
#[pyo3(signature = (path, format, events=None))]
pub(crate) fn dump_snapshot<'py>(
    py: Python<'py>,
    path: std::path::PathBuf,
    format: &str,
    events: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    own_work(py, || write_snapshot(py, &path, format, events))
}

fn write_snapshot(
    py: Python<'_>,
    path: &std::path::Path,
    format: &str,
    events: Option<&Bound<'_, PyAny>>,
) -> PyResult<(u64, Option<usize>)> {
    let json = match format {
        "pickle" => false,
        "json" => true,
        other => {
            return Err(PyValueError::new_err(format!(
                "unknown format {other:?}: expected 'pickle' or 'json'"
            )))
        }
    };
    let snapshot = match events {
        Some(events) => snapshot_from_dicts(events)?,
        None => memory_snapshot(py),
    };
    let cannot_write = |e: std::io::Error| {
        pyo3::exceptions::PyOSError::new_err(format!("cannot write {}: {e}", path.display()))
    };
    let file = SnapshotFile::create(py, path).map_err(cannot_write)?;
    let write = || {
        let writer = memtape_core::TorchSnapshotWriter::new(&snapshot).share_frames(true);
        file.write(|pieces| {
            if json {
                writer.write_json_pieces(pieces)
            } else {
                writer.write_pickle_pieces(pieces)
            }
        })
    };
    let stats = py.detach(write).map_err(cannot_write)?;
    Ok((stats.trace_entries, stats.host_index))
}
