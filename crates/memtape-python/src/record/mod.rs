//! Where an event is recorded: the stack capture that turns the calling thread's stack
//! into a stack id, the recorder (live table, staged events, the capture sink it feeds)
//! behind its spin lock, the event store the staged events go to, op contexts, and the
//! entry for events frameworks report.

pub(crate) mod cache_hint;
pub(crate) mod capture;
pub(crate) mod clock_beat;
pub(crate) mod event_clock;
pub(crate) mod event_stage;
pub(crate) mod framework_events;
pub(crate) mod heap_blocks;
pub(crate) mod native_state;
pub(crate) mod op_context;
pub(crate) mod recorder;
pub(crate) mod repeat_alloc;
pub(crate) mod spin_lock;
pub(crate) mod stack_floor;
