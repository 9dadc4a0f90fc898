//! pyo3 binding layer: exposes rlx-rules-core to Python as `rlx_rules._native`; no logic lives here.

use pyo3::prelude::*;

mod engine;
mod errors;
mod fd_write;
mod kernels;
mod weights;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    errors::register(m)?;
    engine::register(m)?;
    kernels::register(m)?;
    weights::register(m)?;
    Ok(())
}
