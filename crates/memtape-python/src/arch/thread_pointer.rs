//! The calling thread's thread pointer: where the C library keeps the thread's control
//! block, and so a name for the thread that costs one register read.

/// The calling thread's thread pointer: non-zero, and unique among the live threads (one
/// register read on x86-64 and aarch64 Linux; `pthread_self` elsewhere).
#[inline(always)]
pub(crate) fn thread_pointer() -> usize {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    {
        let token: usize;
        // SAFETY: on x86-64 Linux the C library keeps every thread's control block at
        // %fs:0, and its first word is the block's own address (the TCB self pointer):
        // a plain load with no side effect, valid in every thread.
        unsafe {
            std::arch::asm!(
                "mov {}, fs:0",
                out(reg) token,
                options(nostack, readonly, preserves_flags, pure)
            );
        }
        token
    }
    #[cfg(all(target_arch = "aarch64", target_os = "linux"))]
    {
        let token: usize;
        // SAFETY: reads the thread pointer register, set by the C library for every
        // thread; no side effect.
        unsafe {
            std::arch::asm!(
                "mrs {}, tpidr_el0",
                out(reg) token,
                options(nostack, nomem, preserves_flags, pure)
            );
        }
        token
    }
    #[cfg(not(all(
        any(target_arch = "x86_64", target_arch = "aarch64"),
        target_os = "linux"
    )))]
    {
        // SAFETY: pthread_self has no preconditions.
        unsafe { libc::pthread_self() as usize }
    }
}
