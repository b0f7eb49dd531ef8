//! The calling thread's own state, reached from every hook: its mode (a re-entrancy
//! guard) with its stack-capture cache in one thread-local, found by thread pointer
//! through a table, its small id, and its last reading of the event clock.

pub(crate) mod first_touch;
pub(crate) mod hook_mode;
pub(crate) mod thread_capture;
pub(crate) mod thread_clock;
pub(crate) mod thread_filter;
pub(crate) mod thread_id;
pub(crate) mod thread_table;
