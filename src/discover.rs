//! `queue-exporter discover`: one zero-config discovery round against a
//! Redis, printed as the commented YAML config a user would have written:
//! one `- preset:` entry per library and prefix found, then the plain keys,
//! those sharing a prefix grouped into one `pattern:` with a `labels:`
//! capture. `check` accepts it, and `once` with it reports the same queues,
//! states and values as zero config (plus the capture labels). Read-only,
//! like every poll.

use std::collections::{BTreeMap, BTreeSet};

use crate::config::{KeyType, RedisSourceConfig};
use crate::sources::SourceError;
use crate::sources::redis::presets::PresetSpec;
use crate::sources::redis::presets::library::default_prefix;
use crate::sources::redis::{Recognised, RedisSource};

/// The capture label of a grouped pattern (the part after the prefix).
const PART: &str = "part";

/// Runs one round against `config`'s Redis (its connection settings; its
/// `queues:` are ignored) and returns the YAML. Progress goes to stderr on
/// a keyspace whose round takes more than a second.
pub async fn discover(config: RedisSourceConfig) -> Result<String, SourceError> {
    crate::crypto::install_crypto_provider();
    let head = SourceHead {
        name: config.name.clone(),
        url: config.url.redacted(),
        credentials_left_out: config.url.redacted() != config.url.as_str()
            || config.password.is_some(),
        password_file: config
            .password_file
            .as_ref()
            .map(|p| p.to_string_lossy().into_owned()),
    };
    let mut source = RedisSource::new(config);
    let mut progress = |scanned: u64, dbsize: Option<u64>| match dbsize {
        Some(n) if n > 0 => eprintln!(
            "discover: scanned ~{} of {n} keys ({}%)",
            scanned.min(n),
            scanned.min(n) * 100 / n
        ),
        _ => eprintln!("discover: scanned ~{scanned} keys"),
    };
    let found = source.recognise_once(&mut progress).await?;
    Ok(head.render(&found.picture) + &render_queues(&found))
}

/// The source's own lines of the printed config.
struct SourceHead {
    /// The `source` name.
    name: String,
    /// The URL as printed: without user or password.
    url: String,
    /// The URL carried a user or password, or `password:` was set; neither
    /// is printed.
    credentials_left_out: bool,
    /// `password_file`, printed as given.
    password_file: Option<String>,
}

impl SourceHead {
    /// The lines up to `queues:` (pure).
    fn render(&self, picture: &str) -> String {
        let mut out = String::new();
        out.push_str("# Written by `queue-exporter discover` (read-only).\n");
        out.push_str(&format!("# {picture}\n"));
        out.push_str("sources:\n");
        out.push_str(&format!("  - name: {}\n", quote(&self.name)));
        out.push_str("    type: redis\n");
        if self.credentials_left_out {
            out.push_str(
                "    # The user and password are not printed: put them back (in the URL or password:), or use password_file.\n",
            );
        }
        out.push_str(&format!("    url: {}\n", quote(&self.url)));
        if let Some(p) = &self.password_file {
            out.push_str(&format!("    password_file: {}\n", quote(p)));
        }
        out
    }
}

/// A YAML double-quoted scalar (JSON's string syntax is YAML's).
fn quote(text: &str) -> String {
    serde_json::Value::String(text.to_string()).to_string()
}

/// The `queues:` block: presets, then plain keys (pure).
fn render_queues(found: &Recognised) -> String {
    let mut out = String::from("    queues:\n");
    if found.entries.is_empty() && found.plain.is_empty() {
        // An empty list would be zero config again; say so instead.
        out = String::from("    # Nothing found: with no queues: the source keeps recognising.\n");
        return out;
    }
    for (spec, names) in &found.entries {
        out.push_str(&preset_entry(spec, names));
    }
    if !found.plain.is_empty() {
        out.push_str("      # Plain keys (lists, zsets, streams of no recognised library).\n");
    }
    for entry in plain_entries(&found.plain, &found.consumed) {
        out.push_str(&entry);
    }
    out
}

/// One `- preset:` entry, with a comment naming what it found.
fn preset_entry(spec: &PresetSpec, names: &[String]) -> String {
    let kind = spec.preset.kind();
    let mut out = format!(
        "      # {}{}: {}\n",
        crate::sources::redis::library_name(kind),
        match spec.preset.prefix.as_str() {
            _ if !crate::sources::redis::has_prefix(kind) => String::new(),
            "" => " without prefix".to_string(),
            p => format!(" at prefix {p:?}"),
        },
        if names.is_empty() {
            "no queue yet".to_string()
        } else {
            names.join(", ")
        }
    );
    out.push_str(&format!("      - preset: {}\n", kind.as_str()));
    let p = spec.preset.prefix.as_str();
    if p != default_prefix(kind) {
        out.push_str(&format!("        prefix: {}\n", quote(p)));
    }
    for line in crate::sources::redis::printed_options(&spec.preset, quote) {
        out.push_str(&format!("        {line}\n"));
    }
    out
}

/// Plain keys as entries: keys sharing the text up to their last `:` are
/// one `pattern:` (with their types and a capture of the rest) when there
/// are two or more of them and the pattern reaches no other key found
/// (another prefix's, or a library's); every other key is a `key:`. Keys
/// that are not UTF-8 cannot be written in the config and are named in a
/// comment.
fn plain_entries(plain: &[(Vec<u8>, KeyType)], consumed: &BTreeSet<Vec<u8>>) -> Vec<String> {
    let mut groups: BTreeMap<&str, Vec<(&str, KeyType)>> = BTreeMap::new();
    // Entries in key order (a pattern where its first key would be), then
    // the keys that cannot be configured.
    let mut entries: Vec<(&str, String)> = Vec::new();
    let mut unwritable = Vec::new();
    for (k, t) in plain {
        let Ok(text) = std::str::from_utf8(k) else {
            unwritable.push(format!(
                "      # not UTF-8, cannot be configured: {}\n",
                crate::sources::redis::keyname::display_key(k)
            ));
            continue;
        };
        let prefix = text.rfind(':').map_or("", |i| &text[..=i]);
        groups.entry(prefix).or_default().push((text, *t));
    }
    let everything: Vec<&[u8]> = plain
        .iter()
        .map(|(k, _)| k.as_slice())
        .chain(consumed.iter().map(Vec::as_slice))
        .collect();
    for (prefix, keys) in &groups {
        let reach = everything
            .iter()
            .filter(|k| k.starts_with(prefix.as_bytes()))
            .count();
        if prefix.is_empty() || keys.len() < 2 || reach != keys.len() {
            for (k, _) in keys {
                entries.push((k, format!("      - key: {}\n", quote(k))));
            }
            continue;
        }
        let types: BTreeSet<&str> = keys.iter().map(|(_, t)| t.as_str()).collect();
        let glob = String::from_utf8_lossy(&crate::sources::redis::glob::escape(prefix.as_bytes()))
            .into_owned();
        let first = keys.iter().map(|(k, _)| *k).min().unwrap_or(prefix);
        entries.push((
            first,
            format!(
                "      - pattern: {}\n        types: [{}]\n        labels: {}\n",
                quote(&format!("{glob}*")),
                types.into_iter().collect::<Vec<_>>().join(", "),
                quote(&format!("^{}(?P<{PART}>[^:]+)$", regex::escape(prefix)))
            ),
        ));
    }
    entries.sort();
    entries
        .into_iter()
        .map(|(_, e)| e)
        .chain(unwritable)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(keys: &[(&str, KeyType)]) -> Vec<(Vec<u8>, KeyType)> {
        keys.iter()
            .map(|(k, t)| (k.as_bytes().to_vec(), *t))
            .collect()
    }

    #[test]
    fn keys_sharing_a_prefix_become_one_pattern_with_a_capture() {
        let keys = plain(&[
            ("jobs:pending:high", KeyType::List),
            ("jobs:pending:low", KeyType::Zset),
            ("solo", KeyType::List),
            ("mixed:a", KeyType::List),
            ("mixed:b", KeyType::List),
            ("one:x", KeyType::Stream),
        ]);
        // A library key under `mixed:` keeps that group apart.
        let consumed = BTreeSet::from([b"mixed:lib".to_vec()]);
        let got = plain_entries(&keys, &consumed).concat();
        // In key order, a pattern where its first key would be.
        assert_eq!(
            got,
            "      - pattern: \"jobs:pending:*\"\n        types: [list, zset]\n        labels: \"^jobs:pending:(?P<part>[^:]+)$\"\n\
             \x20     - key: \"mixed:a\"\n      - key: \"mixed:b\"\n\
             \x20     - key: \"one:x\"\n\
             \x20     - key: \"solo\"\n"
        );
    }

    #[test]
    fn a_deeper_key_keeps_a_prefix_from_being_a_pattern() {
        let keys = plain(&[
            ("a:x", KeyType::List),
            ("a:y", KeyType::List),
            ("a:x:deep", KeyType::List),
            ("a:x:deeper", KeyType::List),
        ]);
        let got = plain_entries(&keys, &BTreeSet::new()).concat();
        // `a:*` would reach `a:x:deep`; `a:x:*` reaches only its two.
        assert!(got.contains("- key: \"a:x\"\n"), "{got}");
        assert!(got.contains("- key: \"a:y\"\n"), "{got}");
        assert!(got.contains("- pattern: \"a:x:*\""), "{got}");
    }

    #[test]
    fn credentials_are_never_printed() {
        let url = crate::config::RedisUrl::parse("redis://app:s3cret@redis:6379/0").unwrap();
        let head = SourceHead {
            name: "main".into(),
            url: url.redacted(),
            credentials_left_out: url.redacted() != url.as_str(),
            password_file: None,
        };
        let text = head.render("recognised no queue library; no plain key");
        assert!(!text.contains("s3cret") && !text.contains("app"), "{text}");
        assert!(text.contains("url: \"redis://***@redis:6379/0\""), "{text}");
        assert!(text.contains("put them back"), "{text}");
    }

    #[test]
    fn a_celery_entry_says_what_differs_from_kombus_defaults() {
        let spec = PresetSpec {
            preset: crate::sources::redis::presets::Preset {
                queues: vec!["tasks".into()],
                priority_steps: vec![0, 1, 3, 6, 9],
                sep: ":".into(),
                ..crate::sources::redis::presets::Preset::new(
                    crate::snapshot::PresetKind::named("celery"),
                    "app:",
                )
            },
            counters: None,
        };
        assert_eq!(
            preset_entry(&spec, &["tasks".into()]),
            "      # Celery at prefix \"app:\": tasks\n      - preset: celery\n        prefix: \"app:\"\n        queues: [\"tasks\"]\n        sep: \":\"\n        priority_steps: [0, 1, 3, 6, 9]\n"
        );
    }

    /// A library whose key names are fixed (no `prefix:` option) has no
    /// prefix to speak of in the comment.
    #[test]
    fn a_library_without_a_prefix_option_names_no_prefix() {
        let kind = crate::snapshot::PresetKind::named("huey");
        let spec = PresetSpec {
            preset: crate::sources::redis::presets::Preset::new(kind, ""),
            counters: None,
        };
        let entry = preset_entry(&spec, &["huey".into()]);
        assert!(entry.starts_with("      # Huey: huey\n"), "{entry}");
    }

    #[test]
    fn glob_and_regex_metacharacters_are_escaped() {
        let keys = plain(&[("q[1]:a", KeyType::List), ("q[1]:b", KeyType::List)]);
        let got = plain_entries(&keys, &BTreeSet::new()).concat();
        assert!(got.contains("pattern: \"q\\\\[1\\\\]:*\""), "{got}");
        assert!(got.contains("labels: \"^q\\\\[1\\\\]:(?P<part>"), "{got}");
    }
}
