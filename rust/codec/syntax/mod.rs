//! JSON text, read and written in plain Rust (no Python in here): the low level of
//! `to_json`/`from_json` and of the `to_dict` encoding. `read` is the reader (a pull parser whose
//! errors carry a byte offset), `write` the writer.

pub mod read;
pub mod write;

/// Deepest nesting of arrays and objects the reader accepts (the writer refuses values that would
/// go deeper).
pub const MAX_NESTING: usize = 512;

#[cfg(test)]
mod properties;
