//! The writer's tests: a strict decoder for what it emits, the encodings, the trace and
//! segment mapping, and the real loaders (Python's `pickle`, torch's `_memory_viz.py`).

mod encoding_tests;
mod fixtures;
mod memo_entry_tests;
mod pickle_decoder;
mod python_tests;
mod segment_tests;
mod trace_tests;
