//! Turning raw Redis key bytes into label values.
//!
//! Keys are binary-safe; label values must be UTF-8. Valid UTF-8 passes
//! through untouched (quotes, backslashes and newlines are escaped later by
//! the encoder). In a key that is not valid UTF-8, each byte of an invalid
//! sequence becomes `\xNN` and each backslash becomes `\\`, so the rendering
//! can be read back unambiguously: distinct non-UTF-8 keys stay distinct, and
//! nothing panics. (A valid key spelled exactly like another key's rendering,
//! such as the literal text `a\xff`, can still collide; discovery keeps the
//! first and counts the other as dropped.)

/// The `queue` label value for a key.
pub fn display_key(bytes: &[u8]) -> String {
    if let Ok(s) = std::str::from_utf8(bytes) {
        return s.to_string();
    }
    let mut out = String::with_capacity(bytes.len() + 8);
    for chunk in bytes.utf8_chunks() {
        // Without this, b"\\xff\xfe" and b"\xff\\xfe" would both render as `\xff\xfe`.
        out.push_str(&chunk.valid().replace('\\', "\\\\"));
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_passes_through() {
        assert_eq!(display_key("jobs:\"q\"\n\\ü".as_bytes()), "jobs:\"q\"\n\\ü");
    }

    #[test]
    fn invalid_bytes_are_hex_escaped_and_distinct() {
        assert_eq!(display_key(b"a\xffb"), "a\\xffb");
        assert_ne!(display_key(b"a\xfe"), display_key(b"a\xff"));
        assert_eq!(display_key(b"\xc3"), "\\xc3");
    }

    #[test]
    fn backslashes_in_invalid_keys_are_escaped_so_renderings_stay_distinct() {
        assert_eq!(display_key(b"\\xff\xfe"), "\\\\xff\\xfe");
        assert_eq!(display_key(b"\xff\\xfe"), "\\xff\\\\xfe");
        assert_ne!(display_key(b"\\xff\xfe"), display_key(b"\xff\\xfe"));
    }
}
