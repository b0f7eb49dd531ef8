//! `memtape._native.TraceSet`: a snapshot's traces held in Rust, with statistics and
//! filtering done there and only the results turned into Python objects.

use memtape_core::{GroupBy, TraceSet, TraceSetBuilder};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyString, PyTuple};
use rustc_hash::FxHashMap;

/// Traces with interned frames; immutable.
#[pyclass(name = "TraceSet", module = "memtape._native", frozen)]
pub(crate) struct PyTraceSet {
    pub(crate) inner: TraceSet,
}

/// Builds the Python frame tuples of a set, sharing one tuple per distinct frame list
/// (tracemalloc's `_get_traces` returns identical tracebacks as the same object).
struct TupleCache<'a, 'py> {
    py: Python<'py>,
    set: &'a TraceSet,
    filenames: Vec<Option<Bound<'py, PyString>>>,
    by_traceback: FxHashMap<u32, Bound<'py, PyTuple>>,
    by_frames: FxHashMap<Vec<(u32, i64)>, Bound<'py, PyTuple>>,
}

impl<'a, 'py> TupleCache<'a, 'py> {
    fn new(py: Python<'py>, set: &'a TraceSet) -> Self {
        Self {
            py,
            set,
            filenames: vec![None; set.filenames().len()],
            by_traceback: FxHashMap::default(),
            by_frames: FxHashMap::default(),
        }
    }

    fn filename(&mut self, id: u32) -> Bound<'py, PyString> {
        self.filenames[id as usize]
            .get_or_insert_with(|| PyString::new(self.py, &self.set.filenames()[id as usize]))
            .clone()
    }

    fn frames(&mut self, key: &[(u32, i64)]) -> PyResult<Bound<'py, PyTuple>> {
        if let Some(t) = self.by_frames.get(key) {
            return Ok(t.clone());
        }
        let items = key
            .iter()
            .map(|&(f, line)| (self.filename(f), line).into_pyobject(self.py))
            .collect::<PyResult<Vec<_>>>()?;
        let tuple = PyTuple::new(self.py, items)?;
        self.by_frames.insert(key.to_vec(), tuple.clone());
        Ok(tuple)
    }

    fn traceback(&mut self, tb: u32) -> PyResult<Bound<'py, PyTuple>> {
        if let Some(t) = self.by_traceback.get(&tb) {
            return Ok(t.clone());
        }
        let key: Vec<(u32, i64)> = self.set.traceback_frames(tb).collect();
        let tuple = self.frames(&key)?;
        self.by_traceback.insert(tb, tuple.clone());
        Ok(tuple)
    }
}

/// Each distinct `(domain, traceback)` pair of a set, numbered in order of first
/// appearance: the order `pairs()` lists them and `select()` takes its flags in.
fn pair_order(set: &TraceSet) -> FxHashMap<(u64, u32), usize> {
    let mut order: FxHashMap<(u64, u32), usize> = FxHashMap::default();
    for t in set.traces() {
        let n = order.len();
        order.entry((t.domain, t.traceback)).or_insert(n);
    }
    order
}

/// tracemalloc's raw trace tuples `(domain, size, frames, total_nframe)`.
pub(crate) fn raw_traces<'py>(py: Python<'py>, set: &TraceSet) -> PyResult<Bound<'py, PyList>> {
    let mut cache = TupleCache::new(py, set);
    let list = PyList::empty(py);
    for t in set.traces() {
        let frames = cache.traceback(t.traceback)?;
        let total = set.traceback_total_nframe(t.traceback);
        let item = match total {
            Some(total) => (t.domain, t.size, frames, total).into_pyobject(py)?,
            None => (t.domain, t.size, frames, py.None()).into_pyobject(py)?,
        };
        list.append(item)?;
    }
    Ok(list)
}

fn parse_group_by(key_type: &str) -> PyResult<GroupBy> {
    match key_type {
        "traceback" => Ok(GroupBy::Traceback),
        "lineno" => Ok(GroupBy::Lineno),
        "filename" => Ok(GroupBy::Filename),
        other => Err(PyValueError::new_err(format!(
            "unknown key_type: {other:?}"
        ))),
    }
}

#[pymethods]
impl PyTraceSet {
    /// Builds a set from tracemalloc raw traces: `(domain, size, frames[, total_nframe])`
    /// with `frames` a sequence of `(filename, lineno)`, most recent first.
    #[staticmethod]
    fn from_traces(traces: &Bound<'_, PyAny>) -> PyResult<Self> {
        let mut b = TraceSetBuilder::new();
        for item in traces.try_iter()? {
            let item = item?;
            let t = item.cast::<PyTuple>().map_err(|_| {
                PyTypeError::new_err("a trace must be a (domain, size, frames, total_nframe) tuple")
            })?;
            if t.len() < 3 {
                return Err(PyTypeError::new_err(
                    "a trace must be a (domain, size, frames, total_nframe) tuple",
                ));
            }
            let domain: u64 = t.get_item(0)?.extract()?;
            let size: u64 = t.get_item(1)?.extract()?;
            let total: Option<u64> = if t.len() > 3 {
                t.get_item(3)?.extract()?
            } else {
                None
            };
            let mut frames = Vec::new();
            for f in t.get_item(2)?.try_iter()? {
                let (file, line): (String, i64) = f?.extract()?;
                let file = b.filename(&file);
                frames.push(b.frame(file, line));
            }
            let tb = b.traceback(frames, total);
            b.trace(domain, size, tb);
        }
        Ok(Self { inner: b.build() })
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    /// The traces as tracemalloc raw tuples.
    fn raw_traces<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        raw_traces(py, &self.inner)
    }

    /// `[(frames, size, count)]` grouped by `key_type`, sorted like
    /// `tracemalloc.Snapshot.statistics`; `frames` most recent first.
    #[pyo3(signature = (key_type, cumulative=false))]
    fn statistics<'py>(
        &self,
        py: Python<'py>,
        key_type: &str,
        cumulative: bool,
    ) -> PyResult<Bound<'py, PyList>> {
        let group_by = parse_group_by(key_type)?;
        let stats = self
            .inner
            .statistics(group_by, cumulative)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        let mut cache = TupleCache::new(py, &self.inner);
        let list = PyList::empty(py);
        for s in stats {
            list.append((cache.frames(&s.key)?, s.size, s.count))?;
        }
        Ok(list)
    }

    /// The distinct `(domain, frames)` pairs, in order of first appearance; `select`
    /// takes one keep-flag per pair.
    fn pairs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let mut cache = TupleCache::new(py, &self.inner);
        let order = pair_order(&self.inner);
        let mut pairs = vec![(0, 0); order.len()];
        for (&pair, &i) in &order {
            pairs[i] = pair;
        }
        let list = PyList::empty(py);
        for (domain, traceback) in pairs {
            list.append((domain, cache.traceback(traceback)?))?;
        }
        Ok(list)
    }

    /// The traces whose `(domain, frames)` pair is kept (`keep` follows `pairs()`).
    fn select(&self, keep: Vec<bool>) -> PyResult<Self> {
        let index = pair_order(&self.inner);
        if keep.len() != index.len() {
            return Err(PyValueError::new_err(format!(
                "select() needs one flag per pair: got {}, expected {}",
                keep.len(),
                index.len()
            )));
        }
        let inner = self.inner.select(|t| keep[index[&(t.domain, t.traceback)]]);
        Ok(Self { inner })
    }
}
