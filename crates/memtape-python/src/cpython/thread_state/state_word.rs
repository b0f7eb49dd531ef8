//! Where one thread finds its current thread state (from 3.12 on), kept in the thread's
//! hook state.

use std::cell::Cell;

/// Where one thread finds its current thread state (from 3.12 on): the address
/// of libpython's thread-local once asked (see [`super::locate`]), or `CALL` (the getter is
/// called). Kept in the thread's hook state, so it lives as long as the thread's
/// thread-locals. Before 3.12 the word is the process's and this is not read.
pub(crate) struct StateWord(#[cfg_attr(not(Py_3_12), allow(dead_code))] Cell<usize>);

#[cfg_attr(not(Py_3_12), allow(dead_code))]
impl StateWord {
    /// Not asked yet.
    const UNASKED: usize = 0;
    /// Asked: the getter is called.
    const CALL: usize = 1;

    pub(crate) const fn new() -> Self {
        Self(Cell::new(Self::UNASKED))
    }

    /// The thread-local's address, once asked and found to give the getter's answer.
    #[inline(always)]
    pub(super) fn address(&self) -> Option<usize> {
        let at = self.0.get();
        (at > Self::CALL).then_some(at)
    }

    /// Whether the address was asked already.
    pub(super) fn asked(&self) -> bool {
        self.0.get() != Self::UNASKED
    }

    /// Keeps what the asking found: the address, or `None` (the getter is called).
    pub(super) fn keep(&self, address: Option<usize>) {
        self.0.set(address.unwrap_or(Self::CALL));
    }
}
