//! JSON text, written and read in Rust: the low level of `to_json`/`from_json` and the `to_dict`
//! encoding.
//!
//! The writer emits what `json.dumps` would for the same values (floats as `float.__repr__`, the
//! `NaN`/`Infinity`/`-Infinity` tokens), with compact separators and UTF-8 text; lone surrogates,
//! which Python strings may hold, are written as `\udXXX` escapes. The reader is a pull parser over
//! bytes: it checks the grammar strictly (RFC 8259 plus the three float tokens), bounds nesting,
//! and reports every error with its line and column. It never panics on any input.

use std::borrow::Cow;
use std::fmt::Write as _;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// Deepest nesting of arrays and objects the reader accepts (the writer refuses values that would
/// go deeper).
pub const MAX_NESTING: usize = 512;

// ---- writing ------------------------------------------------------------------------------------

/// Append `s` as a JSON string literal.
pub fn write_str(out: &mut String, s: &str) {
    out.push('"');
    write_str_body(out, s);
    out.push('"');
}

/// Which bytes a JSON string must escape: `"`, `\\` and the control characters.
const NEEDS_ESCAPE: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 0x20 {
        t[i] = true;
        i += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t
};

/// Append the escaped characters of `s`, without quotes.
pub fn write_str_body(out: &mut String, s: &str) {
    let bytes = s.as_bytes();
    let mut start = 0;
    while let Some(off) = bytes[start..]
        .iter()
        .position(|&b| NEEDS_ESCAPE[b as usize])
    {
        let i = start + off;
        out.push_str(&s[start..i]);
        match bytes[i] {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            0x08 => out.push_str("\\b"),
            0x0c => out.push_str("\\f"),
            b => {
                let _ = write!(out, "\\u{:04x}", b);
            }
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
}

/// Append a JSON string literal for WTF-8 bytes (UTF-8 that may encode lone surrogates, as
/// `str.encode("utf-8", "surrogatepass")` produces): surrogates become `\udXXX` escapes. Returns
/// false, having written nothing useful, when a high surrogate is directly followed by a low one:
/// any JSON reader would join the two escapes into one character, so the text cannot round-trip.
pub fn write_wtf8(out: &mut String, bytes: &[u8]) -> bool {
    out.push('"');
    let (mut run, mut i) = (0, 0);
    let mut last_high_end = usize::MAX;
    while i < bytes.len() {
        if bytes[i] == 0xED && i + 2 < bytes.len() && (0xA0..=0xBF).contains(&bytes[i + 1]) {
            write_str_body(out, &String::from_utf8_lossy(&bytes[run..i]));
            let cp =
                0xD000u32 | (((bytes[i + 1] & 0x3F) as u32) << 6) | (bytes[i + 2] & 0x3F) as u32;
            if (0xDC00..0xE000).contains(&cp) && last_high_end == i {
                return false;
            }
            let _ = write!(out, "\\u{:04x}", cp);
            i += 3;
            if cp < 0xDC00 {
                last_high_end = i;
            }
            run = i;
        } else {
            i += 1;
        }
    }
    write_str_body(out, &String::from_utf8_lossy(&bytes[run..]));
    out.push('"');
    true
}

pub fn write_i64(out: &mut String, v: i64) {
    if (0..10).contains(&v) {
        out.push((b'0' + v as u8) as char);
        return;
    }
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    let mut n = v.unsigned_abs();
    while n > 0 {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
    }
    if v < 0 {
        out.push('-');
    }
    // SAFETY: ASCII digits
    out.push_str(unsafe { std::str::from_utf8_unchecked(&buf[i..]) });
}

/// `float.__repr__` of values with at most 4 decimals and 15 significant digits (most batch-size
/// multipliers), found without the general algorithm: `m / 10^k == v` means the decimal `m e-k`
/// reads back as `v`, the smallest such `k` gives the shortest digits, and under 15 digits no other
/// decimal of as many digits reads back alike.
fn write_simple_f64(out: &mut String, v: f64) -> bool {
    const POW: [f64; 5] = [1.0, 10.0, 100.0, 1000.0, 10000.0];
    let a = v.abs();
    if !(1e-4..1e15).contains(&a) {
        return false;
    }
    for (k, &p) in POW.iter().enumerate() {
        let m = (a * p).round();
        if m >= 1e15 {
            return false;
        }
        if m / p == a {
            let m = m as u64;
            if v < 0.0 {
                out.push('-');
            }
            let div = p as u64;
            write_i64(out, (m / div) as i64);
            out.push('.');
            if k == 0 {
                out.push('0');
            } else {
                let frac = m % div;
                let mut digits = [b'0'; 4];
                let mut f = frac;
                for j in (0..k).rev() {
                    digits[j] = b'0' + (f % 10) as u8;
                    f /= 10;
                }
                // SAFETY: ASCII digits
                out.push_str(unsafe { std::str::from_utf8_unchecked(&digits[..k]) });
            }
            return true;
        }
    }
    false
}

/// Append `v` as `json.dumps` writes a float: `float.__repr__`, or `NaN`, `Infinity`, `-Infinity`.
pub fn write_f64(out: &mut String, v: f64, scratch: &mut String) {
    if v.is_nan() {
        out.push_str("NaN");
        return;
    }
    if v.is_infinite() {
        out.push_str(if v > 0.0 { "Infinity" } else { "-Infinity" });
        return;
    }
    if v == 0.0 {
        out.push_str(if v.is_sign_negative() { "-0.0" } else { "0.0" });
        return;
    }
    scratch.clear();
    if write_simple_f64(out, v) {
        return;
    }
    // the shortest digits that round-trip, as Python's repr chooses them
    scratch.clear();
    let _ = write!(scratch, "{:e}", v.abs());
    let (mantissa, exp) = scratch.split_once('e').unwrap_or((scratch.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let mut digits = [0u8; 32];
    let mut n = 0;
    for b in mantissa.bytes() {
        if b.is_ascii_digit() && n < digits.len() {
            digits[n] = b;
            n += 1;
        }
    }
    let digits = &digits[..n];
    let decpt = exp + 1; // value = 0.d1d2... * 10^decpt
    if v < 0.0 {
        out.push('-');
    }
    let as_str = |d: &[u8]| -> String { d.iter().map(|&c| c as char).collect() };
    if !(-4 < decpt && decpt <= 16) {
        out.push(digits[0] as char);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&as_str(&digits[1..]));
        }
        let e = decpt - 1;
        let _ = write!(out, "e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs());
    } else if decpt <= 0 {
        out.push_str("0.");
        for _ in 0..(-decpt) {
            out.push('0');
        }
        out.push_str(&as_str(digits));
    } else {
        let d = decpt as usize;
        if d >= digits.len() {
            out.push_str(&as_str(digits));
            for _ in digits.len()..d {
                out.push('0');
            }
            out.push_str(".0");
        } else {
            out.push_str(&as_str(&digits[..d]));
            out.push('.');
            out.push_str(&as_str(&digits[d..]));
        }
    }
}

/// Whether the digits `write_f64` just wrote (still in `scratch`, as `{:e}` of the magnitude) may
/// differ from Python's: when another string of as many digits reads back as the same float, the
/// two lie equally near it and Python's dtoa breaks the tie to even where Rust may not. Only strings
/// of 16 digits or more can be so close together.
pub fn shortest_is_ambiguous(scratch: &str) -> bool {
    let Some((mantissa, exp)) = scratch.split_once('e') else {
        return false;
    };
    let digits: Vec<u8> = mantissa.bytes().filter(u8::is_ascii_digit).collect();
    if digits.len() < 16 {
        return false;
    }
    let Ok(value) = scratch.parse::<f64>() else {
        return false;
    };
    let last = digits[digits.len() - 1];
    for alt in [last.wrapping_sub(1), last + 1] {
        if !(b'1'..=b'9').contains(&alt) {
            continue;
        }
        let mut text = String::with_capacity(scratch.len());
        text.push(digits[0] as char);
        text.push('.');
        for &d in &digits[1..digits.len() - 1] {
            text.push(d as char);
        }
        text.push(alt as char);
        text.push('e');
        text.push_str(exp);
        if text.parse::<f64>() == Ok(value) {
            return true;
        }
    }
    false
}

// ---- reading ------------------------------------------------------------------------------------

/// A string read from JSON: borrowed when it had no escapes, owned otherwise; `Wtf8` when it holds
/// lone surrogates (encoded as `surrogatepass` UTF-8, for Python to decode).
pub enum JStr<'a> {
    Str(Cow<'a, str>),
    Wtf8(Vec<u8>),
}

impl JStr<'_> {
    pub fn as_str(&self) -> Option<&str> {
        match self {
            JStr::Str(s) => Some(s),
            JStr::Wtf8(_) => None,
        }
    }
    pub fn is(&self, s: &str) -> bool {
        self.as_str() == Some(s)
    }
    /// For messages.
    pub fn show(&self) -> String {
        match self {
            JStr::Str(s) => format!("{s:?}"),
            JStr::Wtf8(b) => format!("{:?}", String::from_utf8_lossy(b)),
        }
    }
}

/// A number read from JSON.
#[derive(Clone, Copy, Debug)]
pub enum JNum<'a> {
    Int(i64),
    /// an integer that does not fit in 64 bits: its digits
    BigInt(&'a str),
    Float(f64),
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Tok {
    Null,
    True,
    False,
    Num,
    Str,
    Arr,
    Obj,
}

impl Tok {
    pub fn name(self) -> &'static str {
        match self {
            Tok::Null => "null",
            Tok::True | Tok::False => "a boolean",
            Tok::Num => "a number",
            Tok::Str => "a string",
            Tok::Arr => "an array",
            Tok::Obj => "an object",
        }
    }
}

pub struct Parser<'a> {
    pub src: &'a [u8],
    pub pos: usize,
    depth: usize,
    /// whether the source is known to be valid UTF-8 (a Python str)
    utf8_checked: bool,
    /// what is being read, for messages
    pub what: &'static str,
    /// the entry being read (`("tensor_data", 3)`), for messages
    pub ctx: Option<(&'static str, usize)>,
}

impl<'a> Parser<'a> {
    pub fn new(src: &'a [u8], utf8_checked: bool, what: &'static str) -> Parser<'a> {
        Parser {
            src,
            pos: 0,
            depth: 0,
            utf8_checked,
            what,
            ctx: None,
        }
    }

    /// A parser over the same text, at `pos`, inside `depth` open arrays or objects.
    pub fn fork_at(&self, pos: usize, depth: usize) -> Parser<'a> {
        Parser {
            src: self.src,
            pos,
            depth,
            utf8_checked: self.utf8_checked,
            what: self.what,
            ctx: None,
        }
    }

    /// A `ValueError` that says where in the text the problem is.
    pub fn err_at(&self, pos: usize, msg: impl std::fmt::Display) -> PyErr {
        let pos = pos.min(self.src.len());
        let before = &self.src[..pos];
        let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
        let col = match before.iter().rposition(|&b| b == b'\n') {
            Some(nl) => pos - nl,
            None => pos + 1,
        };
        let ctx = match self.ctx {
            Some((list, i)) => format!("{list}[{i}]: "),
            None => String::new(),
        };
        PyValueError::new_err(format!(
            "{}: {ctx}{msg} (line {line} column {col}, byte {pos})",
            self.what
        ))
    }

    pub fn err(&self, msg: impl std::fmt::Display) -> PyErr {
        self.err_at(self.pos, msg)
    }

    #[inline]
    pub fn ws(&mut self) {
        while let Some(&b) = self.src.get(self.pos) {
            if b == b' ' || b == b'\n' || b == b'\r' || b == b'\t' {
                self.pos += 1;
            } else {
                break;
            }
        }
    }

    /// The kind of the next value, without consuming it.
    pub fn peek(&mut self) -> PyResult<Tok> {
        self.ws();
        match self.src.get(self.pos) {
            None => Err(self.err("unexpected end of text, expected a value")),
            Some(b'n') => Ok(Tok::Null),
            Some(b't') => Ok(Tok::True),
            Some(b'f') => Ok(Tok::False),
            Some(b'"') => Ok(Tok::Str),
            Some(b'[') => Ok(Tok::Arr),
            Some(b'{') => Ok(Tok::Obj),
            Some(b'-' | b'0'..=b'9' | b'N' | b'I') => Ok(Tok::Num),
            Some(&b) => Err(self.err(format!("unexpected {}, expected a value", show_byte(b)))),
        }
    }

    fn literal(&mut self, word: &str) -> PyResult<()> {
        if self.src[self.pos..].starts_with(word.as_bytes()) {
            self.pos += word.len();
            Ok(())
        } else {
            Err(self.err(format!("invalid literal, expected {word}")))
        }
    }

    pub fn null(&mut self) -> PyResult<()> {
        self.literal("null")
    }

    pub fn boolean(&mut self) -> PyResult<bool> {
        match self.peek()? {
            Tok::True => self.literal("true").map(|_| true),
            Tok::False => self.literal("false").map(|_| false),
            t => Err(self.err(format!("expected a boolean, found {}", t.name()))),
        }
    }

    /// Read a number (the caller has checked that one comes next).
    pub fn number(&mut self) -> PyResult<JNum<'a>> {
        self.ws();
        let start = self.pos;
        let s = self.src;
        if matches!(s.get(start), Some(b'N' | b'I' | b'-')) {
            if s[start..].starts_with(b"NaN") {
                self.pos += 3;
                return Ok(JNum::Float(f64::NAN));
            }
            if s[start..].starts_with(b"Infinity") {
                self.pos += 8;
                return Ok(JNum::Float(f64::INFINITY));
            }
            if s[start..].starts_with(b"-Infinity") {
                self.pos += 9;
                return Ok(JNum::Float(f64::NEG_INFINITY));
            }
        }
        let mut p = start;
        let neg = s.get(p) == Some(&b'-');
        if neg {
            p += 1;
        }
        // the integer part, accumulated as a negative number so that i64::MIN fits
        let mut acc: i64 = 0;
        let mut overflow = false;
        match s.get(p) {
            Some(b'0') => p += 1,
            Some(b'1'..=b'9') => {
                while let Some(&c) = s.get(p) {
                    if !c.is_ascii_digit() {
                        break;
                    }
                    match acc
                        .checked_mul(10)
                        .and_then(|v| v.checked_sub((c - b'0') as i64))
                    {
                        Some(v) => acc = v,
                        None => overflow = true,
                    }
                    p += 1;
                }
            }
            _ => return Err(self.err_at(p, "invalid number")),
        }
        let mut is_float = false;
        if s.get(p) == Some(&b'.') {
            is_float = true;
            p += 1;
            if !matches!(s.get(p), Some(b'0'..=b'9')) {
                return Err(self.err_at(p, "invalid number: digits must follow the decimal point"));
            }
            while matches!(s.get(p), Some(b'0'..=b'9')) {
                p += 1;
            }
        }
        if matches!(s.get(p), Some(b'e' | b'E')) {
            is_float = true;
            p += 1;
            if matches!(s.get(p), Some(b'+' | b'-')) {
                p += 1;
            }
            if !matches!(s.get(p), Some(b'0'..=b'9')) {
                return Err(self.err_at(p, "invalid number: digits must follow the exponent"));
            }
            while matches!(s.get(p), Some(b'0'..=b'9')) {
                p += 1;
            }
        }
        // SAFETY: the bytes checked above are ASCII digits, signs, '.', 'e' and 'E'
        let text = unsafe { std::str::from_utf8_unchecked(&s[start..p]) };
        self.pos = p;
        if is_float {
            let v: f64 = text
                .parse()
                .map_err(|_| self.err_at(start, "invalid number"))?;
            return Ok(JNum::Float(v));
        }
        if !overflow {
            if neg {
                return Ok(JNum::Int(acc));
            }
            if let Some(v) = acc.checked_neg() {
                return Ok(JNum::Int(v));
            }
        }
        Ok(JNum::BigInt(text))
    }

    /// Read a string (the caller has checked that one comes next).
    pub fn string(&mut self) -> PyResult<JStr<'a>> {
        self.ws();
        if self.src.get(self.pos) != Some(&b'"') {
            return Err(self.err("expected a string"));
        }
        self.pos += 1;
        let start = self.pos;
        let s = self.src;
        // fast path: no escapes
        let mut p = start
            + s[start..]
                .iter()
                .position(|&b| NEEDS_ESCAPE[b as usize])
                .unwrap_or(s.len() - start);
        while let Some(&b) = s.get(p) {
            match b {
                b'"' => {
                    let raw = &s[start..p];
                    self.pos = p + 1;
                    return Ok(JStr::Str(Cow::Borrowed(self.utf8(raw, start)?)));
                }
                b'\\' => break,
                0..=0x1f => {
                    return Err(self.err_at(p, "control character in a string (it must be escaped)"))
                }
                _ => p += 1,
            }
        }
        if p >= s.len() {
            return Err(self.err_at(start - 1, "unterminated string"));
        }
        // slow path: unescape into bytes (surrogatepass UTF-8 for lone surrogates)
        let mut buf: Vec<u8> = Vec::with_capacity(p - start + 16);
        let mut wtf = false;
        let mut run = start;
        loop {
            let Some(&b) = s.get(p) else {
                return Err(self.err_at(start - 1, "unterminated string"));
            };
            match b {
                b'"' => {
                    self.utf8(&s[run..p], run)?;
                    buf.extend_from_slice(&s[run..p]);
                    self.pos = p + 1;
                    break;
                }
                b'\\' => {
                    self.utf8(&s[run..p], run)?;
                    buf.extend_from_slice(&s[run..p]);
                    let esc = s.get(p + 1).copied();
                    p += 2;
                    match esc {
                        Some(b'"') => buf.push(b'"'),
                        Some(b'\\') => buf.push(b'\\'),
                        Some(b'/') => buf.push(b'/'),
                        Some(b'b') => buf.push(0x08),
                        Some(b'f') => buf.push(0x0c),
                        Some(b'n') => buf.push(b'\n'),
                        Some(b'r') => buf.push(b'\r'),
                        Some(b't') => buf.push(b'\t'),
                        Some(b'u') => {
                            let hi = self.hex4(p)?;
                            p += 4;
                            let mut cp = hi as u32;
                            if (0xD800..0xDC00).contains(&hi)
                                && s.get(p) == Some(&b'\\')
                                && s.get(p + 1) == Some(&b'u')
                            {
                                let lo = self.hex4(p + 2)?;
                                if (0xDC00..0xE000).contains(&lo) {
                                    cp = 0x10000
                                        + (((hi as u32) - 0xD800) << 10)
                                        + (lo as u32 - 0xDC00);
                                    p += 6;
                                }
                            }
                            if (0xD800..0xE000).contains(&cp) {
                                // a lone surrogate: Python keeps it, as surrogatepass UTF-8
                                wtf = true;
                                buf.push(0xED);
                                buf.push(0x80 | ((cp >> 6) & 0x3F) as u8);
                                buf.push(0x80 | (cp & 0x3F) as u8);
                            } else {
                                let c = char::from_u32(cp)
                                    .ok_or_else(|| self.err_at(p, "invalid \\u escape"))?;
                                let mut tmp = [0u8; 4];
                                buf.extend_from_slice(c.encode_utf8(&mut tmp).as_bytes());
                            }
                        }
                        _ => return Err(self.err_at(p - 2, "invalid escape in a string")),
                    }
                    run = p;
                }
                0..=0x1f => {
                    return Err(self.err_at(p, "control character in a string (it must be escaped)"))
                }
                _ => p += 1,
            }
        }
        if wtf {
            return Ok(JStr::Wtf8(buf));
        }
        match String::from_utf8(buf) {
            Ok(s) => Ok(JStr::Str(Cow::Owned(s))),
            Err(_) => Err(self.err_at(start, "invalid UTF-8 in a string")),
        }
    }

    fn hex4(&self, p: usize) -> PyResult<u16> {
        let h = self
            .src
            .get(p..p + 4)
            .ok_or_else(|| self.err_at(p, "truncated \\u escape"))?;
        let mut v: u16 = 0;
        for &c in h {
            let d = match c {
                b'0'..=b'9' => c - b'0',
                b'a'..=b'f' => c - b'a' + 10,
                b'A'..=b'F' => c - b'A' + 10,
                _ => return Err(self.err_at(p, "invalid \\u escape")),
            };
            v = v * 16 + d as u16;
        }
        Ok(v)
    }

    fn utf8(&self, raw: &'a [u8], at: usize) -> PyResult<&'a str> {
        if self.utf8_checked || raw.is_ascii() {
            // SAFETY: a slice between ASCII delimiters of text known to be valid UTF-8, or ASCII
            return Ok(unsafe { std::str::from_utf8_unchecked(raw) });
        }
        std::str::from_utf8(raw)
            .map_err(|e| self.err_at(at + e.valid_up_to(), "invalid UTF-8 in a string"))
    }

    fn open(&mut self, c: u8, what: &str) -> PyResult<()> {
        self.ws();
        if self.src.get(self.pos) != Some(&c) {
            let found = match self.peek() {
                Ok(t) => t.name().to_string(),
                Err(_) => match self.src.get(self.pos) {
                    Some(&b) => show_byte(b),
                    None => "the end of the text".into(),
                },
            };
            return Err(self.err(format!("expected {what}, found {found}")));
        }
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(self.err(format!("nested deeper than {MAX_NESTING} levels")));
        }
        self.pos += 1;
        Ok(())
    }

    /// Consume `[`.
    pub fn arr_begin(&mut self) -> PyResult<()> {
        self.open(b'[', "an array")
    }

    /// Whether another element follows (consuming the `,` before it, or the closing `]`).
    pub fn arr_next(&mut self, first: &mut bool) -> PyResult<bool> {
        self.ws();
        match self.src.get(self.pos) {
            Some(b']') => {
                self.pos += 1;
                self.depth -= 1;
                Ok(false)
            }
            Some(b',') if !*first => {
                self.pos += 1;
                Ok(true)
            }
            Some(_) if *first => {
                *first = false;
                Ok(true)
            }
            Some(&b) => Err(self.err(format!("expected ',' or ']', found {}", show_byte(b)))),
            None => Err(self.err("unexpected end of text inside an array")),
        }
    }

    /// Consume `{`.
    pub fn obj_begin(&mut self) -> PyResult<()> {
        self.open(b'{', "an object")
    }

    /// The next key (consuming it and its `:`), or None at the closing `}`.
    pub fn obj_next(&mut self, first: &mut bool) -> PyResult<Option<(usize, JStr<'a>)>> {
        self.ws();
        match self.src.get(self.pos) {
            Some(b'}') => {
                self.pos += 1;
                self.depth -= 1;
                return Ok(None);
            }
            Some(b',') if !*first => {
                self.pos += 1;
                self.ws();
            }
            Some(b'"') if *first => {}
            Some(&b) => {
                return Err(self.err(format!(
                    "expected {}, found {}",
                    if *first { "'\"' or '}'" } else { "',' or '}'" },
                    show_byte(b)
                )))
            }
            None => return Err(self.err("unexpected end of text inside an object")),
        }
        *first = false;
        let at = self.pos;
        if self.src.get(self.pos) != Some(&b'"') {
            return Err(self.err("expected a key (a string)"));
        }
        let key = self.string()?;
        self.ws();
        if self.src.get(self.pos) != Some(&b':') {
            return Err(self.err("expected ':' after a key"));
        }
        self.pos += 1;
        Ok(Some((at, key)))
    }

    /// Skip one value, checking its syntax.
    pub fn skip(&mut self) -> PyResult<()> {
        match self.peek()? {
            Tok::Null => self.null(),
            Tok::True | Tok::False => self.boolean().map(|_| ()),
            Tok::Num => self.number().map(|_| ()),
            Tok::Str => self.string().map(|_| ()),
            Tok::Arr => {
                self.arr_begin()?;
                let mut first = true;
                while self.arr_next(&mut first)? {
                    self.skip()?;
                }
                Ok(())
            }
            Tok::Obj => {
                self.obj_begin()?;
                let mut first = true;
                while self.obj_next(&mut first)?.is_some() {
                    self.skip()?;
                }
                Ok(())
            }
        }
    }

    /// Check that only whitespace follows.
    pub fn end(&mut self) -> PyResult<()> {
        self.ws();
        if self.pos < self.src.len() {
            return Err(self.err("extra data after the end of the document"));
        }
        Ok(())
    }

    pub fn int(&mut self, what: &str) -> PyResult<i64> {
        let at = self.pos;
        match self.peek()? {
            Tok::Num => match self.number()? {
                JNum::Int(v) => Ok(v),
                JNum::BigInt(_) => Err(self.err_at(at, format!("{what}: integer out of range"))),
                JNum::Float(_) => {
                    Err(self.err_at(at, format!("{what}: expected an integer, found a float")))
                }
            },
            t => Err(self.err(format!("{what}: expected an integer, found {}", t.name()))),
        }
    }
}

fn show_byte(b: u8) -> String {
    if b.is_ascii_graphic() {
        format!("'{}'", b as char)
    } else {
        format!("byte 0x{b:02x}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repr(v: f64) -> String {
        let mut out = String::new();
        let mut scratch = String::new();
        write_f64(&mut out, v, &mut scratch);
        out
    }

    #[test]
    fn floats_like_python_repr() {
        let cases: &[(f64, &str)] = &[
            (1.0, "1.0"),
            (0.5, "0.5"),
            (-2.5, "-2.5"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (1.5e16, "1.5e+16"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (123456789012345678.0, "1.2345678901234568e+17"),
            (0.1, "0.1"),
            (1.0 / 3.0, "0.3333333333333333"),
            (5e-324, "5e-324"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (-0.0, "-0.0"),
            (f64::NAN, "NaN"),
            (f64::NEG_INFINITY, "-Infinity"),
            (1e100, "1e+100"),
            (12345.678, "12345.678"),
            (1.5, "1.5"),
            (-0.25, "-0.25"),
            (2.0, "2.0"),
            (0.001, "0.001"),
            (0.0001, "0.0001"),
            (0.0003, "0.0003"),
            (100.0, "100.0"),
            (999999999999999.0, "999999999999999.0"),
            (0.1 + 0.2, "0.30000000000000004"),
            (1.0005, "1.0005"),
            (1.00005, "1.00005"),
        ];
        for (v, want) in cases {
            assert_eq!(repr(*v), *want, "{v:e}");
        }
    }

    #[test]
    fn ties_between_shortest_strings_are_flagged() {
        let mut out = String::new();
        let mut scratch = String::new();
        write_f64(&mut out, 562949953421312.2, &mut scratch);
        assert!(shortest_is_ambiguous(&scratch));
        for v in [0.1, 1.5, 1.0 / 3.0, 123456789012345678.0] {
            out.clear();
            write_f64(&mut out, v, &mut scratch);
            assert!(!shortest_is_ambiguous(&scratch), "{v}");
        }
    }

    #[test]
    fn ints() {
        for v in [0, 7, 10, -1, -10, 1234567, i64::MAX, i64::MIN] {
            let mut out = String::new();
            write_i64(&mut out, v);
            assert_eq!(out, v.to_string());
        }
    }

    #[test]
    fn strings_escape_like_json_dumps() {
        let mut out = String::new();
        write_str(&mut out, "a\"b\\c\n\u{1}é");
        assert_eq!(out, "\"a\\\"b\\\\c\\n\\u0001é\"");
    }
}
