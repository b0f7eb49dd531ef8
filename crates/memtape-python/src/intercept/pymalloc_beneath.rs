//! Whether the Python hooks' frees need marking for the native hooks.
//!
//! While native hooks run, a free that [`super::hooks`] forwards to the allocator beneath
//! is marked (`beneath_wrapper`, a thread-local write around the call) so that the libc
//! `free` it may reach is not taken for a native free of its own. Under pymalloc, the
//! default, a MEM or OBJ free never reaches libc by itself: a block too large for its
//! pools goes to `PyMem_RawFree` (our RAW hook, which marks its own call), and an empty
//! arena goes to the arena allocator, which is wrapped here to mark the call. The mark,
//! one `__tls_get_addr` a free, is then left out on those two domains (section 34 of
//! `benchmarks/RESULTS.md`).
//!
//! Which allocator is beneath is asked of CPython (`_PyMem_GetCurrentAllocatorName`,
//! exported by 3.10 to 3.13) before our hooks wrap it; anything else (`PYTHONMALLOC=malloc`,
//! a debug or foreign allocator, another tracer's hooks) keeps the mark.

use std::ffi::{c_char, c_void, CStr};
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};

use pyo3::ffi::{self, PyObjectArenaAllocator};

use crate::native::beneath_wrapper;

/// The MEM and OBJ hooks wrap pymalloc, and the arena allocator is wrapped.
static PYMALLOC_BENEATH: AtomicBool = AtomicBool::new(false);

/// The arena allocator wrapped (written with the GIL held while ours is not installed).
struct Arena(std::cell::UnsafeCell<PyObjectArenaAllocator>);

// SAFETY: written only by `install`, with the GIL held and our arena allocator not
// installed; read by our arena functions, which pymalloc calls with the GIL held.
unsafe impl Sync for Arena {}

/// An arena allocator with no functions: what `PyObject_GetArenaAllocator` fills in.
const NO_ARENA: PyObjectArenaAllocator = PyObjectArenaAllocator {
    ctx: ptr::null_mut(),
    alloc: None,
    free: None,
};

static ARENA: Arena = Arena(std::cell::UnsafeCell::new(NO_ARENA));

/// Whether a free forwarded by the hooks of a domain whose calls hold the GIL (MEM,
/// OBJ) can skip the native mark.
#[inline(always)]
pub(crate) fn frees_stay_in_python() -> bool {
    PYMALLOC_BENEATH.load(Ordering::Relaxed)
}

fn arena() -> &'static PyObjectArenaAllocator {
    // SAFETY: see `Arena`: not written while our arena functions can run.
    unsafe { &*ARENA.0.get() }
}

extern "C" fn arena_alloc(_ctx: *mut c_void, size: usize) -> *mut c_void {
    let a = arena();
    match a.alloc {
        Some(alloc) => beneath_wrapper(|| alloc(a.ctx, size)),
        None => ptr::null_mut(),
    }
}

extern "C" fn arena_free(_ctx: *mut c_void, block: *mut c_void, size: usize) {
    let a = arena();
    if let Some(free) = a.free {
        beneath_wrapper(|| free(a.ctx, block, size));
    }
}

/// Our arena allocator's context: the address of `ARENA`, unique to it.
fn our_ctx() -> *mut c_void {
    ptr::from_ref(&ARENA).cast_mut().cast()
}

fn is_ours(a: &PyObjectArenaAllocator) -> bool {
    a.ctx == our_ctx()
}

/// The name CPython gives the allocators installed now ("pymalloc", "malloc", ...; None
/// when they are not one of its own, or the function is not exported).
fn current_allocator_name() -> Option<&'static CStr> {
    // SAFETY: dlsym in the global scope; the name is NUL-terminated.
    let f = unsafe {
        libc::dlsym(
            libc::RTLD_DEFAULT,
            c"_PyMem_GetCurrentAllocatorName".as_ptr(),
        )
    };
    if f.is_null() {
        return None;
    }
    // SAFETY: CPython's `const char *_PyMem_GetCurrentAllocatorName(void)`, called with
    // the GIL held (our caller's); it returns a static string or NULL.
    let name = unsafe {
        let f: extern "C" fn() -> *const c_char = std::mem::transmute(f);
        f()
    };
    // SAFETY: a static NUL-terminated string when not null.
    (!name.is_null()).then(|| unsafe { CStr::from_ptr(name) })
}

/// Before the hooks wrap the allocators (`any_installed`: some of ours still are, then
/// what is beneath them was judged when they were installed): judges whether pymalloc
/// is beneath, and if so wraps the arena allocator.
pub(crate) fn install(_py: pyo3::Python<'_>, any_installed: bool) {
    if any_installed {
        return;
    }
    let pymalloc = matches!(
        current_allocator_name().map(CStr::to_bytes),
        Some(b"pymalloc" | b"pymalloc_debug")
    );
    if !pymalloc {
        PYMALLOC_BENEATH.store(false, Ordering::Release);
        return;
    }
    let mut current = NO_ARENA;
    // SAFETY: the GIL is held (proved by `_py`).
    unsafe { ffi::PyObject_GetArenaAllocator(&mut current) };
    if !is_ours(&current) {
        // SAFETY: our arena functions are not installed, so nothing reads ARENA now.
        unsafe { *ARENA.0.get() = current };
        let mut ours = PyObjectArenaAllocator {
            ctx: our_ctx(),
            alloc: Some(arena_alloc),
            free: Some(arena_free),
        };
        // SAFETY: GIL held; ours forwards to the allocator saved above.
        unsafe { ffi::PyObject_SetArenaAllocator(&mut ours) };
    }
    PYMALLOC_BENEATH.store(true, Ordering::Release);
}

/// After the hooks were removed from every domain: puts the arena allocator back when ours
/// is still the one installed. (Where a hook stays in the chain, wrapped by another
/// tracer, the arena allocator stays too: that hook's frees still skip the mark.)
pub(crate) fn uninstall(_py: pyo3::Python<'_>, any_installed: bool) {
    if any_installed || !PYMALLOC_BENEATH.load(Ordering::Acquire) {
        return;
    }
    let mut current = NO_ARENA;
    // SAFETY: the GIL is held (proved by `_py`).
    unsafe { ffi::PyObject_GetArenaAllocator(&mut current) };
    if is_ours(&current) {
        let mut original = *arena();
        // SAFETY: GIL held; restores exactly the allocator we wrapped.
        unsafe { ffi::PyObject_SetArenaAllocator(&mut original) };
        PYMALLOC_BENEATH.store(false, Ordering::Release);
    }
}
