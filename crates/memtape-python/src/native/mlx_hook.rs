//! Putting the forwarding allocator ([`mlx_allocator`](super::mlx_allocator)) in front of
//! MLX's: `libmlx.so` and MLX's Python extension call the exported
//! `mlx::core::allocator::allocator()` through their PLT, so pointing those GOT slots
//! (with the native patcher) at a function that returns the forwarder routes every
//! buffer through it. Stopping writes the slots back; MLX is then untouched.

use std::ffi::{c_void, CStr, CString};

use super::got_patcher::{self, Patches};
use super::{mlx_allocator, mlx_buffer_events, mlx_graph};
use crate::record::spin_lock::SpinLock;

/// `mlx::core::allocator::allocator()`.
const ALLOCATOR: &CStr = c"_ZN3mlx4core9allocator9allocatorEv";
/// `mlx::core::get_cache_memory()`.
const GET_CACHE_MEMORY: &CStr = c"_ZN3mlx4core16get_cache_memoryEv";
/// The vtable functions must live in this object (a layout we checked).
const LIBRARY_NAME: &[u8] = b"libmlx.so";

/// The slots we patched.
static PATCHES: SpinLock<Patches> = SpinLock::new(Patches::new());
/// The forwarder's address, what our `allocator()` returns.
static FORWARDER: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

unsafe extern "C" fn forwarding_allocator() -> *mut c_void {
    FORWARDER.load(std::sync::atomic::Ordering::Acquire) as *mut c_void
}

/// Whether `addr` lies in an object whose file name ends with `libmlx.so`.
fn in_libmlx(addr: usize) -> bool {
    let mut info: libc::Dl_info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    // SAFETY: dladdr only fills `info`; the file name is a C string owned by the loader.
    unsafe {
        libc::dladdr(addr as *const c_void, &mut info) != 0
            && !info.dli_fname.is_null()
            && CStr::from_ptr(info.dli_fname)
                .to_bytes()
                .ends_with(LIBRARY_NAME)
    }
}

extern "C" fn prepare_fork() {
    mlx_buffer_events::prepare_fork();
    mlx_graph::prepare_fork();
}

extern "C" fn after_fork() {
    mlx_graph::after_fork();
    mlx_buffer_events::after_fork();
}

/// Registered on first attach, after the recorder's own handlers: `fork()` runs prepare
/// handlers newest first, so these locks are taken before the recorder's, in the order
/// MLX's calls take them.
fn register_fork_handlers() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: plain handlers that never unwind; a failure (ENOMEM) leaves fork as
        // before MLX was watched.
        unsafe { libc::pthread_atfork(Some(prepare_fork), Some(after_fork), Some(after_fork)) };
    });
}

/// Starts watching MLX's allocator in the loaded `library` (the path of `libmlx.so`).
/// Returns the number of GOT slots now routed through the forwarder.
pub(crate) fn attach(library: &str) -> Result<usize, String> {
    let path = CString::new(library).map_err(|_| format!("bad library path {library:?}"))?;
    // SAFETY: RTLD_NOLOAD returns a handle only to an already loaded object; dlsym reads
    // its symbol table; the reference taken is dropped right after.
    let (real_fn, cache_fn, graph_fns) = unsafe {
        let handle = libc::dlopen(path.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY);
        if handle.is_null() {
            return Err(format!("{library} is not loaded"));
        }
        let real_fn = libc::dlsym(handle, ALLOCATOR.as_ptr()) as usize;
        let cache_fn = libc::dlsym(handle, GET_CACHE_MEMORY.as_ptr()) as usize;
        let graph_fns = mlx_graph::NAMES.map(|n| libc::dlsym(handle, n.as_ptr()) as usize);
        libc::dlclose(handle);
        (real_fn, cache_fn, graph_fns)
    };
    if real_fn == 0 || cache_fn == 0 {
        return Err(format!(
            "{library} exports no mlx::core::allocator::allocator() or get_cache_memory()"
        ));
    }
    // SAFETY: the exported `Allocator& allocator()`, which returns a reference to a static
    // object (constructed on first use).
    let real = unsafe { std::mem::transmute::<usize, unsafe extern "C" fn() -> usize>(real_fn)() };
    // SAFETY: `real` is a C++ object; its first word is its vtable pointer, and the vtable
    // has at least five virtual functions (checked to lie in libmlx below).
    let functions: Vec<usize> = unsafe {
        let vtable = *(real as *const *const usize);
        (0..5).map(|i| *vtable.add(i)).collect()
    };
    if real == 0 || !functions.iter().all(|&f| in_libmlx(f)) {
        return Err("MLX's allocator does not have the layout memtape knows".into());
    }
    register_fork_handlers();
    let mut patches = PATCHES.lock();
    if patches.len() > 0 {
        return Ok(patches.len());
    }
    // SAFETY: checked above: `real` is MLX's allocator with its functions in libmlx, and
    // `cache_fn` is its exported `get_cache_memory`.
    let forwarder = unsafe { mlx_allocator::forwarder(real) };
    FORWARDER.store(forwarder, std::sync::atomic::Ordering::Release);
    // SAFETY: `cache_fn` is MLX's exported `get_cache_memory` (resolved above).
    unsafe { mlx_buffer_events::watch(cache_fn) };
    let mut names = vec![ALLOCATOR];
    let mut reals = vec![real_fn];
    let mut hooks = vec![forwarding_allocator as *const () as usize];
    // Creation lines need every graph function (else buffers keep their eval line).
    if graph_fns.iter().all(|&f| f != 0 && in_libmlx(f)) {
        mlx_graph::watch(&graph_fns);
        names.extend(mlx_graph::NAMES);
        reals.extend(graph_fns);
        hooks.extend(mlx_graph::hook_addresses());
    }
    got_patcher::patch_all(&mut patches, &names, &reals, &hooks, &reals);
    if patches.len() == 0 {
        mlx_buffer_events::unwatch();
        mlx_graph::unwatch();
        return Err("no GOT slot calls mlx::core::allocator::allocator()".into());
    }
    Ok(patches.len())
}

/// Stops watching: the slots get MLX's own function back.
pub(crate) fn detach() {
    let mut patches = PATCHES.lock();
    got_patcher::restore_all(&mut patches);
    mlx_graph::unwatch();
    mlx_buffer_events::unwatch();
}

/// `(watching, patched slots)`.
pub(crate) fn status() -> (bool, usize) {
    let slots = PATCHES.lock().len();
    (mlx_buffer_events::watching(), slots)
}

/// Reports evictions not reported yet.
pub(crate) fn sync() {
    mlx_buffer_events::sync();
}
