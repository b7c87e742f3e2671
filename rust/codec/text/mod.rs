//! JSON text, written and read in Rust: the low level of `to_json`/`from_json` and the `to_dict`
//! encoding. `write` emits JSON text, `parse` reads it, `sink` writes a large document straight
//! into the `str` that `to_json` returns.

pub mod parse;
pub mod sink;
pub mod write;

/// Deepest nesting of arrays and objects the reader accepts (the writer refuses values that would
/// go deeper).
pub const MAX_NESTING: usize = 512;
