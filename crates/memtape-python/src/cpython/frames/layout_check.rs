//! The check [`super::init`] makes before any hook uses a layout: the stack the walk
//! reads must be the one CPython's own `sys._getframe` shows, frame for frame (the same
//! code objects at the same instructions). A layout that reads garbage, a table misread,
//! a tag not cleared or an owner misjudged fails here, at import, with a message, instead
//! of in a hook.

use pyo3::prelude::*;

use super::raw_frame::RawFrame;

/// How many frames are compared at most.
const DEPTH: usize = 64;

/// The stack as `sys._getframe` shows it: each frame's code object and instruction
/// offset (code units), innermost first, at most [`DEPTH`] frames.
pub(super) fn shown(py: Python<'_>) -> Result<Vec<RawFrame>, String> {
    shown_frames(py).map_err(|e| format!("sys._getframe failed: {e}"))
}

fn shown_frames(py: Python<'_>) -> PyResult<Vec<RawFrame>> {
    let sys = py.import("sys")?;
    let mut frames = Vec::new();
    let mut frame = match sys.call_method1("_getframe", (0,)) {
        Ok(f) => f,
        // Imported from C with no Python frame on the stack.
        Err(e) if e.is_instance_of::<pyo3::exceptions::PyValueError>(py) => return Ok(frames),
        Err(e) => return Err(e),
    };
    while !frame.is_none() && frames.len() < DEPTH {
        let code = frame.getattr("f_code")?;
        let lasti: i32 = frame.getattr("f_lasti")?.extract()?;
        frames.push(RawFrame {
            code: code.as_ptr() as usize,
            lasti: lasti / 2,
        });
        frame = frame.getattr("f_back")?;
    }
    Ok(frames)
}

/// Whether the walk (`walked`, innermost first) read the stack `sys._getframe` showed;
/// an error says what differs.
pub(super) fn same_stack(walked: &[RawFrame], shown: &[RawFrame]) -> Result<(), String> {
    let walked = &walked[..walked.len().min(DEPTH)];
    if walked == shown {
        return Ok(());
    }
    let at = walked
        .iter()
        .zip(shown)
        .position(|(w, s)| w != s)
        .unwrap_or(walked.len().min(shown.len()));
    Err(format!(
        "the frames read differ from sys._getframe's at depth {at}: {} read, {} shown \
         (read {:?}, shown {:?})",
        walked.len(),
        shown.len(),
        walked.get(at),
        shown.get(at)
    ))
}
