//! A thread's first touch of memtape's thread-locals, made safe from the allocation it
//! causes.
//!
//! memtape is a `dlopen`ed library whose thread-local block is too large for the static
//! TLS surplus, so glibc allocates it in each thread on first use, inside
//! `__tls_get_addr`, with the dynamic loader's `malloc`. Where the executable itself
//! calls `malloc` through its PLT and exports that stub as `malloc` (Debian's
//! `python3.14`, linked with libpython statically: the stub is the canonical address
//! that every lookup of `malloc` gets, the loader's own included), that `malloc` goes
//! through the executable's GOT slot, which memtape points at its hook. The hook then
//! touches the thread-locals again before the first touch has its block: an endless
//! recursion (seen as a crash in every thread started by C code).
//!
//! So a hook that does not find its thread in [`super::thread_table`] claims the thread's
//! token here before touching any thread-local, and a hook that finds its own token
//! claimed is inside that first touch: it passes the call through and touches nothing.
//! The claims are a small direct-mapped table of thread pointers, without thread-locals;
//! only the thread whose token it is writes or clears a claim, and a claim lives only
//! for the length of one first touch.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Claims at once: threads in their first touch at the same moment, by hash.
const SLOTS: usize = 64;

static CLAIMS: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];

/// The calling thread's claim; cleared when dropped.
pub(crate) struct Claim(&'static AtomicUsize);

impl Drop for Claim {
    fn drop(&mut self) {
        self.0.store(0, Ordering::Release);
    }
}

/// Why a hook must not touch the thread-locals now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Busy;

/// The slot of a thread pointer (as the thread table spreads them).
fn slot(token: usize) -> &'static AtomicUsize {
    let hashed = (token as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    &CLAIMS[(hashed >> (64 - SLOTS.trailing_zeros())) as usize]
}

/// Claims `token` (the caller's thread pointer) for a first touch of the thread-locals.
/// [`Busy`] when the caller is already inside one (its token is claimed), or when
/// another thread in its own first touch holds the slot: the caller then passes its call
/// through unrecorded, which is always safe.
pub(crate) fn claim(token: usize) -> Result<Claim, Busy> {
    let s = slot(token);
    match s.compare_exchange(0, token, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => Ok(Claim(s)),
        Err(_) => Err(Busy),
    }
}

/// In a forked child: only the forking thread is left, and it was not in a first touch
/// (fork is not called from inside a hook); the others' claims went with them.
pub(crate) fn forget_all_in_child() {
    for c in &CLAIMS {
        c.store(0, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claimed_token_is_busy_until_its_claim_is_dropped() {
        let token = 0x7f12_3456_7000;
        let first = claim(token).expect("an unclaimed token");
        assert_eq!(claim(token).err(), Some(Busy));
        drop(first);
        let again = claim(token).expect("claimable again");
        drop(again);
    }

    #[test]
    fn another_thread_in_the_same_slot_is_busy_too() {
        let a = 0x7f00_0000_06c0usize;
        let b = (1..100_000usize)
            .map(|i| a + i * ((8 << 20) + 4096))
            .find(|&b| std::ptr::eq(slot(a), slot(b)))
            .expect("a token sharing the slot");
        let held = claim(a).expect("free slot");
        assert_eq!(claim(b).err(), Some(Busy));
        drop(held);
        drop(claim(b).expect("free again"));
    }
}
