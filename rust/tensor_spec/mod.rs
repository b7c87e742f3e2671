//! Tensor specs: shapes, the range of shapes seen, batch-size multipliers, and how they merge.
//!
//! - `shape`: [`Dim`] and [`Spec`], the plain Rust form every computation uses; merging and
//!   batch-size multipliers; the `describe` text.
//! - `dtype`: the process-wide table of dtype ids.
//! - `read`: [`read_tensor`], a tensor's sizes and dtype during a walk (through `reader/` when a
//!   fast reader may read it), and [`DtypeMemo`].
//! - `class`: [`TensorSpec`], the Python class.
//!
//! This folder imports `reader` and `interp`, never the walk, `metadata` or the codecs.

mod class;
mod dtype;
mod read;
mod shape;

pub use class::{dim_list, Multiplier, TensorSpec, FIELD_SETS};
pub use dtype::{dtype_id, dtype_obj, dtype_str, FOREIGN_DTYPE};
pub use read::{read_tensor, DtypeMemo};
pub use shape::{is_int, is_symbolic, multiplier, Dim, Spec};
