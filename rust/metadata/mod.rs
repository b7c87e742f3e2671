//! `SampleMetadata` and `ExactSampleMetadata`.
//!
//! A metadata's data has two forms, compact (what a walk builds: one path arena, a 12-byte record
//! per tensor, its sizes in a shared pool, the non-tensor leaves) and Python pairs (what a user
//! builds); `storage/` holds both and is the only code that tells them apart. Every operation
//! reads a metadata through its [`View`] and is written once.
//!
//! - `storage/`: [`Storage`] (the two forms, the pairs a compact one handed out, which one is the
//!   truth) and [`View`] (what operations read).
//! - `build`: building from a walk (the `Builder` visitor), the batch size, the LLM phase.
//! - `reuse`: what a thread keeps between walks (sizes, the last paths, spare buffers), and when.
//! - `key`: equality and hashing.
//! - `sample`: the `SampleMetadata` class; `learn`: `update_shapes_seen`. Its Python methods are
//!   in `api/sample_metadata.rs`, with the codecs'.
//! - `exact`: `ExactSampleMetadata`.
//!
//! It imports `walk`, `tensor_spec`, `paths`, `reader` and `interp`; the codecs import it.

pub mod build;
mod exact;
mod key;
mod learn;
mod reuse;
mod sample;
mod storage;

pub use exact::ExactSampleMetadata;
pub use key::value_hash;
pub use sample::SampleMetadata;
pub use storage::{
    pair, Compact, Fresh, Item, Loc, Part, SpecCells, Storage, View, RANK_LIMIT_MESSAGE,
};
