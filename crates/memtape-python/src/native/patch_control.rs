//! Turning native tracing on and off: resolving libc's functions, pointing every loaded
//! object's slots at the hooks while a sink follows native memory (and objects loaded
//! later), and back; fork handling of the patch list.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Once;

use super::alloc_hooks::hook_addresses;
use super::dlopen_hook;
use super::got_patcher::{self, Patches};
use super::hooked_functions::{f, NAMES, REAL};
use super::unwind::native_stacks;
use crate::record::native_state::{ACTIVE, SINK_CAPTURE};
use crate::record::recorder::with_recorder;
use crate::record::spin_lock::SpinLock;

/// Set (to anything but empty or "0") when `tracemalloc.start()` is called, native blocks
/// are traced too, in `NATIVE_DOMAIN` (the stdlib's semantics stay the default).
const TRACEMALLOC_ENV: &str = "MEMTAPE_TRACEMALLOC_NATIVE";

/// Whether `tracemalloc.start()` should trace native blocks too.
pub(crate) fn wanted_by_tracemalloc() -> bool {
    std::env::var_os(TRACEMALLOC_ENV).is_some_and(|v| !v.is_empty() && v != "0")
}

/// The slots we patched; also serialises patching against `fork()`.
static PATCHES: SpinLock<Patches> = SpinLock::new(Patches::new());

/// Set while the slots stay pointed at the hooks after the last sink stops (the pytest
/// plugin, which records one test after another): the hooks pass every call through
/// while [`ACTIVE`] is off, and the next start finds the slots patched already, instead
/// of two `mprotect` calls per page of slots at each test's start and end.
static LINGER: AtomicBool = AtomicBool::new(false);

/// The loader's counts (`elf_slots::loader_counts`) when every loaded object's slots
/// were last patched, `NOT_PATCHED` in both once they were restored. Written with
/// [`PATCHES`] held. While the slots linger and the counts stay the same, a start finds
/// every slot patched already and looks at none (finding them, about 40 us a start, was
/// a tenth of the pytest plugin's cost per tiny test).
static PATCHED_ADDS: AtomicU64 = AtomicU64::new(NOT_PATCHED);
static PATCHED_SUBS: AtomicU64 = AtomicU64::new(NOT_PATCHED);
const NOT_PATCHED: u64 = u64::MAX;

/// Whether every loaded object's slots are patched as at the loader's `counts`.
fn patched_at(counts: Option<(u64, u64)>) -> bool {
    counts.is_some_and(|(adds, subs)| {
        adds != NOT_PATCHED
            && PATCHED_ADDS.load(Ordering::Acquire) == adds
            && PATCHED_SUBS.load(Ordering::Acquire) == subs
    })
}

fn set_patched_at(counts: Option<(u64, u64)>) {
    let (adds, subs) = counts.unwrap_or((NOT_PATCHED, NOT_PATCHED));
    PATCHED_ADDS.store(adds, Ordering::Release);
    PATCHED_SUBS.store(subs, Ordering::Release);
}

/// Puts every patched slot back.
fn restore(patches: &mut Patches) {
    got_patcher::restore_all(patches);
    set_patched_at(None);
}

/// Whether the slots stay patched when no sink follows native memory (see [`LINGER`]).
/// Turned off, the slots go back now unless a sink still follows native memory.
pub(crate) fn linger(keep: bool) {
    LINGER.store(keep, Ordering::Release);
    if keep {
        return;
    }
    let mut patches = PATCHES.lock();
    if !ACTIVE.load(Ordering::Acquire) {
        restore(&mut patches);
    }
}

/// What the hooks would call: libc's functions, and what each name resolves to in the
/// global scope. False where libc cannot be found.
fn resolve() -> bool {
    static RESOLVED: AtomicBool = AtomicBool::new(false);
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: dlopen with RTLD_NOLOAD only returns a handle to the already loaded libc;
        // dlsym reads its symbol table. Neither has other preconditions.
        unsafe {
            let libc_handle =
                libc::dlopen(c"libc.so.6".as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY);
            if libc_handle.is_null() {
                return;
            }
            for (i, name) in NAMES.iter().enumerate() {
                let mut real = libc::dlsym(libc_handle, name.as_ptr()) as usize;
                if real == 0 && (i == f::DLOPEN || i == f::DLMOPEN) {
                    // Before glibc 2.34 dlopen lives in libdl.
                    real = libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) as usize;
                }
                REAL[i].store(real, Ordering::Relaxed);
            }
            RESOLVED.store(
                REAL[f::MALLOC].load(Ordering::Relaxed) != 0
                    && REAL[f::FREE].load(Ordering::Relaxed) != 0,
                Ordering::Release,
            );
        }
    });
    RESOLVED.load(Ordering::Acquire)
}

/// What each name resolves to in the global scope. Looked up before PATCHES is taken:
/// dlsym takes the loader's lock, which a thread running constructors inside `dlopen`
/// holds while its own nested `dlopen` reaches our hook and waits for PATCHES.
fn global_definitions() -> Vec<usize> {
    NAMES
        .iter()
        // SAFETY: dlsym in the global scope; no preconditions.
        .map(|n| unsafe { libc::dlsym(libc::RTLD_DEFAULT, n.as_ptr()) } as usize)
        .collect()
}

fn patch(patches: &mut Patches, globals: &[usize]) {
    let reals: Vec<usize> = REAL.iter().map(|r| r.load(Ordering::Relaxed)).collect();
    got_patcher::patch_all(patches, &NAMES, &reals, &hook_addresses(), globals);
}

/// Objects were loaded: patch their slots too (while tracing), and unwind through them.
pub(crate) fn patch_new_objects() {
    native_stacks::refresh();
    if !ACTIVE.load(Ordering::Relaxed) {
        return;
    }
    let globals = global_definitions();
    let mut patches = PATCHES.lock();
    // Stop may have run meanwhile: it clears ACTIVE under this lock.
    if ACTIVE.load(Ordering::Acquire) {
        patch(&mut patches, &globals);
    }
}

/// `sink` starts following native memory; the first one patches the slots. False when
/// this process' libc cannot be hooked.
pub(crate) fn start(sink: u8) -> bool {
    if !resolve() {
        return false;
    }
    dlopen_hook::on_load(patch_new_objects);
    register_fork_handlers();
    with_recorder(|rec| {
        if rec.native.sinks == 0 {
            rec.native.clear();
        }
        rec.native.sinks |= sink;
    });
    // Counted before the patching: an object loaded meanwhile makes the next start
    // patch again.
    let counts = super::elf_slots::loader_counts();
    {
        let _patches = PATCHES.lock();
        if LINGER.load(Ordering::Acquire) && patched_at(counts) {
            ACTIVE.store(true, Ordering::Release);
            return true;
        }
    }
    let globals = global_definitions();
    let mut patches = PATCHES.lock();
    ACTIVE.store(true, Ordering::Release);
    patch(&mut patches, &globals);
    set_patched_at(counts);
    true
}

/// `sink` stops following native memory; the last one restores the slots (threads still
/// inside a hook finish normally: hooks and the real functions stay).
pub(crate) fn stop(sink: u8) {
    let remaining = with_recorder(|rec| {
        if rec.native.sinks & sink == 0 {
            return None;
        }
        rec.native.sinks &= !sink;
        if rec.native.sinks == 0 {
            rec.native.clear();
        }
        Some(rec.native.sinks)
    });
    if remaining == Some(0) {
        let mut patches = PATCHES.lock();
        ACTIVE.store(false, Ordering::Release);
        if !LINGER.load(Ordering::Acquire) {
            restore(&mut patches);
        }
    }
}

/// `(patched slots, unknown frees, live native bytes, peak native bytes)`.
pub(crate) fn counters() -> (usize, u64, u64, u64) {
    let slots = PATCHES.lock().len();
    with_recorder(|rec| {
        (
            slots,
            rec.native.unknown_frees,
            rec.native.live.current(),
            rec.native.live.peak(),
        )
    })
}

extern "C" fn prepare_fork() {
    PATCHES.acquire_for_fork();
}

extern "C" fn after_fork_in_parent() {
    PATCHES.release_after_fork();
}

extern "C" fn after_fork_in_child() {
    PATCHES.release_after_fork();
    // Runs after the recorder's own child handler (registered earlier), which dropped
    // the parent's capture: with nothing left to follow, the child's slots go back.
    let remaining = with_recorder(|rec| {
        if rec.capture.is_none() {
            rec.native.sinks &= !SINK_CAPTURE;
        }
        if rec.native.sinks == 0 {
            rec.native.clear();
        }
        rec.native.sinks
    });
    if remaining == 0 && ACTIVE.load(Ordering::Acquire) {
        let mut patches = PATCHES.lock();
        ACTIVE.store(false, Ordering::Release);
        restore(&mut patches);
    }
}

fn register_fork_handlers() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: plain handlers that never unwind; a failure (ENOMEM) leaves fork with
        // only the recorder's handlers, as before native tracing existed.
        unsafe {
            libc::pthread_atfork(
                Some(prepare_fork),
                Some(after_fork_in_parent),
                Some(after_fork_in_child),
            )
        };
    });
}
