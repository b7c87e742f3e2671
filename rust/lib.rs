//! The Rust core of `aitune_fast`: walking forward arguments, locators, tensor specs, metadata
//! equality and hashing, shape learning and JSON.

use pyo3::prelude::*;

pub mod codec;
pub mod handed;
pub mod interp;
pub mod locator;
pub mod metadata;
pub mod reader;
pub mod registry;
pub mod tensor_spec;
pub mod traversal;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<locator::Locator>()?;
    m.add_class::<tensor_spec::TensorSpec>()?;
    m.add_class::<metadata::SampleMetadata>()?;
    m.add_class::<metadata::ExactSampleMetadata>()?;
    m.add_function(wrap_pyfunction!(registry::_type_registry, m)?)?;
    m.add("MAX_DEPTH", traversal::MAX_DEPTH)?;
    m.add_function(wrap_pyfunction!(reader::tensor_reader, m)?)?;
    m.add_function(wrap_pyfunction!(reader::tensor_readers_available, m)?)?;
    m.add_function(wrap_pyfunction!(reader::force_tensor_reader, m)?)?;
    m.add_function(wrap_pyfunction!(reader::dlpack_stats, m)?)?;
    m.add_function(wrap_pyfunction!(reader::stable_abi_extent, m)?)?;
    Ok(())
}
