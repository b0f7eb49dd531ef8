//! Pointing every loaded object's GOT slots for some of the interpreter's own exported
//! functions at memtape's versions of them, and back (the same patcher as for `malloc`).
//! Used for CPython's tracemalloc C API while memtape's tracer runs: extension modules
//! that report their own blocks with `PyTraceMalloc_Track` then report them to memtape.

use std::ffi::CStr;

use super::got_patcher::{self, Patches};
use crate::record::spin_lock::SpinLock;

/// The slots pointed at memtape's functions, one set for the process.
static PATCHES: SpinLock<Patches> = SpinLock::new(Patches::new());

/// Points the slots of every loaded object (other than memtape's own) that call one of
/// `names` at `hooks` (same order), where a slot still holds the interpreter's function
/// of that name. Returns how many slots hold memtape's functions.
pub(crate) fn redirect(names: &[&CStr], hooks: &[usize]) -> usize {
    let reals: Vec<usize> = names
        .iter()
        // SAFETY: dlsym in the global scope with NUL-terminated names.
        .map(|n| unsafe { libc::dlsym(libc::RTLD_DEFAULT, n.as_ptr()) } as usize)
        .collect();
    let mut patches = PATCHES.lock();
    got_patcher::patch_all(&mut patches, names, &reals, hooks, &reals);
    patches.len()
}

/// Gives every slot that still holds memtape's function the interpreter's back.
pub(crate) fn restore() {
    got_patcher::restore_all(&mut PATCHES.lock());
}
