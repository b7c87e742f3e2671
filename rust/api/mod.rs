//! The Python method tables of the classes whose methods come from several layers, at the top of
//! the crate: `Locator` (`paths/` and the walk's staticmethods) and `SampleMetadata` (`metadata/`
//! and the codecs). pyo3 builds a class's methods from one `#[pymethods]` block; its
//! `multiple-pymethods` feature would allow one per layer, but then every type lookup pyo3 makes
//! (each call's argument and `self` checks) allocates and frees an iterator over the blocks:
//! about 1,000 instructions of a one-tensor dispatch.

mod locator;
mod sample_metadata;

pub(crate) use sample_metadata::describe_inputs;
