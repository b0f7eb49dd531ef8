//! Where CPython is read: the interpreter frames of each supported version, the attached
//! thread state, the code objects behind recorded frames, and an object's memory block.

pub(crate) mod frame_resolve;
pub(crate) mod frames;
pub(crate) mod object_block;
pub(crate) mod thread_state;
