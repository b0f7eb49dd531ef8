//! The calling thread's own state, reached from every hook: its mode (a re-entrancy
//! guard) with its stack-capture cache in one thread-local, and its small id.

pub(crate) mod hook_mode;
pub(crate) mod thread_capture;
pub(crate) mod thread_id;
