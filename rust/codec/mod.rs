//! The codecs: a metadata to and from JSON text and dicts. Each part imports `metadata`,
//! `locator` and `tensor_spec`, never the other way round.
//!
//! - `format`: the documents `to_json()` and `to_dict()` write (the spec both sides follow).
//! - `encode/`: writing them (`Enc`: values, locators, dtypes; `json`: `to_json`; `dict`: `to_dict`;
//!   `sink`: the in-place `str` of large documents).
//! - `decode/`: reading them (`build`: the metadata being rebuilt; `value`, `fields`, `paths`: values,
//!   entry fields, locators and `paths` tables; `entries`, `parts`, `doc`: `to_json` entries,
//!   `to_dict` parts, whole documents and `from_json`; `dict`: `from_dict`; `legacy`: the
//!   reference's pickled dicts).
//! - `syntax/`: JSON text itself, in plain Rust (`read`, `write`).
//! - `error`: the one error type (`CodecError`), made a Python exception only where Python called.
//! - `json_dict`: `to_json_dict()`, the reference's JSON-ready dict.
//! - `safe_enums`: the Enum classes the user allowed (`$enum`), looked up by name, never imported.
//! - `shared`: what both sides use (torch dtypes by name, devices by text, type names, the
//!   one-shape rule).

pub mod decode;
pub mod encode;
pub mod error;
pub mod format;
pub mod json_dict;
pub mod safe_enums;
mod shared;
pub mod syntax;

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                rust_files(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    /// The codecs sit above `metadata`, `paths` and `tensor_spec`: no module outside `codec/`
    /// and `api/` (the Python method tables, above everything) names them in code (the crate root
    /// only declares the module; `layers.rs` lists it).
    #[test]
    fn no_module_below_imports_the_codecs() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("rust");
        let mut files = Vec::new();
        rust_files(&root, &mut files);
        let mut offenders = Vec::new();
        for file in files {
            let exempt = ["lib.rs", "layers.rs"].map(|f| root.join(f));
            let above = file.starts_with(root.join("codec")) || file.starts_with(root.join("api"));
            if above || exempt.contains(&file) {
                continue;
            }
            let text = std::fs::read_to_string(&file).unwrap();
            for (i, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or("");
                let named = code.match_indices("codec").any(|(at, _)| {
                    let before = code[..at].chars().next_back();
                    let after = code[at + "codec".len()..].chars().next();
                    let ident =
                        |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
                    !ident(before) && !ident(after)
                });
                if named {
                    offenders.push(format!("{}:{}: {}", file.display(), i + 1, line.trim()));
                }
            }
        }
        assert!(
            offenders.is_empty(),
            "modules below the codecs name them: {offenders:#?}"
        );
    }

    /// The JSON syntax layer is plain Rust: it names no PyO3 (its errors are `JsonError`s).
    #[test]
    fn the_syntax_layer_uses_no_python() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("rust/codec/syntax");
        let mut files = Vec::new();
        rust_files(&dir, &mut files);
        assert!(files.len() >= 3, "{files:?}");
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            assert!(!text.contains("pyo3"), "{} uses PyO3", file.display());
        }
    }
}
