//! Finding the allocator slots of every loaded ELF object: `dl_iterate_phdr` over the
//! objects, `PT_DYNAMIC` for their relocation tables, and only `JUMP_SLOT`/`GLOB_DAT`
//! relocations (a GOT entry the dynamic linker filled with a function's address). Data
//! relocations (`R_*_64`: function-pointer tables a library may re-point at run time,
//! like libmpdec's allocator under `_decimal`) are never candidates.

use std::ffi::{c_int, c_void, CStr};

use crate::arch::{R_GLOB_DAT, R_JUMP_SLOT};

/// ELF64 dynamic-section entry.
#[repr(C)]
#[derive(Clone, Copy)]
struct Dyn {
    tag: i64,
    val: u64,
}

/// ELF64 relocation with addend.
#[repr(C)]
#[derive(Clone, Copy)]
struct Rela {
    offset: u64,
    info: u64,
    _addend: i64,
}

/// ELF64 symbol.
#[repr(C)]
#[derive(Clone, Copy)]
struct Sym {
    name: u32,
    _info: u8,
    _other: u8,
    _shndx: u16,
    _value: u64,
    _size: u64,
}

const DT_NULL: i64 = 0;
const DT_PLTRELSZ: i64 = 2;
const DT_STRTAB: i64 = 5;
const DT_SYMTAB: i64 = 6;
const DT_RELA: i64 = 7;
const DT_RELASZ: i64 = 8;
const DT_JMPREL: i64 = 23;
const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const PT_GNU_RELRO: u32 = 0x6474_e552;

/// One GOT slot naming a function we hook.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Slot {
    /// Address of the slot.
    pub(crate) addr: usize,
    /// Index of the hooked function in the caller's name list.
    pub(crate) which: usize,
    /// The object's load bias (identifies it while it stays loaded).
    pub(crate) base: usize,
    /// The object's mapped range, `[lo, hi)`: a slot pointing in there still holds its
    /// lazy-binding stub.
    pub(crate) image: (usize, usize),
    /// The object's RELRO range: the slot is read-only there.
    pub(crate) relro: Option<(usize, usize)>,
    /// A slot of memtape's own object: never pointed at a hook.
    pub(crate) ours: bool,
}

struct Walk<'a> {
    names: &'a [&'a CStr],
    /// An address inside memtape's own object, which is never patched.
    ours: usize,
    out: Vec<Slot>,
    found: &'a mut FoundSlots,
}

/// The slots of each object scanned before, by `(load bias, dynamic section)`, for one
/// list of names: a capture per test (the pytest plugin) would otherwise read the
/// relocation and symbol tables of every loaded object, and compare every symbol's name,
/// at each test's start. An object's tables do not change while it stays loaded; the
/// entries are dropped when the loader's count of unloaded objects changed (a new object
/// may sit where an unloaded one was). One per list of names asked for (the allocator
/// hooks', MLX's, a redirected symbol's).
struct FoundSlots {
    names: Vec<Vec<u8>>,
    /// The loader's `dlpi_subs` when the entries were found.
    unloads: u64,
    objects: std::collections::HashMap<(usize, usize), Vec<Slot>>,
}

static FOUND: std::sync::Mutex<Vec<FoundSlots>> = std::sync::Mutex::new(Vec::new());

fn skipped(name: &[u8]) -> bool {
    let name = name.rsplit(|&b| b == b'/').next().unwrap_or(name);
    name.starts_with(b"ld-linux")
        || name.starts_with(b"ld-musl")
        || name.starts_with(b"ld64.so")
        || name.starts_with(b"linux-vdso")
        || name.starts_with(b"linux-gate")
}

/// Every `JUMP_SLOT`/`GLOB_DAT` slot whose symbol is one of `names`, in every loaded
/// object except the dynamic linker and the vdso; memtape's own are marked
/// ([`Slot::ours`]).
pub(crate) fn find(names: &[&CStr]) -> Vec<Slot> {
    let mut kept = FOUND.lock().unwrap_or_else(|e| e.into_inner());
    let same_names = |f: &FoundSlots| {
        f.names
            .iter()
            .map(Vec::as_slice)
            .eq(names.iter().map(|n| n.to_bytes()))
    };
    let index = match kept.iter().position(same_names) {
        Some(index) => index,
        None => {
            kept.push(FoundSlots {
                names: names.iter().map(|n| n.to_bytes().to_vec()).collect(),
                unloads: u64::MAX,
                objects: std::collections::HashMap::new(),
            });
            kept.len() - 1
        }
    };
    let found = &mut kept[index];
    let mut walk = Walk {
        names,
        ours: find as *const () as usize,
        out: Vec::new(),
        found,
    };
    // SAFETY: `visit` only reads the headers the loader passes, and `walk` outlives the
    // call.
    unsafe { libc::dl_iterate_phdr(Some(visit), std::ptr::from_mut(&mut walk).cast()) };
    walk.out
}

/// Where an object's parts are, read from its program headers.
struct Layout {
    base: usize,
    /// `[lo, hi)` over its PT_LOAD segments.
    image: (usize, usize),
    dynamic: Option<*const Dyn>,
    relro: Option<(usize, usize)>,
}

/// # Safety
/// `info` must describe a loaded object (as `dl_iterate_phdr` passes it).
unsafe fn layout(info: &libc::dl_phdr_info) -> Option<Layout> {
    if info.dlpi_phdr.is_null() {
        return None;
    }
    let base = info.dlpi_addr as usize;
    // SAFETY: the loader's program headers for this object, `dlpi_phnum` of them.
    let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) };
    let mut out = Layout {
        base,
        image: (usize::MAX, 0),
        dynamic: None,
        relro: None,
    };
    for p in phdrs {
        let lo = base + p.p_vaddr as usize;
        let hi = lo + p.p_memsz as usize;
        match p.p_type {
            PT_LOAD => out.image = (out.image.0.min(lo), out.image.1.max(hi)),
            PT_DYNAMIC => out.dynamic = Some(lo as *const Dyn),
            PT_GNU_RELRO => out.relro = Some((lo, hi)),
            _ => {}
        }
    }
    Some(out)
}

unsafe extern "C" fn visit(info: *mut libc::dl_phdr_info, size: usize, data: *mut c_void) -> c_int {
    // SAFETY: `data` is the `Walk` passed by `find`, and `info` describes a loaded object
    // whose headers, dynamic section and relocation tables stay mapped while the loader's
    // lock is held (for the duration of this callback).
    unsafe {
        let walk = &mut *data.cast::<Walk<'_>>();
        let info = &*info;
        let name = if info.dlpi_name.is_null() {
            &b""[..]
        } else {
            CStr::from_ptr(info.dlpi_name).to_bytes()
        };
        if skipped(name) {
            return 0;
        }
        let Some(l) = layout(info) else {
            return 0;
        };
        let ours = (l.image.0..l.image.1).contains(&walk.ours);
        let Some(dynamic) = l.dynamic else {
            return 0;
        };
        // A loader that does not count unloads (an older `dl_phdr_info`): scanned each time.
        let unloads = (size >= std::mem::offset_of!(libc::dl_phdr_info, dlpi_subs) + 8)
            .then_some(info.dlpi_subs);
        if unloads.is_some_and(|u| u != walk.found.unloads) {
            walk.found.objects.clear();
            walk.found.unloads = unloads.unwrap_or(u64::MAX);
        }
        let key = (l.base, dynamic as usize);
        if let Some(slots) = unloads.and(walk.found.objects.get(&key)) {
            walk.out.extend_from_slice(slots);
            return 0;
        }
        let first = walk.out.len();
        scan(walk, l.base, l.image, l.relro, dynamic, ours);
        if unloads.is_some() {
            let slots = walk.out[first..].to_vec();
            walk.found.objects.insert(key, slots);
        }
        0
    }
}

/// # Safety
/// `dynamic` must be the live dynamic section of the object loaded at `base`.
unsafe fn scan(
    walk: &mut Walk<'_>,
    base: usize,
    image: (usize, usize),
    relro: Option<(usize, usize)>,
    dynamic: *const Dyn,
    ours: bool,
) {
    let (mut strtab, mut symtab) = (0usize, 0usize);
    let (mut jmprel, mut jmprelsz, mut rela, mut relasz) = (0usize, 0usize, 0usize, 0usize);
    // The loader relocates the address entries in place on most targets; an entry below
    // the load bias is still a link-time address.
    let addr = |v: u64| {
        let v = v as usize;
        if v < base {
            v + base
        } else {
            v
        }
    };
    let mut d = dynamic;
    // SAFETY: the dynamic section ends with DT_NULL (guaranteed by the caller's object).
    unsafe {
        while (*d).tag != DT_NULL {
            let e = *d;
            match e.tag {
                DT_STRTAB => strtab = addr(e.val),
                DT_SYMTAB => symtab = addr(e.val),
                DT_JMPREL => jmprel = addr(e.val),
                DT_PLTRELSZ => jmprelsz = e.val as usize,
                DT_RELA => rela = addr(e.val),
                DT_RELASZ => relasz = e.val as usize,
                _ => {}
            }
            d = d.add(1);
        }
    }
    if strtab == 0 || symtab == 0 {
        return;
    }
    for (table, size) in [(jmprel, jmprelsz), (rela, relasz)] {
        if table == 0 {
            continue;
        }
        let count = size / std::mem::size_of::<Rela>();
        // SAFETY: DT_JMPREL/DT_RELA and their sizes describe arrays of Elf64_Rela inside
        // the object (x86-64 and aarch64 use RELA for both tables).
        let relas = unsafe { std::slice::from_raw_parts(table as *const Rela, count) };
        for r in relas {
            let kind = (r.info & 0xffff_ffff) as u32;
            if kind != R_GLOB_DAT && kind != R_JUMP_SLOT {
                continue;
            }
            let sym_index = (r.info >> 32) as usize;
            if sym_index == 0 {
                continue;
            }
            // SAFETY: a relocation's symbol index is inside the object's symbol table, and
            // its name offset inside the string table (NUL-terminated).
            let name = unsafe {
                let sym = &*(symtab as *const Sym).add(sym_index);
                CStr::from_ptr((strtab + sym.name as usize) as *const std::ffi::c_char)
            };
            if let Some(which) = walk.names.iter().position(|n| *n == name) {
                walk.out.push(Slot {
                    addr: base + r.offset as usize,
                    which,
                    base,
                    image,
                    relro,
                    ours,
                });
            }
        }
    }
}

/// The load bias and mapped range of every loaded object (to tell, at restore time,
/// whether a slot's object is still there).
pub(crate) fn loaded_images() -> Vec<(usize, (usize, usize))> {
    unsafe extern "C" fn collect(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: as in `visit`: `data` is the Vec passed below, `info` a live object.
        unsafe {
            let out = &mut *data.cast::<Vec<(usize, (usize, usize))>>();
            if let Some(l) = layout(&*info) {
                out.push((l.base, l.image));
            }
            0
        }
    }
    let mut out: Vec<(usize, (usize, usize))> = Vec::new();
    // SAFETY: `collect` only reads what the loader passes; `out` outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(collect), std::ptr::from_mut(&mut out).cast()) };
    out
}

/// The loader's counts of objects loaded and unloaded since the process began
/// (`dlpi_adds`, `dlpi_subs`): while both stay the same, so does the list of loaded
/// objects. None from a loader that does not count them (an older `dl_phdr_info`).
pub(crate) fn loader_counts() -> Option<(u64, u64)> {
    unsafe extern "C" fn first(
        info: *mut libc::dl_phdr_info,
        size: usize,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: `data` is the Option passed below; `info` is a live `dl_phdr_info` of
        // `size` bytes, read only up to the fields that size covers.
        unsafe {
            let out = &mut *data.cast::<Option<(u64, u64)>>();
            if size >= std::mem::offset_of!(libc::dl_phdr_info, dlpi_subs) + 8 {
                *out = Some(((*info).dlpi_adds, (*info).dlpi_subs));
            }
        }
        1 // every object carries the same counts: the first one is enough
    }
    let mut out: Option<(u64, u64)> = None;
    // SAFETY: `first` only writes the Option it is given, which outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(first), std::ptr::from_mut(&mut out).cast()) };
    out
}

/// The mapped range of the main program (the first object the loader reports).
pub(crate) fn main_image() -> Option<(usize, usize)> {
    loaded_images().first().map(|&(_, image)| image)
}
