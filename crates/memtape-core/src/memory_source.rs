//! Where recorded memory comes from, told by its tracemalloc domain: the Python heap
//! (domain 0), native code (the GOT hooks' domain), MLX's buffers (their own domain) or
//! an array framework (NumPy's NEP 49 domain, and any other domain a framework reports
//! in).
//!
//! MLX is a source beside `framework`, not inside it: the sources partition the total
//! (reports, the JSON `by_source` objects and the timeline CSV add up to it), and
//! `framework` keeps meaning NumPy's buffers and what framework-API users report.

/// tracemalloc's domain for the Python allocators (PEP 445's three domains together).
pub const PYTHON_DOMAIN: u32 = 0;

/// tracemalloc's domain for NumPy buffers (numpy's `NPY_TRACE_DOMAIN`).
pub const NUMPY_DOMAIN: u32 = 389_047;

/// The domain of native blocks and mappings: "nat" in ASCII.
pub const NATIVE_DOMAIN: u32 = 0x006E_6174;

/// The domain of MLX's buffers in capture files: "mlx" in ASCII.
pub const MLX_DOMAIN: u32 = 0x006D_6C78;

/// The device of native events in the event recorder (the Python heap's is
/// [`crate::HOST_DEVICE`]); memory_viz shows both in the host's list.
pub const NATIVE_DEVICE: i32 = -2;

/// A source of recorded memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemorySource {
    /// The Python allocators (PEP 445).
    Python,
    /// malloc/mmap calls of C, C++ and Rust code.
    Native,
    /// Array frameworks (NumPy's buffers, framework allocators).
    Framework,
    /// MLX's buffers (its caching allocator, watched).
    Mlx,
}

impl MemorySource {
    /// Every source, in display order.
    pub const ALL: [MemorySource; 4] = [
        MemorySource::Python,
        MemorySource::Native,
        MemorySource::Framework,
        MemorySource::Mlx,
    ];

    /// The source of a block of `domain`.
    #[inline]
    pub fn of_domain(domain: u32) -> Self {
        match domain {
            0 => MemorySource::Python,
            NATIVE_DOMAIN => MemorySource::Native,
            MLX_DOMAIN => MemorySource::Mlx,
            _ => MemorySource::Framework,
        }
    }

    /// The name users and files see.
    pub fn name(self) -> &'static str {
        match self {
            MemorySource::Python => "python",
            MemorySource::Native => "native",
            MemorySource::Framework => "framework",
            MemorySource::Mlx => "mlx",
        }
    }
}

/// Bytes per source.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SourceSplit {
    bytes: [u64; 4],
}

impl SourceSplit {
    fn index(source: MemorySource) -> usize {
        match source {
            MemorySource::Python => 0,
            MemorySource::Native => 1,
            MemorySource::Framework => 2,
            MemorySource::Mlx => 3,
        }
    }

    /// Bytes of `source`.
    pub fn get(&self, source: MemorySource) -> u64 {
        self.bytes[Self::index(source)]
    }

    /// The slot of `domain`'s source: domain 0 (the Python heap, nearly every event)
    /// without going through the other domains' compares.
    #[inline(always)]
    fn slot(&mut self, domain: u32) -> &mut u64 {
        let i = if domain == 0 {
            0
        } else {
            Self::index(MemorySource::of_domain(domain))
        };
        &mut self.bytes[i]
    }

    /// Adds `bytes` to the source of `domain`.
    #[inline]
    pub fn add(&mut self, domain: u32, bytes: u64) {
        let slot = self.slot(domain);
        *slot = slot.saturating_add(bytes);
    }

    /// Takes `bytes` from the source of `domain`.
    #[inline]
    pub fn sub(&mut self, domain: u32, bytes: u64) {
        let slot = self.slot(domain);
        *slot = slot.saturating_sub(bytes);
    }

    /// `(source, bytes)` in display order.
    pub fn iter(&self) -> impl Iterator<Item = (MemorySource, u64)> + '_ {
        MemorySource::ALL.into_iter().map(|s| (s, self.get(s)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn domains_map_to_sources() {
        let mut split = SourceSplit::default();
        split.add(0, 10);
        split.add(NATIVE_DOMAIN, 20);
        split.add(NUMPY_DOMAIN, 30);
        split.add(7, 1);
        split.add(MLX_DOMAIN, 40);
        split.sub(NATIVE_DOMAIN, 5);
        assert_eq!(
            split.iter().collect::<Vec<_>>(),
            vec![
                (MemorySource::Python, 10),
                (MemorySource::Native, 15),
                (MemorySource::Framework, 31),
                (MemorySource::Mlx, 40)
            ]
        );
    }
}
