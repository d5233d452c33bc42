//! What the scaler last answered each ScaledObject KEDA asked about: the
//! gauges `queue_exporter_scaler_desired_replicas` and, for mode WaitTime,
//! the model's inputs, kept per (namespace, ScaledObject, queue, mode).
//!
//! Part of telemetry, not of the snapshot: it records gRPC traffic, as the
//! RPC counters do, and is filled by the scaler while it answers (from the
//! snapshot, as always). Bounded: an entry KEDA has not asked about for
//! [`Decisions::EXPIRE`] is removed with its series, on the next request or
//! scrape, and at most [`Decisions::MAX_ENTRIES`] are kept, of at most
//! [`bounds::MAX_BYTES`] together (each string cut as [`bounds`] says).

pub mod bounds;

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// A float gauge.
type FloatGauge = Gauge<f64, AtomicU64>;

/// The labels of every decision gauge: which trigger of which ScaledObject.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct DecisionLabels {
    /// The ScaledObject's namespace, as KEDA sent it.
    pub namespace: String,
    /// The ScaledObject's name, as KEDA sent it.
    pub scaledobject: String,
    /// The trigger's `queue` (a name or a glob).
    pub queue: String,
    /// The trigger's mode, so two triggers on one queue stay apart.
    pub mode: String,
}

/// The WaitTime model's inputs and which term set its answer, as shown.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelView {
    /// Jobs waiting.
    pub backlog: f64,
    /// Seconds the oldest job has waited.
    pub oldest_age: f64,
    /// Jobs arriving per second.
    pub arrival_rate: f64,
    /// Seconds of worker time per job; `None` when unknown and not needed
    /// (nothing waits or arrives at a queue not measured yet).
    pub service_time: Option<f64>,
    /// Where the service time comes from: `processingTime` (set by the
    /// trigger), `finished_jobs` or `ack_rate` (measured), `unneeded`.
    pub service_from: &'static str,
    /// Workers needed (before `workersPerReplica`).
    pub workers: f64,
    /// The term that set the answer (`steady`, `drain`, `catch-up`, `idle`).
    pub bound: &'static str,
}

/// One answer the scaler gave.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// When it was given.
    pub at: SystemTime,
    /// The RPC (`GetMetrics`, `IsActive`).
    pub method: &'static str,
    /// The metric value (`GetMetrics`), if one was answered.
    pub value: Option<f64>,
    /// value ÷ target: the replicas the HPA aims at (it sets the ceiling).
    pub desired: Option<f64>,
    /// Whether the trigger was active.
    pub active: Option<bool>,
    /// The error status and message, when the answer was one.
    pub error: Option<String>,
    /// Mode WaitTime: the model's inputs.
    pub model: Option<ModelView>,
}

/// Everything kept about one trigger.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Its labels.
    pub labels: DecisionLabels,
    /// Its metadata with secrets redacted (what KEDA sent, for the page).
    pub metadata: Vec<(String, String)>,
    /// Which metadata `metadata` was made from (the caller's identity of
    /// the map), so a repeated request does not rebuild it.
    metadata_of: u64,
    /// What this entry is counted as against [`bounds::MAX_BYTES`]
    /// ([`bounds::weight`] of its labels and metadata).
    weight: usize,
    /// When KEDA last asked.
    pub last_asked: SystemTime,
    /// The last `GetMetrics` answer.
    pub metrics: Option<Answer>,
    /// The last `IsActive` answer.
    pub activity: Option<Answer>,
    /// Desired replicas over the last [`Decisions::HISTORY`], one point per
    /// [`Decisions::STEP`] at most, oldest first; `None` where the answer
    /// was an error.
    pub history: VecDeque<(SystemTime, Option<f64>)>,
}

/// The store and its gauges.
#[derive(Debug, Default)]
pub struct Decisions {
    /// Entries by labels.
    entries: Mutex<HashMap<DecisionLabels, Entry>>,
    /// The unix second of the last sweep for expired entries: a request
    /// sweeps at most once a second (a sweep visits every entry, and
    /// `GetMetrics` may come tens of thousands of times a second).
    swept: AtomicU64,
    /// `queue_exporter_scaler_desired_replicas`.
    desired: Family<DecisionLabels, FloatGauge>,
    /// `queue_exporter_scaler_backlog`.
    backlog: Family<DecisionLabels, FloatGauge>,
    /// `queue_exporter_scaler_oldest_age_seconds`.
    oldest_age: Family<DecisionLabels, FloatGauge>,
    /// `queue_exporter_scaler_arrival_rate`.
    arrival_rate: Family<DecisionLabels, FloatGauge>,
    /// `queue_exporter_scaler_service_time_seconds`.
    service_time: Family<DecisionLabels, FloatGauge>,
}

impl Decisions {
    /// An entry KEDA has not asked about for this long is removed.
    pub const EXPIRE: Duration = Duration::from_secs(5 * 60);
    /// Most entries kept; beyond, the one asked about longest ago goes.
    pub const MAX_ENTRIES: usize = 2_000;
    /// How far back the history goes (the page's sparkline).
    pub const HISTORY: Duration = Duration::from_secs(15 * 60);
    /// The history's spacing: one point per this at most.
    pub const STEP: Duration = Duration::from_secs(15);

    /// Registers the gauges in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        for (name, help, family) in [
            (
                "queue_exporter_scaler_desired_replicas",
                "The last GetMetrics value over the trigger's target, for each ScaledObject KEDA asked about: the replicas the HPA aims at (it sets the ceiling, outside its tolerance)",
                &self.desired,
            ),
            (
                "queue_exporter_scaler_backlog",
                "Mode WaitTime: jobs waiting, as the last answer read them",
                &self.backlog,
            ),
            (
                "queue_exporter_scaler_oldest_age_seconds",
                "Mode WaitTime: how long the oldest waiting job had waited, as the last answer read it",
                &self.oldest_age,
            ),
            (
                "queue_exporter_scaler_arrival_rate",
                "Mode WaitTime: jobs arriving per second over the trigger's window, as the last answer read them",
                &self.arrival_rate,
            ),
            (
                "queue_exporter_scaler_service_time_seconds",
                "Mode WaitTime: worker seconds per job the last answer used (the trigger's processingTime, or measured by the source: queue_service_time_seconds)",
                &self.service_time,
            ),
        ] {
            registry.register(name, help, family.clone());
        }
    }

    /// Records one answer for `labels` (KEDA asked now), updating the
    /// gauges: an error removes the trigger's series, since an unknown
    /// value is absent, never a stale or a 0. `metadata` is called only
    /// when the entry is new or `metadata_of` (the caller's identity of the
    /// metadata map) changed. Labels, metadata and error are cut to
    /// [`bounds`] whatever the caller sent.
    pub fn record(
        &self,
        labels: DecisionLabels,
        metadata_of: u64,
        metadata: impl FnOnce() -> Vec<(String, String)>,
        mut answer: Answer,
    ) {
        let labels = bounds::labels(labels);
        answer.error = bounds::error(answer.error);
        let now = answer.at;
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let second = now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        if self.swept.swap(second, Ordering::Relaxed) != second {
            self.expire(&mut entries, now);
        }
        // A known trigger (nearly every request) is found without cloning
        // its labels; only a new one pays for the key and, at the bound, an
        // eviction.
        if !entries.contains_key(&labels) {
            if entries.len() >= Self::MAX_ENTRIES {
                let oldest = entries
                    .values()
                    .min_by_key(|e| e.last_asked)
                    .map(|e| e.labels.clone());
                if let Some(oldest) = oldest {
                    entries.remove(&oldest);
                    self.remove_series(&oldest);
                }
            }
            let entry = Entry {
                labels: labels.clone(),
                metadata: Vec::new(),
                metadata_of: 0,
                weight: 0,
                last_asked: now,
                metrics: None,
                activity: None,
                history: VecDeque::new(),
            };
            entries.insert(labels.clone(), entry);
        }
        let Some(entry) = entries.get_mut(&labels) else {
            return;
        };
        if entry.metadata_of != metadata_of || entry.metadata.is_empty() {
            entry.metadata = bounds::metadata(metadata());
            entry.metadata_of = metadata_of;
            entry.weight = bounds::weight(&labels, &entry.metadata);
            self.fit_bytes(&mut entries, &labels);
        }
        let Some(entry) = entries.get_mut(&labels) else {
            return;
        };
        entry.last_asked = now;
        if answer.method == "IsActive" {
            entry.activity = Some(answer);
            return;
        }
        self.set_gauges(&labels, &answer);
        let point = (
            now,
            answer.error.is_none().then_some(answer.desired).flatten(),
        );
        Self::add_point(&mut entry.history, point);
        entry.metrics = Some(answer);
    }

    /// The trigger's gauges from `answer`: its desired replicas and the
    /// WaitTime model's inputs, each removed when unknown (an error
    /// removes them all).
    fn set_gauges(&self, labels: &DecisionLabels, answer: &Answer) {
        match (answer.desired, &answer.error) {
            (Some(d), None) => {
                self.desired.get_or_create(labels).set(d);
                match &answer.model {
                    Some(m) => {
                        self.backlog.get_or_create(labels).set(m.backlog);
                        self.oldest_age.get_or_create(labels).set(m.oldest_age);
                        self.arrival_rate.get_or_create(labels).set(m.arrival_rate);
                        match m.service_time {
                            Some(t) => {
                                self.service_time.get_or_create(labels).set(t);
                            }
                            None => {
                                self.service_time.remove(labels);
                            }
                        }
                    }
                    None => self.remove_inputs(labels),
                }
            }
            _ => self.remove_series(labels),
        }
    }

    /// Adds `point` (when, the desired replicas or `None` for an error) to
    /// a trigger's `history`: one point per [`Self::STEP`], the newest
    /// answer standing for its step, none older than [`Self::HISTORY`].
    fn add_point(
        history: &mut VecDeque<(SystemTime, Option<f64>)>,
        point: (SystemTime, Option<f64>),
    ) {
        let now = point.0;
        let spaced = history
            .back()
            .is_none_or(|(t, _)| now.duration_since(*t).unwrap_or_default() >= Self::STEP);
        if spaced {
            history.push_back(point);
        } else if let Some(last) = history.back_mut() {
            // Within a step the newest answer stands for it.
            last.1 = point.1;
        }
        while history
            .front()
            .is_some_and(|(t, _)| now.duration_since(*t).unwrap_or_default() > Self::HISTORY)
        {
            history.pop_front();
        }
    }

    /// Removes what KEDA has stopped asking about, as of `now` (before a scrape).
    pub fn sweep(&self, now: SystemTime) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        self.expire(&mut entries, now);
    }

    /// Every entry, sorted by namespace, ScaledObject, queue and mode.
    pub fn entries(&self, now: SystemTime) -> Vec<Entry> {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        self.expire(&mut entries, now);
        let mut out: Vec<Entry> = entries.values().cloned().collect();
        out.sort_by(|a, b| a.labels.cmp(&b.labels));
        out
    }

    /// Drops the entries asked about longest ago, other than `keep`, while
    /// all together weigh more than [`bounds::MAX_BYTES`]. Runs only when
    /// an entry's metadata is (re)made, not on every answer.
    fn fit_bytes(&self, entries: &mut HashMap<DecisionLabels, Entry>, keep: &DecisionLabels) {
        let mut total: usize = entries.values().map(|e| e.weight).sum();
        while total > bounds::MAX_BYTES {
            let oldest = entries
                .values()
                .filter(|e| &e.labels != keep)
                .min_by_key(|e| e.last_asked)
                .map(|e| e.labels.clone());
            let Some(oldest) = oldest else { return };
            if let Some(e) = entries.remove(&oldest) {
                total -= e.weight;
            }
            self.remove_series(&oldest);
        }
    }

    /// Drops entries not asked about within [`Self::EXPIRE`], with their series.
    fn expire(&self, entries: &mut HashMap<DecisionLabels, Entry>, now: SystemTime) {
        entries.retain(|labels, e| {
            let fresh = now.duration_since(e.last_asked).unwrap_or_default() <= Self::EXPIRE;
            if !fresh {
                self.remove_series(labels);
            }
            fresh
        });
    }

    /// Removes every gauge series of `labels`.
    fn remove_series(&self, labels: &DecisionLabels) {
        self.desired.remove(labels);
        self.remove_inputs(labels);
    }

    /// Removes the model-input series of `labels`.
    fn remove_inputs(&self, labels: &DecisionLabels) {
        for family in [
            &self.backlog,
            &self.oldest_age,
            &self.arrival_rate,
            &self.service_time,
        ] {
            family.remove(labels);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(name: &str) -> DecisionLabels {
        DecisionLabels {
            namespace: "default".into(),
            scaledobject: name.into(),
            queue: "work".into(),
            mode: "WaitTime".into(),
        }
    }

    fn answer(at: SystemTime, desired: Option<f64>) -> Answer {
        Answer {
            at,
            method: "GetMetrics",
            value: desired,
            desired,
            active: None,
            error: desired.is_none().then(|| "UNAVAILABLE: x".to_string()),
            model: desired.map(|_| ModelView {
                backlog: 3.0,
                oldest_age: 1.0,
                arrival_rate: 0.5,
                service_time: Some(2.0),
                service_from: "processingTime",
                workers: 4.0,
                bound: "drain",
            }),
        }
    }

    fn render(d: &Decisions) -> String {
        let mut r = Registry::default();
        d.register(&mut r);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &r).unwrap();
        out
    }

    #[test]
    fn series_follow_answers_and_expire_when_keda_stops_asking() {
        let d = Decisions::default();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        d.record(labels("a"), 0, Vec::new, answer(t0, Some(4.0)));
        let text = render(&d);
        assert!(
            text.contains(r#"queue_exporter_scaler_desired_replicas{namespace="default",scaledobject="a",queue="work",mode="WaitTime"} 4.0"#),
            "{text}"
        );
        assert!(text.contains("queue_exporter_scaler_backlog{"), "{text}");
        // An error: the series are absent, the entry (and its error) stay.
        d.record(labels("a"), 0, Vec::new, answer(t0 + Decisions::STEP, None));
        assert!(!render(&d).contains("scaledobject=\"a\""));
        let e = d.entries(t0 + Decisions::STEP);
        assert_eq!(e.len(), 1);
        assert_eq!(
            e[0].history.iter().map(|p| p.1).collect::<Vec<_>>(),
            vec![Some(4.0), None]
        );
        // Asked about again, then not for longer than EXPIRE: gone.
        d.record(
            labels("a"),
            0,
            Vec::new,
            answer(t0 + Decisions::STEP * 2, Some(2.0)),
        );
        assert!(render(&d).contains("scaledobject=\"a\""));
        d.sweep(t0 + Decisions::STEP * 2 + Decisions::EXPIRE + Duration::from_secs(1));
        assert!(!render(&d).contains("scaledobject=\"a\""));
        assert!(d.entries(t0 + Decisions::EXPIRE * 3).is_empty());
    }

    #[test]
    fn entries_and_history_are_bounded() {
        let d = Decisions::default();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        for i in 0..Decisions::MAX_ENTRIES + 10 {
            let at = t0 + Duration::from_millis(i as u64);
            d.record(
                labels(&format!("so{i}")),
                0,
                Vec::new,
                answer(at, Some(1.0)),
            );
        }
        let now = t0 + Duration::from_secs(60);
        let all = d.entries(now);
        assert_eq!(all.len(), Decisions::MAX_ENTRIES);
        // The first ones asked about went first.
        assert!(!all.iter().any(|e| e.labels.scaledobject == "so0"));
        // Answers every second for an hour keep 15 minutes, one per 15 s.
        let d = Decisions::default();
        for s in 0..3600 {
            d.record(
                labels("a"),
                0,
                Vec::new,
                answer(t0 + Duration::from_secs(s), Some(1.0)),
            );
        }
        let h = &d.entries(t0 + Duration::from_secs(3600))[0].history;
        assert!((59..=61).contains(&h.len()), "{}", h.len());
    }

    #[test]
    fn huge_maps_and_labels_are_cut_and_the_store_keeps_to_its_bytes() {
        let d = Decisions::default();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let big = "x".repeat(1024);
        let huge = || -> Vec<(String, String)> {
            (0..64)
                .map(|i| (format!("{i}{big}"), big.clone()))
                .collect()
        };
        for i in 0..1_000u64 {
            let l = DecisionLabels {
                namespace: big.clone(),
                scaledobject: format!("so{i}{big}"),
                queue: big.clone(),
                mode: big.clone(),
            };
            let mut a = answer(t0 + Duration::from_millis(i), None);
            a.error = Some(big.clone());
            d.record(l, 0, huge, a);
        }
        let all = d.entries(t0 + Duration::from_secs(3));
        let total: usize = all.iter().map(|e| e.weight).sum();
        assert!(total <= bounds::MAX_BYTES, "{total}");
        assert!(all.len() > 300 && all.len() < 1_000, "{}", all.len());
        // The newest is kept, cut.
        let newest = all.iter().max_by_key(|e| e.last_asked).unwrap();
        assert!(newest.labels.scaledobject.starts_with("so999"));
        assert!(newest.labels.scaledobject.len() <= bounds::MAX_NAME_BYTES);
        assert_eq!(newest.metadata.len(), bounds::MAX_PAIRS);
        let error = newest.metrics.as_ref().unwrap().error.as_ref().unwrap();
        assert!(error.len() <= bounds::MAX_ERROR_BYTES);
    }
}
