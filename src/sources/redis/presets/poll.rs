//! A preset source's poll: at most two pipelined round trips for every
//! logical queue of every entry, read-only. Round 1 reads each queue's
//! sizes (its library's `plan`, and its finished sets when they are due),
//! every `counters:` block; round 2 the follow-ups the reads asked for (the
//! oldest job's stamp, bounded stalled checks, finished jobs' stamps),
//! applied by the generic [`apply`] or the library's own `settle`.

use std::collections::HashMap;
use std::time::SystemTime;

use redis::Value;

use super::super::cmd::cmd;
use super::super::commands::{Conn, pipelined};
use super::super::tracked::TrackedKey;
use super::service::ServiceWindow;
use super::{
    Follow, Preset, PresetPoll, PresetState, Stage, Unit, apply, collide, count, counted, facts,
    finished_layout, lib, plan, read,
};
use crate::config::{CounterKeys, QueueSpec};
use crate::snapshot::{
    Arrivals, ArrivalsMeasure, CountedIn, JobTotals, Measures, QueueSample, Reason, ServiceMeasure,
};
use crate::time::unix_seconds;

/// `GET` commands for a `counters:` block, in processed, failed, enqueued
/// order; a per-queue template's keys for the queue named `queue` (raw).
fn counter_cmds(c: &CounterKeys, queue: &[u8]) -> Vec<redis::Cmd> {
    c.keys_for(queue).map(|k| cmd("GET", &k)).collect()
}

/// What a `counters:` block read: the job totals, and the enqueued total
/// (the queue's `published` counter). A key not written yet counts 0; a
/// refused or unreadable reply is unknown.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CounterReading {
    /// `processed` and `failed`.
    pub totals: JobTotals,
    /// `enqueued`.
    pub enqueued: Option<u64>,
}

impl CounterReading {
    /// Puts the reading on `sample`: its job totals, and `enqueued` as its
    /// `published` counter (replacing a stream's `entries-added`, if the
    /// key is a stream: the configured counter is the one asked for).
    pub fn apply(self, sample: &mut QueueSample) {
        sample.set_jobs(self.totals);
        if let Some(n) = self.enqueued {
            sample.counters_mut().published = Some(n);
        }
    }
}

/// Reads the replies of [`counter_cmds`] (pure).
fn read_counters(c: &CounterKeys, r: &[Value]) -> CounterReading {
    let mut it = r.iter();
    let mut next = |asked: &Option<String>| asked.as_ref().and_then(|_| it.next()).and_then(count);
    let processed = next(&c.processed);
    let failed = next(&c.failed);
    let enqueued = next(&c.enqueued);
    CounterReading {
        totals: JobTotals { processed, failed },
        enqueued,
    }
}

/// The reason label of an error reply, if this is one.
fn reply_error(v: &Value) -> Option<Reason> {
    match v {
        Value::ServerError(e) if super::super::reply::is_auth_error_code(e.code()) => {
            Some(Reason::Auth)
        }
        Value::ServerError(_) => Some(Reason::Backend),
        _ => None,
    }
}

/// What to read in round 1: whose replies go where.
enum Slot {
    /// A logical queue of entry `entry`; its first `sizes` replies are the
    /// library's [`plan`], the rest its finished sets' ([`ServiceWindow::plan`]).
    Queue {
        entry: usize,
        queue: usize,
        sizes: usize,
    },
    /// The `counters:` keys of preset entry `entry`, whose one logical
    /// queue they belong to (keys named outright).
    PresetCounters { entry: usize },
    /// The `counters:` template of preset entry `entry`, read for the
    /// queue of stage `stage` (its name in place of `{queue}`).
    QueueCounters { entry: usize, stage: usize },
    /// The `counters:` keys of plain entry `spec`.
    PlainCounters { spec: usize },
}

/// Round 1 as planned: its commands, whose replies go where, and which
/// tracked keys a preset queue counts.
struct RoundOne<'a> {
    /// The commands, in order.
    cmds: Vec<redis::Cmd>,
    /// Each slot and the range of its replies.
    slots: Vec<(Slot, std::ops::Range<usize>)>,
    /// Which `key:` entries and tracked keys a preset queue counts (by the
    /// queue's position among the stages, which follow the queue slots'
    /// order).
    counted: counted::Counted<'a>,
}

/// Round 1 as read: each queue's stage, and the counters to put on them
/// once round 2 is in.
#[derive(Default)]
struct Stages {
    /// One per queue slot, with its entry.
    stages: Vec<(usize, Stage)>,
    /// Per stage that measures its service time: its entry and queue name.
    measured: Vec<Option<(usize, Vec<u8>)>>,
    /// The `counters:` of entries of one logical queue, by entry.
    entry_totals: Vec<(usize, CounterReading)>,
    /// Counters of `key:` entries a preset queue counts: (stage, entry).
    onto_queue: Vec<(usize, usize, CounterReading)>,
}

impl PresetState {
    /// Polls every logical queue and every `counters:` block: at most two
    /// pipelined round trips, read-only. Moves the service-time windows on.
    pub async fn poll(
        &mut self,
        conn: &Conn,
        plain: &[QueueSpec],
        tracked: &[TrackedKey],
        now: SystemTime,
    ) -> redis::RedisResult<PresetPoll> {
        let now = unix_seconds(now);
        let tracked = if self.entries.is_empty() {
            &[]
        } else {
            tracked
        };
        let round = self.plan_round_one(plain, tracked, now);
        if round.cmds.is_empty() {
            return Ok(PresetPoll::default());
        }
        let replies = pipelined(conn, round.cmds).await?;
        let mut out = PresetPoll {
            key_errors: replies.iter().filter_map(reply_error).collect(),
            ..PresetPoll::default()
        };
        let mut stages =
            self.read_round_one(round.slots, &replies, plain, &round.counted, &mut out, now);
        self.round_two(conn, &mut stages, &mut out, now).await?;
        self.finish(stages, plain, tracked, &round.counted, &mut out, now);
        Ok(out)
    }

    /// Round 1's commands: each queue's plan (and its finished sets when
    /// due), each `counters:` block's `GET`s.
    fn plan_round_one<'a>(
        &self,
        plain: &'a [QueueSpec],
        tracked: &'a [TrackedKey],
        now: f64,
    ) -> RoundOne<'a> {
        let keep = self.service_keep;
        let mut cmds = Vec::new();
        let mut slots: Vec<(Slot, std::ops::Range<usize>)> = Vec::new();
        let mut counted = counted::Counted::new(plain, tracked);
        let mut queue_slots = 0;
        for (e, entry) in self.entries.iter().enumerate() {
            for (q, unit) in entry.queues.iter().enumerate() {
                let start = cmds.len();
                cmds.extend(plan(&entry.spec.preset, unit, now));
                let sizes = cmds.len() - start;
                counted.note(&cmds[start..], queue_slots);
                queue_slots += 1;
                if let (Some(layout), Unit::Queue(name)) =
                    (finished_layout(&entry.spec.preset, unit), unit)
                {
                    match entry.service.get(name) {
                        Some(w) if w.due(now) => cmds.extend(w.plan(&layout, now)),
                        Some(_) => {}
                        None => cmds.extend(ServiceWindow::keeping(keep).plan(&layout, now)),
                    }
                }
                let slot = Slot::Queue {
                    entry: e,
                    queue: q,
                    sizes,
                };
                slots.push((slot, start..cmds.len()));
                // Each logical queue's own counters, from the template.
                if let (Some(c), Unit::Queue(name)) = (&entry.spec.counters, unit)
                    && c.per_queue()
                {
                    let start = cmds.len();
                    cmds.extend(counter_cmds(c, name));
                    let slot = Slot::QueueCounters {
                        entry: e,
                        stage: queue_slots - 1,
                    };
                    slots.push((slot, start..cmds.len()));
                }
            }
            if let Some(c) = entry.spec.counters.as_ref().filter(|c| !c.per_queue()) {
                let start = cmds.len();
                cmds.extend(counter_cmds(c, &[]));
                slots.push((Slot::PresetCounters { entry: e }, start..cmds.len()));
            }
        }
        for (i, spec) in plain.iter().enumerate() {
            if let (Some(c), Some(_)) = (&spec.counters, spec.key()) {
                let start = cmds.len();
                cmds.extend(counter_cmds(c, &[]));
                slots.push((Slot::PlainCounters { spec: i }, start..cmds.len()));
            }
        }
        RoundOne {
            cmds,
            slots,
            counted,
        }
    }

    /// Round 1's replies read, slot by slot (pure but for the service
    /// windows it moves on); plain keys' counters no queue counts go to
    /// `out`.
    fn read_round_one(
        &mut self,
        slots: Vec<(Slot, std::ops::Range<usize>)>,
        replies: &[Value],
        plain: &[QueueSpec],
        counted: &counted::Counted<'_>,
        out: &mut PresetPoll,
        now: f64,
    ) -> Stages {
        let mut read = Stages::default();
        for (slot, range) in slots {
            let r = replies.get(range).unwrap_or(&[]);
            match slot {
                Slot::Queue {
                    entry,
                    queue,
                    sizes,
                } => {
                    let (stage, m) = self.read_queue(entry, queue, sizes, r, now);
                    read.stages.push((entry, stage));
                    read.measured.push(m);
                }
                Slot::PresetCounters { entry } => {
                    if let Some(c) = &self.entries[entry].spec.counters {
                        read.entry_totals.push((entry, read_counters(c, r)));
                    }
                }
                Slot::QueueCounters { entry, stage } => {
                    // The queue's stage is in: its slot came just before.
                    let c = &self.entries[entry].spec.counters;
                    if let (Some(c), Some((_, stage))) = (c, read.stages.get_mut(stage)) {
                        counted::apply_onto(c, read_counters(c, r), &mut stage.sample);
                    }
                }
                Slot::PlainCounters { spec } => {
                    if let (Some(c), Some(k)) = (&plain[spec].counters, plain[spec].key()) {
                        match counted.queue_of(k) {
                            Some(stage) => {
                                read.onto_queue.push((stage, spec, read_counters(c, r)));
                            }
                            None => out.plain_totals.push((k.to_string(), read_counters(c, r))),
                        }
                    }
                }
            }
        }
        read
    }

    /// One queue's round-1 replies `r` read: its stage, and (when its
    /// library keeps finished jobs) its entry and name, whose service
    /// window the finished sets' replies moved on.
    fn read_queue(
        &mut self,
        entry: usize,
        queue: usize,
        sizes: usize,
        r: &[Value],
        now: f64,
    ) -> (Stage, Option<(usize, Vec<u8>)>) {
        let keep = self.service_keep;
        let e = &mut self.entries[entry];
        let unit = &e.queues[queue];
        let (sizes_r, finished_r) = r.split_at(sizes.min(r.len()));
        let mut stage = read(&e.spec.preset, unit, sizes_r, now);
        stage.sample.measures = measures(&e.spec.preset, e.spec.counters.as_ref());
        let (Some(layout), Unit::Queue(name)) = (finished_layout(&e.spec.preset, unit), unit)
        else {
            return (stage, None);
        };
        let window = e
            .service
            .entry(name.clone())
            .or_insert_with(|| ServiceWindow::keeping(keep));
        // Read only when its sets were asked (due) this poll.
        let jobs = if finished_r.is_empty() {
            Vec::new()
        } else {
            window.read(now, &layout, finished_r)
        };
        let f = Follow::Finished;
        stage.follow.extend(jobs.into_iter().map(|c| (c, f)));
        facts(&mut stage.sample).finished_jobs = Some(lib(&e.spec.preset).unmeasured_why());
        stage.sample.measures.service_time = ServiceMeasure::FinishedJobs;
        (stage, Some((entry, name.clone())))
    }

    /// Round 2: the follow-ups the stages asked for (oldest job's stamp,
    /// bounded stalled checks, finished jobs' stamps), applied.
    async fn round_two(
        &mut self,
        conn: &Conn,
        read: &mut Stages,
        out: &mut PresetPoll,
        now: f64,
    ) -> redis::RedisResult<()> {
        let mut follow_cmds = Vec::new();
        let mut follow_meta = Vec::new();
        for (i, (_, stage)) in read.stages.iter_mut().enumerate() {
            for (c, f) in stage.follow.drain(..) {
                follow_cmds.push(c);
                follow_meta.push((i, f));
            }
        }
        if follow_cmds.is_empty() {
            return Ok(());
        }
        let replies = pipelined(conn, follow_cmds).await?;
        out.key_errors
            .extend(replies.iter().filter_map(reply_error));
        let mut own: HashMap<usize, Vec<Value>> = HashMap::new();
        for ((i, f), v) in follow_meta.into_iter().zip(replies) {
            match (f, read.measured.get(i).and_then(Option::as_ref)) {
                (Follow::Finished, Some((entry, name))) => {
                    if let Some(w) = self.entries[*entry].service.get_mut(name) {
                        w.record(&v);
                    }
                }
                (Follow::Own, _) => own.entry(i).or_default().push(v),
                _ => apply(&mut read.stages[i].1.sample, f, &v, now),
            }
        }
        for (i, replies) in own {
            let (entry, stage) = &mut read.stages[i];
            let preset = &self.entries[*entry].spec.preset;
            lib(preset).settle(preset, &mut stage.sample, &replies, now);
        }
        Ok(())
    }

    /// The stages made samples: service times, counters put on their
    /// queues, names told apart where entries collide, and the tracked
    /// keys a preset queue counts.
    fn finish(
        &self,
        read: Stages,
        plain: &[QueueSpec],
        tracked: &[TrackedKey],
        counted: &counted::Counted<'_>,
        out: &mut PresetPoll,
        now: f64,
    ) {
        let Stages {
            mut stages,
            measured,
            entry_totals,
            onto_queue,
        } = read;
        for ((_, stage), m) in stages.iter_mut().zip(&measured) {
            if let Some((entry, name)) = m {
                let mean = self.entries[*entry]
                    .service
                    .get(name)
                    .and_then(|w| w.mean(now));
                facts(&mut stage.sample).service_time = mean;
            }
        }
        for (entry, totals) in entry_totals {
            // Keys named outright are for an entry with one logical queue
            // (checked at load): its sample without extra labels.
            if let Some((_, stage)) = stages
                .iter_mut()
                .find(|(e, s)| *e == entry && s.sample.labels.is_empty())
            {
                totals.apply(&mut stage.sample);
            }
        }
        for (stage, spec, reading) in onto_queue {
            if let (Some((_, stage)), Some(keys)) = (stages.get_mut(stage), &plain[spec].counters) {
                counted::apply_onto(keys, reading, &mut stage.sample);
                if counts_arrivals(Some(keys)) {
                    stage.sample.measures.arrivals = ArrivalsMeasure::Counted;
                }
            }
        }
        let names = collide::labels(
            &stages
                .iter()
                .map(|(e, s)| {
                    let sample = &s.sample;
                    let preset = &self.entries[*e].spec.preset;
                    (*e, preset, sample.name.as_str(), sample.labels.as_slice())
                })
                .collect::<Vec<_>>(),
        );
        out.counted = counted
            .tracked(tracked)
            .filter_map(|(name, stage)| {
                let preset = stages.get(stage)?.1.sample.preset.as_deref()?.preset;
                let queue = names.get(stage)?.clone()?;
                Some((name.to_string(), CountedIn { preset, queue }))
            })
            .collect();
        out.samples = stages
            .into_iter()
            .zip(names)
            .filter_map(|((_, s), name)| {
                let mut sample = s.sample;
                sample.name = name?;
                Some(sample)
            })
            .collect();
    }
}

/// What the source measures of a queue of `preset`'s library whose entry
/// configures `counters`: its service time only where the library keeps
/// finished jobs (set once their layout is known, `read_queue`), its
/// arrivals where the library counts them or `counters:` does.
fn measures(preset: &Preset, counters: Option<&CounterKeys>) -> Measures {
    let counted = lib(preset).arrivals() != Arrivals::Unknown || counts_arrivals(counters);
    Measures {
        unread: None,
        service_time: ServiceMeasure::NoFinishedJobs,
        arrivals: if counted {
            ArrivalsMeasure::Counted
        } else {
            ArrivalsMeasure::NoLibraryCounter
        },
    }
}

/// Whether `counters:` keys count a queue's arrivals (an enqueued or a
/// processed total; a failed total alone does not).
fn counts_arrivals(counters: Option<&CounterKeys>) -> bool {
    counters.is_some_and(|c| c.enqueued.is_some() || c.processed.is_some())
}

#[cfg(test)]
mod tests {
    use super::super::test_util::*;
    use super::*;
    use crate::snapshot::PresetKind;

    #[test]
    fn a_library_queue_says_whether_its_arrivals_and_service_time_are_measured() {
        let of = |name: &'static str| Preset::new(PresetKind::named(name), "p");
        // BullMQ's job id counter counts arrivals; Dramatiq keeps no count.
        let bullmq = measures(&of("bullmq"), None);
        assert_eq!(bullmq.arrivals, ArrivalsMeasure::Counted);
        assert_eq!(bullmq.unread, None);
        let dramatiq = measures(&of("dramatiq"), None);
        assert_eq!(dramatiq.arrivals, ArrivalsMeasure::NoLibraryCounter);
        assert!(
            dramatiq
                .arrivals
                .unmeasurable_why()
                .is_some_and(|w| w.contains("counters:"))
        );
        // `counters: enqueued` (or processed) counts them; failed alone not.
        let keys = |enqueued: bool| CounterKeys {
            processed: None,
            failed: Some("f".into()),
            enqueued: enqueued.then(|| "e".into()),
        };
        let counted = measures(&of("dramatiq"), Some(&keys(true)));
        assert_eq!(counted.arrivals, ArrivalsMeasure::Counted);
        let failed_only = measures(&of("dramatiq"), Some(&keys(false)));
        assert_eq!(failed_only.arrivals, ArrivalsMeasure::NoLibraryCounter);
        // Service time is measured only once the finished jobs' layout is
        // known (`read_queue` sets `FinishedJobs`), never by default.
        for m in [bullmq, dramatiq, counted] {
            assert_eq!(m.service_time, ServiceMeasure::NoFinishedJobs);
            assert!(
                m.service_time
                    .unmeasurable_why()
                    .is_some_and(|w| w.contains("keeps no finished jobs"))
            );
        }
    }

    #[test]
    fn counters_read_in_order_and_missing_keys_are_zero() {
        let c = CounterKeys {
            processed: Some("p".into()),
            failed: Some("f".into()),
            enqueued: Some("e".into()),
        };
        assert_eq!(
            read_counters(&c, &[bulk("41"), Value::Nil, bulk("50")]),
            CounterReading {
                totals: JobTotals {
                    processed: Some(41),
                    failed: Some(0)
                },
                enqueued: Some(50),
            }
        );
        let only_failed = CounterKeys {
            failed: Some("f".into()),
            ..CounterKeys::default()
        };
        assert_eq!(
            read_counters(&only_failed, &[bulk("7")]).totals,
            JobTotals {
                processed: None,
                failed: Some(7)
            }
        );
        // An enqueued total Redis refused to read is unknown, never 0.
        let only_enqueued = CounterKeys {
            enqueued: Some("e".into()),
            ..CounterKeys::default()
        };
        let refused = redis::parse_redis_value(b"-NOPERM no\r\n").unwrap();
        let r = read_counters(&only_enqueued, &[refused]);
        assert_eq!(r, CounterReading::default());
        let mut q = QueueSample::named("q");
        read_counters(&only_enqueued, &[bulk("9")]).apply(&mut q);
        assert_eq!(q.counters().published, Some(9));
    }

    #[test]
    fn a_counter_template_reads_each_queues_own_key() {
        let c = CounterKeys {
            enqueued: Some("myapp:enqueued:{queue}".into()),
            ..CounterKeys::default()
        };
        let packed: Vec<Vec<u8>> = counter_cmds(&c, b"high")
            .iter()
            .map(redis::Cmd::get_packed_command)
            .collect();
        let mut want = redis::cmd("GET");
        want.arg("myapp:enqueued:high");
        assert_eq!(packed, [want.get_packed_command()]);
    }
}
