//! Where a preset's jobs are counted, for the scaler's checks: which unit
//! (one queue, or the keys the library's queues share, `(all)`) holds an
//! asked `state`. Read from what the preset put in the snapshot
//! ([`PresetFacts::elsewhere`]), never from a library's name: a state that
//! a queue's library keeps only under `(all)` is refused when asked of the
//! queue alone, rather than read as 0.
//!
//! Likewise a configured key that a preset queue counts
//! ([`QueueSample::counted_in`]) is answered as that queue, never beside it.
//!
//! Called by `query::check_presets` and `query::skip_for_mode`; pure.

use crate::scaler::metadata::{Mode, Operation, ScalerQuery};
use crate::snapshot::{JobState, PresetFacts, PresetUnit, QueueSample, Snapshot};

/// Why a query is refused: its text names the metadata key
/// (`scalerMetadata.state: …`); the caller answers it as
/// `INVALID_ARGUMENT`. Its own type, so this file need not import `query`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct Refusal(pub String);

/// Refuses mode QueueLength (of `waiting` unless `state` says) when a
/// matched preset sample's library keeps one of the asked states only in
/// its other unit and no matched sample of that
/// library and unit holds it: Sidekiq's `retry` on queue `default` would
/// read 0 while `(all)` holds the retries. A glob that also matches the
/// unit holding the state (`queue: "*"`) is answered, each job counted once
/// where it lives; but only with `operation: sum`, since a `max` or `avg`
/// over such a match would compare one queue's jobs with every queue's.
pub fn check_state_units(
    query: &ScalerQuery,
    snapshot: &Snapshot,
    queues: &[&QueueSample],
) -> Result<(), Refusal> {
    if query.mode != Mode::QueueLength {
        return Ok(());
    }
    let states = asked(query);
    // Only a queue is refused: the shared keys asked for `waiting` hold
    // none, truly, and where they share the queue's name (the
    // priority-zset layout) a drained queue is that name's only sample.
    for q in queues {
        let Some(f) = q.preset.as_deref().filter(|f| f.unit == PresetUnit::Queue) else {
            continue;
        };
        for state in f.held_elsewhere(states) {
            if queues.iter().any(|s| holds(s, f, state)) {
                continue;
            }
            let mut homes: Vec<&str> = snapshot
                .queues
                .iter()
                .filter(|s| holds(s, f, state))
                .map(|s| s.name.as_str())
                .collect();
            homes.sort_unstable();
            homes.dedup();
            return Err(held_elsewhere(snapshot, q, f, state, &homes));
        }
    }
    if query.operation != Operation::Sum {
        let counted: Vec<&PresetFacts> = queues
            .iter()
            .filter(|q| !skip_unit(query, q))
            .filter_map(|q| q.preset.as_deref())
            .collect();
        let shared = counted.iter().find(|f| f.unit == PresetUnit::Shared);
        if let Some(shared) = shared
            && counted.iter().any(|f| f.unit == PresetUnit::Queue)
        {
            let name = queues
                .iter()
                .find(|q| q.preset.as_deref() == Some(*shared))
                .map_or("", |q| q.name.as_str());
            return Err(Refusal(format!(
                "scalerMetadata.operation: {} over queue {:?} in source {} would compare single \
                 queues with {name:?}, which holds {}'s jobs of every queue together; use \
                 operation: sum (each job counted once, where it lives), or one trigger per queue",
                query.operation.as_str(),
                query.queue.text(),
                snapshot.source,
                shared.preset,
            )));
        }
    }
    Ok(())
}

/// Refuses a query matching a configured key that a preset queue counts
/// (`- key: rq:queue:high` beside `preset: rq`) unless it also matches that
/// queue, whose figures then count the key's jobs once: asked alone, the
/// key is answered by naming the queue to ask for.
pub fn check_counted_keys(snapshot: &Snapshot, queues: &[&QueueSample]) -> Result<(), Refusal> {
    for q in queues {
        let Some(by) = q.counted_in() else {
            continue;
        };
        let counting = |s: &&&QueueSample| {
            s.name == by.queue && s.preset.as_deref().is_some_and(|f| f.preset == by.preset)
        };
        if !queues.iter().any(|s| counting(&s)) {
            return Err(Refusal(format!(
                "scalerMetadata.queue: key {:?} in source {} holds jobs of {} queue {:?}, which \
                 counts them (with the key's counters:), so that no job is counted twice; set \
                 queue: {:?} and preset: {}",
                q.name, snapshot.source, by.preset, by.queue, by.queue, by.preset
            )));
        }
    }
    Ok(())
}

/// The job states mode QueueLength counts on a preset queue: `waiting`
/// unless `state` picks others.
fn asked(query: &ScalerQuery) -> &[JobState] {
    query.states.as_deref().unwrap_or(&[JobState::Waiting])
}

/// Whether `s` is a sample of `f`'s library, in the other unit, holding
/// `state`.
fn holds(s: &QueueSample, f: &PresetFacts, state: JobState) -> bool {
    s.preset
        .as_deref()
        .is_some_and(|o| o.preset == f.preset && o.unit != f.unit && o.states.contains_key(&state))
}

/// The refusal of `state` asked of `q`, which holds none of its own, naming
/// `homes`: the samples holding it (`(all)`), if the snapshot has any.
fn held_elsewhere(
    snapshot: &Snapshot,
    q: &QueueSample,
    f: &PresetFacts,
    state: JobState,
    homes: &[&str],
) -> Refusal {
    let lib = f.preset;
    let queue = &q.name;
    let source = &snapshot.source;
    let shown: Vec<String> = homes.iter().map(|h| format!("{h:?}")).collect();
    let homes = shown.join(" or ");
    Refusal(if homes.is_empty() {
        format!(
            "scalerMetadata.state: {lib} keeps {state} jobs only for all its queues together, \
             in keys source {source} does not report now, not per queue: queue {queue:?} has none \
             of its own (it would read 0); remove {state} from state"
        )
    } else {
        format!(
            "scalerMetadata.state: {lib} keeps {state} jobs only for all its queues together, \
             under queue {homes}, not per queue: queue {queue:?} in source {source} has none of \
             its own (it would read 0); ask queue: {homes} with state: {state} in a trigger of \
             its own, or a glob that also matches {homes} with operation: sum"
        )
    })
}

/// Whether a mode leaves `q` out of its aggregate:
/// - a configured key a preset queue counts (that queue has its jobs);
/// - the keys a library's queues share, in modes Age and WaitTime (no job
///   waits there), and in QueueLength unless a state they hold is asked
///   (their 0 would count as a queue and pull an `avg` down);
/// - in QueueLength, a queue asked only for states its library keeps in the
///   shared keys (counted there: [`check_state_units`] made sure they match).
///
/// Told by the preset's marks, never by a missing `waiting` state, which
/// may only mean its read was refused.
pub fn skip_unit(query: &ScalerQuery, q: &QueueSample) -> bool {
    if q.counted_in().is_some() {
        // Matched with the queue that counts it ([`check_counted_keys`]).
        return true;
    }
    let Some(f) = q.preset.as_deref() else {
        return false;
    };
    let asked = asked(query);
    match (f.unit, query.mode) {
        (PresetUnit::Shared, Mode::Age | Mode::WaitTime) => true,
        (unit, Mode::QueueLength) => {
            !asked.iter().any(|s| f.states.contains_key(s))
                && (unit == PresetUnit::Shared || !f.held_elsewhere(asked).is_empty())
        }
        _ => false,
    }
}
