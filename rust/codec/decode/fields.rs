//! Fields shared by `to_json` entries and `to_dict` rows: shapes, sizes, multipliers, dtypes, and
//! the checks on their lengths and on required keys.

use crate::codec::error::{CodecError, CodecResult};

use crate::codec::syntax::read::{JStr, Parser, Tok};
use crate::tensor_spec::Dim;

use super::build::{Build, TensorDims};
use super::value::read_float;

pub(super) fn read_dtype(p: &mut Parser<'_>, b: &mut Build<'_>) -> CodecResult<u16> {
    p.ws();
    let at = p.pos;
    match p.peek()? {
        Tok::Null => {
            p.null()?;
            b.dtype_none()
        }
        Tok::Str => {
            let s = p.string()?;
            b.dtype_of_name(s.as_str().unwrap_or("?"))
                .map_err(|e| e.at(at))
        }
        t => Err(CodecError::invalid_at(
            p.pos,
            format!("dtype is a string or null, found {}", t.name()),
        )),
    }
}

pub(super) fn read_floats(p: &mut Parser<'_>, out: &mut Vec<f64>) -> CodecResult<()> {
    out.clear();
    p.arr_begin()?;
    let mut first = true;
    while p.arr_next(&mut first)? {
        // null: unknown (version 2 of to_json)
        out.push(if p.peek()? == Tok::Null {
            p.null()?;
            f64::NAN
        } else {
            read_float(p, "bs_multipliers")?
        });
    }
    Ok(())
}

pub(super) fn check_entry_lengths(at: usize, sc: &Scratch) -> CodecResult<()> {
    let r = sc.shape.len();
    if sc.min.len() != r || sc.max.len() != r || sc.mult.len() != r {
        return Err(CodecError::invalid_at(
            at,
            format!(
                "shape, min_shape, max_shape and bs_multipliers have different lengths ({r}, {}, {}, {})",
                sc.min.len(),
                sc.max.len(),
                sc.mult.len()
            ),
        ));
    }
    Ok(())
}

#[derive(Default)]
pub(super) struct Scratch {
    pub(super) shape: Vec<Dim>,
    pub(super) min: Vec<i64>,
    pub(super) max: Vec<i64>,
    pub(super) mult: Vec<f64>,
}

impl Scratch {
    pub(super) fn dims(&self) -> TensorDims<'_> {
        TensorDims {
            shape: &self.shape,
            min: &self.min,
            max: &self.max,
            mult: &self.mult,
        }
    }
}

pub(super) fn read_ints(p: &mut Parser<'_>, out: &mut Vec<i64>, what: &str) -> CodecResult<()> {
    out.clear();
    p.arr_begin()?;
    let mut first = true;
    while p.arr_next(&mut first)? {
        out.push(p.int(what)?);
    }
    Ok(())
}

pub(super) fn read_dims(p: &mut Parser<'_>, out: &mut Vec<Dim>) -> CodecResult<()> {
    out.clear();
    p.arr_begin()?;
    let mut first = true;
    while p.arr_next(&mut first)? {
        match p.peek()? {
            Tok::Str => {
                let at = p.pos;
                match p.string()? {
                    JStr::Str(s) => out.push(Dim::parse(&s)),
                    _ => {
                        return Err(CodecError::invalid_at(
                            at,
                            "shape: a symbolic size must be valid Unicode",
                        ))
                    }
                }
            }
            Tok::Num => out.push(Dim::Int(p.int("shape")?)),
            t => {
                return Err(CodecError::invalid_at(
                    p.pos,
                    format!("shape holds integers and strings, found {}", t.name()),
                ))
            }
        }
    }
    Ok(())
}

/// Key `key` of an object, read at `at`, at index `found` in the keys the object may have, joins
/// `seen` (the mask of its keys read so far): an error naming it when it is not one of them
/// (`None`) or was read before.
pub(super) fn key_once(
    at: usize,
    key: &JStr<'_>,
    found: Option<usize>,
    seen: &mut u32,
) -> CodecResult<usize> {
    let Some(i) = found else {
        return Err(CodecError::invalid_at(
            at,
            format!("unexpected key {}", key.show()),
        ));
    };
    if *seen & (1 << i) != 0 {
        return Err(CodecError::invalid_at(
            at,
            format!("key {} occurs twice", key.show()),
        ));
    }
    *seen |= 1 << i;
    Ok(i)
}

pub(super) fn check_required(
    at: usize,
    keys: &[&str],
    seen: u32,
    required: &[usize],
) -> CodecResult<()> {
    for &i in required {
        if seen & (1 << i) == 0 {
            return Err(CodecError::invalid_at(
                at,
                format!("missing key {:?}", keys[i]),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn floats(text: &str) -> CodecResult<Vec<f64>> {
        let mut p = Parser::new(text.as_bytes(), true);
        let mut out = Vec::new();
        read_floats(&mut p, &mut out)?;
        Ok(out)
    }

    #[test]
    fn multipliers_read_numbers_null_tagged_floats_and_version_1_tokens() {
        let v = floats(r#"[1.5, null, {"$float": "inf"}, {"$float":"-inf"}, {"$float":"nan"}, 2]"#)
            .unwrap_or_else(|_| panic!("read"));
        assert_eq!(v[0], 1.5);
        assert!(v[1].is_nan() && v[4].is_nan());
        assert_eq!((v[2], v[3], v[5]), (f64::INFINITY, f64::NEG_INFINITY, 2.0));
        let old = floats("[NaN, Infinity, -Infinity]").unwrap_or_else(|_| panic!("read"));
        assert!(old[0].is_nan() && old[1] == f64::INFINITY && old[2] == f64::NEG_INFINITY);
    }

    #[test]
    fn multipliers_refuse_other_objects_and_tags() {
        for bad in [
            r#"[{"$float": "NaN"}]"#,
            r#"[{"$float": 1}]"#,
            r#"[{"$int": "1"}]"#,
            r#"[{"$float": "nan", "x": 1}]"#,
            r#"["nan"]"#,
        ] {
            assert!(floats(bad).is_err(), "{bad}");
        }
    }
}
