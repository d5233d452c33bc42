//! `key:` entries on keys a preset also counts jobs in (docs/keda.md once
//! advised `- key: rq:queue:high` with `counters: enqueued` beside
//! `preset: rq`): reported as both, the same jobs were on `/metrics` twice,
//! `queue_depth{queue="rq:queue:high"}` beside RQ's `high` `waiting`. Such a
//! key is counted once, as the preset queue: its `counters:` are read onto
//! that queue (where WaitTime, with the library's age, backlog and service
//! time, can use them), and its own sample keeps only its identity, marked
//! `QueueSample::counted_in` (the source does that with
//! [`Counted::tracked`]). The same holds for a key a `pattern:` entry
//! tracks (`pattern: "rq:queue:*"` beside `preset: rq`): counted once, as
//! the preset queue, never beside it.

use std::collections::{HashMap, HashSet};

use super::super::cluster::key_of;
use super::super::tracked::TrackedKey;
use super::CounterReading;
use crate::config::{CounterKeys, QueueSpec};
use crate::snapshot::QueueSample;

/// Whether `c` counts the jobs held in its key (a size, or a count of a
/// range), as opposed to peeking at one job or reading a flag.
fn counts_jobs(c: &redis::Cmd) -> bool {
    let Some(redis::Arg::Simple(name)) = c.args_iter().next() else {
        return false;
    };
    [
        &b"LLEN"[..],
        b"ZCARD",
        b"ZCOUNT",
        b"HLEN",
        b"SCARD",
        b"XLEN",
    ]
    .iter()
    .any(|n| n.eq_ignore_ascii_case(name))
}

/// The plain entries' keys (`key:` entries, and the keys the entries
/// track, patterns' included), and which preset queue (by its position
/// among the poll's queues) counts jobs in each, as the poll plans.
#[derive(Debug, Default)]
pub(super) struct Counted<'a> {
    /// The keys of the source's `key:` entries and its tracked keys.
    wanted: HashSet<&'a [u8]>,
    /// Each such key a preset queue counts, and that queue's position.
    found: HashMap<&'a [u8], usize>,
}

impl<'a> Counted<'a> {
    /// Ready to watch for the keys of `plain`'s `key:` entries and the
    /// `tracked` keys (none where no preset queue is polled: nothing can
    /// count them).
    pub(super) fn new(plain: &'a [QueueSpec], tracked: &'a [TrackedKey]) -> Self {
        let mut wanted: HashSet<&[u8]> = plain
            .iter()
            .filter_map(QueueSpec::key)
            .map(str::as_bytes)
            .collect();
        wanted.extend(tracked.iter().map(|t| t.key.as_slice()));
        Counted {
            wanted,
            found: HashMap::new(),
        }
    }

    /// Notes the keys whose jobs `cmds` (the plan of the poll's queue
    /// number `queue`) count; the first queue to count a key keeps it.
    pub(super) fn note(&mut self, cmds: &[redis::Cmd], queue: usize) {
        if self.wanted.is_empty() {
            return;
        }
        for c in cmds.iter().filter(|c| counts_jobs(c)) {
            if let Some(k) = key_of(c).and_then(|k| self.wanted.get(k)) {
                self.found.entry(*k).or_insert(queue);
            }
        }
    }

    /// The position of the preset queue that counts `key`'s jobs, if one does.
    pub(super) fn queue_of(&self, key: &str) -> Option<usize> {
        self.found.get(key.as_bytes()).copied()
    }

    /// Each tracked key a preset queue counts, by its `queue` label, with
    /// that queue's position.
    pub(super) fn tracked<'b>(
        &'b self,
        tracked: &'b [TrackedKey],
    ) -> impl Iterator<Item = (&'b str, usize)> + 'b {
        tracked.iter().filter_map(|t| {
            let queue = self.found.get(t.key.as_slice())?;
            Some((t.name.as_str(), *queue))
        })
    }
}

/// Puts what `counters:` read onto a preset queue (a key entry's, onto the
/// queue that counts the key; a preset entry's template, onto each of its
/// queues): only the counters configured (a `counters: { enqueued: … }`
/// leaves the library's own processed total alone), each as read, unknown
/// included.
pub(super) fn apply_onto(keys: &CounterKeys, reading: CounterReading, sample: &mut QueueSample) {
    let mut jobs = sample.jobs();
    if keys.processed.is_some() {
        jobs.processed = reading.totals.processed;
    }
    if keys.failed.is_some() {
        jobs.failed = reading.totals.failed;
    }
    sample.set_jobs(jobs);
    if keys.enqueued.is_some() {
        sample.counters_mut().published = reading.enqueued;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{QueueSpec, QueueTarget};
    use crate::snapshot::JobTotals;

    fn key(k: &str) -> QueueSpec {
        QueueSpec::new(QueueTarget::Key(k.into()))
    }

    /// A key a plain entry tracks, labelled `name`.
    fn tracked(k: &str, name: &str) -> TrackedKey {
        TrackedKey {
            key: k.as_bytes().to_vec(),
            name: name.into(),
            labels: Vec::new(),
            spec: 0,
            state: super::super::super::tracked::KeyState::Typed(crate::config::KeyType::List),
            exact: false,
            histogram: Default::default(),
            peek_paused_until: 0.0,
            unchanged: None,
            verify_at: 0.0,
        }
    }

    /// The LLEN a preset queue sizes `k` with.
    fn llen(k: &str) -> redis::Cmd {
        let mut len = redis::cmd("LLEN");
        len.arg(k);
        len
    }

    #[test]
    fn a_key_entry_is_counted_by_the_queue_that_sizes_it_not_one_that_peeks() {
        let plain = [key("rq:queue:high"), key("elsewhere")];
        let keys = [tracked("rq:queue:high", "rq:queue:high")];
        let mut c = Counted::new(&plain, &keys);
        let mut peek = redis::cmd("LINDEX");
        peek.arg("rq:queue:high").arg(0);
        c.note(&[peek], 0);
        assert_eq!(c.queue_of("rq:queue:high"), None);
        c.note(&[llen("rq:queue:high")], 3);
        c.note(&[llen("rq:queue:high")], 4);
        assert_eq!(c.queue_of("rq:queue:high"), Some(3));
        assert_eq!(c.tracked(&keys).collect::<Vec<_>>(), [("rq:queue:high", 3)]);
    }

    /// A key a `pattern:` entry tracks (no `key:` entry names it) that a
    /// preset queue sizes is that queue's, by the key's `queue` label.
    #[test]
    fn a_pattern_key_a_preset_queue_sizes_is_counted_by_that_queue() {
        let keys = [
            tracked("rq:queue:high", "high-list"),
            tracked("other", "other"),
        ];
        let mut c = Counted::new(&[], &keys);
        c.note(&[llen("rq:queue:high")], 2);
        assert_eq!(c.tracked(&keys).collect::<Vec<_>>(), [("high-list", 2)]);
    }

    #[test]
    fn only_the_configured_counters_replace_the_queues_own() {
        let mut s = QueueSample::named("high");
        s.set_jobs(JobTotals {
            processed: Some(7),
            failed: Some(1),
        });
        let keys = CounterKeys {
            enqueued: Some("high:in".into()),
            ..CounterKeys::default()
        };
        let reading = CounterReading {
            totals: JobTotals::default(),
            enqueued: Some(40),
        };
        apply_onto(&keys, reading, &mut s);
        assert_eq!(s.jobs().processed, Some(7));
        assert_eq!(s.jobs().failed, Some(1));
        assert_eq!(s.counters().published, Some(40));
    }
}
