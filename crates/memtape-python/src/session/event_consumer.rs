//! Starting memtape's events thread ([`crate::record::event_stage`]): it keeps the event
//! recorder's ring and blocks' table on the other core, a staged batch at a time, and
//! parks between batches. One for the process, started by its first recording of events
//! and left parked after; a forked child starts its own with its first recording.

use crate::record::event_stage;
use crate::record::recorder::with_recorder;
use crate::session::signal_mask::spawn_own_thread;
use crate::thread::hook_mode::HookMode;

/// Starts the events thread unless this process has one. Called with the GIL held, which
/// keeps two recordings from starting two. Without it (the thread could not be started),
/// the threads that stage events apply each batch themselves.
pub(crate) fn start() {
    // The store is taken after the recorder, as everywhere but on the events thread: a
    // signal handler's hook on this thread then finds the recorder held and passes.
    if with_recorder(|_| event_stage::lock_store().has_consumer()) {
        return;
    }
    // Nothing it does is recorded: what it allocates and frees is memtape's own (the
    // ring's and the table's room), and a hook it reached would stage an event into the
    // batch it is applying.
    let Ok(handle) = spawn_own_thread("memtape-events", HookMode::InAllocHook, || {
        event_stage::consume()
    }) else {
        return;
    };
    // Dropping the handle detaches the thread; it parks when it has nothing to do.
    let thread = handle.thread().clone();
    with_recorder(|_| event_stage::lock_store().set_consumer(Some(thread)));
}
