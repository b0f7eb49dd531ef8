//! The C ABI (`include/memtape.h`): a table of function pointers in the PyCapsule
//! `memtape._native._C_API`, so C, C++ and Rust frameworks report events without going
//! through Python. Every entry point is callable from any thread, never takes the GIL,
//! and never unwinds into C.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use memtape_core::Action;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

use crate::record::framework_events::{self, FrameworkError, Report};

/// Must match `MEMTAPE_ABI_VERSION` in include/memtape.h.
const ABI_VERSION: u32 = 1;
const CAPSULE_NAME: &CStr = c"memtape._native._C_API";
const OK: c_int = 0;
const EINVAL: c_int = -1;
const EINTERNAL: c_int = -4;
const SAME_AS_SIZE: u64 = u64::MAX;

/// Mirror of `memtape_api` in include/memtape.h.
#[repr(C)]
pub(crate) struct MemtapeApi {
    abi_version: u32,
    struct_size: u32,
    capture_traceback: extern "C" fn() -> u64,
    op_context_enter: extern "C" fn(*const c_char, u64) -> c_int,
    op_context_exit: extern "C" fn() -> c_int,
    record_allocator_event: extern "C" fn(c_int, u64, u64, u64, i32, u64) -> c_int,
    last_error: extern "C" fn() -> *const c_char,
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_error(message: &str) {
    let text = CString::new(message.replace('\0', " ")).unwrap_or_default();
    let _ = LAST_ERROR.try_with(|e| {
        if let Ok(mut e) = e.try_borrow_mut() {
            *e = text;
        }
    });
}

/// Runs `f`, turning errors and panics into a C error code with a message.
fn guarded(f: impl FnOnce() -> Result<(), FrameworkError>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => {
            set_error("");
            OK
        }
        Ok(Err(e)) => {
            set_error(&e.to_string());
            e.code()
        }
        Err(_) => {
            set_error("memtape failed internally; the event was not recorded");
            EINTERNAL
        }
    }
}

extern "C" fn capture_traceback() -> u64 {
    catch_unwind(framework_events::capture_traceback_now).unwrap_or(0)
}

extern "C" fn op_context_enter(name: *const c_char, traceback: u64) -> c_int {
    if name.is_null() {
        set_error("op_context_enter: name is NULL");
        return EINVAL;
    }
    // SAFETY: the caller passes a NUL-terminated string (the header's contract), checked
    // for NULL above; we only read it during this call.
    let name = unsafe { CStr::from_ptr(name) };
    let Ok(name) = name.to_str() else {
        set_error("op_context_enter: name is not valid UTF-8");
        return EINVAL;
    };
    guarded(|| framework_events::push_op(name, traceback))
}

extern "C" fn op_context_exit() -> c_int {
    guarded(framework_events::pop_op)
}

extern "C" fn record_allocator_event(
    action: c_int,
    address: u64,
    size: u64,
    requested_size: u64,
    device: i32,
    stream: u64,
) -> c_int {
    let Some(action) = u8::try_from(action)
        .ok()
        .and_then(Action::from_code)
        .filter(|a| !a.is_python_heap())
    else {
        set_error(&format!(
            "record_allocator_event: unknown action {action}: expected MEMTAPE_ALLOC_NEW (2) to MEMTAPE_FREE_CACHE_TO_OS (8)"
        ));
        return EINVAL;
    };
    let requested_size = (requested_size != SAME_AS_SIZE).then_some(requested_size);
    guarded(|| {
        framework_events::record_allocator_event_checked(&Report {
            action,
            addr: address,
            size,
            requested_size,
            device,
            stream,
        })
    })
}

extern "C" fn last_error() -> *const c_char {
    // The pointer stays valid until this thread's next memtape call replaces the string.
    LAST_ERROR
        .try_with(|e| e.borrow().as_ptr())
        .unwrap_or(c"".as_ptr())
}

/// Adds the capsule to the module.
pub(crate) fn export(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let api = MemtapeApi {
        abi_version: ABI_VERSION,
        struct_size: std::mem::size_of::<MemtapeApi>() as u32,
        capture_traceback,
        op_context_enter,
        op_context_exit,
        record_allocator_event,
        last_error,
    };
    let capsule = PyCapsule::new_with_value(m.py(), api, CAPSULE_NAME)?;
    m.add("_C_API", capsule)
}
