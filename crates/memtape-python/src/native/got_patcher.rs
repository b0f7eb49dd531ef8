//! Pointing GOT slots at our hooks and back.
//!
//! A slot is patched only when it still holds the real libc function (or, bound lazily,
//! the object's own PLT stub for a symbol that resolves to libc's function): a slot the
//! program or another tool re-pointed is left alone. Stop writes the original back only
//! where the slot still holds our hook and its object is still loaded. Slots in RELRO are
//! written under a temporary `mprotect` and made read-only again.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::elf_slots::{self, Slot};

const PAGE: usize = 4096;

/// One patched slot.
pub(crate) struct Patch {
    slot: Slot,
    original: usize,
    hook: usize,
}

/// Every slot we patched, oldest first.
pub(crate) struct Patches {
    patches: Vec<Patch>,
}

impl Patches {
    pub(crate) const fn new() -> Self {
        Self {
            patches: Vec::new(),
        }
    }

    /// How many slots hold our hooks.
    pub(crate) fn len(&self) -> usize {
        self.patches.len()
    }
}

/// The page range `[lo, hi)` the loader made read-only for `relro`: whole pages only
/// (a partial last page stays writable with the data after it).
fn relro_pages(relro: (usize, usize)) -> (usize, usize) {
    (relro.0 & !(PAGE - 1), relro.1 & !(PAGE - 1))
}

/// Writes `value` into `slot`, lifting RELRO protection for the write.
///
/// # Safety
/// `slot.addr` must be a live, aligned GOT slot of a loaded object.
unsafe fn write(slot: &Slot, value: usize) -> bool {
    let protected = slot
        .relro
        .map(relro_pages)
        .is_some_and(|(lo, hi)| (lo..hi).contains(&slot.addr));
    let page = (slot.addr & !(PAGE - 1)) as *mut libc::c_void;
    // SAFETY: `page` is the mapped page holding the slot; making it writable for one
    // store and read-only again is what the loader did when it applied RELRO.
    unsafe {
        if protected && libc::mprotect(page, PAGE, libc::PROT_READ | libc::PROT_WRITE) != 0 {
            return false;
        }
        // Other threads may call through the slot meanwhile: an aligned word store is
        // atomic, so they see either the old or the new function.
        (*(slot.addr as *const AtomicUsize)).store(value, Ordering::Release);
        if protected {
            libc::mprotect(page, PAGE, libc::PROT_READ);
        }
    }
    true
}

/// # Safety
/// `slot.addr` must be a live, aligned GOT slot.
unsafe fn read(slot: &Slot) -> usize {
    // SAFETY: guaranteed by the caller.
    unsafe { (*(slot.addr as *const AtomicUsize)).load(Ordering::Acquire) }
}

/// Whether a slot holding `current` may be pointed at our hook for `real`.
fn patchable(slot: &Slot, current: usize, real: usize, hook: usize, global: usize) -> bool {
    if current == hook || real == 0 {
        return false;
    }
    if current == real {
        return true;
    }
    // Not bound yet: the slot points into its own object (the PLT stub), and the symbol
    // will resolve to libc's function. A definition inside the object itself (a bundled
    // allocator exporting `malloc`) resolves elsewhere and is left alone.
    (slot.image.0..slot.image.1).contains(&current) && global == real
}

/// Patches every slot naming one of `names` that still holds the real function.
/// `reals[i]`/`hooks[i]`: the real function and our hook for `names[i]`; `globals[i]`
/// what the name resolves to in the global scope.
pub(crate) fn patch_all(
    patches: &mut Patches,
    names: &[&std::ffi::CStr],
    reals: &[usize],
    hooks: &[usize],
    globals: &[usize],
) {
    for slot in elf_slots::find(names) {
        let (real, hook) = (reals[slot.which], hooks[slot.which]);
        // SAFETY: `find` returned the slot of an object that was loaded during the walk;
        // objects are unloaded only by dlclose, which the program does not race with its
        // own loading of memtape's tracing (and a slot's page stays mapped until then).
        let current = unsafe { read(&slot) };
        if !patchable(&slot, current, real, hook, globals[slot.which]) {
            continue;
        }
        // SAFETY: as above.
        if unsafe { write(&slot, hook) } {
            patches.patches.push(Patch {
                slot,
                original: current,
                hook,
            });
        }
    }
}

/// Writes the original function back into every slot that still holds our hook and
/// whose object is still loaded; forgets all patches.
pub(crate) fn restore_all(patches: &mut Patches) {
    let loaded = elf_slots::loaded_images();
    // Newest first: an object loaded again at the same address has newer patches.
    for p in patches.patches.drain(..).rev() {
        let still_loaded = loaded
            .iter()
            .any(|&(base, image)| base == p.slot.base && image == p.slot.image);
        if !still_loaded {
            continue;
        }
        // SAFETY: the slot's object is loaded at the same place with the same layout.
        unsafe {
            if read(&p.slot) == p.hook {
                write(&p.slot, p.original);
            }
        }
    }
}
