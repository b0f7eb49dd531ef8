//! Finding the calling thread's Python thread state from inside an allocation hook,
//! without taking the GIL and without allocating.

use pyo3::ffi;

extern "C" {
    #[cfg(not(Py_3_13))]
    fn _PyThreadState_UncheckedGet() -> *mut ffi::PyThreadState;
    #[cfg(Py_3_13)]
    fn PyThreadState_GetUnchecked() -> *mut ffi::PyThreadState;
}

#[inline(always)]
fn unchecked_get() -> *mut ffi::PyThreadState {
    // SAFETY: both functions only read a runtime/thread-local pointer; they never fail,
    // allocate or take a lock, and may be called with or without the GIL.
    unsafe {
        #[cfg(not(Py_3_13))]
        {
            _PyThreadState_UncheckedGet()
        }
        #[cfg(Py_3_13)]
        {
            PyThreadState_GetUnchecked()
        }
    }
}

/// The thread state of the calling thread, which holds the GIL (MEM and OBJ hooks).
#[inline(always)]
pub(crate) fn attached() -> *mut ffi::PyThreadState {
    unchecked_get()
}

/// The calling thread's thread state if it holds the GIL, else null (RAW hooks, which
/// CPython may call without the GIL, e.g. from `PyGILState_Ensure` or thread teardown).
#[inline]
pub(crate) fn attached_if_holding_gil() -> *mut ffi::PyThreadState {
    let current = unchecked_get();
    #[cfg(not(Py_3_12))]
    {
        // 3.11 keeps one global "current" thread state: the GIL holder's, not
        // necessarily ours. Compare it with this thread's own state.
        if current.is_null() {
            return current;
        }
        // SAFETY: reads this thread's TSS slot; no allocation, no lock, no GIL needed.
        let own = unsafe { ffi::PyGILState_GetThisThreadState() };
        if own == current {
            current
        } else {
            std::ptr::null_mut()
        }
    }
    #[cfg(Py_3_12)]
    {
        // 3.12+: the attached thread state is thread-local; non-null means we hold the GIL.
        current
    }
}
