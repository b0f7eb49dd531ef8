//! What MLX's allocator did, as caching-allocator events: the reporting half of the
//! forwarder ([`mlx_allocator`](super::mlx_allocator) is the C++ half, which calls these
//! functions around each call it forwards).
//!
//! Which action a call was is read off MLX's cache, under a lock that serialises the
//! calls made through the forwarder: a `malloc` after which the cache lost exactly the
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

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use memtape_core::{Action, CacheMirror, CachedBuffer, MLX_DOMAIN};

use super::native_record;
use crate::record::framework_events::{self, FrameworkError, Report};
use crate::record::op_context::{self, OpContext};
use crate::record::spin_lock::{SpinGuard, SpinLock};
use crate::thread::{hook_mode, thread_id};

/// The device MLX's CPU buffers are reported on.
pub(crate) const MLX_DEVICE: i32 = 0;

type CacheBytesFn = unsafe extern "C" fn() -> usize;

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

/// Whether calls are being reported (a relaxed read, for the forwarder's fast path).
#[inline]
pub(crate) fn reporting() -> bool {
    WATCHING.load(Ordering::Relaxed)
}

fn cache_bytes() -> u64 {
    let f = CACHE_BYTES.load(Ordering::Acquire);
    // SAFETY: set (before watching starts) to MLX's `get_cache_memory`, which takes the
    // allocator's mutex and reads one field.
    unsafe { std::mem::transmute_copy::<usize, CacheBytesFn>(&f)() as u64 }
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

/// Reports the waiting allocation `p` with `ctx` (its array's creation, when known); the
/// thread that allocated it may walk its own stack.
fn report_pending(p: Pending, ctx: Option<OpContext>, me: u32) {
    report(
        p.action,
        p.addr,
        p.size,
        Some(p.requested),
        ctx,
        p.thread == me,
    );
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
            report_pending(w.pending.remove(i), None, me);
        } else {
            i += 1;
        }
    }
}

/// MLX put the buffer at `addr` into an array (`array::set_data`): the waiting
/// allocation is reported with what `creation` returns for the array.
pub(crate) fn joined(addr: u64, creation: impl FnOnce() -> Option<OpContext>) {
    if !reporting() {
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
    report_pending(w.pending.remove(i), creation(), me);
}

/// Reports the buffers evicted since the mirror last matched MLX's cache.
fn settle(w: &mut Watch) {
    for b in w.mirror.settle(cache_bytes()) {
        if b.recorded {
            report(Action::FreeCacheToOs, b.addr, b.size, None, None, false);
        }
    }
}

/// Runs `malloc` (MLX's, for `requested` bytes) and keeps what it did, to be reported
/// once MLX tells which array the buffer is for ([`joined`]). `real_size` is MLX's size
/// of a buffer.
pub(crate) fn malloc_reported(
    requested: usize,
    malloc: impl FnOnce() -> *mut c_void,
    real_size: impl FnOnce(*mut c_void) -> u64,
) -> *mut c_void {
    let mut guard = mirror();
    let Some(w) = guard.as_mut() else {
        return malloc();
    };
    flush(w, false);
    settle(w);
    let before = w.mirror.bytes();
    let buffer = malloc();
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
    w.pending.push(Pending {
        thread: thread_id::current(),
        action,
        addr,
        size: block,
        requested: requested as u64,
    });
    buffer
}

/// Runs `free` (MLX's, of the non-null `buffer`) and reports where the buffer went.
/// `real_size` is MLX's size of a buffer.
pub(crate) fn free_reported(
    buffer: *mut c_void,
    free: impl FnOnce(),
    real_size: impl FnOnce(*mut c_void) -> u64,
) {
    let mut guard = mirror();
    let Some(w) = guard.as_mut() else {
        return free();
    };
    let addr = buffer as u64;
    // A buffer freed before it was put into an array is reported first.
    if let Some(i) = w.pending.iter().position(|p| p.addr == addr) {
        report_pending(w.pending.remove(i), None, thread_id::current());
    }
    settle(w);
    let before = w.mirror.bytes();
    let block = real_size(buffer);
    // MLX's calls are serialised by the lock, so no other buffer of ours can get this
    // address before the event below.
    free();
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

/// MLX wrapped `size` bytes of foreign memory as `buffer` (`make_buffer`).
pub(crate) fn made_buffer(buffer: *mut c_void, size: usize) {
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

/// MLX is about to let go of a foreign buffer (`release`).
pub(crate) fn released(buffer: *mut c_void) {
    let _guard = mirror();
    report(Action::Release, buffer as u64, 0, None, None, false);
}

/// Starts reporting, with MLX's `get_cache_memory` at `cache_bytes_fn`: MLX's cache
/// currently holds buffers we never saw.
///
/// # Safety
/// `cache_bytes_fn` must be MLX's `get_cache_memory`.
pub(crate) unsafe fn watch(cache_bytes_fn: usize) {
    CACHE_BYTES.store(cache_bytes_fn, Ordering::Release);
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
