//! Reading a metadata back: `from_json()` (`doc`) and `from_dict()` (`dict`, `legacy`), both into
//! one `Build`.

mod build;
mod dict;
mod doc;
mod entries;
mod fields;
mod legacy;
mod parts;
mod paths;
mod value;

pub use dict::from_dict;
pub use doc::from_json;
