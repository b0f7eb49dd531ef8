//! The functions memtape hooks, by name and index, and the real libc function behind
//! each: what the hooks ([`super::alloc_hooks`], [`super::dlopen_hook`]) call and what
//! patching ([`super::patch_control`]) writes into the slots.

use std::ffi::CStr;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The hooked functions, by index into [`NAMES`].
pub(crate) mod f {
    pub(crate) const MALLOC: usize = 0;
    pub(crate) const CALLOC: usize = 1;
    pub(crate) const REALLOC: usize = 2;
    pub(crate) const REALLOCARRAY: usize = 3;
    pub(crate) const FREE: usize = 4;
    pub(crate) const POSIX_MEMALIGN: usize = 5;
    pub(crate) const ALIGNED_ALLOC: usize = 6;
    pub(crate) const MEMALIGN: usize = 7;
    pub(crate) const VALLOC: usize = 8;
    pub(crate) const PVALLOC: usize = 9;
    pub(crate) const MMAP: usize = 10;
    pub(crate) const MMAP64: usize = 11;
    pub(crate) const MUNMAP: usize = 12;
    pub(crate) const MREMAP: usize = 13;
    pub(crate) const FREE_SIZED: usize = 14;
    pub(crate) const FREE_ALIGNED_SIZED: usize = 15;
    pub(crate) const DLOPEN: usize = 16;
    pub(crate) const DLMOPEN: usize = 17;
    pub(crate) const COUNT: usize = 18;
}

/// The symbol names, in [`f`]'s order.
pub(crate) const NAMES: [&CStr; f::COUNT] = [
    c"malloc",
    c"calloc",
    c"realloc",
    c"reallocarray",
    c"free",
    c"posix_memalign",
    c"aligned_alloc",
    c"memalign",
    c"valloc",
    c"pvalloc",
    c"mmap",
    c"mmap64",
    c"munmap",
    c"mremap",
    c"free_sized",
    c"free_aligned_sized",
    c"dlopen",
    c"dlmopen",
];

/// The real libc functions (0 where this libc has none), resolved before any slot is
/// patched and never changed afterwards.
pub(crate) static REAL: [AtomicUsize; f::COUNT] = [const { AtomicUsize::new(0) }; f::COUNT];

/// The real function `i` as a function pointer of type `F`.
///
/// # Safety
/// `F` must be the C signature of function `i`, and a hook for `i` must only be reachable
/// once `REAL[i]` is set (slots are patched only for resolved functions).
#[inline(always)]
pub(crate) unsafe fn real<F: Copy>(i: usize) -> F {
    let addr = REAL[i].load(Ordering::Relaxed);
    debug_assert!(addr != 0);
    // SAFETY: guaranteed by the caller: `addr` is the non-null address of a function of
    // type `F`, and fn pointers are pointer-sized.
    unsafe { std::mem::transmute_copy::<usize, F>(&addr) }
}
