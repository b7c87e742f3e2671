//! A call shape's binding, kept (`_core._BindPlan`): where each value of the normalized `args`,
//! `kwargs` and `arguments` of a tuned call comes from, a positional index or a keyword name of
//! the call. `_call_path.compile_binder` finds that by binding placeholders with AITune's
//! `ForwardSignature.normalize`; a plan then builds a call's three values as plain tuples and
//! dicts of the call's own objects, with no Python frame and no call into Python.

use pyo3::exceptions::{PyKeyError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyInt, PyString, PyTuple};

use crate::stack;

/// Where one value comes from: the spec `compile_binder` gives, read once.
enum Source {
    /// `args[index]`
    Arg(usize),
    /// `kwargs[name]`
    Keyword(Py<PyString>),
    /// A tuple of values (the normalized `args`, a `*args` value).
    Tuple(Vec<Source>),
    /// A dict of values by name (the normalized `kwargs`, `arguments`, a `**kwargs` value).
    Dict(Vec<(Py<PyString>, Source)>),
}

impl Source {
    /// From a spec: an int (a positional index), a str (a keyword name), or a tuple or a
    /// str-keyed dict of specs, each of its exact type.
    fn from_spec(spec: &Bound<'_, PyAny>) -> PyResult<Self> {
        stack::check("reading a _BindPlan's specs")?;
        if let Ok(index) = spec.cast_exact::<PyInt>() {
            return Ok(Self::Arg(index.extract()?));
        }
        if let Ok(name) = spec.cast_exact::<PyString>() {
            return Ok(Self::Keyword(name.clone().unbind()));
        }
        if let Ok(items) = spec.cast_exact::<PyTuple>() {
            let sources = items.iter().map(|item| Self::from_spec(&item));
            return sources.collect::<PyResult<_>>().map(Self::Tuple);
        }
        let items = spec.cast_exact::<PyDict>().map_err(|_| spec_error())?;
        let mut entries = Vec::with_capacity(items.len());
        for (key, value) in items.iter() {
            let key = key.cast_exact::<PyString>().map_err(|_| spec_error())?;
            entries.push((key.clone().unbind(), Self::from_spec(&value)?));
        }
        Ok(Self::Dict(entries))
    }

    /// This value for one call: `args` and `kwargs` as the call passed them. The stack is checked
    /// again here: a plan may run on a thread with less of it than the one that made it.
    fn build<'py>(
        &self,
        args: &Bound<'py, PyTuple>,
        kwargs: &Bound<'py, PyDict>,
    ) -> Result<Bound<'py, PyAny>, Unbound> {
        let py = args.py();
        if !stack::room_left() {
            return Err(Unbound::Short);
        }
        Ok(match self {
            Self::Arg(index) => args.get_item(*index)?, // IndexError past the end
            Self::Keyword(name) => {
                let name = name.bind(py);
                kwargs
                    .get_item(name)?
                    .ok_or_else(|| PyKeyError::new_err(name.clone().unbind()))?
            }
            Self::Tuple(items) => {
                let values = items.iter().map(|item| item.build(args, kwargs));
                PyTuple::new(py, values.collect::<Result<Vec<_>, _>>()?)?.into_any()
            }
            Self::Dict(entries) => {
                let dict = PyDict::new(py);
                for (key, item) in entries {
                    dict.set_item(key.bind(py), item.build(args, kwargs)?)?;
                }
                dict.into_any()
            }
        })
    }
}

/// Why a plan gave no values: the thread's stack too short to build them here (the caller binds
/// as stock does instead, or raises RecursionError), or the call's own error.
pub enum Unbound {
    Short,
    Error(PyErr),
}

impl From<PyErr> for Unbound {
    fn from(err: PyErr) -> Self {
        Self::Error(err)
    }
}

fn spec_error() -> PyErr {
    PyTypeError::new_err(
        "_BindPlan: a spec is an int (a positional index), a str (a keyword name), or a tuple or \
         str-keyed dict of specs",
    )
}

/// One call's normalized values, as two `ForwardSignature.normalize` calls give them: the first
/// one's `args` and `kwargs`, the second one's `arguments`.
pub struct BoundCall<'py> {
    pub args: Bound<'py, PyAny>,
    pub kwargs: Bound<'py, PyAny>,
    pub arguments: Bound<'py, PyAny>,
}

/// A call shape's binding: `plan(args, kwargs)` gives `(args, kwargs, arguments)` for a call of
/// the shape it was made for (that many positional arguments, those keyword names in that order).
/// Holds only str objects, which the GC never needs to see.
#[pyclass(module = "aitune_fast._core", name = "_BindPlan", frozen)]
pub struct BindPlan {
    args: Source,
    kwargs: Source,
    arguments: Source,
}

#[pymethods]
impl BindPlan {
    /// `_BindPlan(args_spec, kwargs_spec, arguments_spec)`: a tuple spec and two dict specs.
    #[new]
    #[pyo3(signature = (args, kwargs, arguments, /))]
    fn py_new(
        args: &Bound<'_, PyTuple>,
        kwargs: &Bound<'_, PyDict>,
        arguments: &Bound<'_, PyDict>,
    ) -> PyResult<Self> {
        Ok(Self {
            args: Source::from_spec(args)?,
            kwargs: Source::from_spec(kwargs)?,
            arguments: Source::from_spec(arguments)?,
        })
    }

    #[pyo3(signature = (args, kwargs, /))]
    fn __call__<'py>(
        &self,
        args: &Bound<'py, PyTuple>,
        kwargs: &Bound<'py, PyDict>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let call = match self.bind(args, kwargs) {
            Ok(call) => call,
            Err(Unbound::Short) => return Err(stack::exhausted("binding a call with a _BindPlan")),
            Err(Unbound::Error(err)) => return Err(err),
        };
        PyTuple::new(args.py(), [call.args, call.kwargs, call.arguments])
    }
}

impl BindPlan {
    /// The normalized values of this call (of the plan's shape: a value it does not have is an
    /// IndexError or a KeyError), or [`Unbound::Short`] where the stack has too little room left.
    pub fn bind<'py>(
        &self,
        args: &Bound<'py, PyTuple>,
        kwargs: &Bound<'py, PyDict>,
    ) -> Result<BoundCall<'py>, Unbound> {
        Ok(BoundCall {
            args: self.args.build(args, kwargs)?,
            kwargs: self.kwargs.build(args, kwargs)?,
            arguments: self.arguments.build(args, kwargs)?,
        })
    }
}
