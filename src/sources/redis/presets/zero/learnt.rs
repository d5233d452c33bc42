//! What a zero-config keyspace scan learnt for the rounds after it
//! ([`Learnt`]), and when the next scan is due. Between scans a library
//! round (`zero::libraries`) reads what the last scan found, as the config `discover` prints would, instead of
//! every name again (docs/presets.md, "What does zero config cost Redis?").
//!
//! A scan (at first, then every `keyspace_scan_interval`: by default 100
//! times as long as the last scan took, from `discovery_interval` to 5
//! minutes, see [`Learnt::scan_every`]) makes an untyped pass over every name, since a new plain key,
//! BullMQ prefix, Sidekiq namespace or kombu exchange can be named
//! anything; that pass alone costs Redis 1.2-1.4x the presets' round
//! (BENCHMARKS.md, section 11). Between scans, a library round:
//! - reads every registry and kombu binding the scan read, the registries
//!   a library writes under a fixed name (`queues`, `rq:queues`,
//!   `asynq:queues`, `_kombu.binding.celery`) and the marks Redis refused,
//!   by name, in one pipeline; if any differs from the scan's (a queue
//!   added to a registry or binding, a library first used since, a
//!   refusal lifted), the round scans instead, so nothing the scan would
//!   find waits for the next;
//! - makes the `bullmq` preset's pass at each BullMQ prefix the scan found
//!   (`SCAN MATCH <prefix>:*:meta TYPE hash`, then the marks of each
//!   `meta`), so a queue a BullMQ app creates at a known prefix is found at
//!   once, as a `- preset: bullmq` entry finds it;
//! - keeps the plain keys tracked, less any a library entry now owns.
//!
//! What waits for the next scan (5 minutes at most by default): a new plain key, a BullMQ queue at a
//! prefix not seen before, an old Bull queue, a new Celery priority list.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::super::bounded::Bound;
use super::super::spec::PresetSpec;
use super::super::unit::Unit;

/// The registries libraries write under a fixed name
/// ([`Recognise::fixed_marks`](super::super::library::Recognise::fixed_marks)): a
/// library round reads them whether the scan saw them or not, so that an
/// app started since (the exporter often starts first) is found at the
/// next round.
pub(super) fn fixed_marks() -> Vec<&'static [u8]> {
    super::super::library::recognisers()
        .flat_map(|l| l.fixed_marks().iter().copied())
        .collect()
}

/// Whether a library round lists `spec`'s queues again
/// (`Recognise::relisted_each_round`) rather than keep the scan's.
pub(super) fn relisted_each_round(spec: &PresetSpec) -> bool {
    super::super::library::of_preset(&spec.preset)
        .recognition()
        .is_some_and(|r| r.relisted_each_round())
}

/// Unless `keyspace_scan_interval` says otherwise, scans are this many
/// times as long apart as the last scan took: scanning takes at most 1 %
/// of the time, so a keyspace that scans in 30 ms is scanned at every
/// round (30 s apart by default), one of a million names (a full scan
/// 2.4 s, a later one 1.2 s, measured) every 2-4 minutes.
const SCAN_TIME_SHARE: u32 = 100;

/// The longest time between scans unless `keyspace_scan_interval` says
/// otherwise: how long a new plain key or BullMQ prefix may wait.
pub const SCAN_AT_LEAST_EVERY: Duration = Duration::from_secs(300);

/// What the last keyspace scan recognised, for the library rounds after it.
#[derive(Debug)]
pub struct Learnt {
    /// The library entries the scan recognised, with their units.
    pub(super) entries: Vec<(PresetSpec, Vec<Unit>)>,
    /// Every set the scan read that marks a library and has members (the
    /// registries its entries came from, those under a fixed name, kombu
    /// bindings), with its members sorted: a change means a scan. A set
    /// named like a registry that marks none is neither read nor compared.
    pub(super) sets: BTreeMap<Vec<u8>, Vec<Vec<u8>>>,
    /// The marks Redis refused reading at the scan.
    pub(super) unread: BTreeSet<Vec<u8>>,
    /// The marks the scan did not read for a bound: those beyond
    /// `max_keys` stay unread until the next scan; the sets over the cap
    /// are asked their size again (a change means a scan).
    pub(super) over: BTreeMap<Vec<u8>, Bound>,
    /// The keys the scan left out for those refusals, by `queue` label.
    pub(super) withheld: Vec<String>,
    /// When the scan finished: the next is due `keyspace_scan_interval`
    /// after.
    pub(super) scanned_at: Instant,
    /// How long the scan took (wall time, which bounds Redis's CPU time).
    pub(super) took: Duration,
}

impl Learnt {
    /// How long the scan took.
    pub fn took(&self) -> Duration {
        self.took
    }

    /// Notes how long the scan took, from `started`.
    pub fn took_since(&mut self, started: Instant) {
        self.took = self.scanned_at.saturating_duration_since(started);
    }

    /// The time from this scan to the next: `set` (the source's
    /// `keyspace_scan_interval`) or [`SCAN_TIME_SHARE`] times as long as
    /// this scan took, from `discovery_interval` to [`SCAN_AT_LEAST_EVERY`].
    pub fn scan_every(&self, set: Option<Duration>, discovery_interval: Duration) -> Duration {
        set.unwrap_or_else(|| {
            self.took
                .saturating_mul(SCAN_TIME_SHARE)
                .max(discovery_interval)
                .min(SCAN_AT_LEAST_EVERY)
        })
    }

    /// Whether the round at `now` must scan the keyspace, scans being
    /// `every` apart.
    pub fn scan_due(&self, every: Duration, now: Instant) -> bool {
        now.saturating_duration_since(self.scanned_at) >= every
    }

    /// Whether `mark` was left unread at the scan for being beyond the
    /// `max_keys` marks a round reads: it stays unread until the next scan.
    pub(super) fn beyond_max_keys(&self, mark: &[u8]) -> bool {
        matches!(self.over.get(mark), Some(Bound::MaxKeys(_)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn took(d: Duration) -> Learnt {
        Learnt {
            entries: Vec::new(),
            sets: BTreeMap::new(),
            unread: BTreeSet::new(),
            over: BTreeMap::new(),
            withheld: Vec::new(),
            scanned_at: Instant::now(),
            took: d,
        }
    }

    const MS: Duration = Duration::from_millis(1);
    const S: Duration = Duration::from_secs(1);

    #[test]
    fn scans_are_a_hundred_times_as_long_apart_as_a_scan_takes_from_the_round_to_five_minutes() {
        assert_eq!(took(30 * MS).scan_every(None, 30 * S), 30 * S);
        assert_eq!(took(1500 * MS).scan_every(None, 30 * S), 150 * S);
        assert_eq!(took(3 * S).scan_every(None, 30 * S), 300 * S);
        assert_eq!(took(60 * S).scan_every(None, 30 * S), 300 * S);
        // Rounds further apart than that: every round scans.
        assert_eq!(took(3 * S).scan_every(None, 600 * S), 300 * S);
    }

    #[test]
    fn a_set_keyspace_scan_interval_is_kept_as_it_is() {
        assert_eq!(
            took(3 * S).scan_every(Some(Duration::ZERO), 30 * S),
            Duration::ZERO
        );
        assert_eq!(took(MS).scan_every(Some(3600 * S), 30 * S), 3600 * S);
    }

    #[test]
    fn a_scan_is_due_once_its_interval_has_passed() {
        let l = took(MS);
        assert!(!l.scan_due(S, l.scanned_at));
        assert!(l.scan_due(S, l.scanned_at + S));
        assert!(l.scan_due(Duration::ZERO, l.scanned_at));
    }
}
