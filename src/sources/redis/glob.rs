//! Redis's glob matching (`stringmatchlen` in Redis's `util.c`), so one SCAN
//! pass can serve several patterns: the server filters by their common
//! literal prefix, and each key is matched here exactly as `SCAN MATCH`
//! would have matched it. Bytes, not characters, like Redis; ranges compare
//! bytes as C `char`s (signed on the platforms Redis runs on), as Redis does.
//!
//! Hand-written rather than `globset` because it must agree with the server
//! byte for byte (escapes, unterminated classes, signed ranges, `*` on the
//! empty key); `tests/redis_glob.rs` compares it with a real `SCAN MATCH`.

/// Whether `SCAN MATCH pattern` returns `key`.
pub fn matches(pattern: &[u8], key: &[u8]) -> bool {
    // SCAN does not filter at all for a lone `*` (so it returns the empty
    // key, which `stringmatchlen("*", "")` alone would not match).
    if pattern == b"*" {
        return true;
    }
    let mut skip_longer = false;
    match_from(pattern, key, &mut skip_longer)
}

/// A `[…]` class, read from after its `[` (and `^`), against the byte
/// `c`: whether a member matches it, and the pattern from the class's
/// closing `]` on (empty for an unterminated class).
fn class_hit(mut p: &[u8], c: u8) -> (bool, &[u8]) {
    let mut hit = false;
    loop {
        if p.is_empty() {
            // Unterminated class: Redis steps back so the
            // outer step below consumes nothing more.
            break;
        } else if p[0] == b'\\' && p.len() >= 2 {
            p = &p[1..];
            hit |= p[0] == c;
        } else if p[0] == b']' {
            break;
        } else if p.len() >= 3 && p[1] == b'-' {
            let (mut lo, mut hi) = (p[0] as i8, p[2] as i8);
            if lo > hi {
                std::mem::swap(&mut lo, &mut hi);
            }
            let c = c as i8;
            hit |= c >= lo && c <= hi;
            p = &p[2..];
        } else {
            hit |= p[0] == c;
        }
        p = &p[1..];
    }
    (hit, p)
}

fn match_from(mut p: &[u8], mut s: &[u8], skip_longer: &mut bool) -> bool {
    while !p.is_empty() && !s.is_empty() {
        match p[0] {
            b'*' => {
                while p.len() > 1 && p[1] == b'*' {
                    p = &p[1..];
                }
                if p.len() == 1 {
                    return true;
                }
                while !s.is_empty() {
                    if match_from(&p[1..], s, skip_longer) {
                        return true;
                    }
                    // A later start cannot match either (Redis's shortcut).
                    if *skip_longer {
                        return false;
                    }
                    s = &s[1..];
                }
                *skip_longer = true;
                return false;
            }
            b'?' => s = &s[1..],
            b'[' => {
                p = &p[1..];
                let negate = p.first() == Some(&b'^');
                if negate {
                    p = &p[1..];
                }
                let (hit, rest) = class_hit(p, s[0]);
                p = rest;
                if hit == negate {
                    return false;
                }
                s = &s[1..];
                if p.is_empty() {
                    // The unterminated class used up the pattern.
                    return s.is_empty();
                }
            }
            b'\\' if p.len() >= 2 => {
                p = &p[1..];
                if p[0] != s[0] {
                    return false;
                }
                s = &s[1..];
            }
            c => {
                if c != s[0] {
                    return false;
                }
                s = &s[1..];
            }
        }
        p = &p[1..];
        if s.is_empty() {
            while p.first() == Some(&b'*') {
                p = &p[1..];
            }
            break;
        }
    }
    p.is_empty() && s.is_empty()
}

/// The bytes every key matching `pattern` starts with: everything before
/// the first byte with a glob meaning.
pub fn literal_prefix(pattern: &[u8]) -> &[u8] {
    let end = pattern
        .iter()
        .position(|b| matches!(b, b'*' | b'?' | b'[' | b'\\'))
        .unwrap_or(pattern.len());
    &pattern[..end]
}

/// A pattern matching every key that any of `patterns` matches: their
/// longest common literal prefix, then `*`.
pub fn covering_pattern<'a>(patterns: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut common: Option<&[u8]> = None;
    for p in patterns {
        let prefix = literal_prefix(p);
        common = Some(match common {
            None => prefix,
            Some(c) => {
                let n = c.iter().zip(prefix).take_while(|(a, b)| a == b).count();
                &c[..n]
            }
        });
    }
    let mut out = common.unwrap_or_default().to_vec();
    out.push(b'*');
    out
}

/// Escapes Redis glob metacharacters so `text` matches only itself.
pub fn escape(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    for b in text {
        if matches!(b, b'*' | b'?' | b'[' | b']' | b'\\') {
            out.push(b'\\');
        }
        out.push(*b);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_makes_metacharacters_literal() {
        assert_eq!(escape(b"a*b[c]"), b"a\\*b\\[c\\]".to_vec());
        assert!(matches(&escape(b"a*b[c]"), b"a*b[c]"));
        assert!(!matches(&escape(b"a*"), b"ab"));
    }

    #[test]
    fn stars_questions_classes_and_escapes_mean_what_they_mean_to_redis() {
        let cases: &[(&str, &str, bool)] = &[
            ("*", "", true),
            ("*", "anything", true),
            ("jobs:*", "jobs:pending:high", true),
            ("jobs:*", "job", false),
            ("jobs:*:high", "jobs:pending:high", true),
            ("jobs:*:high", "jobs:pending:low", false),
            ("a**b", "axxb", true),
            ("a?c", "abc", true),
            ("a?c", "ac", false),
            ("q[abc]", "qb", true),
            ("q[^abc]", "qb", false),
            ("q[^abc]", "qd", true),
            ("q[a-c]", "qb", true),
            ("q[c-a]", "qb", true),
            ("q[a-c]", "qd", false),
            ("q[\\]]", "q]", true),
            ("a\\*", "a*", true),
            ("a\\*", "ab", false),
            ("a\\", "a\\", true),
            ("q[ab", "qa", true),
            ("q[ab", "qab", false),
            ("user.*", "userX1", false),
            ("*x", "xxxxy", false),
            ("", "", true),
            ("", "a", false),
        ];
        for (p, k, want) in cases {
            assert_eq!(matches(p.as_bytes(), k.as_bytes()), *want, "{p:?} vs {k:?}");
        }
    }

    #[test]
    fn the_covering_pattern_is_the_common_literal_prefix() {
        let c = covering_pattern([b"queue:list:*".as_slice(), b"queue:zset:*"]);
        assert_eq!(c, b"queue:*");
        assert_eq!(covering_pattern([b"a?b".as_slice(), b"ab*"]), b"a*");
        assert_eq!(covering_pattern([b"x".as_slice(), b"y"]), b"*");
        assert_eq!(literal_prefix(b"a\\*b"), b"a");
    }
}
