//! The functions GOT slots are pointed at: each calls the real libc function and, when
//! the calling thread is in ordinary code, records what it did.
//!
//! Re-entrancy: a destructor-free thread-local flag (reading it never allocates or
//! registers anything) is set for the whole hook, real call included, so whatever the
//! hook itself reaches (the recorder's own work, a signal handler that allocates while
//! libc's allocator holds its lock) passes straight through. It is touched only once the
//! thread's thread-locals exist: a hook inside the thread's first touch of them (the
//! loader's `malloc` for their block, or their destructor's registration through
//! `calloc`) touches nothing and passes straight through (`thread::first_touch`). The
//! PEP 445 hooks and the NumPy handler mark their thread `InAllocHook` around the allocator they wrap, so the
//! `malloc`/`mmap` beneath a Python or NumPy block is not recorded a second time.

use std::cell::Cell;
use std::ffi::{c_int, c_void};
use std::sync::atomic::Ordering;

use libc::off_t;

use super::hooked_functions::{f, real};
use super::{dlopen_hook, native_record, ACTIVE};
use crate::thread::hook_mode::{self, HookMode, HookThread};
use crate::thread::thread_filter;

/// Our hook for each name.
pub(crate) fn hook_addresses() -> [usize; f::COUNT] {
    [
        malloc as *const () as usize,
        calloc as *const () as usize,
        realloc as *const () as usize,
        reallocarray as *const () as usize,
        free as *const () as usize,
        posix_memalign as *const () as usize,
        aligned_alloc as *const () as usize,
        memalign as *const () as usize,
        valloc as *const () as usize,
        pvalloc as *const () as usize,
        mmap as *const () as usize,
        mmap64 as *const () as usize,
        munmap as *const () as usize,
        mremap as *const () as usize,
        free_sized as *const () as usize,
        free_aligned_sized as *const () as usize,
        dlopen_hook::dlopen_entry(),
        dlopen_hook::dlmopen_entry(),
    ]
}

thread_local! {
    // No destructor: touching it never registers anything, so it is safe from inside any
    // hook once the thread's thread-locals exist.
    static IN_HOOK: Cell<bool> = const { Cell::new(false) };
}

/// Marks the calling thread as inside a native hook until dropped.
pub(crate) struct Inside(());

impl Drop for Inside {
    #[inline(always)]
    fn drop(&mut self) {
        IN_HOOK.set(false);
    }
}

/// Whether this call should be looked at: tracing is on and the thread is not already
/// inside one of our hooks. The thread's hook state comes with it (`None` while the
/// thread is torn down).
#[inline(always)]
pub(crate) fn enter() -> Option<(Inside, Option<&'static HookThread>)> {
    if !ACTIVE.load(Ordering::Relaxed) {
        return None;
    }
    // The thread's state first: inside the thread's first touch of memtape's
    // thread-locals (which may allocate through this very hook, see
    // `thread::first_touch`) no thread-local may be touched, `IN_HOOK` included.
    let thread = hook_mode::lookup().ok()?;
    if IN_HOOK.replace(true) {
        return None;
    }
    Some((Inside(()), thread))
}

/// Runs an allocation and records its block when the thread is in ordinary code.
#[inline(always)]
fn allocating(call: impl FnOnce() -> *mut c_void, size: usize) -> *mut c_void {
    resizing(std::ptr::null_mut(), size, call)
}

/// Records the end of `block` unless the thread is inside memtape's own allocation path.
/// Returns the thread's guard, to be held across the real `free`: a signal handler that
/// interrupts libc's `free` (which may hold its arena's lock) and allocates then passes
/// straight through instead of recording, which could wait for that lock.
#[inline(always)]
#[must_use]
fn freeing(block: *mut c_void) -> Option<Inside> {
    if block.is_null() {
        return None;
    }
    let (inside, t) = enter()?;
    match t.map(HookThread::mode) {
        Some(HookMode::InAllocHook | HookMode::Forking) => {}
        _ => native_record::free(block as u64),
    }
    Some(inside)
}

type MallocFn = unsafe extern "C" fn(usize) -> *mut c_void;
type CallocFn = unsafe extern "C" fn(usize, usize) -> *mut c_void;
type ReallocFn = unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void;
type ReallocArrayFn = unsafe extern "C" fn(*mut c_void, usize, usize) -> *mut c_void;
type FreeFn = unsafe extern "C" fn(*mut c_void);
type PosixMemalignFn = unsafe extern "C" fn(*mut *mut c_void, usize, usize) -> c_int;
type AlignedFn = unsafe extern "C" fn(usize, usize) -> *mut c_void;
type MmapFn = unsafe extern "C" fn(*mut c_void, usize, c_int, c_int, c_int, off_t) -> *mut c_void;
type MunmapFn = unsafe extern "C" fn(*mut c_void, usize) -> c_int;
type MremapFn = unsafe extern "C" fn(*mut c_void, usize, usize, c_int, *mut c_void) -> *mut c_void;
type FreeSizedFn = unsafe extern "C" fn(*mut c_void, usize);
type FreeAlignedSizedFn = unsafe extern "C" fn(*mut c_void, usize, usize);

unsafe extern "C" fn malloc(size: usize) -> *mut c_void {
    // SAFETY: (every hook below) the slot pointing here was patched only after REAL[i]
    // was resolved to libc's function of this signature; arguments are passed unchanged.
    let real = unsafe { real::<MallocFn>(f::MALLOC) };
    allocating(|| unsafe { real(size) }, size)
}

unsafe extern "C" fn calloc(n: usize, size: usize) -> *mut c_void {
    // SAFETY: see `malloc`.
    let real = unsafe { real::<CallocFn>(f::CALLOC) };
    allocating(|| unsafe { real(n, size) }, n.saturating_mul(size))
}

/// A resize: on success the old block ends and the new one begins; `realloc(p, 0)` that
/// returns null freed `p`; on failure the old block stays live.
#[inline(always)]
fn resizing(old: *mut c_void, size: usize, call: impl FnOnce() -> *mut c_void) -> *mut c_void {
    recorded(call, |t, block| {
        if !block.is_null() {
            native_record::alloc(t, block as u64, size as u64, old as u64);
        } else if size == 0 && !old.is_null() {
            native_record::free(old as u64);
        }
    })
}

/// Runs `call` and, when the thread is in ordinary code, hands its result to `record`
/// with the thread marked as inside an allocation hook (so that neither the real call
/// nor the recording is recorded again).
#[inline(always)]
fn recorded<T: Copy>(call: impl FnOnce() -> T, record: impl FnOnce(&HookThread, T)) -> T {
    let Some((_inside, Some(t))) = enter() else {
        return call();
    };
    if t.mode() != HookMode::Idle || !thread_filter::records(t) {
        return call();
    }
    t.set_mode(HookMode::InAllocHook);
    let result = call();
    record(t, result);
    t.set_mode(HookMode::Idle);
    result
}

unsafe extern "C" fn realloc(old: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: see `malloc`.
    let real = unsafe { real::<ReallocFn>(f::REALLOC) };
    resizing(old, size, || unsafe { real(old, size) })
}

unsafe extern "C" fn reallocarray(old: *mut c_void, n: usize, size: usize) -> *mut c_void {
    // SAFETY: see `malloc`.
    let real = unsafe { real::<ReallocArrayFn>(f::REALLOCARRAY) };
    match n.checked_mul(size) {
        Some(total) => resizing(old, total, || unsafe { real(old, n, size) }),
        None => unsafe { real(old, n, size) },
    }
}

unsafe extern "C" fn free(block: *mut c_void) {
    // SAFETY: see `malloc`.
    let real = unsafe { real::<FreeFn>(f::FREE) };
    // Forget the block first: once freed, another thread may get the same address.
    let _inside = freeing(block);
    unsafe { real(block) }
}

unsafe extern "C" fn free_sized(block: *mut c_void, size: usize) {
    // SAFETY: see `malloc`.
    let real = unsafe { real::<FreeSizedFn>(f::FREE_SIZED) };
    let _inside = freeing(block);
    unsafe { real(block, size) }
}

unsafe extern "C" fn free_aligned_sized(block: *mut c_void, align: usize, size: usize) {
    // SAFETY: see `malloc`.
    let real = unsafe { real::<FreeAlignedSizedFn>(f::FREE_ALIGNED_SIZED) };
    let _inside = freeing(block);
    unsafe { real(block, align, size) }
}

unsafe extern "C" fn posix_memalign(out: *mut *mut c_void, align: usize, size: usize) -> c_int {
    // SAFETY: see `malloc`.
    let real = unsafe { real::<PosixMemalignFn>(f::POSIX_MEMALIGN) };
    let mut status = 0;
    allocating(
        || {
            // SAFETY: `out` is the caller's pointer, passed through; it holds the block
            // when the call succeeds.
            unsafe {
                status = real(out, align, size);
                if status == 0 {
                    *out
                } else {
                    std::ptr::null_mut()
                }
            }
        },
        size,
    );
    status
}

unsafe extern "C" fn aligned_alloc(align: usize, size: usize) -> *mut c_void {
    // SAFETY: see `malloc`.
    let real = unsafe { real::<AlignedFn>(f::ALIGNED_ALLOC) };
    allocating(|| unsafe { real(align, size) }, size)
}

unsafe extern "C" fn memalign(align: usize, size: usize) -> *mut c_void {
    // SAFETY: see `malloc`.
    let real = unsafe { real::<AlignedFn>(f::MEMALIGN) };
    allocating(|| unsafe { real(align, size) }, size)
}

unsafe extern "C" fn valloc(size: usize) -> *mut c_void {
    // SAFETY: see `malloc`.
    let real = unsafe { real::<MallocFn>(f::VALLOC) };
    allocating(|| unsafe { real(size) }, size)
}

unsafe extern "C" fn pvalloc(size: usize) -> *mut c_void {
    // SAFETY: see `malloc`.
    let real = unsafe { real::<MallocFn>(f::PVALLOC) };
    let rounded = memtape_core::mmap_ranges::page_round(size as u64) as usize;
    allocating(|| unsafe { real(size) }, rounded)
}

/// Only private anonymous mappings are heap memory; file and shared mappings are not.
fn is_heap_mapping(flags: c_int) -> bool {
    flags & libc::MAP_ANONYMOUS != 0 && flags & libc::MAP_SHARED == 0
}

#[inline(always)]
fn mapping(
    which: usize,
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    // SAFETY: see `malloc` (mmap and mmap64 share this signature on LP64).
    let real = unsafe { real::<MmapFn>(which) };
    // SAFETY: the caller's arguments, passed unchanged.
    let call = || unsafe { real(addr, len, prot, flags, fd, off) };
    if !is_heap_mapping(flags) {
        // A file mapping over a range we followed (MAP_FIXED) ends that range.
        let mapped = call();
        if mapped != libc::MAP_FAILED && flags & libc::MAP_FIXED != 0 {
            if let Some((_inside, _)) = enter() {
                native_record::unmapped(mapped as u64, len as u64);
            }
        }
        return mapped;
    }
    recorded(call, |t, mapped| {
        if mapped != libc::MAP_FAILED {
            native_record::mapped(t, mapped as u64, len as u64);
        }
    })
}

unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    mapping(f::MMAP, addr, len, prot, flags, fd, off)
}

unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    mapping(f::MMAP64, addr, len, prot, flags, fd, off)
}

unsafe extern "C" fn munmap(addr: *mut c_void, len: usize) -> c_int {
    // SAFETY: see `malloc`.
    let real = unsafe { real::<MunmapFn>(f::MUNMAP) };
    if let Some((_inside, t)) = enter() {
        if !matches!(
            t.map(HookThread::mode),
            Some(HookMode::InAllocHook | HookMode::Forking)
        ) {
            // Before the call: once unmapped, another thread may map the same range.
            native_record::unmapped(addr as u64, len as u64);
        }
    }
    unsafe { real(addr, len) }
}

/// `mremap` is variadic in C (the fifth argument is read only with `MREMAP_FIXED`); on
/// the LP64 targets we support a variadic callee reads its arguments from the same
/// registers as a fixed one, so it is declared and forwarded with five.
unsafe extern "C" fn mremap(
    old: *mut c_void,
    old_len: usize,
    new_len: usize,
    flags: c_int,
    new_addr: *mut c_void,
) -> *mut c_void {
    // SAFETY: see above and `malloc`.
    let real = unsafe { real::<MremapFn>(f::MREMAP) };
    let call = || unsafe { real(old, old_len, new_len, flags, new_addr) };
    let Some((_inside, t)) = enter() else {
        return call();
    };
    if matches!(
        t.map(HookThread::mode),
        Some(HookMode::InAllocHook | HookMode::Forking)
    ) {
        return call();
    }
    let prev = t.map(|t| t.set_mode(HookMode::InAllocHook));
    let moved = call();
    if moved != libc::MAP_FAILED {
        native_record::remapped(old as u64, old_len as u64, moved as u64, new_len as u64);
    }
    if let (Some(t), Some(prev)) = (t, prev) {
        t.set_mode(prev);
    }
    moved
}

/// Keeps the PEP 445 and NumPy wrappers' calls into the allocator they wrap from being
/// recorded again here: runs `call` with the thread marked as inside a hook, when native
/// tracing is on (else it costs one relaxed load).
#[inline(always)]
pub(crate) fn beneath_wrapper<R>(call: impl FnOnce() -> R) -> R {
    // Held (when taken) until `call` has returned.
    let _inside = enter();
    call()
}
