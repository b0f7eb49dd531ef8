//! Reading the current Python stack straight from CPython's interpreter frames.
//!
//! The public frame API (`PyEval_GetFrame`, `PyFrame_GetBack`) builds frame objects and so
//! allocates, which would re-enter our hooks; instead a [`FrameLayout`] says where the few
//! fields we need live and one walker reads them. 3.11 and 3.12 export no table of their
//! layout: their offsets were taken with `offsetof` against each version's
//! `internal/pycore_frame.h` (LP64 targets, see `research/stack_capture.md`). From 3.13
//! on, the layout is read once, at import, from the interpreter's own `_Py_DebugOffsets`
//! (`table_layout`). Either way [`init`] checks it against the stack `sys._getframe`
//! shows before any hook can use it.

#[cfg(Py_3_13)]
mod debug_offsets;
mod first_traceable;
mod frame_layout;
mod layout_check;
#[cfg(not(Py_3_12))]
mod py311;
#[cfg(all(Py_3_12, not(Py_3_13)))]
mod py312;
mod raw_frame;
#[cfg(Py_3_13)]
mod table_layout;

#[cfg(any(not(Py_3_11), Py_3_16, not(target_pointer_width = "64")))]
compile_error!("memtape supports CPython 3.11 to 3.15 on 64-bit platforms");

#[cfg(Py_GIL_DISABLED)]
compile_error!(
    "memtape does not support free-threaded CPython builds (3.13t, 3.14t, 3.15t) yet: \
     build it with the default (GIL) build of CPython 3.11 to 3.15"
);

use pyo3::ffi;
use pyo3::prelude::*;

pub(crate) use frame_layout::FrameLayout;
pub(crate) use raw_frame::RawFrame;

#[cfg(not(Py_3_12))]
use py311::LAYOUT as BUILT_IN;
#[cfg(all(Py_3_12, not(Py_3_13)))]
use py312::LAYOUT as BUILT_IN;

/// This version's layout, written in (3.11, 3.12): the walk's offsets are constants.
#[cfg(not(Py_3_13))]
#[inline(always)]
fn layout() -> Option<&'static FrameLayout> {
    Some(&BUILT_IN)
}

/// The layout read by [`init`] (3.13+).
#[cfg(Py_3_13)]
static READ: std::sync::OnceLock<FrameLayout> = std::sync::OnceLock::new();

/// This interpreter's layout, once [`init`] has read it (3.13+); nothing is walked before.
#[cfg(Py_3_13)]
#[inline(always)]
fn layout() -> Option<&'static FrameLayout> {
    READ.get()
}

/// The CPython version this build reads frames of, as `(major, minor)`.
#[cfg(not(Py_3_12))]
pub(crate) const BUILT_FOR: (u8, u8) = (3, 11);
#[cfg(all(Py_3_12, not(Py_3_13)))]
pub(crate) const BUILT_FOR: (u8, u8) = (3, 12);
#[cfg(Py_3_13)]
pub(crate) const BUILT_FOR: (u8, u8) = table_layout::BUILT_FOR;

/// Each field of a layout by name, with its offset (`None` where the version has none).
pub(crate) type LayoutFields = Vec<(&'static str, Option<usize>)>;

/// The layout in use, field by field (offsets in bytes), and where it came from: for
/// tests, which compare it with `offsetof`.
pub(crate) fn describe() -> Option<(&'static str, LayoutFields)> {
    let l = layout()?;
    let source = if cfg!(Py_3_13) {
        "_Py_DebugOffsets"
    } else {
        "built in"
    };
    Some((
        source,
        vec![
            ("tstate_cframe", l.tstate_cframe),
            ("current_frame", Some(l.current_frame)),
            ("frame_code", Some(l.frame_code)),
            ("frame_previous", Some(l.frame_previous)),
            ("frame_instr", Some(l.frame_instr)),
            ("frame_owner", Some(l.frame_owner)),
            ("frame_is_entry", l.frame_is_entry),
            ("code_adaptive", Some(l.code_adaptive)),
            ("code_firsttraceable", Some(l.code_firsttraceable)),
        ],
    ))
}

/// Makes this interpreter's layout ready for the walk and checks it: at import, with the
/// GIL held, before anything can be recorded. An error says why the frames of this
/// interpreter cannot be read, and the import fails with it.
pub(crate) fn init(py: Python<'_>) -> Result<(), String> {
    #[cfg(Py_3_13)]
    {
        if READ.get().is_none() {
            let read = table_layout::read(py)?;
            let _ = READ.set(read);
        }
    }
    #[cfg(not(Py_3_13))]
    {
        let l = &BUILT_IN;
        let probed = first_traceable::find(py, l.code_adaptive)
            .map_err(|e| format!("probing code objects failed: {e}"))?;
        if probed != Some(l.code_firsttraceable) {
            return Err(format!(
                "_co_firsttraceable is not at offset {} of code objects (probed: {probed:?})",
                l.code_firsttraceable
            ));
        }
    }
    let shown = layout_check::shown(py)?;
    // SAFETY: the GIL is held (proved by `py`), so this thread has a thread state.
    let tstate = unsafe { ffi::PyThreadState_Get() };
    let mut walked = Vec::new();
    // SAFETY: this thread's own thread state with the GIL held; no chain of earlier walks
    // is given, so no code object of one needs to be alive.
    unsafe { walk(tstate, &mut walked, &[], &[], &mut Vec::new(), 0) };
    layout_check::same_stack(&walked, &shown)
}

const FRAME_OWNED_BY_GENERATOR: u8 = 1;

/// # Safety
/// `base + offset` must be a readable, aligned `T` inside a live object.
#[inline(always)]
unsafe fn read<T: Copy>(base: *const u8, offset: usize) -> T {
    // SAFETY: guaranteed by the caller.
    unsafe { base.add(offset).cast::<T>().read() }
}

/// Callers' frames sit just below a frame on CPython's data stack: start loading those
/// cache lines now, so that following the `previous` chain overlaps its cache misses.
#[inline(always)]
fn prefetch_callers(frame: *const u8) {
    for back in [128usize, 256, 384, 512] {
        crate::arch::prefetch_read(frame.wrapping_sub(back));
    }
}

/// One physical frame of the chain outside the innermost checked frame, as last walked:
/// its address and the fields the walk read (its instruction pointer and its caller, which
/// is the address of the entry before it in a chain, 0 for the first). `included` counts, outermost first, the
/// frames of the walk up to and including this one that went into the stack (while a
/// walk is in progress: 1 if this frame did, else 0).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ChainFrame {
    pub(crate) addr: usize,
    instr: usize,
    pub(crate) caller: usize,
    pub(crate) included: u32,
}

impl ChainFrame {
    /// This frame with its running count of included frames.
    pub(crate) fn counted(self, included: u32) -> Self {
        Self { included, ..self }
    }
}

/// What [`walk`] found.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Walk {
    /// How many outermost frames are unchanged from `previous`, when known.
    pub(crate) same: Option<usize>,
    /// `Some(p)`: the frames from `chain[p]` outward were verified unchanged, so `out`
    /// holds only the frames inside them and `same` is `chain[p].included`.
    pub(crate) reused: Option<usize>,
    /// The thread's innermost physical frame, when it is the innermost frame of the stack
    /// (included because its instruction pointer is past its code's first traceable
    /// instruction): what [`innermost_unchanged`] compares the next time.
    pub(crate) innermost: Option<InnermostFrame>,
}

/// The innermost physical frame of a walk, as read: its address, instruction pointer and
/// caller, its code object and the first instruction address at which a frame of that
/// code is complete (past its first traceable instruction).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct InnermostFrame {
    pub(crate) addr: usize,
    instr: usize,
    pub(crate) caller: usize,
    code: usize,
    complete_from: usize,
}

impl InnermostFrame {
    /// This frame at instruction pointer `instr` ([`Innermost::Moved`]'s).
    #[inline(always)]
    pub(crate) fn moved_to(&mut self, instr: usize) {
        self.instr = instr;
    }
}

/// What [`innermost_state`] found.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Innermost {
    /// The stack of the last walk, exactly.
    Unchanged,
    /// The last walk's stack but for its innermost frame, which is the same frame (same
    /// address, caller and code object, callers unchanged) at another instruction: that
    /// frame as it is now, and its instruction pointer now (of the last walk's
    /// [`InnermostFrame`], the one field that differs).
    Moved(RawFrame, usize),
    /// Something else: walk.
    Changed,
}

/// How many physical frames past the innermost one may be walked while still looking for
/// the point where the chain of the last walk begins.
const MATCH_WINDOW: usize = 8;

/// The index in `chain` (outermost first) of the frame at `addr`, if it is there: the
/// innermost entry first (a call made from the last walk's innermost frame), else a binary
/// search, since frames on the data stack lie at increasing addresses inward (a wrong
/// guess only costs the verification that follows).
#[inline]
fn find_in_chain(chain: &[ChainFrame], addr: usize) -> Option<usize> {
    let last = chain.len().checked_sub(1)?;
    if chain[last].addr == addr {
        return Some(last);
    }
    let i = chain.partition_point(|c| c.addr < addr);
    (i < chain.len() && chain[i].addr == addr).then_some(i)
}

/// Whether the frames from `chain[p]` (which is the live frame at that address) outward
/// still hold what the last walk read: the same instruction pointer and caller, down to
/// the end of the chain. Then the walk would read the same frames again: an instruction
/// pointer lies inside its code object (CPython 3.11+ keep the bytecode inline), so an
/// equal one means the same code object as long as the code objects of the last walk are
/// still alive, which the caller guarantees (no other object can overlap them).
/// Each address comes from `chain`, not from the load before it, so the loads overlap
/// instead of following one another.
///
/// # Safety
/// `chain[p].addr` must be a live frame on the calling thread's current chain (with the
/// GIL held, or frozen while the thread runs C code), and the code objects the chain's
/// frames ran when it was walked must still be alive (referenced by the recorder, or
/// immortal like the interpreter's shim code).
#[inline(always)]
unsafe fn chain_unchanged(l: &FrameLayout, chain: &[ChainFrame], p: usize) -> bool {
    let Some(chain) = chain.get(..=p) else {
        return false;
    };
    // Whether the frame at `addr` still has instruction pointer `instr` and caller `caller`.
    let same = |addr: usize, instr: usize, caller: usize| {
        let f = addr as *const u8;
        // SAFETY: `chain[p]` is live (caller); every other frame is read only after the
        // live frame inside it was seen to have it as its caller (an entry's `caller` is
        // the address of the entry before it): the checks below stop at the first change.
        let (now, previous): (usize, usize) =
            unsafe { (read(f, l.frame_instr), read(f, l.frame_previous)) };
        (now ^ instr) | (previous ^ caller) == 0
    };
    // Innermost first, four frames a step (one loop test for four frames: on a deep stack
    // this loop is most of a repeated capture's cost); `&&` stops at the first change. An
    // entry's caller is the address of the entry before it, so inside a step that address
    // serves twice (one load fewer per frame).
    let mut rest = chain;
    while let [outer @ .., d, c, b, a] = rest {
        debug_assert!(outer.last().map_or(true, |e| e.addr == d.caller));
        if !(same(a.addr, a.instr, b.addr)
            && same(b.addr, b.instr, c.addr)
            && same(c.addr, c.instr, d.addr)
            && same(d.addr, d.instr, d.caller))
        {
            return false;
        }
        rest = outer;
    }
    rest.iter().rev().all(|c| same(c.addr, c.instr, c.caller))
}

/// How `tstate`'s stack relates to the one walked last, judged from its innermost
/// physical frame and `chain` (whose innermost entry is that frame's caller, see
/// [`chain_unchanged`]; empty when that frame has no caller).
///
/// The same frame address, caller and instruction pointer, with the chain unchanged, is
/// the same stack: an equal instruction pointer means the same code object at the same
/// offset while the last walk's code objects are alive, and the same offset past the first
/// traceable instruction means the frame is complete again, whoever owns it.
///
/// The same address, caller and code object at another instruction, still past the first
/// traceable one, with the chain unchanged, is the same stack but for that frame's offset:
/// whether it is the same activation or a new one its caller made from the same call
/// site, a walk would read the same callers and this frame as it is now.
///
/// `stop` is the stop the last walk was made with (see [`walk`]): the chain's outermost
/// entry has it as its caller.
///
/// # Safety
/// As for [`walk`] (`tstate` may be null: [`Innermost::Changed`]), with `chain` and the
/// code objects of `last` under the same guarantee as the chain's.
#[inline(always)]
pub(crate) unsafe fn innermost_state(
    tstate: *mut ffi::PyThreadState,
    last: &InnermostFrame,
    chain: &[ChainFrame],
    stop: usize,
) -> Innermost {
    let Some(l) = layout().filter(|_| !tstate.is_null()) else {
        return Innermost::Changed;
    };
    // SAFETY: the caller's live thread state of this thread, whose frames cannot change
    // while we read them (see `walk`); `frame` is its current innermost frame, and
    // `chain[p]` is its live caller once `caller` is seen to equal it
    // (`chain_unchanged`'s precondition).
    unsafe {
        let frame = innermost_frame(l, tstate);
        if frame as usize != last.addr {
            return Innermost::Changed;
        }
        let (instr, caller): (usize, usize) =
            (read(frame, l.frame_instr), read(frame, l.frame_previous));
        if caller != last.caller {
            return Innermost::Changed;
        }
        // The frames behind it: none when its caller is where walks stop (no caller, as
        // 3.11's module frame, whose `previous` is null, or the stack's floor), else the
        // chain, which ends at its caller.
        let behind_unchanged = match chain.len().checked_sub(1) {
            Some(p) => chain[p].addr == caller && chain_unchanged(l, chain, p),
            None => caller == stop,
        };
        if !behind_unchanged {
            return Innermost::Changed;
        }
        if instr == last.instr {
            return Innermost::Unchanged;
        }
        let code = l.untag(read(frame, l.frame_code));
        if code != last.code || instr < last.complete_from {
            return Innermost::Changed;
        }
        let raw = RawFrame {
            code,
            lasti: ((instr - (code + l.code_adaptive)) / 2) as i32,
        };
        Innermost::Moved(raw, instr)
    }
}

/// The innermost frame of `tstate`'s chain, null when it has none.
///
/// # Safety
/// As for [`walk`], with `tstate` not null.
#[inline(always)]
unsafe fn innermost_frame(l: &FrameLayout, tstate: *mut ffi::PyThreadState) -> *const u8 {
    let ts = tstate.cast::<u8>().cast_const();
    // SAFETY: the caller's live thread state; the offsets are this version's.
    unsafe {
        let holder: *const u8 = match l.tstate_cframe {
            Some(off) => read(ts, off),
            None => ts,
        };
        if holder.is_null() {
            return std::ptr::null();
        }
        read(holder, l.current_frame)
    }
}

/// The address of the caller of `tstate`'s innermost frame: where a walk made while that
/// frame is suspended in a call stops to keep that frame and the frames it called
/// (see [`walk`]'s `stop`). 0 when there is no such frame or it has no caller.
///
/// # Safety
/// As for [`walk`].
pub(crate) unsafe fn innermost_caller(tstate: *mut ffi::PyThreadState) -> usize {
    let Some(l) = layout().filter(|_| !tstate.is_null()) else {
        return 0;
    };
    // SAFETY: as in `walk`: a live thread state of this thread and its frame chain.
    unsafe {
        let frame = innermost_frame(l, tstate);
        if frame.is_null() {
            return 0;
        }
        read(frame, l.frame_previous)
    }
}

/// Whether `frame` (owned `owner`, whose caller is `previous`) ends an interpreter
/// activation going outward: 3.12+'s entry frame (owned by the interpreter; not 3.15's
/// base frame, which has no caller), or 3.11's entry frame (after that frame itself).
///
/// # Safety
/// `frame` must be a live frame of the calling thread's chain.
#[inline(always)]
unsafe fn ends_activation(
    l: &FrameLayout,
    frame: *const u8,
    owner: u8,
    previous: *const u8,
) -> bool {
    match l.frame_is_entry {
        // SAFETY: the caller's live frame; `is_entry` is a bool inside it.
        Some(off) => unsafe { read::<u8>(frame, off) != 0 },
        None => l.interpreter_owned(owner) && !(l.base_frame && previous.is_null()),
    }
}

/// How many interpreter activations (`_PyEval_EvalFrameDefault` calls, one per entry
/// from C into Python) `tstate`'s Python stack spans. For native stacks only.
///
/// # Safety
/// As for [`walk`].
pub(crate) unsafe fn count_activations(tstate: *mut ffi::PyThreadState) -> usize {
    let Some(l) = layout().filter(|_| !tstate.is_null()) else {
        return 0;
    };
    let mut count = 0;
    // SAFETY: as in `walk`: a live thread state of this thread and its frame chain.
    unsafe {
        let mut frame = innermost_frame(l, tstate);
        while !frame.is_null() {
            let previous: *const u8 = read(frame, l.frame_previous);
            count += usize::from(ends_activation(
                l,
                frame,
                read(frame, l.frame_owner),
                previous,
            ));
            frame = previous;
        }
    }
    count
}

/// Appends the complete frames of `tstate`'s Python stack to `out`, innermost first, as
/// [`walk`] does (without its reuse of the last walk), and to `ends`, for each
/// interpreter activation from the innermost, how many frames of `out` lie inside its end.
/// For native stacks whose C frames continue between Python frames.
///
/// # Safety
/// As for [`walk`].
pub(crate) unsafe fn walk_activations(
    tstate: *mut ffi::PyThreadState,
    out: &mut Vec<RawFrame>,
    ends: &mut Vec<usize>,
) {
    let Some(l) = layout().filter(|_| !tstate.is_null()) else {
        return;
    };
    // SAFETY: as in `walk`.
    unsafe {
        let mut frame = innermost_frame(l, tstate);
        #[allow(unused_unsafe)]
        let code_type = std::ptr::addr_of_mut!(ffi::PyCode_Type).cast::<ffi::PyTypeObject>();
        let mut innermost = true;
        while !frame.is_null() {
            let code = l.untag(read(frame, l.frame_code)) as *const u8;
            let owner: u8 = read(frame, l.frame_owner);
            let next: *const u8 = read(frame, l.frame_previous);
            let instr: *const u8 = read(frame, l.frame_instr);
            let ends_here = ends_activation(l, frame, owner, next);
            let mut include = !code.is_null() && !l.interpreter_owned(owner);
            if include && innermost {
                innermost = false;
                if l.check_code_type && (*code.cast::<ffi::PyObject>()).ob_type != code_type {
                    include = false;
                } else {
                    let start = code.add(l.code_adaptive);
                    let first_traceable: i32 = read(code, l.code_firsttraceable);
                    include = owner == FRAME_OWNED_BY_GENERATOR
                        || (instr as isize) >= (start as isize) + 2 * first_traceable as isize;
                }
            }
            if include {
                let start = code.add(l.code_adaptive);
                out.push(RawFrame {
                    code: code as usize,
                    lasti: ((instr as isize - start as isize) / 2) as i32,
                });
            }
            if ends_here {
                ends.push(out.len());
            }
            frame = next;
        }
    }
}

/// Appends the complete frames of `tstate`'s Python stack to `out`, innermost first,
/// up to the physical frame at address `stop` (left out with every frame outside it; 0:
/// the whole stack). A stop not on the chain is never met: the whole stack is walked.
///
/// `chain` is the physical chain of the last walk (outermost first, see [`ChainFrame`]);
/// when the walk reaches one of its frames and everything from there outward is unchanged,
/// it stops there ([`Walk::reused`]). The physical frames walked past the innermost one
/// are appended to `fresh`, innermost first.
///
/// Otherwise [`Walk::same`] tells how many outermost frames are unchanged from `previous`
/// (a stack stored outermost first), when the depth is the same; `None` when the depth
/// changed (the caller then compares itself). Comparing while walking costs loads that
/// overlap the walk's own pointer chase.
///
/// # Safety
/// `tstate` must be the thread state of the calling thread and the calling thread must
/// hold the GIL (so the frame chain is neither running nor being torn down), or `tstate`
/// must be null (nothing is appended). `chain` must come from walks of this thread, and
/// the code objects its frames ran then must still be alive (see [`chain_unchanged`]).
#[inline]
pub(crate) unsafe fn walk(
    tstate: *mut ffi::PyThreadState,
    out: &mut Vec<RawFrame>,
    previous: &[RawFrame],
    chain: &[ChainFrame],
    fresh: &mut Vec<ChainFrame>,
    stop: usize,
) -> Walk {
    let none = Walk {
        same: None,
        reused: None,
        innermost: None,
    };
    let Some(l) = layout().filter(|_| !tstate.is_null()) else {
        return none;
    };
    // Frame j from the innermost is previous[m - 1 - j] when the depth is unchanged.
    let mut expect = previous.iter().rev();
    // Frames walked up to and including the outermost mismatch so far.
    let mut changed = 0usize;
    // Physical frames walked past the innermost one; the chain is searched in the first
    // few only, and verified at most once.
    let mut past = 0usize;
    let mut tried = false;
    let mut first: Option<InnermostFrame> = None;
    // SAFETY: the caller guarantees a live thread state owned by this thread; the offsets
    // are those of this CPython version's structs, and every pointer read is checked for
    // null before it is followed.
    unsafe {
        let mut frame = innermost_frame(l, tstate);
        #[allow(unused_unsafe)]
        let code_type = std::ptr::addr_of_mut!(ffi::PyCode_Type).cast::<ffi::PyTypeObject>();
        // Only the innermost Python frame can be incomplete (still setting up, before its
        // first traceable instruction): a frame that called another one has run. So the
        // code object itself, a likely cache miss, is read for that frame only.
        let mut innermost = true;
        let physical_innermost = frame as usize;
        // With no stop (0) the second test is the first one again.
        while !frame.is_null() && frame as usize != stop {
            if !innermost && !tried && past < MATCH_WINDOW {
                if let Some(p) = find_in_chain(chain, frame as usize) {
                    tried = true;
                    // `frame` is live: it was reached from the thread's current frame;
                    // the chain's code objects are alive (caller).
                    if chain_unchanged(l, chain, p) {
                        return Walk {
                            same: Some(chain[p].included as usize),
                            reused: Some(p),
                            innermost: first,
                        };
                    }
                }
            }
            prefetch_callers(frame);
            let code = l.untag(read(frame, l.frame_code)) as *const u8;
            let owner: u8 = read(frame, l.frame_owner);
            let next: *const u8 = read(frame, l.frame_previous);
            let instr: *const u8 = read(frame, l.frame_instr);
            let outer = !innermost;
            if outer {
                past += 1;
                fresh.push(ChainFrame {
                    addr: frame as usize,
                    instr: instr as usize,
                    caller: next as usize,
                    included: 0,
                });
            }
            if code.is_null() || l.interpreter_owned(owner) {
                frame = next;
                continue;
            }
            let start = code.add(l.code_adaptive);
            if innermost {
                innermost = false;
                if l.check_code_type && (*code.cast::<ffi::PyObject>()).ob_type != code_type {
                    frame = next;
                    continue;
                }
                let first_traceable: i32 = read(code, l.code_firsttraceable);
                let incomplete = owner != FRAME_OWNED_BY_GENERATOR
                    && (instr as isize) < (start as isize) + 2 * first_traceable as isize;
                if incomplete {
                    frame = next;
                    continue;
                }
                let complete_by_offset =
                    (instr as isize) >= (start as isize) + 2 * first_traceable as isize;
                if frame as usize == physical_innermost && complete_by_offset {
                    first = Some(InnermostFrame {
                        addr: frame as usize,
                        instr: instr as usize,
                        caller: next as usize,
                        code: code as usize,
                        complete_from: start as usize + 2 * first_traceable as usize,
                    });
                }
            }
            if outer {
                if let Some(last) = fresh.last_mut() {
                    last.included = 1;
                }
            }
            let lasti = ((instr as isize - start as isize) / 2) as i32;
            let raw = RawFrame {
                code: code as usize,
                lasti,
            };
            if expect.next() != Some(&raw) {
                changed = out.len() + 1;
            }
            out.push(raw);
            frame = next;
        }
    }
    Walk {
        same: (expect.next().is_none() && out.len() == previous.len()).then(|| out.len() - changed),
        reused: None,
        innermost: first,
    }
}

/// An address inside the C stack frame of the innermost interpreter activation
/// (`_PyEval_EvalFrameDefault` call) of `tstate`: the `_PyCFrame` it declares (3.11, 3.12:
/// `tstate->cframe`) or its entry frame (3.13+: the innermost frame the interpreter owns,
/// other than 3.15's base frame). What tells that activation's frame apart in a native
/// stack whose symbols do not (a compiler that splits the function in two).
///
/// # Safety
/// As for [`walk`].
pub(crate) unsafe fn innermost_activation_marker(tstate: *mut ffi::PyThreadState) -> Option<usize> {
    let l = layout().filter(|_| !tstate.is_null())?;
    let ts = tstate.cast::<u8>().cast_const();
    // SAFETY: as in `walk`: a live thread state of this thread and its frame chain.
    unsafe {
        if let Some(off) = l.tstate_cframe {
            let cframe: usize = read(ts, off);
            return (cframe != 0).then_some(cframe);
        }
        let mut frame = innermost_frame(l, tstate);
        while !frame.is_null() {
            let owner: u8 = read(frame, l.frame_owner);
            let previous: *const u8 = read(frame, l.frame_previous);
            if ends_activation(l, frame, owner, previous) {
                return Some(frame as usize);
            }
            frame = previous;
        }
    }
    None
}
