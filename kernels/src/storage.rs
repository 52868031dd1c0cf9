//! Access to the CPU storage a custom op receives (the public functions make
//! every input contiguous before applying an op).

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, Layout, Result};

/// The f32 data of a CPU storage.
pub(crate) fn f32_slice<'a>(s: &'a CpuStorage, what: &str) -> Result<&'a [f32]> {
    match s {
        CpuStorage::F32(x) => Ok(x),
        _ => candle_core::bail!("{what} must be f32, got {:?}", s.dtype()),
    }
}

/// The elements of a contiguous layout (the public functions make inputs contiguous).
pub(crate) fn contiguous_slice<'a, T>(data: &'a [T], layout: &Layout, what: &str) -> Result<&'a [T]> {
    match layout.contiguous_offsets() {
        Some((start, end)) => Ok(&data[start..end]),
        None => candle_core::bail!("{what} must be contiguous"),
    }
}
