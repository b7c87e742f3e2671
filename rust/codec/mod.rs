//! The codecs: a metadata to and from JSON text and dicts. Each part imports `metadata`,
//! `locator` and `tensor_spec`, never the other way round.
//!
//! - `format`: the documents `to_json()` and `to_dict()` write (the spec both sides follow).
//! - `encode/`: writing them (`Enc`: values, locators, dtypes; `json`: `to_json`; `dict`: `to_dict`).
//! - `decode/`: reading them (`build`: the metadata being rebuilt; `value`, `fields`, `paths`: values,
//!   entry fields, locators and `paths` tables; `entries`, `parts`, `doc`: `to_json` entries,
//!   `to_dict` parts, whole documents and `from_json`; `dict`: `from_dict`; `legacy`: the
//!   reference's pickled dicts).
//! - `text/`: JSON text itself (`write`, `parse`, and `sink`, the in-place `str` of large documents).
//! - `json_dict`: `to_json_dict()`, the reference's JSON-ready dict.
//! - `shared`: what both sides use (torch dtypes by name, type names, the one-shape rule).
//! - `methods`: the `SampleMetadata` Python methods above (a second `#[pymethods]` block).

pub mod decode;
pub mod encode;
pub mod format;
pub mod json_dict;
mod methods;
mod shared;
pub mod text;
