//! `queues:` entries of a Redis source that name a library instead of keys
//! (`- preset: rq`). The options every library draws from are parsed by
//! type here; which of them a library takes, their defaults and its own
//! checks are the library's (`Library::configure` in its file), found by
//! name in the one list of libraries (`presets::library::LIBRARIES`).

use std::time::Duration;

use serde::Deserialize;

use super::duration::{Bounds, parse_duration};
use crate::snapshot::PresetKind;
use crate::sources::redis::presets::library;

/// Default bound on the per-poll stalled checks (one `EXISTS` each).
pub const DEFAULT_STALLED_CHECK_LIMIT: usize = 100;

/// One `- preset: <name>` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct PresetSpec {
    /// Which library, with its options.
    pub preset: Preset,
    /// Integer string keys read with `GET` as job totals, for layouts whose
    /// library keeps no totals of its own.
    pub counters: Option<CounterKeys>,
}

/// A library and the options that locate its keys: every option a library
/// may take, with the library's defaults filled in (an option the library
/// does not take stays at its empty value).
#[derive(Debug, Clone, PartialEq)]
pub struct Preset {
    /// Which library (its config name, the `preset` label).
    pub kind: PresetKind,
    /// Key prefix (`prefix:`), the library's own by default.
    pub prefix: String,
    /// Queue names, for a library without a registry (`queues:`).
    pub queues: Vec<String>,
    /// A single queue's name (`name:`), for a one-queue layout.
    pub name: String,
    /// Priority steps (`priority_steps:`); step 0 is the bare queue name.
    pub priority_steps: Vec<u8>,
    /// Separator between a queue name and its step (`sep:`).
    pub sep: String,
    /// Time after which a taken job counts as stalled (`visibility_timeout:`).
    pub visibility_timeout: Duration,
    /// Jobs (or processes) whose lease is checked per poll, at most
    /// (`stalled_check_limit:`).
    pub stalled_check_limit: usize,
}

impl Preset {
    /// A preset of `kind` at `prefix` with every other option empty and the
    /// default stalled check limit: what a library's `configure` starts
    /// from, and what zero config recognises.
    pub fn new(kind: PresetKind, prefix: &str) -> Preset {
        Preset {
            kind,
            prefix: prefix.to_string(),
            queues: Vec::new(),
            name: String::new(),
            priority_steps: Vec::new(),
            sep: String::new(),
            visibility_timeout: Duration::ZERO,
            stalled_check_limit: DEFAULT_STALLED_CHECK_LIMIT,
        }
    }

    /// Which library: the `preset` label.
    pub fn kind(&self) -> PresetKind {
        self.kind
    }

    /// Logical queue names this preset reports whatever the registry holds
    /// (for the scaler's drained-queue rule); registry-discovered queues are
    /// not listed.
    pub fn fixed_names(&self) -> Vec<String> {
        library::of(self.kind).map_or_else(Vec::new, |l| l.fixed_names(self))
    }
}

/// The `queue` label of a library's source-wide keys (Sidekiq's `schedule`,
/// `retry`, `dead`; Celery's `unacked`), which belong to no single queue.
pub const ALL_QUEUES: &str = "(all)";

/// `counters: { processed: key, failed: key, enqueued: key }`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CounterKeys {
    /// Key of the processed-jobs total.
    #[serde(default)]
    pub processed: Option<String>,
    /// Key of the failed-jobs total.
    #[serde(default)]
    pub failed: Option<String>,
    /// Key of a total the producers `INCR` per job they enqueue: the
    /// queue's `published` counter, from which WaitTime reads its arrival
    /// rate (a list alone cannot tell jobs in from jobs out).
    #[serde(default)]
    pub enqueued: Option<String>,
}

/// The options a preset entry may carry, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPresetSpec {
    preset: String,
    #[serde(default)]
    prefix: Option<String>,
    #[serde(default)]
    queues: Option<Vec<String>>,
    #[serde(default)]
    priority_steps: Option<Vec<u8>>,
    #[serde(default)]
    sep: Option<String>,
    #[serde(default)]
    visibility_timeout: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    stalled_check_limit: Option<usize>,
    #[serde(default)]
    counters: Option<CounterKeys>,
}

/// The options an entry wrote, each parsed by its type only: a library's
/// `configure` reads those it takes (the others were refused before).
#[derive(Debug, Default)]
pub struct Given {
    /// `prefix:`.
    pub prefix: Option<String>,
    /// `queues:`.
    pub queues: Option<Vec<String>>,
    /// `priority_steps:`.
    pub priority_steps: Option<Vec<u8>>,
    /// `sep:`.
    pub sep: Option<String>,
    /// `visibility_timeout:`, as written (a duration with a unit).
    pub visibility_timeout: Option<String>,
    /// `name:`.
    pub name: Option<String>,
    /// `stalled_check_limit:`.
    pub stalled_check_limit: Option<usize>,
}

impl Given {
    /// The option words written, in a fixed order.
    fn words(&self) -> Vec<&'static str> {
        [
            ("prefix", self.prefix.is_some()),
            ("queues", self.queues.is_some()),
            ("priority_steps", self.priority_steps.is_some()),
            ("sep", self.sep.is_some()),
            ("visibility_timeout", self.visibility_timeout.is_some()),
            ("name", self.name.is_some()),
            ("stalled_check_limit", self.stalled_check_limit.is_some()),
        ]
        .into_iter()
        .filter_map(|(k, set)| set.then_some(k))
        .collect()
    }

    /// `visibility_timeout:` as a duration, if written (at most a year).
    pub fn visibility_timeout(&self) -> Result<Option<Duration>, String> {
        let Some(t) = &self.visibility_timeout else {
            return Ok(None);
        };
        let d = parse_duration(t).map_err(|e| format!("visibility_timeout: {e}"))?;
        Bounds::YEAR
            .check(d)
            .map_err(|e| format!("visibility_timeout: {e}"))?;
        Ok(Some(d))
    }
}

/// The `preset` of the library whose config name is `name`, if one is.
pub fn preset_kind(name: &str) -> Option<PresetKind> {
    library::named(name).map(|l| l.kind())
}

/// Every library's config name, in the list's order (for messages).
pub fn preset_names() -> Vec<&'static str> {
    library::names()
}

/// The names of the libraries whose queues' arrivals the exporter reads
/// from a job id counter (`true`) or a processed total (`false`), for
/// messages saying what a queue without them lacks.
pub fn libraries_with_arrivals(id_counter: bool) -> Vec<&'static str> {
    library::arrivals_from(match id_counter {
        true => library::Arrivals::IdCounter,
        false => library::Arrivals::ProcessedTotal,
    })
}

/// The library's own key prefix: what `prefix:` defaults to.
pub fn default_prefix(kind: PresetKind) -> &'static str {
    library::of(kind).map_or("", |l| l.default_prefix())
}

impl TryFrom<RawPresetSpec> for PresetSpec {
    type Error = String;

    fn try_from(raw: RawPresetSpec) -> Result<Self, String> {
        let written = Given {
            prefix: raw.prefix,
            queues: raw.queues,
            priority_steps: raw.priority_steps,
            sep: raw.sep,
            visibility_timeout: raw.visibility_timeout,
            name: raw.name,
            stalled_check_limit: raw.stalled_check_limit,
        };
        let given = written.words();
        let Some(lib) = library::named(&raw.preset) else {
            return Err(format!(
                "preset: unknown preset {:?} (expected one of {})",
                raw.preset,
                library::names().join(", ")
            ));
        };
        let allowed = lib.options();
        if let Some(bad) = given.iter().find(|k| !allowed.contains(k)) {
            return Err(format!(
                "{bad}: not an option of preset {} (its options: {})",
                raw.preset,
                allowed.join(", ")
            ));
        }
        let mut preset = Preset::new(lib.kind(), lib.default_prefix());
        match written.stalled_check_limit {
            Some(0) => return Err("stalled_check_limit: must be greater than 0".into()),
            Some(n) => preset.stalled_check_limit = n,
            None => {}
        }
        match &written.prefix {
            Some(p) if p.is_empty() && !lib.default_prefix().is_empty() => {
                return Err("prefix: must not be empty".into());
            }
            Some(p) => preset.prefix = p.clone(),
            None => {}
        }
        lib.configure(&mut preset, &written)?;
        if let Some(c) = &raw.counters {
            check_counters(c)?;
            if !lib.takes_counters() {
                return Err(format!(
                    "counters: preset {} reports several queues (or keeps its own totals); \
                     counters belong to a single-queue entry ({}, or a key)",
                    preset.kind(),
                    library::names_taking_counters().join(", ")
                ));
            }
        }
        Ok(PresetSpec {
            preset,
            counters: raw.counters,
        })
    }
}

/// Checks a `counters:` block: at least one key, none empty.
pub(super) fn check_counters(c: &CounterKeys) -> Result<(), String> {
    if c.processed.is_none() && c.failed.is_none() && c.enqueued.is_none() {
        return Err("counters: name processed, failed and/or enqueued keys".into());
    }
    if [&c.processed, &c.failed, &c.enqueued]
        .into_iter()
        .flatten()
        .any(String::is_empty)
    {
        return Err("counters: keys must not be empty".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: serde_json::Value) -> Result<PresetSpec, String> {
        let raw: RawPresetSpec = serde_json::from_value(yaml).map_err(|e| e.to_string())?;
        PresetSpec::try_from(raw)
    }

    #[test]
    fn defaults_follow_the_libraries() {
        let c = parse(serde_json::json!({"preset": "celery"})).unwrap();
        assert_eq!(
            c.preset,
            Preset {
                queues: vec!["celery".into()],
                priority_steps: vec![0, 3, 6, 9],
                sep: "\x06\x16".into(),
                visibility_timeout: Duration::from_secs(3600),
                ..Preset::new(PresetKind::named("celery"), "")
            }
        );
        let b = parse(serde_json::json!({"preset": "bullmq"})).unwrap();
        assert_eq!(b.preset, Preset::new(PresetKind::named("bullmq"), "bull"));
        assert_eq!(b.preset.stalled_check_limit, DEFAULT_STALLED_CHECK_LIMIT);
        let r = parse(serde_json::json!({"preset": "rq", "prefix": "myrq"})).unwrap();
        assert_eq!(r.preset, Preset::new(PresetKind::named("rq"), "myrq"));
    }

    #[test]
    fn bad_entries_name_the_field() {
        let cases = [
            (
                serde_json::json!({"preset": "bull3"}),
                "preset: unknown preset",
            ),
            (
                serde_json::json!({"preset": "rq", "sep": ":"}),
                "sep: not an option of preset rq",
            ),
            (serde_json::json!({"preset": "rediswq"}), "name: required"),
            (
                serde_json::json!({"preset": "celery", "priority_steps": [3, 6]}),
                "priority_steps: must start at 0",
            ),
            (
                serde_json::json!({"preset": "celery", "visibility_timeout": "soon"}),
                "visibility_timeout: ",
            ),
            (
                serde_json::json!({"preset": "bull", "queues": ["a"]}),
                "queues: not an option of preset bull (its options: prefix, stalled_check_limit)",
            ),
            (
                serde_json::json!({"preset": "bullmq", "stalled_check_limit": 0}),
                "stalled_check_limit: must be greater than 0",
            ),
            (
                serde_json::json!({"preset": "rq", "counters": {"processed": "p"}}),
                "counters: preset rq reports several queues",
            ),
            (
                serde_json::json!({"preset": "rediswq", "name": "q", "counters": {}}),
                "counters: name processed, failed and/or enqueued keys",
            ),
        ];
        for (yaml, want) in cases {
            let got = parse(yaml.clone()).unwrap_err();
            assert!(got.starts_with(want), "{yaml}: {got}");
        }
    }

    #[test]
    fn counters_on_a_single_queue_preset() {
        let p = parse(serde_json::json!({
            "preset": "priority-zset",
            "counters": {"processed": "stats:processed", "failed": "stats:failed"}
        }))
        .unwrap();
        assert_eq!(
            p.counters,
            Some(CounterKeys {
                processed: Some("stats:processed".into()),
                failed: Some("stats:failed".into()),
                enqueued: None,
            })
        );
        let p = parse(serde_json::json!({
            "preset": "rediswq", "name": "q", "counters": {"enqueued": "q:added"}
        }))
        .unwrap();
        assert_eq!(
            p.counters.and_then(|c| c.enqueued).as_deref(),
            Some("q:added")
        );
        let e = parse(serde_json::json!({
            "preset": "rediswq", "name": "q", "counters": {"enqueued": ""}
        }))
        .unwrap_err();
        assert_eq!(e, "counters: keys must not be empty");
    }
}
