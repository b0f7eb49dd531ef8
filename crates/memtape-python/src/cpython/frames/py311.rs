//! CPython 3.11: `tstate->cframe->current_frame`, `f_code`, `prev_instr`.
use super::FrameLayout;

pub(super) const LAYOUT: FrameLayout = FrameLayout {
    tstate_cframe: Some(56),
    current_frame: 8,
    frame_code: 32,
    frame_previous: 48,
    frame_instr: 56,
    frame_owner: 69,
    code_adaptive: 184,
    code_firsttraceable: 168,
    owner_interpreter: None,
    frame_is_entry: Some(68),
    check_code_type: false,
    executable_tag_bits: 0,
    base_frame: false,
};
