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
//!
//! A library preset is a pattern over its library's keys: an entry whose
//! library names its queues itself (a registry set, or a `SCAN` of its key
//! namespace each discovery round) covers every queue name, as `*` does, and
//! one whose queues the config names (Celery's `queues`, rediswq's `name`)
//! covers those names. What a round could not read is the coverage's to say
//! (a refused registry, a bound): a covered name reads 0 only where nothing
//! left unread may hide it.

use super::presets::{Preset, PresetSpec};
use crate::config::{ALL_QUEUES, RedisSourceConfig};
use crate::snapshot::{NameQuery, PresetKind, QueueScope, Reach, ServiceMeasure};

use super::glob;
use super::presets::library;

/// The names a Redis source's `queues` entries can produce.
#[derive(Debug, Clone)]
pub struct RedisScope {
    /// Configured exact keys (`key:`), as they appear in the `queue` label.
    keys: Vec<String>,
    /// Configured patterns (`pattern:`), in Redis glob syntax.
    patterns: Vec<Vec<u8>>,
    /// What each `- preset:` entry covers; in zero config, each library it
    /// may recognise.
    presets: Vec<PresetScope>,
}

/// The queue names one library preset entry can report.
#[derive(Debug, Clone)]
struct PresetScope {
    /// Its library: a trigger's `preset` restricts a query to entries of it.
    kind: PresetKind,
    /// The labels it reports whatever its registry holds (Celery's
    /// `queues`, rediswq's `name`, the shared `(all)`).
    fixed: Vec<String>,
    /// Whether its library names its queues itself, read in full each
    /// discovery round: then a name the round did not find holds none of
    /// its jobs, and every queue name is covered.
    any_queue: bool,
    /// Whether its library keeps finished jobs with start and end stamps,
    /// so its queues' service time is measured: a drained one then needs
    /// no `processingTime` to read 0 under `WaitTime`.
    measured: bool,
}

impl PresetScope {
    /// The scope of a configured entry.
    fn of(preset: &Preset) -> PresetScope {
        PresetScope {
            kind: preset.kind,
            fixed: library::fixed_names(preset),
            any_queue: library::of(preset.kind).is_some_and(|l| l.names_any_queue(preset)),
            measured: library::of(preset.kind).is_some_and(|l| keeps_finished(l, preset)),
        }
    }

    /// Zero config: a library it may recognise at any prefix, under any
    /// queue name.
    fn recognisable(library: &dyn library::Library) -> PresetScope {
        let preset = Preset::new(library.kind(), library.default_prefix());
        PresetScope {
            kind: library.kind(),
            fixed: library.fixed_names(&preset),
            any_queue: true,
            measured: keeps_finished(library, &preset),
        }
    }

    /// How far this entry reaches over the query's names. `(all)` is a
    /// queue name only where the library has that shared unit (a queue
    /// really named so is labelled escaped).
    fn reach(&self, query: &NameQuery<'_>) -> Reach {
        let fixed = |n: &String| !n.is_empty();
        if !query.is_glob {
            let listed = self
                .fixed
                .iter()
                .filter(|n| fixed(n))
                .any(|n| n == query.text);
            let named = self.any_queue && query.text != ALL_QUEUES;
            return if listed || named {
                Reach::All
            } else {
                Reach::Never
            };
        }
        if self.any_queue {
            return Reach::All;
        }
        match self
            .fixed
            .iter()
            .filter(|n| fixed(n))
            .any(|n| (query.selects)(n))
        {
            true => Reach::Some,
            false => Reach::Never,
        }
    }
}

impl RedisScope {
    /// The scope of a source's configuration, whose `- preset:` entries
    /// resolve to `configured`.
    pub fn new(config: &RedisSourceConfig, configured: &[PresetSpec]) -> Self {
        let presets = match config.recognise {
            true => super::presets::LIBRARIES
                .iter()
                .filter(|l| l.recognition().is_some())
                .map(|l| PresetScope::recognisable(*l))
                .collect(),
            false => configured
                .iter()
                .map(|p| PresetScope::of(&p.preset))
                .collect(),
        };
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
            presets,
        }
    }

    /// How far the key and pattern entries reach over the query's names.
    fn plain_reach(&self, query: &NameQuery<'_>) -> Reach {
        if !query.is_glob {
            let configured = self.keys.iter().any(|k| k == query.text)
                || self
                    .patterns
                    .iter()
                    .any(|p| glob::matches(p, query.text.as_bytes()));
            return if configured { Reach::All } else { Reach::Never };
        }
        if self.patterns.iter().any(|p| pattern_covers(p, query)) {
            return Reach::All;
        }
        let some = self.keys.iter().any(|k| (query.selects)(k))
            || self.patterns.iter().any(|p| pattern_may_overlap(p, query));
        if some { Reach::Some } else { Reach::Never }
    }
}

/// Whether `library` keeps finished jobs for `preset`'s queues: a property
/// of the library's layout, the same for every queue name (asked of the
/// empty name).
fn keeps_finished(library: &dyn library::Library, preset: &Preset) -> bool {
    library.finished(preset, b"").is_some()
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
        // A query for one library's queues is never a plain key's.
        let plain = match query.preset {
            None => self.plain_reach(query),
            Some(_) => Reach::Never,
        };
        self.presets
            .iter()
            .filter(|p| query.preset.is_none_or(|k| k == p.kind))
            .map(|p| p.reach(query))
            .fold(plain, Reach::max)
    }

    fn absent_service(&self, query: &NameQuery<'_>) -> ServiceMeasure {
        let measured = query.vhost.is_none()
            && self
                .presets
                .iter()
                .filter(|p| query.preset.is_none_or(|k| k == p.kind))
                .any(|p| p.measured && p.reach(query) == Reach::All);
        match (measured, query.preset) {
            (true, _) => ServiceMeasure::FinishedJobs,
            // A query for a library asks of its queues (which keep no
            // finished jobs, as `measured` said), not of a plain key.
            (false, Some(_)) => ServiceMeasure::NoFinishedJobs,
            (false, None) => ServiceMeasure::PlainKey,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(keys: &[&str], patterns: &[&str]) -> RedisScope {
        RedisScope {
            keys: keys.iter().map(|k| k.to_string()).collect(),
            patterns: patterns.iter().map(|p| p.as_bytes().to_vec()).collect(),
            presets: Vec::new(),
        }
    }

    /// Reach of `text` as a trigger would send it.
    fn reach(s: &RedisScope, text: &str) -> Reach {
        reach_of(s, text, None)
    }

    /// Reach of `text` restricted to library `preset` (globs matched by a
    /// simple prefix test that is enough for these cases).
    fn reach_of(s: &RedisScope, text: &str, preset: Option<&str>) -> Reach {
        asked(s, text, preset, |s, q| s.reach(q))
    }

    /// Whether a drained queue under `text` (restricted to library
    /// `preset`) would have a measured service time.
    fn measured_of(s: &RedisScope, text: &str, preset: Option<&str>) -> bool {
        asked(s, text, preset, |s, q| s.absent_service(q).is_measured())
    }

    /// `ask` of the query for `text` (restricted to library `preset`).
    fn asked<T>(
        s: &RedisScope,
        text: &str,
        preset: Option<&str>,
        ask: impl Fn(&RedisScope, &NameQuery<'_>) -> T,
    ) -> T {
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
        ask(
            s,
            &NameQuery {
                text,
                is_glob,
                literal_prefix,
                selects: &selects,
                vhost: None,
                preset: preset.map(|p| library::named(p).expect("a library").kind()),
            },
        )
    }

    /// A preset entry of library `name` with its defaults, then `fill`ed.
    fn preset(name: &str, fill: impl FnOnce(&mut Preset)) -> Preset {
        let lib = library::named(name).expect("a library");
        let mut p = Preset::new(lib.kind(), lib.default_prefix());
        fill(&mut p);
        p
    }

    /// The scope of `keys`, `patterns` and these preset entries.
    fn with_presets(keys: &[&str], patterns: &[&str], presets: &[Preset]) -> RedisScope {
        RedisScope {
            presets: presets.iter().map(PresetScope::of).collect(),
            ..scope(keys, patterns)
        }
    }

    #[test]
    fn a_drained_queue_is_measured_only_under_a_library_that_keeps_finished_jobs() {
        let celery = preset("celery", |p| p.queues = vec!["emails".into()]);
        let s = with_presets(&["work"], &["jobs:*"], &[preset("bullmq", |_| ()), celery]);
        // BullMQ keeps finished jobs: any name it covers is measured.
        assert!(measured_of(&s, "done", None));
        assert!(measured_of(&s, "done", Some("bullmq")));
        // Celery keeps none, and a plain key or pattern has no record.
        assert!(!measured_of(&s, "emails", Some("celery")));
        assert!(!measured_of(&s, "jobs:a", Some("celery")));
        let plain = with_presets(&["work"], &["jobs:*"], &[]);
        assert!(!measured_of(&plain, "work", None));
        assert!(!measured_of(&plain, "jobs:a", None));
        // Zero config's libraries that keep them (BullMQ, Bull, RQ) cover any name.
        let zero = RedisScope {
            presets: super::super::presets::LIBRARIES
                .iter()
                .filter(|l| l.recognition().is_some())
                .map(|l| PresetScope::recognisable(*l))
                .collect(),
            ..scope(&[], &[])
        };
        assert!(measured_of(&zero, "done", None));
        assert!(!measured_of(&zero, "done", Some("celery")));
    }

    #[test]
    fn a_library_that_names_its_queues_covers_every_name_and_a_config_that_names_them_those() {
        let celery = preset("celery", |p| p.queues = vec!["emails".into()]);
        let s = with_presets(&[], &[], &[preset("dramatiq", |_| ()), celery]);
        // Dramatiq's queues are whatever its keys name: every name, exact or glob.
        for name in ["done", "d*", "*"] {
            assert_eq!(reach(&s, name), Reach::All, "{name}");
            assert_eq!(reach_of(&s, name, Some("dramatiq")), Reach::All, "{name}");
        }
        // Celery's are the ones its entry lists, and its shared `(all)`.
        assert_eq!(reach_of(&s, "emails", Some("celery")), Reach::All);
        assert_eq!(reach_of(&s, "(all)", Some("celery")), Reach::All);
        assert_eq!(reach_of(&s, "email*", Some("celery")), Reach::Some);
        assert_eq!(reach_of(&s, "done", Some("celery")), Reach::Never);
        // `(all)` is no Dramatiq queue (a queue really so named is escaped).
        assert_eq!(reach_of(&s, "(all)", Some("dramatiq")), Reach::Never);
        // A library the source has no entry of reaches nothing.
        assert_eq!(reach_of(&s, "done", Some("rq")), Reach::Never);
    }

    #[test]
    fn a_query_for_a_library_is_never_a_plain_key_and_zero_config_names_its_libraries() {
        let rediswq = preset("rediswq", |p| p.name = "jobs:q".into());
        let s = with_presets(&["work"], &["jobs:*"], &[rediswq]);
        assert_eq!(reach(&s, "work"), Reach::All);
        assert_eq!(reach_of(&s, "work", Some("rediswq")), Reach::Never);
        assert_eq!(reach_of(&s, "jobs:x", Some("rediswq")), Reach::Never);
        assert_eq!(reach_of(&s, "jobs:q", Some("rediswq")), Reach::All);
        let mut zero = RedisSourceConfig::named("main");
        zero.zero_config();
        let z = RedisScope::new(&zero, &[]);
        assert_eq!(reach_of(&z, "done", Some("dramatiq")), Reach::All);
        assert_eq!(reach_of(&z, "fleeting", Some("bee-queue")), Reach::All);
        // Zero config never reports rediswq's queues (nothing tells them).
        assert_eq!(reach_of(&z, "done", Some("rediswq")), Reach::Never);
        assert_eq!(reach(&z, "done"), Reach::All);
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
            preset: None,
        };
        assert_eq!(s.reach(&q), Reach::Never);
    }
}
