//! Turning the calling thread's Python stack into a stack id, incrementally.
//!
//! Each thread keeps the frames of its previous capture (outermost first) with their ids.
//! A new capture walks the frames (no lock), finds how many outer frames are unchanged,
//! and interns only the changed inner part, usually one or two frames.

use std::sync::atomic::Ordering;

use memtape_core::{native_frame_code, StackId, EMPTY_STACK};
use pyo3::ffi;

use crate::cpython::frames;
use crate::native::unwind::native_stacks;
use crate::record::recorder::{Recorder, GENERATION};
use crate::record::stack_floor;
use crate::thread::hook_mode::HookThread;
use crate::thread::thread_capture::ThreadCapture;

impl ThreadCapture {
    /// Interns the native frames just unwound on top of the Python stack `base`, reusing
    /// the ids of the outer frames unchanged since the previous native capture (on the
    /// same Python stack, in the same recorder generation).
    fn intern_native(&mut self, rec: &mut Recorder, base: StackId) -> StackId {
        let n = std::mem::take(&mut self.native_len);
        let reusable =
            self.prev_native_generation == rec.generation && self.prev_native_base == base;
        let same = if reusable {
            self.prev_native[..self.prev_native_len]
                .iter()
                .zip(self.native[..n].iter().rev())
                .take_while(|(a, b)| a == b)
                .count()
        } else {
            0
        };
        let mut id = match same {
            0 => base,
            k => self.prev_native_ids[k - 1],
        };
        let mut len = same;
        for &ip in self.native[..n - same].iter().rev() {
            match rec.stacks.intern(id, native_frame_code(ip), 0) {
                Some((next, _)) => id = next,
                None => break,
            }
            self.prev_native[len] = ip;
            self.prev_native_ids[len] = id;
            len += 1;
        }
        self.prev_native_len = len;
        self.prev_native_base = base;
        self.prev_native_generation = rec.generation;
        id
    }

    /// Interns a stack whose C frames continue between Python frames, outermost first:
    /// each interpreter activation's Python frames, then the C frames its code called
    /// that led into the next activation inward, and so on, down to the C frames of the
    /// allocation. Outer activations without an eval-loop frame in the native stack (the
    /// unwind stopped short) keep their Python frames only.
    fn intern_interleaved(&mut self, rec: &mut Recorder) -> StackId {
        let kept = std::mem::take(&mut self.native_len);
        let pairs = self.cuts.min(self.ends.len());
        let start_of = |ends: &[usize], i: usize| if i == 0 { 0 } else { ends[i - 1] };
        let mut id = EMPTY_STACK;
        let unmatched = start_of(&self.ends, pairs);
        for f in self.walked[unmatched..].iter().rev() {
            match rec.intern_frame(id, f.code, f.lasti) {
                Some(next) => id = next,
                None => return id,
            }
        }
        for i in (0..pairs).rev() {
            for f in self.walked[start_of(&self.ends, i)..self.ends[i]]
                .iter()
                .rev()
            {
                match rec.intern_frame(id, f.code, f.lasti) {
                    Some(next) => id = next,
                    None => return id,
                }
            }
            let run = match i {
                0 => 0..usize::from(self.cut[0]),
                _ => usize::from(self.cut[i - 1])..usize::from(self.cut[i]),
            };
            for &ip in self.native[run.start..run.end.min(kept)].iter().rev() {
                match rec.stacks.intern(id, native_frame_code(ip), 0) {
                    Some((next, _)) => id = next,
                    None => return id,
                }
            }
        }
        id
    }

    /// The stack id of a stack found repeated from the innermost frame alone (`found`, see
    /// [`frames::innermost_state`]), interned in `rec`: the last capture's stack, or its
    /// caller part and the moved innermost frame. `None` when the ids are not those of the
    /// recorder's generation or not complete (or the table is full): the general path.
    /// The chain and `last_innermost` stay what `commit_chain` would keep, unless a code
    /// object is still unreferenced.
    #[inline(always)]
    pub(crate) fn intern_repeat(
        &mut self,
        rec: &mut Recorder,
        found: frames::Innermost,
    ) -> Option<StackId> {
        let n = self.ids.len();
        if self.generation != rec.generation || n != self.frames.len() || n == 0 {
            return None;
        }
        let id = match found {
            frames::Innermost::Unchanged => self.ids[n - 1],
            frames::Innermost::Moved(frame, instr) => {
                // `found` was judged from `last_innermost` as it is (this thread's cache,
                // changed by nothing since).
                let innermost = self.last_innermost.as_mut()?;
                // What the general path interns when the walk reaches the unchanged chain
                // right past the innermost frame.
                let parent = if n >= 2 { self.ids[n - 2] } else { EMPTY_STACK };
                let id = match self.moved.get(parent, frame) {
                    Some(id) => id,
                    None => {
                        let id = rec.intern_frame(parent, frame.code, frame.lasti)?;
                        self.moved.put(parent, frame, id);
                        id
                    }
                };
                innermost.moved_to(instr);
                self.frames[n - 1] = frame;
                self.ids[n - 1] = id;
                id
            }
            frames::Innermost::Changed => return None,
        };
        if !rec.reference_pending_codes() {
            self.chain.clear();
            self.last_innermost = None;
        }
        Some(id)
    }

    fn intern_walked(&mut self, rec: &mut Recorder) -> StackId {
        if let Some(id) = self.intern_repeat(rec, self.found) {
            return id;
        }
        self.walked_from_repeat();
        if self.generation != rec.generation {
            // The frames stay valid (they are what is on the stack); their ids do not.
            self.ids.clear();
            self.moved.clear();
            self.generation = rec.generation;
        }
        let n = self.walked.len();
        let (same, new) = match self.outcome {
            frames::Walk {
                same: Some(same),
                reused: Some(_),
                ..
            } => (same, n),
            frames::Walk {
                same: Some(same),
                reused: None,
                ..
            } => (same, n - same),
            frames::Walk { same: None, .. } => {
                let same = self
                    .frames
                    .iter()
                    .zip(self.walked.iter().rev())
                    .take_while(|(a, b)| a == b)
                    .count();
                (same, n - same)
            }
        };
        // The inner frames often repeat the last capture's too (an allocation at the same
        // line as the one before): those need no interning.
        let repeated = self.frames[same.min(self.frames.len())..]
            .iter()
            .zip(self.walked[..new].iter().rev())
            .take_while(|(a, b)| a == b)
            .count();
        let (same, new) = (same + repeated, new - repeated);
        if new == 0 && same == self.frames.len() && same == self.ids.len() {
            if let Some(&id) = self.ids.last() {
                let referenced = rec.reference_pending_codes();
                self.commit_chain(referenced);
                return id;
            }
        }
        self.frames.truncate(same);
        self.ids.truncate(same);
        let mut id = self.ids.last().copied().unwrap_or(EMPTY_STACK);
        // Outer frames kept from an earlier generation are interned again first.
        let mut complete = true;
        while self.ids.len() < self.frames.len() {
            let f = self.frames[self.ids.len()];
            match rec.intern_frame(id, f.code, f.lasti) {
                Some(next) => id = next,
                None => {
                    complete = false;
                    self.frames.truncate(self.ids.len());
                    break;
                }
            }
            self.ids.push(id);
        }
        if complete {
            for f in self.walked[..new].iter().rev() {
                match rec.intern_frame(id, f.code, f.lasti) {
                    Some(next) => id = next,
                    None => {
                        complete = false;
                        break;
                    }
                }
                self.frames.push(*f);
                self.ids.push(id);
            }
        }
        // The next walk trusts the chain's code objects to be alive: not so for those
        // interned without the GIL and not referenced yet.
        let referenced = rec.reference_pending_codes();
        self.commit_chain(complete && referenced);
        id
    }

    /// When the walk stopped at a repeated stack (`found`) that [`Self::intern_repeat`]
    /// could not take, sets `walked` and `outcome` to what a full walk would have found:
    /// the chain reused from its innermost entry, and inside it nothing new or the moved
    /// innermost frame.
    #[cold]
    fn walked_from_repeat(&mut self) {
        let (same, innermost) = match std::mem::replace(&mut self.found, frames::Innermost::Changed)
        {
            frames::Innermost::Unchanged => match self.last_innermost {
                Some(last) => {
                    if self.chain.is_empty() {
                        // No chain to reuse (a frame with no caller): the walk is the
                        // whole stack, the same as before.
                        self.walked.extend(self.frames.iter().rev());
                    }
                    (self.frames.len(), last)
                }
                None => return,
            },
            frames::Innermost::Moved(frame, instr) => {
                // Judged from `last_innermost`, which nothing cleared since (as for
                // `Unchanged` above).
                let Some(mut innermost) = self.last_innermost else {
                    return;
                };
                innermost.moved_to(instr);
                self.walked.push(frame);
                let included = self.chain.last().map_or(0, |c| c.included as usize);
                (included, innermost)
            }
            frames::Innermost::Changed => return,
        };
        self.outcome = frames::Walk {
            same: Some(same),
            reused: self.chain.len().checked_sub(1),
            innermost: Some(innermost),
        };
    }

    /// Makes the physical chain describe `frames` after a walk was interned (or forgets
    /// it when it cannot be trusted: not every frame could be interned, or their code
    /// objects are not all referenced).
    fn commit_chain(&mut self, complete: bool) {
        match self.outcome.reused {
            Some(p) if complete => self.chain.truncate(p + 1),
            _ => self.chain.clear(),
        }
        self.last_innermost = None;
        if !complete {
            return;
        }
        let mut count = self.chain.last().map_or(0, |c| c.included);
        for f in self.fresh.iter().rev() {
            // The walk reached `f` from its caller, the entry before it (or the stop).
            debug_assert_eq!(
                f.caller,
                self.chain.last().map_or(self.chain_stop, |c| c.addr)
            );
            count += f.included;
            self.chain.push(f.counted(count));
        }
        debug_assert!(count as usize <= self.frames.len());
        // `frames` now holds the whole stack; the chain describes the innermost frame's
        // callers when it ends at that frame's caller.
        // (An empty chain describes the callers of a frame whose caller is the stop.)
        let stop = self.chain_stop;
        self.last_innermost = self
            .outcome
            .innermost
            .filter(|f| self.chain.last().map_or(stop, |c| c.addr) == f.caller);
    }

    fn last_id(&self, rec: &Recorder) -> StackId {
        if self.generation == rec.generation {
            self.ids.last().copied().unwrap_or(EMPTY_STACK)
        } else {
            EMPTY_STACK
        }
    }
}

/// A capture in progress: the stack was walked (without the lock) and is interned once
/// the recorder is locked.
pub(crate) struct Walked<'t> {
    thread: Option<&'t HookThread>,
    walked: bool,
    /// C frames continue between Python frames: the walk holds every activation's frames.
    interleaved: bool,
}

/// Walks the calling thread's stack into `thread`'s cache (the calling thread's own
/// state). `tstate` must be the calling thread's state with the GIL held, or the calling
/// thread's own state while it runs C code without the GIL (native hooks: its frames
/// cannot change meanwhile), or null (then the thread's last captured stack is used).
#[inline]
pub(crate) fn walk(thread: Option<&HookThread>, tstate: *mut ffi::PyThreadState) -> Walked<'_> {
    if native_stacks::enabled() {
        if let Some(Ok(mut cap)) = thread.map(|t| t.capture.try_borrow_mut()) {
            let cap = &mut *cap;
            // SAFETY: as for `frames::walk` below.
            let evals = unsafe { frames::count_activations(tstate) };
            let (kept, cuts) =
                native_stacks::capture_segments(&mut cap.native, evals, &mut cap.cut);
            cap.native_len = kept;
            cap.cuts = cuts;
            // C frames beyond the innermost eval loop: C code between Python frames.
            if cuts >= 2 && kept > usize::from(cap.cut[0]) {
                cap.walked.clear();
                cap.ends.clear();
                // SAFETY: as for `frames::walk` below.
                unsafe { frames::walk_activations(tstate, &mut cap.walked, &mut cap.ends) };
                return Walked {
                    thread,
                    walked: true,
                    interleaved: true,
                };
            }
        }
    }
    let walked = match thread {
        Some(t) if !tstate.is_null() => match t.capture.try_borrow_mut() {
            Ok(mut cap) => {
                let cap = &mut *cap;
                cap.walked.clear();
                cap.fresh.clear();
                if cap.generation != GENERATION.load(Ordering::Acquire) {
                    // The recorder let go of the code objects the chain's frames ran: an
                    // equal instruction pointer no longer proves the same code object
                    // (a new one may lie where a freed one was).
                    cap.chain.clear();
                    cap.last_innermost = None;
                }
                cap.found = frames::Innermost::Changed;
                let stop = cap.take_stop(stack_floor::honoured);
                if let Some(last) = cap.last_innermost {
                    // SAFETY: as for `frames::walk` below; `last` was read by this
                    // thread's last complete walk, whose code objects are referenced in
                    // the current generation (checked just above) like the chain's, with
                    // the same stop (`take_stop`).
                    let found = unsafe { frames::innermost_state(tstate, &last, &cap.chain, stop) };
                    if !matches!(found, frames::Innermost::Changed) {
                        // Interned by `intern_repeat`, or, should the ids turn out stale,
                        // as walked (`walked_from_repeat`).
                        cap.found = found;
                        return Walked {
                            thread,
                            walked: true,
                            interleaved: false,
                        };
                    }
                }
                // SAFETY: the caller passes this thread's own thread state, with the GIL or
                // from C code that released it (its frames are frozen until it returns);
                // the chain comes from this thread's earlier walks, committed only while
                // the recorder referenced all its code objects, in the generation still
                // current (codes are released only after the generation moved on, and
                // the GIL orders that release before this walk).
                cap.outcome = unsafe {
                    frames::walk(
                        tstate,
                        &mut cap.walked,
                        &cap.frames,
                        &cap.chain,
                        &mut cap.fresh,
                        stop,
                    )
                };
                true
            }
            Err(_) => false,
        },
        _ => false,
    };
    Walked {
        thread,
        walked,
        interleaved: false,
    }
}

impl Walked<'_> {
    /// The stack id for the walked stack, interned in `rec` (the recorder lock is held).
    #[inline]
    pub(crate) fn intern(self, rec: &mut Recorder) -> StackId {
        let Some(t) = self.thread else {
            return EMPTY_STACK;
        };
        match t.capture.try_borrow_mut() {
            Ok(mut cap) if self.interleaved => cap.intern_interleaved(rec),
            Ok(mut cap) => {
                let python = if self.walked {
                    cap.intern_walked(rec)
                } else {
                    cap.last_id(rec)
                };
                if cap.native_len == 0 {
                    python
                } else {
                    cap.intern_native(rec, python)
                }
            }
            Err(_) => EMPTY_STACK,
        }
    }
}
