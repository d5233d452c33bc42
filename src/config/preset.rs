//! `queues:` entries of a Redis source that name a library instead of keys
//! (`- preset: rq`), parsed into typed values: each preset carries only the
//! options it understands, with the library's defaults filled in once here.

use std::time::Duration;

use serde::Deserialize;

use super::duration::{Bounds, parse_duration};
use crate::snapshot::PresetKind;

/// Default bound on the per-poll stalled checks (one `EXISTS` each).
pub const DEFAULT_STALLED_CHECK_LIMIT: usize = 100;

/// kombu's default `priority_steps` (`PRIORITY_STEPS`).
pub const CELERY_PRIORITY_STEPS: [u8; 4] = [0, 3, 6, 9];

/// kombu's default `sep` between a queue name and its priority step.
pub const CELERY_SEP: &str = "\x06\x16";

/// kombu's default `visibility_timeout`.
pub const CELERY_VISIBILITY_TIMEOUT: Duration = Duration::from_secs(3600);

/// One `- preset: <name>` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct PresetSpec {
    /// Which library, with its options.
    pub preset: Preset,
    /// Integer string keys read with `GET` as job totals, for layouts whose
    /// library keeps no totals of its own.
    pub counters: Option<CounterKeys>,
}

/// A library and the options that locate its keys.
#[derive(Debug, Clone, PartialEq)]
pub enum Preset {
    /// BullMQ 5.x/6.x: queues discovered by SCAN for `<prefix>:*:meta`.
    Bullmq {
        /// Key prefix (`bull`).
        prefix: String,
        /// Active jobs whose lock is checked per poll, at most.
        stalled_check_limit: usize,
    },
    /// Bull 3.x/4.x: queues discovered by SCAN for `<prefix>:*:id`.
    Bull {
        /// Key prefix (`bull`).
        prefix: String,
        /// Active jobs whose lock is checked per poll, at most.
        stalled_check_limit: usize,
    },
    /// Sidekiq 6–8: queues from the `queues` set.
    Sidekiq {
        /// A redis-namespace prefix (`ns` → `ns:queue:<q>`), as Sidekiq 6
        /// deployments used; empty for 7.x/8.x.
        prefix: String,
        /// Processes whose heartbeat is checked per poll, at most.
        stalled_check_limit: usize,
    },
    /// Celery on kombu's Redis transport: named queues, priority lists.
    Celery {
        /// Queue names (Celery has no registry); default `[celery]`.
        queues: Vec<String>,
        /// kombu's `priority_steps`; step 0 is the bare queue name.
        priority_steps: Vec<u8>,
        /// kombu's `sep` between a queue name and its step.
        sep: String,
        /// kombu's `global_keyprefix`, prepended to every key.
        prefix: String,
        /// kombu's `visibility_timeout`: unacked longer than this is stalled.
        visibility_timeout: Duration,
    },
    /// RQ: queues from the `<prefix>:queues` set (full keys).
    Rq {
        /// `RQ_KEY_PREFIX` (`rq`).
        prefix: String,
    },
    /// asynq: queues from the `<prefix>:queues` set.
    Asynq {
        /// Key prefix (`asynq`).
        prefix: String,
    },
    /// The Kubernetes fine-parallel work queue (`rediswq.py`).
    Rediswq {
        /// The main list's name (`job2` in the Kubernetes example).
        name: String,
        /// Processing items whose lease key is checked per poll, at most.
        stalled_check_limit: usize,
    },
    /// `<prefix>:pending:{priority}` zsets and friends.
    PriorityZset {
        /// Key prefix (`jobs`); also the logical queue's name.
        prefix: String,
    },
}

impl Preset {
    /// Which library: the `preset` label.
    pub fn kind(&self) -> PresetKind {
        match self {
            Preset::Bullmq { .. } => PresetKind::Bullmq,
            Preset::Bull { .. } => PresetKind::Bull,
            Preset::Sidekiq { .. } => PresetKind::Sidekiq,
            Preset::Celery { .. } => PresetKind::Celery,
            Preset::Rq { .. } => PresetKind::Rq,
            Preset::Asynq { .. } => PresetKind::Asynq,
            Preset::Rediswq { .. } => PresetKind::Rediswq,
            Preset::PriorityZset { .. } => PresetKind::PriorityZset,
        }
    }

    /// The key prefix the entry locates its keys by (rediswq has none).
    pub fn prefix(&self) -> Option<&str> {
        match self {
            Preset::Bullmq { prefix, .. }
            | Preset::Bull { prefix, .. }
            | Preset::Sidekiq { prefix, .. }
            | Preset::Celery { prefix, .. }
            | Preset::Rq { prefix }
            | Preset::Asynq { prefix }
            | Preset::PriorityZset { prefix } => Some(prefix),
            Preset::Rediswq { .. } => None,
        }
    }

    /// Logical queue names this preset reports whatever the registry holds
    /// (for the scaler's drained-queue rule); registry-discovered queues are
    /// not listed.
    pub fn fixed_names(&self) -> Vec<String> {
        match self {
            Preset::Celery { queues, .. } => {
                let mut v = queues.clone();
                v.push(ALL_QUEUES.to_string());
                v
            }
            Preset::Sidekiq { .. } => vec![ALL_QUEUES.to_string()],
            Preset::Rediswq { name, .. } => vec![name.clone()],
            Preset::PriorityZset { prefix } => vec![prefix.clone()],
            Preset::Bullmq { .. }
            | Preset::Bull { .. }
            | Preset::Rq { .. }
            | Preset::Asynq { .. } => Vec::new(),
        }
    }
}

/// The `queue` label of a library's source-wide keys (Sidekiq's `schedule`,
/// `retry`, `dead`; Celery's `unacked`), which belong to no single queue.
pub const ALL_QUEUES: &str = "(all)";

/// Where a preset entry's counter key template puts each logical queue's
/// raw name: `counters: { enqueued: "myapp:enqueued:{queue}" }` reads
/// `myapp:enqueued:high` for queue `high`, so every queue of a library
/// that keeps no per-queue arrivals (Sidekiq, RQ, Celery) can have its own.
pub const QUEUE_PLACEHOLDER: &str = "{queue}";

/// `counters: { processed: key, failed: key, enqueued: key }`; on a preset
/// entry that reports several queues, each key a template naming `{queue}`.
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

impl CounterKeys {
    /// The configured keys as written, each with its field's name, in
    /// processed, failed, enqueued order (the order the poll reads them in).
    fn named(&self) -> impl Iterator<Item = (&'static str, &String)> {
        [
            ("processed", &self.processed),
            ("failed", &self.failed),
            ("enqueued", &self.enqueued),
        ]
        .into_iter()
        .filter_map(|(field, key)| Some((field, key.as_ref()?)))
    }

    /// Whether the keys are per-queue templates (hold `{queue}`):
    /// read once per logical queue, rather than once for the entry.
    pub fn per_queue(&self) -> bool {
        self.named().any(|(_, k)| k.contains(QUEUE_PLACEHOLDER))
    }

    /// The configured keys in processed, failed, enqueued order, each
    /// `{queue}` replaced by `queue` (a raw name, binary-safe);
    /// a key without one as written.
    pub fn keys_for<'a>(&'a self, queue: &'a [u8]) -> impl Iterator<Item = Vec<u8>> + 'a {
        self.named().map(move |(_, key)| {
            let mut parts = key.split(QUEUE_PLACEHOLDER);
            let mut out = parts.next().unwrap_or_default().as_bytes().to_vec();
            for part in parts {
                out.extend_from_slice(queue);
                out.extend_from_slice(part.as_bytes());
            }
            out
        })
    }

    /// The keys with [`QUEUE_PLACEHOLDER`] replaced by `name` now: for an
    /// entry whose one logical queue is known at load.
    fn for_the_queue(self, name: &str) -> CounterKeys {
        let fill = |k: Option<String>| k.map(|k| k.replace(QUEUE_PLACEHOLDER, name));
        CounterKeys {
            processed: fill(self.processed),
            failed: fill(self.failed),
            enqueued: fill(self.enqueued),
        }
    }
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

/// The library's own key prefix: what `prefix:` defaults to.
pub fn default_prefix(kind: PresetKind) -> &'static str {
    match kind {
        PresetKind::Bullmq | PresetKind::Bull => "bull",
        PresetKind::Rq => "rq",
        PresetKind::Asynq => "asynq",
        PresetKind::PriorityZset => "jobs",
        PresetKind::Sidekiq | PresetKind::Celery | PresetKind::Rediswq => "",
    }
}

/// Every preset name, for messages.
fn preset_names() -> String {
    PresetKind::ALL.map(PresetKind::as_str).join(", ")
}

impl TryFrom<RawPresetSpec> for PresetSpec {
    type Error = String;

    fn try_from(raw: RawPresetSpec) -> Result<Self, String> {
        let given: Vec<&str> = [
            ("prefix", raw.prefix.is_some()),
            ("queues", raw.queues.is_some()),
            ("priority_steps", raw.priority_steps.is_some()),
            ("sep", raw.sep.is_some()),
            ("visibility_timeout", raw.visibility_timeout.is_some()),
            ("name", raw.name.is_some()),
            ("stalled_check_limit", raw.stalled_check_limit.is_some()),
        ]
        .into_iter()
        .filter_map(|(k, set)| set.then_some(k))
        .collect();
        let Some(kind) = PresetKind::parse(&raw.preset) else {
            return Err(format!(
                "preset: unknown preset {:?} (expected one of {})",
                raw.preset,
                preset_names()
            ));
        };
        let allowed: &[&str] = match kind {
            PresetKind::Bullmq | PresetKind::Bull | PresetKind::Sidekiq => {
                &["prefix", "stalled_check_limit"]
            }
            PresetKind::Celery => &[
                "queues",
                "priority_steps",
                "sep",
                "prefix",
                "visibility_timeout",
            ],
            PresetKind::Rq | PresetKind::Asynq | PresetKind::PriorityZset => &["prefix"],
            PresetKind::Rediswq => &["name", "stalled_check_limit"],
        };
        if let Some(bad) = given.iter().find(|k| !allowed.contains(k)) {
            return Err(format!(
                "{bad}: not an option of preset {} (its options: {})",
                raw.preset,
                allowed.join(", ")
            ));
        }
        let limit = match raw.stalled_check_limit {
            Some(0) => return Err("stalled_check_limit: must be greater than 0".into()),
            Some(n) => n,
            None => DEFAULT_STALLED_CHECK_LIMIT,
        };
        let prefix = || -> Result<String, String> {
            let default = default_prefix(kind);
            match &raw.prefix {
                Some(p) if p.is_empty() && !default.is_empty() => {
                    Err("prefix: must not be empty".into())
                }
                Some(p) => Ok(p.clone()),
                None => Ok(default.to_string()),
            }
        };
        let preset = match kind {
            PresetKind::Bullmq => Preset::Bullmq {
                prefix: prefix()?,
                stalled_check_limit: limit,
            },
            PresetKind::Bull => Preset::Bull {
                prefix: prefix()?,
                stalled_check_limit: limit,
            },
            PresetKind::Sidekiq => Preset::Sidekiq {
                prefix: prefix()?,
                stalled_check_limit: limit,
            },
            PresetKind::Rq => Preset::Rq { prefix: prefix()? },
            PresetKind::Asynq => Preset::Asynq { prefix: prefix()? },
            PresetKind::PriorityZset => Preset::PriorityZset { prefix: prefix()? },
            PresetKind::Rediswq => match raw.name {
                Some(n) if !n.is_empty() => Preset::Rediswq {
                    name: n,
                    stalled_check_limit: limit,
                },
                Some(_) => return Err("name: must not be empty".into()),
                None => return Err("name: required by preset rediswq (the main list)".into()),
            },
            PresetKind::Celery => {
                let queues = raw.queues.unwrap_or_else(|| vec!["celery".into()]);
                if queues.is_empty() || queues.iter().any(String::is_empty) {
                    return Err("queues: must list non-empty queue names".into());
                }
                let steps = raw
                    .priority_steps
                    .unwrap_or_else(|| CELERY_PRIORITY_STEPS.to_vec());
                if steps.first() != Some(&0) || steps.windows(2).any(|w| w[0] >= w[1]) {
                    return Err("priority_steps: must start at 0 and be strictly increasing".into());
                }
                let visibility_timeout = match &raw.visibility_timeout {
                    Some(t) => parse_duration(t)
                        .map_err(|e| format!("visibility_timeout: {e}"))
                        .and_then(|d| {
                            Bounds::YEAR
                                .check(d)
                                .map(|()| d)
                                .map_err(|e| format!("visibility_timeout: {e}"))
                        })?,
                    None => CELERY_VISIBILITY_TIMEOUT,
                };
                Preset::Celery {
                    queues,
                    priority_steps: steps,
                    sep: raw.sep.unwrap_or_else(|| CELERY_SEP.into()),
                    prefix: prefix()?,
                    visibility_timeout,
                }
            }
        };
        // Entries of one logical queue, known at load, may name keys outright.
        let one_queue = matches!(preset, Preset::Rediswq { .. } | Preset::PriorityZset { .. });
        let counters = match raw.counters {
            Some(c) => Some(preset_counters(&preset, one_queue, c)?),
            None => None,
        };
        Ok(PresetSpec { preset, counters })
    }
}

/// Checks a preset entry's `counters:`. An entry that reports `one_queue`,
/// known at load (its fixed name: rediswq's `name`, priority-zset's prefix), may
/// name its keys outright; a [`QUEUE_PLACEHOLDER`] is replaced by that
/// name now. Elsewhere the entry reports as many queues as its library
/// has, so every key must be a template: one key for all of them would
/// count each queue's jobs as every queue's arrivals.
fn preset_counters(
    preset: &Preset,
    one_queue: bool,
    c: CounterKeys,
) -> Result<CounterKeys, String> {
    check_counters(&c)?;
    if let (true, [name]) = (one_queue, preset.fixed_names().as_slice()) {
        return Ok(c.for_the_queue(name));
    }
    if let Some((field, key)) = c.named().find(|(_, k)| !k.contains(QUEUE_PLACEHOLDER)) {
        return Err(format!(
            "counters.{field}: key {key:?} has no {QUEUE_PLACEHOLDER}: preset {} reports \
             several queues, each needs its own key (for example \"{key}:{QUEUE_PLACEHOLDER}\")",
            preset.kind()
        ));
    }
    Ok(c)
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
            Preset::Celery {
                queues: vec!["celery".into()],
                priority_steps: vec![0, 3, 6, 9],
                sep: "\x06\x16".into(),
                prefix: String::new(),
                visibility_timeout: Duration::from_secs(3600),
            }
        );
        let b = parse(serde_json::json!({"preset": "bullmq"})).unwrap();
        assert_eq!(
            b.preset,
            Preset::Bullmq {
                prefix: "bull".into(),
                stalled_check_limit: DEFAULT_STALLED_CHECK_LIMIT
            }
        );
        let r = parse(serde_json::json!({"preset": "rq", "prefix": "myrq"})).unwrap();
        assert_eq!(
            r.preset,
            Preset::Rq {
                prefix: "myrq".into()
            }
        );
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
                "counters.processed: key \"p\" has no {queue}: preset rq reports several queues",
            ),
            (
                serde_json::json!({"preset": "celery", "queues": ["one"],
                                   "counters": {"enqueued": "e:{queue}", "failed": "f"}}),
                "counters.failed: key \"f\" has no {queue}: preset celery reports several queues",
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

    #[test]
    fn a_template_names_each_queues_own_counter() {
        let p = parse(serde_json::json!({
            "preset": "sidekiq",
            "counters": {"enqueued": "myapp:{queue}:in:{queue}", "processed": "done:{queue}"}
        }))
        .unwrap();
        let c = p.counters.unwrap();
        assert!(c.per_queue());
        let keys: Vec<Vec<u8>> = c.keys_for(b"hi\xff").collect();
        assert_eq!(
            keys,
            [b"done:hi\xff".to_vec(), b"myapp:hi\xff:in:hi\xff".to_vec()]
        );
    }

    #[test]
    fn a_single_queue_entry_fills_its_template_at_load() {
        let p = parse(serde_json::json!({
            "preset": "rediswq", "name": "job2", "counters": {"enqueued": "added:{queue}"}
        }))
        .unwrap();
        let c = p.counters.unwrap();
        assert!(!c.per_queue());
        assert_eq!(c.enqueued.as_deref(), Some("added:job2"));
        let p = parse(serde_json::json!({
            "preset": "priority-zset", "counters": {"processed": "{queue}:done"}
        }))
        .unwrap();
        assert_eq!(p.counters.unwrap().processed.as_deref(), Some("jobs:done"));
    }
}
