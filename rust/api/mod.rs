//! The Python method tables of the classes whose methods come from several layers, at the top of
//! the crate: `Locator` (`paths/` and the walk's staticmethods) and `SampleMetadata` (`metadata/`
//! and the codecs). pyo3 builds a class's methods from one `#[pymethods]` block; its
//! `multiple-pymethods` feature would allow one per layer, but then every type lookup pyo3 makes
//! (each call's argument and `self` checks) allocates and frees an iterator over the blocks:
//! about 1,000 instructions of a one-tensor dispatch.

mod bind_plan;
mod call_path;
mod live;
mod locator;
mod sample_metadata;

pub use bind_plan::BindPlan;
pub use call_path::CallPath;
pub use live::{_frames_running, _gc_objects_but_tuples, _still_running};
