//! What the walk needs to know of one CPython version: where the fields it reads live, and
//! what the values it reads mean. 3.11 and 3.12 fill one in by hand (`py311`, `py312`);
//! from 3.13 on it is read from the interpreter's own table at import
//! (`debug_offsets`).

/// Where one CPython version keeps what the walk reads.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FrameLayout {
    /// `tstate->cframe` (3.11, 3.12) before `current_frame`, or none (3.13+).
    pub(crate) tstate_cframe: Option<usize>,
    /// `current_frame` inside the cframe (3.11, 3.12) or the thread state (3.13+).
    pub(crate) current_frame: usize,
    /// `_PyInterpreterFrame.f_code` / `f_executable`.
    pub(crate) frame_code: usize,
    /// `_PyInterpreterFrame.previous`.
    pub(crate) frame_previous: usize,
    /// `prev_instr` (3.11, 3.12) / `instr_ptr` (3.13+).
    pub(crate) frame_instr: usize,
    /// `_PyInterpreterFrame.owner`.
    pub(crate) frame_owner: usize,
    /// `PyCodeObject.co_code_adaptive` (start of the bytecode).
    pub(crate) code_adaptive: usize,
    /// `PyCodeObject._co_firsttraceable`.
    pub(crate) code_firsttraceable: usize,
    /// 3.12+: frames owned by this value or a greater one are the interpreter's own, never
    /// Python code: the frame each `_PyEval_EvalFrameDefault` call pushes just outside
    /// the frames it runs (`FRAME_OWNED_BY_CSTACK`, 3, on 3.12 and 3.13;
    /// `FRAME_OWNED_BY_INTERPRETER`, also 3, from 3.14, where `FRAME_OWNED_BY_CSTACK`
    /// became 4), and 3.15's base frame.
    pub(crate) owner_interpreter: Option<u8>,
    /// `_PyInterpreterFrame.is_entry` (3.11): set on the outermost frame each
    /// `_PyEval_EvalFrameDefault` call runs.
    pub(crate) frame_is_entry: Option<usize>,
    /// 3.13+: `f_executable` may hold something other than a code object.
    pub(crate) check_code_type: bool,
    /// The low bits of `f_executable` that tag a `_PyStackRef` (3.14+), cleared before
    /// it is used as an address; 0 where it is a plain pointer.
    pub(crate) executable_tag_bits: usize,
    /// 3.15+: every thread's chain ends in a base frame (owned by the interpreter, with no
    /// caller) that no `_PyEval_EvalFrameDefault` call pushed.
    pub(crate) base_frame: bool,
}

impl FrameLayout {
    /// Whether a frame owned by `owner` is one of the interpreter's own.
    #[inline(always)]
    pub(crate) fn interpreter_owned(&self, owner: u8) -> bool {
        self.owner_interpreter.is_some_and(|o| owner >= o)
    }

    /// `f_executable` as read, without its tag.
    #[inline(always)]
    pub(crate) fn untag(&self, executable: usize) -> usize {
        executable & !self.executable_tag_bits
    }
}
