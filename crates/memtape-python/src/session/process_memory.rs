//! The process' memory as the kernel accounts it (`/proc/self/status`), read when a
//! capture starts (into its metadata, from Python) and when it ends (into its trailer),
//! and memtape's own heap: every allocation of memtape's Rust code (the recorder's
//! tables, the capture's buffers, the analyses run in the traced process) goes through a
//! counting global allocator, whose peak since the capture started is memtape's own
//! share of the process' memory.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use pyo3::prelude::*;

/// Bytes memtape's Rust code holds now, their peak since [`reset_own_peak`], and what it
/// held then (already part of the process' memory when the capture started).
static OWN_LIVE: AtomicUsize = AtomicUsize::new(0);
static OWN_PEAK: AtomicUsize = AtomicUsize::new(0);
static OWN_BASE: AtomicUsize = AtomicUsize::new(0);

/// The system allocator, counting what it holds for memtape (the global allocator, but
/// in unit tests, which count allocations their own way).
#[cfg_attr(test, allow(dead_code))]
pub(crate) struct CountingAllocator;

#[cfg_attr(test, allow(dead_code))]
impl CountingAllocator {
    #[inline(always)]
    fn grew(by: usize) {
        let now = OWN_LIVE.fetch_add(by, Ordering::Relaxed) + by;
        if now > OWN_PEAK.load(Ordering::Relaxed) {
            OWN_PEAK.fetch_max(now, Ordering::Relaxed);
        }
    }
}

// SAFETY: every call is passed to `System` unchanged; the counters only observe.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's layout, passed on.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            Self::grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's layout, passed on.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            Self::grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator (so from `System`) with this layout.
        unsafe { System.dealloc(ptr, layout) };
        OWN_LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as for `dealloc`; `new_size` is the caller's.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            OWN_LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            Self::grew(new_size);
        }
        p
    }
}

/// Starts memtape's own peak again from what it holds now (a capture starts).
pub(crate) fn reset_own_peak() {
    let live = OWN_LIVE.load(Ordering::Relaxed);
    OWN_BASE.store(live, Ordering::Relaxed);
    OWN_PEAK.store(live, Ordering::Relaxed);
}

/// How much memtape's own heap grew, at its peak, since [`reset_own_peak`].
pub(crate) fn own_growth_at_peak() -> usize {
    OWN_PEAK
        .load(Ordering::Relaxed)
        .saturating_sub(OWN_BASE.load(Ordering::Relaxed))
}

/// memtape's own heap now and at its peak since the capture started, in bytes.
pub(crate) fn own_bytes() -> (usize, usize) {
    (
        OWN_LIVE.load(Ordering::Relaxed),
        OWN_PEAK.load(Ordering::Relaxed),
    )
}

/// The fields of `/proc/self/status`, one reader for each use.
struct Status(String);

impl Status {
    fn read() -> Option<Self> {
        use std::io::Read;
        // One read into room for the whole file (about 1.5 KiB): `fs::read_to_string`
        // sizes its buffer from the file's length, which is 0 here, and read it 32 bytes,
        // then 64, ... (eight system calls, at each capture's start and end).
        let mut text = String::with_capacity(4096);
        std::fs::File::open("/proc/self/status")
            .ok()?
            .read_to_string(&mut text)
            .ok()?;
        Some(Self(text))
    }

    /// A `Name:   123 kB` field, in bytes.
    fn bytes(&self, name: &str) -> Option<u64> {
        let line = self.0.lines().find(|l| l.starts_with(name))?;
        let kb: u64 = line[name.len()..]
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()?;
        Some(kb * 1024)
    }
}

/// `{"rss", "hwm", "anon", "file", "shmem"}` in bytes from `/proc/self/status` (`VmRSS`,
/// `VmHWM`, `RssAnon`, `RssFile`, `RssShmem`), as JSON; None where it cannot be read.
pub(crate) fn reading_json() -> Option<String> {
    reading_json_of(&Status::read()?)
}

/// [`reading_json`] and the peak RSS of this process image (`VmHWM`) from one reading of
/// `/proc/self/status` (a capture's end writes both). Unlike `getrusage`'s `ru_maxrss`,
/// `VmHWM` does not keep the peak of the process that ran before `exec` (a parent that
/// forked this one, pytest or a shell, counted as if it were the program).
pub(crate) fn reading_json_and_peak() -> (Option<String>, Option<u64>) {
    match Status::read() {
        Some(status) => (reading_json_of(&status), status.bytes("VmHWM:")),
        None => (None, None),
    }
}

fn reading_json_of(status: &Status) -> Option<String> {
    let field = |name: &str| status.bytes(name);
    Some(format!(
        "{{\"rss\": {}, \"hwm\": {}, \"anon\": {}, \"file\": {}, \"shmem\": {}}}",
        field("VmRSS:")?,
        field("VmHWM:")?,
        field("RssAnon:")?,
        field("RssFile:")?,
        field("RssShmem:")?
    ))
}

/// _process_memory() -> str | None
/// The process' memory now as JSON (`{"rss", "hwm", "anon", "file", "shmem"}`, bytes),
/// for a capture's metadata; None where `/proc/self/status` cannot be read.
#[pyfunction]
pub(crate) fn _process_memory() -> Option<String> {
    reading_json()
}

/// _own_memory() -> (int, int)
/// memtape's own heap (its Rust code's: tables, buffers, analyses) now and at its peak
/// since the last capture started, in bytes.
#[pyfunction]
pub(crate) fn _own_memory() -> (usize, usize) {
    own_bytes()
}
