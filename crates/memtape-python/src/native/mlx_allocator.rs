//! A forwarding `mlx::core::allocator::Allocator`: every call goes to MLX's own allocator
//! unchanged, and what it did is reported as a caching-allocator event.
//!
//! The object is laid out as the Itanium C++ ABI lays out a class with one vtable
//! pointer: the vtable holds `malloc(size)`, `free(Buffer)`, `size(Buffer) const`,
//! `make_buffer(void*, size)`, `release(Buffer)` and the two destructors, in that order
//! (`mlx/allocator.h`, checked for 0.32.4). `Buffer` wraps one pointer and is trivially
//! copyable, so it travels in a register like a plain pointer.
//!
//! Which action a call was is read off MLX's cache, under a lock that serialises the
//! calls made through this object: a `malloc` after which the cache lost exactly the
//! returned buffer's size was a cache hit (`AllocReuse`), otherwise a new block
//! (`AllocNew`); a `free` after which the cache gained exactly the buffer's size went to
//! the cache (`FreeActiveToCache`), otherwise back to the OS (`FreeActiveToOS`). Sizes
//! are MLX's own (`size(Buffer)`, the header before the data), which is what
//! `mx.get_active_memory()` and `mx.get_cache_memory()` count. Evictions
//! (`clear_cache`, `set_cache_limit`) bypass the allocator's interface; [`settle`] finds
//! them from the cache's size ([`CacheMirror`]) before every call and on request.
//!
//! An allocation is reported when MLX puts the buffer into an array (`array::set_data`,
//! [`joined`], called from [`mlx_graph`](super::mlx_graph)), so that it carries the
//! array's creation line and primitive; one never put into an array is reported at its
//! thread's next call, at its free, or when events are read ([`sync`]).
//!
//! MLX's `std::malloc` beneath a cache miss is one block in one domain: the real call
//! runs under [`beneath_wrapper`], so native tracing does not record it again.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::OnceLock;

use memtape_core::{Action, CacheMirror, CachedBuffer, MLX_DOMAIN};

use super::beneath_wrapper;
use super::native_record;
use crate::record::framework_events::{self, FrameworkError, Report};
use crate::record::op_context::{self, OpContext};
use crate::record::spin_lock::{SpinGuard, SpinLock};
use crate::thread::{hook_mode, thread_id};

/// The device MLX's CPU buffers are reported on.
pub(crate) const MLX_DEVICE: i32 = 0;

type MallocFn = unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void;
type BufferFn = unsafe extern "C" fn(*mut c_void, *mut c_void);
type SizeFn = unsafe extern "C" fn(*mut c_void, *mut c_void) -> usize;
type MakeBufferFn = unsafe extern "C" fn(*mut c_void, *mut c_void, usize) -> *mut c_void;
type CacheBytesFn = unsafe extern "C" fn() -> usize;

/// Vtable slots of `mlx::core::allocator::Allocator`.
mod slot {
    pub(super) const MALLOC: usize = 0;
    pub(super) const FREE: usize = 1;
    pub(super) const SIZE: usize = 2;
    pub(super) const MAKE_BUFFER: usize = 3;
    pub(super) const RELEASE: usize = 4;
    pub(super) const COUNT: usize = 7;
}

/// An Itanium vtable: offset to top, type info, then the virtual functions.
#[repr(C)]
struct VTable {
    offset_to_top: isize,
    type_info: usize,
    functions: [usize; slot::COUNT],
}

/// The forwarding object: only a vtable pointer, as MLX's callers expect.
#[repr(C)]
pub(crate) struct Forwarder {
    vptr: usize,
}

static VTABLE: OnceLock<VTable> = OnceLock::new();
static FORWARDER: OnceLock<Forwarder> = OnceLock::new();

/// MLX's own allocator object (set once; the same object for the life of the process).
static REAL: AtomicUsize = AtomicUsize::new(0);
/// `mlx::core::get_cache_memory()`.
static CACHE_BYTES: AtomicUsize = AtomicUsize::new(0);
/// True while calls are reported.
static WATCHING: AtomicBool = AtomicBool::new(false);
/// An allocation waiting for the array it is for (see [`joined`]).
struct Pending {
    thread: u32,
    action: Action,
    addr: u64,
    size: u64,
    requested: u64,
}

/// What watching keeps.
struct Watch {
    /// The cache as we know it.
    mirror: CacheMirror,
    /// Allocations not reported yet, oldest first.
    pending: Vec<Pending>,
}

/// `Some` while watching. Its lock serialises the calls made through the forwarder, so
/// that the cache's size before and after a call is that call's doing. A spin lock, so
/// that `fork()` can take it (see [`prepare_fork`]).
static MIRROR: SpinLock<Option<Watch>> = SpinLock::new(None);

fn mirror() -> SpinGuard<'static, Option<Watch>> {
    MIRROR.lock()
}

/// Before `fork()`: no other thread is inside MLX's allocator (taken before the
/// recorder's lock, in the order the forwarder takes them).
pub(crate) fn prepare_fork() {
    MIRROR.acquire_for_fork();
}

/// After `fork()`, in both processes.
pub(crate) fn after_fork() {
    MIRROR.release_after_fork();
}

/// The real object's virtual function `index`, as a function of type `F`.
///
/// # Safety
/// `REAL` must hold MLX's allocator object and `F` be the type of slot `index`.
unsafe fn real_fn<F: Copy>(index: usize) -> (*mut c_void, F) {
    let object = REAL.load(Ordering::Acquire) as *mut c_void;
    // SAFETY: the object starts with its vtable pointer; the vtable has the slots above.
    unsafe {
        let vtable = *(object as *const *const usize);
        let f = *vtable.add(index);
        (object, std::mem::transmute_copy::<usize, F>(&f))
    }
}

fn cache_bytes() -> u64 {
    let f = CACHE_BYTES.load(Ordering::Acquire);
    // SAFETY: set (before watching starts) to MLX's `get_cache_memory`, which takes the
    // allocator's mutex and reads one field.
    unsafe { std::mem::transmute_copy::<usize, CacheBytesFn>(&f)() as u64 }
}

/// `size(Buffer)`: MLX's size of a buffer (0 for a null one).
fn real_size(buffer: *mut c_void) -> u64 {
    // SAFETY: slot SIZE has this type; the buffer came from (or goes to) the allocator.
    unsafe {
        let (object, size) = real_fn::<SizeFn>(slot::SIZE);
        size(object, buffer) as u64
    }
}

/// Reports one event: allocations are attributed to `ctx` (the array's creation), else to
/// the calling thread's stack when `walk` (only the allocating thread may walk its own).
fn report(
    action: Action,
    addr: u64,
    size: u64,
    requested_size: Option<u64>,
    ctx: Option<OpContext>,
    walk: bool,
) -> bool {
    // Watching means something records (events or a capture).
    let stack_wanted = matches!(
        action,
        Action::AllocNew | Action::AllocReuse | Action::AllocMakeBuffer
    );
    let needs_walk = |ctx: Option<OpContext>| {
        let own = ctx.map_or(true, |c| c.traceback == op_context::NO_TRACEBACK);
        if walk && stack_wanted && own {
            hook_mode::thread().map(native_record::walk)
        } else {
            None
        }
    };
    let r = Report {
        action,
        addr,
        size,
        requested_size,
        device: MLX_DEVICE,
        stream: 0,
    };
    match framework_events::record_allocator_event_walked(
        &r,
        ctx,
        needs_walk(ctx),
        Some(MLX_DOMAIN),
    ) {
        Ok(()) => true,
        // The array was created in an earlier recording: its line is gone.
        Err(FrameworkError::StaleTraceback(_)) => {
            let ctx = ctx.map(|c| OpContext {
                traceback: op_context::NO_TRACEBACK,
                ..c
            });
            framework_events::record_allocator_event_walked(
                &r,
                ctx,
                needs_walk(ctx),
                Some(MLX_DOMAIN),
            )
            .is_ok()
        }
        Err(_) => false,
    }
}

/// Reports the allocations still waiting: the calling thread's with its stack, other
/// threads' (`all`) without one.
fn flush(w: &mut Watch, all: bool) {
    if w.pending.is_empty() {
        return;
    }
    let me = thread_id::current();
    let mut i = 0;
    while i < w.pending.len() {
        if w.pending[i].thread == me || all {
            let p = w.pending.remove(i);
            report(
                p.action,
                p.addr,
                p.size,
                Some(p.requested),
                None,
                p.thread == me,
            );
        } else {
            i += 1;
        }
    }
}

/// MLX put the buffer at `addr` into an array (`array::set_data`): the waiting
/// allocation is reported with what `creation` returns for the array.
pub(crate) fn joined(addr: u64, creation: impl FnOnce() -> Option<OpContext>) {
    if !WATCHING.load(Ordering::Relaxed) {
        return;
    }
    let mut guard = mirror();
    let Some(w) = guard.as_mut() else {
        return;
    };
    let me = thread_id::current();
    let Some(i) = w
        .pending
        .iter()
        .rposition(|p| p.thread == me && p.addr == addr)
    else {
        return;
    };
    let p = w.pending.remove(i);
    report(
        p.action,
        p.addr,
        p.size,
        Some(p.requested),
        creation(),
        true,
    );
}

/// Reports the buffers evicted since the mirror last matched MLX's cache.
fn settle(w: &mut Watch) {
    for b in w.mirror.settle(cache_bytes()) {
        if b.recorded {
            report(Action::FreeCacheToOs, b.addr, b.size, None, None, false);
        }
    }
}

unsafe extern "C" fn forward_malloc(_this: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: slot MALLOC has this type; arguments are passed unchanged.
    let (object, malloc) = unsafe { real_fn::<MallocFn>(slot::MALLOC) };
    if !WATCHING.load(Ordering::Relaxed) {
        return unsafe { malloc(object, size) };
    }
    let mut guard = mirror();
    let Some(w) = guard.as_mut() else {
        return unsafe { malloc(object, size) };
    };
    flush(w, false);
    settle(w);
    let before = w.mirror.bytes();
    let buffer = beneath_wrapper(|| unsafe { malloc(object, size) });
    let after = cache_bytes();
    let block = real_size(buffer);
    if buffer.is_null() || block == 0 {
        return buffer;
    }
    let addr = buffer as u64;
    let hit = before.checked_sub(after) == Some(block);
    let action = match w.mirror.reused(addr) {
        Some(_) if hit => Action::AllocReuse,
        Some(evicted) => {
            // Evicted behind our back (a clear_cache racing this call), then new again.
            if evicted.recorded {
                report(Action::FreeCacheToOs, addr, evicted.size, None, None, false);
            }
            Action::AllocNew
        }
        None => {
            if hit {
                // A buffer cached before we watched: it is new to us.
                w.mirror.unknown_reused(block);
            }
            Action::AllocNew
        }
    };
    // Reported once MLX tells which array the buffer is for (`joined`), or at this
    // thread's next call.
    w.pending.push(Pending {
        thread: thread_id::current(),
        action,
        addr,
        size: block,
        requested: size as u64,
    });
    buffer
}

unsafe extern "C" fn forward_free(_this: *mut c_void, buffer: *mut c_void) {
    // SAFETY: slot FREE has this type; arguments are passed unchanged.
    let (object, free) = unsafe { real_fn::<BufferFn>(slot::FREE) };
    if !WATCHING.load(Ordering::Relaxed) || buffer.is_null() {
        return unsafe { free(object, buffer) };
    }
    let mut guard = mirror();
    let Some(w) = guard.as_mut() else {
        return unsafe { free(object, buffer) };
    };
    let addr = buffer as u64;
    // A buffer freed before it was put into an array is reported first.
    if let Some(i) = w.pending.iter().position(|p| p.addr == addr) {
        let p = w.pending.remove(i);
        let mine = p.thread == thread_id::current();
        report(p.action, p.addr, p.size, Some(p.requested), None, mine);
    }
    settle(w);
    let before = w.mirror.bytes();
    let block = real_size(buffer);
    // MLX's calls are serialised by the lock, so no other buffer of ours can get this
    // address before the event below.
    beneath_wrapper(|| unsafe { free(object, buffer) });
    let after = cache_bytes();
    if block == 0 {
        return;
    }
    if after.checked_sub(before) == Some(block) {
        let recorded = report(Action::FreeActiveToCache, addr, block, None, None, false);
        w.mirror.cached(CachedBuffer {
            addr,
            size: block,
            recorded,
        });
    } else {
        report(Action::FreeActiveToOs, addr, block, None, None, false);
    }
}

unsafe extern "C" fn forward_size(_this: *mut c_void, buffer: *mut c_void) -> usize {
    real_size(buffer) as usize
}

unsafe extern "C" fn forward_make_buffer(
    _this: *mut c_void,
    ptr: *mut c_void,
    size: usize,
) -> *mut c_void {
    // SAFETY: slot MAKE_BUFFER has this type; arguments are passed unchanged.
    let (object, make_buffer) = unsafe { real_fn::<MakeBufferFn>(slot::MAKE_BUFFER) };
    let buffer = unsafe { make_buffer(object, ptr, size) };
    if WATCHING.load(Ordering::Relaxed) && !buffer.is_null() && size > 0 {
        let _guard = mirror();
        report(
            Action::AllocMakeBuffer,
            buffer as u64,
            size as u64,
            None,
            None,
            true,
        );
    }
    buffer
}

unsafe extern "C" fn forward_release(_this: *mut c_void, buffer: *mut c_void) {
    // SAFETY: slot RELEASE has this type; arguments are passed unchanged.
    let (object, release) = unsafe { real_fn::<BufferFn>(slot::RELEASE) };
    if WATCHING.load(Ordering::Relaxed) && !buffer.is_null() {
        let _guard = mirror();
        report(Action::Release, buffer as u64, 0, None, None, false);
    }
    unsafe { release(object, buffer) }
}

/// The destructors: the object is a static that is never destroyed.
unsafe extern "C" fn forward_destroy(_this: *mut c_void) {}

/// Builds the forwarder around MLX's allocator `real` (whose vtable's type info it
/// borrows) and `get_cache_memory`; returns its address.
///
/// # Safety
/// `real` must be MLX's allocator object, laid out as the module documentation says,
/// and `cache_bytes_fn` MLX's `get_cache_memory`.
pub(crate) unsafe fn forwarder(real: usize, cache_bytes_fn: usize) -> usize {
    REAL.store(real, Ordering::Release);
    CACHE_BYTES.store(cache_bytes_fn, Ordering::Release);
    let vtable = VTABLE.get_or_init(|| {
        // SAFETY: guaranteed by the caller: the vtable pointer is the object's first word,
        // and the type info sits just before the first virtual function.
        let type_info = unsafe { *(*(real as *const *const usize)).sub(1) };
        let mut functions = [forward_destroy as *const () as usize; slot::COUNT];
        functions[slot::MALLOC] = forward_malloc as *const () as usize;
        functions[slot::FREE] = forward_free as *const () as usize;
        functions[slot::SIZE] = forward_size as *const () as usize;
        functions[slot::MAKE_BUFFER] = forward_make_buffer as *const () as usize;
        functions[slot::RELEASE] = forward_release as *const () as usize;
        VTable {
            offset_to_top: 0,
            type_info,
            functions,
        }
    });
    let object = FORWARDER.get_or_init(|| Forwarder {
        vptr: vtable.functions.as_ptr() as usize,
    });
    object as *const Forwarder as usize
}

/// Starts reporting: MLX's cache currently holds buffers we never saw.
pub(crate) fn watch() {
    let mut guard = mirror();
    *guard = Some(Watch {
        mirror: CacheMirror::new(cache_bytes()),
        pending: Vec::new(),
    });
    WATCHING.store(true, Ordering::Release);
}

/// Stops reporting (the forwarder keeps forwarding for calls still reaching it).
pub(crate) fn unwatch() {
    let mut guard = mirror();
    WATCHING.store(false, Ordering::Release);
    if let Some(w) = guard.as_mut() {
        flush(w, true);
    }
    *guard = None;
}

/// Reports evictions that happened since the last call (after `clear_cache`,
/// `set_cache_limit`, and before events are read).
pub(crate) fn sync() {
    if !WATCHING.load(Ordering::Acquire) {
        return;
    }
    if let Some(w) = mirror().as_mut() {
        flush(w, true);
        settle(w);
    }
}

/// Whether calls are being reported.
pub(crate) fn watching() -> bool {
    WATCHING.load(Ordering::Acquire)
}
