//! The ELF objects loaded in the process, as native stacks need them: the path, the load
//! bias, the `PT_LOAD` segments, the GNU build id (so that a report can tell whether the
//! file it symbolizes with is the one that ran) and where the unwind tables
//! (`.eh_frame_hdr`, `.eh_frame`) are mapped. Listed with `dl_iterate_phdr`, off the hot
//! path (when native stacks start, and after every `dlopen`).

use std::ffi::{c_int, c_void, CStr};

const PT_LOAD: u32 = 1;
const PT_NOTE: u32 = 4;
const PT_GNU_EH_FRAME: u32 = 0x6474_e550;
const PF_X: u32 = 1;
const NT_GNU_BUILD_ID: u32 = 3;

/// One loaded object.
#[derive(Clone, Debug)]
pub(crate) struct LoadedModule {
    /// The file's path (the executable's for the main program; the vdso keeps its name).
    pub(crate) path: String,
    /// The load bias: a file address plus `base` is where it is in memory.
    pub(crate) base: u64,
    /// `PT_LOAD` segments: `(file address, size in memory, executable)`.
    pub(crate) segments: Vec<(u64, u64, bool)>,
    /// The GNU build id (empty when the object has none).
    pub(crate) build_id: Vec<u8>,
    /// `.eh_frame_hdr`'s file address and length, when the object has one.
    pub(crate) eh_frame_hdr: Option<(u64, u64)>,
}

impl LoadedModule {
    /// The memory range the object's segments span.
    pub(crate) fn range(&self) -> (u64, u64) {
        let lo = self.segments.iter().map(|s| s.0).min().unwrap_or(0);
        let hi = self.segments.iter().map(|s| s.0 + s.1).max().unwrap_or(0);
        (self.base + lo, self.base + hi)
    }

    /// The file-address range of its executable segments.
    pub(crate) fn text(&self) -> Option<(u64, u64)> {
        let exec = self.segments.iter().filter(|s| s.2);
        let lo = exec.clone().map(|s| s.0).min()?;
        let hi = exec.map(|s| s.0 + s.1).max()?;
        Some((lo, hi))
    }

    /// The segment holding file address `svma`, as `(start, end)` file addresses.
    pub(crate) fn segment_of(&self, svma: u64) -> Option<(u64, u64)> {
        self.segments
            .iter()
            .find(|s| s.0 <= svma && svma < s.0 + s.1)
            .map(|s| (s.0, s.0 + s.1))
    }

    /// Whether `addr` (in memory) lies inside one of its segments.
    pub(crate) fn contains(&self, addr: u64) -> bool {
        addr.checked_sub(self.base)
            .is_some_and(|svma| self.segment_of(svma).is_some())
    }
}

/// Every loaded object, in `dl_iterate_phdr`'s order.
pub(crate) fn loaded_modules() -> Vec<LoadedModule> {
    let mut out: Vec<LoadedModule> = Vec::new();
    // SAFETY: the callback only reads the headers the loader hands it, for the duration of
    // the call, and `data` is the `Vec` above, used by this thread only.
    unsafe { libc::dl_iterate_phdr(Some(visit), (&raw mut out).cast::<c_void>()) };
    out
}

unsafe extern "C" fn visit(
    info: *mut libc::dl_phdr_info,
    _size: usize,
    data: *mut c_void,
) -> c_int {
    // SAFETY: `data` is the Vec passed by `loaded_modules`; `info` is valid during the call.
    let (out, info) = unsafe { (&mut *data.cast::<Vec<LoadedModule>>(), &*info) };
    if info.dlpi_phdr.is_null() {
        return 0;
    }
    // SAFETY: the loader guarantees `dlpi_phnum` headers at `dlpi_phdr`.
    let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) };
    let name = if info.dlpi_name.is_null() {
        String::new()
    } else {
        // SAFETY: a NUL-terminated string owned by the loader.
        unsafe { CStr::from_ptr(info.dlpi_name) }
            .to_string_lossy()
            .into_owned()
    };
    let path = if name.is_empty() {
        std::fs::read_link("/proc/self/exe")
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default()
    } else {
        name
    };
    let base = info.dlpi_addr;
    let mut module = LoadedModule {
        path,
        base,
        segments: Vec::new(),
        build_id: Vec::new(),
        eh_frame_hdr: None,
    };
    for ph in phdrs {
        match ph.p_type {
            PT_LOAD => module
                .segments
                .push((ph.p_vaddr, ph.p_memsz, ph.p_flags & PF_X != 0)),
            PT_GNU_EH_FRAME => module.eh_frame_hdr = Some((ph.p_vaddr, ph.p_memsz)),
            PT_NOTE if module.build_id.is_empty() => {
                // SAFETY: a PT_NOTE segment is mapped (inside a PT_LOAD) for its length.
                let notes = unsafe {
                    std::slice::from_raw_parts(
                        (base + ph.p_vaddr) as *const u8,
                        ph.p_memsz as usize,
                    )
                };
                if let Some(id) = gnu_build_id(notes, ph.p_align) {
                    module.build_id = id.to_vec();
                }
            }
            _ => {}
        }
    }
    if !module.segments.is_empty() {
        out.push(module);
    }
    0
}

/// The GNU build id among the notes of a `PT_NOTE` segment.
pub(crate) fn gnu_build_id(notes: &[u8], align: u64) -> Option<&[u8]> {
    let align = if align == 8 { 8 } else { 4 };
    let up = |n: usize| n.div_ceil(align) * align;
    let word = |at: usize| -> Option<u32> {
        Some(u32::from_ne_bytes(notes.get(at..at + 4)?.try_into().ok()?))
    };
    let mut at = 0;
    while at + 12 <= notes.len() {
        let namesz = word(at)? as usize;
        let descsz = word(at + 4)? as usize;
        let kind = word(at + 8)?;
        let name_at = at + 12;
        let desc_at = name_at + up(namesz);
        let end = desc_at.checked_add(up(descsz))?;
        if kind == NT_GNU_BUILD_ID && notes.get(name_at..name_at + namesz) == Some(b"GNU\0") {
            return notes.get(desc_at..desc_at + descsz);
        }
        at = end;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_lists_libc_with_a_build_id_and_unwind_tables() {
        let modules = loaded_modules();
        let libc = modules
            .iter()
            .find(|m| m.path.contains("libc.so"))
            .expect("libc is loaded");
        assert_eq!(libc.build_id.len(), 20);
        assert!(libc.eh_frame_hdr.is_some());
        assert!(libc.text().is_some());
        let malloc = libc::malloc as *const () as usize as u64;
        assert!(libc.contains(malloc));
    }

    #[test]
    fn build_id_notes_are_parsed_and_bad_notes_are_not() {
        let mut notes = Vec::new();
        for v in [4u32, 3, NT_GNU_BUILD_ID] {
            notes.extend(v.to_ne_bytes());
        }
        notes.extend(b"GNU\0");
        notes.extend([1, 2, 3, 0]);
        assert_eq!(gnu_build_id(&notes, 4), Some(&[1u8, 2, 3][..]));
        assert_eq!(gnu_build_id(&notes[..14], 4), None);
    }
}
