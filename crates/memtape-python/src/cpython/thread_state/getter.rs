//! CPython's getter of the current thread state: the call itself, and where its code is,
//! for [`super::locate`] to decode.

use pyo3::ffi;

extern "C" {
    #[cfg(not(Py_3_13))]
    fn _PyThreadState_UncheckedGet() -> *mut ffi::PyThreadState;
    #[cfg(Py_3_13)]
    fn PyThreadState_GetUnchecked() -> *mut ffi::PyThreadState;
}

/// The getter's answer, through the call.
#[inline(always)]
pub(super) fn call_unchecked_get() -> *mut ffi::PyThreadState {
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

/// The getter's code, in the object (libpython or the executable) that holds it.
pub(super) struct Getter {
    /// The getter's address.
    pub(super) at: usize,
    /// The base address of the object that holds it.
    home: usize,
}

impl Getter {
    /// The bytes read from the getter's start: at least its longest known shape.
    const CODE_LEN: usize = 24;

    pub(super) fn find() -> Option<Self> {
        #[cfg(not(Py_3_13))]
        let name = c"_PyThreadState_UncheckedGet";
        #[cfg(Py_3_13)]
        let name = c"PyThreadState_GetUnchecked";
        // SAFETY: dlsym in the global scope with a NUL-terminated name.
        let at = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) } as usize;
        let home = (at != 0).then(|| object_of(at)).flatten()?;
        Some(Self { at, home })
    }

    pub(super) fn code(&self) -> &'static [u8] {
        // SAFETY: the getter's first bytes are code of its object's mapped, readable
        // text; a function shorter than `CODE_LEN` is followed by more text or padding
        // of the same mapping (functions are aligned to 16 bytes, text ends on a page).
        unsafe { std::slice::from_raw_parts(self.at as *const u8, Self::CODE_LEN) }
    }

    /// Whether `address` is an aligned word of the getter's own object.
    pub(super) fn holds_word(&self, address: usize) -> bool {
        address % std::mem::align_of::<usize>() == 0 && object_of(address) == Some(self.home)
    }

    /// The word at `address` (a GOT entry the getter's code loads), if it is one of the
    /// getter's own object.
    pub(super) fn read_word(&self, address: usize) -> Option<usize> {
        // SAFETY: an aligned word inside the getter's loaded object (checked): its GOT,
        // mapped and readable.
        self.holds_word(address)
            .then(|| unsafe { *(address as *const usize) })
    }
}

/// The base address of the loaded object that holds `address`, if any.
fn object_of(address: usize) -> Option<usize> {
    // SAFETY: `Dl_info` is pointers only, for which all-zero bytes are valid (null).
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: `dladdr` only looks `address` up in the loader's list of objects and fills
    // `info`; it dereferences nothing at `address`.
    let found = unsafe { libc::dladdr(address as *const libc::c_void, &mut info) };
    (found != 0 && !info.dli_fbase.is_null()).then_some(info.dli_fbase as usize)
}
