//! What a library preset knows about one
//! logical queue: jobs per normalized [`JobState`], pause, stalled and
//! overdue work ([`PresetFacts`]), and lifetime job totals ([`JobTotals`]).
//! Separate from the sample it hangs off (boxed, `None` for plain keys and
//! RabbitMQ) because only preset queues have it, and because its sums keep
//! an unread state unknown rather than 0.

use std::collections::BTreeMap;
use std::fmt;

/// A job's state as one normalized word: the `state` label of
/// `queue_depth` for preset queues. Each library's own words map onto these
/// (docs/presets.md, "Which key means which state?").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum JobState {
    /// Ready for a worker, prioritized included.
    Waiting,
    /// Taken by a worker.
    Active,
    /// Scheduled for later.
    Delayed,
    /// Failed and waiting for a retry.
    Retry,
    /// Dead or archived.
    Failed,
    /// Finished (as far as the library keeps them).
    Completed,
    /// A word of the presets issue's vocabulary, kept so `state: paused`
    /// stays a valid trigger word; no preset maps a key to it: a paused
    /// queue's backlog stays `Waiting` and the pause is `PresetFacts::paused`.
    Paused,
}

impl JobState {
    /// Every state, in exposition order.
    pub const ALL: [JobState; 7] = [
        JobState::Waiting,
        JobState::Active,
        JobState::Delayed,
        JobState::Retry,
        JobState::Failed,
        JobState::Completed,
        JobState::Paused,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Waiting => "waiting",
            JobState::Active => "active",
            JobState::Delayed => "delayed",
            JobState::Retry => "retry",
            JobState::Failed => "failed",
            JobState::Completed => "completed",
            JobState::Paused => "paused",
        }
    }

    /// Parses a label value (lowercase, as written in trigger metadata).
    pub fn parse(s: &str) -> Option<JobState> {
        JobState::ALL.into_iter().find(|st| st.as_str() == s)
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which library a preset sample comes from: the `preset` label, as the
/// library's config name (`rq`, `priority-zset`). The model names no
/// library: each library's file makes its own ([`PresetKind::named`]), and
/// the one list of libraries (`sources::redis::presets::library`) parses
/// names; here it is compared as a value.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PresetKind(&'static str);

/// The name in CamelCase (`priority-zset` → `PriorityZset`), as the kinds
/// were written when they were an enum (logs and tests print them so).
impl fmt::Debug for PresetKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for part in self.0.split('-') {
            let mut chars = part.chars();
            if let Some(first) = chars.next() {
                write!(f, "{}{}", first.to_ascii_uppercase(), chars.as_str())?;
            }
        }
        Ok(())
    }
}

impl PresetKind {
    /// The kind of the library whose config name is `name`.
    pub const fn named(name: &'static str) -> PresetKind {
        PresetKind(name)
    }

    /// The name written in the config (`preset: rq`) and in the label.
    pub fn as_str(self) -> &'static str {
        self.0
    }
}

impl fmt::Display for PresetKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A preset's view of one logical queue, spread by the library over
/// several keys.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PresetFacts {
    /// The preset's name (`rq`, `sidekiq`, ...): the `preset` label, so two
    /// libraries' `default` queues stay distinct series.
    pub preset: PresetKind,
    /// What the sample stands for: one logical queue, or keys its queues
    /// share. Set by the preset, never inferred from which states are present
    /// (a state can be absent because its read was refused).
    pub unit: PresetUnit,
    /// Jobs per state. A state the library does not have is absent (it holds
    /// no jobs); a state it has whose read failed (an ACL refusal, a reply we
    /// cannot read) is present as `None`: unknown, never 0.
    pub states: BTreeMap<JobState, Option<u64>>,
    /// Whether the queue is paused; `None` where the library cannot pause.
    pub paused: Option<bool>,
    /// Work a worker took and lost, by the library's own definition;
    /// `None` where it cannot be told.
    pub stalled: Option<u64>,
    /// Delayed, scheduled or retrying jobs whose due time has passed but
    /// that still sit in the library's time-ordered set (a subset of
    /// `delayed`/`retry`): nothing (worker, poller, forwarder) has moved
    /// them. `None` where the library has no such set.
    pub overdue: Option<u64>,
    /// How long the job running longest has run, in seconds (now − when
    /// its worker took it), where the library stamps that (Resque's
    /// `run_at`): 0 when no job runs; `None` where the library keeps no
    /// such stamp, or a read or a stamp could not be read (unknown, never
    /// 0).
    pub oldest_active_age_seconds: Option<f64>,
    /// Worker time per job from recently finished jobs; `None` where the
    /// library keeps no such record or none finished lately.
    pub service_time: Option<super::ServiceTime>,
    /// Where the library keeps finished jobs with their start and end
    /// stamps, from which `service_time` is measured: `Some(why)`, where
    /// `why` says what a measurement missing lately means (for KEDA's
    /// message, read through `ServiceMeasure::missing_why`); `None` where
    /// it keeps no such record. Whether the service time is measured is
    /// the sample's `measures.service_time`, set with it by the source, so
    /// readers never ask which library this is.
    pub finished_jobs: Option<&'static str>,
    /// What an unknown oldest age means for this library, where it can
    /// say (Celery: its producers stamp no `enqueued_at` header), for
    /// KEDA's message; `None`: the generic hint. Set by the library, so
    /// readers never ask which library this is.
    pub age_unknown_why: Option<&'static str>,
    /// States the library has but keeps in its other unit, set by the
    /// preset: on a queue, those it keeps only for all its queues together
    /// in the shared unit (Sidekiq's `retry`, under `(all)`); on the shared
    /// unit, those it keeps only per queue (`waiting`). Such a state asked
    /// of this sample is not 0 but held elsewhere: readers refuse it and
    /// name where it lives ([`PresetFacts::held_elsewhere`]), never reading
    /// which library this is.
    pub elsewhere: &'static [JobState],
}

/// What a preset sample stands for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PresetUnit {
    /// One logical queue of the library: its backlog is `waiting` and it has
    /// an oldest job.
    #[default]
    Queue,
    /// Keys the library's queues share (Sidekiq's and Celery's `(all)`, the
    /// priority-zset layout's `processing`/`completed`/`dlq`): no job waits
    /// in them, so they have no age and hold no `waiting` jobs.
    Shared,
}

impl PresetFacts {
    /// The sum of `states`' depths: states the library lacks hold no jobs
    /// (0); `None` when any asked state it has is unknown, so a refused read
    /// never turns into a smaller sum. [`PresetFacts::unknown_states`] names them.
    pub fn depth_of(&self, states: &[JobState]) -> Option<u64> {
        states
            .iter()
            .map(|s| self.states.get(s).copied().unwrap_or(Some(0)))
            .sum()
    }

    /// Which of `states` the library has but the poll could not read.
    pub fn unknown_states(&self, states: &[JobState]) -> Vec<JobState> {
        states
            .iter()
            .copied()
            .filter(|s| self.states.get(s) == Some(&None))
            .collect()
    }

    /// Which of `states` this sample's library keeps only in its other
    /// unit (see [`PresetFacts::elsewhere`]): asked here, they would read
    /// as 0 while their jobs are counted in the other unit.
    pub fn held_elsewhere(&self, states: &[JobState]) -> Vec<JobState> {
        states
            .iter()
            .copied()
            .filter(|s| self.elsewhere.contains(s) && !self.states.contains_key(s))
            .collect()
    }

    /// The known depth of `state`, if the library has it and it was read.
    pub fn known(&self, state: JobState) -> Option<u64> {
        self.states.get(&state).copied().flatten()
    }
}

/// The preset queue that counts a configured key's jobs (see
/// `QueueType::Counted`): a `key:` entry on `rq:queue:high` beside
/// `preset: rq` is counted as RQ's queue `high`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CountedIn {
    /// The preset whose queue reads the key.
    pub preset: PresetKind,
    /// That queue's `queue` label.
    pub queue: String,
}

/// Lifetime job totals (library counters or configured `counters:` keys).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct JobTotals {
    /// Jobs processed (successfully or not, as the library counts).
    pub processed: Option<u64>,
    /// Jobs failed.
    pub failed: Option<u64>,
}
