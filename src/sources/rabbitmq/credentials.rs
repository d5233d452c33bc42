//! Who the source logs in as: `username`/`password`/`password_file` from the
//! config, falling back to the user info of the URL. Read at poll time, so a
//! rotated `password_file` is picked up without a restart.

use std::fmt;

use crate::config::{RabbitSourceConfig, read_secret_file};
use crate::sources::SourceError;

/// A user name and password. `Debug` never shows the password.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The user name.
    pub username: String,
    /// The password (secret).
    pub password: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"***")
            .finish()
    }
}

/// Replaces every occurrence of `secret` in `text` by `***` (no-op for an
/// empty secret): a last line of defence before an error text is logged.
pub fn scrub(text: &str, secret: &str) -> String {
    if secret.is_empty() {
        text.to_string()
    } else {
        text.replace(secret, "***")
    }
}

/// Resolves the credentials for `config`: config fields first, then the
/// URL's user info (percent-decoded). `None` when neither gives a user.
pub fn resolve(config: &RabbitSourceConfig) -> Result<Option<Credentials>, SourceError> {
    let (url_user, url_password) = match reqwest::Url::parse(&config.url) {
        Ok(u) => (
            decode(u.username()),
            u.password().map(decode).unwrap_or_default(),
        ),
        Err(_) => (String::new(), String::new()),
    };
    let password = match (&config.password_file, &config.password) {
        (Some(path), _) => read_secret_file(path).map_err(|e| {
            SourceError::Config(format!("cannot read password_file {}: {e}", path.display()))
        })?,
        (None, Some(p)) => p.clone(),
        (None, None) => url_password,
    };
    let username = config.username.clone().unwrap_or(url_user);
    if username.is_empty() && password.is_empty() {
        return Ok(None);
    }
    Ok(Some(Credentials { username, password }))
}

/// Percent-decodes URL user info (`%40` → `@`); invalid UTF-8 is kept lossily.
fn decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(url: &str) -> RabbitSourceConfig {
        let yaml = format!("name: r\nurl: {url}\n");
        let v: serde_json::Value = serde_norway::from_str(&yaml).unwrap();
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn url_user_info_is_the_fallback() {
        let c = resolve(&config("http://us%40er:p%3Ass@h:15672"))
            .unwrap()
            .unwrap();
        assert_eq!(c.username, "us@er");
        assert_eq!(c.password, "p:ss");
        assert!(!format!("{c:?}").contains("p:ss"));
        assert_eq!(resolve(&config("http://h:15672")).unwrap(), None);
    }

    #[test]
    fn config_fields_win_and_files_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("pw");
        std::fs::write(&f, "from-file\n").unwrap();
        let mut c = config("http://u:p@h:15672");
        c.username = Some("admin".into());
        c.password_file = Some(f);
        let got = resolve(&c).unwrap().unwrap();
        assert_eq!(
            (got.username.as_str(), got.password.as_str()),
            ("admin", "from-file")
        );
        c.password_file = Some(dir.path().join("missing"));
        assert_eq!(
            resolve(&c).unwrap_err().reason(),
            crate::snapshot::Reason::Config
        );
    }

    #[test]
    fn scrub_hides_the_password() {
        assert_eq!(scrub("login s3cret failed", "s3cret"), "login *** failed");
        assert_eq!(scrub("text", ""), "text");
    }
}
