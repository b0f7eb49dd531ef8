//! One Python frame as the walk reads it.

/// One Python frame: the code object's address and the instruction offset (CPython's
/// `lasti`, in code units; `PyCode_Addr2Line(code, lasti * 2)` gives its line).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct RawFrame {
    pub(crate) code: usize,
    pub(crate) lasti: i32,
}
