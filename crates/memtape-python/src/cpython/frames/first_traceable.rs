//! Where a code object keeps `_co_firsttraceable` (the index of its first `RESUME`, before
//! which a frame is still being set up), found by probing: no table exports it.
//!
//! Four small functions whose first `RESUME` sits at different places (a plain function,
//! one with a cell, a generator, a generator with a cell) are compiled, the index of
//! their first `RESUME` is read from their bytecode, and the one `int` field of the code
//! object that holds exactly those values is the field.

use std::ffi::CStr;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

const PROBES: &CStr = c"
import opcode
def plain(a):
    return a
def with_cell(a, b):
    def inner():
        return a
    return inner
def generator(a, b, c):
    yield a
def generator_with_cell(a, b, c, d):
    def inner():
        return a
    yield inner
codes = [f.__code__ for f in (plain, with_cell, generator, generator_with_cell)]
resume = opcode.opmap['RESUME']
";

/// The offset of `_co_firsttraceable` in a code object whose bytecode starts at
/// `code_adaptive`, when exactly one aligned `int` before it matches every probe. With
/// the GIL held, at import.
pub(super) fn find(py: Python<'_>, code_adaptive: usize) -> PyResult<Option<usize>> {
    let scope = PyDict::new(py);
    py.run(PROBES, Some(&scope), None)?;
    let codes = scope
        .get_item("codes")?
        .expect("the probe defines codes")
        .cast_into::<PyList>()?;
    let resume: u8 = scope
        .get_item("resume")?
        .expect("the probe defines resume")
        .extract()?;
    let mut probes = Vec::new();
    for code in codes.iter() {
        let bytes = code.getattr("co_code")?.cast_into::<PyBytes>()?;
        let first = bytes
            .as_bytes()
            .chunks_exact(2)
            .position(|unit| unit[0] == resume)
            .map_or(-1, |i| i as i32);
        probes.push((code, first));
    }
    let distinct: std::collections::BTreeSet<i32> = probes.iter().map(|p| p.1).collect();
    if distinct.len() < 2 {
        return Ok(None);
    }
    let mut found = None;
    for offset in (0..code_adaptive.saturating_sub(3)).step_by(4) {
        let all = probes.iter().all(|(code, expected)| {
            // SAFETY: `code` is a live code object (held by `probes`) whose struct is at
            // least `code_adaptive` bytes long, so an aligned i32 before that is inside it.
            let value = unsafe { code.as_ptr().cast::<u8>().add(offset).cast::<i32>().read() };
            value == *expected
        });
        if all {
            if found.is_some() {
                return Ok(None);
            }
            found = Some(offset);
        }
    }
    Ok(found)
}
