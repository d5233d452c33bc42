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
    /// `(dotted field path, variable)` for every environment override.
    pub(super) env_paths: Vec<(String, String)>,
}

impl Blame {
    /// The error for `message` at `path` (`sources[0].url`, or empty).
    pub(super) fn error(&self, path: &str, message: String) -> ConfigError {
        let dotted = dotted(path);
        let from_env = self.env_paths.iter().find(|(p, _)| {
            !path.is_empty()
                && (dotted == *p
                    || dotted.starts_with(&format!("{p}."))
                    || p.starts_with(&format!("{dotted}.")))
        });
        ConfigError {
            origin: match from_env {
                Some((_, var)) => format!("environment variable {var}"),
                None => self.origin.clone(),
            },
            path: path.to_string(),
            message,
        }
    }
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
pub(super) fn typed<T: DeserializeOwned>(
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
