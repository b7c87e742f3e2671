//! What the encoder and the decoder both use: torch dtypes by name, torch devices by their text,
//! type names, and the rule that a one-shape tensor's multipliers follow from the batch size.

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

use super::error::{CodecError, CodecResult};
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyType};

use crate::tensor_spec::multiplier;

struct Torch {
    /// `torch.__dict__`: dtypes are looked up here, never through `getattr` (which may import)
    dict: Py<PyDict>,
    dtype: Py<PyType>,
    /// `torch.device`: the one constructor the decoder calls for a `$device`
    device: Py<PyType>,
}

static TORCH: PyOnceLock<Torch> = PyOnceLock::new();

fn torch(py: Python<'_>) -> PyResult<&'static Torch> {
    TORCH.get_or_try_init(py, || {
        let m = py.import("torch")?;
        Ok(Torch {
            dict: m.getattr("__dict__")?.cast_into::<PyDict>()?.unbind(),
            dtype: m.getattr("dtype")?.cast_into::<PyType>()?.unbind(),
            device: m.getattr("device")?.cast_into::<PyType>()?.unbind(),
        })
    })
}

pub(super) fn is_dtype(py: Python<'_>, v: &Bound<'_, PyAny>) -> PyResult<bool> {
    Ok(v.get_type().is(torch(py)?.dtype.bind(py)))
}

/// The torch dtype named `name` (`"torch.float32"`), or a refusal (not yet placed) saying why
/// there is none.
pub(super) fn dtype_named<'py>(py: Python<'py>, name: &str) -> CodecResult<Bound<'py, PyAny>> {
    let attr = match name.strip_prefix("torch.") {
        Some(a)
            if !a.is_empty()
                && a.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_')
                && !a.as_bytes()[0].is_ascii_digit() =>
        {
            a
        }
        _ => {
            return Err(CodecError::value(format!(
                "dtype {name:?} is not of the form \"torch.<name>\""
            )))
        }
    };
    let t = torch(py)?;
    match t.dict.bind(py).get_item(attr)? {
        Some(obj) if obj.get_type().is(t.dtype.bind(py)) => Ok(obj),
        _ => Err(CodecError::value(format!("{name:?} is not a torch dtype"))),
    }
}

/// Whether `v` is a `torch.device`.
pub(super) fn is_device(py: Python<'_>, v: &Bound<'_, PyAny>) -> PyResult<bool> {
    Ok(v.get_type().is(torch(py)?.device.bind(py)))
}

/// Most characters of a device's text (`"cuda:1"`, `"privateuseone:0"`).
const MAX_DEVICE_TEXT: usize = 64;

/// Whether `text` has the form of a device's `str()`: a type (`[a-z][a-z0-9_]*`), then
/// optionally `:` and an index without leading zeros.
pub(super) fn is_device_text(text: &str) -> bool {
    if text.is_empty() || text.len() > MAX_DEVICE_TEXT {
        return false;
    }
    let (kind, index) = match text.split_once(':') {
        Some((k, i)) => (k, Some(i)),
        None => (text, None),
    };
    let kind_ok = kind.as_bytes().first().is_some_and(u8::is_ascii_lowercase)
        && kind
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_');
    let index_ok = match index {
        None => true,
        Some(i) => {
            !i.is_empty()
                && i.bytes().all(|c| c.is_ascii_digit())
                && (i == "0" || !i.starts_with('0'))
        }
    };
    kind_ok && index_ok
}

/// The `torch.device` whose `str()` is `text`, made by `torch.device(text)` (the only code run),
/// or a refusal (not yet placed) saying why there is none: text of another form, a device type
/// or index torch refuses (its error the cause), or text that is not the device's own spelling.
pub(super) fn device_named<'py>(py: Python<'py>, text: &str) -> CodecResult<Bound<'py, PyAny>> {
    if !is_device_text(text) {
        return Err(CodecError::value(format!(
            "$device {text:?} is not of the form \"<type>\" or \"<type>:<index>\" \
             (the str() of a torch.device, such as \"cpu\" or \"cuda:1\")"
        )));
    }
    let device = torch(py)?.device.bind(py).call1((text,)).map_err(|e| {
        CodecError::refusing::<PyRuntimeError>(
            py,
            e,
            format!("$device {text:?} is not a device this torch knows"),
        )
    })?;
    if device.get_type().is(torch(py)?.device.bind(py)) && device.str()?.to_str()? == text {
        Ok(device)
    } else {
        Err(CodecError::value(format!(
            "$device {text:?} is not the str() of the torch.device it names"
        )))
    }
}

/// `enum.Enum`, looked up once.
pub(super) fn enum_class(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    static ENUM: PyOnceLock<Py<PyType>> = PyOnceLock::new();
    ENUM.import(py, "enum", "Enum")
}

pub(super) use crate::interp::type_name;

/// A batch size that would give `mults` for `dims`, when one of them tells.
pub(super) fn guess_bs(dims: &[i64], mults: &[f64]) -> Option<f64> {
    if dims.is_empty() || mults.len() != dims.len() {
        return None;
    }
    if mults.iter().all(|m| m.is_nan()) {
        return Some(f64::NAN);
    }
    let (d, m) = dims
        .iter()
        .zip(mults)
        .find(|(&d, &m)| d != 0 && m.is_finite() && m != 0.0)?;
    let mut cand = *d as f64 / m;
    if !cand.is_finite() {
        return None;
    }
    let r = cand.round();
    if (cand - r).abs() <= 1e-9 * r.abs().max(1.0) {
        cand = r;
    }
    Some(cand)
}

/// Whether `mults` are exactly the multipliers `dims` get at batch size `bs` (NaN matching NaN).
pub(super) fn mults_match(dims: &[i64], mults: &[f64], bs: f64) -> bool {
    dims.len() == mults.len()
        && dims.iter().zip(mults).all(|(&d, &m)| {
            let f = multiplier(d, bs);
            (f.is_nan() && m.is_nan()) || f.to_bits() == m.to_bits()
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_text_has_the_form_of_a_devices_str() {
        for ok in [
            "cpu",
            "cuda",
            "cuda:0",
            "cuda:1",
            "xla:12",
            "privateuseone",
            "mps:0",
        ] {
            assert!(is_device_text(ok), "{ok}");
        }
        let long = "x".repeat(MAX_DEVICE_TEXT + 1);
        for bad in [
            "",
            "CPU",
            "cuda:",
            "cuda:01",
            "cuda:-1",
            "cuda:1 ",
            " cpu",
            "1cuda",
            "cuda:1:2",
            "a.b",
            "os.system",
            &long,
        ] {
            assert!(!is_device_text(bad), "{bad:?}");
        }
    }

    #[test]
    fn devices_are_made_only_from_their_own_text() {
        Python::attach(|py| {
            let d = device_named(py, "cuda:1").unwrap();
            assert!(is_device(py, &d).unwrap());
            assert_eq!(d.str().unwrap().to_str().unwrap(), "cuda:1");
            let refusal = |text: &str| match device_named(py, text) {
                Err(CodecError::Refused(r)) => r,
                other => panic!("{text}: {other:?}"),
            };
            // torch refuses the type: its RuntimeError is the cause
            let r = refusal("foo");
            assert!(r.msg.contains("not a device this torch knows"), "{}", r.msg);
            assert!(r.cause.is_some());
            // torch wraps the index round (cuda:-25): not the device the text names
            assert!(refusal("cuda:999").msg.contains("not the str()"));
            assert!(refusal("cuda:01").msg.contains("not of the form"));
        });
    }
}
