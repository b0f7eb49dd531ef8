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
    // The list of the last call, while the loader has loaded and unloaded nothing since:
    // a capture per test (the pytest plugin) would otherwise list the loaded objects and
    // look at each file again at each test's end.
    let counts = super::elf_slots::loader_counts();
    let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
    if let (Some(counts), Some((seen, found))) = (counts, last.as_ref()) {
        if counts == *seen {
            return found.clone();
        }
    }
    let found = listed();
    *last = counts.map(|c| (c, found.clone()));
    found
}

/// The loader's counts ([`super::elf_slots::loader_counts`]) and the list made then.
type Listed = ((u64, u64), Vec<PrivateAllocator>);

static LAST: std::sync::Mutex<Option<Listed>> = std::sync::Mutex::new(None);

/// [`private_allocators`], listed now.
fn listed() -> Vec<PrivateAllocator> {
    let interpreter = pyo3::ffi::PyMem_RawMalloc as *const () as u64;
    hook_mode::untraced(|| {
        let mut seen = std::collections::HashSet::new();
        loaded_modules()
            .into_iter()
            .filter(|m| !m.contains(interpreter))
            .filter(|m| m.path.starts_with('/') && seen.insert(m.path.clone()))
            .filter_map(|m| {
                let (allocator, symbol) = allocator_in_file_once(&m.path)?;
                Some(PrivateAllocator {
                    path: m.path,
                    allocator: allocator.to_owned(),
                    symbol,
                })
            })
            .collect()
    })
}

/// A file, as the cache of [`allocator_in_file_once`] knows it: a path loaded again
/// after a new file replaced it reads differently.
type FileIdentity = (String, u64, u64, u64, i64, i64);

/// What [`allocator_in_file`] found, per file read.
type Found = Option<(&'static str, String)>;

static FOUND: std::sync::Mutex<Option<std::collections::HashMap<FileIdentity, Found>>> =
    std::sync::Mutex::new(None);

/// [`allocator_in_file`], read once per file: a capture per test (the pytest plugin)
/// would otherwise read the symbol tables of every loaded library at each test's end.
fn allocator_in_file_once(path: &str) -> Found {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    let identity = (
        path.to_owned(),
        meta.dev(),
        meta.ino(),
        meta.len(),
        meta.mtime(),
        meta.mtime_nsec(),
    );
    let mut found = FOUND.lock().unwrap_or_else(|e| e.into_inner());
    found
        .get_or_insert_with(Default::default)
        .entry(identity)
        .or_insert_with(|| allocator_in_file(path))
        .clone()
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
