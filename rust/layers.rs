//! The crate's layers, bottom up: `stack` (the recursion guard); `interp` and `reader`; `paths`
//! and `tensor_spec`; `walk`; `metadata`; `codec`; `api`; `patch`. A module never names a layer above its own (where a lower one needs
//! something from above, it is passed in, or the method lives above: the Python method tables of
//! `Locator` and `SampleMetadata` are in `api/`). Checked here, in tests, by reading the sources.
//!
//! Also checked here: every module of the package that the Rust side names by string (an
//! `import("aitune_fast...")`, a class's `module = "aitune_fast..."`) exists under `python/`, so that a
//! rename on the Python side fails these tests rather than a user's call.

use std::path::{Path, PathBuf};

/// The layers, bottom up. A module names no module of its own layer or of one above.
const LAYERS: &[&[&str]] = &[
    &["stack"],
    &["interp", "reader"],
    &["paths", "tensor_spec"],
    &["walk"],
    &["metadata"],
    &["codec"],
    &["api"],
    &["patch"],
];

fn rust_files(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_file() {
        out.push(path.to_path_buf());
        return;
    }
    for entry in std::fs::read_dir(path).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Whether `code` names the module `module`: `crate::module` (paths from the crate root are
/// the only way a module reaches another layer; `super::` stays inside a folder).
fn names(code: &str, module: &str) -> bool {
    let needle = format!("crate::{module}");
    code.match_indices(&needle).any(|(at, _)| {
        let after = code[at + needle.len()..].chars().next();
        !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
    })
}

fn offenders(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for (rank, layer) in LAYERS.iter().enumerate() {
        for part in layer.iter() {
            let above: Vec<&str> = LAYERS[rank..]
                .iter()
                .flat_map(|l| l.iter().copied())
                .filter(|m| m != part)
                .collect();
            let file = root.join(format!("{part}.rs"));
            let source = if file.is_file() {
                file
            } else {
                root.join(part)
            };
            let mut files = Vec::new();
            rust_files(&source, &mut files);
            assert!(!files.is_empty(), "no sources for {part}");
            for file in files {
                let text = std::fs::read_to_string(&file).unwrap();
                for (i, line) in text.lines().enumerate() {
                    let code = line.split("//").next().unwrap_or("");
                    for m in above.iter().filter(|m| names(code, m)) {
                        out.push(format!("{}:{}: {part} names {m}", file.display(), i + 1));
                    }
                }
            }
        }
    }
    out
}

#[test]
fn names_reach_only_the_crate_root_form() {
    assert!(names("use crate::metadata::View;", "metadata"));
    assert!(names("crate::walk::traversal::walk(py)", "walk"));
    assert!(!names("crate::walker", "walk"));
    assert!(!names("use super::walk;", "walk"));
}

#[test]
fn no_layer_names_one_above_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("rust");
    let found = offenders(&root);
    assert!(
        found.is_empty(),
        "lower layers name higher ones: {found:#?}"
    );
}

#[test]
fn every_module_has_a_layer() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("rust");
    for entry in std::fs::read_dir(&root).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if name == "lib" || name == "layers" {
            continue;
        }
        assert!(
            LAYERS.iter().any(|l| l.contains(&name.as_str())),
            "rust/{name} has no layer in LAYERS"
        );
    }
}

/// The package's modules that `code` names by string: imported (`import("aitune_fast.x")`, the
/// literal possibly on the next line) or given as a class's module (`module = "aitune_fast.x"`).
fn python_modules_named(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    for opener in ["import(", "module ="] {
        for (at, _) in code.match_indices(opener) {
            let rest = code[at + opener.len()..].trim_start();
            let Some(literal) = rest.strip_prefix('"') else {
                continue;
            };
            let name = &literal[..literal.find('"').unwrap_or(0)];
            if name == "aitune_fast" || name.starts_with("aitune_fast.") {
                out.push(name.to_owned());
            }
        }
    }
    out
}

/// Whether `python/` holds the module `name`: its source, its package, or (for the extension,
/// which is built) its stub.
fn python_module_exists(python: &Path, name: &str) -> bool {
    let base = python.join(name.replace('.', "/"));
    base.with_extension("py").is_file()
        || base.join("__init__.py").is_file()
        || base.with_extension("pyi").is_file()
}

#[test]
fn python_modules_are_found_by_their_names() {
    let code =
        "let m = py.import(\"aitune_fast._legacy\")?;\n    .import(\n \"aitune_fast._config\")\n\
                #[pyclass(module = \"aitune_fast.locator\")] py.import(\"torch\")";
    assert_eq!(
        python_modules_named(code),
        [
            "aitune_fast._legacy",
            "aitune_fast._config",
            "aitune_fast.locator"
        ]
    );
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("python");
    assert!(python_module_exists(&python, "aitune_fast._legacy"));
    assert!(python_module_exists(&python, "aitune_fast._core"));
    assert!(!python_module_exists(
        &python,
        "aitune_fast._no_such_module"
    ));
}

#[test]
fn python_modules_named_in_rust_exist() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = manifest.join("python");
    let mut files = Vec::new();
    rust_files(&manifest.join("rust"), &mut files);
    let mut named = 0;
    let mut missing = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let code: Vec<&str> = text
            .lines()
            .map(|line| line.split("//").next().unwrap_or(""))
            .collect();
        for name in python_modules_named(&code.join("\n")) {
            named += 1;
            if !python_module_exists(&python, &name) {
                missing.push(format!("{}: {name}", file.display()));
            }
        }
    }
    assert!(
        named >= 10,
        "found only {named} module names: is the scan broken?"
    );
    assert!(
        missing.is_empty(),
        "modules named in Rust but not under python/: {missing:#?}"
    );
}
