//! CPython 3.13: `tstate->current_frame`, `f_executable`, `instr_ptr`, C-stack shims.
use super::FrameLayout;

pub(super) const LAYOUT: FrameLayout = FrameLayout {
    version: (3, 13),
    tstate_cframe: None,
    current_frame: 72,
    frame_code: 0,
    frame_previous: 8,
    frame_instr: 56,
    frame_owner: 70,
    code_adaptive: 200,
    code_firsttraceable: 184,
    owner_cstack: Some(3),
    frame_is_entry: None,
    check_code_type: true,
};
