//! Reading capture files from Python: `memtape stats/top/diff/flamegraph/report/export`.
//!
//! `analyze_capture` streams a file once (without the GIL, [`super::capture_file`]) into a
//! [`PyCapture`]; the renderers are its methods. Exports that need single blocks (a
//! tracemalloc snapshot, the memory_viz trace) read the file a second time
//! ([`super::capture_exports`]).

use std::path::PathBuf;

use memtape_core::capture::ReadSummary;
use memtape_core::report::{
    compare, damage_note, diff_text, flamegraph_html, folded, has_several_sources, html_report,
    json_diff, json_sites, json_summary, source_split_text, stats_text, timeline_csv, top_text,
    total_bytes, Analysis, HtmlReportOptions, ImportFrames, ReplayOptions, RssAccount,
};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use super::capture_analysis::PyCapture;
use super::capture_exports;
use super::capture_file::{
    header_and_trailer, open, parse_moment, run_info_of, shown_file_names_of, stream_into,
};

/// Streams `path` once and returns its analysis. `moments` are `marker:LABEL` or
/// `time:NS` specs whose live sets can then be read as `moment:0`, `moment:1`, ...
/// `time_window=False` skips what only the HTML report's time-window view needs.
/// `imports` (`hide`, `fold` or `show`) is how every report of it shows import machinery.
#[pyfunction]
#[pyo3(signature = (path, *, moments=Vec::new(), progress=None, time_window=true, imports="hide"))]
pub(crate) fn analyze_capture(
    py: Python<'_>,
    path: PathBuf,
    moments: Vec<String>,
    progress: Option<&Bound<'_, PyAny>>,
    time_window: bool,
    imports: &str,
) -> PyResult<PyCapture> {
    let imports = import_frames(imports)?;
    let options = ReplayOptions {
        moments: moments
            .iter()
            .map(|m| parse_moment(m))
            .collect::<PyResult<_>>()?,
        time_histogram: time_window,
        ..ReplayOptions::default()
    };
    let mut analysis = Analysis::new(options);
    let (metadata, summary) = stream_into(py, &path, progress, &mut analysis)?;
    Ok(analyzed(
        path, &moments, analysis, metadata, summary, imports,
    ))
}

/// The import mode named `name`; a ValueError naming the choices otherwise.
pub(super) fn import_frames(name: &str) -> PyResult<ImportFrames> {
    name.parse().map_err(PyValueError::new_err)
}

/// The [`PyCapture`] of `path` once `analysis` has streamed it all (`moments` as asked).
pub(super) fn analyzed(
    path: PathBuf,
    moments: &[String],
    analysis: Analysis,
    metadata: String,
    summary: ReadSummary,
    imports: ImportFrames,
) -> PyCapture {
    let mut analyzed = analysis.finish();
    let (meta, trailer) = header_and_trailer(&metadata, &summary);
    let (mut info, nframe, launcher_files) = run_info_of(&path, &meta, &trailer, &summary);
    let written = trailer.get("events").and_then(serde_json::Value::as_u64);
    info.damage = damage_note(
        &summary,
        written,
        analyzed.result.events,
        &analyzed.result.totals,
    );
    analyzed.symbols.hide_launcher_frames(launcher_files);
    analyzed.symbols.show_files_as(&shown_file_names_of(&meta));
    analyzed.symbols.set_import_frames(imports);
    PyCapture {
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
    }
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

    /// The warning for a capture read around damaged blocks (what was skipped, what was
    /// lost, what was read), or None for an undamaged one.
    #[getter]
    fn damage_note(&self) -> Option<String> {
        self.info.damage.clone()
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

    /// `(allocations, bytes allocated)`: the summary's totals, without the sites that
    /// `summary_json` works out too (the pytest plugin's per-test numbers).
    #[getter]
    fn totals(&self) -> (u64, u64) {
        let t = &self.result.totals;
        (t.allocs, t.bytes_allocated)
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
        let points = self.result.ticks.points();
        let rows = points
            .iter()
            .map(|t| (t.index, t.max_bytes, t.end_bytes))
            .collect();
        (self.result.ticks.width_ns(), rows)
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

    /// The run's RSS accounted for (the start, what the program added by kind, memtape's
    /// own, what memtape did not see), one `name: text` line per row; empty for a
    /// capture without the readings.
    fn rss_text(&self) -> String {
        RssAccount::of(&self.info, self.result.peak.bytes, self.result.end_bytes)
            .map(|a| {
                a.rows()
                    .into_iter()
                    .map(|(_, name, text)| format!("{}: {text}", name.trim_start()))
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default()
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

    /// Live bytes by source (`{"python", "native", "framework", "mlx"}`) at the peak or the end;
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

    /// `python 1.2 MB, native 3.4 MB, framework 0 B, mlx 0 B` at the peak or the end, when memory
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
        capture_exports::live_traces(self, py, progress)
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
        capture_exports::export_torch(self, py, &out, max_entries, json, progress)
    }
}
