//! An analyzed capture file: what `analyze_capture` keeps of one streaming pass (the live
//! sets at the moments asked for, the symbols, the run's description), and the lookups the
//! renderers ([`super::report_api`]) and exports ([`super::capture_exports`]) share.

use std::path::PathBuf;

use memtape_core::capture::ReadSummary;
use memtape_core::report::{group_sites, ReplayResult, RunInfo, Site, StackTotal, Symbols};
use memtape_core::{GroupBy, ResolvedFrame};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

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
    pub(super) path: PathBuf,
    pub(super) info: RunInfo,
    pub(super) symbols: Symbols,
    pub(super) result: ReplayResult,
    pub(super) nframe: usize,
    pub(super) summary: ReadSummary,
    pub(super) metadata: String,
    /// The moments asked for, as given.
    pub(super) moment_names: Vec<String>,
}

impl PyCapture {
    pub(super) fn table(&self, at: &str) -> PyResult<&[StackTotal]> {
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

    pub(super) fn sites_of(
        &self,
        by: &str,
        at: &str,
        max_frames: Option<usize>,
    ) -> PyResult<Vec<Site>> {
        let by = parse_group_by(by)?;
        Ok(group_sites(
            self.table(at)?,
            &self.symbols,
            by,
            max_frames.unwrap_or(self.nframe),
        ))
    }

    pub(super) fn frames_of(&self, stack: u32, limit: usize) -> Vec<ResolvedFrame> {
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
