//! The thread-local stack of op contexts: inside one, memory events are attributed to the
//! context's traceback and op name instead of the current stack (lazy frameworks create an
//! array on one line and allocate it later, inside `eval`).

use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};

use memtape_core::StackId;

/// A traceback handle as handed to users: the recorder generation (plus one, so that 0
/// is never a valid handle) in the high half, the stack id in the low half.
pub(crate) type TracebackHandle = u64;

/// The handle meaning "no traceback".
pub(crate) const NO_TRACEBACK: TracebackHandle = 0;

/// Makes a handle for `stack` interned in recorder generation `generation`.
pub(crate) fn handle(generation: u64, stack: StackId) -> TracebackHandle {
    (((generation & 0xffff_ffff) + 1) << 32) | u64::from(stack)
}

/// The stack of a handle if it belongs to `generation` (`Some(None)` for
/// [`NO_TRACEBACK`]), or `None` when the handle is stale or malformed.
pub(crate) fn resolve(handle: TracebackHandle, generation: u64) -> Option<Option<StackId>> {
    if handle == NO_TRACEBACK {
        return Some(None);
    }
    let gen_plus_one = handle >> 32;
    ((gen_plus_one == (generation & 0xffff_ffff) + 1) && gen_plus_one != 0)
        .then_some(Some((handle & 0xffff_ffff) as StackId))
}

/// One entered op context.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct OpContext {
    /// Interned op name.
    pub(crate) op: u32,
    /// The traceback to attribute to, or [`NO_TRACEBACK`].
    pub(crate) traceback: TracebackHandle,
}

thread_local! {
    static STACK: RefCell<Vec<OpContext>> = const { RefCell::new(Vec::new()) };
}

/// Contexts entered and not left, over all threads. While 0 (no framework uses op
/// contexts), [`current`] answers without touching the thread-local: a thread always
/// sees its own entries counted, so a nonzero count of its own is never missed.
static ENTERED: AtomicUsize = AtomicUsize::new(0);

/// Enters a context on the calling thread.
pub(crate) fn push(ctx: OpContext) {
    let _ = STACK.try_with(|s| {
        if let Ok(mut s) = s.try_borrow_mut() {
            s.push(ctx);
            ENTERED.fetch_add(1, Ordering::Relaxed);
        }
    });
}

/// Leaves the innermost context; false when there was none.
pub(crate) fn pop() -> bool {
    let popped = STACK
        .try_with(|s| s.try_borrow_mut().ok().and_then(|mut s| s.pop()).is_some())
        .unwrap_or(false);
    if popped {
        ENTERED.fetch_sub(1, Ordering::Relaxed);
    }
    popped
}

/// The innermost context of the calling thread.
#[inline]
pub(crate) fn current() -> Option<OpContext> {
    if ENTERED.load(Ordering::Relaxed) == 0 {
        return None;
    }
    STACK
        .try_with(|s| s.try_borrow().ok().and_then(|s| s.last().copied()))
        .ok()
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_round_trip_and_go_stale() {
        let h = handle(3, 77);
        assert_eq!(resolve(h, 3), Some(Some(77)));
        assert_eq!(resolve(h, 4), None);
        assert_eq!(resolve(NO_TRACEBACK, 9), Some(None));
        assert_eq!(resolve(77, 0), None);
        assert_ne!(handle(0, 0), NO_TRACEBACK);
    }

    #[test]
    fn contexts_nest_per_thread() {
        assert_eq!(current(), None);
        push(OpContext {
            op: 1,
            traceback: 5,
        });
        push(OpContext {
            op: 2,
            traceback: 6,
        });
        assert_eq!(current().map(|c| c.op), Some(2));
        std::thread::spawn(|| assert_eq!(current(), None))
            .join()
            .unwrap();
        assert!(pop());
        assert_eq!(current().map(|c| c.op), Some(1));
        assert!(pop());
        assert!(!pop());
    }
}
