//! CPython's current-thread-state getter on aarch64: no shape is decoded yet, so the
//! hooks call the getter (one call per hooked allocation; the answers are the same).
//!
//! The shapes to decode would be, for the thread-local holding the thread state:
//! `mrs x0, tpidr_el0 ; add x0, x0, #hi, lsl #12 ; add x0, x0, #lo ; ldr x0, [x0] ; ret`
//! (local exec, an executable with libpython linked in), `adrp`/`ldr` of the GOT's offset
//! then `mrs`/`ldr` (initial exec), and the TLS descriptor call (`adrp`/`ldr`/`add`/`blr`,
//! general dynamic, libpython as a shared library), whose descriptor replaces x86-64's
//! `__tls_get_addr` index. Before 3.12, `adrp`/`ldr` of `_PyRuntime`'s word.

use std::ops::Range;

/// Where static TLS lies from the thread pointer: aarch64 keeps it after the 16-byte
/// thread control block (TLS variant I).
#[cfg_attr(not(Py_3_12), allow(dead_code))]
pub(crate) const STATIC_TLS: Range<isize> = 16..(1 << 20);

/// The address of `_PyRuntime`'s current-thread-state word that the getter's `code`
/// (found at `at`) loads: not decoded on aarch64.
#[cfg_attr(Py_3_12, allow(dead_code))]
pub(crate) fn decode_runtime_word(
    _code: &[u8],
    _at: usize,
    _read_word: impl Fn(usize) -> Option<usize>,
) -> Option<usize> {
    None
}

/// The address of the TLS index the getter's `code` hands to `__tls_get_addr`: aarch64
/// uses TLS descriptors instead, not decoded.
#[cfg_attr(not(Py_3_12), allow(dead_code))]
pub(crate) fn decode_tls_index(_code: &[u8], _at: usize) -> Option<usize> {
    None
}

/// The offset from the thread pointer of the thread-local the getter's `code` loads:
/// not decoded on aarch64.
#[cfg_attr(not(Py_3_12), allow(dead_code))]
pub(crate) fn decode_tp_offset(
    _code: &[u8],
    _at: usize,
    _read_word: impl Fn(usize) -> Option<usize>,
) -> Option<isize> {
    None
}
