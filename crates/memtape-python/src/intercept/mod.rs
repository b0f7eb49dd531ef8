//! Where an event enters: CPython's allocator hooks (PEP 445), NumPy's data allocator
//! and the reference tracer. Each hook captures the stack and hands the event to the
//! recorder ([`crate::record`]). Native allocations enter through [`crate::native`].

pub(crate) mod heap_record;
pub(crate) mod hooks;
pub(crate) mod numpy_handler;
pub(crate) mod pymalloc_beneath;
pub(crate) mod ref_tracer;
