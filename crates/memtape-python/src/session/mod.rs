//! Starting, draining and stopping what is recorded: a capture file's session and its
//! flusher thread, the event clock's thread, the events thread, fork safety, and collecting the live traces
//! for a snapshot.

pub(crate) mod capture_output;
pub(crate) mod capture_session;
pub(crate) mod clock_thread;
pub(crate) mod event_consumer;
pub(crate) mod fork_safety;
pub(crate) mod launcher_frames;
pub(crate) mod process_memory;
pub(crate) mod signal_mask;
pub(crate) mod spare_buffers;
pub(crate) mod stack_resolution;
pub(crate) mod trace_collect;
