//! Turning a [`ScalerQuery`] and the latest snapshots into one value.
//!
//! Pure and synchronous: no I/O, no locks held, so handlers never block. A
//! value that is not known (never polled, too old, or a field the backend
//! cannot tell) is an error, never 0: a wrong answer scales production, an
//! error lets KEDA's `fallback` act.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::config::ScalerConfig;
use crate::scaler::finite;
use crate::scaler::metadata::{ListKey, Mode, Operation, ScalerQuery};
use crate::scaler::wait::{self, ServiceFrom, WaitDecision, WaitInputs, WaitParams};
use crate::scaler::{units, wait_inputs};
use crate::snapshot::{
    JobState, NameQuery, PresetKind, QueueSample, QueueType, Reach, Snapshot, Vouched,
};

/// The answer to a query.
#[derive(Debug, Clone, PartialEq)]
pub struct Reading {
    /// The aggregated value (items, seconds or items per second).
    pub value: f64,
    /// The source the matched queues belong to.
    pub source: Arc<str>,
    /// How many queues were aggregated.
    pub matched: usize,
    /// How old the data is.
    pub data_age: Duration,
    /// Mode WaitTime: the model's inputs and answer (`value` is its
    /// replicas); `None` for every other mode.
    pub wait: Option<WaitDecision>,
    /// The source's coverage vouched for every name the query selects:
    /// no reading exists without asking it (`vouch`, through `Coverage::vouch`).
    pub vouched: Vouched,
}

impl Reading {
    /// `IsActive`: above `activationValue`, or for mode WaitTime while
    /// jobs wait or arrive.
    pub fn is_active(&self, query: &ScalerQuery) -> bool {
        match &self.wait {
            Some(d) => d.active,
            None => self.value > query.activation,
        }
    }
}

/// Why a query has no value. Each maps to one gRPC status code.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum QueryError {
    /// The metadata is valid on its own but not against the config or the
    /// data, e.g. an ambiguous name (`INVALID_ARGUMENT`).
    #[error("{0}")]
    InvalidArgument(String),
    /// Nothing matches (`NOT_FOUND`).
    #[error("{0}")]
    NotFound(String),
    /// The data is missing, too old, or does not include this value (`UNAVAILABLE`).
    #[error("{0}")]
    Unavailable(String),
}

/// Checks what can be checked without data: that `source`, if given, is configured.
pub fn check_static(query: &ScalerQuery, snapshots: &[Arc<Snapshot>]) -> Result<(), QueryError> {
    match &query.source {
        Some(name) if !snapshots.iter().any(|s| &*s.source == name) => {
            let names: Vec<&str> = snapshots.iter().map(|s| &*s.source).collect();
            Err(QueryError::InvalidArgument(format!(
                "scalerMetadata.source: no source named {name:?}; configured sources: {}",
                names.join(", ")
            )))
        }
        _ => Ok(()),
    }
}

/// Computes the query's value from the snapshots as of `now`.
pub fn evaluate(
    query: &ScalerQuery,
    snapshots: &[Arc<Snapshot>],
    config: &ScalerConfig,
    now: SystemTime,
) -> Result<Reading, QueryError> {
    evaluate_with(query, snapshots, &NameIndexes::default(), config, now)
}

/// Queue positions by name, one map per queue layout, built on first use
/// and shared by every query: an exact name or a brace glob looks its names
/// up instead of testing every queue (1,000 trigger maps over 4,000 queues
/// made that scan the scaler's main cost).
#[derive(Debug, Default)]
pub struct NameIndexes(std::sync::Mutex<Vec<KeptIndex>>);

/// Positions of each name in one queue list.
type NameIndex = HashMap<String, Vec<u32>>;

/// A queue layout and its index.
type KeptIndex = (ListKey, Arc<NameIndex>);

impl NameIndexes {
    /// Layouts kept; one or two per source are in use at a time.
    const KEEP: usize = 16;

    /// The index of `list` (whose key is `key`), built if it is not kept yet.
    pub fn get(&self, key: &ListKey, list: &[QueueSample]) -> Arc<NameIndex> {
        // A poisoned lock only means a panic elsewhere; the cache is valid.
        let mut kept = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, index)) = kept.iter().find(|(k, _)| k.same(key)) {
            return index.clone();
        }
        let mut index = NameIndex::with_capacity(list.len());
        for (i, q) in list.iter().enumerate() {
            index.entry(q.name.clone()).or_default().push(i as u32);
        }
        let index = Arc::new(index);
        if kept.len() >= Self::KEEP {
            kept.remove(0);
        }
        kept.push((key.clone(), index.clone()));
        index
    }
}

/// [`evaluate`] with the caller's name indexes. Every reading passes
/// [`finite::answer`] here, so none KEDA receives is infinite or huge.
pub fn evaluate_with(
    query: &ScalerQuery,
    snapshots: &[Arc<Snapshot>],
    indexes: &NameIndexes,
    config: &ScalerConfig,
    now: SystemTime,
) -> Result<Reading, QueryError> {
    let reading = read(query, snapshots, indexes, config, now)?;
    finite::answer(reading.value, || {
        format!(
            "{} of {:?} in source {}",
            query.mode,
            query.queue.text(),
            reading.source
        )
    })
    .map_err(QueryError::Unavailable)?;
    Ok(reading)
}

/// `reading`, the answer to a `WaitTime` `query`, decided again knowing
/// `held`, the replicas the HPA holds for the trigger
/// ([`crate::scaler::held`]); any other reading, or `held` unknown, as it
/// is. The model only ever asks less for it ([`wait::Term::Held`]), so the
/// value stays one [`finite::answer`] passed.
pub fn hold(query: &ScalerQuery, reading: Reading, held: Option<wait::Held>) -> Reading {
    let (Some(params), Some(decision), Some(_)) = (&query.wait, reading.wait, held) else {
        return reading;
    };
    let decision = wait::decide(
        params,
        WaitInputs {
            held,
            ..decision.inputs
        },
    );
    Reading {
        value: decision.replicas,
        wait: Some(decision),
        ..reading
    }
}

/// The reading of [`evaluate_with`], before its value is checked.
fn read(
    query: &ScalerQuery,
    snapshots: &[Arc<Snapshot>],
    indexes: &NameIndexes,
    config: &ScalerConfig,
    now: SystemTime,
) -> Result<Reading, QueryError> {
    check_static(query, snapshots)?;
    let candidates: Vec<&Arc<Snapshot>> = snapshots
        .iter()
        .filter(|s| {
            query
                .source
                .as_deref()
                .is_none_or(|name| &*s.source == name)
        })
        .collect();

    // Matching uses each source's last successful poll, even if it is old,
    // so a source that is down still counts for ambiguity.
    let keys: Vec<ListKey> = candidates.iter().map(|s| ListKey::of(s)).collect();
    let memo = query.memo.get_or_compute(keys.clone(), || {
        candidates
            .iter()
            .zip(&keys)
            .map(|(s, k)| matching(query, &s.queues, &indexes.get(k, &s.queues)))
            .collect()
    });
    let matches: Vec<(&Arc<Snapshot>, Vec<&QueueSample>)> = candidates
        .iter()
        .zip(&memo.indices)
        .filter(|(_, idx)| !idx.is_empty())
        .map(|(s, idx)| {
            let qs = idx
                .iter()
                .filter_map(|&i| s.queues.get(i as usize))
                .collect();
            (*s, qs)
        })
        .collect();

    let (snapshot, queues) = match matches.as_slice() {
        [] => return read_absent(query, &candidates, config, now),
        [one] => one,
        several => {
            let names: Vec<&str> = several.iter().map(|(s, _)| &*s.source).collect();
            return Err(QueryError::InvalidArgument(format!(
                "scalerMetadata.source: queue {:?} exists in several sources ({}); set source to one of them",
                query.queue.text(),
                names.join(", ")
            )));
        }
    };

    let data_age = fresh_age(snapshot, config, now)?;
    let vouched = vouch(query, snapshot)?;

    check_one_vhost(query, snapshot, queues)?;

    check_presets(query, snapshot, queues)?;

    let found = Found {
        snapshot,
        data_age,
        vouched,
    };
    if let Some(params) = &query.wait {
        return read_wait(query, params, queues, &found, config, now);
    }

    read_values(query, queues, &found, config, now)
}

/// The one source whose queues a query matched: its snapshot, how old
/// its data is, and what its coverage vouches for.
struct Found<'a> {
    /// The source's snapshot.
    snapshot: &'a Arc<Snapshot>,
    /// The age of its data.
    data_age: Duration,
    /// What its coverage vouched for.
    vouched: Vouched,
}

/// Refuses an exact name (or a glob matching one name) that exists in
/// several vhosts of the one source: `vhost` must pick one.
fn check_one_vhost(
    query: &ScalerQuery,
    snapshot: &Snapshot,
    queues: &[&QueueSample],
) -> Result<(), QueryError> {
    if !query.queue.is_glob() || queues.iter().all(|q| q.name == query.queue.text()) {
        let mut vhosts: Vec<&str> = queues.iter().filter_map(|q| q.vhost()).collect();
        vhosts.sort_unstable();
        vhosts.dedup();
        if vhosts.len() > 1 {
            return Err(QueryError::InvalidArgument(format!(
                "scalerMetadata.vhost: queue {:?} exists in several vhosts of source {} ({}); set vhost to one of them",
                query.queue.text(),
                snapshot.source,
                vhosts.join(", ")
            )));
        }
    }
    Ok(())
}

/// Mode `WaitTime` over the matched `queues`: the model's inputs read
/// from the snapshot, its replicas.
fn read_wait(
    query: &ScalerQuery,
    params: &WaitParams,
    queues: &[&QueueSample],
    found: &Found<'_>,
    config: &ScalerConfig,
    now: SystemTime,
) -> Result<Reading, QueryError> {
    let snapshot = found.snapshot;
    let kept: Vec<&QueueSample> = queues
        .iter()
        .copied()
        .filter(|q| !skip_for_mode(query, q))
        .collect();
    if kept.is_empty() {
        return read_absent(query, &[snapshot], config, now);
    }
    if params.processing_time.is_none() {
        for q in &kept {
            if let Some(why) = q.measures.service_time.unmeasurable_why() {
                return Err(processing_time_required(&q.name, snapshot, why));
            }
        }
    }
    let inputs = wait_inputs::gather(params, query.window, snapshot, &kept)
        .map_err(|e| in_aggregate(query, kept.len(), QueryError::Unavailable(e)))?;
    let decision = wait::decide(params, inputs);
    Ok(Reading {
        value: decision.replicas,
        source: snapshot.source.clone(),
        matched: kept.len(),
        data_age: found.data_age,
        wait: Some(decision),
        vouched: found.vouched,
    })
}

/// Every other mode over the matched `queues`: each one's value, one
/// unknown making the aggregate unknown, combined by `operation`.
fn read_values(
    query: &ScalerQuery,
    queues: &[&QueueSample],
    found: &Found<'_>,
    config: &ScalerConfig,
    now: SystemTime,
) -> Result<Reading, QueryError> {
    let snapshot = found.snapshot;
    let mut values = Vec::with_capacity(queues.len());
    for q in queues {
        if skip_for_mode(query, q) {
            continue;
        }
        let value = if q.queue_type == Some(QueueType::Missing) {
            empty_value(query, snapshot)
        } else {
            queue_value(query, snapshot, q).and_then(|v| {
                finite::input(v, || {
                    format!(
                        "{} of queue {:?} in source {}",
                        query.mode, q.name, snapshot.source
                    )
                })
                .map_err(QueryError::Unavailable)
            })
        };
        // One unknown queue makes the aggregate unknown: a partial sum
        // would under-report and scale down while jobs wait.
        values.push(value.map_err(|e| in_aggregate(query, queues.len(), e))?);
    }
    let Some(values) = Known::new(&values) else {
        // Every match holds no value of this kind (keys a library's queues
        // share, in mode Age): as if nothing matched, so only a source that
        // covers every selected name answers "empty", never a made-up 0.
        return read_absent(query, &[snapshot], config, now);
    };
    Ok(Reading {
        value: combine(query.operation, values),
        source: snapshot.source.clone(),
        matched: values.0.len(),
        data_age: found.data_age,
        wait: None,
        vouched: found.vouched,
    })
}

/// `processingTime` missing for a queue whose service time the exporter
/// does not measure: a metadata error, named, saying why.
fn processing_time_required(queue: &str, s: &Snapshot, why: &str) -> QueryError {
    QueryError::InvalidArgument(format!(
        "scalerMetadata.processingTime: required for queue {queue:?} in source {}: the exporter \
         cannot measure its service time, as {why}; set processingTime to the average worker \
         time per job, such as 2s",
        s.source
    ))
}

/// An unknown queue's error, said as the aggregate's when the query
/// selected several queues.
fn in_aggregate(query: &ScalerQuery, matched: usize, e: QueryError) -> QueryError {
    match e {
        QueryError::Unavailable(why) if matched > 1 => QueryError::Unavailable(format!(
            "{} over the {matched} queues matching {:?} is unknown because {why}",
            if query.mode == Mode::WaitTime {
                "WaitTime"
            } else {
                query.operation.as_str()
            },
            query.queue.text()
        )),
        other => other,
    }
}

/// Refuses `state` on plain keys, a state asked where its library does not
/// keep it ([`units::check_state_units`]), and an exact name that several
/// presets (or a preset and a plain key) report, unless `preset` picks one.
fn check_presets(
    query: &ScalerQuery,
    snapshot: &Snapshot,
    queues: &[&QueueSample],
) -> Result<(), QueryError> {
    units::check_counted_keys(snapshot, queues).map_err(refused)?;
    if query.states.is_some()
        && let Some(plain) = queues
            .iter()
            .find(|q| q.preset.is_none() && q.counted_in().is_none())
    {
        return Err(QueryError::InvalidArgument(format!(
            "scalerMetadata.state: queue {:?} in source {} is not a library preset's queue \
             (only presets have job states); remove state",
            plain.name, snapshot.source
        )));
    }
    units::check_state_units(query, snapshot, queues).map_err(refused)?;
    if query.queue.is_glob() && !queues.iter().all(|q| q.name == query.queue.text()) {
        return Ok(());
    }
    // `None`: a plain key (shown as `(plain key)`, which no preset is named).
    let mut kinds: Vec<Option<PresetKind>> = queues
        .iter()
        .map(|q| q.preset.as_ref().map(|f| f.preset))
        .collect();
    kinds.sort_unstable();
    kinds.dedup();
    if kinds.len() > 1 {
        let mut kinds: Vec<&str> = kinds
            .iter()
            .map(|k| k.map_or("(plain key)", PresetKind::as_str))
            .collect();
        kinds.sort_unstable();
        return Err(QueryError::InvalidArgument(format!(
            "scalerMetadata.preset: queue {:?} exists in several presets of source {} ({}); \
             set preset to one of them",
            query.queue.text(),
            snapshot.source,
            kinds.join(", ")
        )));
    }
    Ok(())
}

/// A refusal of [`units`] as the scaler's error.
fn refused(r: units::Refusal) -> QueryError {
    QueryError::InvalidArgument(r.0)
}

/// Preset samples a mode leaves out: the keys a library's queues share
/// (`(all)`) in modes Age and WaitTime and when QueueLength asks none of
/// their states, and a queue asked only for states kept in those keys
/// ([`units::skip_unit`]).
fn skip_for_mode(query: &ScalerQuery, q: &QueueSample) -> bool {
    units::skip_unit(query, q)
}

/// The job states a QueueLength query counts on a preset queue: `waiting`
/// unless `state` picks others.
fn asked_states(query: &ScalerQuery) -> &[JobState] {
    query.states.as_deref().unwrap_or(&[JobState::Waiting])
}

/// Known values of at least one queue: an aggregate over nothing would be
/// an invented 0. A known empty queue is answered by [`read_absent`] and
/// [`empty_value`], which say why it is empty.
#[derive(Clone, Copy)]
struct Known<'a>(&'a [f64]);

impl<'a> Known<'a> {
    /// `values`, if there is at least one.
    fn new(values: &'a [f64]) -> Option<Self> {
        (!values.is_empty()).then_some(Known(values))
    }
}

/// Several queues' values as one.
fn combine(operation: Operation, values: Known<'_>) -> f64 {
    let v = values.0;
    match operation {
        Operation::Sum => v.iter().sum(),
        Operation::Max => v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        Operation::Avg => v.iter().sum::<f64>() / v.len() as f64,
    }
}

/// How far `snapshot`'s configuration reaches over the query's names.
fn reach(query: &ScalerQuery, snapshot: &Snapshot) -> Reach {
    let selects = |name: &str| query.queue.matches(name);
    snapshot.scope.reach(&name_query(query, &selects))
}

/// The query's names as scopes and coverage take them.
fn name_query<'a>(query: &'a ScalerQuery, selects: &'a dyn Fn(&str) -> bool) -> NameQuery<'a> {
    NameQuery {
        text: query.queue.text(),
        is_glob: query.queue.is_glob(),
        literal_prefix: query.queue.literal_prefix(),
        selects,
        vhost: query.vhost.as_deref(),
        preset: query.preset,
    }
}

/// Whether `snapshot`'s last poll read every name the query selects:
/// `UNAVAILABLE` naming what it left unread otherwise. A sum over a glob
/// missing one unread key would under-report, and an unread name is not
/// an empty queue.
fn vouch(query: &ScalerQuery, snapshot: &Snapshot) -> Result<Vouched, QueryError> {
    let selects = |name: &str| query.queue.matches(name);
    snapshot
        .coverage
        .vouch(&name_query(query, &selects))
        .map_err(|gap| {
            QueryError::Unavailable(format!(
                "{} of {:?} in source {} is unknown: {}",
                query.mode,
                query.queue.text(),
                snapshot.source,
                gap.cause
            ))
        })
}

/// The answer when no queue in the data matches. A source whose
/// configuration covers every selected name reads as an empty queue (Redis
/// deletes drained keys); otherwise `NOT_FOUND`, or `UNAVAILABLE` when a
/// source that could hold the queue has no fresh data. Sources whose
/// configuration can never produce the name are left out, so neither a typo
/// nor a broken unrelated source hides the other.
fn read_absent(
    query: &ScalerQuery,
    candidates: &[&Arc<Snapshot>],
    config: &ScalerConfig,
    now: SystemTime,
) -> Result<Reading, QueryError> {
    let reached: Vec<(&Arc<Snapshot>, Reach)> = candidates
        .iter()
        .map(|s| (*s, reach(query, s)))
        .filter(|(_, r)| *r != Reach::Never)
        .collect();
    // A name the last poll may have left unread is unknown, not absent.
    for (s, _) in &reached {
        if s.last_success.is_some() {
            vouch(query, s)?;
        }
    }
    let covering: Vec<&Arc<Snapshot>> = reached
        .iter()
        .filter(|(_, r)| *r == Reach::All)
        .map(|(s, _)| *s)
        .collect();
    match covering.as_slice() {
        [] => {}
        [snapshot] => return read_empty(query, snapshot, config, now),
        several => {
            let names: Vec<&str> = several.iter().map(|s| &*s.source).collect();
            return Err(QueryError::InvalidArgument(format!(
                "scalerMetadata.source: queue {:?} may be in several sources ({}); set source to one of them",
                query.queue.text(),
                names.join(", ")
            )));
        }
    }
    for (s, _) in &reached {
        if let Err(QueryError::Unavailable(why)) = fresh_age(s, config, now) {
            return Err(QueryError::Unavailable(format!(
                "no queue matches {:?} in the data at hand, and {why}",
                query.queue.text()
            )));
        }
    }
    Err(not_found(query, reached.is_empty()))
}

/// A name the one covering source's configuration vouches for but no
/// sample holds: an empty queue (its WaitTime 0 replicas, with the
/// service time `processingTime` says or none needed).
fn read_empty(
    query: &ScalerQuery,
    snapshot: &Snapshot,
    config: &ScalerConfig,
    now: SystemTime,
) -> Result<Reading, QueryError> {
    // A covered name with no sample: a drained queue the source would
    // measure needs no service time (nothing waits or arrives); one it
    // would not (a plain key, a library that keeps no finished jobs, as
    // the source's scope says) has none, so the trigger needs
    // `processingTime`.
    let selects = |name: &str| query.queue.matches(name);
    if let Some(p) = &query.wait
        && p.processing_time.is_none()
        && let Some(why) = snapshot
            .scope
            .absent_service(&name_query(query, &selects))
            .unmeasurable_why()
    {
        return Err(processing_time_required(query.queue.text(), snapshot, why));
    }
    let data_age = fresh_age(snapshot, config, now)?;
    let vouched = vouch(query, snapshot)?;
    let value = empty_value(query, snapshot)?;
    // Nothing waits, and the source's readings span the window
    // (empty_value checked) with no arrivals at these names.
    let wait = query.wait.as_ref().map(|p| {
        let (service_time, service_from) = match p.processing_time {
            Some(t) => (t.as_secs_f64(), ServiceFrom::Set),
            None => (0.0, ServiceFrom::Unneeded),
        };
        wait::decide(
            p,
            WaitInputs {
                backlog: 0.0,
                oldest_age: 0.0,
                newest_age: 0.0,
                arrival_rate: 0.0,
                service_time,
                service_from,
                finishing: None,
                held: None,
            },
        )
    });
    Ok(Reading {
        value,
        source: snapshot.source.clone(),
        matched: 0,
        data_age,
        wait,
        vouched,
    })
}

/// An empty queue's value: 0 for every count and for Age (nothing waits);
/// a rate, and WaitTime's arrival rate, is 0 once the source's readings
/// span the window, unknown before.
fn empty_value(query: &ScalerQuery, s: &Snapshot) -> Result<f64, QueryError> {
    if query.mode.uses_window() && !s.history.spans(query.window) {
        return Err(QueryError::Unavailable(format!(
            "{} of {:?} in source {} is unknown until two polls lie within window {}",
            query.mode,
            query.queue.text(),
            s.source,
            humantime::format_duration(query.window)
        )));
    }
    Ok(0.0)
}

/// Queues of one snapshot that the query selects.
fn matching(query: &ScalerQuery, queues: &[QueueSample], index: &NameIndex) -> Vec<u32> {
    // A finite set of names is looked up; a wildcard glob tests every name.
    let positions: Vec<u32> = match query.queue.names() {
        Some(names) => {
            let mut p: Vec<u32> = names
                .iter()
                .filter_map(|n| index.get(*n))
                .flatten()
                .copied()
                .collect();
            p.sort_unstable();
            p.dedup();
            p
        }
        None => (0..queues.len() as u32).collect(),
    };
    positions
        .into_iter()
        .filter_map(|i| queues.get(i as usize).map(|q| (i, q)))
        .filter(|(_, q)| match &query.vhost {
            Some(v) => q.vhost() == Some(v.as_str()),
            None => true,
        })
        .filter(|(_, q)| match &query.preset {
            Some(p) => q.preset.as_ref().is_some_and(|f| f.preset == *p),
            None => true,
        })
        .filter(|(_, q)| query.queue.matches(&q.name))
        .map(|(i, _)| i)
        .collect()
}

/// The age of a snapshot's data, or `UNAVAILABLE` if it has none or it is
/// older than the staleness limit.
fn fresh_age(s: &Snapshot, config: &ScalerConfig, now: SystemTime) -> Result<Duration, QueryError> {
    let limit = config.max_staleness_for(s.poll_interval);
    match s.data_age(now) {
        None => Err(QueryError::Unavailable(format!(
            "source {} has not polled successfully yet",
            s.source
        ))),
        Some(age) if age > limit => Err(QueryError::Unavailable(format!(
            "source {} data is {:.1}s old, older than scaler.max_staleness {}{}",
            s.source,
            age.as_secs_f64(),
            humantime::format_duration(limit),
            if s.up { "" } else { " (the source is down)" }
        ))),
        Some(age) => Ok(age),
    }
}

/// `NOT_FOUND`, naming the query's scope; `unreachable` when no configured
/// source could ever produce the name (a typo, most likely).
fn not_found(query: &ScalerQuery, unreachable: bool) -> QueryError {
    let scope = match (&query.source, &query.vhost) {
        (Some(s), Some(v)) => format!(" in source {s}, vhost {v:?}"),
        (Some(s), None) => format!(" in source {s}"),
        (None, Some(v)) => format!(" in vhost {v:?}"),
        (None, None) => String::new(),
    };
    let why = if unreachable {
        "; no configured key, pattern or queue filter can produce that name"
    } else {
        ""
    };
    QueryError::NotFound(format!(
        "no queue matches scalerMetadata.queue {:?}{scope}{why}",
        query.queue.text()
    ))
}

/// One queue's value for the query's mode.
fn queue_value(query: &ScalerQuery, s: &Snapshot, q: &QueueSample) -> Result<f64, QueryError> {
    let unknown = |hint: &str| {
        QueryError::Unavailable(format!(
            "{} of queue {:?} in source {} is unknown{hint}",
            query.mode, q.name, s.source
        ))
    };
    let count = |v: Option<u64>, hint: &str| v.map(|v| v as f64).ok_or_else(|| unknown(hint));
    // A queue the source says its last poll could not read.
    let unread = q.measures.unread.map_or(String::new(), |u| {
        format!(
            ": the last poll could not read this key ({}; \
             see queue_exporter_poll_errors_total)",
            u.why()
        )
    });
    let unread = unread.as_str();
    match query.mode {
        // A preset queue: `waiting` unless `state` picks others; a state
        // the library does not have holds no jobs.
        Mode::QueueLength => match &q.preset {
            Some(f) => {
                let states = asked_states(query);
                f.depth_of(states).map(|n| n as f64).ok_or_else(|| {
                    let names: Vec<&str> = f
                        .unknown_states(states)
                        .iter()
                        .map(|s| s.as_str())
                        .collect();
                    unknown(&format!(
                        ": the last poll could not read its {} jobs (Redis refused or \
                         failed a command for one of the {} preset's keys of this state; \
                         see queue_exporter_poll_errors_total)",
                        names.join(", "),
                        f.preset
                    ))
                })
            }
            None => count(q.depth, unread),
        },
        Mode::Ready => count(q.ready, unread),
        Mode::Unacked => count(
            q.broker().unacked,
            " (only RabbitMQ reports unacknowledged messages)",
        ),
        Mode::Scheduled => count(
            q.scheduled,
            " (only zsets with `score: timestamp` have scheduled items)",
        ),
        // What an unknown age means, where the library says (its jobs
        // carry no enqueue time), else what a plain key needs.
        Mode::Age => {
            q.oldest_age_seconds.ok_or_else(|| {
                let why = q.preset.as_ref().and_then(|f| f.age_unknown_why);
                unknown(why.unwrap_or(
                    " (lists need `age:` in the exporter config, zsets `score: timestamp`)",
                ))
            })
        }
        Mode::PublishRate | Mode::DeliverRate => {
            let rate = if query.mode == Mode::PublishRate {
                s.history.rate(&q.id(), query.window, |c| c.published)
            } else {
                s.history.rate(&q.id(), query.window, |c| c.delivered)
            };
            rate.ok_or_else(|| {
                unknown(&format!(
                    " (needs its counter in two polls within window {}; Redis counts only stream additions)",
                    humantime::format_duration(query.window)
                ))
            })
        }
        Mode::Lag => group_lag(query, s, q),
        // Answered by `wait_inputs` before any single value is asked for.
        Mode::WaitTime => Err(QueryError::InvalidArgument(
            "scalerMetadata.mode: WaitTime has no per-queue value".into(),
        )),
    }
}

/// The lag of the query's consumer group on stream `q`.
fn group_lag(query: &ScalerQuery, s: &Snapshot, q: &QueueSample) -> Result<f64, QueryError> {
    if q.groups.is_empty() {
        // The last poll could not read this key, so its groups are
        // unknown, not absent.
        if let Some(u) = q.measures.unread {
            return Err(QueryError::Unavailable(format!(
                "Lag of queue {:?} in source {} is unknown: the last poll could not read it \
                 ({}; see queue_exporter_poll_errors_total)",
                q.name,
                s.source,
                u.why()
            )));
        }
        let what = match &q.queue_type {
            Some(QueueType::Stream) => "a stream without consumer groups".to_string(),
            Some(k) => format!("a {}, not a stream with consumer groups", k.as_str()),
            None => match &q.preset {
                Some(f) => format!(
                    "a {} preset's queue, not a stream with consumer groups",
                    f.preset
                ),
                None => "not a stream with consumer groups".to_string(),
            },
        };
        return Err(QueryError::NotFound(format!(
            "mode Lag: queue {:?} in source {} is {what}",
            q.name, s.source
        )));
    }
    let names = || {
        q.groups
            .iter()
            .map(|g| g.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let group = match &query.group {
        Some(name) => q.groups.iter().find(|g| &g.name == name).ok_or_else(|| {
            QueryError::NotFound(format!(
                "stream {:?} in source {} has no consumer group {name:?}; groups: {}",
                q.name,
                s.source,
                names()
            ))
        })?,
        None => match q.groups.as_slice() {
            [only] => only,
            _ => {
                return Err(QueryError::InvalidArgument(format!(
                    "scalerMetadata.group: stream {:?} has several consumer groups ({}); set group to one of them",
                    q.name,
                    names()
                )));
            }
        },
    };
    group.lag.map(|l| l as f64).ok_or_else(|| {
        QueryError::Unavailable(format!(
            "Redis cannot tell the lag of group {:?} on stream {:?} (entries were deleted or trimmed)",
            group.name, q.name
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scaler::metadata::parse_known as parse;
    use crate::snapshot::{
        ArrivalsMeasure, CounterPoint, Counters, GroupSample, Measures, PresetUnit, ServiceMeasure,
        SourceKind, Unread,
    };
    use std::collections::HashMap;

    fn q(pairs: &[(&str, &str)]) -> ScalerQuery {
        let meta: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        parse(&meta).unwrap()
    }

    /// A plain list as the Redis source reads it.
    fn sample(name: &str, depth: u64) -> QueueSample {
        QueueSample {
            depth: Some(depth),
            ready: Some(depth),
            queue_type: Some(QueueType::List),
            measures: Measures {
                unread: None,
                service_time: ServiceMeasure::PlainKey,
                arrivals: ArrivalsMeasure::NoKeyCounter,
            },
            ..QueueSample::named(name)
        }
    }

    fn snap(
        name: &str,
        queues: Vec<QueueSample>,
        age: Option<Duration>,
        now: SystemTime,
    ) -> Arc<Snapshot> {
        let mut s = Snapshot::initial(name, SourceKind::Redis, Duration::from_secs(1));
        s.polled = true;
        s.up = age.is_some();
        s.last_success = age.map(|a| now - a);
        s.queues = Arc::new(queues);
        Arc::new(s)
    }

    fn cfg() -> ScalerConfig {
        ScalerConfig::default()
    }

    /// A scope that answers the same reach for every query, of plain Redis
    /// keys (whose service time it says is never measured).
    #[derive(Debug)]
    struct Fixed(Reach);

    impl crate::snapshot::QueueScope for Fixed {
        fn reach(&self, _query: &NameQuery<'_>) -> Reach {
            self.0
        }

        fn absent_service(&self, _query: &NameQuery<'_>) -> ServiceMeasure {
            ServiceMeasure::PlainKey
        }
    }

    fn scoped(s: Arc<Snapshot>, reach: Reach) -> Arc<Snapshot> {
        Arc::new((*s).clone().with_scope(Arc::new(Fixed(reach))))
    }

    fn preset(name: &str, lib: &str, states: &[(JobState, u64)]) -> QueueSample {
        QueueSample {
            preset: Some(Box::new(crate::snapshot::PresetFacts {
                preset: crate::sources::redis::presets::library::named(lib)
                    .unwrap()
                    .kind(),
                states: states.iter().map(|(s, n)| (*s, Some(*n))).collect(),
                ..Default::default()
            })),
            // As the source sets it for a library that keeps no finished jobs.
            measures: Measures {
                unread: None,
                service_time: ServiceMeasure::NoFinishedJobs,
                arrivals: ArrivalsMeasure::Counted,
            },
            ..QueueSample::named(name)
        }
    }

    #[test]
    fn a_preset_queue_reads_waiting_or_the_listed_states() {
        let now = SystemTime::now();
        let s = snap(
            "main",
            vec![
                preset(
                    "default",
                    "rq",
                    &[
                        (JobState::Waiting, 3),
                        (JobState::Delayed, 2),
                        (JobState::Active, 1),
                    ],
                ),
                preset("default", "sidekiq", &[(JobState::Waiting, 7)]),
                preset("emails", "rq", &[(JobState::Waiting, 0)]),
                sample("plain", 4),
            ],
            Some(Duration::ZERO),
            now,
        );
        let eval =
            |pairs: &[(&str, &str)]| evaluate(&q(pairs), std::slice::from_ref(&s), &cfg(), now);
        assert_eq!(
            eval(&[("queue", "default"), ("preset", "rq")])
                .unwrap()
                .value,
            3.0
        );
        assert_eq!(
            eval(&[
                ("queue", "default"),
                ("preset", "rq"),
                ("state", "waiting,delayed")
            ])
            .unwrap()
            .value,
            5.0
        );
        // A state the library lacks holds no jobs.
        assert_eq!(
            eval(&[
                ("queue", "default"),
                ("preset", "sidekiq"),
                ("state", "completed")
            ])
            .unwrap()
            .value,
            0.0
        );
        // A drained queue still in the registry reads 0.
        assert_eq!(eval(&[("queue", "emails")]).unwrap().value, 0.0);
        let e = eval(&[("queue", "default")]).unwrap_err();
        assert!(
            matches!(&e, QueryError::InvalidArgument(m) if m.starts_with("scalerMetadata.preset: ") && m.contains("rq, sidekiq")),
            "{e}"
        );
        let e = eval(&[("queue", "plain"), ("state", "waiting")]).unwrap_err();
        assert!(
            matches!(&e, QueryError::InvalidArgument(m) if m.starts_with("scalerMetadata.state: ")),
            "{e}"
        );
    }

    /// A preset sample whose `waiting` read was refused, as `read` makes it.
    fn refused_waiting(name: &str) -> QueueSample {
        let mut q = preset(name, "bullmq", &[(JobState::Delayed, 2)]);
        if let Some(f) = q.preset.as_mut() {
            f.states.insert(JobState::Waiting, None);
        }
        q
    }

    #[test]
    fn a_preset_state_that_could_not_be_read_is_unavailable_naming_it() {
        let now = SystemTime::now();
        let s = scoped(
            snap(
                "main",
                vec![refused_waiting("email")],
                Some(Duration::ZERO),
                now,
            ),
            Reach::All,
        );
        let eval =
            |pairs: &[(&str, &str)]| evaluate(&q(pairs), std::slice::from_ref(&s), &cfg(), now);
        for pairs in [
            &[("queue", "email")][..],
            &[("queue", "email"), ("state", "delayed,waiting")][..],
            &[("queue", "e*"), ("operation", "max")][..],
        ] {
            let e = eval(pairs).unwrap_err();
            assert!(
                matches!(&e, QueryError::Unavailable(m) if m.contains("\"email\"") && m.contains("its waiting jobs")),
                "{pairs:?}: {e}"
            );
        }
        // The states that were read still answer.
        let r = eval(&[("queue", "email"), ("state", "delayed")]).unwrap();
        assert_eq!(r.value, 2.0);
        // Mode Age: a queue whose waiting jobs are unknown is not a set of
        // shared keys; its unknown age is UNAVAILABLE, not left out as 0.
        let e = eval(&[("queue", "email"), ("mode", "Age")]).unwrap_err();
        assert!(matches!(e, QueryError::Unavailable(_)), "{e}");
    }

    #[test]
    fn shared_keys_have_no_age_and_alone_are_as_if_nothing_matched() {
        let now = SystemTime::now();
        let mut all = preset("(all)", "sidekiq", &[(JobState::Retry, 3)]);
        if let Some(f) = all.preset.as_mut() {
            f.unit = PresetUnit::Shared;
        }
        let mut default = preset("default", "sidekiq", &[(JobState::Waiting, 1)]);
        default.oldest_age_seconds = Some(7.0);
        let s = snap("main", vec![all, default], Some(Duration::ZERO), now);
        let age = |queue: &str, s: &Arc<Snapshot>| {
            evaluate(
                &q(&[("queue", queue), ("mode", "Age"), ("operation", "max")]),
                std::slice::from_ref(s),
                &cfg(),
                now,
            )
        };
        assert_eq!(age("*", &s).unwrap().value, 7.0);
        assert_eq!(age("*", &s).unwrap().matched, 1);
        // Only shared keys match: no value was read, so no 0 is made up;
        // the scope decides, as for a name with no data.
        let e = age("(all)", &s).unwrap_err();
        assert!(matches!(e, QueryError::NotFound(_)), "{e}");
        let covered = scoped(s.clone(), Reach::All);
        assert_eq!(age("(all)", &covered).unwrap().value, 0.0);
    }

    #[test]
    fn shared_keys_count_only_for_the_states_they_hold() {
        let now = SystemTime::now();
        let mut all = preset("(all)", "sidekiq", &[(JobState::Retry, 3)]);
        if let Some(f) = all.preset.as_mut() {
            f.unit = PresetUnit::Shared;
        }
        let a = preset(
            "a",
            "sidekiq",
            &[(JobState::Waiting, 4), (JobState::Retry, 0)],
        );
        let b = preset("b", "sidekiq", &[(JobState::Waiting, 8)]);
        let s = snap("main", vec![all, a, b], Some(Duration::ZERO), now);
        let length = |pairs: &[(&str, &str)]| {
            evaluate(&q(pairs), std::slice::from_ref(&s), &cfg(), now).unwrap()
        };
        // Waiting jobs: an average over the two queues, not over three.
        let avg = length(&[("queue", "*"), ("operation", "avg")]);
        assert_eq!((avg.value, avg.matched), (6.0, 2));
        // Retries live in the shared keys: they count there.
        let retry = length(&[("queue", "*"), ("operation", "sum"), ("state", "retry")]);
        assert_eq!((retry.value, retry.matched), (3.0, 3));
    }

    #[test]
    fn what_the_source_says_it_cannot_measure_is_named_in_the_answer() {
        let now = SystemTime::now();
        let mut plain = sample("plain", 4);
        plain.oldest_age_seconds = Some(1.0);
        let mut libs = preset("lib", "rq", &[(JobState::Waiting, 4)]);
        libs.oldest_age_seconds = Some(1.0);
        libs.measures.arrivals = ArrivalsMeasure::NoLibraryCounter;
        let s = snap("main", vec![plain, libs], Some(Duration::ZERO), now);
        let wait = |queue: &str, processing: &str| {
            let e = evaluate(
                &q(&[
                    ("queue", queue),
                    ("mode", "WaitTime"),
                    ("targetWait", "10s"),
                    ("processingTime", processing),
                ]),
                std::slice::from_ref(&s),
                &cfg(),
                now,
            );
            e.unwrap_err().to_string()
        };
        // Arrivals: the source's why, then what would measure them.
        for (queue, why) in [
            (
                "plain",
                "a plain Redis key keeps no count of what was added",
            ),
            ("lib", "its library keeps neither a job id counter"),
        ] {
            let m = wait(queue, "1s");
            assert!(
                m.contains("its arrival rate is unknown: ")
                    && m.contains(why)
                    && m.contains("(needs a publish counter"),
                "{queue}: {m}"
            );
        }
        // A queue the source read, its arrivals counted, but whose read of
        // this poll failed: its backlog is unknown, naming why.
        let unread = QueueSample {
            measures: Measures {
                unread: Some(Unread::RedisCommand),
                ..Measures::default()
            },
            ..QueueSample::named("gone")
        };
        let s = snap("main", vec![unread], Some(Duration::ZERO), now);
        let e = evaluate(
            &q(&[("queue", "gone")]),
            std::slice::from_ref(&s),
            &cfg(),
            now,
        );
        assert!(
            matches!(&e, Err(QueryError::Unavailable(m))
                if m.contains("could not read this key (Redis refused or failed its command")),
            "{e:?}"
        );
    }

    #[test]
    fn one_unknown_queue_makes_sum_max_and_avg_unavailable_naming_it() {
        let now = SystemTime::now();
        let unread = QueueSample {
            queue_type: None,
            measures: Measures {
                unread: Some(Unread::RedisCommand),
                ..Measures::default()
            },
            ..QueueSample::named("jobs:b")
        };
        let snaps = [snap(
            "main",
            vec![sample("jobs:a", 2), unread, sample("jobs:c", 7)],
            Some(Duration::ZERO),
            now,
        )];
        for op in ["sum", "max", "avg"] {
            for mode in ["QueueLength", "Ready"] {
                let e = evaluate(
                    &q(&[("queue", "jobs:*"), ("operation", op), ("mode", mode)]),
                    &snaps,
                    &cfg(),
                    now,
                )
                .unwrap_err();
                assert!(
                    matches!(&e, QueryError::Unavailable(m)
                        if m.starts_with(&format!("{op} over the 3 queues matching \"jobs:*\""))
                            && m.contains("queue \"jobs:b\"")
                            && m.contains("could not read this key")),
                    "{op} {mode}: {e}"
                );
            }
        }
    }

    #[test]
    fn a_name_the_poll_left_unread_is_unavailable_even_where_the_scope_covers_it() {
        use crate::snapshot::{Coverage, ExactNames, Gap, GapKind};
        let now = SystemTime::now();
        let s = scoped(
            snap("main", vec![sample("jobs:a", 2)], Some(Duration::ZERO), now),
            Reach::All,
        );
        let mut s = (*s).clone();
        s.coverage = Arc::new(Coverage::with_gaps(vec![Gap::new(
            GapKind::MaxKeys,
            ExactNames(["jobs:b".to_string()].into()),
            "1 key beyond max_keys",
        )]));
        let snaps = [Arc::new(s)];
        for text in ["jobs:b", "jobs:*", "j*"] {
            for mode in ["QueueLength", "Age"] {
                let e = evaluate(&q(&[("queue", text), ("mode", mode)]), &snaps, &cfg(), now)
                    .unwrap_err();
                assert!(
                    matches!(&e, QueryError::Unavailable(m) if m.contains("1 key beyond max_keys")),
                    "{text} {mode}: {e}"
                );
            }
        }
        // A read name, an absent covered name and a glob no gap reaches answer.
        let read = evaluate(&q(&[("queue", "jobs:a")]), &snaps, &cfg(), now).unwrap();
        assert_eq!(read.value, 2.0);
        let empty = evaluate(&q(&[("queue", "mail:x")]), &snaps, &cfg(), now).unwrap();
        assert_eq!((empty.value, empty.matched), (0.0, 0));
        let glob = evaluate(&q(&[("queue", "jobs:a*")]), &snaps, &cfg(), now).unwrap();
        assert_eq!(glob.value, 2.0);
    }

    #[test]
    fn a_covered_name_without_data_is_an_empty_queue_in_every_mode() {
        let now = SystemTime::now();
        let fresh = scoped(snap("main", vec![], Some(Duration::ZERO), now), Reach::All);
        for mode in ["QueueLength", "Ready", "Unacked", "Scheduled", "Age", "Lag"] {
            for op in ["sum", "max", "avg"] {
                let r = evaluate(
                    &q(&[("queue", "jp:*"), ("mode", mode), ("operation", op)]),
                    std::slice::from_ref(&fresh),
                    &cfg(),
                    now,
                )
                .unwrap();
                assert_eq!((r.value, r.matched), (0.0, 0), "{mode} {op}");
            }
        }
        // A rate needs readings spanning the window first.
        let rate = q(&[
            ("queue", "jp:*"),
            ("mode", "PublishRate"),
            ("window", "10s"),
        ]);
        let e = evaluate(&rate, std::slice::from_ref(&fresh), &cfg(), now).unwrap_err();
        assert!(matches!(e, QueryError::Unavailable(_)), "{e}");
        let mut spanned = (*fresh).clone();
        let empty_point = |at| CounterPoint {
            at,
            counters: HashMap::new(),
            flows: HashMap::new(),
        };
        spanned.history = Arc::new(
            spanned
                .history
                .with_point(empty_point(now - Duration::from_secs(5)))
                .with_point(empty_point(now)),
        );
        let r = evaluate(&rate, &[Arc::new(spanned)], &cfg(), now).unwrap();
        assert_eq!(r.value, 0.0);

        // Stale data never reads 0.
        let stale = scoped(
            snap("main", vec![], Some(Duration::from_secs(60)), now),
            Reach::All,
        );
        let e = evaluate(&q(&[("queue", "jp:*")]), &[stale], &cfg(), now).unwrap_err();
        assert!(matches!(e, QueryError::Unavailable(_)), "{e}");
    }

    #[test]
    fn only_sources_that_could_hold_the_name_decide_not_found_or_unavailable() {
        let now = SystemTime::now();
        let healthy = scoped(
            snap("redis", vec![], Some(Duration::ZERO), now),
            Reach::Never,
        );
        let down_unrelated = scoped(snap("rabbit", vec![], None, now), Reach::Never);
        let e = evaluate(
            &q(&[("queue", "typo")]),
            &[healthy.clone(), down_unrelated],
            &cfg(),
            now,
        )
        .unwrap_err();
        assert!(matches!(e, QueryError::NotFound(_)), "{e}");

        let down_related = scoped(snap("rabbit", vec![], None, now), Reach::Some);
        let e = evaluate(
            &q(&[("queue", "typo")]),
            &[healthy, down_related],
            &cfg(),
            now,
        )
        .unwrap_err();
        assert!(
            matches!(&e, QueryError::Unavailable(m) if m.contains("source rabbit")),
            "{e}"
        );
    }

    #[test]
    fn two_sources_covering_the_name_need_source() {
        let now = SystemTime::now();
        let a = scoped(snap("a", vec![], Some(Duration::ZERO), now), Reach::All);
        let b = scoped(snap("b", vec![], Some(Duration::ZERO), now), Reach::All);
        let e = evaluate(
            &q(&[("queue", "jp:*")]),
            &[a.clone(), b.clone()],
            &cfg(),
            now,
        )
        .unwrap_err();
        assert!(
            matches!(&e, QueryError::InvalidArgument(m) if m.starts_with("scalerMetadata.source")),
            "{e}"
        );
        let r = evaluate(
            &q(&[("queue", "jp:*"), ("source", "b")]),
            &[a, b],
            &cfg(),
            now,
        )
        .unwrap();
        assert_eq!((&*r.source, r.value), ("b", 0.0));
    }

    #[test]
    fn sum_max_avg_over_a_glob() {
        let now = SystemTime::now();
        let snaps = [snap(
            "main",
            vec![
                sample("jobs:a", 2),
                sample("jobs:b", 7),
                sample("other", 100),
            ],
            Some(Duration::ZERO),
            now,
        )];
        let v = |op| {
            evaluate(
                &q(&[("queue", "jobs:*"), ("operation", op)]),
                &snaps,
                &cfg(),
                now,
            )
            .unwrap()
        };
        assert_eq!(v("sum").value, 9.0);
        assert_eq!(v("max").value, 7.0);
        assert_eq!(v("avg").value, 4.5);
        assert_eq!(v("sum").matched, 2);
    }

    #[test]
    fn staleness_and_never_polled_are_unavailable() {
        let now = SystemTime::now();
        let stale = [snap(
            "main",
            vec![sample("w", 1)],
            Some(Duration::from_secs(10)),
            now,
        )];
        assert!(matches!(
            evaluate(&q(&[("queue", "w")]), &stale, &cfg(), now),
            Err(QueryError::Unavailable(_))
        ));
        let never = [snap("main", vec![], None, now)];
        assert!(matches!(
            evaluate(&q(&[("queue", "w")]), &never, &cfg(), now),
            Err(QueryError::Unavailable(_))
        ));
        let fresh = [snap(
            "main",
            vec![sample("w", 1)],
            Some(Duration::ZERO),
            now,
        )];
        assert!(matches!(
            evaluate(&q(&[("queue", "x")]), &fresh, &cfg(), now),
            Err(QueryError::NotFound(_))
        ));
    }

    #[test]
    fn ambiguity_needs_source_or_vhost() {
        let now = SystemTime::now();
        let snaps = [
            snap("a", vec![sample("w", 1)], Some(Duration::ZERO), now),
            snap("b", vec![sample("w", 2)], Some(Duration::ZERO), now),
        ];
        let e = evaluate(&q(&[("queue", "w")]), &snaps, &cfg(), now).unwrap_err();
        assert!(
            matches!(&e, QueryError::InvalidArgument(m) if m.starts_with("scalerMetadata.source")),
            "{e}"
        );
        let r = evaluate(&q(&[("queue", "w"), ("source", "b")]), &snaps, &cfg(), now).unwrap();
        assert_eq!(r.value, 2.0);
        let e = evaluate(&q(&[("queue", "w"), ("source", "zz")]), &snaps, &cfg(), now).unwrap_err();
        assert!(
            matches!(&e, QueryError::InvalidArgument(m) if m.contains("configured sources: a, b")),
            "{e}"
        );

        let mut in_v1 = sample("w", 1);
        in_v1.broker_mut().vhost = "v1".into();
        let mut in_v2 = sample("w", 3);
        in_v2.broker_mut().vhost = "v2".into();
        let rabbit = [snap("r", vec![in_v1, in_v2], Some(Duration::ZERO), now)];
        let e = evaluate(&q(&[("queue", "w")]), &rabbit, &cfg(), now).unwrap_err();
        assert!(
            matches!(&e, QueryError::InvalidArgument(m) if m.starts_with("scalerMetadata.vhost")),
            "{e}"
        );
        let r = evaluate(&q(&[("queue", "w"), ("vhost", "v2")]), &rabbit, &cfg(), now).unwrap();
        assert_eq!(r.value, 3.0);
    }

    #[test]
    fn values_beyond_the_cap_never_reach_keda() {
        let now = SystemTime::now();
        let mut aged = sample("j:aged", 1);
        aged.oldest_age_seconds = Some(f64::INFINITY);
        let snaps = [snap(
            "main",
            vec![
                sample("j:a", 600_000_000_000),
                sample("j:b", 600_000_000_000),
                aged,
            ],
            Some(Duration::ZERO),
            now,
        )];
        let read = |pairs: &[(&str, &str)]| evaluate(&q(pairs), &snaps, &cfg(), now);
        // Each queue is within the cap, their sum is not.
        let max = read(&[("queue", "j:{a,b}"), ("operation", "max")]).unwrap();
        assert_eq!(max.value, 6e11);
        let e = read(&[("queue", "j:{a,b}")]).unwrap_err();
        assert_eq!(
            e,
            QueryError::Unavailable(
                "QueueLength of \"j:{a,b}\" in source main is 1.2e12, beyond the cap of 1e12: \
                 the scaler sends KEDA only finite values from 0 to 1e12 (KEDA turns them into \
                 int64 milli-units)"
                    .into()
            )
        );
        // An infinite input is named where it is read.
        let e = read(&[("queue", "j:aged"), ("mode", "Age")]).unwrap_err();
        let QueryError::Unavailable(m) = e else {
            panic!("{e:?}")
        };
        assert!(
            m.starts_with("Age of queue \"j:aged\" in source main is inf, not a finite number"),
            "{m}"
        );
    }

    #[test]
    fn unknown_values_are_unavailable_never_zero() {
        let now = SystemTime::now();
        let snaps = [snap(
            "main",
            vec![sample("w", 4)],
            Some(Duration::ZERO),
            now,
        )];
        for mode in ["Age", "Unacked", "Scheduled", "PublishRate", "DeliverRate"] {
            let e =
                evaluate(&q(&[("queue", "w"), ("mode", mode)]), &snaps, &cfg(), now).unwrap_err();
            assert!(matches!(e, QueryError::Unavailable(_)), "{mode}: {e}");
        }
    }

    #[test]
    fn rates_and_lag() {
        let now = SystemTime::now();
        let mut stream = QueueSample {
            queue_type: Some(QueueType::Stream),
            depth: Some(10),
            groups: vec![
                GroupSample {
                    name: "g1".into(),
                    lag: Some(4),
                    pending: Some(0),
                    consumers: Some(1),
                },
                GroupSample {
                    name: "g2".into(),
                    lag: None,
                    pending: Some(0),
                    consumers: Some(1),
                },
            ],
            ..QueueSample::named("s")
        };
        stream.set_counters(Counters {
            published: Some(100),
            ..Counters::default()
        });
        let mut snapshot = Snapshot::initial("main", SourceKind::Redis, Duration::from_secs(1));
        snapshot.last_success = Some(now);
        snapshot.queues = Arc::new(vec![stream]);
        let id = crate::snapshot::QueueId {
            vhost: None,
            name: "s".into(),
        };
        let point = |at: SystemTime, n: u64| {
            let mut counters = HashMap::new();
            counters.insert(
                id.clone(),
                Counters {
                    published: Some(n),
                    ..Counters::default()
                },
            );
            CounterPoint {
                at,
                counters,
                flows: HashMap::new(),
            }
        };
        snapshot.history = Arc::new(
            snapshot
                .history
                .with_point(point(now - Duration::from_secs(20), 40))
                .with_point(point(now, 100)),
        );
        let snaps = [Arc::new(snapshot)];
        let r = evaluate(
            &q(&[("queue", "s"), ("mode", "PublishRate")]),
            &snaps,
            &cfg(),
            now,
        )
        .unwrap();
        assert!((r.value - 3.0).abs() < 1e-9, "{}", r.value);
        let r = evaluate(
            &q(&[("queue", "s"), ("mode", "Lag"), ("group", "g1")]),
            &snaps,
            &cfg(),
            now,
        )
        .unwrap();
        assert_eq!(r.value, 4.0);
        let e = evaluate(
            &q(&[("queue", "s"), ("mode", "Lag"), ("group", "g2")]),
            &snaps,
            &cfg(),
            now,
        )
        .unwrap_err();
        assert!(matches!(e, QueryError::Unavailable(_)), "{e}");
        let e = evaluate(&q(&[("queue", "s"), ("mode", "Lag")]), &snaps, &cfg(), now).unwrap_err();
        assert!(
            matches!(&e, QueryError::InvalidArgument(m) if m.starts_with("scalerMetadata.group")),
            "{e}"
        );
        let e = evaluate(
            &q(&[("queue", "s"), ("mode", "Lag"), ("group", "nope")]),
            &snaps,
            &cfg(),
            now,
        )
        .unwrap_err();
        assert!(matches!(e, QueryError::NotFound(_)), "{e}");
    }

    #[test]
    fn wait_time_reads_backlog_age_and_arrivals_and_names_what_is_unknown() {
        use crate::scaler::wait::Term;
        use crate::snapshot::JobFlow;
        let now = SystemTime::now();
        let wait = |queue: &'static str| {
            q(&[
                ("queue", queue),
                ("mode", "WaitTime"),
                ("targetWait", "30s"),
                ("processingTime", "500ms"),
            ])
        };
        let mut jobs = sample("jobs", 600);
        jobs.oldest_age_seconds = Some(12.0);
        let mut no_age = sample("no-age", 3);
        no_age.oldest_age_seconds = None;
        let mut idle = sample("idle", 0);
        idle.oldest_age_seconds = None;
        let mut uncounted = sample("uncounted", 1);
        uncounted.oldest_age_seconds = Some(1.0);
        let mut s = (*snap(
            "main",
            vec![jobs, no_age, idle, uncounted],
            Some(Duration::ZERO),
            now,
        ))
        .clone();
        // 10 s apart: depth 560 -> 600 and processed 100 -> 140: 8 jobs/s.
        let flow = |at, depth, processed| {
            let mut flows = HashMap::new();
            for name in ["jobs", "no-age", "idle"] {
                let id = crate::snapshot::QueueId {
                    vhost: None,
                    name: name.into(),
                };
                flows.insert(id, JobFlow { depth, processed });
            }
            CounterPoint {
                at,
                counters: HashMap::new(),
                flows,
            }
        };
        s.history = Arc::new(
            s.history
                .with_point(flow(now - Duration::from_secs(10), 560, 100))
                .with_point(flow(now, 600, 140)),
        );
        let s = scoped(Arc::new(s), Reach::All);
        let eval = |query: &ScalerQuery| evaluate(query, std::slice::from_ref(&s), &cfg(), now);

        // 8 jobs/s of 0.5 s keep 4 workers busy; 600 waiting to start
        // within 30 s need 600 * 0.5 / 30 = 10, and a share of the 4 on top.
        let r = eval(&wait("jobs")).unwrap();
        let d = r.wait.unwrap();
        assert!((d.inputs.arrival_rate - 8.0).abs() < 1e-9, "{d:?}");
        assert_eq!((d.inputs.backlog, d.inputs.oldest_age), (600.0, 12.0));
        let want = 10.0 + crate::scaler::wait::ARRIVAL_SHARE * 4.0;
        assert!((r.value - want).abs() < 1e-9, "{d:?}");
        assert_eq!(d.bound, Term::Drain);
        assert!(r.is_active(&wait("jobs")));

        // Nothing waits: no age is needed; arrivals alone keep it active.
        let r = eval(&wait("idle")).unwrap();
        assert_eq!(r.wait.unwrap().bound, Term::Steady);
        assert!(r.is_active(&wait("idle")) && r.value > 0.0);

        // Each unknown input is UNAVAILABLE naming the queue and the input.
        for (queue, needle) in [
            ("no-age", "its oldest age"),
            ("uncounted", "its arrival rate"),
        ] {
            let e = eval(&wait(queue)).unwrap_err();
            assert!(
                matches!(&e, QueryError::Unavailable(m) if m.contains(&format!("{queue:?}")) && m.contains(needle)),
                "{queue}: {e}"
            );
        }
        let e = eval(&wait("*")).unwrap_err();
        assert!(
            matches!(&e, QueryError::Unavailable(m) if m.starts_with("WaitTime over the 4 queues")),
            "{e}"
        );

        // A covered name without data: empty, nothing arrives, inactive, 0.
        let r = eval(&wait("gone")).unwrap();
        assert_eq!((r.value, r.wait.map(|d| d.active)), (0.0, Some(false)));
        assert!(!r.is_active(&wait("gone")));
    }

    #[test]
    fn without_processing_time_the_measured_service_time_is_used_or_its_absence_said() {
        use crate::scaler::wait::ServiceFrom;
        use crate::snapshot::{ServiceSource, ServiceTime};
        let now = SystemTime::now();
        let wait = |queue: &'static str| {
            q(&[
                ("queue", queue),
                ("mode", "WaitTime"),
                ("targetWait", "10s"),
            ])
        };
        let measured = |name: &str, lib: &str, waiting: u64, mean: Option<f64>| {
            let mut s = preset(name, lib, &[(JobState::Waiting, waiting)]);
            s.oldest_age_seconds = Some(1.0);
            if let Some(f) = s.preset.as_deref_mut() {
                // As the poll sets it for a library that keeps finished jobs.
                f.finished_jobs = (lib != "sidekiq")
                    .then_some("none kept: added with removeOnComplete/removeOnFail");
                if f.finished_jobs.is_some() {
                    s.measures.service_time = ServiceMeasure::FinishedJobs;
                }
                f.service_time = mean.map(|mean_seconds| ServiceTime {
                    mean_seconds,
                    jobs: 20,
                    from: ServiceSource::FinishedJobs,
                });
            }
            s
        };
        let queues = vec![
            measured("mail", "bullmq", 100, Some(0.5)),
            measured("fast", "bullmq", 100, Some(1.5)),
            measured("kept-none", "bullmq", 4, None),
            measured("idle-none", "rq", 0, None),
            measured("kiq", "sidekiq", 4, None),
            sample("plain", 4),
        ];
        let mut s = (*snap("main", queues, Some(Duration::ZERO), now)).clone();
        // Two readings 10 s apart, no job published: no arrivals anywhere.
        let point = |at| {
            let counters = ["mail", "fast", "kept-none", "idle-none", "kiq"]
                .into_iter()
                .map(|name| {
                    let id = crate::snapshot::QueueId {
                        vhost: None,
                        name: name.into(),
                    };
                    let c = Counters {
                        published: Some(5),
                        ..Counters::default()
                    };
                    (id, c)
                })
                .collect();
            let flows = [(
                crate::snapshot::QueueId {
                    vhost: None,
                    name: "plain".into(),
                },
                crate::snapshot::JobFlow {
                    depth: 4,
                    processed: 0,
                },
            )]
            .into_iter()
            .collect();
            CounterPoint {
                at,
                counters,
                flows,
            }
        };
        s.history = Arc::new(
            s.history
                .with_point(point(now - Duration::from_secs(10)))
                .with_point(point(now)),
        );
        let s = scoped(Arc::new(s), Reach::All);
        let eval = |query: &ScalerQuery| evaluate(query, std::slice::from_ref(&s), &cfg(), now);

        // 100 jobs of 0.5 s (measured) to start within 10 s: 5 workers.
        let d = eval(&wait("mail")).unwrap().wait.unwrap();
        assert_eq!(d.inputs.service_time, 0.5);
        assert_eq!(
            d.inputs.service_from,
            ServiceFrom::Measured(ServiceSource::FinishedJobs)
        );
        assert!((d.workers - 5.0).abs() < 1e-9, "{d:?}");
        // Two queues with equal backlogs: the mean of their service times.
        let d = eval(&wait("{mail,fast}")).unwrap().wait.unwrap();
        assert!((d.inputs.service_time - 1.0).abs() < 1e-9, "{d:?}");
        // Measured but nothing kept while jobs wait: UNAVAILABLE saying why
        // and that processingTime can be set.
        let e = eval(&wait("kept-none")).unwrap_err();
        assert!(
            matches!(&e, QueryError::Unavailable(m) if m.contains("\"kept-none\"")
                && m.contains("its service time is unknown")
                && m.contains("removeOnComplete")
                && m.contains("set processingTime")),
            "{e}"
        );
        // Nothing waits or arrives: the answer is 0 whatever the service time.
        let d = eval(&wait("idle-none")).unwrap().wait.unwrap();
        assert_eq!(
            (d.workers, d.inputs.service_from),
            (0.0, ServiceFrom::Unneeded)
        );
        // Kinds the exporter cannot measure: INVALID_ARGUMENT naming
        // processingTime, the queue and why; also for a covered absent key.
        for (queue, why) in [
            ("kiq", "that library keeps no finished jobs"),
            ("plain", "a plain Redis key"),
            ("gone", "a plain Redis key"),
            ("*", "that library keeps no finished jobs"),
        ] {
            let e = eval(&wait(queue)).unwrap_err();
            assert!(
                matches!(&e, QueryError::InvalidArgument(m)
                    if m.starts_with("scalerMetadata.processingTime: required for queue")
                    && m.contains(why)),
                "{queue}: {e}"
            );
        }
        // With processingTime set, it is used as it is.
        let mut set = wait("kept-none");
        set.wait = set.wait.map(|mut p| {
            p.processing_time = Some(Duration::from_secs(2));
            p
        });
        let d = eval(&set).unwrap().wait.unwrap();
        assert_eq!(
            (d.inputs.service_time, d.inputs.service_from),
            (2.0, ServiceFrom::Set)
        );
    }
}
