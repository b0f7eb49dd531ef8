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

/// Writes each `(slot, value)`, lifting the RELRO protection of each page once for all
/// the writes in it (a capture per test, under the pytest plugin, patched and restored
/// some 90 slots, with two `mprotect` calls each). Returns, per write, whether it was made.
///
/// # Safety
/// Each `slot.addr` must be a live, aligned GOT slot of a loaded object.
unsafe fn write_all(writes: &[(Slot, usize)]) -> Vec<bool> {
    let page_of = |i: usize| writes[i].0.addr & !(PAGE - 1);
    let mut order: Vec<usize> = (0..writes.len()).collect();
    order.sort_by_key(|&i| page_of(i));
    let mut made = vec![false; writes.len()];
    for group in order.chunk_by(|&a, &b| page_of(a) == page_of(b)) {
        let page = page_of(group[0]) as *mut libc::c_void;
        let protected = group.iter().any(|&i| {
            let slot = &writes[i].0;
            slot.relro
                .map(relro_pages)
                .is_some_and(|(lo, hi)| (lo..hi).contains(&slot.addr))
        });
        // SAFETY: `page` is the mapped page holding these slots; making it writable for
        // the stores and read-only again is what the loader did when it applied RELRO.
        unsafe {
            if protected && libc::mprotect(page, PAGE, libc::PROT_READ | libc::PROT_WRITE) != 0 {
                continue;
            }
            for &i in group {
                let (slot, value) = &writes[i];
                // Other threads may call through the slot meanwhile: an aligned word store
                // is atomic, so they see either the old or the new function.
                (*(slot.addr as *const AtomicUsize)).store(*value, Ordering::Release);
                made[i] = true;
            }
            if protected {
                libc::mprotect(page, PAGE, libc::PROT_READ);
            }
        }
    }
    made
}

/// # Safety
/// `slot.addr` must be a live, aligned GOT slot.
unsafe fn read(slot: &Slot) -> usize {
    // SAFETY: guaranteed by the caller.
    unsafe { (*(slot.addr as *const AtomicUsize)).load(Ordering::Acquire) }
}

/// Whether a slot holding `current` may be pointed at our hook for `real`. `stub` is the
/// executable's PLT stub for the name when the name resolves to it (see
/// [`canonical_stubs`]): a slot holding it calls `real` too.
fn patchable(
    slot: &Slot,
    current: usize,
    real: usize,
    hook: usize,
    global: usize,
    stub: Option<usize>,
) -> bool {
    if current == hook || real == 0 {
        return false;
    }
    if current == real || Some(current) == stub {
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
    let slots = elf_slots::find(names);
    let stubs = canonical_stubs(&slots, reals, hooks, globals);
    // The writes, made together below, each slot once; the patch kept for each hook
    // written (None: memtape's own slot, bound to the real function).
    let mut writes: Vec<(Slot, usize)> = Vec::new();
    let mut kept: Vec<Option<Patch>> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for slot in slots {
        if !seen.insert(slot.addr) {
            continue;
        }
        let (real, hook) = (reals[slot.which], hooks[slot.which]);
        // SAFETY: `find` returned the slot of an object that was loaded during the walk;
        // objects are unloaded only by dlclose, which the program does not race with its
        // own loading of memtape's tracing (and a slot's page stays mapped until then).
        let current = unsafe { read(&slot) };
        let (global, stub) = (globals[slot.which], stubs[slot.which]);
        if slot.ours {
            // memtape's own calls never reach its hooks: bound to the executable's stub,
            // they would, through the executable's slot. Bound to libc's function itself
            // they call the same code. Left so at stop.
            if stub.is_some_and(|s| s == current) {
                writes.push((slot, real));
                kept.push(None);
            }
            continue;
        }
        if !patchable(&slot, current, real, hook, global, stub) {
            continue;
        }
        writes.push((slot, hook));
        kept.push(Some(Patch {
            slot,
            original: current,
            hook,
        }));
    }
    // SAFETY: as above, for every slot `find` returned.
    let made = unsafe { write_all(&writes) };
    for (patch, made) in kept.into_iter().zip(made) {
        if let (Some(patch), true) = (patch, made) {
            patches.patches.push(patch);
        }
    }
}

/// For each name, the executable's PLT stub when the name resolves to it: an executable
/// that takes a libc function's address (Debian's `python3.X`, with libpython linked in)
/// exports its PLT stub as that function, the "canonical" address every other object's
/// slot is bound to, and the stub jumps through the executable's own slot. Known from a
/// slot of the executable holding `real` or our hook (so the executable imports the name
/// and cannot define it) while the name resolves inside the executable.
fn canonical_stubs(
    slots: &[Slot],
    reals: &[usize],
    hooks: &[usize],
    globals: &[usize],
) -> Vec<Option<usize>> {
    let mut stubs = vec![None; reals.len()];
    let Some(main) = elf_slots::main_image() else {
        return stubs;
    };
    for slot in slots.iter().filter(|s| s.image == main) {
        let (real, hook, global) = (reals[slot.which], hooks[slot.which], globals[slot.which]);
        // SAFETY: as in `patch_all`: a slot of the loaded executable.
        let current = unsafe { read(slot) };
        let imported = real != 0 && (current == real || current == hook);
        if imported && global != real && (main.0..main.1).contains(&global) {
            stubs[slot.which] = Some(global);
        }
    }
    stubs
}

/// Writes the original function back into every slot that still holds our hook and
/// whose object is still loaded; forgets all patches.
pub(crate) fn restore_all(patches: &mut Patches) {
    let loaded = elf_slots::loaded_images();
    let mut writes: Vec<(Slot, usize)> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    // Newest first: an object loaded again at the same address has newer patches, and
    // its slot is restored by the newest one alone.
    for p in patches.patches.drain(..).rev() {
        let still_loaded = loaded
            .iter()
            .any(|&(base, image)| base == p.slot.base && image == p.slot.image);
        if !still_loaded || !seen.insert(p.slot.addr) {
            continue;
        }
        // SAFETY: the slot's object is loaded at the same place with the same layout.
        if unsafe { read(&p.slot) } == p.hook {
            writes.push((p.slot, p.original));
        }
    }
    // SAFETY: slots of objects loaded at the same place with the same layout, read above.
    unsafe { write_all(&writes) };
}
