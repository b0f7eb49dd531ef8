//! Starting the event clock's thread ([`crate::record::clock_beat`]) when a recording of
//! Python-heap events starts; it ends by itself once none is recorded.

use std::sync::atomic::Ordering;

use crate::record::clock_beat;
use crate::record::recorder::HEAP_EVENTS;
use crate::session::signal_mask::spawn_own_thread;
use crate::thread::hook_mode::HookMode;

/// Starts the clock thread unless one runs. Without it (the thread could not be
/// started), every event reads the counter, as it does with no beat.
pub(crate) fn start() {
    if !clock_beat::claim() {
        return;
    }
    let recording = || HEAP_EVENTS.load(Ordering::Acquire);
    let body = move || clock_beat::run(recording);
    if spawn_own_thread("memtape-clock", HookMode::Untraced, body).is_err() {
        clock_beat::not_started();
    }
}
