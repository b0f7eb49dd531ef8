//! Reading a capture file from Python: opening it, streaming its records without the GIL
//! with progress, what its header and trailer say, and its typed error.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use memtape_core::capture::{
    CaptureError, CaptureReader, EachRecord, ReadSummary, Record, RecordVisitor,
};
use memtape_core::report::{Moment, PrivateAllocator, RssReading, RunInfo};
use memtape_core::{LiveEntry, LiveTable};
use pyo3::create_exception;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;

use crate::intercept::numpy_handler::NUMPY_DOMAIN;

create_exception!(
    _native,
    CaptureFileError,
    PyValueError,
    "A capture file that is truncated in its header, corrupt, or not a capture."
);

/// Counts the bytes read, for progress bars.
pub(super) struct Counting<R> {
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

pub(super) fn capture_error(path: &Path, e: &CaptureError) -> PyErr {
    let message = match e {
        // The hint names the file itself: `memray stats run.bin`.
        CaptureError::Foreign(kind) => format!(
            "not a memtape capture: {}",
            kind.describe(&shell_word(&path.display().to_string()))
        ),
        _ => e.to_string(),
    };
    CaptureFileError::new_err(format!("{}: {message}", path.display()))
}

/// `text` as one word of a POSIX shell command: as is when plain, else single-quoted.
fn shell_word(text: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-+=:,@%".contains(c);
    if !text.is_empty() && text.chars().all(plain) {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

pub(super) type FileReader = CaptureReader<Counting<BufReader<File>>>;

pub(super) fn open(path: &Path) -> PyResult<(FileReader, Arc<AtomicU64>, u64)> {
    let file = File::open(path)
        .map_err(|e| PyOSError::new_err(format!("cannot open {}: {e}", path.display())))?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    let read = Arc::new(AtomicU64::new(0));
    // A buffer as large as the file, up to 1 MiB: a small capture's analysis (one per
    // test under the pytest plugin) does not map and unmap a whole MiB.
    let buffer = usize::try_from(size)
        .unwrap_or(usize::MAX)
        .clamp(8 << 10, 1 << 20);
    let counting = Counting {
        inner: BufReader::with_capacity(buffer, file),
        read: Arc::clone(&read),
    };
    let reader = CaptureReader::new(counting).map_err(|e| capture_error(path, &e))?;
    Ok((reader, read, size))
}

/// Hands every record to `inner`, and calls `progress(read, total)` (with the GIL) after
/// a block when 100 ms have passed since the last call. (Reading the clock after every
/// record took 40 % of `memtape stats`; a block holds thousands of records.)
struct WithProgress<'v, V> {
    inner: &'v mut V,
    progress: Option<Py<PyAny>>,
    read: Arc<AtomicU64>,
    size: u64,
    last: Instant,
}

impl<'a, V: RecordVisitor<'a>> RecordVisitor<'a> for WithProgress<'_, V> {
    #[inline]
    fn alloc(&mut self, domain: u32, addr: u64, size: u64, stack: u32) {
        self.inner.alloc(domain, addr, size, stack);
    }

    #[inline]
    fn free(&mut self, domain: Option<u32>, addr: u64) {
        self.inner.free(domain, addr);
    }

    #[inline]
    fn record(&mut self, record: Record<'a>) {
        self.inner.record(record);
    }

    fn damage(&mut self) {
        self.inner.damage();
    }

    fn block_end(&mut self) {
        self.inner.block_end();
        let Some(progress) = &self.progress else {
            return;
        };
        if self.last.elapsed() >= Duration::from_millis(100) {
            self.last = Instant::now();
            let done = self.read.load(Ordering::Relaxed);
            Python::attach(|py| {
                // A failing progress bar must not stop the report.
                let _ = progress.call1(py, (done, self.size));
            });
        }
    }
}

/// Reads every record of `path` into `visitor` without the GIL, calling
/// `progress(read, total)` (with the GIL) at most every 100 ms. With a second CPU, a
/// second thread reads and decodes the file while this one runs the visitor.
pub(super) fn stream_into<V>(
    py: Python<'_>,
    path: &Path,
    progress: Option<&Bound<'_, PyAny>>,
    visitor: &mut V,
) -> PyResult<(String, ReadSummary)>
where
    V: for<'r> RecordVisitor<'r> + Send,
{
    let (mut reader, read, size) = open(path)?;
    let metadata = reader.metadata_json().to_owned();
    let mut visitor = WithProgress {
        inner: visitor,
        progress: progress.map(|p| p.clone().unbind()),
        read,
        size,
        last: Instant::now(),
    };
    let pipelined = size >= PIPELINED_FROM && two_cpus();
    let summary = py.detach(|| {
        if pipelined {
            reader.visit_records_pipelined(&mut visitor)
        } else {
            reader.visit_records(&mut visitor)
        }
    });
    let summary = summary.map_err(|e| capture_error(path, &e))?;
    Ok((metadata, summary))
}

/// The smallest file read on two threads: below it the second thread's start and the
/// hand-offs cost more than the overlap saves (the pytest plugin analyses a small capture
/// per test). Both ways give the same result.
const PIPELINED_FROM: u64 = 1 << 20;

/// Whether this process may run on more than one CPU (read once: it reads the cgroup's
/// files each time).
fn two_cpus() -> bool {
    static TWO: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *TWO.get_or_init(|| std::thread::available_parallelism().is_ok_and(|n| n.get() > 1))
}

/// [`stream_into`] a closure that takes every record.
pub(super) fn stream(
    py: Python<'_>,
    path: &Path,
    progress: Option<&Bound<'_, PyAny>>,
    mut f: impl FnMut(&Record<'_>) + Send,
) -> PyResult<(String, ReadSummary)> {
    stream_into(py, path, progress, &mut EachRecord(|r: Record<'_>| f(&r)))
}

pub(super) fn parse_moment(spec: &str) -> PyResult<Moment> {
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

/// A reading of the process' memory (`{"rss", "hwm", "anon", "file", "shmem"}`), as the
/// capture's metadata and trailer hold it.
fn rss_reading(v: &serde_json::Value) -> Option<RssReading> {
    let field = |k: &str| v.get(k).and_then(serde_json::Value::as_u64);
    Some(RssReading {
        rss: field("rss")?,
        hwm: field("hwm")?,
        anon: field("anon")?,
        file: field("file")?,
        shmem: field("shmem")?,
    })
}

/// What the header and trailer say: the run, the frame limit, and the launcher files
/// `memtape run` listed (see `cli/run.py`).
pub(super) fn run_info(
    path: &Path,
    metadata: &str,
    summary: &ReadSummary,
) -> (RunInfo, usize, Vec<String>) {
    let (meta, trailer) = header_and_trailer(metadata, summary);
    run_info_of(path, &meta, &trailer, summary)
}

/// The metadata and the trailer (null when there is none), parsed.
pub(super) fn header_and_trailer(
    metadata: &str,
    summary: &ReadSummary,
) -> (serde_json::Value, serde_json::Value) {
    let meta = serde_json::from_str(metadata).unwrap_or_default();
    let trailer = summary
        .trailer_json
        .as_deref()
        .and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or_default();
    (meta, trailer)
}

/// [`run_info`] of the metadata and trailer parsed.
pub(super) fn run_info_of(
    path: &Path,
    meta: &serde_json::Value,
    trailer: &serde_json::Value,
    summary: &ReadSummary,
) -> (RunInfo, usize, Vec<String>) {
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
        command: text(meta, "command"),
        python: text(meta, "python"),
        platform: text(meta, "platform"),
        pid: meta.get("pid").and_then(|p| p.as_u64()),
        tool_version: text(meta, "tool_version"),
        start_time_ns: meta.get("start_time_ns").and_then(|p| p.as_u64()),
        exit: text(trailer, "exit"),
        exit_code: trailer.get("exit_code").and_then(serde_json::Value::as_i64),
        cut_short: !summary.complete,
        attached: meta
            .get("attached")
            .is_some_and(serde_json::Value::is_object),
        damage: None,
        max_rss_bytes: trailer.get("max_rss_bytes").and_then(|v| v.as_u64()),
        rss_at_start: meta.get("rss_at_start").and_then(rss_reading),
        rss_at_end: trailer.get("rss_at_end").and_then(rss_reading),
        memtape_own_peak_bytes: trailer
            .get("memtape_own_peak_bytes")
            .and_then(|v| v.as_u64()),
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
pub(super) fn shown_file_names(metadata: &str) -> HashMap<String, String> {
    shown_file_names_of(&serde_json::from_str(metadata).unwrap_or_default())
}

/// [`shown_file_names`] of the metadata parsed.
pub(super) fn shown_file_names_of(meta: &serde_json::Value) -> HashMap<String, String> {
    meta.get("file_names")
        .and_then(|m| m.as_object())
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

/// Frees a block as the format says: in its domain, or (no domain given) in domain 0
/// first, then NumPy's, the only other domain the recorder writes.
pub(super) fn free_in(live: &mut LiveTable, domain: Option<u32>, addr: u64) -> Option<LiveEntry> {
    match domain {
        Some(d) => live.remove(d, addr),
        None => live
            .remove(0, addr)
            .or_else(|| live.remove(NUMPY_DOMAIN, addr)),
    }
}
