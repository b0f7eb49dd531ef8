//! Turning the calling thread's Python stack into a stack id, incrementally.
//!
//! Each thread keeps the frames of its previous capture (outermost first) with their ids.
//! A new capture walks the frames (no lock), finds how many outer frames are unchanged,
//! and interns only the changed inner part, usually one or two frames.

use memtape_core::{StackId, EMPTY_STACK};
use pyo3::ffi;

use crate::frames::{self, RawFrame};
use crate::hook_mode::HookThread;
use crate::recorder::Recorder;

/// One thread's capture cache (lives in the thread's [`HookThread`]).
pub(crate) struct ThreadCapture {
    /// Scratch: the frames just walked, innermost first.
    walked: Vec<RawFrame>,
    /// The previous capture's frames, outermost first, and the stack id ending at each.
    frames: Vec<RawFrame>,
    ids: Vec<StackId>,
    /// The recorder generation the ids belong to.
    generation: u64,
    /// How many outermost frames of the walk equal `frames` (None: depth changed).
    unchanged: Option<usize>,
}

impl ThreadCapture {
    /// An empty cache.
    pub(crate) const EMPTY: ThreadCapture = ThreadCapture {
        walked: Vec::new(),
        frames: Vec::new(),
        ids: Vec::new(),
        generation: u64::MAX,
        unchanged: None,
    };

    fn intern_walked(&mut self, rec: &mut Recorder) -> StackId {
        if self.generation != rec.generation {
            self.frames.clear();
            self.ids.clear();
            self.unchanged = None;
            self.generation = rec.generation;
        }
        let n = self.walked.len();
        let same = match self.unchanged {
            Some(same) if self.ids.len() == self.frames.len() => same,
            _ => self
                .frames
                .iter()
                .zip(self.walked.iter().rev())
                .take_while(|(a, b)| a == b)
                .count(),
        };
        self.frames.truncate(same);
        self.ids.truncate(same);
        let mut id = self.ids.last().copied().unwrap_or(EMPTY_STACK);
        for f in self.walked[..n - same].iter().rev() {
            match rec.intern_frame(id, f.code, f.lasti) {
                Some(next) => id = next,
                None => break,
            }
            self.frames.push(*f);
            self.ids.push(id);
        }
        id
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
}

/// Walks the calling thread's stack into `thread`'s cache (the calling thread's own
/// state). `tstate` must be the calling thread's state with the GIL held, or the calling
/// thread's own state while it runs C code without the GIL (native hooks: its frames
/// cannot change meanwhile), or null (then the thread's last captured stack is used).
#[inline]
pub(crate) fn walk(thread: Option<&HookThread>, tstate: *mut ffi::PyThreadState) -> Walked<'_> {
    let walked = match thread {
        Some(t) if !tstate.is_null() => match t.capture.try_borrow_mut() {
            Ok(mut cap) => {
                let cap = &mut *cap;
                cap.walked.clear();
                // SAFETY: the caller passes this thread's own thread state, with the GIL or
                // from C code that released it (its frames are frozen until it returns).
                cap.unchanged = unsafe { frames::walk(tstate, &mut cap.walked, &cap.frames) };
                true
            }
            Err(_) => false,
        },
        _ => false,
    };
    Walked { thread, walked }
}

impl Walked<'_> {
    /// The stack id for the walked stack, interned in `rec` (the recorder lock is held).
    #[inline]
    pub(crate) fn intern(self, rec: &mut Recorder) -> StackId {
        let Some(t) = self.thread else {
            return EMPTY_STACK;
        };
        match t.capture.try_borrow_mut() {
            Ok(mut cap) if self.walked => cap.intern_walked(rec),
            Ok(cap) => cap.last_id(rec),
            Err(_) => EMPTY_STACK,
        }
    }
}
