//! `SampleMetadata` and `ExactSampleMetadata`.
//!
//! Metadata built by a walk is *compact*: one path arena, a 12-byte record per tensor, its sizes in
//! a shared pool, and the non-tensor leaves. No Python object is made per tensor until the caller
//! asks for `tensor_data`; the Python `(Locator, TensorSpec)` pairs it then hands out are kept
//! (once, in a cell: reading them needs no exclusive access) and from then on are the truth (so
//! mutating a spec's lists changes the metadata, as in the reference). The compact form stays
//! beside them and serves every operation while the specs still hold what it holds (see
//! `handed.rs`). Every operation reads either form through [`View`].
//!
//! - `compact`: [`Compact`], the storage a walk builds.
//! - `view`: [`View`], compact or Python pairs, and reading the Python pairs.
//! - `handed`: the pairs handed out through `tensor_data`, and whether they still say what the
//!   compact form says.
//! - `build`: building from a walk (the `Builder` visitor), the batch size, the LLM phase.
//! - `reuse`: what a thread keeps between walks (sizes, the last paths, spare buffers), and when.
//! - `key`: equality and hashing.
//! - `sample`: the `SampleMetadata` class and its data; `learn`: `update_shapes_seen`. Its Python
//!   methods are in `api/sample_metadata.rs`, with the codecs'.
//! - `exact`: `ExactSampleMetadata`.
//!
//! It imports `walk`, `tensor_spec`, `paths`, `reader` and `interp`; the codecs import it.

pub mod build;
mod compact;
mod exact;
mod handed;
mod key;
mod learn;
mod reuse;
mod sample;
mod view;

pub use compact::{Compact, Item};
pub use exact::ExactSampleMetadata;
pub use key::value_hash;
pub use sample::{Data, SampleMetadata};
pub use view::{pair, Loc, PyView, View};
