//! The loaded objects with an allocator of their own (mimalloc or jemalloc inside a
//! wheel, ...): memory they take never reaches libc's `malloc`, so the hooks cannot see
//! it. Listed when a capture ends, for the trailer, so that reports can say where the
//! untracked part of the RSS may come from.

use std::os::fd::AsRawFd;

use memtape_core::report::{private_allocator, PrivateAllocator};

use super::unwind::loaded_modules::loaded_modules;
use crate::thread::hook_mode;

/// Every loaded object (each path once) whose symbols name an allocator of its own. The
/// interpreter is left out: CPython 3.13 bundles mimalloc, and what it allocates with it
/// (`PYTHONMALLOC=mimalloc`) passes through the Python allocator hooks.
pub(crate) fn private_allocators() -> Vec<PrivateAllocator> {
    let interpreter = pyo3::ffi::PyMem_RawMalloc as *const () as u64;
    hook_mode::untraced(|| {
        let mut seen = std::collections::HashSet::new();
        loaded_modules()
            .into_iter()
            .filter(|m| !m.contains(interpreter))
            .filter(|m| m.path.starts_with('/') && seen.insert(m.path.clone()))
            .filter_map(|m| {
                let (allocator, symbol) = allocator_in_file(&m.path)?;
                Some(PrivateAllocator {
                    path: m.path,
                    allocator: allocator.to_owned(),
                    symbol,
                })
            })
            .collect()
    })
}

/// [`private_allocator`] of the file at `path`, mapped read-only: only the pages of its
/// headers and symbol tables are read (a loaded library can be hundreds of megabytes).
fn allocator_in_file(path: &str) -> Option<(&'static str, String)> {
    let file = std::fs::File::open(path).ok()?;
    let len = usize::try_from(file.metadata().ok()?.len()).ok()?;
    if len == 0 {
        return None;
    }
    // SAFETY: a private read-only mapping of the whole file, owned here and unmapped
    // below; nothing else refers to it.
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_PRIVATE,
            file.as_raw_fd(),
            0,
        )
    };
    if addr == libc::MAP_FAILED {
        return None;
    }
    // SAFETY: `addr` maps `len` readable bytes until the munmap below. A loaded library
    // file is not truncated while the process runs it (that would crash the process
    // itself), so the pages stay readable.
    let data = unsafe { std::slice::from_raw_parts(addr.cast::<u8>(), len) };
    let found = private_allocator(data);
    // SAFETY: the mapping made above, no longer borrowed (`found` owns its strings).
    unsafe { libc::munmap(addr, len) };
    found
}
