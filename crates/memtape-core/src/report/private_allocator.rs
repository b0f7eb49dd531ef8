//! Allocators linked into an object of their own (mimalloc or jemalloc inside a Rust or
//! C++ wheel, tcmalloc, rpmalloc, snmalloc): their memory never passes through libc's
//! `malloc`, so memtape's hooks do not see it. Found by the symbols the object defines
//! (exported or local), so that a report can name the objects behind untracked RSS.

use object::read::ReadRef;
use object::{Object, ObjectSymbol};

/// An object with an allocator of its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrivateAllocator {
    /// The object's path.
    pub path: String,
    /// The allocator: "mimalloc", "jemalloc", "tcmalloc", "rpmalloc" or "snmalloc".
    pub allocator: String,
    /// The symbol it was recognised by.
    pub symbol: String,
}

/// Symbols that only an allocator's own code defines, and the allocator each names.
const MARKERS: [(&str, &str); 10] = [
    ("mi_malloc", "mimalloc"),
    ("mi_heap_malloc", "mimalloc"),
    ("je_malloc", "jemalloc"),
    ("je_mallocx", "jemalloc"),
    ("_rjem_malloc", "jemalloc"),
    ("_rjem_mallocx", "jemalloc"),
    ("mallocx", "jemalloc"),
    ("tc_malloc", "tcmalloc"),
    ("rpmalloc", "rpmalloc"),
    ("rpmalloc_initialize", "rpmalloc"),
];

/// The allocator `name` belongs to, if it is one of the markers (snmalloc is C++: its
/// mangled names contain `snmalloc`).
fn allocator_of(name: &[u8]) -> Option<&'static str> {
    if let Some((_, a)) = MARKERS.iter().find(|(m, _)| m.as_bytes() == name) {
        return Some(a);
    }
    name.windows(8)
        .any(|w| w == b"snmalloc")
        .then_some("snmalloc")
}

/// The first allocator the object in `data` defines (in its dynamic or its full symbol
/// table), as `(allocator, symbol)`; `None` for objects without one, and for data that
/// is not an object file.
pub fn private_allocator<'data, R: ReadRef<'data>>(data: R) -> Option<(&'static str, String)> {
    let file = object::File::parse(data).ok()?;
    file.dynamic_symbols()
        .chain(file.symbols())
        .filter(|s| s.is_definition())
        .find_map(|s| {
            let name = s.name_bytes().ok()?;
            let allocator = allocator_of(name)?;
            Some((allocator, String::from_utf8_lossy(name).into_owned()))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_name_their_allocator_and_nothing_else_does() {
        assert_eq!(allocator_of(b"mi_malloc"), Some("mimalloc"));
        assert_eq!(allocator_of(b"_rjem_mallocx"), Some("jemalloc"));
        assert_eq!(
            allocator_of(b"_ZN8snmalloc5Alloc6mallocEm"),
            Some("snmalloc")
        );
        assert_eq!(allocator_of(b"malloc"), None);
        assert_eq!(allocator_of(b"PyMem_Malloc"), None);
        assert_eq!(allocator_of(b"mi_malloc_extra"), None);
    }

    #[test]
    fn not_an_object_file() {
        assert_eq!(private_allocator(&b"not an elf file"[..]), None);
    }
}
