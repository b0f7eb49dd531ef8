//! An empty vector with room for `len` items whose memory pages are already mapped:
//! one `madvise(MADV_POPULATE_WRITE)` maps them all, where filling fresh memory takes one
//! page fault per 4 KiB page (16,000 for a million events, tens of milliseconds in a VM).
//! For a big vector, `MADV_HUGEPAGE` first asks for 2 MiB pages where transparent huge
//! pages are enabled (32 mappings instead of 16,000; freeing them is cheaper too). `dump_snapshot` gets it
//! before it takes the recorder's lock, so that the copy made under the lock faults no
//! pages.

/// Huge pages only from this size: glibc gives every allocation this large a mapping of
/// its own (its largest mmap threshold), so the advice never reaches the shared heap.
const OWN_MAPPING: usize = 32 << 20;

/// `Vec::with_capacity(len)` with its pages mapped (best effort: on a kernel without
/// `MADV_POPULATE_WRITE`, before 5.14, the pages fault in as they are written).
pub(crate) fn with_capacity<T>(len: usize) -> Vec<T> {
    let room: Vec<T> = Vec::with_capacity(len);
    let bytes = room.capacity().saturating_mul(std::mem::size_of::<T>());
    // Only worth a system call for more than a few pages.
    if bytes < 1 << 20 {
        return room;
    }
    let page = 4096usize;
    let start = room.as_ptr() as usize;
    let first = start.next_multiple_of(page);
    let end = (start + bytes) / page * page;
    if end > first {
        // SAFETY: [first, end) lies inside the vector's own allocation (its capacity), which
        // nothing else uses. MADV_HUGEPAGE only chooses the page size of the range, and
        // MADV_POPULATE_WRITE only maps the pages (as a write would); neither changes a
        // byte, and on failure they change nothing that matters, so results are ignored.
        unsafe {
            if bytes >= OWN_MAPPING {
                libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE);
            }
            libc::madvise(
                first as *mut libc::c_void,
                end - first,
                libc::MADV_POPULATE_WRITE,
            );
        }
    }
    room
}
