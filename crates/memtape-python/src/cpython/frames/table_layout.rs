//! The frame layout of 3.13 and later, read at import from the interpreter's own
//! `_Py_DebugOffsets` ([`super::debug_offsets`]), with `_co_firsttraceable` found by
//! probing ([`super::first_traceable`]). What the table does not say is the meaning of
//! values, which is per minor version: the owner of the interpreter's own frames, the tag
//! bits of `f_executable`, the base frame.

use pyo3::prelude::*;

use super::debug_offsets::{self, TableShape};
use super::FrameLayout;

/// This build's minor version and the shape of its table.
#[cfg(all(Py_3_13, not(Py_3_14)))]
const BUILT: ((u8, u8), TableShape) = ((3, 13), debug_offsets::SHAPE_3_13);
#[cfg(all(Py_3_14, not(Py_3_15)))]
const BUILT: ((u8, u8), TableShape) = ((3, 14), debug_offsets::SHAPE_3_14);
#[cfg(all(Py_3_15, not(Py_3_16)))]
const BUILT: ((u8, u8), TableShape) = ((3, 15), debug_offsets::SHAPE_3_15);

pub(super) const BUILT_FOR: (u8, u8) = BUILT.0;

/// Reads this interpreter's layout, or says why it cannot be trusted.
pub(super) fn read(py: Python<'_>) -> Result<FrameLayout, String> {
    let (version, shape) = BUILT;
    let words = debug_offsets::runtime_table(shape.words())
        .ok_or_else(|| "_PyRuntime is not exported by this interpreter".to_owned())?;
    let t = debug_offsets::parse(words, shape, version).map_err(|e| e.to_string())?;
    let code_firsttraceable = super::first_traceable::find(py, t.code_adaptive)
        .map_err(|e| format!("probing code objects failed: {e}"))?
        .ok_or_else(|| "no single field of code objects holds _co_firsttraceable".to_owned())?;
    Ok(FrameLayout {
        tstate_cframe: None,
        current_frame: t.current_frame,
        frame_code: t.frame_executable,
        frame_previous: t.frame_previous,
        frame_instr: t.frame_instr,
        frame_owner: t.frame_owner,
        code_adaptive: t.code_adaptive,
        code_firsttraceable,
        // FRAME_OWNED_BY_CSTACK (3.13) / FRAME_OWNED_BY_INTERPRETER (3.14+), both 3.
        owner_interpreter: Some(3),
        frame_is_entry: None,
        check_code_type: true,
        // Py_TAG_BITS: 1 on 3.14's default build, 3 on 3.15's; code objects are aligned
        // to 16 bytes, so clearing two bits is right for both.
        executable_tag_bits: if version >= (3, 14) { 3 } else { 0 },
        base_frame: t.base_frame.is_some(),
    })
}
