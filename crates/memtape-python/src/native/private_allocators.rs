//! The loaded objects with an allocator of their own (mimalloc or jemalloc inside a
//! wheel, ...): memory they take never reaches libc's `malloc`, so the hooks cannot see
//! it. Listed when a capture ends, for the trailer, so that reports can say where the
//! untracked part of the RSS may come from.

use memtape_core::report::{private_allocator_of_file, PrivateAllocator};

use super::loaded_modules::loaded_modules;
use crate::hook_mode;

/// Every loaded object (each path once) whose symbols name an allocator of its own.
pub(crate) fn private_allocators() -> Vec<PrivateAllocator> {
    hook_mode::untraced(|| {
        let mut seen = std::collections::HashSet::new();
        loaded_modules()
            .into_iter()
            .filter(|m| m.path.starts_with('/') && seen.insert(m.path.clone()))
            .filter_map(|m| {
                let (allocator, symbol) = private_allocator_of_file(m.path.as_ref())?;
                Some(PrivateAllocator {
                    path: m.path,
                    allocator: allocator.to_owned(),
                    symbol,
                })
            })
            .collect()
    })
}
