//! What differs between processor architectures, one small function each, so that the
//! rest of the crate is written once. Only what is needed on the hot path lives here.

mod thread_pointer;

pub(crate) use thread_pointer::thread_pointer;
