//! The Rust core of `aitune_fast`: walking forward arguments, locators, tensor specs, metadata
//! equality and hashing, shape learning and JSON.
//!
//! Folders by layer, bottom up (`layers.rs` checks that none names one above it):
//! - `stack` (the recursion guard every recursive path calls);
//! - `interp` (Python objects looked up once) and `reader/` (tensor sizes and dtypes through torch's
//!   C interfaces);
//! - `paths/` (the path arena, `Locator`) and `tensor_spec/` (`TensorSpec`, dtype ids, shape
//!   merging, reading one tensor);
//! - `walk/` (the type registry and the walk over nested arguments);
//! - `metadata/` (`SampleMetadata`, `ExactSampleMetadata`: compact storage, equality and hashing,
//!   building from a walk, shape learning);
//! - `codec/` (JSON text and dicts, both ways);
//! - `api/` (the Python method tables of `Locator` and `SampleMetadata`, whose methods come from
//!   several layers);
//! - `patch/` (the AITune patch's runtime: the tuned-call path, its binding plans, the guards on
//!   the code it does in place of Python's, the scans of live objects; mirrors
//!   `python/aitune_fast/patch/`).

use pyo3::prelude::*;

mod api;
pub mod codec;
pub mod interp;
#[cfg(test)]
mod layers;
pub mod metadata;
mod patch;
pub mod paths;
pub mod reader;
pub mod stack;
pub mod tensor_spec;
pub mod walk;

#[pymodule(gil_used = true)]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<paths::Locator>()?;
    m.add_class::<tensor_spec::TensorSpec>()?;
    m.add_class::<metadata::SampleMetadata>()?;
    m.add_class::<metadata::ExactSampleMetadata>()?;
    m.add_class::<patch::CallPath>()?;
    m.add_class::<patch::BindPlan>()?;
    m.add_class::<patch::BindCache>()?;
    m.add_class::<patch::DescribeCache>()?;
    m.add_class::<patch::ClassGuard>()?;
    m.add_class::<patch::NameGuard>()?;
    m.add_class::<patch::ContextPart>()?;
    m.add_class::<patch::ForwardPart>()?;
    m.add_class::<patch::TunedCallPart>()?;
    m.add_class::<patch::InferPart>()?;
    m.add_class::<patch::EagerPart>()?;
    m.add_class::<patch::MetricsPart>()?;
    m.add_class::<patch::ModuleCallPart>()?;
    m.add_function(wrap_pyfunction!(walk::registry::_type_registry, m)?)?;
    m.add_function(wrap_pyfunction!(codec::safe_enums::_safe_enum_table, m)?)?;
    m.add("MAX_DEPTH", walk::traversal::MAX_DEPTH)?;
    m.add("_STOCK_STEP", patch::stock_step(m.py())?)?;
    m.add_function(wrap_pyfunction!(patch::_gc_objects_but_tuples, m)?)?;
    m.add_function(wrap_pyfunction!(patch::_frames_running, m)?)?;
    m.add_function(wrap_pyfunction!(patch::_still_running, m)?)?;
    m.add_function(wrap_pyfunction!(patch::_set_dispatch_stats, m)?)?;
    m.add_function(wrap_pyfunction!(patch::_dispatch_stats_on, m)?)?;
    m.add_function(wrap_pyfunction!(patch::_dispatch_stats, m)?)?;
    m.add_function(wrap_pyfunction!(patch::_reset_dispatch_stats, m)?)?;
    m.add_function(wrap_pyfunction!(reader::tensor_reader, m)?)?;
    m.add_function(wrap_pyfunction!(reader::tensor_readers_available, m)?)?;
    m.add_function(wrap_pyfunction!(reader::force_tensor_reader, m)?)?;
    m.add_function(wrap_pyfunction!(reader::dlpack_stats, m)?)?;
    m.add_function(wrap_pyfunction!(reader::stable_abi_extent, m)?)?;
    Ok(())
}
