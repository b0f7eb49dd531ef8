//! The calling thread's state for the hooks: what it is doing (a re-entrancy guard) and
//! its stack-capture cache, in one thread-local. A hook finds it by the thread's pointer
//! in [`super::thread_table`]; the thread-local lookup (a `__tls_get_addr` call in a
//! shared library) runs once per thread, or when another thread took the table's slot.

use std::cell::{Cell, RefCell};

use super::first_touch::{self, Busy};
use super::thread_capture::ThreadCapture;
use super::thread_clock::ThreadClock;
use super::thread_id::thread_token;
use super::thread_table;
use crate::cpython::thread_state::{self, StateWord};

/// The calling thread's relation to the allocation hooks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum HookMode {
    /// Ordinary code: allocations and frees are recorded.
    Idle,
    /// Inside one of our allocation hooks: nested calls pass straight through.
    InAllocHook,
    /// memtape's own work (snapshots, clearing), or a thread being torn down: allocations
    /// are not recorded, frees are.
    Untraced,
    /// Between fork preparation and the fork: nothing is recorded, the recorder is locked.
    Forking,
}

impl HookMode {
    /// Every mode, in the order of their codes (see [`HookMode::records_frees`]).
    const ALL: [HookMode; 4] = [
        HookMode::Idle,
        HookMode::InAllocHook,
        HookMode::Untraced,
        HookMode::Forking,
    ];

    /// Whether a free made in this mode is recorded: in ordinary code and in memtape's
    /// own work, not inside a hook (the outer hook sees it) or around a fork. Those two
    /// modes have the even codes: one bit test, not a jump table, in every free hook.
    #[inline(always)]
    pub(crate) fn records_frees(self) -> bool {
        self.code() & 1 == 0
    }

    /// A small number standing for the mode (Python holds it as a token).
    pub(crate) fn code(self) -> u8 {
        self as u8
    }

    /// The mode `code` stands for.
    pub(crate) fn from_code(code: u8) -> Option<HookMode> {
        HookMode::ALL.get(usize::from(code)).copied()
    }
}

/// Per-thread hook state.
pub(crate) struct HookThread {
    mode: Cell<HookMode>,
    /// The thread's stack-capture cache.
    pub(crate) capture: RefCell<ThreadCapture>,
    /// The thread's id once asked for (0 before), as [`super::thread_id::current`]
    /// gives it, kept here to spare events a second thread-local lookup.
    tid: Cell<u32>,
    /// Where the thread finds its current Python thread state.
    pub(crate) state_word: StateWord,
    /// The thread's last reading of the event clock.
    pub(crate) clock: ThreadClock,
    /// The thread filter this thread last decided for, and whether it is left out by it
    /// (see [`super::thread_filter`]).
    pub(crate) filter_epoch: Cell<u32>,
    pub(crate) left_out: Cell<bool>,
    /// How many times `capture_traceback` read this thread's stack (for tests: none while
    /// no recording is on).
    traceback_reads: Cell<u64>,
}

impl HookThread {
    /// The thread's mode.
    #[inline(always)]
    pub(crate) fn mode(&self) -> HookMode {
        self.mode.get()
    }

    /// Sets the thread's mode, returning the previous one.
    #[inline(always)]
    pub(crate) fn set_mode(&self, mode: HookMode) -> HookMode {
        self.mode.replace(mode)
    }

    /// Counts one reading of the thread's stack by `capture_traceback`.
    #[inline(always)]
    pub(crate) fn count_traceback_read(&self) {
        self.traceback_reads.set(self.traceback_reads.get() + 1);
    }

    /// How many times `capture_traceback` read the thread's stack.
    pub(crate) fn traceback_reads(&self) -> u64 {
        self.traceback_reads.get()
    }

    /// Forgets the cached thread id (in a forked child, see [`super::thread_id::forget`]).
    pub(crate) fn forget_tid(&self) {
        self.tid.set(0);
    }

    /// The thread's id ([`super::thread_id::current`]).
    #[inline(always)]
    pub(crate) fn tid(&self) -> u32 {
        match self.tid.get() {
            0 => {
                let tid = super::thread_id::current();
                self.tid.set(tid);
                tid
            }
            tid => tid,
        }
    }
}

impl Drop for HookThread {
    fn drop(&mut self) {
        // Before the state goes: a hook that runs later on this thread (another
        // destructor's free) must not find it in the table. The thread-local is marked
        // destroyed before this runs, so such a hook's miss cannot store it again.
        thread_table::forget(thread_token());
    }
}

thread_local! {
    // Const-initialised: touching it never allocates.
    static THREAD: HookThread = const {
        HookThread {
            mode: Cell::new(HookMode::Idle),
            capture: RefCell::new(ThreadCapture::EMPTY),
            tid: Cell::new(0),
            state_word: StateWord::new(),
            clock: ThreadClock::new(),
            filter_epoch: Cell::new(0),
            left_out: Cell::new(false),
            traceback_reads: Cell::new(0),
        }
    };
}

thread_local! {
    // Whether THREAD was touched on this thread: its first touch registers its destructor
    // through libc (`calloc`), which the native hooks see. No destructor of its own, so
    // reading it never registers anything.
    static READY: Cell<Touch> = const { Cell::new(Touch::Never) };
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Touch {
    Never,
    Registering,
    Done,
}

/// The calling thread's hook state, or `None` while the thread is being torn down (or
/// its state is being set up: a hook reached from that set-up passes through, and the
/// destructor is registered once).
#[inline(always)]
pub(crate) fn thread() -> Option<&'static HookThread> {
    lookup().unwrap_or(None)
}

/// [`thread`], telling apart a thread whose state is gone (`Ok(None)`: torn down, its
/// thread-locals still usable) from one inside its first touch of the thread-locals
/// (`Err`, see [`first_touch`]): a hook must then touch no thread-local at all.
#[inline(always)]
pub(crate) fn lookup() -> Result<Option<&'static HookThread>, Busy> {
    let token = thread_token();
    if let Some(found) = thread_table::find(token) {
        // SAFETY: the table returns only what this thread stored in
        // `thread_local_state`: its own `THREAD`, which lives until this thread runs its
        // destructors, and whose destructor clears the entry first. `HookThread` is
        // neither Send nor Sync (Cell/RefCell), so the reference cannot leave this
        // thread; callers use it within one hook call.
        return Ok(Some(unsafe { found.cast::<HookThread>().as_ref() }));
    }
    thread_local_state(token)
}

/// The calling thread's Python thread state if it holds the GIL, else null: through the
/// thread's own word when its hook state `thread` is at hand (see
/// [`thread_state::attached_if_holding_gil_via`]).
#[inline]
pub(crate) fn tstate_if_holding_gil(thread: Option<&HookThread>) -> *mut pyo3::ffi::PyThreadState {
    match thread {
        Some(t) => thread_state::attached_if_holding_gil_via(&t.state_word),
        None => thread_state::attached_if_holding_gil(),
    }
}

/// [`thread`] through the thread-locals, remembering the state in the table.
#[cold]
#[inline(never)]
fn thread_local_state(token: usize) -> Result<Option<&'static HookThread>, Busy> {
    // Before any thread-local is touched: the first touch may allocate (see `first_touch`).
    let _claim = first_touch::claim(token)?;
    let touch = READY.get();
    let t = if touch == Touch::Done {
        state()
    } else {
        first_touch(touch)
    };
    if let Some(t) = t {
        thread_table::remember(token, std::ptr::NonNull::from(t).cast());
    }
    Ok(t)
}

#[inline(always)]
fn state() -> Option<&'static HookThread> {
    THREAD
        .try_with(|t| {
            // SAFETY: a thread-local lives until its thread has finished running its
            // destructors, and `HookThread` is neither Send nor Sync (Cell/RefCell), so the
            // reference cannot leave this thread; callers use it within one hook call.
            unsafe { &*std::ptr::from_ref(t) }
        })
        .ok()
}

#[cold]
fn first_touch(touch: Touch) -> Option<&'static HookThread> {
    if touch == Touch::Registering {
        return None;
    }
    READY.set(Touch::Registering);
    let t = state();
    READY.set(Touch::Done);
    t
}

/// Sets the calling thread's mode, returning the previous one.
#[inline(always)]
pub(crate) fn set(mode: HookMode) -> HookMode {
    thread().map_or(HookMode::Untraced, |t| t.set_mode(mode))
}

/// Runs `f` with allocations of this thread unrecorded (memtape's own bookkeeping).
pub(crate) fn untraced<R>(f: impl FnOnce() -> R) -> R {
    with_mode(HookMode::Untraced, f)
}

/// Runs `f` with the calling thread in `mode`, then restores the mode it had.
pub(crate) fn with_mode<R>(mode: HookMode, f: impl FnOnce() -> R) -> R {
    struct Restore(HookMode);
    impl Drop for Restore {
        fn drop(&mut self) {
            set(self.0);
        }
    }
    let _restore = Restore(set(mode));
    f()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frees_are_recorded_in_ordinary_code_and_in_our_own_work_only() {
        for mode in HookMode::ALL {
            let expected = matches!(mode, HookMode::Idle | HookMode::Untraced);
            assert_eq!(mode.records_frees(), expected, "{mode:?}");
            assert_eq!(HookMode::from_code(mode.code()), Some(mode));
        }
    }
}
