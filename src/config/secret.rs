//! Secrets in the config: files read at use time, and URLs redacted for
//! logs and errors, so a password never reaches a log line or a label.

use std::fmt;
use std::path::Path;

/// Reads a secret file, dropping one trailing newline (and `\r`).
pub fn read_secret_file(path: &Path) -> std::io::Result<String> {
    let mut s = std::fs::read_to_string(path)?;
    if s.ends_with('\n') {
        s.pop();
        if s.ends_with('\r') {
            s.pop();
        }
    }
    Ok(s)
}

/// A password written in the config or an environment override. `Debug`
/// shows `***`, so a config printed for debugging never carries it; only
/// [`Password::expose`] hands out the text, where a connection is made.
#[derive(Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(transparent)]
pub struct Password(String);

impl Password {
    /// The password itself, for the connection that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// Hides the password (and user info) of a URL for logs and errors.
pub struct Redacted<'a>(pub &'a str);

impl fmt::Display for Redacted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0;
        match (s.find("://"), s.rfind('@')) {
            (Some(scheme_end), Some(at)) if at > scheme_end => {
                write!(f, "{}://***@{}", &s[..scheme_end], &s[at + 1..])
            }
            _ => f.write_str(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_hides_credentials() {
        assert_eq!(
            Redacted("redis://user:secret@host:6379/0").to_string(),
            "redis://***@host:6379/0"
        );
        assert_eq!(
            Redacted("redis://host:6379").to_string(),
            "redis://host:6379"
        );
    }

    #[test]
    fn a_password_never_shows_in_debug() {
        let p: Password = serde_json::from_value(serde_json::json!("s3cret")).unwrap();
        assert_eq!(p.expose(), "s3cret");
        assert_eq!(format!("{p:?}"), "***");
    }

    #[test]
    fn secret_files_drop_one_trailing_newline() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("pw");
        std::fs::write(&p, "s3cret\n").unwrap();
        assert_eq!(read_secret_file(&p).unwrap(), "s3cret");
    }
}
