//! What the current thread is doing with respect to our hooks (a re-entrancy guard).

use std::cell::Cell;

/// The calling thread's relation to the allocation hooks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HookMode {
    /// Ordinary code: allocations and frees are recorded.
    Idle,
    /// Inside one of our allocation hooks: nested calls pass straight through.
    InAllocHook,
    /// memtape's own work (snapshots, clearing): allocations are not recorded, frees are.
    Untraced,
    /// Between fork preparation and the fork: nothing is recorded, the recorder is locked.
    Forking,
}

thread_local! {
    // Const-initialised and without a destructor: always accessible, even while the
    // thread is being torn down, and touching it never allocates.
    static MODE: Cell<HookMode> = const { Cell::new(HookMode::Idle) };
}

/// The calling thread's mode.
#[inline(always)]
pub(crate) fn current() -> HookMode {
    MODE.with(Cell::get)
}

/// Sets the calling thread's mode, returning the previous one.
#[inline(always)]
pub(crate) fn set(mode: HookMode) -> HookMode {
    MODE.with(|m| m.replace(mode))
}

/// Runs `f` with allocations of this thread unrecorded (memtape's own bookkeeping).
pub(crate) fn untraced<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(HookMode);
    impl Drop for Restore {
        fn drop(&mut self) {
            set(self.0);
        }
    }
    let _restore = Restore(set(HookMode::Untraced));
    f()
}
