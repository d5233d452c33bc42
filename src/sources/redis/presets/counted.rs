//! `key:` entries on keys a preset also counts jobs in (docs/keda.md once
//! advised `- key: rq:queue:high` with `counters: enqueued` beside
//! `preset: rq`): reported as both, the same jobs were on `/metrics` twice,
//! `queue_depth{queue="rq:queue:high"}` beside RQ's `high` `waiting`. Such a
//! key is counted once, as the preset queue: its `counters:` are read onto
//! that queue (where WaitTime, with the library's age, backlog and service
//! time, can use them), and its own sample keeps only its identity, marked
//! `QueueSample::counted_in` (the source does that with [`Counted::keys`]).

use std::collections::{HashMap, HashSet};

use super::super::cluster::key_of;
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

/// The plain `key:` entries' keys, and which preset queue (by its position
/// among the poll's queues) counts jobs in each, as the poll plans.
#[derive(Debug, Default)]
pub(super) struct Counted {
    /// The keys of the source's `key:` entries.
    wanted: HashSet<Vec<u8>>,
    /// Each such key a preset queue counts, and that queue's position.
    found: HashMap<Vec<u8>, usize>,
}

impl Counted {
    /// Ready to watch for the keys of `plain`'s `key:` entries.
    pub(super) fn new(plain: &[QueueSpec]) -> Self {
        Counted {
            wanted: plain
                .iter()
                .filter_map(QueueSpec::key)
                .map(|k| k.as_bytes().to_vec())
                .collect(),
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
            if let Some(k) = key_of(c).filter(|k| self.wanted.contains(*k)) {
                self.found.entry(k.to_vec()).or_insert(queue);
            }
        }
    }

    /// The position of the preset queue that counts `key`'s jobs, if one does.
    pub(super) fn queue_of(&self, key: &str) -> Option<usize> {
        self.found.get(key.as_bytes()).copied()
    }

    /// Each `key:` entry's key a preset queue counts, with that queue's position.
    pub(super) fn keys<'a>(
        &'a self,
        plain: &'a [QueueSpec],
    ) -> impl Iterator<Item = (&'a str, usize)> + 'a {
        plain
            .iter()
            .filter_map(QueueSpec::key)
            .filter_map(|k| Some((k, self.queue_of(k)?)))
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

    #[test]
    fn a_key_entry_is_counted_by_the_queue_that_sizes_it_not_one_that_peeks() {
        let plain = [key("rq:queue:high"), key("elsewhere")];
        let mut c = Counted::new(&plain);
        let mut peek = redis::cmd("LINDEX");
        peek.arg("rq:queue:high").arg(0);
        c.note(&[peek], 0);
        assert_eq!(c.queue_of("rq:queue:high"), None);
        let mut len = redis::cmd("LLEN");
        len.arg("rq:queue:high");
        c.note(&[len.clone()], 3);
        c.note(&[len], 4);
        assert_eq!(c.keys(&plain).collect::<Vec<_>>(), [("rq:queue:high", 3)]);
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
