//! The process' memory as the kernel accounts it (`/proc/self/status`), read when a
//! capture starts (into its metadata, from Python) and when it ends (into its trailer),
//! and memtape's own heap: every allocation of memtape's Rust code (the recorder's
//! tables, the capture's buffers, the analyses run in the traced process) goes through a
//! counting global allocator, whose peak since the capture started is memtape's own
//! share of the process' memory. Its big blocks are mappings of their own, made and
//! unmapped by the kernel, so that memtape's buffers leave the C library's heap and its
//! thresholds to the program.

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

/// memtape's own blocks of at least this many bytes come from the kernel (`mmap`), not
/// from the C library's `malloc`: freeing one gives its pages back at once, and glibc
/// never sees it, so memtape's big buffers (journals, tables, encoders) neither raise
/// glibc's dynamic mmap threshold for the program's own allocations nor stay behind in
/// an arena of one of memtape's threads (HISTORY.md section 57).
const DIRECT_FROM_KERNEL: usize = 256 * 1024;

/// The page size this allocator rounds kernel blocks to (4 KiB, or a larger page size
/// on hosts that use one: rounding to 64 KiB is correct there too, only coarser).
const KERNEL_ROUND: usize = 64 * 1024;

/// Whether a block of `layout` comes from the kernel (see [`DIRECT_FROM_KERNEL`]); the
/// same answer for its `alloc`, `realloc` and `dealloc`, which get the same size.
#[inline(always)]
fn from_kernel(size: usize, align: usize) -> bool {
    cfg!(target_os = "linux") && size >= DIRECT_FROM_KERNEL && align <= 4096
}

#[inline]
fn kernel_len(size: usize) -> usize {
    size.next_multiple_of(KERNEL_ROUND)
}

#[cfg(target_os = "linux")]
fn kernel_alloc(size: usize) -> *mut u8 {
    // SAFETY: an anonymous private mapping of a fresh range; no existing memory touched.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            kernel_len(size),
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    mapped(p)
}

/// What `mmap` or `mremap` returned, as an allocator returns it (null on failure).
#[cfg(target_os = "linux")]
fn mapped(p: *mut libc::c_void) -> *mut u8 {
    if p == libc::MAP_FAILED {
        std::ptr::null_mut()
    } else {
        p.cast()
    }
}

#[cfg(target_os = "linux")]
fn kernel_free(ptr: *mut u8, size: usize) {
    // SAFETY: `ptr` is a mapping made by `kernel_alloc` (or `kernel_realloc`) for a block
    // of `size` bytes, which its owner gives back; nothing uses it after this.
    unsafe { libc::munmap(ptr.cast(), kernel_len(size)) };
}

#[cfg(target_os = "linux")]
fn kernel_realloc(ptr: *mut u8, size: usize, new_size: usize) -> *mut u8 {
    // SAFETY: `ptr` is a mapping of `kernel_len(size)` bytes made here; the kernel moves
    // or grows it with its contents, and the old range is not used again.
    let p = unsafe {
        libc::mremap(
            ptr.cast(),
            kernel_len(size),
            kernel_len(new_size),
            libc::MREMAP_MAYMOVE,
        )
    };
    mapped(p)
}

#[cfg(not(target_os = "linux"))]
fn kernel_alloc(_size: usize) -> *mut u8 {
    unreachable!("from_kernel is false off Linux")
}

#[cfg(not(target_os = "linux"))]
fn kernel_free(_ptr: *mut u8, _size: usize) {
    unreachable!("from_kernel is false off Linux")
}

#[cfg(not(target_os = "linux"))]
fn kernel_realloc(_ptr: *mut u8, _size: usize, _new_size: usize) -> *mut u8 {
    unreachable!("from_kernel is false off Linux")
}

/// A block of `layout` from the kernel (a big one) or from `malloc`, uncounted.
///
/// # Safety
/// As for [`GlobalAlloc::alloc`]: `layout` has a non-zero size.
#[inline(always)]
unsafe fn take(layout: Layout) -> *mut u8 {
    if from_kernel(layout.size(), layout.align()) {
        kernel_alloc(layout.size())
    } else {
        // SAFETY: the caller's layout, passed on.
        unsafe { System.alloc(layout) }
    }
}

/// Gives back block `ptr` of `layout` where [`take`] took it, uncounted.
///
/// # Safety
/// As for [`GlobalAlloc::dealloc`]: `ptr` came from [`take`] (or a resize by this
/// allocator) with `layout`.
#[inline(always)]
unsafe fn give_back(ptr: *mut u8, layout: Layout) {
    if from_kernel(layout.size(), layout.align()) {
        kernel_free(ptr, layout.size());
    } else {
        // SAFETY: `ptr` came from `System` with this layout (not from the kernel).
        unsafe { System.dealloc(ptr, layout) };
    }
}

// SAFETY: a block of at least `DIRECT_FROM_KERNEL` bytes (alignment at most a page) is a
// mapping of its own, which `mmap` returns page-aligned and zeroed, and which is unmapped
// with the same rounded length on `dealloc` (Rust hands `dealloc` and `realloc` the
// layout the block was made with, so `from_kernel` answers the same for it); every other
// call is passed to `System` unchanged. The counters only observe.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's layout, passed on.
        let p = unsafe { take(layout) };
        if !p.is_null() {
            Self::grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = if from_kernel(layout.size(), layout.align()) {
            // A fresh anonymous mapping reads as zeros.
            kernel_alloc(layout.size())
        } else {
            // SAFETY: the caller's layout, passed on.
            unsafe { System.alloc_zeroed(layout) }
        };
        if !p.is_null() {
            Self::grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's block and layout, passed on.
        unsafe { give_back(ptr, layout) };
        OWN_LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let (old_big, new_big) = (
            from_kernel(layout.size(), layout.align()),
            from_kernel(new_size, layout.align()),
        );
        let p = match (old_big, new_big) {
            (true, true) => kernel_realloc(ptr, layout.size(), new_size),
            // SAFETY: as for `dealloc`; `new_size` is the caller's.
            (false, false) => unsafe { System.realloc(ptr, layout, new_size) },
            _ => {
                // Across the line: a new block, the contents copied, the old one given
                // back.
                // SAFETY: `new_size` with the old alignment is a valid, non-zero layout
                // (the caller's contract for `realloc`).
                let new_layout =
                    unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
                // SAFETY: a valid, non-zero layout.
                let q = unsafe { take(new_layout) };
                if !q.is_null() {
                    // SAFETY: both blocks hold at least the smaller size; they are apart;
                    // `ptr` is the caller's block of `layout`, given back once.
                    unsafe {
                        std::ptr::copy_nonoverlapping(ptr, q, layout.size().min(new_size));
                        give_back(ptr, layout);
                    }
                }
                q
            }
        };
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

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// Whether `/proc/self/maps` has a mapping that starts at `p`: a block of its own.
    fn starts_a_mapping(p: *mut u8) -> bool {
        let maps = std::fs::read_to_string("/proc/self/maps").expect("maps");
        let start = format!("{:x}-", p as usize);
        maps.lines().any(|l| l.starts_with(&start))
    }

    #[test]
    fn big_blocks_are_mappings_of_their_own_through_every_resize() {
        let a = CountingAllocator;
        let (live_before, _) = own_bytes();
        let big = Layout::from_size_align(1 << 20, 8).unwrap();
        // SAFETY: valid layouts; every block is freed with the layout it has then.
        unsafe {
            let p = a.alloc_zeroed(big);
            assert!(!p.is_null() && starts_a_mapping(p));
            assert!(std::slice::from_raw_parts(p, big.size())
                .iter()
                .all(|&b| b == 0));
            p.write_bytes(7, big.size());
            // Grown in place or moved by the kernel, with its contents.
            let q = a.realloc(p, big, 3 << 20);
            assert!(!q.is_null() && starts_a_mapping(q));
            assert!(std::slice::from_raw_parts(q, big.size())
                .iter()
                .all(|&b| b == 7));
            // Down across the line: a malloc block with the first bytes.
            let grown = Layout::from_size_align(3 << 20, 8).unwrap();
            let r = a.realloc(q, grown, 1000);
            assert!(!r.is_null());
            assert!(std::slice::from_raw_parts(r, 1000).iter().all(|&b| b == 7));
            // And up again.
            let small = Layout::from_size_align(1000, 8).unwrap();
            let s = a.realloc(r, small, DIRECT_FROM_KERNEL);
            assert!(!s.is_null() && starts_a_mapping(s));
            assert!(std::slice::from_raw_parts(s, 1000).iter().all(|&b| b == 7));
            a.dealloc(s, Layout::from_size_align(DIRECT_FROM_KERNEL, 8).unwrap());
            assert!(
                !starts_a_mapping(s),
                "the block's pages went back to the kernel"
            );
        }
        // Counted as any block (other tests' threads may allocate meanwhile: only this
        // test's share is compared, and it is back to nothing).
        let (live_after, peak) = own_bytes();
        assert!(peak >= 3 << 20);
        assert!(
            live_after.abs_diff(live_before) < 1 << 20,
            "{live_before} -> {live_after}"
        );
    }

    #[test]
    fn small_and_overaligned_blocks_stay_with_malloc() {
        assert!(!from_kernel(DIRECT_FROM_KERNEL - 1, 8));
        assert!(
            !from_kernel(1 << 20, 8192),
            "alignment beyond a page: malloc's"
        );
        assert!(from_kernel(DIRECT_FROM_KERNEL, 4096));
        assert_eq!(kernel_len(1), KERNEL_ROUND);
        assert_eq!(kernel_len(KERNEL_ROUND), KERNEL_ROUND);
        assert_eq!(kernel_len(KERNEL_ROUND + 1), 2 * KERNEL_ROUND);
    }
}
