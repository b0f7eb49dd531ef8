//! A thread's stack-capture cache: the frames (Python, then native) of its previous
//! capture and their stack ids, kept in the thread's [`HookThread`] so that a hook reaches
//! it with the same thread-local lookup as its mode. [`crate::record::capture`] fills it.
//!
//! [`HookThread`]: super::hook_mode::HookThread

use memtape_core::{StackId, EMPTY_STACK};

use crate::cpython::frames::{self, ChainFrame, InnermostFrame, RawFrame};

/// Room for the native frames of one capture: as many as the unwinder returns (its
/// `MAX_NATIVE_FRAMES`; [`crate::record::capture`] hands this buffer to it, so the two
/// cannot differ without a type error).
pub(crate) const NATIVE_FRAMES: usize = 64;

/// Room for the eval-loop frames one interleaved capture splits (the unwinder's
/// `MAX_CUTS`; checked by type the same way).
pub(crate) const CUTS: usize = 16;

/// Entries of [`MovedIds`] (a power of two).
const MOVED_IDS: usize = 16;

/// The stack ids a thread's innermost frame took at its recent positions: a loop's
/// allocations move the innermost frame between a few instructions under the same
/// callers, and each move costs a lookup in the recorder's stack table (about 80
/// instructions); one here costs a few. Keyed by the parent id and the frame; ids are the
/// recorder's, valid while the thread's `generation` is (cleared when it changes).
#[derive(Clone, Copy, Debug)]
pub(crate) struct MovedIds {
    /// `(parent, frame, id)`; a null code is an empty entry.
    entries: [(StackId, RawFrame, StackId); MOVED_IDS],
}

impl MovedIds {
    const EMPTY: MovedIds = MovedIds {
        entries: [(EMPTY_STACK, RawFrame { code: 0, lasti: 0 }, EMPTY_STACK); MOVED_IDS],
    };

    #[inline(always)]
    fn slot(parent: StackId, frame: RawFrame) -> usize {
        let mixed = (frame.lasti as u32 ^ parent.rotate_left(16)).wrapping_mul(0x9e37_79b1);
        (mixed >> (32 - MOVED_IDS.trailing_zeros())) as usize
    }

    /// The id of `frame` under `parent`, when remembered.
    #[inline(always)]
    pub(crate) fn get(&self, parent: StackId, frame: RawFrame) -> Option<StackId> {
        let (p, f, id) = self.entries[Self::slot(parent, frame)];
        (p == parent && f == frame && f.code != 0).then_some(id)
    }

    /// Remembers `id` for `frame` under `parent`.
    #[inline(always)]
    pub(crate) fn put(&mut self, parent: StackId, frame: RawFrame, id: StackId) {
        self.entries[Self::slot(parent, frame)] = (parent, frame, id);
    }

    /// Forgets every id (another recorder generation).
    pub(crate) fn clear(&mut self) {
        *self = Self::EMPTY;
    }
}

/// One thread's capture cache (lives in the thread's [`HookThread`]).
pub(crate) struct ThreadCapture {
    /// Scratch: the frames just walked, innermost first.
    pub(crate) walked: Vec<RawFrame>,
    /// The previous capture's frames, outermost first, and the stack id ending at each.
    pub(crate) frames: Vec<RawFrame>,
    pub(crate) ids: Vec<StackId>,
    /// The recorder generation the ids belong to.
    pub(crate) generation: u64,
    /// Where the thread's walks stop while it runs a call whose stacks start at its
    /// caller's frame (see [`crate::record::stack_floor`]): the address of that frame's
    /// caller, 0 for none. Beside `generation`, which every capture reads too.
    pub(crate) floor: usize,
    /// The stop the last walk was made with, which `chain` and `last_innermost` describe
    /// (0: the whole stack).
    pub(crate) chain_stop: usize,
    /// Ids of the innermost frame's recent positions (of `generation`).
    pub(crate) moved: MovedIds,
    /// What the last walk found (see [`frames::Walk`]).
    pub(crate) outcome: frames::Walk,
    /// The physical frame chain behind `frames` (outermost first), for the next walk to
    /// verify instead of following it pointer by pointer.
    pub(crate) chain: Vec<ChainFrame>,
    /// Scratch: the physical frames the walk just went through, innermost first.
    pub(crate) fresh: Vec<ChainFrame>,
    /// The innermost physical frame of the stack `frames` holds, when that stack was
    /// interned completely and `chain` ends at this frame's caller: a walk that finds the
    /// same frame there, unchanged, with the chain unchanged, has the same stack.
    pub(crate) last_innermost: Option<InnermostFrame>,
    /// Scratch: what the last walk found from `last_innermost` alone: the stack of
    /// `frames`, that stack with its innermost frame moved on, or neither (it walked).
    pub(crate) found: frames::Innermost,
    /// Scratch: the native frames just unwound (innermost first), when native stacks are
    /// on: they continue the Python stack.
    pub(crate) native: [u64; NATIVE_FRAMES],
    pub(crate) native_len: usize,
    /// Scratch, when C code called back into Python: how many of `native`'s frames lie
    /// inside each eval-loop frame (innermost first), and, in `ends`, how many of
    /// `walked`'s frames lie inside the end of each interpreter activation (see
    /// `intern_interleaved` in [`crate::record::capture`]).
    pub(crate) cut: [u8; CUTS],
    pub(crate) cuts: usize,
    pub(crate) ends: Vec<usize>,
    /// The previous native capture, outermost first, with the stack id ending at each
    /// frame and the Python stack it continued: its unchanged outer part is reused.
    pub(crate) prev_native: [u64; NATIVE_FRAMES],
    pub(crate) prev_native_ids: [StackId; NATIVE_FRAMES],
    pub(crate) prev_native_len: usize,
    pub(crate) prev_native_base: StackId,
    pub(crate) prev_native_generation: u64,
}

impl ThreadCapture {
    /// An empty cache.
    pub(crate) const EMPTY: ThreadCapture = ThreadCapture {
        walked: Vec::new(),
        frames: Vec::new(),
        ids: Vec::new(),
        generation: u64::MAX,
        floor: 0,
        chain_stop: 0,
        moved: MovedIds::EMPTY,
        outcome: frames::Walk {
            same: None,
            reused: None,
            innermost: None,
        },
        chain: Vec::new(),
        fresh: Vec::new(),
        last_innermost: None,
        found: frames::Innermost::Changed,
        native: [0; NATIVE_FRAMES],
        native_len: 0,
        cut: [0; CUTS],
        cuts: 0,
        ends: Vec::new(),
        prev_native: [0; NATIVE_FRAMES],
        prev_native_ids: [EMPTY_STACK; NATIVE_FRAMES],
        prev_native_len: 0,
        prev_native_base: EMPTY_STACK,
        prev_native_generation: u64::MAX,
    };

    /// The stop the thread's walk is made with now: its floor while the floor is honoured
    /// (`honoured`, asked only when there is a floor: the recorder knows, see
    /// `record::stack_floor`), else 0.
    #[inline]
    pub(crate) fn stop_now(&self, honoured: impl Fn() -> bool) -> usize {
        if self.floor != 0 && honoured() {
            self.floor
        } else {
            0
        }
    }

    /// The stop for this walk, with `chain` and `last_innermost` forgotten when they
    /// were walked with another one. Without a floor, one test.
    #[inline(always)]
    pub(crate) fn take_stop(&mut self, honoured: impl Fn() -> bool) -> usize {
        if self.floor | self.chain_stop == 0 {
            return 0;
        }
        let stop = self.stop_now(honoured);
        if stop != self.chain_stop {
            self.chain.clear();
            self.last_innermost = None;
            self.chain_stop = stop;
        }
        stop
    }

    /// The stop `chain` and `last_innermost` were walked with, when it is still the one
    /// in effect; `None` when a walk must start over. Without a floor, one test.
    #[inline(always)]
    pub(crate) fn chain_stop_in_effect(&self, honoured: impl Fn() -> bool) -> Option<usize> {
        if self.floor | self.chain_stop == 0 {
            return Some(0);
        }
        (self.stop_now(honoured) == self.chain_stop).then_some(self.chain_stop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moved_ids_hold_what_was_put_and_only_that() {
        let mut moved = MovedIds::EMPTY;
        let f = |lasti| RawFrame {
            code: 0x1000,
            lasti,
        };
        assert_eq!(moved.get(EMPTY_STACK, RawFrame { code: 0, lasti: 0 }), None);
        moved.put(3, f(10), 7);
        assert_eq!(moved.get(3, f(10)), Some(7));
        assert_eq!(moved.get(4, f(10)), None, "another parent");
        assert_eq!(moved.get(3, f(12)), None, "another instruction");
        let other = RawFrame {
            code: 0x2000,
            lasti: 10,
        };
        assert_eq!(moved.get(3, other), None, "another code object");
        // A colliding position replaces the entry.
        let collides = (0..)
            .map(f)
            .find(|&g| g != f(10) && MovedIds::slot(3, g) == MovedIds::slot(3, f(10)))
            .expect("a collision");
        moved.put(3, collides, 9);
        assert_eq!(moved.get(3, f(10)), None);
        assert_eq!(moved.get(3, collides), Some(9));
        moved.clear();
        assert_eq!(moved.get(3, collides), None);
    }
}
