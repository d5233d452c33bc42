//! Environment overrides of one source's fields:
//! `QUEUE_EXPORTER__SOURCES__<index or NAME>__<field>[__<field>…]`, resolved
//! to the source they address and applied on its entry (the `config` crate
//! cannot address an element of a list). The rest of the environment goes
//! through the `config` crate in `load`. Apart because resolving names,
//! inserting values and the number-or-text retry are their own rules.

use super::ENV_PREFIX;
use super::error::dotted;
use super::source::{SourceConfig, parse_source};

/// One `QUEUE_EXPORTER__SOURCES__<which>__<field>[__<field>…]` variable,
/// resolved to the source it addresses.
#[derive(Debug)]
pub(super) struct SourceOverride {
    /// The variable's name, for errors.
    pub(super) var: String,
    /// The source's position in `sources`.
    pub(super) index: usize,
    /// The field path below the source, lowercased: `["tls", "ca_file"]`.
    path: Vec<String>,
    /// The value as given.
    value: String,
}

/// Why a source override cannot be applied: (variable, field path, problem).
pub(super) type OverrideError = (String, String, String);

impl SourceOverride {
    /// The first segment after the prefix that marks a source override.
    const SEGMENT: &'static str = "SOURCES";

    /// True for `QUEUE_EXPORTER__SOURCES` and everything below it.
    pub(super) fn applies_to(var: &str) -> bool {
        var.strip_prefix(&format!("{ENV_PREFIX}__"))
            .and_then(|rest| rest.split("__").next())
            .is_some_and(|first| first.eq_ignore_ascii_case(Self::SEGMENT))
    }

    /// Finds the source `var` addresses among `entries` (the `sources` list
    /// as written): by index (`0`), or by name, upper-cased with every
    /// character other than a letter or digit written as `_` (`orders-eu`
    /// is `ORDERS_EU`). The value is never part of an error.
    pub(super) fn resolve(
        var: &str,
        value: &str,
        entries: &[serde_json::Value],
    ) -> Result<SourceOverride, OverrideError> {
        let fail = |path: &str, m: String| (var.to_string(), path.to_string(), m);
        let rest = var.strip_prefix(&format!("{ENV_PREFIX}__")).unwrap_or(var);
        let mut segments = rest.split("__").skip(1);
        let which = segments.next().unwrap_or_default();
        let path: Vec<String> = segments.map(str::to_lowercase).collect();
        if which.is_empty() || path.is_empty() || path.iter().any(String::is_empty) {
            return Err(fail(
                "sources",
                format!(
                    "set one field of one source, by index or by name: {ENV_PREFIX}__SOURCES__0__URL or {ENV_PREFIX}__SOURCES__<NAME>__URL"
                ),
            ));
        }
        let names: Vec<&str> = entries
            .iter()
            .map(|e| e.get("name").and_then(|n| n.as_str()).unwrap_or(""))
            .collect();
        let known = || {
            let listed: Vec<String> = names
                .iter()
                .enumerate()
                .map(|(i, n)| format!("{i} ({})", env_name(n).to_uppercase()))
                .collect();
            if listed.is_empty() {
                "there are no sources to override".to_string()
            } else {
                format!("sources by index (name): {}", listed.join(", "))
            }
        };
        let index = if which.bytes().all(|b| b.is_ascii_digit()) {
            match which.parse::<usize>() {
                Ok(i) if i < entries.len() => i,
                _ => {
                    return Err(fail(
                        &format!("sources[{which}]"),
                        format!("no source at this index; {}", known()),
                    ));
                }
            }
        } else {
            let wanted = which.to_lowercase();
            let found: Vec<usize> = (0..names.len())
                .filter(|&i| env_name(names[i]) == wanted)
                .collect();
            match found.as_slice() {
                [i] => *i,
                [] => {
                    return Err(fail(
                        "sources",
                        format!("no source is named {which}; {}", known()),
                    ));
                }
                _ => {
                    return Err(fail(
                        "sources",
                        format!(
                            "{which} names {} sources; use the index instead",
                            found.len()
                        ),
                    ));
                }
            }
        };
        Ok(SourceOverride {
            var: var.to_string(),
            index,
            path,
            value: value.to_string(),
        })
    }

    /// `sources[0].queues[1].key`, as errors show paths.
    fn field_path(&self) -> String {
        let mut out = format!("sources[{}]", self.index);
        for segment in &self.path {
            if segment.bytes().all(|b| b.is_ascii_digit()) {
                out.push_str(&format!("[{segment}]"));
            } else {
                out.push('.');
                out.push_str(segment);
            }
        }
        out
    }

    /// The value as given: for `Blame` to keep out of every message.
    pub(super) fn value(&self) -> &str {
        &self.value
    }

    /// `sources.0.tls.ca_file`, as `Blame` compares paths.
    pub(super) fn dotted(&self) -> String {
        format!("sources.{}.{}", self.index, self.path.join("."))
    }

    /// The value to insert: a number, `true`/`false`, or a JSON list or map
    /// when it reads as one, otherwise (or when `as_text`) the text.
    fn json(&self, as_text: bool) -> serde_json::Value {
        if !as_text
            && let Ok(v) = serde_json::from_str::<serde_json::Value>(&self.value)
            && (v.is_number() || v.is_boolean() || v.is_array() || v.is_object())
        {
            return v;
        }
        serde_json::Value::String(self.value.clone())
    }

    /// Sets the field in `entry` (the source's entry), creating maps on the
    /// way; a list element is addressed by its index (`QUEUES__0__KEY`).
    fn apply(&self, entry: &mut serde_json::Value, as_text: bool) -> Result<(), (String, String)> {
        let fail = |m: String| (self.field_path(), m);
        let mut at = entry;
        // `resolve` refuses an empty path, so there is a last segment.
        let last = self.path.len().saturating_sub(1);
        for (depth, segment) in self.path.iter().enumerate() {
            if at.is_null() {
                *at = serde_json::Value::Object(Default::default());
            }
            let next = match at {
                serde_json::Value::Object(fields) => {
                    if depth == last {
                        fields.insert(segment.clone(), self.json(as_text));
                        return Ok(());
                    }
                    fields
                        .entry(segment.clone())
                        .or_insert(serde_json::Value::Null)
                }
                serde_json::Value::Array(items) => {
                    let len = items.len();
                    match segment.parse::<usize>().ok().and_then(|i| items.get_mut(i)) {
                        Some(item) if depth == last => {
                            *item = self.json(as_text);
                            return Ok(());
                        }
                        Some(item) => item,
                        None => {
                            return Err(fail(format!(
                                "{segment} is not an index of this list of {len}"
                            )));
                        }
                    }
                }
                _ => {
                    return Err(fail(format!(
                        "cannot set {segment}: the field above it is not a map or a list"
                    )));
                }
            };
            at = next;
        }
        Ok(())
    }
}

/// A source name as it is written in an environment variable, lower-cased:
/// letters and digits kept, anything else `_`.
fn env_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// Parses source `i` after applying its environment overrides; returns it
/// with its final entry. An override is first read as a number, boolean or
/// JSON when it looks like one; if that field then fails to parse, it is
/// tried again as text (so a password `12345` is a string).
pub(super) fn parse_source_with(
    i: usize,
    entry: serde_json::Value,
    overrides: &[&SourceOverride],
) -> Result<(SourceConfig, serde_json::Value), (String, String)> {
    let mut as_text = vec![false; overrides.len()];
    loop {
        let mut v = entry.clone();
        for (o, text) in overrides.iter().zip(&as_text) {
            o.apply(&mut v, *text)?;
        }
        match parse_source(i, v.clone()) {
            Ok(source) => return Ok((source, v)),
            Err((path, message)) => {
                let at = dotted(&path);
                let retry = overrides
                    .iter()
                    .zip(&as_text)
                    .position(|(o, text)| !*text && o.dotted() == at && !o.json(false).is_string());
                match retry {
                    Some(k) => as_text[k] = true,
                    None => return Err((path, message)),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use crate::config::load::tests::{load_yaml, load_yaml_env};
    use crate::config::{
        Config, LoadOptions, LogFormat, QueueTarget, RabbitSourceConfig, RedisSourceConfig,
        SourceConfig,
    };

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    const TWO: &str = r#"
sources:
  - name: main
    type: redis
    url: redis://127.0.0.1:6379/0
    queues:
      - key: work-queue
  - name: orders-eu
    type: rabbitmq
    username: u
"#;

    fn redis_of(c: &Config) -> &RedisSourceConfig {
        match &c.sources[0] {
            SourceConfig::Redis(r) => r,
            other => panic!("{other:?}"),
        }
    }

    fn rabbit_of(c: &Config) -> &RabbitSourceConfig {
        match &c.sources[1] {
            SourceConfig::RabbitMq(r) => r,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn env_overrides_reach_a_source_by_index_or_by_name() {
        let c = load_yaml_env(
            TWO,
            env(&[
                (
                    "QUEUE_EXPORTER__SOURCES__0__URL",
                    "redis://:pw@10.0.0.1:6380/2",
                ),
                ("QUEUE_EXPORTER__SOURCES__MAIN__MAX_KEYS", "5"),
                ("QUEUE_EXPORTER__SOURCES__main__POLL_INTERVAL", "250ms"),
                ("QUEUE_EXPORTER__SOURCES__MAIN__QUEUES__0__KEY", "other"),
                ("QUEUE_EXPORTER__SOURCES__ORDERS_EU__PASSWORD", "12345"),
                ("QUEUE_EXPORTER__SOURCES__1__VHOSTS", r#"["a","b"]"#),
                ("QUEUE_EXPORTER__SOURCES__1__TLS__CA_FILE", "/etc/ca.pem"),
                ("QUEUE_EXPORTER__LOG__FORMAT", "json"),
            ]),
        )
        .unwrap();
        let r = redis_of(&c);
        assert_eq!(r.url.as_str(), "redis://:pw@10.0.0.1:6380/2");
        assert_eq!(r.max_keys, 5);
        assert_eq!(r.poll_interval, Duration::from_millis(250));
        assert_eq!(r.queues[0].target, QueueTarget::Key("other".into()));
        let q = rabbit_of(&c);
        // A password of digits stays text.
        assert_eq!(q.password.as_deref(), Some("12345"));
        assert_eq!(q.vhosts, ["a", "b"]);
        assert_eq!(q.tls.ca_file.as_deref(), Some(Path::new("/etc/ca.pem")));
        assert_eq!(c.log.format, LogFormat::Json);
        // The entries a reload compares carry the overrides.
        assert_eq!(
            c.source_entry("main").unwrap()["url"],
            "redis://:pw@10.0.0.1:6380/2"
        );
        assert_eq!(c.source_entry("orders-eu").unwrap()["password"], "12345");
        let plain = load_yaml(TWO).unwrap();
        assert_ne!(plain.source_entry("main"), c.source_entry("main"));
        assert_eq!(
            plain.source_entry("main"),
            load_yaml(TWO).unwrap().source_entry("main")
        );
    }

    #[test]
    fn env_overrides_reach_the_default_sources() {
        let c = Config::load_with_env(
            &LoadOptions::default(),
            env(&[(
                "QUEUE_EXPORTER__SOURCES__REDIS__URL",
                "redis://127.0.0.1:7000",
            )]),
        )
        .unwrap();
        assert!(c.default_sources);
        assert_eq!(redis_of(&c).url.as_str(), "redis://127.0.0.1:7000");
    }

    #[test]
    fn bad_source_overrides_name_the_variable_and_never_the_value() {
        let cases = [
            (
                ("QUEUE_EXPORTER__SOURCES__2__URL", "redis://x"),
                "environment variable QUEUE_EXPORTER__SOURCES__2__URL: sources[2]: no source at this index; sources by index (name): 0 (MAIN), 1 (ORDERS_EU)",
            ),
            (
                ("QUEUE_EXPORTER__SOURCES__ORDERS__URL", "redis://x"),
                "environment variable QUEUE_EXPORTER__SOURCES__ORDERS__URL: sources: no source is named ORDERS; sources by index (name): 0 (MAIN), 1 (ORDERS_EU)",
            ),
            (
                ("QUEUE_EXPORTER__SOURCES__MAIN", "x"),
                "environment variable QUEUE_EXPORTER__SOURCES__MAIN: sources: set one field of one source",
            ),
            (
                ("QUEUE_EXPORTER__SOURCES", "x"),
                "environment variable QUEUE_EXPORTER__SOURCES: sources: set one field",
            ),
            (
                ("QUEUE_EXPORTER__SOURCES__MAIN__POLL_INTERVAL", "often"),
                "environment variable QUEUE_EXPORTER__SOURCES__MAIN__POLL_INTERVAL: sources[0].poll_interval: invalid duration (the value, not shown)",
            ),
            (
                ("QUEUE_EXPORTER__SOURCES__0__MAX_KEYS", "0"),
                "environment variable QUEUE_EXPORTER__SOURCES__0__MAX_KEYS: sources[0].max_keys: must be greater than 0",
            ),
            (
                ("QUEUE_EXPORTER__SOURCES__MAIN__PASWORD_FILE", "/x"),
                "environment variable QUEUE_EXPORTER__SOURCES__MAIN__PASWORD_FILE: sources[0].pasword_file: unknown field `pasword_file`",
            ),
            (
                ("QUEUE_EXPORTER__SOURCES__0__QUEUES__3__KEY", "k"),
                "environment variable QUEUE_EXPORTER__SOURCES__0__QUEUES__3__KEY: sources[0].queues[3].key: 3 is not an index of this list of 1",
            ),
            (
                (
                    "QUEUE_EXPORTER__SOURCES__MAIN__URL",
                    "http://qe:hunter2@127.0.0.1:1",
                ),
                "environment variable QUEUE_EXPORTER__SOURCES__MAIN__URL: sources[0].url: must start with redis://",
            ),
            (
                (
                    "QUEUE_EXPORTER__SOURCES__ORDERS_EU__URL",
                    "http://u:hunter2@[::1",
                ),
                "environment variable QUEUE_EXPORTER__SOURCES__ORDERS_EU__URL: sources[1].url: is not a valid URL",
            ),
        ];
        for ((var, value), want) in cases {
            let e = load_yaml_env(TWO, env(&[(var, value)]))
                .unwrap_err()
                .to_string();
            assert!(e.starts_with(want), "{var}: {e}");
            assert!(!e.contains("hunter2"), "{e}");
        }
        // Two sources one variable name could mean are refused.
        let twins = "sources:
  - { name: a-b, type: redis }
  - { name: a_b, type: redis }
";
        let e = load_yaml_env(
            twins,
            env(&[("QUEUE_EXPORTER__SOURCES__A_B__MAX_KEYS", "1")]),
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("A_B names 2 sources; use the index"),
            "{e}"
        );
    }
}
