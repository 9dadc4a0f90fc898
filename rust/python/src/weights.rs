//! Python binding of the weights-archive writer: numpy arrays' bytes to an .npz, without the GIL.

use std::path::PathBuf;

use numpy::PyReadonlyArray1;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use rlx_rules_core::npz::{write_npz, NpyMember};

use crate::errors::{new_err, Class};

/// write_npz(path, names, headers, data): a new .npz at `path` with one NAME.npy member per name, each its
/// .npy header followed by its data (a contiguous uint8 view of the array). Raises OutputError (an OSError)
/// when the file cannot be written, ParamError (a ValueError) for mismatched or non-contiguous arguments.
#[pyfunction]
#[pyo3(name = "write_npz")]
fn py_write_npz(
    py: Python<'_>,
    path: PathBuf,
    names: Vec<String>,
    headers: Vec<Bound<'_, PyBytes>>,
    data: Vec<PyReadonlyArray1<'_, u8>>,
) -> PyResult<()> {
    if names.len() != headers.len() || names.len() != data.len() {
        return Err(new_err(Class::Param, "argument", format!(
            "write_npz needs one header and one data array per name, got {} names, {} headers, {} arrays",
            names.len(),
            headers.len(),
            data.len()
        )));
    }
    let mut members = Vec::with_capacity(names.len());
    for ((name, header), array) in names.iter().zip(&headers).zip(&data) {
        let bytes = array
            .as_slice()
            .map_err(|_| new_err(Class::Param, "argument", format!("write_npz: the data of {name:?} is not contiguous")))?;
        members.push(NpyMember { name, header: header.as_bytes(), data: bytes });
    }
    py.detach(|| write_npz(&path, &members))
        .map_err(|e| new_err(Class::Output, "io", format!("cannot write {}: {e}", path.display())))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(py_write_npz, m)?)?;
    Ok(())
}
