//! `queues:` entries of a Redis source that name a library instead of keys
//! (`- preset: rq`), as plain data: the library's name, the options
//! written beside it, the entry's `counters:` and where it stands in the
//! file. Which options a library takes, their defaults and its checks are
//! the library's own; `sources` resolves an entry against the list of
//! libraries when the config is checked (`app::preflight`), so a bad entry
//! is still refused at load with one line naming file, field and problem.

use serde::Deserialize;

use super::error::typed;

/// One `- preset: <name>` entry as written.
#[derive(Debug, Clone, PartialEq)]
pub struct PresetEntry {
    /// The library's config name (`preset:`), not yet checked.
    pub library: String,
    /// Every other field but `counters:`, as written: the library's
    /// options, which only the library reads.
    pub options: serde_json::Map<String, serde_json::Value>,
    /// Integer string keys read with `GET` as job totals, for layouts whose
    /// library keeps no totals of its own.
    pub counters: Option<CounterKeys>,
    /// Where the entry is (`sources[0].queues[1]`): the path its errors name.
    pub at: String,
}

impl PresetEntry {
    /// Splits a `- preset:` entry at `at` into the library's name, its
    /// `counters:` and the options; `Err` is `(path, problem)`.
    pub(super) fn parse(entry: serde_json::Value, at: &str) -> Result<Self, (String, String)> {
        let serde_json::Value::Object(mut options) = entry else {
            return Err((at.to_owned(), "expected a map".into()));
        };
        let library = match options.remove("preset") {
            Some(name) => typed::<String>(name, &format!("{at}.preset"))?,
            None => return Err((format!("{at}.preset"), "missing".into())),
        };
        let counters = match options.remove("counters") {
            Some(c) => Some(typed(c, &format!("{at}.counters"))?),
            None => None,
        };
        Ok(PresetEntry {
            library,
            options,
            counters,
            at: at.to_owned(),
        })
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
    pub fn named(&self) -> impl Iterator<Item = (&'static str, &String)> {
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
    pub fn for_the_queue(self, name: &str) -> CounterKeys {
        let fill = |k: Option<String>| k.map(|k| k.replace(QUEUE_PLACEHOLDER, name));
        CounterKeys {
            processed: fill(self.processed),
            failed: fill(self.failed),
            enqueued: fill(self.enqueued),
        }
    }
}

/// Checks a `counters:` block: at least one key, none empty.
pub fn check_counters(c: &CounterKeys) -> Result<(), String> {
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
