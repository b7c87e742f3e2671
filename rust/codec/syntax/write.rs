//! The JSON text writer: what `json.dumps` would write for the same values (floats as
//! `float.__repr__`, the `NaN`/`Infinity`/`-Infinity` tokens), with compact separators and UTF-8
//! text; lone surrogates, which Python strings may hold, are written as `\udXXX` escapes.

use std::fmt::Write as _;

/// Append `s` as a JSON string literal.
pub fn write_str(out: &mut String, s: &str) {
    out.push('"');
    write_str_body(out, s);
    out.push('"');
}

/// Which bytes a JSON string must escape: `"`, `\\` and the control characters.
pub(super) const NEEDS_ESCAPE: [bool; 256] = {
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
/// `str.encode("utf-8", "surrogatepass")` produces): surrogates become `\udXXX` escapes. Refuses,
/// having written nothing useful, a high surrogate directly followed by a low one (returned): any
/// JSON reader would join the two escapes into one character, so the text cannot round-trip.
pub fn write_wtf8(out: &mut String, bytes: &[u8]) -> Result<(), [u32; 2]> {
    out.push('"');
    let (mut run, mut i) = (0, 0);
    let mut last_high: Option<(usize, u32)> = None;
    while i < bytes.len() {
        if let Some(cp) = super::lone_surrogate(&bytes[i..]) {
            write_str_body(out, &String::from_utf8_lossy(&bytes[run..i]));
            match last_high {
                Some((end, high)) if end == i && (0xDC00..0xE000).contains(&cp) => {
                    return Err([high, cp])
                }
                _ => {}
            }
            let _ = write!(out, "\\u{:04x}", cp);
            i += 3;
            if cp < 0xDC00 {
                last_high = Some((i, cp));
            }
            run = i;
        } else {
            i += 1;
        }
    }
    write_str_body(out, &String::from_utf8_lossy(&bytes[run..]));
    out.push('"');
    Ok(())
}

/// Append `v` in decimal.
pub fn write_i64(out: &mut String, v: i64) {
    out.push_str(itoa::Buffer::new().format(v));
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

    #[test]
    fn lone_surrogates_are_escaped_and_a_pair_of_them_refused_by_name() {
        let write = |b: &[u8]| {
            let mut out = String::new();
            write_wtf8(&mut out, b).map(|_| out)
        };
        // '\udce9', 'é', a backslash, '\ud800'
        assert_eq!(
            write(b"\xed\xb3\xa9\xc3\xa9\\\xed\xa0\x80").as_deref(),
            Ok("\"\\udce9é\\\\\\ud800\"")
        );
        // a low surrogate then a high one reads back as the two: written
        assert!(write(b"\xed\xb0\x80\xed\xa0\x80").is_ok());
        // a high then a low one would read back as one character: refused, naming both
        assert_eq!(write(b"x\xed\xa0\xbd\xed\xb8\x80"), Err([0xD83D, 0xDE00]));
        assert_eq!(
            write(b"\xed\xa0\xbdx\xed\xb8\x80").as_deref(),
            Ok("\"\\ud83dx\\ude00\"")
        );
    }
}
