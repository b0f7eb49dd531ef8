//! The Python face of MLX watching (`memtape._mlx` decides when).

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

use crate::api::own_work::own_work;
use crate::native::mlx_hook;

/// Starts reporting MLX's buffers (the loaded `libmlx.so` at `library`); returns the
/// number of call sites routed through memtape.
#[pyfunction]
pub(crate) fn _mlx_attach<'py>(py: Python<'py>, library: &str) -> PyResult<Bound<'py, PyAny>> {
    own_work(py, || {
        mlx_hook::attach(library).map_err(|m| PyRuntimeError::new_err(format!("MLX: {m}")))
    })
}

/// Stops reporting MLX's buffers and gives MLX its own allocator back.
#[pyfunction]
pub(crate) fn _mlx_detach(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    own_work(py, || {
        mlx_hook::detach();
        Ok(())
    })
}

/// Reports the cache evictions (`clear_cache`, `set_cache_limit`) not reported yet.
#[pyfunction]
pub(crate) fn _mlx_sync(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    own_work(py, || {
        py.detach(mlx_hook::sync);
        Ok(())
    })
}

/// `(watching, patched call sites)`.
#[pyfunction]
pub(crate) fn _mlx_status() -> (bool, usize) {
    mlx_hook::status()
}
