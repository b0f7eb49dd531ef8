//! Reading the current Python stack straight from CPython's interpreter frames.
//!
//! The public frame API (`PyEval_GetFrame`, `PyFrame_GetBack`) builds frame objects and so
//! allocates, which would re-enter our hooks; instead each supported version describes
//! where the few fields we need live ([`FrameLayout`]) and one walker reads them.
//! Offsets were taken with `offsetof` against each version's `internal/pycore_frame.h`
//! (LP64 targets), see `research/stack_capture.md`.

#[cfg(not(Py_3_12))]
mod py311;
#[cfg(all(Py_3_12, not(Py_3_13)))]
mod py312;
#[cfg(all(Py_3_13, not(Py_3_14)))]
mod py313;

#[cfg(not(Py_3_12))]
use py311::LAYOUT;
#[cfg(all(Py_3_12, not(Py_3_13)))]
use py312::LAYOUT;
#[cfg(all(Py_3_13, not(Py_3_14)))]
use py313::LAYOUT;

#[cfg(any(Py_3_14, not(target_pointer_width = "64")))]
compile_error!("memtape supports CPython 3.11, 3.12 and 3.13 on 64-bit platforms");

use pyo3::ffi;

/// The CPython version this build reads frames of, as `(major, minor)`.
pub(crate) const BUILT_FOR: (u8, u8) = LAYOUT.version;

/// Where one CPython version keeps what the walk reads.
pub(crate) struct FrameLayout {
    pub(crate) version: (u8, u8),
    /// `tstate->cframe` (3.11, 3.12) before `current_frame`, or none (3.13).
    pub(crate) tstate_cframe: Option<usize>,
    /// `current_frame` inside the cframe (3.11, 3.12) or the thread state (3.13).
    pub(crate) current_frame: usize,
    /// `_PyInterpreterFrame.f_code` / `f_executable`.
    pub(crate) frame_code: usize,
    /// `_PyInterpreterFrame.previous`.
    pub(crate) frame_previous: usize,
    /// `prev_instr` (3.11, 3.12) / `instr_ptr` (3.13).
    pub(crate) frame_instr: usize,
    /// `_PyInterpreterFrame.owner`.
    pub(crate) frame_owner: usize,
    /// `PyCodeObject.co_code_adaptive` (start of the bytecode).
    pub(crate) code_adaptive: usize,
    /// `PyCodeObject._co_firsttraceable`.
    pub(crate) code_firsttraceable: usize,
    /// `FRAME_OWNED_BY_CSTACK` (3.12+): C-stack shim frames to skip.
    pub(crate) owner_cstack: Option<u8>,
    /// 3.13's `f_executable` may hold something other than a code object.
    pub(crate) check_code_type: bool,
}

const FRAME_OWNED_BY_GENERATOR: u8 = 1;

/// One Python frame: the code object's address and the instruction offset (CPython's
/// `lasti`, in code units; `PyCode_Addr2Line(code, lasti * 2)` gives its line).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct RawFrame {
    pub(crate) code: usize,
    pub(crate) lasti: i32,
}

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
    #[cfg(target_arch = "x86_64")]
    for back in [128usize, 256, 384, 512] {
        let line = frame.wrapping_sub(back);
        // SAFETY: prefetching is a hint and never faults, whatever the address.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(line.cast())
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = frame;
}

/// Appends the complete frames of `tstate`'s Python stack to `out`, innermost first.
///
/// Returns how many outermost frames are unchanged from `previous` (a stack stored
/// outermost first), when the depth is the same; `None` when the depth changed (the caller
/// then compares itself). Comparing while walking costs loads that overlap the walk's own
/// pointer chase.
///
/// # Safety
/// `tstate` must be the thread state of the calling thread and the calling thread must
/// hold the GIL (so the frame chain is neither running nor being torn down), or `tstate`
/// must be null (nothing is appended).
#[inline]
pub(crate) unsafe fn walk(
    tstate: *mut ffi::PyThreadState,
    out: &mut Vec<RawFrame>,
    previous: &[RawFrame],
) -> Option<usize> {
    if tstate.is_null() {
        return None;
    }
    // Frame j from the innermost is previous[m - 1 - j] when the depth is unchanged.
    let mut expect = previous.iter().rev();
    // Frames walked up to and including the outermost mismatch so far.
    let mut changed = 0usize;
    let l = &LAYOUT;
    let ts = tstate.cast::<u8>().cast_const();
    // SAFETY: the caller guarantees a live thread state owned by this thread; the offsets
    // are those of this CPython version's structs, and every pointer read is checked for
    // null before it is followed.
    unsafe {
        let holder: *const u8 = match l.tstate_cframe {
            Some(off) => read(ts, off),
            None => ts,
        };
        if holder.is_null() {
            return None;
        }
        let mut frame: *const u8 = read(holder, l.current_frame);
        #[allow(unused_unsafe)]
        let code_type = std::ptr::addr_of_mut!(ffi::PyCode_Type).cast::<ffi::PyTypeObject>();
        // Only the innermost Python frame can be incomplete (still setting up, before its
        // first traceable instruction): a frame that called another one has run. So the
        // code object itself, a likely cache miss, is read for that frame only.
        let mut innermost = true;
        while !frame.is_null() {
            prefetch_callers(frame);
            let code: *const u8 = read(frame, l.frame_code);
            let owner: u8 = read(frame, l.frame_owner);
            let next: *const u8 = read(frame, l.frame_previous);
            if code.is_null() || l.owner_cstack == Some(owner) {
                frame = next;
                continue;
            }
            let start = code.add(l.code_adaptive);
            let instr: *const u8 = read(frame, l.frame_instr);
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
    (expect.next().is_none() && out.len() == previous.len()).then(|| out.len() - changed)
}
