//! CPython 3.12: `tstate->cframe->current_frame`, `f_code`, `prev_instr`, C-stack shims.
use super::FrameLayout;

pub(super) const LAYOUT: FrameLayout = FrameLayout {
    tstate_cframe: Some(56),
    current_frame: 0,
    frame_code: 0,
    frame_previous: 8,
    frame_instr: 56,
    frame_owner: 70,
    code_adaptive: 192,
    code_firsttraceable: 176,
    owner_interpreter: Some(3),
    frame_is_entry: None,
    check_code_type: false,
    executable_tag_bits: 0,
    base_frame: false,
};
