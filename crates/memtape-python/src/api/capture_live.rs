//! The live view's reader (`memtape live FILE`, `memtape run --live`): a thread follows a
//! capture file while another process writes it ([`Following`], as the end-of-run
//! summary's [`super::capture_follow`] does) and keeps the analysis so far, which the view
//! reads about once a second ([`LiveCapture::snapshot`]) without reading the file again.
//!
//! The thread holds the analysis' lock while it feeds one block and lets it go at the
//! block's end, so a snapshot waits at most for one block, and the thread waits for the
//! writer with the lock free.

use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use memtape_core::capture::{CaptureReader, Following, HeapEvent, ReadSummary, RecordVisitor};
use memtape_core::report::{group_sites, Analysis, Record, ReplayOptions, StackTotal};
use memtape_core::GroupBy;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use rustc_hash::FxHashMap;

use super::capture_file::{capture_error, run_info, shown_file_names};
use super::report_api::import_frames;
use crate::session::signal_mask::spawn_own_thread;
use crate::thread::hook_mode::HookMode;

/// The longest the thread sleeps at the end of the file before looking again.
const POLL: Duration = Duration::from_millis(50);

/// What the reading thread has taken in so far.
struct LiveState {
    analysis: Analysis,
    /// Bytes and blocks allocated since the start by stack id, freed or not.
    allocated: FxHashMap<u32, (u64, u64)>,
    /// The header's metadata, once read.
    metadata: Option<String>,
    /// How the reading ended: `None` while it goes on; the error's message if it failed.
    ended: Option<Result<ReadSummary, String>>,
}

/// What a snapshot's sites add up: the live set now, or everything allocated so far.
#[derive(Clone, Copy)]
enum SiteTable {
    Live,
    Allocated,
}

impl SiteTable {
    fn parse(name: &str) -> PyResult<Self> {
        match name {
            "live" => Ok(Self::Live),
            "allocated" => Ok(Self::Allocated),
            other => Err(PyValueError::new_err(format!(
                "unknown table {other:?}: expected live or allocated"
            ))),
        }
    }
}

impl LiveState {
    fn new() -> Self {
        Self {
            analysis: Analysis::new(ReplayOptions {
                time_histogram: false,
                ..ReplayOptions::default()
            }),
            allocated: FxHashMap::default(),
            metadata: None,
            ended: None,
        }
    }
}

fn lock(state: &Mutex<LiveState>) -> MutexGuard<'_, LiveState> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Feeds the records into the shared state, holding its lock from a block's first record
/// to its end.
struct Feeding<'m> {
    state: &'m Mutex<LiveState>,
    guard: Option<MutexGuard<'m, LiveState>>,
    /// Set at the trailer: nothing more is coming, the reading ends at the file's end.
    finished: &'m AtomicBool,
}

impl Feeding<'_> {
    #[inline]
    fn state(&mut self) -> &mut LiveState {
        let state = self.state;
        self.guard.get_or_insert_with(|| lock(state))
    }
}

impl<'a> RecordVisitor<'a> for Feeding<'_> {
    #[inline]
    fn alloc(&mut self, domain: u32, addr: u64, size: u64, stack: u32) {
        let state = self.state();
        let total = state.allocated.entry(stack).or_default();
        total.0 = total.0.saturating_add(size);
        total.1 += 1;
        RecordVisitor::alloc(&mut state.analysis, domain, addr, size, stack);
    }

    #[inline]
    fn free(&mut self, domain: Option<u32>, addr: u64) {
        RecordVisitor::free(&mut self.state().analysis, domain, addr);
    }

    fn record(&mut self, record: Record<'a>) {
        self.state().analysis.feed(&record);
    }

    fn block_end(&mut self) {
        self.guard = None;
    }

    fn damage(&mut self) {
        RecordVisitor::damage(&mut self.state().analysis);
    }

    fn trailer(&mut self) {
        self.guard = None;
        self.finished.store(true, Ordering::Release);
    }

    fn events(&mut self, events: &[HeapEvent]) {
        let state = self.state();
        for event in events {
            if let HeapEvent::Alloc { stack, size, .. } = *event {
                let total = state.allocated.entry(stack).or_default();
                total.0 = total.0.saturating_add(size);
                total.1 += 1;
            }
        }
        state.analysis.events(events);
    }
}

/// The thread: reads the header, then every block as it is written, until the trailer
/// (the recording ended: it stops waiting for more), a damaged end or
/// [`LiveCapture::stop`].
fn follow(path: PathBuf, file: File, finished: Arc<AtomicBool>, state: Arc<Mutex<LiveState>>) {
    let input =
        BufReader::with_capacity(1 << 20, Following::new(file, Arc::clone(&finished), POLL));
    let outcome = (|| {
        let mut reader = CaptureReader::new(input).map_err(|e| capture_error(&path, &e))?;
        let metadata = reader.metadata_json().to_owned();
        {
            let mut s = lock(&state);
            let (_, _, launcher_files) = run_info(&path, &metadata, &ReadSummary::default());
            s.analysis
                .symbols_mut()
                .hide_launcher_frames(launcher_files);
            s.metadata = Some(metadata);
        }
        let mut feeding = Feeding {
            state: &state,
            guard: None,
            finished: &finished,
        };
        let summary = reader.visit_records(&mut feeding);
        drop(feeding);
        summary.map_err(|e| capture_error(&path, &e))
    })();
    lock(&state).ended = Some(outcome.map_err(|e| e.to_string()));
}

/// A capture file followed while another process writes it.
#[pyclass(name = "LiveCapture", module = "memtape._native")]
pub(crate) struct LiveCapture {
    state: Arc<Mutex<LiveState>>,
    /// Set to stop following: the end of the file is then the end.
    finished: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

#[pymethods]
impl LiveCapture {
    /// Starts following `path` (a regular file, which may still be empty).
    #[new]
    fn new(path: PathBuf) -> PyResult<Self> {
        let file = File::open(&path)
            .map_err(|e| PyOSError::new_err(format!("cannot open {}: {e}", path.display())))?;
        if !file.metadata().is_ok_and(|m| m.is_file()) {
            return Err(PyOSError::new_err(format!(
                "{} is not a regular file: only a capture file on disk can be followed",
                path.display()
            )));
        }
        let state = Arc::new(Mutex::new(LiveState::new()));
        let finished = Arc::new(AtomicBool::new(false));
        let (shared, flag, name) = (Arc::clone(&state), Arc::clone(&finished), path.clone());
        let thread = spawn_own_thread("memtape-live", HookMode::InAllocHook, move || {
            follow(name, file, flag, shared)
        })
        .map_err(|e| PyOSError::new_err(format!("cannot start the live view's reader: {e}")))?;
        Ok(Self {
            state,
            finished,
            thread: Some(thread),
        })
    }

    /// The header's metadata (JSON text), or None before the header is written.
    #[getter]
    fn metadata_json(&self) -> Option<String> {
        lock(&self.state).metadata.clone()
    }

    /// Stops following: what is written now is read, then reading ends (a capture still
    /// being written then counts as cut short). Returns at once.
    fn stop(&self) {
        self.finished.store(true, Ordering::Release);
        if let Some(thread) = &self.thread {
            thread.thread().unpark();
        }
    }

    /// Waits up to `timeout` seconds for the reading to end; whether it has.
    fn wait(&self, py: Python<'_>, timeout: f64) -> bool {
        let deadline = std::time::Instant::now() + Duration::from_secs_f64(timeout.max(0.0));
        py.detach(|| loop {
            if lock(&self.state).ended.is_some() {
                return true;
            }
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        })
    }

    /// Where the analysis stands, as a dict: `started` (the header was read), `ended`
    /// (None while reading goes on, else `complete`, `cut short`, or the error's
    /// message), `current` and `peak` bytes and their split by source
    /// (`[(source, bytes)]`), `peak_time` and `time` (seconds since the start),
    /// `allocs`, `frees`, `allocated` (bytes), `series` (memory over time up to the last
    /// time stamp, `[(seconds, bytes)]`, each point the highest of its stretch of time,
    /// at most 2,000), and the top `limit` sites of `table`
    /// (`live` now or `allocated` since the start) grouped `by` line or file, as
    /// `[(frames, bytes, count)]` (frames innermost first as `(filename, function,
    /// line)`), with `sites_total` (their table's bytes) and `sites_count` (its sites).
    #[pyo3(signature = (*, table="live", by="lineno", limit=50, imports="hide"))]
    fn snapshot<'py>(
        &self,
        py: Python<'py>,
        table: &str,
        by: &str,
        limit: usize,
        imports: &str,
    ) -> PyResult<Bound<'py, PyDict>> {
        let which = SiteTable::parse(table)?;
        let by = match by {
            "lineno" => GroupBy::Lineno,
            "filename" => GroupBy::Filename,
            other => {
                return Err(PyValueError::new_err(format!(
                    "unknown grouping {other:?}: expected lineno or filename"
                )))
            }
        };
        let imports = import_frames(imports)?;
        let (now, series, sites, total, started, ended) = {
            let mut state = lock(&self.state);
            let rows: Vec<StackTotal> = match which {
                SiteTable::Live => state.analysis.live_table_now(),
                SiteTable::Allocated => state
                    .allocated
                    .iter()
                    .map(|(&stack, &(bytes, count))| StackTotal {
                        stack,
                        bytes,
                        count,
                    })
                    .collect(),
            };
            let names = state
                .metadata
                .as_deref()
                .map(shown_file_names)
                .unwrap_or_default();
            let symbols = state.analysis.symbols_mut();
            symbols.symbolize_native();
            symbols.show_files_as(&names);
            symbols.set_import_frames(imports);
            let sites = group_sites(&rows, state.analysis.symbols(), by, 0);
            let total: u64 = rows.iter().map(|r| r.bytes).sum();
            let ended = state.ended.as_ref().map(|e| match e {
                Ok(s) if s.complete => "complete".to_owned(),
                Ok(_) => "cut short".to_owned(),
                Err(message) => message.clone(),
            });
            let series: Vec<(f64, u64)> = state
                .analysis
                .series_now()
                .iter()
                .map(|p| (p.time_ns as f64 / 1e9, p.bytes))
                .collect();
            (
                state.analysis.now(),
                series,
                sites,
                total,
                state.metadata.is_some(),
                ended,
            )
        };
        let out = PyDict::new(py);
        let split = |s: &memtape_core::SourceSplit| -> Vec<(&'static str, u64)> {
            s.iter().map(|(source, b)| (source.name(), b)).collect()
        };
        out.set_item("started", started)?;
        out.set_item("ended", ended)?;
        out.set_item("current", now.current_bytes)?;
        out.set_item("current_by_source", split(&now.current_by_source))?;
        out.set_item("peak", now.peak.bytes)?;
        out.set_item("peak_by_source", split(&now.peak_by_source))?;
        out.set_item("peak_time", now.peak.time_ns as f64 / 1e9)?;
        out.set_item("time", now.time_ns as f64 / 1e9)?;
        out.set_item("allocs", now.totals.allocs)?;
        out.set_item("frees", now.totals.frees)?;
        out.set_item("allocated", now.totals.bytes_allocated)?;
        out.set_item("series", series)?;
        out.set_item("sites_total", total)?;
        out.set_item("sites_count", sites.len())?;
        let rows = PyList::empty(py);
        for s in sites.iter().take(limit) {
            let frames = s
                .frames
                .iter()
                .map(|f| (f.filename.as_str(), f.function.as_str(), f.line).into_pyobject(py))
                .collect::<PyResult<Vec<_>>>()?;
            rows.append((PyTuple::new(py, frames)?, s.bytes, s.count))?;
        }
        out.set_item("sites", rows)?;
        Ok(out)
    }
}

impl Drop for LiveCapture {
    fn drop(&mut self) {
        // The thread ends on its own once it has read what is there.
        self.stop();
        self.thread = None;
    }
}
