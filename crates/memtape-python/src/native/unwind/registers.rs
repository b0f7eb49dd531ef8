//! The calling function's instruction, stack and frame pointers, where native stacks are
//! unwound from (x86-64).

#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) fn registers() -> (u64, u64, u64) {
    let (pc, sp, bp): (u64, u64, u64);
    // SAFETY: reads the instruction, stack and frame pointers; touches no memory.
    unsafe {
        std::arch::asm!(
            "lea {pc}, [rip]",
            "mov {sp}, rsp",
            "mov {bp}, rbp",
            pc = out(reg) pc,
            sp = out(reg) sp,
            bp = out(reg) bp,
            options(nomem, nostack, preserves_flags),
        );
    }
    (pc, sp, bp)
}
