//! `dlopen`/`dlmopen` hooks: objects loaded while tracing get their slots patched too.
//!
//! The dynamic linker searches a bare library name along the *caller's* RUNPATH (with
//! `$ORIGIN` expanded for the caller), and it finds the caller from the return address.
//! Called from our hook, it would search memtape's paths instead. So a small assembly
//! entry passes the real return address along, and for a bare name that is not loaded
//! yet we search the caller's own path list (`dlinfo(RTLD_DI_SERINFO)` on the caller's
//! object) and open the first file that exists by its full path.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

use super::hooked_functions::{f, real};

/// What runs after an object was loaded through a hook (patching its slots): set by
/// whoever patches before the hooks can be reached, so that this file, which the hooks'
/// table names, does not depend on patching in turn.
static AFTER_LOAD: OnceLock<fn()> = OnceLock::new();

/// Sets what runs after each successful load through the hooks (first call wins).
pub(crate) fn on_load(after: fn()) {
    let _ = AFTER_LOAD.set(after);
}

fn loaded() {
    if let Some(after) = AFTER_LOAD.get() {
        after();
    }
}

type DlopenFn = unsafe extern "C" fn(*const c_char, c_int) -> *mut c_void;
type DlmopenFn = unsafe extern "C" fn(libc::Lmid_t, *const c_char, c_int) -> *mut c_void;

// The entries GOT slots for `dlopen` and `dlmopen` are pointed at (`dlopen_entry()`,
// `dlmopen_entry()`): the architecture's trampolines, which pass the caller's return
// address on to `dlopen_from` or `dlmopen_from` as one more argument.
crate::arch::dlopen_trampolines!(dlopen_from, dlmopen_from);

/// `dlopen(file, flags)` called from `caller` (a return address), through the trampoline.
unsafe extern "C" fn dlopen_from(
    file: *const c_char,
    flags: c_int,
    caller: *const c_void,
) -> *mut c_void {
    // SAFETY: this hook is reachable only once REAL[DLOPEN] was resolved.
    let real = unsafe { real::<DlopenFn>(f::DLOPEN) };
    // SAFETY: the caller's arguments, passed on; `caller` is a return address.
    let handle = unsafe { open_for(real, file, flags, caller) };
    if !handle.is_null() {
        loaded();
    }
    handle
}

/// `dlmopen(lmid, file, flags)` called from `caller`, through the trampoline.
unsafe extern "C" fn dlmopen_from(
    lmid: libc::Lmid_t,
    file: *const c_char,
    flags: c_int,
    _caller: *const c_void,
) -> *mut c_void {
    // SAFETY: reachable only once REAL[DLMOPEN] was resolved; arguments passed on. A new
    // namespace has its own libc, whose slots never hold our libc's functions, so only
    // objects of the base namespace are patched.
    let handle = unsafe { real::<DlmopenFn>(f::DLMOPEN)(lmid, file, flags) };
    if !handle.is_null() {
        loaded();
    }
    handle
}

/// `dlopen` as if called from `caller`.
///
/// # Safety
/// `file` is null or a C string; `real` is libc's `dlopen`.
unsafe fn open_for(
    real: DlopenFn,
    file: *const c_char,
    flags: c_int,
    caller: *const c_void,
) -> *mut c_void {
    // SAFETY: `file` is the caller's C string (checked for null first).
    let bare = !file.is_null() && unsafe { !CStr::from_ptr(file).to_bytes().contains(&b'/') };
    // SAFETY: libc's dlopen with the caller's arguments.
    if !bare || unsafe { !real(file, flags | libc::RTLD_NOLOAD).is_null() } {
        // A path, or already loaded: the caller's search path plays no part. (A
        // successful RTLD_NOLOAD took a reference, which the call below takes again.)
        let handle = unsafe { real(file, flags) };
        if bare && !handle.is_null() {
            // SAFETY: drops the reference the RTLD_NOLOAD probe took.
            unsafe { libc::dlclose(handle) };
        }
        return handle;
    }
    // SAFETY: `file` is a non-null C string (bare implies non-null).
    let name = unsafe { CStr::from_ptr(file) }.to_bytes();
    for dir in caller_search_path(caller) {
        let mut path = dir;
        path.push(b'/');
        path.extend_from_slice(name);
        path.push(0);
        let path_ptr = path.as_ptr().cast::<c_char>();
        // SAFETY: `path` is NUL-terminated.
        if unsafe { libc::access(path_ptr, libc::F_OK) } != 0 {
            continue;
        }
        // SAFETY: libc's dlopen with a full path.
        let handle = unsafe { real(path_ptr, flags) };
        if !handle.is_null() {
            return handle;
        }
    }
    // SAFETY: libc's dlopen with the caller's arguments (its own error message).
    unsafe { real(file, flags) }
}

#[repr(C)]
struct SerPath {
    name: *const c_char,
    flags: u32,
}

#[repr(C)]
struct SerInfo {
    size: usize,
    count: u32,
    paths: [SerPath; 1],
}

const RTLD_DI_SERINFOSIZE: c_int = 5;
const RTLD_DL_LINKMAP: c_int = 2;

/// The directories the dynamic linker searches for a bare name opened by the object
/// containing `caller` (its RPATH, LD_LIBRARY_PATH, RUNPATH, the system directories).
fn caller_search_path(caller: *const c_void) -> Vec<Vec<u8>> {
    let mut info: libc::Dl_info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    let mut map: *mut c_void = std::ptr::null_mut();
    // SAFETY: dladdr1 writes the Dl_info and the link map of the object containing
    // `caller`; a link map is a valid handle for dlinfo.
    unsafe {
        if libc::dladdr1(
            caller,
            &mut info,
            std::ptr::from_mut(&mut map).cast(),
            RTLD_DL_LINKMAP,
        ) == 0
            || map.is_null()
        {
            return Vec::new();
        }
        let mut probe = SerInfo {
            size: 0,
            count: 0,
            paths: [SerPath {
                name: std::ptr::null(),
                flags: 0,
            }],
        };
        if libc::dlinfo(
            map,
            RTLD_DI_SERINFOSIZE,
            std::ptr::from_mut(&mut probe).cast(),
        ) != 0
        {
            return Vec::new();
        }
        // u64 words keep the buffer aligned for the struct.
        let mut buffer = vec![0u64; probe.size.div_ceil(8).max(4)];
        let full = buffer.as_mut_ptr().cast::<SerInfo>();
        (*full).size = probe.size;
        (*full).count = probe.count;
        if libc::dlinfo(map, libc::RTLD_DI_SERINFO, full.cast()) != 0 {
            return Vec::new();
        }
        let paths = std::ptr::addr_of!((*full).paths).cast::<SerPath>();
        (0..(*full).count as usize)
            .filter_map(|i| {
                let p = &*paths.add(i);
                (!p.name.is_null()).then(|| CStr::from_ptr(p.name).to_bytes().to_vec())
            })
            .collect()
    }
}
