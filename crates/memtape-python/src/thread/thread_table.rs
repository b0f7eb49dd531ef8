//! The hook states of running threads, found by thread pointer without a thread-local
//! lookup.
//!
//! In a shared library every thread-local access is a `__tls_get_addr` call (stable Rust
//! offers no initial-exec model, and TLS descriptors fall back to glibc's slow path for a
//! `dlopen`ed module: benchmarks/HISTORY.md section 29). That call was about 3 % of a traced
//! allocation-heavy run's samples. A hook instead reads the thread pointer (one register
//! or `%fs:0` load, [`super::thread_id::thread_token`]) and looks it up in a small
//! direct-mapped table of `(token, state)` entries; a miss takes the thread-local path
//! and fills the entry.
//!
//! Why an entry can be trusted:
//! - Only the thread whose token an entry names writes that token there, so an entry
//!   naming the caller's token was written by the caller.
//! - Another thread may overwrite the entry meanwhile (their tokens share a slot): a
//!   writer first claims the slot (one compare-and-swap, so two writers never mix their
//!   token and state), and the reader checks the token again after reading the state,
//!   as a sequence lock's reader does.
//! - A thread clears its entry when its state is dropped (the thread's exit), before its
//!   thread pointer can be reused by a new thread; a forked child clears the whole table
//!   (memtape's fork handler), since the parent's other threads are gone without their
//!   exits and the child's new threads may be given their thread pointers.

use std::ptr::{self, NonNull};
use std::sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicUsize, Ordering};

/// Entries: a power of two; threads whose tokens share a slot take turns in it.
const SLOTS: usize = 1024;

/// A slot's token while a thread stores its state there (no thread pointer is 1).
const WRITING: usize = 1;

/// One slot: the token of the thread whose state it holds (0: none; [`WRITING`]).
#[repr(C, align(16))]
struct Entry {
    token: AtomicUsize,
    /// The thread's state, type-erased ([`super::hook_mode`] stores and reads it).
    state: AtomicPtr<u8>,
}

/// Threads' states by token.
struct ThreadTable {
    entries: [Entry; SLOTS],
}

impl ThreadTable {
    const fn new() -> Self {
        Self {
            entries: [const {
                Entry {
                    token: AtomicUsize::new(0),
                    state: AtomicPtr::new(ptr::null_mut()),
                }
            }; SLOTS],
        }
    }

    /// The slot of a token. Thread pointers differ in their middle bits (a thread's
    /// control block sits at its stack's top), which the multiplication spreads into the
    /// top ones.
    #[inline(always)]
    fn slot(&self, token: usize) -> &Entry {
        let hashed = (token as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        &self.entries[(hashed >> (64 - SLOTS.trailing_zeros())) as usize]
    }

    #[inline(always)]
    fn find(&self, token: usize) -> Option<NonNull<u8>> {
        let entry = self.slot(token);
        if entry.token.load(Ordering::Acquire) != token {
            return None;
        }
        let state = entry.state.load(Ordering::Relaxed);
        // Orders the state's load before the second look at the token: a state stored by
        // another thread was stored after that thread claimed the slot, which replaced
        // the caller's token.
        fence(Ordering::Acquire);
        if entry.token.load(Ordering::Relaxed) != token {
            return taken_meanwhile();
        }
        // The entry named the caller's token before and after `state` was read: `state`
        // is what the caller stored, and `remember` stores a token only after its state,
        // which is never null: the hooks then compare the token alone.
        if state.is_null() {
            // SAFETY: not null, as just said (no other store names a thread's token: the
            // table starts and is cleared with token 0, which no thread pointer is). Said
            // to the compiler, as `NonNull::new_unchecked` alone does not: `Option`
            // stands for `None` by null, and it would test for that.
            unsafe { std::hint::unreachable_unchecked() }
        }
        NonNull::new(state)
    }

    /// Stores `state` for `token` unless another thread is storing into the slot: the
    /// slot is claimed (marked [`WRITING`]) from whatever it held, so that two writers
    /// never mix their token and state.
    fn remember(&self, token: usize, state: NonNull<u8>) {
        let entry = self.slot(token);
        let held = entry.token.load(Ordering::Relaxed);
        if held == WRITING
            || entry
                .token
                .compare_exchange(held, WRITING, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        // Orders the claim before the state's store (what `find`'s fence pairs with).
        fence(Ordering::Release);
        entry.state.store(state.as_ptr(), Ordering::Relaxed);
        entry.token.store(token, Ordering::Release);
    }

    fn forget(&self, token: usize) {
        let _ =
            self.slot(token)
                .token
                .compare_exchange(token, 0, Ordering::AcqRel, Ordering::Relaxed);
    }

    fn forget_all(&self) {
        for entry in &self.entries {
            entry.token.store(0, Ordering::Relaxed);
        }
    }
}

/// [`ThreadTable::find`]'s answer when another thread took the slot while it read the
/// state. A call, not a value: the compiler would otherwise fold this `None` and the
/// state into one pointer and test it for null on every lookup.
#[cold]
#[inline(never)]
fn taken_meanwhile() -> Option<NonNull<u8>> {
    None
}

static TABLE: ThreadTable = ThreadTable::new();

/// Whether the table is filled: once [`forget_all_in_child`] is sure to run in a forked
/// child ([`enable`]).
static ENABLED: AtomicBool = AtomicBool::new(false);

/// The state the calling thread stored with [`remember`], if the table still holds it
/// (`token` is the caller's).
#[inline(always)]
pub(crate) fn find(token: usize) -> Option<NonNull<u8>> {
    TABLE.find(token)
}

/// Stores the calling thread's state (`token` is the caller's), taking the slot from any
/// thread that held it; nothing when another thread is storing there at that moment.
pub(crate) fn remember(token: usize, state: NonNull<u8>) {
    if ENABLED.load(Ordering::Relaxed) {
        TABLE.remember(token, state);
    }
}

/// Clears the calling thread's entry (its state is being dropped), so that no later
/// [`find`] on this thread, or on a new thread given its thread pointer, returns it.
pub(crate) fn forget(token: usize) {
    TABLE.forget(token);
}

/// Starts filling the table; called once a fork handler that runs [`forget_all_in_child`]
/// in a forked child is registered.
pub(crate) fn enable() {
    ENABLED.store(true, Ordering::Relaxed);
}

/// In a forked child (its fork handler, before anything else): only the forking thread is
/// left, and new threads may be given the other threads' thread pointers.
pub(crate) fn forget_all_in_child() {
    TABLE.forget_all();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Thread control blocks 8 MiB + 4 KiB apart (a default stack and its guard page).
    fn token(i: usize) -> usize {
        0x7f00_0000_0000 + i * ((8 << 20) + 4096) + 0x6c0
    }

    /// Two tokens that share a slot.
    fn colliding(table: &ThreadTable) -> (usize, usize) {
        let a = token(0);
        let b = (1..100_000)
            .map(token)
            .find(|&b| ptr::eq(table.slot(a), table.slot(b)))
            .expect("a token sharing the first one's slot");
        (a, b)
    }

    fn state(n: &u64) -> Option<NonNull<u8>> {
        Some(NonNull::from(n).cast())
    }

    #[test]
    fn nearby_thread_pointers_spread_over_the_slots() {
        let table = ThreadTable::new();
        let used: std::collections::HashSet<usize> = (0..64)
            .map(|i| ptr::from_ref(table.slot(token(i))) as usize)
            .collect();
        assert!(used.len() >= 60, "{} slots for 64 threads", used.len());
    }

    #[test]
    fn a_thread_finds_only_what_it_stored() {
        let table = ThreadTable::new();
        let (mine, theirs) = (1u64, 2u64);
        assert!(table.find(token(1)).is_none());
        table.remember(token(1), state(&mine).unwrap());
        assert_eq!(table.find(token(1)), state(&mine));
        assert!(table.find(token(2)).is_none());
        table.remember(token(2), state(&theirs).unwrap());
        assert_eq!(table.find(token(1)), state(&mine));
        assert_eq!(table.find(token(2)), state(&theirs));
    }

    #[test]
    fn a_thread_sharing_the_slot_takes_it_and_an_exit_clears_only_its_own() {
        let table = ThreadTable::new();
        let (a, b) = colliding(&table);
        let (sa, sb) = (1u64, 2u64);
        table.remember(a, state(&sa).unwrap());
        table.remember(b, state(&sb).unwrap());
        assert!(
            table.find(a).is_none(),
            "the slot's previous holder still finds it"
        );
        assert_eq!(table.find(b), state(&sb));
        table.forget(a);
        assert_eq!(
            table.find(b),
            state(&sb),
            "an exit cleared another thread's entry"
        );
        table.forget(b);
        assert!(table.find(b).is_none());
    }

    #[test]
    fn forgetting_all_leaves_nothing_to_find() {
        let table = ThreadTable::new();
        let states: Vec<u64> = (0..32).collect();
        for (i, s) in states.iter().enumerate() {
            table.remember(token(i), state(s).unwrap());
        }
        table.forget_all();
        assert!((0..32).all(|i| table.find(token(i)).is_none()));
    }

    #[test]
    fn threads_taking_turns_in_one_slot_never_find_each_others_state() {
        let table = Arc::new(ThreadTable::new());
        let (a, b) = colliding(&table);
        let workers: Vec<_> = [a, b]
            .into_iter()
            .map(|me| {
                let table = Arc::clone(&table);
                std::thread::spawn(move || {
                    let mine = Box::new(me as u64);
                    let mut found = 0u32;
                    for _ in 0..200_000 {
                        let got = table.find(me);
                        if got.is_none() {
                            table.remember(me, state(&mine).unwrap());
                        } else {
                            assert_eq!(got, state(&mine), "found another thread's state");
                            found += 1;
                        }
                    }
                    found
                })
            })
            .collect();
        for w in workers {
            assert!(w.join().unwrap() > 0);
        }
    }
}
