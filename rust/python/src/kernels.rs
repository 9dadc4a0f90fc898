//! Python bindings of the fused attention kernels (numpy in, numpy out, GIL released).

use pyo3::prelude::*;

pub fn register(_m: &Bound<'_, PyModule>) -> PyResult<()> {
    Ok(())
}
