//! The shapes of CPython's current-thread-state getter that `cpython::thread_state`
//! knows (x86-64), decoded into where each loads from. Plain byte reading, built for
//! every version so that its tests run wherever the crate's do; the version in use takes
//! one of them.

use std::ops::Range;

/// Where static TLS lies from the thread pointer: x86-64 keeps it just below (TLS
/// variant II); an offset outside is not believed.
#[cfg_attr(not(Py_3_12), allow(dead_code))]
pub(crate) const STATIC_TLS: Range<isize> = -(1 << 20)..0;

/// The address of the word that a function of one of these shapes (x86-64) returns:
///
/// ```text
/// [endbr64] mov disp(%rip),%rax                                     ; ret
/// [endbr64] mov disp(%rip),%rax ; mov off(%rax),%rax  (off: 8 or 32 bits) ; ret
/// ```
///
/// The first loads the word itself; the second loads `_PyRuntime`'s address from the
/// GOT, read with `read_word`. `code` is the function's first bytes, found at `at`.
#[cfg_attr(Py_3_12, allow(dead_code))]
pub(crate) fn decode_runtime_word(
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

/// The address of the `tls_index` that a getter of this shape (x86-64, the general
/// dynamic model) hands to `__tls_get_addr`:
///
/// ```text
/// [endbr64] [sub $8,%rsp] data16 lea disp(%rip),%rdi ; data16 data16 rex.W call ...
/// ```
///
/// `code` is the getter's first bytes, found at `at`.
#[cfg_attr(not(Py_3_12), allow(dead_code))]
pub(crate) fn decode_tls_index(code: &[u8], at: usize) -> Option<usize> {
    const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];
    const SUB_8_RSP: [u8; 4] = [0x48, 0x83, 0xec, 0x08];
    const LEA_RIP_RDI: [u8; 4] = [0x66, 0x48, 0x8d, 0x3d];
    const CALL: [u8; 4] = [0x66, 0x66, 0x48, 0xe8];
    let mut rest = code;
    let mut at = at;
    for prefix in [&ENDBR64, &SUB_8_RSP] {
        if let Some(after) = rest.strip_prefix(prefix) {
            rest = after;
            at += prefix.len();
        }
    }
    let after = rest.strip_prefix(&LEA_RIP_RDI)?;
    let disp = i32::from_le_bytes(after.get(..4)?.try_into().ok()?);
    after[4..].strip_prefix(&CALL)?;
    Some((at + LEA_RIP_RDI.len() + 4).wrapping_add_signed(disp as isize))
}

/// The offset from the thread pointer of the word that a getter of one of these shapes
/// (x86-64) returns, the thread-local being in static TLS:
///
/// ```text
/// [endbr64] mov %fs:disp32,%rax                                    ; ret  (local exec)
/// [endbr64] mov disp(%rip),%rax ; mov %fs:(%rax),%rax              ; ret  (initial exec)
/// ```
///
/// The first is the getter of an executable that defines the thread-local itself
/// (Debian's `python3.X`, with libpython linked in); the second loads the offset from the
/// GOT, read with `read_word`. `code` is the getter's first bytes, found at `at`.
#[cfg_attr(not(Py_3_12), allow(dead_code))]
pub(crate) fn decode_tp_offset(
    code: &[u8],
    at: usize,
    read_word: impl Fn(usize) -> Option<usize>,
) -> Option<isize> {
    const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];
    const MOV_FS_ABS_RAX: [u8; 5] = [0x64, 0x48, 0x8b, 0x04, 0x25];
    const MOV_RIP_RAX: [u8; 3] = [0x48, 0x8b, 0x05];
    const MOV_FS_RAX_RAX: [u8; 4] = [0x64, 0x48, 0x8b, 0x00];
    const RET: u8 = 0xc3;
    let (code, at) = match code.strip_prefix(&ENDBR64) {
        Some(rest) => (rest, at + ENDBR64.len()),
        None => (code, at),
    };
    if let Some(after) = code.strip_prefix(&MOV_FS_ABS_RAX) {
        let disp = i32::from_le_bytes(after.get(..4)?.try_into().ok()?);
        return (after.get(4) == Some(&RET)).then_some(disp as isize);
    }
    let after = code.strip_prefix(&MOV_RIP_RAX)?;
    let disp = i32::from_le_bytes(after.get(..4)?.try_into().ok()?);
    let rest = after[4..].strip_prefix(&MOV_FS_RAX_RAX)?;
    if rest.first() != Some(&RET) {
        return None;
    }
    let got = (at + MOV_RIP_RAX.len() + 4).wrapping_add_signed(disp as isize);
    Some(read_word(got)? as isize)
}

#[cfg(test)]
mod tests {
    use super::*;
    const AT: usize = 0x1000;

    #[test]
    fn the_word_itself() {
        // mov 0x10(%rip),%rax ; ret
        let code = [0x48, 0x8b, 0x05, 0x10, 0, 0, 0, 0xc3];
        assert_eq!(
            decode_runtime_word(&code, AT, |_| None),
            Some(AT + 7 + 0x10)
        );
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
        assert_eq!(decode_runtime_word(&code, AT, read), Some(0x50_0240));
    }

    #[test]
    fn through_the_got_with_a_byte_offset() {
        let code = [0x48, 0x8b, 0x05, 0, 0, 0, 0, 0x48, 0x8b, 0x40, 0x18, 0xc3];
        assert_eq!(
            decode_runtime_word(&code, AT, |_| Some(0x9000)),
            Some(0x9018)
        );
    }

    #[test]
    fn other_code_is_not_a_runtime_word() {
        // sub $8,%rsp (3.12's shape, a call to __tls_get_addr follows)
        assert_eq!(
            decode_runtime_word(&[0x48, 0x83, 0xec, 0x08, 0x66, 0x48], AT, |_| None),
            None
        );
        // a load followed by something other than ret
        let code = [0x48, 0x8b, 0x05, 0, 0, 0, 0, 0x48, 0x85, 0xc0, 0xc3];
        assert_eq!(decode_runtime_word(&code, AT, |_| Some(0)), None);
        // the GOT entry could not be read
        let code = [0x48, 0x8b, 0x05, 0, 0, 0, 0, 0x48, 0x8b, 0x40, 0x18, 0xc3];
        assert_eq!(decode_runtime_word(&code, AT, |_| None), None);
        assert_eq!(decode_runtime_word(&[0x48, 0x8b], AT, |_| None), None);
    }

    #[test]
    fn the_general_dynamic_sequence() {
        // sub $8,%rsp ; data16 lea 0x100(%rip),%rdi ; data16 data16 rex.W call
        let code = [
            0x48, 0x83, 0xec, 0x08, 0x66, 0x48, 0x8d, 0x3d, 0, 1, 0, 0, 0x66, 0x66, 0x48, 0xe8, 0,
            0, 0, 0,
        ];
        assert_eq!(
            decode_tls_index(&code, 0x1000),
            Some(0x1000 + 4 + 8 + 0x100)
        );
        let mut with_endbr = vec![0xf3, 0x0f, 0x1e, 0xfa];
        with_endbr.extend_from_slice(&code);
        assert_eq!(
            decode_tls_index(&with_endbr, 0x1000),
            Some(0x1000 + 8 + 8 + 0x100)
        );
    }

    #[test]
    fn the_local_exec_load() {
        // endbr64 ; mov %fs:0xffffffffffffffe8,%rax ; ret (Debian's python3.14)
        let code = [
            0xf3, 0x0f, 0x1e, 0xfa, 0x64, 0x48, 0x8b, 0x04, 0x25, 0xe8, 0xff, 0xff, 0xff, 0xc3,
        ];
        assert_eq!(decode_tp_offset(&code, AT, |_| None), Some(-0x18));
    }

    #[test]
    fn the_initial_exec_load_through_the_got() {
        // mov 0x20(%rip),%rax ; mov %fs:(%rax),%rax ; ret
        let code = [
            0x48, 0x8b, 0x05, 0x20, 0, 0, 0, 0x64, 0x48, 0x8b, 0x00, 0xc3,
        ];
        let got = AT + 7 + 0x20;
        let read = |a: usize| (a == got).then_some((-0x40isize) as usize);
        assert_eq!(decode_tp_offset(&code, AT, read), Some(-0x40));
    }

    #[test]
    fn other_code_is_not_a_thread_pointer_load() {
        // the load without its ret
        let code = [0x64, 0x48, 0x8b, 0x04, 0x25, 0xe8, 0xff, 0xff, 0xff, 0x90];
        assert_eq!(decode_tp_offset(&code, AT, |_| None), None);
        // 3.11's shape: a load from the runtime, not through %fs
        let code = [0x48, 0x8b, 0x05, 0, 0, 0, 0, 0x48, 0x8b, 0x40, 0x18, 0xc3];
        assert_eq!(decode_tp_offset(&code, AT, |_| Some(0)), None);
        // the general dynamic sequence
        let code = [
            0x66, 0x48, 0x8d, 0x3d, 0, 1, 0, 0, 0x66, 0x66, 0x48, 0xe8, 0, 0, 0, 0,
        ];
        assert_eq!(decode_tp_offset(&code, AT, |_| None), None);
        assert_eq!(decode_tp_offset(&[0x64, 0x48], AT, |_| None), None);
    }

    #[test]
    fn other_code_is_not_a_tls_index() {
        // 3.11's shape
        assert_eq!(
            decode_tls_index(&[0x48, 0x8b, 0x05, 0, 0, 0, 0, 0xc3], 0),
            None
        );
        // the lea without the call that must follow it
        let code = [0x66, 0x48, 0x8d, 0x3d, 0, 1, 0, 0, 0xc3, 0, 0, 0];
        assert_eq!(decode_tls_index(&code, 0), None);
        assert_eq!(decode_tls_index(&[0x66, 0x48, 0x8d], 0), None);
    }
}
