//! The `dlopen`/`dlmopen` trampolines (x86-64): the caller's return address, on top of the stack at entry,
//! becomes one more argument, and the hook is jumped to (a tail call: the hook returns
//! straight to the caller).

/// Defines `memtape_dlopen_entry` and `memtape_dlmopen_entry`, which call
/// `$dlopen(file, flags, caller)` and `$dlmopen(lmid, file, flags, caller)` with their
/// caller's return address as `caller`, and `dlopen_entry()`/`dlmopen_entry()`, their
/// addresses. Used where the hooks are, so that this module names none of them.
macro_rules! dlopen_trampolines {
    ($dlopen:path, $dlmopen:path) => {
        std::arch::global_asm!(
            ".pushsection .text.memtape_dlopen_entry,\"ax\",@progbits",
            ".globl memtape_dlopen_entry",
            ".hidden memtape_dlopen_entry",
            ".globl memtape_dlmopen_entry",
            ".hidden memtape_dlmopen_entry",
            ".p2align 4",
            "memtape_dlopen_entry:",
            // dlopen(file, flags): the caller's return address becomes the third argument.
            "mov rdx, qword ptr [rsp]",
            "jmp {dlopen}",
            ".p2align 4",
            "memtape_dlmopen_entry:",
            // dlmopen(lmid, file, flags): the return address becomes the fourth argument.
            "mov rcx, qword ptr [rsp]",
            "jmp {dlmopen}",
            ".popsection",
            dlopen = sym $dlopen,
            dlmopen = sym $dlmopen,
        );

        extern "C" {
            fn memtape_dlopen_entry();
            fn memtape_dlmopen_entry();
        }

        /// The address GOT slots for `dlopen` are pointed at.
        pub(crate) fn dlopen_entry() -> usize {
            memtape_dlopen_entry as *const () as usize
        }

        /// The address GOT slots for `dlmopen` are pointed at.
        pub(crate) fn dlmopen_entry() -> usize {
            memtape_dlmopen_entry as *const () as usize
        }
    };
}

pub(crate) use dlopen_trampolines;
