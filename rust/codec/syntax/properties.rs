//! Property tests of the reader and the writer together, from a seeded generator (the same cases
//! on every run): random documents written and read back are the same values; random bytes, and
//! valid documents with a byte changed, make the reader return an error or a value, never panic,
//! with an offset inside the text.

use std::borrow::Cow;

use super::read::{JNum, JStr, JsonError, JsonResult, Parser, Tok};
use super::write::{write_f64, write_i64, write_str};

/// xorshift64*: enough randomness for test cases, and the same cases on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Value {
    Null,
    Bool(bool),
    Int(i64),
    /// an integer's digits, past 64 bits
    Big(String),
    /// compared by bits (NaN included)
    Float(u64),
    Str(String),
    Arr(Vec<Value>),
    Obj(Vec<(String, Value)>),
}

fn random_string(r: &mut Rng) -> String {
    const PIECES: &[&str] = &[
        "a",
        "Z",
        "0",
        " ",
        "\"",
        "\\",
        "/",
        "\n",
        "\t",
        "\u{1}",
        "\u{1f}",
        "é",
        "€",
        "\u{1f600}",
        "\u{7f}",
        "\u{ffff}",
    ];
    (0..r.below(8))
        .map(|_| PIECES[r.below(PIECES.len() as u64) as usize])
        .collect()
}

fn random_float(r: &mut Rng) -> f64 {
    match r.below(6) {
        0 => f64::from_bits(r.next()),
        1 => (r.below(2_000_001) as f64 - 1e6) / 64.0,
        2 => [
            0.0,
            -0.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            f64::MAX,
            f64::MIN_POSITIVE,
            5e-324,
        ][r.below(8) as usize],
        3 => 1.0 / (r.below(1000) as f64 + 1.0),
        4 => (r.next() as i64) as f64,
        _ => r.below(100) as f64 * 1e-4,
    }
}

fn random_value(r: &mut Rng, depth: usize) -> Value {
    let kinds = if depth == 0 { 7 } else { 9 };
    match r.below(kinds) {
        0 => Value::Null,
        1 => Value::Bool(r.below(2) == 1),
        2 => Value::Int(match r.below(3) {
            0 => r.next() as i64,
            1 => [0, -1, i64::MIN, i64::MAX, 9, 10][r.below(6) as usize],
            _ => r.below(1000) as i64 - 500,
        }),
        3 => {
            let digits: String = (0..19 + r.below(30))
                .map(|_| (b'0' + r.below(10) as u8) as char)
                .collect();
            let digits = format!("{}{}", 1 + r.below(9), digits);
            Value::Big(if r.below(2) == 1 {
                format!("-{digits}")
            } else {
                digits
            })
        }
        4 => {
            let f = random_float(r);
            // a NaN of any payload reads back as the one `NaN` token
            Value::Float(if f.is_nan() {
                f64::NAN.to_bits()
            } else {
                f.to_bits()
            })
        }
        5 | 6 => Value::Str(random_string(r)),
        7 => Value::Arr(
            (0..r.below(5))
                .map(|_| random_value(r, depth - 1))
                .collect(),
        ),
        _ => Value::Obj(
            (0..r.below(5))
                .map(|_| (random_string(r), random_value(r, depth - 1)))
                .collect(),
        ),
    }
}

fn write(out: &mut String, v: &Value, r: &mut Rng) {
    let mut scratch = String::new();
    let ws = |out: &mut String, r: &mut Rng| {
        for _ in 0..r.below(3) {
            out.push([' ', '\n', '\t', '\r'][r.below(4) as usize]);
        }
    };
    ws(out, r);
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Int(i) => write_i64(out, *i),
        Value::Big(d) => out.push_str(d),
        Value::Float(bits) => write_f64(out, f64::from_bits(*bits), &mut scratch),
        Value::Str(s) => write_str(out, s),
        Value::Arr(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write(out, item, r);
            }
            ws(out, r);
            out.push(']');
        }
        Value::Obj(members) => {
            out.push('{');
            for (i, (k, item)) in members.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                ws(out, r);
                write_str(out, k);
                ws(out, r);
                out.push(':');
                write(out, item, r);
            }
            ws(out, r);
            out.push('}');
        }
    }
    ws(out, r);
}

fn text(s: JStr<'_>) -> String {
    match s {
        JStr::Str(Cow::Borrowed(s)) => s.to_owned(),
        JStr::Str(Cow::Owned(s)) => s,
        JStr::Wtf8(b) => panic!("lone surrogates in {b:?}"),
    }
}

fn read(p: &mut Parser<'_>) -> JsonResult<Value> {
    Ok(match p.peek()? {
        Tok::Null => {
            p.null()?;
            Value::Null
        }
        Tok::True | Tok::False => Value::Bool(p.boolean()?),
        Tok::Num => match p.number()? {
            JNum::Int(i) => Value::Int(i),
            JNum::BigInt(d) => Value::Big(d.to_owned()),
            JNum::Float(f) => Value::Float(f.to_bits()),
        },
        Tok::Str => Value::Str(text(p.string()?)),
        Tok::Arr => {
            p.arr_begin()?;
            let mut items = Vec::new();
            let mut first = true;
            while p.arr_next(&mut first)? {
                items.push(read(p)?);
            }
            Value::Arr(items)
        }
        Tok::Obj => {
            p.obj_begin()?;
            let mut members = Vec::new();
            let mut first = true;
            while let Some((_, k)) = p.obj_next(&mut first)? {
                let k = text(k);
                members.push((k, read(p)?));
            }
            Value::Obj(members)
        }
    })
}

fn read_whole(src: &[u8]) -> JsonResult<Value> {
    let mut p = Parser::new(src, false);
    let v = read(&mut p)?;
    p.end()?;
    Ok(v)
}

/// Reading `src` gives a value or an error inside the text (or just past its end).
fn reads_without_panic(src: &[u8]) {
    match read_whole(src) {
        Ok(_) | Err(JsonError::Stack) => {}
        Err(JsonError::Syntax { pos, msg }) => {
            assert!(pos <= src.len(), "{pos} > {} ({msg}) in {src:?}", src.len());
        }
    }
}

#[test]
fn written_documents_read_back_as_the_same_values() {
    let mut r = Rng(0x9E37_79B9_7F4A_7C15);
    for _ in 0..3000 {
        let v = random_value(&mut r, 4);
        let mut out = String::new();
        write(&mut out, &v, &mut r);
        let back = read_whole(out.as_bytes()).unwrap_or_else(|e| panic!("{out:?}: {e:?}"));
        assert_eq!(back, v, "{out:?}");
    }
}

#[test]
fn random_bytes_never_panic_the_reader() {
    const ALPHABET: &[u8] =
        b"[]{}:,\"\\/ \n0123456789-+.eEtruefalsnNIiy\xc3\xa9\xed\xa0\x80\xff\x00\x1fu";
    let mut r = Rng(42);
    for _ in 0..20_000 {
        let bytes: Vec<u8> = (0..r.below(40))
            .map(|_| match r.below(4) {
                0 => r.next() as u8,
                _ => ALPHABET[r.below(ALPHABET.len() as u64) as usize],
            })
            .collect();
        reads_without_panic(&bytes);
    }
}

#[test]
fn documents_with_a_byte_changed_never_panic_the_reader() {
    let mut r = Rng(7);
    for _ in 0..3000 {
        let v = random_value(&mut r, 3);
        let mut out = String::new();
        write(&mut out, &v, &mut r);
        let mut bytes = out.into_bytes();
        if bytes.is_empty() {
            continue;
        }
        let at = r.below(bytes.len() as u64) as usize;
        match r.below(3) {
            0 => bytes[at] = r.next() as u8,
            1 => {
                bytes.remove(at);
            }
            _ => bytes.truncate(at),
        }
        reads_without_panic(&bytes);
    }
}
