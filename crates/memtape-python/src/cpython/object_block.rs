//! From a Python object to the address of the memory block that holds it.

use pyo3::ffi;
use pyo3::prelude::*;

/// `sizeof(PyGC_Head)` on 64-bit builds.
const GC_HEAD_SIZE: usize = 16;
/// The pre-header of types with a managed `__dict__` (and, from 3.12, managed weakrefs):
/// two pointers before the GC head.
const PREHEADER_SIZE: usize = 16;

const TPFLAGS_MANAGED_DICT: std::ffi::c_ulong = 1 << 4;
#[cfg(Py_3_12)]
const TPFLAGS_MANAGED_WEAKREF: std::ffi::c_ulong = 1 << 3;

/// The start of the block `obj` was allocated in: the object address minus the GC head
/// and the managed pre-header, as CPython lays them out.
///
/// Unlike CPython 3.11's own tracemalloc (gh-101430), the managed-dict pre-header is
/// counted on 3.11 too, so instances of plain classes are found.
pub(crate) fn block_address(obj: &Bound<'_, PyAny>) -> usize {
    // SAFETY: `obj` is a live object (we hold a reference and the GIL).
    unsafe { block_address_of(obj.as_ptr()) }
}

/// [`block_address`] of a raw object pointer.
///
/// # Safety
/// `obj` must be a live, initialised object (its type set), read with the GIL held.
#[inline(always)]
pub(crate) unsafe fn block_address_of(obj: *mut ffi::PyObject) -> usize {
    // SAFETY: the caller's live object, so its type is a live type object and its flags
    // a plain field of it.
    let flags = unsafe { (*ffi::Py_TYPE(obj)).tp_flags };
    let mut pre = 0;
    if flags & ffi::Py_TPFLAGS_HAVE_GC != 0 {
        pre += GC_HEAD_SIZE;
    }
    #[cfg(not(Py_3_12))]
    let managed = TPFLAGS_MANAGED_DICT;
    #[cfg(Py_3_12)]
    let managed = TPFLAGS_MANAGED_DICT | TPFLAGS_MANAGED_WEAKREF;
    if flags & managed != 0 {
        pre += PREHEADER_SIZE;
    }
    (obj as usize).wrapping_sub(pre)
}
