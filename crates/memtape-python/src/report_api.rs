//! Reading capture files from Python: `memtape stats/top/diff/flamegraph/report/export`.
//!
//! `analyze_capture` streams a file once (without the GIL) into a [`PyCapture`]; the
//! renderers are its methods. Exports that need single blocks (a tracemalloc snapshot,
//! the memory_viz trace) read the file a second time.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use memtape_core::capture::{CaptureError, CaptureReader, ReadSummary, Record};
use memtape_core::report::{
    compare, diff_text, flamegraph_html, folded, group_sites, has_several_sources, html_report,
    json_diff, json_sites, json_summary, source_split_text, stats_text, timeline_csv, top_text,
    total_bytes, Analysis, HtmlReportOptions, Moment, PrivateAllocator, ReplayOptions,
    ReplayResult, RunInfo, Site, StackTotal, Symbols, Ticks,
};
use memtape_core::{
    Action, Event, EventRing, GroupBy, LiveEntry, LiveTable, MemorySnapshot, ResolvedFrame,
    TorchSnapshotWriter, HOST_DEVICE,
};
use pyo3::create_exception;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};
use rustc_hash::FxHashMap;

use crate::numpy_handler::NUMPY_DOMAIN;

create_exception!(
    _native,
    CaptureFileError,
    PyValueError,
    "A capture file that is truncated in its header, corrupt, or not a capture."
);

/// Counts the bytes read, for progress bars.
struct Counting<R> {
    inner: R,
    read: Arc<AtomicU64>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

fn capture_error(path: &Path, e: &CaptureError) -> PyErr {
    CaptureFileError::new_err(format!("{}: {e}", path.display()))
}

type FileReader = CaptureReader<Counting<BufReader<File>>>;

fn open(path: &Path) -> PyResult<(FileReader, Arc<AtomicU64>, u64)> {
    let file = File::open(path)
        .map_err(|e| PyOSError::new_err(format!("cannot open {}: {e}", path.display())))?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    let read = Arc::new(AtomicU64::new(0));
    let counting = Counting {
        inner: BufReader::with_capacity(1 << 20, file),
        read: Arc::clone(&read),
    };
    let reader = CaptureReader::new(counting).map_err(|e| capture_error(path, &e))?;
    Ok((reader, read, size))
}

/// Reads every record of `path` into `f` without the GIL, calling `progress(read, total)`
/// (with the GIL) at most every 100 ms.
fn stream(
    py: Python<'_>,
    path: &Path,
    progress: Option<&Bound<'_, PyAny>>,
    mut f: impl FnMut(&Record<'_>) + Send,
) -> PyResult<(String, ReadSummary)> {
    let (mut reader, read, size) = open(path)?;
    let metadata = reader.metadata_json().to_owned();
    let progress: Option<Py<PyAny>> = progress.map(|p| p.clone().unbind());
    let mut last = Instant::now();
    let summary = py.allow_threads(|| {
        reader.for_each_record(|r| {
            f(&r);
            if progress.is_some() && last.elapsed() >= Duration::from_millis(100) {
                last = Instant::now();
                let done = read.load(Ordering::Relaxed);
                if let Some(p) = &progress {
                    Python::with_gil(|py| {
                        // A failing progress bar must not stop the report.
                        let _ = p.call1(py, (done, size));
                    });
                }
            }
        })
    });
    let summary = summary.map_err(|e| capture_error(path, &e))?;
    Ok((metadata, summary))
}

fn parse_moment(spec: &str) -> PyResult<Moment> {
    if let Some(label) = spec.strip_prefix("marker:") {
        return Ok(Moment::Marker(label.to_owned()));
    }
    if let Some(ns) = spec.strip_prefix("time:") {
        return ns.parse().map(Moment::Time).map_err(|_| {
            PyValueError::new_err(format!(
                "bad moment {spec:?}: time:NS takes whole nanoseconds"
            ))
        });
    }
    Err(PyValueError::new_err(format!(
        "bad moment {spec:?}: expected marker:LABEL or time:NS"
    )))
}

/// What the header and trailer say: the run, the frame limit, and the launcher files
/// `memtape run` listed (see `cli/run.py`).
fn run_info(path: &Path, metadata: &str, summary: &ReadSummary) -> (RunInfo, usize, Vec<String>) {
    let meta: serde_json::Value = serde_json::from_str(metadata).unwrap_or_default();
    let trailer: serde_json::Value = summary
        .trailer_json
        .as_deref()
        .and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or_default();
    let text =
        |v: &serde_json::Value, k: &str| v.get(k).and_then(|x| x.as_str()).map(str::to_owned);
    let info = RunInfo {
        source: Some(path.display().to_string()),
        argv: meta
            .get("argv")
            .and_then(|a| a.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default(),
        command: text(&meta, "command"),
        python: text(&meta, "python"),
        platform: text(&meta, "platform"),
        pid: meta.get("pid").and_then(|p| p.as_u64()),
        tool_version: text(&meta, "tool_version"),
        start_time_ns: meta.get("start_time_ns").and_then(|p| p.as_u64()),
        exit: text(&trailer, "exit"),
        exit_code: trailer.get("exit_code").and_then(serde_json::Value::as_i64),
        cut_short: !summary.complete,
        max_rss_bytes: trailer.get("max_rss_bytes").and_then(|v| v.as_u64()),
        native_unknown_frees: trailer
            .pointer("/native/unknown_frees")
            .and_then(|v| v.as_u64()),
        native_missed_reentrant: trailer
            .pointer("/native/missed_reentrant")
            .and_then(|v| v.as_u64()),
        private_allocators: trailer
            .pointer("/native/private_allocators")
            .and_then(|v| v.as_array())
            .map(|a| a.iter().filter_map(private_allocator).collect())
            .unwrap_or_default(),
    };
    let nframe = meta.get("nframe").and_then(|n| n.as_u64()).unwrap_or(0) as usize;
    let launcher_files = meta
        .get("launcher_files")
        .and_then(|a| a.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    (info, nframe, launcher_files)
}

/// One entry of the trailer's `native.private_allocators`.
fn private_allocator(v: &serde_json::Value) -> Option<PrivateAllocator> {
    let text = |k: &str| v.get(k).and_then(|x| x.as_str()).map(str::to_owned);
    Some(PrivateAllocator {
        path: text("path")?,
        allocator: text("allocator")?,
        symbol: text("symbol").unwrap_or_default(),
    })
}

/// The metadata's `file_names`: generated file names (a notebook cell's) and the names
/// reports show for them (`Cell In[3]`).
fn shown_file_names(metadata: &str) -> HashMap<String, String> {
    let meta: serde_json::Value = serde_json::from_str(metadata).unwrap_or_default();
    meta.get("file_names")
        .and_then(|m| m.as_object())
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

fn parse_group_by(by: &str) -> PyResult<GroupBy> {
    match by {
        "lineno" => Ok(GroupBy::Lineno),
        "filename" => Ok(GroupBy::Filename),
        "traceback" => Ok(GroupBy::Traceback),
        other => Err(PyValueError::new_err(format!(
            "unknown grouping {other:?}: expected lineno, filename or traceback"
        ))),
    }
}

/// An analyzed capture file.
#[pyclass(name = "Capture", module = "memtape._native", frozen)]
pub(crate) struct PyCapture {
    path: PathBuf,
    info: RunInfo,
    symbols: Symbols,
    result: ReplayResult,
    nframe: usize,
    summary: ReadSummary,
    metadata: String,
    /// The moments asked for, as given.
    moment_names: Vec<String>,
    /// Live bytes per clock tick (for adding processes' memory over time).
    ticks: Ticks,
}

impl PyCapture {
    fn table(&self, at: &str) -> PyResult<&[StackTotal]> {
        match at {
            "peak" => Ok(&self.result.live_at_peak),
            "end" => Ok(&self.result.live_at_end),
            "start" => Ok(&[]),
            other => {
                let index: usize = other
                    .strip_prefix("moment:")
                    .and_then(|i| i.parse().ok())
                    .ok_or_else(|| PyValueError::new_err(format!("unknown moment {other:?}")))?;
                match self.result.moments.get(index) {
                    Some(Some(table)) => Ok(table),
                    Some(None) => Err(PyValueError::new_err(format!(
                        "{}: the marker {} was never recorded",
                        self.path.display(),
                        self.moment_names.get(index).map_or("?", String::as_str)
                    ))),
                    None => Err(PyValueError::new_err(format!(
                        "no moment #{index} was requested"
                    ))),
                }
            }
        }
    }

    fn sites_of(&self, by: &str, at: &str, max_frames: Option<usize>) -> PyResult<Vec<Site>> {
        let by = parse_group_by(by)?;
        Ok(group_sites(
            self.table(at)?,
            &self.symbols,
            by,
            max_frames.unwrap_or(self.nframe),
        ))
    }

    fn frames_of(&self, stack: u32, limit: usize) -> Vec<ResolvedFrame> {
        self.symbols
            .frames_of(stack)
            .into_iter()
            .take(if limit == 0 { usize::MAX } else { limit })
            .map(|f| ResolvedFrame {
                filename: f.filename.to_owned(),
                name: f.function.to_owned(),
                line: f.line,
            })
            .collect()
    }
}

/// Streams `path` once and returns its analysis. `moments` are `marker:LABEL` or
/// `time:NS` specs whose live sets can then be read as `moment:0`, `moment:1`, ...
/// `time_window=False` skips what only the HTML report's time-window view needs.
#[pyfunction]
#[pyo3(signature = (path, *, moments=Vec::new(), progress=None, time_window=true))]
pub(crate) fn analyze_capture(
    py: Python<'_>,
    path: PathBuf,
    moments: Vec<String>,
    progress: Option<&Bound<'_, PyAny>>,
    time_window: bool,
) -> PyResult<PyCapture> {
    let options = ReplayOptions {
        moments: moments
            .iter()
            .map(|m| parse_moment(m))
            .collect::<PyResult<_>>()?,
        time_histogram: time_window,
        ..ReplayOptions::default()
    };
    let mut analysis = Analysis::new(options);
    let mut ticks = Ticks::default();
    let (metadata, summary) = stream(py, &path, progress, |r| {
        analysis.feed(r);
        ticks.observe(r, analysis.current_bytes());
    })?;
    let mut analyzed = analysis.finish();
    let (info, nframe, launcher_files) = run_info(&path, &metadata, &summary);
    analyzed.symbols.hide_launcher_frames(launcher_files);
    analyzed.symbols.show_files_as(&shown_file_names(&metadata));
    Ok(PyCapture {
        path,
        info,
        symbols: analyzed.symbols,
        result: analyzed.result,
        nframe,
        summary,
        metadata,
        moment_names: moments
            .iter()
            .map(|m| m.trim_start_matches("marker:").to_owned())
            .collect(),
        ticks,
    })
}

/// The header's metadata (JSON text) of a capture file, without reading its events.
#[pyfunction]
pub(crate) fn capture_metadata(path: PathBuf) -> PyResult<String> {
    let (reader, _, _) = open(&path)?;
    Ok(reader.metadata_json().to_owned())
}

#[pymethods]
impl PyCapture {
    /// The header's metadata (JSON text).
    #[getter]
    fn metadata_json(&self) -> &str {
        &self.metadata
    }

    /// True when the recording ended cleanly (its trailer is there).
    #[getter]
    fn complete(&self) -> bool {
        self.summary.complete
    }

    /// Where reading stopped early (the file was cut short), or None.
    #[getter]
    fn cut_short_at(&self) -> Option<u64> {
        self.summary.cut_short_at
    }

    /// `(bytes, seconds since start)` at the peak.
    #[getter]
    fn peak(&self) -> (u64, f64) {
        (
            self.result.peak.bytes,
            self.result.peak.time_ns as f64 / 1e9,
        )
    }

    /// Live bytes at the end.
    #[getter]
    fn end_bytes(&self) -> u64 {
        self.result.end_bytes
    }

    /// Allocation and free events read.
    #[getter]
    fn events(&self) -> u64 {
        self.result.events
    }

    /// `(tick width in ns, [(tick, highest live bytes, live bytes at its end)])`: live
    /// memory per clock tick since the start, only ticks that saw events.
    #[getter]
    fn ticks(&self) -> (u64, Vec<(u64, u64, u64)>) {
        let points = self.ticks.points();
        let rows = points
            .iter()
            .map(|t| (t.index, t.max_bytes, t.end_bytes))
            .collect();
        (self.ticks.width_ns(), rows)
    }

    /// Frames kept per stack when recording (0: all).
    #[getter]
    fn nframe(&self) -> usize {
        self.nframe
    }

    /// Why some native frames read as module+offset (their module's file is missing on
    /// this machine, or is not the one that ran): one line per module.
    #[getter]
    fn native_notes(&self) -> Vec<String> {
        self.symbols.native_notes().to_vec()
    }

    /// Totals, the peak and when it happened, as a terminal table.
    fn stats_text(&self) -> String {
        stats_text(&self.info, &self.result)
    }

    /// The top sites of a live set (`peak`, `end`, `start`, `moment:N`) as a table.
    #[pyo3(signature = (by="lineno", at="peak", limit=10, max_frames=None))]
    fn top_text(
        &self,
        by: &str,
        at: &str,
        limit: usize,
        max_frames: Option<usize>,
    ) -> PyResult<String> {
        let sites = self.sites_of(by, at, max_frames)?;
        Ok(top_text(&sites, total_bytes(self.table(at)?), limit))
    }

    /// The top sites as `[(frames, bytes, count)]`, frames innermost first as
    /// `(filename, function, line)`.
    #[pyo3(signature = (by="lineno", at="peak", limit=10, max_frames=None))]
    fn sites<'py>(
        &self,
        py: Python<'py>,
        by: &str,
        at: &str,
        limit: usize,
        max_frames: Option<usize>,
    ) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        for s in self.sites_of(by, at, max_frames)?.iter().take(limit) {
            let frames = s
                .frames
                .iter()
                .map(|f| (f.filename.as_str(), f.function.as_str(), f.line).into_pyobject(py))
                .collect::<PyResult<Vec<_>>>()?;
            out.append((PyTuple::new(py, frames)?, s.bytes, s.count))?;
        }
        Ok(out)
    }

    /// Live bytes by source (`{"python", "native", "framework"}`) at the peak or the end;
    /// None at another moment.
    #[pyo3(signature = (at="peak"))]
    fn by_source(&self, at: &str) -> Option<Vec<(&'static str, u64)>> {
        let split = match at {
            "peak" => &self.result.peak_by_source,
            "end" => &self.result.end_by_source,
            _ => return None,
        };
        Some(split.iter().map(|(s, b)| (s.name(), b)).collect())
    }

    /// `python 1.2 MB, native 3.4 MB, framework 0 B` at the peak or the end, when memory
    /// other than the Python heap was recorded; else None.
    #[pyo3(signature = (at="peak"))]
    fn by_source_text(&self, at: &str) -> Option<String> {
        if !has_several_sources(&self.result) {
            return None;
        }
        match at {
            "peak" => Some(source_split_text(&self.result.peak_by_source)),
            "end" => Some(source_split_text(&self.result.end_by_source)),
            _ => None,
        }
    }

    /// The top sites as JSON.
    #[pyo3(signature = (by="lineno", at="peak", limit=10, max_frames=None))]
    fn sites_json(
        &self,
        by: &str,
        at: &str,
        limit: usize,
        max_frames: Option<usize>,
    ) -> PyResult<String> {
        let sites = self.sites_of(by, at, max_frames)?;
        let limit = limit.min(sites.len());
        Ok(json_sites(&sites[..limit], total_bytes(self.table(at)?)))
    }

    /// Totals, peak and top sites (at the peak and at the end) as JSON.
    #[pyo3(signature = (limit=10))]
    fn summary_json(&self, limit: usize) -> PyResult<String> {
        let top = self.sites_of("lineno", "peak", None)?;
        let leaks = self.sites_of("lineno", "end", None)?;
        Ok(json_summary(
            &self.info,
            &self.result,
            &top[..limit.min(top.len())],
            &leaks[..limit.min(leaks.len())],
        ))
    }

    /// What grew from `old` (another capture, or this one) to this one, tracemalloc's
    /// compare_to semantics, as a table or JSON.
    #[pyo3(signature = (old, by="lineno", at="end", old_at="end", limit=10, json=false))]
    fn diff(
        &self,
        old: &PyCapture,
        by: &str,
        at: &str,
        old_at: &str,
        limit: usize,
        json: bool,
    ) -> PyResult<String> {
        let new_sites = self.sites_of(by, at, None)?;
        let old_sites = old.sites_of(by, old_at, None)?;
        let rows = compare(&new_sites, &old_sites);
        Ok(if json {
            json_diff(&rows[..limit.min(rows.len())])
        } else {
            diff_text(&rows, limit)
        })
    }

    /// Folded stacks (`outer;...;inner bytes`) of a live set.
    #[pyo3(signature = (at="peak"))]
    fn folded(&self, at: &str) -> PyResult<String> {
        Ok(folded(self.table(at)?, &self.symbols))
    }

    /// A self-contained flame graph page of a live set.
    #[pyo3(signature = (at="peak", title="memtape flame graph", subtitle=""))]
    fn flamegraph_html(&self, at: &str, title: &str, subtitle: &str) -> PyResult<String> {
        Ok(flamegraph_html(
            self.table(at)?,
            &self.symbols,
            title,
            subtitle,
        ))
    }

    /// The offline HTML report.
    #[pyo3(signature = (top=50))]
    fn html_report(&self, top: usize) -> String {
        let options = HtmlReportOptions {
            top,
            ..HtmlReportOptions::default()
        };
        html_report(&self.info, &self.result, &self.symbols, &options)
    }

    /// Memory over time as CSV: time, live bytes by source and in total.
    fn timeline_csv(&self) -> String {
        timeline_csv(&self.result)
    }

    /// Every block live at the end as tracemalloc raw traces
    /// `(domain, size, frames most recent first, total_nframe)` (reads the file again).
    #[pyo3(signature = (progress=None))]
    fn live_traces<'py>(
        &self,
        py: Python<'py>,
        progress: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Bound<'py, PyList>> {
        let mut live = LiveTable::new();
        stream(py, &self.path, progress, |r| match *r {
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
        let limit = if self.nframe == 0 {
            usize::MAX
        } else {
            self.nframe
        };
        let mut tuples: FxHashMap<u32, (Bound<'py, PyTuple>, usize)> = FxHashMap::default();
        let out = PyList::empty(py);
        for e in live.iter() {
            if let std::collections::hash_map::Entry::Vacant(slot) = tuples.entry(e.stack) {
                let all = self.frames_of(e.stack, 0);
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
    #[pyo3(signature = (out, max_entries=100_000, json=false, progress=None))]
    fn export_torch(
        &self,
        py: Python<'_>,
        out: PathBuf,
        max_entries: usize,
        json: bool,
        progress: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<u64> {
        let start_ns = self.info.start_time_ns.unwrap_or(0);
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
        stream(py, &self.path, progress, |r| match *r {
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
        let events: Vec<Event> = ring.iter().copied().collect();
        let mut stacks = FxHashMap::default();
        for e in &events {
            stacks
                .entry(e.stack)
                .or_insert_with(|| self.frames_of(e.stack, self.nframe));
        }
        let snapshot = MemorySnapshot {
            events,
            stacks,
            op_names: vec![String::new()],
            segments: Vec::new(),
        };
        py.allow_threads(|| -> std::io::Result<u64> {
            let mut file = std::io::BufWriter::new(File::create(&out)?);
            let writer = TorchSnapshotWriter::new(&snapshot).share_frames(true);
            let stats = if json {
                writer.write_json(&mut file)?
            } else {
                writer.write_pickle(&mut file)?
            };
            std::io::Write::flush(&mut file)?;
            Ok(stats.trace_entries)
        })
        .map_err(|e| PyOSError::new_err(format!("cannot write {}: {e}", out.display())))
    }
}

/// Frees a block as the format says: in its domain, or (no domain given) in domain 0
/// first, then NumPy's, the only other domain the recorder writes.
fn free_in(live: &mut LiveTable, domain: Option<u32>, addr: u64) -> Option<LiveEntry> {
    match domain {
        Some(d) => live.remove(d, addr),
        None => live
            .remove(0, addr)
            .or_else(|| live.remove(NUMPY_DOMAIN, addr)),
    }
}
