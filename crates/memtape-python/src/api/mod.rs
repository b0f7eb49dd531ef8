//! What Python sees: the `#[pyfunction]`s and classes of `memtape._native`, and the C ABI
//! capsule frameworks call. Thin wrappers over the layers below.

pub(crate) mod analysis_alongside;
pub(crate) mod c_api;
pub(crate) mod capture_analysis;
pub(crate) mod capture_api;
pub(crate) mod capture_exports;
pub(crate) mod capture_file;
pub(crate) mod capture_follow;
pub(crate) mod capture_live;
pub(crate) mod event_api;
pub(crate) mod followed_analysis;
pub(crate) mod framework_api;
pub(crate) mod mlx_api;
pub(crate) mod own_work;
pub(crate) mod prefaulted;
pub(crate) mod report_api;
pub(crate) mod snapshot_file;
pub(crate) mod trace_set_py;
pub(crate) mod tracemalloc_api;
pub(crate) mod tracemalloc_capi;
