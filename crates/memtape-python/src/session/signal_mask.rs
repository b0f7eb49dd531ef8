//! memtape's own threads (the capture's flusher, the snapshot writer, the run summary's
//! reader) and how they start: in a hook mode that keeps what they allocate out of the
//! program's memory, and taking no asynchronous signals: a process-directed signal (a
//! profiling timer, SIGTERM, a `kill`) goes to one of the program's threads, as it would
//! without memtape. A handler that allocates must never run on memtape's writer thread
//! in the middle of its own `malloc` (libc's allocator is not reentrant: the handler's
//! `malloc` would wait for the arena lock its own thread holds, and every thread after it).

use std::io;
use std::sync::mpsc::sync_channel;
use std::thread::{Builder, JoinHandle};

use crate::thread::hook_mode::{self, HookMode};

/// Signals the kernel raises for the faulting thread itself: they stay deliverable.
const SYNCHRONOUS: [libc::c_int; 6] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGFPE,
    libc::SIGILL,
    libc::SIGTRAP,
    libc::SIGABRT,
];

/// Spawns memtape's own thread `name` running `f`: without asynchronous signals, in hook
/// `mode` from its start, and returns once its start-up is over. Whatever libc allocates
/// for a new thread (its thread-locals' destructors, registered through libc) is then
/// done, so tracing begun right after this returns never records it as the program's.
pub(crate) fn spawn_own_thread<F, T>(name: &str, mode: HookMode, f: F) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let (ready_tx, ready) = sync_channel(1);
    let thread = spawn_without_signals(Builder::new().name(name.into()), move || {
        hook_mode::set(mode);
        // The receiver only goes away if the spawn failed; the thread goes on either way.
        let _ = ready_tx.send(());
        f()
    })?;
    // An error means the thread already ended (its caller learns why when joining it). The
    // thread never needs the GIL to get here.
    let _ = ready.recv();
    Ok(thread)
}

/// Spawns `f` on a thread that starts with every asynchronous signal blocked. The
/// calling thread's mask is the same before and after.
fn spawn_without_signals<F, T>(builder: Builder, f: F) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    // SAFETY: `sigset_t` values are initialised by sigfillset/sigemptyset before use, and
    // pthread_sigmask only changes the calling thread's mask, which is put back below; the
    // new thread inherits the blocked mask from its first instruction.
    unsafe {
        let mut blocked: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut blocked);
        for s in SYNCHRONOUS {
            libc::sigdelset(&mut blocked, s);
        }
        let mut previous: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut previous);
        let masked = libc::pthread_sigmask(libc::SIG_BLOCK, &blocked, &mut previous) == 0;
        let spawned = builder.spawn(f);
        if masked {
            libc::pthread_sigmask(libc::SIG_SETMASK, &previous, std::ptr::null_mut());
        }
        spawned
    }
}
