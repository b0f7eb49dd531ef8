//! What the walk needs to know of one CPython version: where the fields it reads live.
//! Each `pyXYZ` module fills one in.

/// Where one CPython version keeps what the walk reads.
pub(crate) struct FrameLayout {
    pub(crate) version: (u8, u8),
    /// `tstate->cframe` (3.11, 3.12) before `current_frame`, or none (3.13).
    pub(crate) tstate_cframe: Option<usize>,
    /// `current_frame` inside the cframe (3.11, 3.12) or the thread state (3.13).
    pub(crate) current_frame: usize,
    /// `_PyInterpreterFrame.f_code` / `f_executable`.
    pub(crate) frame_code: usize,
    /// `_PyInterpreterFrame.previous`.
    pub(crate) frame_previous: usize,
    /// `prev_instr` (3.11, 3.12) / `instr_ptr` (3.13).
    pub(crate) frame_instr: usize,
    /// `_PyInterpreterFrame.owner`.
    pub(crate) frame_owner: usize,
    /// `PyCodeObject.co_code_adaptive` (start of the bytecode).
    pub(crate) code_adaptive: usize,
    /// `PyCodeObject._co_firsttraceable`.
    pub(crate) code_firsttraceable: usize,
    /// `FRAME_OWNED_BY_CSTACK` (3.12+): C-stack shim frames to skip. Each one sits just
    /// outside the frames one `_PyEval_EvalFrameDefault` call runs.
    pub(crate) owner_cstack: Option<u8>,
    /// `_PyInterpreterFrame.is_entry` (3.11): set on the outermost frame each
    /// `_PyEval_EvalFrameDefault` call runs.
    pub(crate) frame_is_entry: Option<usize>,
    /// 3.13's `f_executable` may hold something other than a code object.
    pub(crate) check_code_type: bool,
}
