//! The walk: which types are containers and how to enter them, and the iterative walk over
//! nested arguments that reports each leaf with its path.
//!
//! - `registry`: registered user types, ignored types, the per-type classification cache.
//! - `traversal`: the walk itself (`walk` with a [`traversal::Visitor`], `find_leaves`), cycle
//!   and depth checks.
//! - `memo`: what each thread keeps from walk to walk (type classifications, user-type field
//!   layouts) and the cycle check's stack.
//!
//! It imports `paths`, `reader` and `interp`, never `tensor_spec`, `metadata` or the codecs.

mod memo;
pub mod registry;
pub mod traversal;
