//! Native allocations: every `malloc`-family and anonymous `mmap` call of C, C++ and Rust
//! code in the process, seen by pointing the GOT slots of every loaded object at our
//! hooks while something records (no LD_PRELOAD, no restart), and recorded in a domain
//! of their own with the calling thread's Python stack.
//!
//! - [`elf_slots`] finds the `JUMP_SLOT`/`GLOB_DAT` slots naming the hooked functions;
//! - [`got_patcher`] points the ones that still hold libc's function at our hooks, and
//!   back;
//! - [`hooked_functions`] names the functions hooked and the real ones behind them;
//! - [`alloc_hooks`] are the hooks; [`dlopen_hook`] patches objects loaded later;
//! - [`native_record`] records blocks and mapped ranges;
//! - [`patch_control`] turns this on and off for the sinks that follow native memory;
//! - [`unwind`] reads the native stack on request (`memtape run --native`);
//! - [`private_allocators`] lists the objects with an allocator of their own (not seen);
//! - [`symbol_redirect`] points calls of the interpreter's own functions (its tracemalloc
//!   C API) at memtape's (same patcher);
//! - [`mlx_hook`] puts a forwarding allocator in front of MLX's (same patcher):
//!   [`mlx_allocator`] is its C++ layout, [`mlx_buffer_events`] what it reports and
//!   [`mlx_graph`] the lazy graph's creation lines.
//!
//! memtape's own `.so`, the dynamic linker and the vdso are never patched: Rust's
//! allocator reaches libc through our own GOT, so the recorder's tables are not seen.

mod alloc_hooks;
mod dlopen_hook;
mod elf_slots;
mod got_patcher;
mod hooked_functions;
mod mlx_allocator;
mod mlx_buffer_events;
mod mlx_graph;
pub(crate) mod mlx_hook;
mod native_record;
mod patch_control;
mod private_allocators;
pub(crate) mod symbol_redirect;
pub(crate) mod unwind;

/// The switch and the sinks' bits live with the state the recorder keeps.
pub(crate) use crate::record::native_state::{
    reentered, ACTIVE, REENTERED, SINK_CAPTURE, SINK_EVENTS, SINK_TRACEMALLOC,
};
pub(crate) use alloc_hooks::beneath_wrapper;
/// tracemalloc's domain for native blocks and mappings ("nat" in ASCII).
pub(crate) use memtape_core::NATIVE_DOMAIN;
pub(crate) use patch_control::{counters, linger, start, stop, wanted_by_tracemalloc};
pub(crate) use private_allocators::private_allocators;
