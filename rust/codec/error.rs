//! The codecs' one error type. Every codec function returns [`CodecResult`]; the Python exception
//! is made once, in the codec functions Python calls ([`CodecError::into_pyerr`]).
//!
//! An error either came from Python (a user's `__hash__`, a `MemoryError`, a `KeyboardInterrupt`)
//! and is passed on as it is, or is a refusal of the codec's own: a kind (`ValueError`,
//! `TypeError`, `RecursionError`), a message, and, while decoding text, the byte offset and the
//! entry it was found in. A `ValueError` refusal in text (`from_json`, a `from_dict` part) becomes a
//! `MetadataDecodeError` placed there ([`CodecError::into_decode_error`]; Python's
//! `JSONDecodeError` works out the line and column). No message is ever read back from an
//! exception.

use std::borrow::Cow;

use pyo3::exceptions::{PyRecursionError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyString, PyType};
use pyo3::PyTypeInfo;

use super::syntax::read::JsonError;

/// The Python exception class a refusal becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Value,
    Type,
    Recursion,
}

/// A refusal of the codec's own.
#[derive(Debug)]
pub struct Refusal {
    pub kind: Kind,
    pub msg: Cow<'static, str>,
    /// where in the text it was found (decoding text)
    pub pos: Option<usize>,
    /// the entry being read (`("tensor_data", 3)`), shown before the message
    pub entry: Option<(&'static str, usize)>,
    /// the exception Python raised that made the codec refuse (`__cause__` of the one raised)
    pub cause: Option<PyErr>,
}

#[derive(Debug)]
pub enum CodecError {
    /// Raised by Python: passed on unchanged.
    Python(PyErr),
    /// The codec's own (boxed: results stay two words wide on the hot paths).
    Refused(Box<Refusal>),
}

pub type CodecResult<T> = Result<T, CodecError>;

impl From<PyErr> for CodecError {
    fn from(e: PyErr) -> CodecError {
        CodecError::Python(e)
    }
}

impl From<pyo3::CastError<'_, '_>> for CodecError {
    fn from(e: pyo3::CastError<'_, '_>) -> CodecError {
        CodecError::Python(e.into())
    }
}

impl From<JsonError> for CodecError {
    #[cold]
    fn from(e: JsonError) -> CodecError {
        match e {
            JsonError::Syntax { pos, msg } => CodecError::refuse(Kind::Value, msg).at(pos),
            JsonError::Stack => CodecError::stack("reading nested JSON"),
        }
    }
}

impl CodecError {
    #[cold]
    pub fn refuse(kind: Kind, msg: impl Into<Cow<'static, str>>) -> CodecError {
        CodecError::Refused(Box::new(Refusal {
            kind,
            msg: msg.into(),
            pos: None,
            entry: None,
            cause: None,
        }))
    }

    /// A `ValueError`.
    #[cold]
    pub fn value(msg: impl Into<Cow<'static, str>>) -> CodecError {
        CodecError::refuse(Kind::Value, msg)
    }

    /// A `TypeError`.
    #[cold]
    pub fn type_error(msg: impl Into<Cow<'static, str>>) -> CodecError {
        CodecError::refuse(Kind::Type, msg)
    }

    /// A `RecursionError`: the thread's C stack is nearly spent while `what` (see `crate::stack`).
    #[cold]
    pub fn stack(what: &str) -> CodecError {
        CodecError::refuse(Kind::Recursion, crate::stack::exhausted_message(what))
    }

    /// A `ValueError` at byte `pos` of the text.
    #[cold]
    pub fn invalid_at(pos: usize, msg: impl Into<Cow<'static, str>>) -> CodecError {
        CodecError::value(msg).at(pos)
    }

    /// With `cause` (an exception Python raised) as the cause of the exception it becomes.
    #[cold]
    pub fn caused_by(self, cause: PyErr) -> CodecError {
        self.map_refusal(|r| r.cause = Some(cause))
    }

    /// A `ValueError` saying `msg`, caused by `e`, where `e` is an `E` (a `TypeError` for an
    /// unhashable value, say); any other exception (a `MemoryError`, a `KeyboardInterrupt`) is
    /// passed on unchanged.
    #[cold]
    pub fn refusing<E: PyTypeInfo>(
        py: Python<'_>,
        e: PyErr,
        msg: impl Into<Cow<'static, str>>,
    ) -> CodecError {
        if e.is_instance_of::<E>(py) {
            CodecError::value(msg).caused_by(e)
        } else {
            CodecError::Python(e)
        }
    }

    /// Placed at byte `pos`, unless it came from Python, is not a `ValueError` or was placed
    /// already.
    #[cold]
    pub fn at(self, pos: usize) -> CodecError {
        self.map_refusal(|r| {
            if r.kind == Kind::Value && r.pos.is_none() {
                r.pos = Some(pos);
            }
        })
    }

    /// Said of entry `i` of `list`, unless it came from Python or names an entry already.
    #[cold]
    pub fn in_entry(self, list: &'static str, i: usize) -> CodecError {
        self.map_refusal(|r| {
            if r.pos.is_some() && r.entry.is_none() {
                r.entry = Some((list, i));
            }
        })
    }

    /// Its message after `prefix` and a colon, unless it came from Python.
    #[cold]
    pub fn prefixed(self, prefix: &str) -> CodecError {
        self.map_refusal(|r| r.msg = format!("{prefix}: {}", r.msg).into())
    }

    fn map_refusal(self, f: impl FnOnce(&mut Refusal)) -> CodecError {
        match self {
            CodecError::Refused(mut r) => {
                f(&mut r);
                CodecError::Refused(r)
            }
            python => python,
        }
    }

    /// The Python exception `from_json` (and `from_dict`, for a part) raises for this error in
    /// `doc` (the text read, `src` its UTF-8): a refusal that is a `ValueError` becomes an `aitune_fast.MetadataDecodeError` (a
    /// `json.JSONDecodeError`) saying `what`, the entry and the message, placed at the character
    /// of `doc` where it was found (its start when nowhere in particular); anything else is
    /// [`CodecError::into_pyerr`].
    #[cold]
    pub fn into_decode_error(
        self,
        py: Python<'_>,
        what: &str,
        doc: &Bound<'_, PyString>,
        src: &[u8],
    ) -> PyErr {
        let r = match self {
            CodecError::Refused(r) if r.kind == Kind::Value => r,
            other => return other.into_pyerr(py),
        };
        let entry = match r.entry {
            Some((list, i)) => format!("{list}[{i}]: "),
            None => String::new(),
        };
        let msg = format!("{what}: {entry}{}", r.msg);
        let pos = char_offset(src, r.pos.unwrap_or(0));
        let e = match decode_error_class(py).and_then(|c| c.call1((msg, doc, pos))) {
            Ok(e) => PyErr::from_value(e),
            Err(e) => return e,
        };
        if r.cause.is_some() {
            e.set_cause(py, r.cause);
        }
        e
    }

    /// The Python exception: the one place a codec error becomes one, where Python called the
    /// codec (a refusal placed in a text goes through [`CodecError::into_decode_error`]).
    #[cold]
    pub fn into_pyerr(self, py: Python<'_>) -> PyErr {
        let r = match self {
            CodecError::Python(e) => return e,
            CodecError::Refused(r) => r,
        };
        let msg = r.msg.into_owned();
        let e = match r.kind {
            Kind::Value => PyValueError::new_err(msg),
            Kind::Type => PyTypeError::new_err(msg),
            Kind::Recursion => PyRecursionError::new_err(msg),
        };
        if r.cause.is_some() {
            e.set_cause(py, r.cause);
        }
        e
    }
}

/// The number of characters in the first `pos` bytes of UTF-8 text `src` (all of it when
/// shorter): a byte offset as a Python string index.
pub fn char_offset(src: &[u8], pos: usize) -> usize {
    src[..pos.min(src.len())]
        .iter()
        .filter(|&&b| b & 0xC0 != 0x80)
        .count()
}

/// `aitune_fast.MetadataDecodeError`, looked up once.
fn decode_error_class(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    static CLASS: PyOnceLock<Py<PyType>> = PyOnceLock::new();
    CLASS.import(py, "aitune_fast._errors", "MetadataDecodeError")
}

#[cfg(test)]
mod tests {
    use pyo3::exceptions::PyMemoryError;

    use super::*;

    fn message(py: Python<'_>, e: &PyErr) -> String {
        e.value(py).str().unwrap().to_string()
    }

    #[test]
    fn exceptions_from_python_pass_through_unchanged() {
        Python::attach(|py| {
            let memory = PyMemoryError::new_err("out of memory");
            let e = CodecError::refusing::<PyTypeError>(py, memory, "must be hashable")
                .at(3)
                .in_entry("others", 0)
                .prefixed("to_json");
            let e = e.into_pyerr(py);
            assert!(e.is_instance_of::<PyMemoryError>(py));
            assert_eq!(message(py, &e), "out of memory");
            assert!(e.cause(py).is_none());
        });
    }

    #[test]
    fn a_refusal_keeps_pythons_error_as_its_cause() {
        Python::attach(|py| {
            let unhashable = PyTypeError::new_err("unhashable type: 'list'");
            let e = CodecError::refusing::<PyTypeError>(py, unhashable, "must be hashable")
                .into_pyerr(py);
            assert!(e.is_instance_of::<PyValueError>(py));
            assert_eq!(message(py, &e), "must be hashable");
            let cause = e.cause(py).expect("a cause");
            assert!(cause.is_instance_of::<PyTypeError>(py));
        });
    }

    #[test]
    fn refusals_are_placed_once_in_their_innermost_entry() {
        let e = CodecError::invalid_at(15, "unexpected 'x'")
            .at(0) // placed once: the first place stays
            .in_entry("tensor_data", 2)
            .in_entry("paths", 9); // the innermost entry stays
        let CodecError::Refused(r) = e else {
            panic!("a refusal")
        };
        assert_eq!(
            (r.kind, r.pos, r.entry),
            (Kind::Value, Some(15), Some(("tensor_data", 2)))
        );
        // only ValueErrors are placed
        let CodecError::Refused(r) = CodecError::type_error("t").at(3) else {
            panic!("a refusal")
        };
        assert_eq!(r.pos, None);
    }

    #[test]
    fn byte_offsets_become_character_offsets() {
        let src = "a\u{e9}\u{20ac}b".as_bytes(); // 1 + 2 + 3 + 1 bytes
        assert_eq!(char_offset(src, 0), 0);
        assert_eq!(char_offset(src, 1), 1);
        assert_eq!(char_offset(src, 3), 2);
        assert_eq!(char_offset(src, 6), 3);
        assert_eq!(char_offset(src, 7), 4);
        assert_eq!(char_offset(src, 99), 4);
    }

    #[test]
    fn unplaced_refusals_keep_their_message_and_kind() {
        Python::attach(|py| {
            let e = CodecError::type_error("a value of type object cannot be encoded")
                .at(4)
                .in_entry("other_data", 0)
                .prefixed("SampleMetadata.to_json: other_data[0] cannot be encoded")
                .into_pyerr(py);
            assert!(e.is_instance_of::<PyTypeError>(py));
            assert_eq!(
                message(py, &e),
                "SampleMetadata.to_json: other_data[0] cannot be encoded: a value of type object \
                 cannot be encoded"
            );
            let e = CodecError::from(JsonError::Stack).at(1).into_pyerr(py);
            assert!(e.is_instance_of::<PyRecursionError>(py));
            assert!(message(py, &e).starts_with("maximum recursion depth exceeded while reading"));
        });
    }
}
