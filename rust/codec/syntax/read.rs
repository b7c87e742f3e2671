//! The JSON text reader: a pull parser over bytes. It checks the grammar strictly (RFC 8259 plus
//! the three float tokens), bounds nesting, and reports every error with its byte offset (Python's
//! `JSONDecodeError` finds the line and column from it when the error is reported). It never
//! panics on any input.

use std::borrow::Cow;

use super::write::NEEDS_ESCAPE;
use super::{escape_wtf8, lone_surrogate, MAX_NESTING};

/// Why reading stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JsonError {
    /// The text breaks the grammar or a limit at byte `pos`; `msg` says how.
    Syntax { pos: usize, msg: Cow<'static, str> },
    /// The thread's C stack is nearly spent (`crate::stack`): nested too deep for this thread.
    Stack,
}

impl JsonError {
    /// An error at byte `pos`.
    pub fn at(pos: usize, msg: impl Into<Cow<'static, str>>) -> JsonError {
        JsonError::Syntax {
            pos,
            msg: msg.into(),
        }
    }
}

/// The result of a read.
pub type JsonResult<T> = Result<T, JsonError>;

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
    /// For messages: quoted, lone surrogates written as Python writes them (`"a\\udce9"`).
    pub fn show(&self) -> String {
        match self {
            JStr::Str(s) => format!("{s:?}"),
            JStr::Wtf8(b) => format!("\"{}\"", escape_wtf8(b)),
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
    /// whether the source is a Python str holding lone surrogates, in surrogatepass UTF-8
    lone_surrogates: bool,
}

impl<'a> Parser<'a> {
    pub fn new(src: &'a [u8], utf8_checked: bool) -> Parser<'a> {
        Parser {
            src,
            pos: 0,
            depth: 0,
            utf8_checked,
            lone_surrogates: false,
        }
    }

    /// A parser over the text of a Python str that holds lone surrogates, as surrogatepass UTF-8
    /// (`paths::str_bytes`). Inside a string value they are read as the str's own characters, as
    /// `json.loads` reads them (a string holding one is a `JStr::Wtf8`); anywhere else they are a
    /// syntax error at their offset, as any other character there.
    pub fn with_lone_surrogates(src: &'a [u8]) -> Parser<'a> {
        Parser {
            lone_surrogates: true,
            ..Parser::new(src, false)
        }
    }

    /// A parser over the same text, at `pos`, inside `depth` open arrays or objects.
    pub fn fork_at(&self, pos: usize, depth: usize) -> Parser<'a> {
        Parser {
            src: self.src,
            pos,
            depth,
            utf8_checked: self.utf8_checked,
            lone_surrogates: self.lone_surrogates,
        }
    }

    /// An error at byte `pos`.
    pub fn err_at(&self, pos: usize, msg: impl Into<Cow<'static, str>>) -> JsonError {
        JsonError::at(pos, msg)
    }

    /// An error at the current position.
    pub fn err(&self, msg: impl Into<Cow<'static, str>>) -> JsonError {
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
    pub fn peek(&mut self) -> JsonResult<Tok> {
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
            Some(_) => Err(self.unexpected("a value")),
        }
    }

    fn literal(&mut self, word: &str) -> JsonResult<()> {
        if self.src[self.pos..].starts_with(word.as_bytes()) {
            self.pos += word.len();
            Ok(())
        } else {
            Err(self.err(format!("invalid literal, expected {word}")))
        }
    }

    pub fn null(&mut self) -> JsonResult<()> {
        self.literal("null")
    }

    pub fn boolean(&mut self) -> JsonResult<bool> {
        match self.peek()? {
            Tok::True => self.literal("true").map(|_| true),
            Tok::False => self.literal("false").map(|_| false),
            t => Err(self.err(format!("expected a boolean, found {}", t.name()))),
        }
    }

    /// Read a number (the caller has checked that one comes next).
    pub fn number(&mut self) -> JsonResult<JNum<'a>> {
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
    pub fn string(&mut self) -> JsonResult<JStr<'a>> {
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
                    return match self.utf8(raw, start) {
                        Ok(t) => Ok(JStr::Str(Cow::Borrowed(t))),
                        Err(e) => self.lone_string(raw, e),
                    };
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
        self.string_escaped(start, p)
    }

    /// The slow path of [`Parser::string`]: the string's contents start at `start` and its first
    /// escape is at `p`. Unescapes into bytes (surrogatepass UTF-8 for lone surrogates).
    #[inline(never)]
    fn string_escaped(&mut self, start: usize, mut p: usize) -> JsonResult<JStr<'a>> {
        let s = self.src;
        let mut buf: Vec<u8> = Vec::with_capacity(p - start + 16);
        let mut wtf = false;
        let mut run = start;
        loop {
            let Some(&b) = s.get(p) else {
                return Err(self.err_at(start - 1, "unterminated string"));
            };
            match b {
                b'"' => {
                    self.copy_run(run, p, &mut buf, &mut wtf)?;
                    self.pos = p + 1;
                    break;
                }
                b'\\' => {
                    self.copy_run(run, p, &mut buf, &mut wtf)?;
                    p = self.unescape(p, &mut buf, &mut wtf)?;
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

    /// Append the unescaped bytes `run..end` of a string to `buf`, checked to be UTF-8 (`wtf` is
    /// set where they hold lone surrogates of a str that has them).
    #[inline(always)]
    fn copy_run(
        &self,
        run: usize,
        end: usize,
        buf: &mut Vec<u8>,
        wtf: &mut bool,
    ) -> JsonResult<()> {
        let raw = &self.src[run..end];
        if let Err(e) = self.utf8(raw, run) {
            self.lone_run(e)?;
            *wtf = true;
        }
        buf.extend_from_slice(raw);
        Ok(())
    }

    /// The bytes `raw` of a whole string, which are not UTF-8 (`e` says where): the string, where
    /// the parser reads a str holding lone surrogates (`lone_run`), else the error.
    #[cold]
    #[inline(never)]
    fn lone_string(&self, raw: &[u8], e: JsonError) -> JsonResult<JStr<'a>> {
        self.lone_run(e)?;
        Ok(JStr::Wtf8(raw.to_vec()))
    }

    /// A run of a string's bytes that is not UTF-8 (`e` says where): lone surrogates of the str
    /// the parser reads, if it reads one (a Python str's surrogatepass UTF-8 holds nothing else
    /// that is not UTF-8), else the error. Out of the way of valid text.
    #[cold]
    #[inline(never)]
    fn lone_run(&self, e: JsonError) -> JsonResult<()> {
        if self.lone_surrogates {
            Ok(())
        } else {
            Err(e)
        }
    }

    /// Append the escape at `p` (a backslash) to `buf`; returns where the string goes on. `wtf` is
    /// set when a lone surrogate was written.
    fn unescape(&self, p: usize, buf: &mut Vec<u8>, wtf: &mut bool) -> JsonResult<usize> {
        let simple = match self.src.get(p + 1).copied() {
            Some(b'"') => b'"',
            Some(b'\\') => b'\\',
            Some(b'/') => b'/',
            Some(b'b') => 0x08,
            Some(b'f') => 0x0c,
            Some(b'n') => b'\n',
            Some(b'r') => b'\r',
            Some(b't') => b'\t',
            Some(b'u') => return self.unescape_u(p + 2, buf, wtf),
            _ => return Err(self.err_at(p, "invalid escape in a string")),
        };
        buf.push(simple);
        Ok(p + 2)
    }

    /// Append the code point of the `\u` escape whose four hex digits start at `p` (and of the
    /// low surrogate's escape right after, when the pair makes one code point); returns where the
    /// string goes on.
    fn unescape_u(&self, mut p: usize, buf: &mut Vec<u8>, wtf: &mut bool) -> JsonResult<usize> {
        let s = self.src;
        let hi = self.hex4(p)?;
        p += 4;
        let mut cp = hi as u32;
        if (0xD800..0xDC00).contains(&hi) && s.get(p) == Some(&b'\\') && s.get(p + 1) == Some(&b'u')
        {
            let lo = self.hex4(p + 2)?;
            if (0xDC00..0xE000).contains(&lo) {
                cp = 0x10000 + (((hi as u32) - 0xD800) << 10) + (lo as u32 - 0xDC00);
                p += 6;
            }
        }
        if (0xD800..0xE000).contains(&cp) {
            // a lone surrogate: Python keeps it, as surrogatepass UTF-8
            *wtf = true;
            buf.push(0xED);
            buf.push(0x80 | ((cp >> 6) & 0x3F) as u8);
            buf.push(0x80 | (cp & 0x3F) as u8);
        } else {
            let c = char::from_u32(cp).ok_or_else(|| self.err_at(p, "invalid \\u escape"))?;
            let mut tmp = [0u8; 4];
            buf.extend_from_slice(c.encode_utf8(&mut tmp).as_bytes());
        }
        Ok(p)
    }

    fn hex4(&self, p: usize) -> JsonResult<u16> {
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

    fn utf8(&self, raw: &'a [u8], at: usize) -> JsonResult<&'a str> {
        if self.utf8_checked || raw.is_ascii() {
            // SAFETY: a slice between ASCII delimiters of text known to be valid UTF-8, or ASCII
            return Ok(unsafe { std::str::from_utf8_unchecked(raw) });
        }
        std::str::from_utf8(raw)
            .map_err(|e| self.err_at(at + e.valid_up_to(), "invalid UTF-8 in a string"))
    }

    fn open(&mut self, c: u8, what: &str) -> JsonResult<()> {
        self.ws();
        if self.src.get(self.pos) != Some(&c) {
            let found = match self.peek() {
                Ok(t) => t.name().to_string(),
                Err(_) if self.pos < self.src.len() => self.show_at(self.pos),
                Err(_) => "the end of the text".into(),
            };
            return Err(self.err(format!("expected {what}, found {found}")));
        }
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(self.err(format!("nested deeper than {MAX_NESTING} levels")));
        }
        // readers of nested values recurse once per level
        if !crate::stack::room_left() {
            return Err(JsonError::Stack);
        }
        self.pos += 1;
        Ok(())
    }

    /// Consume `[`.
    pub fn arr_begin(&mut self) -> JsonResult<()> {
        self.open(b'[', "an array")
    }

    /// Whether another element follows (consuming the `,` before it, or the closing `]`).
    pub fn arr_next(&mut self, first: &mut bool) -> JsonResult<bool> {
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
            Some(_) => Err(self.found("',' or ']'")),
            None => Err(self.err("unexpected end of text inside an array")),
        }
    }

    /// Consume `{`.
    pub fn obj_begin(&mut self) -> JsonResult<()> {
        self.open(b'{', "an object")
    }

    /// The next key (consuming it and its `:`), or None at the closing `}`.
    pub fn obj_next(&mut self, first: &mut bool) -> JsonResult<Option<(usize, JStr<'a>)>> {
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
            Some(_) if *first => return Err(self.found("'\"' or '}'")),
            Some(_) => return Err(self.found("',' or '}'")),
            None => return Err(self.err("unexpected end of text inside an object")),
        }
        *first = false;
        let at = self.pos;
        if self.src.get(self.pos) != Some(&b'"') {
            return Err(self.found("a key (a string)"));
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
    pub fn skip(&mut self) -> JsonResult<()> {
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
    pub fn end(&mut self) -> JsonResult<()> {
        self.ws();
        if self.pos < self.src.len() {
            return Err(self.err("extra data after the end of the document"));
        }
        Ok(())
    }

    pub fn int(&mut self, what: &str) -> JsonResult<i64> {
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

impl Parser<'_> {
    /// "unexpected C, expected `what`", at the current position (inside the text).
    #[cold]
    #[inline(never)]
    fn unexpected(&self, what: &str) -> JsonError {
        let c = self.show_at(self.pos);
        self.err(format!("unexpected {c}, expected {what}"))
    }

    /// "expected `what`, found C", at the current position.
    #[cold]
    #[inline(never)]
    fn found(&self, what: &str) -> JsonError {
        let c = match self.pos < self.src.len() {
            true => self.show_at(self.pos),
            false => "the end of the text".into(),
        };
        self.err(format!("expected {what}, found {c}"))
    }

    /// The character at byte `pos` (inside the text), for a message: `'x'`, `'é'`, `lone surrogate
    /// '\udce9'` in a str that holds them, or `byte 0x01` when it is not a printable character.
    #[cold]
    fn show_at(&self, pos: usize) -> String {
        let rest = &self.src[pos..];
        if let Some(cp) = lone_surrogate(rest).filter(|_| self.lone_surrogates) {
            return format!("lone surrogate '\\u{cp:04x}'");
        }
        let len = match rest[0] {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => 1,
        };
        let c = rest
            .get(..len)
            .and_then(|b| std::str::from_utf8(b).ok())
            .and_then(|s| s.chars().next());
        match c {
            Some(c) if c.is_ascii_graphic() || (!c.is_ascii() && !c.is_control()) => {
                format!("{c:?}")
            }
            _ => format!("byte 0x{:02x}", rest[0]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads one whole document (value, then only whitespace), checking its syntax.
    fn check(src: &str) -> JsonResult<()> {
        let mut p = Parser::new(src.as_bytes(), false);
        p.skip()?;
        p.end()
    }

    /// The offset and message of the error reading `src`.
    fn error(src: &[u8]) -> (usize, String) {
        let mut p = Parser::new(src, false);
        match p.skip().and_then(|_| p.end()) {
            Err(JsonError::Syntax { pos, msg }) => (pos, msg.into_owned()),
            other => panic!(
                "{:?}: expected a syntax error, got {other:?}",
                String::from_utf8_lossy(src)
            ),
        }
    }

    fn number(src: &str) -> JNum<'_> {
        let mut p = Parser::new(src.as_bytes(), true);
        let n = p.number().unwrap();
        p.end().unwrap();
        n
    }

    fn string(src: &str) -> JStr<'_> {
        let mut p = Parser::new(src.as_bytes(), false);
        let s = p.string().unwrap();
        p.end().unwrap();
        s
    }

    #[test]
    fn the_grammar_is_read() {
        for ok in [
            "null",
            " true ",
            "false",
            "0",
            "-1.5e+3",
            "2E-2",
            "\"\"",
            "[]",
            "{}",
            "[1, [2, {\"a\": [null]}], \"x\"]",
            "{\"a\" : 1 ,\"b\":{\"c\":[]}}",
            "\t\r\n[ ]\n",
            "NaN",
            "-Infinity",
            "[Infinity]",
            "\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\"",
        ] {
            check(ok).unwrap_or_else(|e| panic!("{ok:?}: {e:?}"));
        }
    }

    #[test]
    fn every_error_says_where() {
        let cases: &[(&[u8], usize, &str)] = &[
            (b"", 0, "unexpected end of text, expected a value"),
            (b"  ", 2, "unexpected end of text, expected a value"),
            (b"x", 0, "unexpected 'x', expected a value"),
            (b"\x01", 0, "unexpected byte 0x01, expected a value"),
            (b"nul", 0, "invalid literal, expected null"),
            (b"tru", 0, "invalid literal, expected true"),
            (b"[fals]", 1, "invalid literal, expected false"),
            (b"-", 1, "invalid number"),
            (b"-x", 1, "invalid number"),
            (
                b"1.",
                2,
                "invalid number: digits must follow the decimal point",
            ),
            (
                b"1.e5",
                2,
                "invalid number: digits must follow the decimal point",
            ),
            (b"1e", 2, "invalid number: digits must follow the exponent"),
            (b"1e+", 3, "invalid number: digits must follow the exponent"),
            (b"01", 1, "extra data after the end of the document"),
            (b"1 2", 2, "extra data after the end of the document"),
            (b"\"abc", 0, "unterminated string"),
            (b"\"a\\nb", 0, "unterminated string"),
            (
                b"\"a\nb\"",
                2,
                "control character in a string (it must be escaped)",
            ),
            (
                b"\"\\n\x1f\"",
                3,
                "control character in a string (it must be escaped)",
            ),
            (b"\"\\x\"", 1, "invalid escape in a string"),
            (b"\"\\", 1, "invalid escape in a string"),
            (b"\"\\u12\"xx", 3, "invalid \\u escape"),
            (b"\"\\u12", 3, "truncated \\u escape"),
            (b"\"\\uzzzz\"", 3, "invalid \\u escape"),
            (b"\"\\ud800\\u12", 9, "truncated \\u escape"),
            (b"\"\xff\"", 1, "invalid UTF-8 in a string"),
            (b"\"ab\xc3\"", 3, "invalid UTF-8 in a string"),
            (b"\"\\n\xff\"", 3, "invalid UTF-8 in a string"),
            (b"[1 2]", 3, "expected ',' or ']', found '2'"),
            (b"[1,", 3, "unexpected end of text, expected a value"),
            (b"[", 1, "unexpected end of text inside an array"),
            (b"[1", 2, "unexpected end of text inside an array"),
            (b"[,1]", 1, "unexpected ',', expected a value"),
            (b"{1:2}", 1, "expected '\"' or '}', found '1'"),
            (b"{\"a\":1 \"b\"}", 7, "expected ',' or '}', found '\"'"),
            (b"{\"a\":1,}", 7, "expected a key (a string), found '}'"),
            (
                b"{\"a\":1,",
                7,
                "expected a key (a string), found the end of the text",
            ),
            (b"{\"a\" 1}", 5, "expected ':' after a key"),
            (b"{\"a\":1", 6, "unexpected end of text inside an object"),
            (b"{", 1, "unexpected end of text inside an object"),
        ];
        let wrong: Vec<String> = cases
            .iter()
            .filter(|&&(src, pos, msg)| error(src) != (pos, msg.to_owned()))
            .map(|&(src, _, _)| format!("{:?}: {:?}", String::from_utf8_lossy(src), error(src)))
            .collect();
        assert!(wrong.is_empty(), "{wrong:#?}");
    }

    #[test]
    fn typed_reads_say_what_they_expected() {
        let mut p = Parser::new(b"[1]", true);
        assert_eq!(
            p.boolean(),
            Err(JsonError::at(0, "expected a boolean, found an array"))
        );
        assert_eq!(
            p.obj_begin(),
            Err(JsonError::at(0, "expected an object, found an array"))
        );
        let mut p = Parser::new(b"1.5 \"x\" 99999999999999999999", true);
        assert_eq!(
            p.int("size"),
            Err(JsonError::at(0, "size: expected an integer, found a float"))
        );
        assert_eq!(
            p.int("size"),
            Err(JsonError::at(
                4,
                "size: expected an integer, found a string"
            ))
        );
        p.pos = 8;
        assert_eq!(
            p.int("size"),
            Err(JsonError::at(8, "size: integer out of range"))
        );
        let mut p = Parser::new(b"x", true);
        assert_eq!(
            p.arr_begin(),
            Err(JsonError::at(0, "expected an array, found 'x'"))
        );
        let mut p = Parser::new(b"", true);
        assert_eq!(
            p.arr_begin(),
            Err(JsonError::at(
                0,
                "expected an array, found the end of the text"
            ))
        );
    }

    #[test]
    fn nesting_is_bounded() {
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        check(&deep(MAX_NESTING)).unwrap();
        let objects = format!(
            "{}1{}",
            "{\"a\":".repeat(MAX_NESTING),
            "}".repeat(MAX_NESTING)
        );
        check(&objects).unwrap();
        assert_eq!(
            error(deep(MAX_NESTING + 1).as_bytes()),
            (
                MAX_NESTING,
                format!("nested deeper than {MAX_NESTING} levels")
            )
        );
        // a parser at depth d accepts MAX_NESTING - d more levels
        let text = deep(MAX_NESTING);
        let mut p = Parser::new(text.as_bytes(), true).fork_at(0, 1);
        assert_eq!(
            p.skip(),
            Err(JsonError::at(
                MAX_NESTING - 1,
                "nested deeper than 512 levels"
            ))
        );
        let mut p = Parser::new(text.as_bytes(), true).fork_at(1, 1);
        p.skip().unwrap();
    }

    #[test]
    fn a_thread_short_of_stack_is_refused_not_overflowed() {
        let text = format!("{}{}", "[".repeat(MAX_NESTING), "]".repeat(MAX_NESTING));
        let got = std::thread::Builder::new()
            .stack_size(64 * 1024)
            .spawn(move || check(&text))
            .unwrap()
            .join()
            .expect("the thread overflowed its stack");
        assert_eq!(got, Err(JsonError::Stack));
    }

    #[test]
    fn numbers_at_the_edges() {
        assert!(matches!(number("0"), JNum::Int(0)));
        assert!(matches!(number("-0"), JNum::Int(0)));
        assert!(matches!(number("-0.0"), JNum::Float(f) if f == 0.0 && f.is_sign_negative()));
        assert!(matches!(number("9223372036854775807"), JNum::Int(i64::MAX)));
        assert!(matches!(
            number("-9223372036854775808"),
            JNum::Int(i64::MIN)
        ));
        assert!(matches!(
            number("9223372036854775808"),
            JNum::BigInt("9223372036854775808")
        ));
        assert!(matches!(
            number("-9223372036854775809"),
            JNum::BigInt("-9223372036854775809")
        ));
        assert!(matches!(
            number("12345678901234567890"),
            JNum::BigInt("12345678901234567890")
        ));
        assert!(matches!(number("99999999999999999999"), JNum::BigInt(_)));
        assert!(matches!(number("1e309"), JNum::Float(f) if f == f64::INFINITY));
        assert!(matches!(number("-1e309"), JNum::Float(f) if f == f64::NEG_INFINITY));
        assert!(matches!(number("1e-400"), JNum::Float(f) if f == 0.0));
        assert!(matches!(number("5e-324"), JNum::Float(f) if f == 5e-324));
        assert!(matches!(number("1.7976931348623157e308"), JNum::Float(f) if f == f64::MAX));
        assert!(matches!(number("1E2"), JNum::Float(f) if f == 100.0));
        assert!(matches!(number("NaN"), JNum::Float(f) if f.is_nan()));
        assert!(matches!(number("Infinity"), JNum::Float(f) if f == f64::INFINITY));
        assert!(matches!(number("-Infinity"), JNum::Float(f) if f == f64::NEG_INFINITY));
    }

    #[test]
    fn strings_and_surrogates() {
        assert!(matches!(
            string("\"plain\""),
            JStr::Str(Cow::Borrowed("plain"))
        ));
        assert!(matches!(string("\"é\""), JStr::Str(Cow::Borrowed("é"))));
        assert!(string("\"a\\u00e9\\n\"").is("aé\n"));
        // a pair of escapes is one character
        assert!(string("\"\\ud83d\\ude00\"").is("\u{1f600}"));
        // lone surrogates are kept, as surrogatepass UTF-8
        assert!(matches!(string("\"\\ud800\""), JStr::Wtf8(b) if b == [0xED, 0xA0, 0x80]));
        assert!(matches!(string("\"\\udc00x\""), JStr::Wtf8(b) if b == [0xED, 0xB0, 0x80, b'x']));
        assert!(
            matches!(string("\"\\ud800\\u0041\""), JStr::Wtf8(b) if b == [0xED, 0xA0, 0x80, b'A'])
        );
        // a low surrogate first, then a high one: two lone surrogates
        assert!(
            matches!(string("\"\\udc00\\ud800\""), JStr::Wtf8(b) if b == [0xED, 0xB0, 0x80, 0xED, 0xA0, 0x80])
        );
        // messages write them as Python does
        assert_eq!(string("\"a\\ud800\"").show(), "\"a\\ud800\"");
        assert_eq!(string("\"a\\\"b\"").show(), "\"a\\\"b\"");
    }

    /// The strings of a JSON array read by a parser of a str's surrogatepass UTF-8.
    fn lone_strings(src: &[u8]) -> Vec<JStr<'_>> {
        let mut p = Parser::with_lone_surrogates(src);
        let (mut out, mut first) = (Vec::new(), true);
        p.arr_begin().unwrap();
        while p.arr_next(&mut first).unwrap() {
            out.push(p.string().unwrap());
        }
        p.end().unwrap();
        out
    }

    #[test]
    fn a_str_holding_lone_surrogates_is_read_inside_strings() {
        // '\udce9' is ED B3 A9 in surrogatepass UTF-8
        let got = lone_strings(
            b"[\"a\xed\xb3\xa9\", \"\xed\xb3\xa9\\n\xc3\xa9\", \"plain\", \"\xc3\xa9\"]",
        );
        assert!(matches!(&got[0], JStr::Wtf8(b) if b == b"a\xed\xb3\xa9"));
        assert!(matches!(&got[1], JStr::Wtf8(b) if b == b"\xed\xb3\xa9\n\xc3\xa9"));
        assert!(matches!(&got[2], JStr::Str(Cow::Borrowed("plain"))));
        assert!(matches!(&got[3], JStr::Str(Cow::Borrowed("é"))));
        // one as itself and one escaped are two characters, as json.loads reads them: only two
        // escapes make one
        let got = lone_strings(b"[\"\xed\xa0\xbd\\ude00\", \"\\ud83d\xed\xb8\x80\"]");
        for s in &got {
            assert!(matches!(s, JStr::Wtf8(b) if b == b"\xed\xa0\xbd\xed\xb8\x80"));
        }
    }

    #[test]
    fn a_lone_surrogate_outside_a_string_is_an_error_naming_it() {
        let error = |src: &[u8]| {
            let mut p = Parser::with_lone_surrogates(src);
            match p.skip().and_then(|_| p.end()) {
                Err(JsonError::Syntax { pos, msg }) => (pos, msg.into_owned()),
                other => panic!("expected a syntax error, got {other:?}"),
            }
        };
        let cases: &[(&[u8], usize, &str)] = &[
            (
                b"\xed\xb3\xa9[]",
                0,
                "unexpected lone surrogate '\\udce9', expected a value",
            ),
            (
                b"[1\xed\xa0\x80]",
                2,
                "expected ',' or ']', found lone surrogate '\\ud800'",
            ),
            (
                b"{\xed\xb3\xa9}",
                1,
                "expected '\"' or '}', found lone surrogate '\\udce9'",
            ),
            (
                b"{\"a\":1,\xed\xb3\xa9}",
                7,
                "expected a key (a string), found lone surrogate '\\udce9'",
            ),
            (
                b"[]\xed\xb3\xa9",
                2,
                "extra data after the end of the document",
            ),
            (b"\xc3\xa9", 0, "unexpected '\u{e9}', expected a value"),
        ];
        for &(src, pos, msg) in cases {
            assert_eq!(error(src), (pos, msg.to_owned()), "{src:?}");
        }
        // bytes are not a str: the same 3 bytes are no UTF-8 there
        assert_eq!(
            super::tests::error(b"\xed\xb3\xa9"),
            (0, "unexpected byte 0xed, expected a value".to_owned())
        );
        assert_eq!(
            super::tests::error(b"\"\xed\xb3\xa9\""),
            (1, "invalid UTF-8 in a string".to_owned())
        );
    }

    #[test]
    fn object_keys_come_with_their_offsets() {
        let text = b"{\"a\": 1, \"b\" :[]}";
        let mut p = Parser::new(text, true);
        p.obj_begin().unwrap();
        let mut first = true;
        let (at, k) = p.obj_next(&mut first).unwrap().unwrap();
        assert_eq!((at, k.as_str()), (1, Some("a")));
        assert!(matches!(p.number().unwrap(), JNum::Int(1)));
        let (at, k) = p.obj_next(&mut first).unwrap().unwrap();
        assert_eq!((at, k.as_str()), (9, Some("b")));
        p.skip().unwrap();
        assert!(p.obj_next(&mut first).unwrap().is_none());
        p.end().unwrap();
    }
}
