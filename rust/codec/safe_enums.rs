//! The Enum classes whose members the codecs encode (`{"$enum": [class, member]}`): the list the
//! user keeps with `aitune_fast.add_safe_enums` / `remove_safe_enums` (`_safe_enums.py`, which
//! checks and names the classes and serializes the changes).
//!
//! The list is one process-wide dict, qualified class name (`module.QualName`) -> class, created
//! here and handed to Python by `_safe_enum_table()`. The codecs only read it: one lookup per
//! value, under the GIL, so a reader sees the list before or after a change, never half of one.
//! A document's class name is only ever looked up in it: nothing is imported.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyString, PyType};

use super::error::{CodecError, CodecResult};
use super::syntax::escape_wtf8;
use crate::paths::str_bytes;

static TABLE: PyOnceLock<Py<PyDict>> = PyOnceLock::new();

fn table(py: Python<'_>) -> &Bound<'_, PyDict> {
    TABLE.get_or_init(py, || PyDict::new(py).unbind()).bind(py)
}

/// The allow-list itself (`{qualified name: class}`), for `aitune_fast._safe_enums` to change.
#[pyfunction]
pub fn _safe_enum_table(py: Python<'_>) -> Bound<'_, PyDict> {
    table(py).clone()
}

/// The name `ty` is allowed under, if it is on the list (compared by identity: no Python code).
pub(super) fn allowed_name<'py>(
    py: Python<'py>,
    ty: &Bound<'py, PyType>,
) -> Option<Bound<'py, PyString>> {
    let t = table(py);
    if t.is_empty() {
        return None;
    }
    // `items()`: a snapshot, whatever another thread does to the list meanwhile
    t.items().iter().find_map(|pair| {
        let (name, class) = pair
            .extract::<(Bound<'py, PyAny>, Bound<'py, PyAny>)>()
            .ok()?;
        if class.is(ty) {
            name.cast_into::<PyString>().ok()
        } else {
            None
        }
    })
}

/// The member of an allowed Enum class `ty` (on the list as `name`) that `v` is, by its name;
/// a `TypeError` for a value that is not one of the class's named members (a composite flag).
pub(super) fn member_name<'py>(
    v: &Bound<'py, PyAny>,
    ty: &Bound<'py, PyType>,
    name: &Bound<'py, PyString>,
) -> CodecResult<Bound<'py, PyString>> {
    let py = v.py();
    let member = v.getattr(pyo3::intern!(py, "_name_"))?;
    if let Ok(m) = member.cast_into::<PyString>() {
        let members = ty.getattr(pyo3::intern!(py, "__members__"))?;
        if let Ok(found) = members.get_item(&m) {
            if found.is(v) {
                return Ok(m);
            }
        }
    }
    Err(CodecError::type_error(format!(
        "{} is not one of the named members of {} (composite flags cannot be encoded)",
        v.repr().map(|r| r.to_string()).unwrap_or_default(),
        escaped(name)?,
    )))
}

/// A name escaped for a message between double quotes, any lone surrogate in it as Python writes
/// it (`E\\udce9`).
fn escaped(name: &Bound<'_, PyString>) -> PyResult<String> {
    Ok(escape_wtf8(&str_bytes(name)?))
}

/// The member `member` of the allowed class named `class` (a refusal, not yet placed, if the
/// class is not on the list or has no such member). Names are compared as Python compares strs.
pub(super) fn member_of<'py>(
    py: Python<'py>,
    class: &Bound<'py, PyString>,
    member: &Bound<'py, PyString>,
) -> CodecResult<Bound<'py, PyAny>> {
    let Some(ty) = table(py).get_item(class)? else {
        let class = escaped(class)?;
        let short = class.rsplit('.').next().unwrap_or_default();
        return Err(CodecError::value(format!(
            "$enum class \"{class}\" is not allowed: documents name Enum classes, they never import \
             them; allow it before reading with aitune_fast.add_safe_enums([{short}])"
        )));
    };
    let members = ty.getattr(pyo3::intern!(py, "__members__"))?;
    match members.get_item(member) {
        Ok(m) => Ok(m),
        Err(e) if e.is_instance_of::<pyo3::exceptions::PyKeyError>(py) => {
            Err(CodecError::value(format!(
                "$enum class \"{}\" has no member \"{}\"",
                escaped(class)?,
                escaped(member)?
            )))
        }
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::CString;

    use super::*;

    fn color(py: Python<'_>) -> Bound<'_, PyType> {
        let code = CString::new(
            "import enum\nclass Color(enum.Enum):\n    RED = 1\n    CRIMSON = 1\n    BLUE = 2\n",
        )
        .unwrap();
        let globals = PyDict::new(py);
        py.run(&code, Some(&globals), None).unwrap();
        globals
            .get_item("Color")
            .unwrap()
            .unwrap()
            .cast_into()
            .unwrap()
    }

    fn pystr<'py>(py: Python<'py>, s: &str) -> Bound<'py, PyString> {
        PyString::new(py, s)
    }

    fn message(py: Python<'_>, e: CodecError) -> String {
        e.into_pyerr(py).value(py).str().unwrap().to_string()
    }

    #[test]
    fn only_listed_classes_are_found_both_ways() {
        Python::attach(|py| {
            let c = color(py);
            let red = c.getattr("RED").unwrap();
            assert!(allowed_name(py, &c).is_none());
            let e = member_of(py, &pystr(py, "x.Color"), &pystr(py, "RED")).unwrap_err();
            let m = message(py, e);
            assert!(
                m.contains("not allowed") && m.contains("add_safe_enums([Color])"),
                "{m}"
            );

            table(py).set_item("x.Color", &c).unwrap();
            let name = allowed_name(py, &c).unwrap();
            assert_eq!(name.to_str().unwrap(), "x.Color");
            assert!(member_of(py, &pystr(py, "x.Color"), &pystr(py, "RED"))
                .unwrap()
                .is(&red));
            // an alias is written under its canonical member's name
            let crimson = c.getattr("CRIMSON").unwrap();
            let n = member_name(&crimson, &c, &name).unwrap();
            assert_eq!(n.to_str().unwrap(), "RED");
            let m = message(
                py,
                member_of(py, &pystr(py, "x.Color"), &pystr(py, "GREEN")).unwrap_err(),
            );
            assert!(m.contains("has no member \"GREEN\""), "{m}");
            // a name that is not on the list is never resolved any other way
            assert!(member_of(py, &pystr(py, "builtins.object"), &pystr(py, "x")).is_err());
            table(py).del_item("x.Color").unwrap();
            assert!(allowed_name(py, &c).is_none());
        });
    }
}
