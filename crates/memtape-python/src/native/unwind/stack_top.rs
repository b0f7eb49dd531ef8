//! The top of the calling thread's stack, the bound of the unwinder's reads, found
//! without taking a lock.
//!
//! `pthread_getattr_np` takes the thread's own lock and then allocates (it grows a
//! cpuset with `realloc`): called from inside a native hook that such an allocation
//! reached, it waits for itself forever. CPython 3.14 calls it at the start of every
//! thread (`_Py_InitializeRecursionLimits`), so the first native stack of a new thread
//! would hang there. Instead:
//! - a thread made by `pthread_create` has its thread control block at the top of its
//!   stack block (glibc and musl, on x86-64 with the static TLS blocks below it, on
//!   aarch64 above it), so everything from the stack pointer up to the thread pointer is
//!   its own mapped stack;
//! - the main thread's frames all lie below `__libc_stack_end`, the stack pointer the
//!   process started with (the dynamic loader's, exported for this purpose).

use crate::thread::thread_id;

/// The top of the calling thread's stack, or 0 where it cannot be known.
pub(super) fn find() -> u64 {
    // SAFETY: getpid has no preconditions and cannot fail.
    let main = thread_id::current() == unsafe { libc::getpid() } as u32;
    if main {
        main_stack_end()
    } else {
        thread_id::thread_token() as u64
    }
}

/// `__libc_stack_end`'s value, 0 where the C library does not export it.
fn main_stack_end() -> u64 {
    // SAFETY: dlsym in the global scope with a NUL-terminated name.
    let at = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"__libc_stack_end".as_ptr()) };
    if at.is_null() {
        return 0;
    }
    // SAFETY: the exported variable, a pointer written once before `main` runs.
    unsafe { *at.cast::<*const libc::c_void>() as u64 }
}
