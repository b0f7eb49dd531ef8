//! aarch64 (64-bit ARM) Linux.

pub(crate) mod dlopen_entry;
pub(crate) mod getter_code;

use framehop::aarch64::PtrAuthMask;
use framehop::UnwindRegsNative;

/// `R_AARCH64_GLOB_DAT`: a GOT entry holding a symbol's address.
pub(crate) const R_GLOB_DAT: u32 = 1025;
/// `R_AARCH64_JUMP_SLOT`: a PLT's GOT entry.
pub(crate) const R_JUMP_SLOT: u32 = 1026;

/// Code built with `-mbranch-protection` (distributions' arm64 builds) signs its return
/// addresses, and its CFI says where (`native/unwind/pointer_auth_cfi.rs`).
pub(crate) const SIGNED_RETURN_ADDRESSES: bool = true;

/// The calling thread's thread pointer: non-zero, and unique among the live threads.
#[inline(always)]
pub(crate) fn thread_pointer() -> usize {
    let token: usize;
    // SAFETY: reads the thread pointer register, set by the C library for every thread
    // (it points at the thread's control block); no side effect.
    unsafe {
        std::arch::asm!(
            "mrs {}, tpidr_el0",
            out(reg) token,
            options(nostack, nomem, preserves_flags, pure)
        );
    }
    token
}

/// Starts loading the cache line at `addr`, which will soon be read.
#[inline(always)]
pub(crate) fn prefetch_read(addr: *const u8) {
    // SAFETY: `prfm` is a hint: it never faults and changes no memory, whatever the
    // address.
    unsafe {
        std::arch::asm!("prfm pldl1keep, [{}]", in(reg) addr, options(nostack, readonly, preserves_flags));
    }
}

/// Starts loading the cache line at `addr`, which a store will soon need.
#[inline(always)]
pub(crate) fn prefetch_write(addr: *const u8) {
    // SAFETY: as `prefetch_read`: a hint that never faults.
    unsafe {
        std::arch::asm!("prfm pstl1keep, [{}]", in(reg) addr, options(nostack, readonly, preserves_flags));
    }
}

/// Linux's user addresses fit in 48 bits: return addresses signed with pointer
/// authentication keep their code in the bits above, which are stripped before a
/// return address is looked up.
const USER_ADDRESS_BITS: PtrAuthMask = PtrAuthMask(u64::MAX >> 16);

/// The calling function's instruction address, and framehop's registers there (link
/// register, stack and frame pointers).
#[inline(always)]
pub(crate) fn unwind_registers() -> (u64, UnwindRegsNative) {
    let (pc, sp, fp, lr): (u64, u64, u64, u64);
    // SAFETY: reads the program counter, stack pointer, frame pointer (x29) and link
    // register (x30); touches no memory.
    unsafe {
        std::arch::asm!(
            "adr {pc}, .",
            "mov {sp}, sp",
            "mov {fp}, x29",
            "mov {lr}, x30",
            pc = out(reg) pc,
            sp = out(reg) sp,
            fp = out(reg) fp,
            lr = out(reg) lr,
            options(nomem, nostack, preserves_flags),
        );
    }
    (
        pc,
        UnwindRegsNative::new_with_ptr_auth_mask(USER_ADDRESS_BITS, lr, sp, fp),
    )
}

/// The virtual counter of the generic timer.
#[inline(always)]
pub(crate) fn cycle_counter() -> u64 {
    let ticks: u64;
    // SAFETY: reads `cntvct_el0`, which Linux lets user space read; no side effect.
    unsafe {
        std::arch::asm!("mrs {}, cntvct_el0", out(reg) ticks, options(nostack, nomem, preserves_flags));
    }
    ticks
}

/// Whether the event clock may tick with [`cycle_counter`]: not yet on aarch64 (the
/// generic timer is synchronized across CPUs by the architecture, but no ARM kernel was
/// at hand to check the event clock's calibration against; the clock reads
/// `clock_gettime` instead).
pub(crate) fn cycle_counter_keeps_time() -> bool {
    false
}
