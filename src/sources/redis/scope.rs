//! Which key names a Redis source's configuration can report, so the scaler
//! can read a drained queue (Redis deletes a key when it empties) as 0 and
//! still answer `NOT_FOUND` for a name nothing in the config can produce.
//!
//! Containment of a trigger's glob in a configured pattern is decided by a
//! literal-prefix argument, which is sound and covers the common shapes: a
//! pattern `P*` (a literal, then only stars) reports every key starting with
//! `P`, so it covers every glob whose literal prefix starts with `P`
//! (`jobs:*` covers `jobs:*` and `jobs:pending:*`). A pattern and a glob
//! spelled the same with only `*`/`?` wildcards also cover each other.

use crate::config::RedisSourceConfig;
use crate::snapshot::{NameQuery, QueueScope, Reach};

use super::glob;

/// The names a Redis source's `queues` entries can produce.
#[derive(Debug, Clone)]
pub struct RedisScope {
    /// Configured exact keys (`key:`), as they appear in the `queue` label.
    keys: Vec<String>,
    /// Configured patterns (`pattern:`), in Redis glob syntax.
    patterns: Vec<Vec<u8>>,
    /// Logical queues presets report whatever their registry holds
    /// (Celery's `queues`, rediswq's `name`, `(all)`, ...): a drained one reads 0.
    preset_names: Vec<String>,
    /// Whether a preset discovers queues from a registry (RQ, Sidekiq,
    /// asynq, BullMQ), or zero config may recognise one: any name might be
    /// one of them.
    registry_presets: bool,
}

impl RedisScope {
    /// The scope of a source's configuration.
    pub fn new(config: &RedisSourceConfig) -> Self {
        RedisScope {
            keys: config
                .queues
                .iter()
                .filter_map(|q| q.key().map(str::to_string))
                .collect(),
            patterns: config
                .queues
                .iter()
                .filter_map(|q| q.pattern().map(|p| p.as_bytes().to_vec()))
                .collect(),
            preset_names: config
                .presets
                .iter()
                .flat_map(|p| p.preset.fixed_names())
                .collect(),
            // Zero config without plain keys (`plain_keys: false`) has
            // no pattern, but any library it recognises may name any queue.
            registry_presets: config.recognise
                || config.presets.iter().any(|p| {
                    let lib = super::presets::library::of(p.preset.kind);
                    lib.is_some_and(|l| l.names_any_queue(&p.preset))
                }),
        }
    }
}

/// Whether every key the trigger glob `query` selects matches `pattern`.
fn pattern_covers(pattern: &[u8], query: &NameQuery<'_>) -> bool {
    let literal = glob::literal_prefix(pattern);
    let rest = &pattern[literal.len()..];
    let star_tail = !rest.is_empty() && rest.iter().all(|b| *b == b'*');
    if star_tail && query.literal_prefix.as_bytes().starts_with(literal) {
        return true;
    }
    // The same text means the same set when the only wildcards are `*` and
    // `?`, which both glob dialects read alike.
    let simple = |t: &[u8]| {
        !t.iter()
            .any(|b| matches!(b, b'[' | b']' | b'{' | b'}' | b'\\'))
    };
    pattern == query.text.as_bytes() && simple(pattern)
}

/// Whether some key could match both `pattern` and the trigger glob: false
/// only when their literal prefixes disagree.
fn pattern_may_overlap(pattern: &[u8], query: &NameQuery<'_>) -> bool {
    let a = glob::literal_prefix(pattern);
    let b = query.literal_prefix.as_bytes();
    a.starts_with(b) || b.starts_with(a)
}

impl QueueScope for RedisScope {
    fn reach(&self, query: &NameQuery<'_>) -> Reach {
        if query.vhost.is_some() {
            // Redis has no vhosts: a query restricted to one is never ours.
            return Reach::Never;
        }
        if !query.is_glob && self.preset_names.iter().any(|n| n == query.text) {
            return Reach::All;
        }
        let preset_reach =
            if self.registry_presets || self.preset_names.iter().any(|n| (query.selects)(n)) {
                Reach::Some
            } else {
                Reach::Never
            };
        if !query.is_glob {
            let configured = self.keys.iter().any(|k| k == query.text)
                || self
                    .patterns
                    .iter()
                    .any(|p| glob::matches(p, query.text.as_bytes()));
            return if configured { Reach::All } else { preset_reach };
        }
        if self.patterns.iter().any(|p| pattern_covers(p, query)) {
            return Reach::All;
        }
        let some = self.keys.iter().any(|k| (query.selects)(k))
            || self.patterns.iter().any(|p| pattern_may_overlap(p, query));
        if some { Reach::Some } else { preset_reach }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(keys: &[&str], patterns: &[&str]) -> RedisScope {
        RedisScope {
            keys: keys.iter().map(|k| k.to_string()).collect(),
            patterns: patterns.iter().map(|p| p.as_bytes().to_vec()).collect(),
            preset_names: Vec::new(),
            registry_presets: false,
        }
    }

    /// Reach of `text` as a trigger would send it (globs matched by a
    /// simple prefix/suffix test that is enough for these cases).
    fn reach(s: &RedisScope, text: &str) -> Reach {
        let is_glob = text.contains(['*', '?', '[', '{']);
        let prefix_end = text.find(['*', '?', '[', '{', '\\']).unwrap_or(text.len());
        let literal_prefix = &text[..prefix_end];
        let selects = |name: &str| {
            if is_glob {
                name.starts_with(literal_prefix)
            } else {
                name == text
            }
        };
        s.reach(&NameQuery {
            text,
            is_glob,
            literal_prefix,
            selects: &selects,
            vhost: None,
        })
    }

    #[test]
    fn a_name_a_pattern_matches_is_covered_and_a_typo_is_not() {
        let s = scope(&["work"], &["jobs:pending:*"]);
        assert_eq!(reach(&s, "jobs:pending:high"), Reach::All);
        assert_eq!(reach(&s, "work"), Reach::All);
        assert_eq!(reach(&s, "jobs:pendin:high"), Reach::Never);
        assert_eq!(reach(&s, "wrok"), Reach::Never);
    }

    #[test]
    fn a_glob_inside_a_star_tailed_pattern_is_covered() {
        let s = scope(&[], &["jobs:*"]);
        assert_eq!(reach(&s, "jobs:*"), Reach::All);
        assert_eq!(reach(&s, "jobs:pending:*"), Reach::All);
        assert_eq!(reach(&s, "jobs:pending:h?gh"), Reach::All);
        assert_eq!(reach(&s, "jobs:[ab]*"), Reach::All);
        // Wider than the pattern: some names might be reported, not all.
        assert_eq!(reach(&s, "job*"), Reach::Some);
        assert_eq!(reach(&s, "*"), Reach::Some);
        assert_eq!(reach(&s, "other:*"), Reach::Never);
    }

    #[test]
    fn identical_simple_globs_cover_each_other_and_classes_do_not_count() {
        let s = scope(&[], &["jobs:*:high", "q[ab]"]);
        assert_eq!(reach(&s, "jobs:*:high"), Reach::All);
        assert_eq!(reach(&s, "jobs:*:low"), Reach::Some);
        assert_eq!(reach(&s, "q[ab]"), Reach::Some);
    }

    #[test]
    fn exact_keys_reach_a_glob_only_when_the_glob_selects_them() {
        let s = scope(&["jobs:a"], &[]);
        assert_eq!(reach(&s, "jobs:*"), Reach::Some);
        assert_eq!(reach(&s, "other:*"), Reach::Never);
    }

    #[test]
    fn a_query_for_a_vhost_never_reaches_redis() {
        let s = scope(&["w"], &["*"]);
        let q = NameQuery {
            text: "w",
            is_glob: false,
            literal_prefix: "w",
            selects: &|n: &str| n == "w",
            vhost: Some("/"),
        };
        assert_eq!(s.reach(&q), Reach::Never);
    }
}
