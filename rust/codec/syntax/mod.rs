//! JSON text, read and written in plain Rust (no Python in here): the low level of
//! `to_json`/`from_json` and of the `to_dict` encoding. `read` is the reader (a pull parser whose
//! errors carry a byte offset), `write` the writer.

pub mod read;
pub mod write;

/// Deepest nesting of arrays and objects the reader accepts (the writer refuses values that would
/// go deeper).
pub const MAX_NESTING: usize = 512;

#[cfg(test)]
mod properties;

/// The lone surrogate whose 3-byte "surrogatepass" UTF-8 form (`ED A0..BF 80..BF`) starts `b`.
pub fn lone_surrogate(b: &[u8]) -> Option<u32> {
    match *b {
        [0xED, hi @ 0xA0..=0xBF, lo @ 0x80..=0xBF, ..] => {
            Some(0xD000 | ((hi & 0x3F) as u32) << 6 | (lo & 0x3F) as u32)
        }
        _ => None,
    }
}

/// Text held as surrogatepass UTF-8, escaped for a message between double quotes as Rust's `{:?}`
/// escapes a `str`, each lone surrogate written as Python writes it (`\udce9`) and any other byte
/// that is not UTF-8 as U+FFFD.
pub fn escape_wtf8(bytes: &[u8]) -> String {
    fn push(out: &mut String, s: &str) {
        let quoted = format!("{s:?}");
        out.push_str(&quoted[1..quoted.len() - 1]);
    }
    let mut out = String::new();
    let mut rest = bytes;
    loop {
        let e = match std::str::from_utf8(rest) {
            Ok(s) => {
                push(&mut out, s);
                return out;
            }
            Err(e) => e,
        };
        let (valid, bad) = rest.split_at(e.valid_up_to());
        // SAFETY: the bytes up to `valid_up_to` were just checked to be UTF-8
        push(&mut out, unsafe { std::str::from_utf8_unchecked(valid) });
        rest = match lone_surrogate(bad) {
            Some(cp) => {
                out.push_str(&format!("\\u{cp:04x}"));
                &bad[3..]
            }
            None => {
                out.push('\u{fffd}');
                &bad[e.error_len().unwrap_or(bad.len())..]
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lone_surrogates_are_found_and_shown_as_python_writes_them() {
        assert_eq!(lone_surrogate(b"\xed\xa0\x80x"), Some(0xD800));
        assert_eq!(lone_surrogate(b"\xed\xbf\xbf"), Some(0xDFFF));
        assert_eq!(lone_surrogate(b"\xed\x9f\xbf"), None); // U+D7FF, a character
        assert_eq!(lone_surrogate(b"\xed\xa0"), None);
        assert_eq!(
            escape_wtf8(b"a\"\xed\xb3\xa9\n\xc3\xa9\xff\xed\xa0\x80"),
            "a\\\"\\udce9\\n\u{e9}\u{fffd}\\ud800"
        );
        assert_eq!(escape_wtf8(b""), "");
    }
}
