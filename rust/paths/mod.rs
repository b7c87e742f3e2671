//! Paths into nested arguments.
//!
//! A metadata object stores all of its paths in one [`Arena`]: a prefix tree whose nodes are
//! `(parent, accessor, object type)` steps. Leaves share their containers' nodes, so a path costs
//! one node however deep it is, and each node carries the hash of its whole path, so comparing two
//! paths usually ends at the first node. [`Locator`] is the Python face of one node; it is only
//! created when the caller asks for locators.
//!
//! - `text`: [`Text`] (UTF-8 that keeps lone surrogates), `str` bytes and equality, `format()`.
//! - `accessor`: one step, [`Kind`] and [`Accessor`], and Python's equality and int hashing.
//! - `arena`: the [`Arena`] of nodes, path equality, display and access paths.
//! - `index`: [`PathIndex`], entries found by path (a hash table over the nodes' path hashes).
//! - `shared`: [`SharedArena`], a finished arena as metadata and locators share it (a Python object,
//!   so the cycle collector sees the keys it holds).
//! - `locator`: the [`Locator`] class, `get_value`/`set_value`.
//!
//! This folder imports only `interp`; `Locator`'s Python methods, with the staticmethods that walk,
//! are in `api/locator.rs`.

mod accessor;
mod arena;
mod index;
mod locator;
mod shared;
mod text;

pub use accessor::{cached_str_hash, mix, py_int_hash, rich_eq, Accessor, Kind};
pub use arena::{hash_to_isize, path_eq, Arena, DisplayCache, Node, ROOT, SPARE_BOUND};
pub use index::PathIndex;
pub use locator::{set_value, step_into, Locator};
pub use shared::SharedArena;
pub use text::{decode_surrogatepass, format_obj, str_bytes, str_eq, Text};
