//! How a configuration problem is told: [`ConfigError`], the one line
//! `file: field.path: problem`, and [`Blame`], which names the environment
//! variable instead of the file when an override set the field. Separate
//! from loading so that every part of the loader (and each source's
//! parser) reports problems the same way without depending on the loader.

use serde::de::DeserializeOwned;

/// A configuration problem, always naming where it is.
#[derive(Debug, thiserror::Error)]
#[error("{origin}: {}{message}", path_prefix(.path))]
pub struct ConfigError {
    /// The file, `<defaults>`, or `environment variable NAME` the problem is in.
    pub origin: String,
    /// Dotted path of the field, e.g. `sources[0].poll_interval`; empty for file-level problems.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

/// `path: `, or nothing for a file-level problem.
fn path_prefix(path: &str) -> String {
    if path.is_empty() {
        String::new()
    } else {
        format!("{path}: ")
    }
}

/// Turns a problem at a field path into a [`ConfigError`], blaming the
/// environment variable that set the field when there is one, else the file.
pub(super) struct Blame {
    /// The file, `<stdin>` or `<defaults>`.
    pub(super) origin: String,
    /// Every environment override, to blame and to keep out of messages.
    pub(super) env_paths: Vec<EnvSetting>,
}

/// One environment override as [`Blame`] needs it.
pub(super) struct EnvSetting {
    /// The field it sets, dotted (`sources.0.tls.ca_file`).
    pub(super) path: String,
    /// The variable's name, which errors show.
    pub(super) var: String,
    /// Its value, which errors never show: it may be a secret.
    pub(super) value: String,
}

impl Blame {
    /// The error for `message` at `path` (`sources[0].url`, or empty).
    pub(super) fn error(&self, path: &str, message: String) -> ConfigError {
        let dotted = dotted(path);
        let from_env = self.env_paths.iter().find(|e| {
            let p = &e.path;
            !path.is_empty()
                && (dotted == *p
                    || dotted.starts_with(&format!("{p}."))
                    || p.starts_with(&format!("{dotted}.")))
        });
        match from_env {
            Some(e) => ConfigError {
                origin: format!("environment variable {}", e.var),
                path: path.to_string(),
                message: hide_value(&message, &e.value),
            },
            // A problem of no field may come from any variable (the
            // `config` crate's own errors): none of their values shows.
            None if path.is_empty() => ConfigError {
                origin: self.origin.clone(),
                path: String::new(),
                message: self
                    .env_paths
                    .iter()
                    .fold(message, |m, e| hide_value(&m, &e.value)),
            },
            None => ConfigError {
                origin: self.origin.clone(),
                path: path.to_string(),
                message,
            },
        }
    }
}

/// What a message shows in place of an environment value.
pub(super) const HIDDEN_VALUE: &str = "(the value, not shown)";

/// `message` without `value`, which an environment variable set: it may
/// be a secret, so the message says what is wrong and never what the
/// variable holds. Quoted forms (`"v"`, `` `v` ``, `'v'`, Rust's escaped
/// `"v"`) are replaced wherever they are; the bare value where it stands as
/// a word of its own and is at least 4 characters long (shorter words are
/// the message's own: `must be greater than 0`).
pub(super) fn hide_value(message: &str, value: &str) -> String {
    if value.is_empty() {
        return message.to_string();
    }
    let mut out = message.to_string();
    for quoted in [
        format!("{value:?}"),
        format!("\"{value}\""),
        format!("`{value}`"),
        format!("'{value}'"),
        format!("{:?}", value.trim()),
    ] {
        out = out.replace(&quoted, HIDDEN_VALUE);
    }
    for bare in [value, value.trim()] {
        if bare.chars().count() >= 4 {
            out = replace_word(&out, bare);
        }
    }
    out
}

/// `text` with each occurrence of `word` that no letter, digit or `_`
/// touches replaced by [`HIDDEN_VALUE`].
fn replace_word(text: &str, word: &str) -> String {
    let is_word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find(word) {
        let before = rest[..i].chars().next_back();
        let after = rest[i + word.len()..].chars().next();
        let before = if i == 0 {
            out.chars().next_back()
        } else {
            before
        };
        out.push_str(&rest[..i]);
        if is_word(before) || is_word(after) {
            out.push_str(word);
        } else {
            out.push_str(HIDDEN_VALUE);
        }
        rest = &rest[i + word.len()..];
    }
    out.push_str(rest);
    out
}

/// `sources[0].queues[1]` as `sources.0.queues.1`.
pub(super) fn dotted(path: &str) -> String {
    path.replace('[', ".").replace(']', "")
}

/// `s` on one line: every run of whitespace (newlines too) as one space.
pub(crate) fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Deserializes `value` as `T`; a failure is its field path (below
/// `prefix`, e.g. `sources[0]`) and the problem on one line.
pub fn typed<T: DeserializeOwned>(
    value: serde_json::Value,
    prefix: &str,
) -> Result<T, (String, String)> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let inner = e.path().to_string();
        let path = match (prefix.is_empty(), inner == ".") {
            (true, _) => inner,
            (false, true) => prefix.to_string(),
            (false, false) => format!("{prefix}.{inner}"),
        };
        let path = if path == "." { String::new() } else { path };
        (path, one_line(&e.into_inner().to_string()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_environment_value_never_shows_in_a_message() {
        let cases = [
            (
                "invalid duration \"s3cr3tvalue\"",
                "s3cr3tvalue",
                "invalid duration (the value, not shown)",
            ),
            (
                "unknown variant `xml`, expected `text` or `json`",
                "xml",
                "unknown variant (the value, not shown), expected `text` or `json`",
            ),
            (
                "invalid socket address syntax: hunter2:x",
                "hunter2:x",
                "invalid socket address syntax: (the value, not shown)",
            ),
            (
                "invalid type: string \"a\\\"b\", expected u64",
                "a\"b",
                "invalid type: string (the value, not shown), expected u64",
            ),
            // Short words are the message's own.
            ("must be greater than 0", "0", "must be greater than 0"),
            // A value inside a longer word is not that word.
            ("must be at most 10000", "1000", "must be at most 10000"),
        ];
        for (message, value, want) in cases {
            assert_eq!(hide_value(message, value), want, "{message:?} / {value:?}");
        }
    }
}
