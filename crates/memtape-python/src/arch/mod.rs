//! What differs between processor architectures, behind one seam: a module per
//! architecture (`x86_64`, `aarch64`, both Linux), each giving the same names, so that
//! the rest of the crate is written once. No other module of the crate names an
//! architecture, a register or an instruction.
//!
//! The interface, which a new target implements (docs/macos.md says what macOS would
//! need):
//! - [`thread_pointer`]: the calling thread's thread pointer, one register read (the
//!   thread's name for the hooks, and the base of static TLS).
//! - [`prefetch_read`], [`prefetch_write`]: cache hints (or nothing).
//! - [`R_GLOB_DAT`], [`R_JUMP_SLOT`]: the ELF relocation types of the GOT slots the
//!   native-allocation patcher rewrites.
//! - [`unwind_registers`]: the calling function's instruction address and framehop's
//!   register set there, where native stacks are unwound from.
//! - [`SIGNED_RETURN_ADDRESSES`]: whether code may sign its return addresses (pointer
//!   authentication), so that its `.eh_frame` holds opcodes framehop cannot parse and
//!   the unwinder reads a copy without them (`native/unwind/pointer_auth_cfi.rs`).
//! - [`cycle_counter`], [`cycle_counter_keeps_time`]: a per-CPU counter the event clock
//!   may tick with, where the kernel keeps time with it.
//! - [`getter_code`]: decoding CPython's current-thread-state getter into the word it
//!   loads ([`getter_code::STATIC_TLS`]: where static TLS lies from the thread pointer),
//!   or `None` where the shapes are not known (the hooks then call the getter).
//! - [`dlopen_trampolines!`]: the `dlopen`/`dlmopen` entries of the native hooks, which
//!   hand their caller's return address on to the hook as one more argument (a macro,
//!   expanded where the hooks are).

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod x86_64;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub(crate) use x86_64::{
    cycle_counter, cycle_counter_keeps_time, dlopen_entry::dlopen_trampolines, getter_code,
    prefetch_read, prefetch_write, thread_pointer, unwind_registers, R_GLOB_DAT, R_JUMP_SLOT,
    SIGNED_RETURN_ADDRESSES,
};

#[cfg(all(target_arch = "aarch64", target_os = "linux"))]
mod aarch64;
#[cfg(all(target_arch = "aarch64", target_os = "linux"))]
pub(crate) use aarch64::{
    cycle_counter, cycle_counter_keeps_time, dlopen_entry::dlopen_trampolines, getter_code,
    prefetch_read, prefetch_write, thread_pointer, unwind_registers, R_GLOB_DAT, R_JUMP_SLOT,
    SIGNED_RETURN_ADDRESSES,
};

// aarch64's getter decoding is plain word reading: its tests run on every host.
#[cfg(all(test, not(target_arch = "aarch64")))]
#[path = "aarch64/getter_code.rs"]
#[allow(dead_code)]
mod aarch64_getter_code;

#[cfg(not(all(
    any(target_arch = "x86_64", target_arch = "aarch64"),
    target_os = "linux"
)))]
compile_error!(
    "memtape's native side is written for x86-64 and aarch64 Linux: a new target needs a \
     module of its own in crates/memtape-python/src/arch (see docs/macos.md)"
);
