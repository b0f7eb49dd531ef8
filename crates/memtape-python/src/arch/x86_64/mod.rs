//! x86-64 Linux.

pub(crate) mod dlopen_entry;
pub(crate) mod getter_code;

use framehop::UnwindRegsNative;

/// `R_X86_64_GLOB_DAT`: a GOT entry holding a symbol's address.
pub(crate) const R_GLOB_DAT: u32 = 6;
/// `R_X86_64_JUMP_SLOT`: a PLT's GOT entry.
pub(crate) const R_JUMP_SLOT: u32 = 7;

/// x86-64 code signs no return address: its CFI is read as it is.
pub(crate) const SIGNED_RETURN_ADDRESSES: bool = false;

/// The calling thread's thread pointer: non-zero, and unique among the live threads.
#[inline(always)]
pub(crate) fn thread_pointer() -> usize {
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

/// Starts loading the cache line at `addr`, which will soon be read.
#[inline(always)]
pub(crate) fn prefetch_read(addr: *const u8) {
    // SAFETY: a prefetch is a hint: it never faults and changes no memory, whatever the
    // address.
    unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(addr.cast()) };
}

/// Starts loading the cache line at `addr`, which a store will soon need, for writing
/// (`prefetchw`): a line another core holds is taken from it now, not at the store. On
/// the older processors that lack the instruction its encoding is a no-op.
#[inline(always)]
pub(crate) fn prefetch_write(addr: *const u8) {
    // SAFETY: a prefetch is a hint: it never faults and changes no memory, whatever the
    // address; it touches no register but its operand's.
    unsafe {
        std::arch::asm!(
            "prefetchw byte ptr [{addr}]",
            addr = in(reg) addr,
            options(nostack, readonly, preserves_flags)
        );
    }
}

/// The calling function's instruction address, and framehop's registers there
/// (instruction, stack and frame pointers).
#[inline(always)]
pub(crate) fn unwind_registers() -> (u64, UnwindRegsNative) {
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
    (pc, UnwindRegsNative::new(pc, sp, bp))
}

/// The time-stamp counter.
#[inline(always)]
pub(crate) fn cycle_counter() -> u64 {
    // SAFETY: `rdtsc` has no preconditions; the event clock uses it only where
    // `cycle_counter_keeps_time` said so.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// Whether the time-stamp counter is invariant (CPUID) and the kernel keeps time with it
/// (so its counters agree across CPUs).
pub(crate) fn cycle_counter_keeps_time() -> bool {
    // Leaf 0x8000_0000 reports the highest extended leaf, checked before 0x8000_0007.
    // (`__cpuid` is a safe function on recent Rust, unsafe on the oldest we support.)
    #[allow(unused_unsafe)]
    // SAFETY: CPUID exists on every x86-64 CPU and has no preconditions.
    let invariant = unsafe {
        core::arch::x86_64::__cpuid(0x8000_0000).eax >= 0x8000_0007
            && core::arch::x86_64::__cpuid(0x8000_0007).edx & (1 << 8) != 0
    };
    invariant
        && std::fs::read_to_string(
            "/sys/devices/system/clocksource/clocksource0/current_clocksource",
        )
        .is_ok_and(|s| s.trim() == "tsc")
}
