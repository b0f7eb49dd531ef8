fn main() {
    // Emits `Py_3_12`, `Py_3_13`, ... so the per-version frame layouts are chosen at compile time.
    pyo3_build_config::use_pyo3_cfgs();
}
