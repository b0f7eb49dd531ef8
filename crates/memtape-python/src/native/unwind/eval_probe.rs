//! Where the interpreter's eval loop really is, when its symbol does not say.
//!
//! Native stacks are cut where a return address lies in `_PyEval_EvalFrameDefault`, the
//! function each interpreter activation runs. A compiler may split that function: GCC
//! with profile feedback (Debian's CPython 3.14 and 3.15) leaves a 1 KiB entry under the
//! exported symbol and moves the opcode handlers, 84 KiB of them, into a separate part
//! with no exported name. The calls into C code are made from that part, so its return
//! addresses are not inside the symbol's range and the cuts are missed.
//!
//! So when native stacks start (with the GIL, called from Python code), memtape unwinds
//! its own native stack once and finds the frame of the innermost interpreter activation
//! by what it holds: an address CPython keeps in that C frame (its `_PyCFrame` or its
//! entry frame, [`frames::innermost_activation_marker`]) lies between that frame's stack
//! pointer and its caller's. The function around that frame's return address (its
//! `.eh_frame` entry) is the eval loop's other part.

use framehop::{FrameAddress, UnwindRegsNative, Unwinder};
use gimli::{BaseAddresses, EhFrame, EhFrameHdr, LittleEndian, UnwindSection};

use super::loaded_modules::{loaded_modules, LoadedModule};
use super::module_sections::section_info;
use crate::arch::unwind_registers;
use crate::cpython::{frames, thread_state};

/// The most frames unwound looking for the activation.
const MAX_WALK: usize = 128;

/// The function of the innermost interpreter activation's native frame, unwound with
/// `unwinder` (and `cache`) over `[sp, top)` of this thread's stack, when it is not
/// `eval` (what the symbol says). Call with the GIL held, from a function that Python
/// code called.
#[inline(never)]
pub(super) fn learn<U>(
    unwinder: &U,
    cache: &mut U::Cache,
    eval: (u64, u64),
    top: u64,
) -> Option<(u64, u64)>
where
    U: Unwinder<UnwindRegs = UnwindRegsNative>,
{
    // Null where the thread holds no GIL (then nothing is learnt).
    let tstate = thread_state::attached_if_holding_gil();
    if tstate.is_null() {
        return None;
    }
    // SAFETY: this thread's live thread state, with the GIL held.
    let marker = unsafe { frames::innermost_activation_marker(tstate) }?;
    let pc = activation_pc(unwinder, cache, marker as u64, top)?;
    if eval.0 <= pc && pc < eval.1 {
        return None;
    }
    loaded_modules()
        .iter()
        .find(|m| m.contains(pc))
        .and_then(|m| function_of(m, pc))
}

/// The lookup address of the native frame whose stack holds `marker`.
fn activation_pc<U>(unwinder: &U, cache: &mut U::Cache, marker: u64, top: u64) -> Option<u64>
where
    U: Unwinder<UnwindRegs = UnwindRegsNative>,
{
    let (pc, mut regs) = unwind_registers();
    let sp = regs.sp();
    let mut read_stack = |addr: u64| -> Result<u64, ()> {
        if addr < sp || addr.saturating_add(8) > top || addr % 8 != 0 {
            return Err(());
        }
        // SAFETY: `[sp, top)` is this thread's own mapped stack, above the live frame.
        Ok(unsafe { std::ptr::read_volatile(addr as *const u64) })
    };
    let mut address = FrameAddress::InstructionPointer(pc);
    for _ in 0..MAX_WALK {
        let below = regs.sp();
        let caller = unwinder
            .unwind_frame(address, &mut regs, cache, &mut read_stack)
            .ok()??;
        // The frame's own stack runs from its stack pointer up to where its caller's
        // stack pointer was at the call.
        if below <= marker && marker < regs.sp() {
            return Some(address.address_for_lookup());
        }
        address = FrameAddress::from_return_address(caller)?;
    }
    None
}

/// The function around `avma` in `m`, from its `.eh_frame` entry.
fn function_of(m: &LoadedModule, avma: u64) -> Option<(u64, u64)> {
    let info = section_info(m);
    let (hdr, hdr_svma) = (info.eh_frame_hdr?, info.eh_frame_hdr_svma?.start);
    let (eh, eh_svma) = (info.eh_frame?, info.eh_frame_svma?.start);
    let mut bases = BaseAddresses::default()
        .set_eh_frame_hdr(hdr_svma)
        .set_eh_frame(eh_svma);
    if let Some(text) = info.text_svma {
        bases = bases.set_text(text.start);
    }
    let hdr = EhFrameHdr::new(hdr, LittleEndian).parse(&bases, 8).ok()?;
    let table = hdr.table()?;
    let eh_frame = EhFrame::new(eh, LittleEndian);
    let fde = table
        .fde_for_address(
            &eh_frame,
            &bases,
            avma.checked_sub(m.base)?,
            EhFrame::cie_from_offset,
        )
        .ok()?;
    let start = m.base + fde.initial_address();
    Some((start, start + fde.len()))
}
