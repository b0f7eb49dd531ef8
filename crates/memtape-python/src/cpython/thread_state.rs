//! Finding the calling thread's Python thread state from inside an allocation hook,
//! without taking the GIL and without allocating.
//!
//! Before 3.12 the current thread state is one word of `_PyRuntime`, which the exported
//! `_PyThreadState_UncheckedGet` loads: a call through the PLT for three instructions, on
//! every hooked allocation. [`locate`] reads that function's code once, before the hooks
//! are installed, to find the word (`runtime_word`), and the hooks then load it
//! themselves. Where the code has another shape, they keep calling the function.

use pyo3::ffi;

extern "C" {
    #[cfg(not(Py_3_13))]
    fn _PyThreadState_UncheckedGet() -> *mut ffi::PyThreadState;
    #[cfg(Py_3_13)]
    fn PyThreadState_GetUnchecked() -> *mut ffi::PyThreadState;
}

#[inline(always)]
fn call_unchecked_get() -> *mut ffi::PyThreadState {
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

#[inline(always)]
fn unchecked_get() -> *mut ffi::PyThreadState {
    #[cfg(not(Py_3_12))]
    if let Some(current) = runtime_word::read() {
        return current;
    }
    call_unchecked_get()
}

/// Finds the word `_PyThreadState_UncheckedGet` reads, so that the hooks read it without
/// the call (3.10 and 3.11 on x86-64; elsewhere nothing to do). Called with the GIL held,
/// before the hooks are installed; once found, the word is kept for the process.
pub(crate) fn locate(_py: pyo3::Python<'_>) {
    #[cfg(all(not(Py_3_12), target_arch = "x86_64"))]
    runtime_word::locate(call_unchecked_get);
}

/// Whether the hooks read the current thread state's word themselves (see [`locate`]).
pub(crate) fn read_directly() -> bool {
    #[cfg(not(Py_3_12))]
    {
        runtime_word::read().is_some()
    }
    #[cfg(Py_3_12)]
    {
        false
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

#[cfg(not(Py_3_12))]
mod runtime_word {
    //! The word of `_PyRuntime` that holds the current thread state (3.10 and 3.11).

    use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

    use pyo3::ffi;

    /// The word's address once [`locate`] has found and checked it; null until then.
    static WORD: AtomicPtr<AtomicUsize> = AtomicPtr::new(std::ptr::null_mut());

    /// The current thread state, read from the word; `None` while it is not located.
    #[inline(always)]
    pub(super) fn read() -> Option<*mut ffi::PyThreadState> {
        let word = WORD.load(Ordering::Relaxed);
        // SAFETY: when not null, `word` is the address inside `_PyRuntime` (a static of
        // libpython, alive as long as the process) that `_PyThreadState_UncheckedGet`
        // loads with a relaxed atomic load; `locate` checked that both give one value.
        (!word.is_null()).then(|| unsafe { (*word).load(Ordering::Relaxed) } as *mut _)
    }

    /// The address of the word that a function of one of these shapes (x86-64) returns:
    ///
    /// ```text
    /// [endbr64] mov disp(%rip),%rax                                     ; ret
    /// [endbr64] mov disp(%rip),%rax ; mov off(%rax),%rax  (off: 8 or 32 bits) ; ret
    /// ```
    ///
    /// The first loads the word itself; the second loads `_PyRuntime`'s address from the
    /// GOT, read with `read_word`. `code` is the function's first bytes, found at `at`.
    pub(super) fn decode(
        code: &[u8],
        at: usize,
        read_word: impl Fn(usize) -> Option<usize>,
    ) -> Option<usize> {
        const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];
        const MOV_RIP_RAX: [u8; 3] = [0x48, 0x8b, 0x05];
        const RET: u8 = 0xc3;
        let (code, at) = match code.strip_prefix(&ENDBR64) {
            Some(rest) => (rest, at + ENDBR64.len()),
            None => (code, at),
        };
        let after = code.strip_prefix(&MOV_RIP_RAX)?;
        let disp = i32::from_le_bytes(after.get(..4)?.try_into().ok()?);
        let loaded = (at + MOV_RIP_RAX.len() + 4).wrapping_add_signed(disp as isize);
        match after[4..] {
            [RET, ..] => Some(loaded),
            [0x48, 0x8b, 0x40, off, RET, ..] => {
                Some(read_word(loaded)?.wrapping_add_signed(off as i8 as isize))
            }
            [0x48, 0x8b, 0x80, o0, o1, o2, o3, RET, ..] => {
                let off = i32::from_le_bytes([o0, o1, o2, o3]);
                Some(read_word(loaded)?.wrapping_add_signed(off as isize))
            }
            _ => None,
        }
    }

    /// The base address of the loaded object that holds `address`, if any.
    fn object_of(address: usize) -> Option<usize> {
        // SAFETY: `dladdr` only looks `address` up in the loader's list of objects and
        // fills `info`; it dereferences nothing at `address`.
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        let found = unsafe { libc::dladdr(address as *const libc::c_void, &mut info) };
        (found != 0 && !info.dli_fbase.is_null()).then_some(info.dli_fbase as usize)
    }

    /// Finds the word from `_PyThreadState_UncheckedGet`'s code and keeps it when reading
    /// it gives what `call` (the function itself) returns, with the GIL held.
    pub(super) fn locate(call: fn() -> *mut ffi::PyThreadState) {
        if !WORD.load(Ordering::Acquire).is_null() {
            return;
        }
        // SAFETY: dlsym in the global scope with a NUL-terminated name.
        let function =
            unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"_PyThreadState_UncheckedGet".as_ptr()) };
        let Some(home) = (!function.is_null())
            .then(|| object_of(function as usize))
            .flatten()
        else {
            return;
        };
        // SAFETY: the function's first 19 bytes (the longest shape `decode` knows) are
        // code of libpython's mapped, readable text; a shorter function is followed by
        // more text or padding within the same mapping.
        let code = unsafe { std::slice::from_raw_parts(function.cast::<u8>(), 19) };
        // Every address read or kept must lie in the object that holds the function
        // (its GOT, `_PyRuntime`).
        let in_home = |address: usize| object_of(address) == Some(home);
        let read_word = |address: usize| {
            // SAFETY: `address` lies in the function's own loaded object (checked) and is
            // the GOT entry its code loads, a mapped, readable, aligned word.
            in_home(address).then(|| unsafe { *(address as *const usize) })
        };
        let Some(word) = decode(code, function as usize, read_word) else {
            return;
        };
        if !in_home(word) || word % std::mem::align_of::<usize>() != 0 {
            return;
        }
        let word = word as *mut AtomicUsize;
        // SAFETY: an aligned word of the function's object that its code loads.
        let read = unsafe { (*word).load(Ordering::Relaxed) };
        let called = call();
        if !called.is_null() && read == called as usize {
            WORD.store(word, Ordering::Release);
        }
    }

    #[cfg(test)]
    mod tests {
        use super::decode;

        const AT: usize = 0x1000;

        #[test]
        fn the_word_itself() {
            // mov 0x10(%rip),%rax ; ret
            let code = [0x48, 0x8b, 0x05, 0x10, 0, 0, 0, 0xc3];
            assert_eq!(decode(&code, AT, |_| None), Some(AT + 7 + 0x10));
        }

        #[test]
        fn through_the_got_after_endbr64() {
            // endbr64 ; mov -0x20(%rip),%rax ; mov 0x240(%rax),%rax ; ret
            let code = [
                0xf3, 0x0f, 0x1e, 0xfa, 0x48, 0x8b, 0x05, 0xe0, 0xff, 0xff, 0xff, 0x48, 0x8b, 0x80,
                0x40, 0x02, 0, 0, 0xc3,
            ];
            let got = AT + 4 + 7 - 0x20;
            let read = |a: usize| (a == got).then_some(0x50_0000);
            assert_eq!(decode(&code, AT, read), Some(0x50_0240));
        }

        #[test]
        fn through_the_got_with_a_byte_offset() {
            let code = [0x48, 0x8b, 0x05, 0, 0, 0, 0, 0x48, 0x8b, 0x40, 0x18, 0xc3];
            assert_eq!(decode(&code, AT, |_| Some(0x9000)), Some(0x9018));
        }

        #[test]
        fn other_code_is_not_decoded() {
            // sub $8,%rsp (3.12's shape, a call to __tls_get_addr follows)
            assert_eq!(
                decode(&[0x48, 0x83, 0xec, 0x08, 0x66, 0x48], AT, |_| None),
                None
            );
            // a load followed by something other than ret
            let code = [0x48, 0x8b, 0x05, 0, 0, 0, 0, 0x48, 0x85, 0xc0, 0xc3];
            assert_eq!(decode(&code, AT, |_| Some(0)), None);
            // the GOT entry could not be read
            let code = [0x48, 0x8b, 0x05, 0, 0, 0, 0, 0x48, 0x8b, 0x40, 0x18, 0xc3];
            assert_eq!(decode(&code, AT, |_| None), None);
            assert_eq!(decode(&[0x48, 0x8b], AT, |_| None), None);
        }
    }
}
