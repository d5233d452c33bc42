//! bee-queue (npm `bee-queue` 2.x): every key of a queue is under
//! `<prefix>:<q>:` (`lib/queue.js` `toKey`; prefix `bq` by default,
//! `lib/defaults.js`). `waiting` is LPUSHed (`lib/lua/addJob.lua`) and
//! taken from the tail (`_waitForJob`: `BRPOPLPUSH waiting active`), so
//! the next job is at `LINDEX -1`; every job is one JSON field of the
//! `jobs` hash (`Job#toData`), whose `options.timestamp` is `Date.now()`
//! when the producer made it. `delayed` is scored by due time in ms. A job
//! is stalled, by bee-queue's rule, when it is still in `stalling` once the
//! stall window that snapshotted it has ended (`stallBlock` gone).

use std::collections::{BTreeMap, BTreeSet};

use redis::Value;
use serde::Deserialize;
use serde::de::IgnoredAny;

use super::super::library::{
    Arrivals, Counters, Follow, Hidden, JobState, KeyType, Keys, Library, Mark, MarkRead,
    OptionError, Owned, Preset, PresetKind, QueueSample, ReadReply, Reason, Recognise, Registry,
    Seen, Stage, Unit, Written, cmd, count, display_key, escape_glob, facts, key, options_of,
    prefix_or, preset_sample, reply, set_state, sorted, under,
};

/// bee-queue's `preset` name.
pub const KIND: PresetKind = PresetKind::named("bee-queue");

/// bee-queue's own key prefix (`lib/defaults.js`).
pub const DEFAULT_PREFIX: &str = "bq";

/// The options of a `- preset: bee-queue` entry: the one declaration of the
/// words it takes (`Library::options`, and the refusal of any other).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Options {
    /// `prefix:`, bee-queue's own `bq` by default.
    #[serde(default)]
    prefix: Option<String>,
}

/// bee-queue: queues found by their `jobs` hashes, told from any other
/// hash of that name by one job's JSON.
pub struct BeeQueue;

impl Library for BeeQueue {
    fn kind(&self) -> PresetKind {
        KIND
    }

    fn title(&self) -> &'static str {
        "bee-queue"
    }

    fn options(&self) -> &'static [&'static str] {
        options_of::<Options>()
    }

    fn configure(&self, written: &Written) -> Result<Preset, OptionError> {
        let o: Options = written.read()?;
        let prefix = prefix_or(o.prefix, self.default_prefix())?;
        Ok(Preset::new(self.kind(), &prefix))
    }

    fn default_prefix(&self) -> &'static str {
        DEFAULT_PREFIX
    }

    /// Every queue holding a job has its `jobs` hash (`addJob.lua`,
    /// `addDelayedJob.lua`); bee-queue keeps no list of queue names.
    fn registry(&self, preset: &Preset) -> Registry {
        let p = escape_glob(preset.prefix.as_bytes());
        Registry::Scan {
            pattern: key(&[&p, b":*:jobs"]),
            key_type: Some(KeyType::Hash),
        }
    }

    fn queue_of_key(&self, preset: &Preset, k: &[u8]) -> Option<Vec<u8>> {
        let name = k
            .strip_prefix(preset.prefix.as_bytes())?
            .strip_prefix(b":")?
            .strip_suffix(b":jobs")?;
        (!name.is_empty()).then(|| name.to_vec())
    }

    /// One job of the queue's `jobs` hash: an app's own `<prefix>:x:jobs`
    /// hash is no bee-queue queue.
    fn queue_mark(&self, preset: &Preset, queue: &[u8]) -> Option<Mark> {
        let jobs = k(&preset.prefix, queue, b"jobs");
        Some(Mark {
            cmd: marks_cmd(&jobs),
            key: jobs,
        })
    }

    fn takes_marked(&self, reply: &Value) -> Result<bool, Reason> {
        has_marks(reply)
    }

    /// Every key of a queue is under `<prefix>:<q>:` (`toKey`).
    fn owned(&self, preset: &Preset, units: &[Unit]) -> Vec<Owned> {
        units
            .iter()
            .filter_map(|u| match u {
                Unit::Queue(q) => Some(Owned::Under(k(&preset.prefix, q, b""))),
                Unit::Shared => None,
            })
            .collect()
    }

    /// Its `id` counter, INCRed for each job made without an id of its
    /// own (`addJob.lua`, `addDelayedJob.lua`).
    fn arrivals(&self) -> Arrivals {
        Arrivals::IdCounter
    }

    fn plan(&self, preset: &Preset, unit: &Unit, now: f64) -> Vec<redis::Cmd> {
        plan(&preset.prefix, unit.name(), now)
    }

    fn read(&self, preset: &Preset, unit: &Unit, r: &[Value], _: f64) -> Stage {
        read(&preset.prefix, unit.name(), r)
    }

    /// An unread `jobs` hash: every key of that queue, under
    /// `<prefix>:<name>:`.
    fn withheld(&self, mark: &[u8], keys: &Keys) -> Vec<Vec<u8>> {
        match mark.strip_suffix(b":jobs") {
            Some(base) => under(keys, &key(&[base, b":"])).cloned().collect(),
            None => Vec::new(),
        }
    }

    /// The names an unread `jobs` hash may hide: the queue's name as zero
    /// config reads it, and `<prefix>:<name>` (its label beside a queue of
    /// that name at another prefix).
    fn hidden(&self, mark: &[u8]) -> Option<Hidden> {
        let base = mark.strip_suffix(b":jobs")?;
        Some(match queue_of_jobs(mark) {
            Some((_, name)) => Hidden::Names(vec![display_key(name), display_key(base)]),
            None => Hidden::Any,
        })
    }

    /// Recognised at any prefix by its `jobs` hashes.
    fn recognition(&self) -> Option<&dyn Recognise> {
        Some(self)
    }
}

impl Recognise for BeeQueue {
    /// Its `jobs` hashes, found by a SCAN of one pattern.
    fn relisted_each_round(&self) -> bool {
        true
    }

    /// A `<prefix>:<name>:jobs` key (any prefix), read for one job.
    fn mark_read(&self, k: &[u8]) -> Option<MarkRead> {
        k.ends_with(b":jobs").then(|| MarkRead::Cmd(marks_cmd(k)))
    }

    /// Before the libraries told by an `id` counter beside lists named
    /// like theirs: bee-queue's `id`, `active` and `delayed` look alike.
    fn claim_rank(&self) -> u8 {
        0
    }

    /// A `jobs` hash one of whose values is a bee-queue job, at any
    /// prefix ([`queue_of_jobs`]). Its `<prefix>:<name>:id` counter is
    /// claimed (no other library's), and so is that of a `jobs` hash whose
    /// read went unread: whose queue it is is unknown.
    fn recognise(
        &self,
        seen: &Seen,
        _: &Keys,
        claimed: &mut BTreeSet<Vec<u8>>,
    ) -> Vec<(Preset, Vec<Unit>)> {
        let mut by_prefix: BTreeMap<&[u8], Vec<Unit>> = BTreeMap::new();
        for (jobs, reply) in seen.replies() {
            if has_marks(reply) != Ok(true) {
                continue;
            }
            if let Some((prefix, name)) = queue_of_jobs(jobs) {
                claimed.insert(id_beside(jobs));
                by_prefix
                    .entry(prefix)
                    .or_default()
                    .push(Unit::Queue(name.to_vec()));
            }
        }
        for jobs in seen.unread.keys().chain(seen.bounded.keys()) {
            if queue_of_jobs(jobs).is_some() {
                claimed.insert(id_beside(jobs));
            }
        }
        by_prefix
            .into_iter()
            .filter_map(|(prefix, units)| {
                let prefix = std::str::from_utf8(prefix).ok()?;
                Some((Preset::new(KIND, prefix), sorted(units)))
            })
            .collect()
    }
}

/// The `id` counter beside a `<prefix>:<name>:jobs` hash.
fn id_beside(jobs: &[u8]) -> Vec<u8> {
    let base = jobs.strip_suffix(b":jobs").unwrap_or(jobs);
    key(&[base, b":id"])
}

/// `<prefix>:<q>:<name>`.
fn k(prefix: &str, q: &[u8], name: &[u8]) -> Vec<u8> {
    key(&[prefix.as_bytes(), b":", q, b":", name])
}

/// The highest `delayed` score due at `now` (unix seconds): bee-queue's
/// `raiseDelayedJobs.lua` raises `ZRANGEBYSCORE delayed 0 <Date.now()>`,
/// so a job due in this very millisecond counts.
fn due_ms(now: f64) -> u64 {
    (now * 1e3).floor().max(0.0) as u64
}

/// Round 1: ten read-only commands. `stalling` is read before `stallBlock`
/// (a pipeline runs in order): a stall check landing between them then
/// shows its new window over the old snapshot (0 stalled for one poll),
/// never a fresh snapshot of every active job as stalled.
pub fn plan(prefix: &str, q: &[u8], now: f64) -> Vec<redis::Cmd> {
    let c = |name: &str, n: &[u8]| cmd(name, &k(prefix, q, n));
    let mut overdue = c("ZCOUNT", b"delayed");
    overdue.arg("-inf").arg(due_ms(now));
    let mut next = c("LINDEX", b"waiting");
    next.arg(-1);
    vec![
        c("LLEN", b"waiting"),
        c("LLEN", b"active"),
        c("ZCARD", b"delayed"),
        c("SCARD", b"succeeded"),
        c("SCARD", b"failed"),
        overdue,
        c("GET", b"id"),
        next,
        c("SCARD", b"stalling"),
        c("EXISTS", b"stallBlock"),
    ]
}

/// Reads [`plan`]'s replies (pure), and plans round 2: the next job's JSON,
/// for its age.
pub fn read(prefix: &str, q: &[u8], r: &[Value]) -> Stage {
    let at = |i: usize| r.get(i).unwrap_or(&Value::Nil);
    let mut s = preset_sample(KIND, q);
    set_state(&mut s, JobState::Waiting, count(at(0)));
    set_state(&mut s, JobState::Active, count(at(1)));
    // Scheduled jobs and failed ones retrying after a backoff alike
    // (`_finishJob`: `ZADD delayed <now + delay>`).
    set_state(&mut s, JobState::Delayed, count(at(2)));
    set_state(&mut s, JobState::Completed, count(at(3)));
    set_state(&mut s, JobState::Failed, count(at(4)));
    let f = facts(&mut s);
    // Due jobs stay in `delayed` until a queue with `activateDelayedJobs`
    // raises them (off by default).
    f.overdue = count(at(5));
    f.stalled = stalled(at(8), at(9));
    // bee-queue cannot pause a queue in Redis (`Queue#close` stops one
    // process): `paused` stays `None`.
    if let Some(added) = reply::as_u64(at(6)) {
        s.set_counters(Counters {
            published: Some(added),
            ..Counters::default()
        });
    }
    let mut follow = Vec::new();
    match at(7) {
        Value::Nil if count(at(0)) == Some(0) => s.oldest_age_seconds = Some(0.0),
        v => {
            if let Some(id) = reply::as_bytes(v) {
                let mut c = cmd("HGET", &k(prefix, q, b"jobs"));
                c.arg(id);
                follow.push((c, Follow::Read(ReadReply(apply_job))));
            }
        }
    }
    Stage { sample: s, follow }
}

/// Stalled jobs by bee-queue's rule (README "Under the hood",
/// `checkStalledJobs.lua`): a stall check snapshots `active` into
/// `stalling` and sets `stallBlock` for one `stallInterval`; each live
/// worker removes its jobs from `stalling` every half interval
/// (`_preventStall`). Whatever is still in `stalling` once `stallBlock` has
/// expired missed its window: the next check moves it back to `waiting`.
/// While the window runs, its members have not missed it yet: 0. Every
/// removal from `active` removes from `stalling` too (`_finishJob`'s MULTI,
/// `removeJob.lua`, the check itself), so `SCARD stalling` counts active
/// jobs. Unknown when either read failed.
fn stalled(stalling: &Value, block: &Value) -> Option<u64> {
    match reply::as_u64(block)? {
        0 => count(stalling),
        _ => count(stalling).map(|_| 0),
    }
}

/// The part of a job's JSON (`Job#toData`) the exporter reads. Its four
/// fields are always written, so they also tell bee-queue's job from
/// another JSON value.
#[derive(Deserialize)]
struct JobJson {
    /// The job's payload: required, never read.
    #[serde(rename = "data")]
    _data: IgnoredAny,
    /// Its options, with the stamps.
    options: JobOptions,
    /// `created`, `succeeded`, `failed`, `retrying`: required, never read.
    #[serde(rename = "status")]
    _status: IgnoredAny,
    /// Reported progress: required, never read.
    #[serde(rename = "progress")]
    _progress: IgnoredAny,
}

/// `options` of a job's JSON.
#[derive(Deserialize)]
struct JobOptions {
    /// `Date.now()` (ms) when the producer made the job (`Job` constructor).
    timestamp: f64,
    /// The due time (ms) it was scheduled for (`Job#delayUntil`), if any.
    #[serde(default)]
    delay: Option<f64>,
}

/// Since when (unix seconds) the job whose JSON is `json` can have been
/// waiting: its `options.timestamp`, or its due time when it was scheduled
/// later (a raised job waits from then on, not from when it was made).
/// `None` for a value that is not a bee-queue job.
pub fn waiting_since(json: &[u8]) -> Option<f64> {
    let job: JobJson = serde_json::from_slice(json).ok()?;
    let ms = job
        .options
        .delay
        .map_or(job.options.timestamp, |d| d.max(job.options.timestamp));
    (ms.is_finite() && ms > 0.0).then_some(ms / 1e3)
}

/// Applies the reply to round 2's `HGET jobs <id>` to `s` (pure): its age,
/// `now −` [`waiting_since`]. A job gone meanwhile (nil) or a reply that
/// is no bee-queue job leaves the age unknown for this poll.
pub fn apply_job(s: &mut QueueSample, v: &Value, now: f64) {
    if let Some(t) = reply::as_bytes(v).and_then(waiting_since) {
        s.oldest_age_seconds = Some((now - t).max(0.0));
    }
}

/// The prefix and queue name of a `<prefix>:<q>:jobs` hash, as zero config
/// reads them. bee-queue allows `:` in both; the keys read are
/// `<prefix>:<q>:…` either way, so the split only names the queue: at the
/// default prefix (`bq:`) the rest is the name, elsewhere the last part is
/// the name and the prefix everything before it. `None` if either is empty.
pub fn queue_of_jobs(jobs: &[u8]) -> Option<(&[u8], &[u8])> {
    let rest = jobs.strip_suffix(b":jobs")?;
    let default = DEFAULT_PREFIX.as_bytes();
    let (prefix, name) = match rest
        .strip_prefix(default)
        .and_then(|r| r.strip_prefix(b":"))
    {
        Some(name) => (default, name),
        None => {
            let colon = rest.iter().rposition(|b| *b == b':')?;
            (&rest[..colon], &rest[colon + 1..])
        }
    };
    (!prefix.is_empty() && !name.is_empty()).then_some((prefix, name))
}

/// `HRANDFIELD <jobs> 1 WITHVALUES`: one job of a `jobs` hash, the mark
/// that tells bee-queue's from any other hash of that name (one field and
/// value, whatever the hash's size; Redis 6.2+).
pub fn marks_cmd(jobs: &[u8]) -> redis::Cmd {
    let mut c = cmd("HRANDFIELD", jobs);
    c.arg(1).arg("WITHVALUES");
    c
}

/// Whether a reply to [`marks_cmd`] is a bee-queue job: a value whose JSON
/// has `data`, `options.timestamp`, `status` and `progress`. A key of
/// another type or an empty hash marks nothing; a read Redis refused tells
/// nothing (`Err`).
pub fn has_marks(reply: &Value) -> Result<bool, Reason> {
    if let Some(reason) = reply::refusal(reply) {
        return Err(reason);
    }
    Ok(first_value(reply)
        .and_then(reply::as_bytes)
        .is_some_and(|json| waiting_since(json).is_some()))
}

/// The value of the first field/value pair of an `HRANDFIELD … WITHVALUES`
/// reply: flat `[field, value]` in RESP2, `[[field, value]]` in RESP3.
fn first_value(reply: &Value) -> Option<&Value> {
    let items = reply::as_array(reply)?;
    match items.first()? {
        Value::Array(pair) => pair.get(1),
        _ => items.get(1),
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::test_util::*;
    use super::*;

    /// Replies to [`plan`] for a queue with `waiting` jobs and `next` at the
    /// tail, `stalling` members and the `stallBlock` flag.
    fn replies(waiting: i64, next: Option<&str>, stalling: i64, block: i64) -> Vec<Value> {
        vec![
            int(waiting),
            int(1),
            int(2),
            int(3),
            int(4),
            int(1),
            bulk("9"),
            next.map_or(Value::Nil, bulk),
            int(stalling),
            int(block),
        ]
    }

    /// A job as bee-queue 2.0's `Job#toData` writes it.
    const JOB: &str = r#"{"data":{"i":0},"options":{"timestamp":1795893185402,"stacktraces":[]},"status":"created","progress":0}"#;

    #[test]
    fn keys_map_to_states_and_the_next_job_is_asked_for() {
        let st = read("bq", b"mail", &replies(5, Some("7"), 0, 1));
        let f = st.sample.preset.as_ref().unwrap();
        assert_eq!(f.states[&JobState::Waiting], Some(5));
        assert_eq!(f.states[&JobState::Active], Some(1));
        assert_eq!(f.states[&JobState::Delayed], Some(2));
        assert_eq!(f.states[&JobState::Completed], Some(3));
        assert_eq!(f.states[&JobState::Failed], Some(4));
        assert_eq!(f.states.len(), 5);
        assert_eq!(f.overdue, Some(1));
        assert_eq!(f.paused, None);
        assert_eq!(f.service_time, None);
        // The `id` counter: jobs created without an id of their own.
        assert_eq!(st.sample.counters().published, Some(9));
        assert_eq!(st.follow.len(), 1);
        assert!(matches!(st.follow[0].1, Follow::Read(_)));
        assert_eq!(
            st.follow[0].0.get_packed_command(),
            redis::cmd("HGET")
                .arg("bq:mail:jobs")
                .arg("7")
                .get_packed_command()
        );
    }

    #[test]
    fn stalled_counts_stalling_jobs_only_once_their_window_ended() {
        let open = read("bq", b"q", &replies(0, None, 2, 1));
        assert_eq!(open.sample.preset.as_ref().unwrap().stalled, Some(0));
        let ended = read("bq", b"q", &replies(0, None, 2, 0));
        assert_eq!(ended.sample.preset.as_ref().unwrap().stalled, Some(2));
        // Either read refused: unknown, not 0.
        let mut r = replies(0, None, 2, 0);
        r[8] = refused();
        assert_eq!(read("bq", b"q", &r).sample.preset.unwrap().stalled, None);
        let mut r = replies(0, None, 2, 1);
        r[9] = refused();
        assert_eq!(read("bq", b"q", &r).sample.preset.unwrap().stalled, None);
        let mut r = replies(0, None, 0, 1);
        r[8] = refused();
        assert_eq!(read("bq", b"q", &r).sample.preset.unwrap().stalled, None);
    }

    #[test]
    fn an_empty_queue_is_zero_seconds_old_and_a_refused_one_unknown() {
        let empty = read("bq", b"q", &replies(0, None, 0, 0));
        assert_eq!(empty.sample.oldest_age_seconds, Some(0.0));
        assert!(empty.follow.is_empty());
        let mut r = replies(0, None, 0, 0);
        r[0] = refused();
        r[7] = refused();
        let st = read("bq", b"q", &r);
        assert_eq!(st.sample.oldest_age_seconds, None);
        assert_eq!(
            st.sample.preset.as_ref().unwrap().states[&JobState::Waiting],
            None
        );
        assert!(st.follow.is_empty());
        // No `id` key (every job named by its producer, or none yet): unknown.
        let mut r = replies(0, None, 0, 0);
        r[6] = Value::Nil;
        assert_eq!(read("bq", b"q", &r).sample.counters().published, None);
    }

    #[test]
    fn a_job_waits_since_it_was_made_or_since_it_fell_due() {
        assert_eq!(waiting_since(JOB.as_bytes()), Some(1_795_893_185.402));
        let scheduled = r#"{"data":{},"options":{"timestamp":1000,"stacktraces":[],"delay":61000},"status":"created","progress":0}"#;
        assert_eq!(waiting_since(scheduled.as_bytes()), Some(61.0));
        // A delay before the stamp (never written by `delayUntil`) is ignored.
        let odd = r#"{"data":{},"options":{"timestamp":5000,"delay":1000},"status":"created","progress":0}"#;
        assert_eq!(waiting_since(odd.as_bytes()), Some(5.0));
        for not_a_job in [
            "not json",
            r#"{"options":{"timestamp":1}}"#,
            r#"{"data":1,"options":{},"status":"created","progress":0}"#,
            r#"{"data":1,"options":{"timestamp":0},"status":"created","progress":0}"#,
        ] {
            assert_eq!(waiting_since(not_a_job.as_bytes()), None, "{not_a_job}");
        }
        let mut s = preset_sample(KIND, b"q");
        apply_job(&mut s, &bulk(JOB), 1_795_893_195.402);
        let age = s.oldest_age_seconds.unwrap();
        assert!((age - 10.0).abs() < 1e-6, "{age}");
        // Gone between the rounds: unknown for this poll.
        let mut s = preset_sample(KIND, b"q");
        apply_job(&mut s, &Value::Nil, 5.0);
        assert_eq!(s.oldest_age_seconds, None);
    }

    #[test]
    fn overdue_counts_jobs_due_up_to_this_millisecond() {
        let packed = plan("bq", b"q", 1000.0004)[5].get_packed_command();
        assert_eq!(
            packed,
            redis::cmd("ZCOUNT")
                .arg("bq:q:delayed")
                .arg("-inf")
                .arg("1000000")
                .get_packed_command()
        );
        // `stalling` is asked before `stallBlock`.
        let cmds: Vec<_> = plan("bq", b"q", 0.0)
            .iter()
            .map(redis::Cmd::get_packed_command)
            .collect();
        let pos = |k: &str| {
            cmds.iter()
                .position(|c| c.windows(k.len()).any(|w| w == k.as_bytes()))
                .unwrap()
        };
        assert!(pos("bq:q:stalling") < pos("bq:q:stallBlock"));
    }

    #[test]
    fn a_jobs_hash_names_its_queue_from_the_default_prefix_or_the_right() {
        assert_eq!(
            queue_of_jobs(b"bq:mail:jobs"),
            Some((&b"bq"[..], &b"mail"[..]))
        );
        assert_eq!(
            queue_of_jobs(b"bq:eu:mail:jobs"),
            Some((&b"bq"[..], &b"eu:mail"[..]))
        );
        assert_eq!(
            queue_of_jobs(b"legacy:bq:reports:jobs"),
            Some((&b"legacy:bq"[..], &b"reports"[..]))
        );
        assert_eq!(queue_of_jobs(b"mail:jobs"), None);
        assert_eq!(queue_of_jobs(b"bq::jobs"), None);
        assert_eq!(queue_of_jobs(b"bq:mail:jobs2"), None);
    }

    /// What zero config read: `jobs` hashes' replies, and marks refused.
    fn seen(replies: &[(&str, Value)], refused_marks: &[&str]) -> Seen {
        let mut s = Seen::default();
        for (k, v) in replies {
            s.replies.insert(k.as_bytes().to_vec(), v.clone());
        }
        for k in refused_marks {
            s.unread.insert(k.as_bytes().to_vec(), Reason::Auth);
        }
        s
    }

    /// An `HRANDFIELD … WITHVALUES` reply holding `json`.
    fn one_job(json: &str) -> Value {
        Value::Array(vec![bulk("1"), bulk(json)])
    }

    /// Keys found by a scan, each of type `t`.
    fn found(keys: &[(&str, KeyType)]) -> super::super::super::super::discovery::Candidates {
        use super::super::super::super::discovery::{Candidate, Candidates};
        use super::super::super::super::tracked::KeyState;
        let keys = keys
            .iter()
            .map(|(k, t)| {
                let c = Candidate {
                    spec: 0,
                    exact: false,
                    state: KeyState::Typed(*t),
                };
                (k.as_bytes().to_vec(), c)
            })
            .collect();
        Candidates::of_pattern_keys(keys)
    }

    #[test]
    fn zero_config_takes_jobs_hashes_holding_its_jobs_and_claims_their_counters() {
        let s = seen(
            &[
                ("bq:mail:jobs", one_job(JOB)),
                ("legacy:bq:reports:jobs", one_job(JOB)),
                // An app's own hash of that name.
                ("app:users:jobs", one_job(r#"{"name":"x"}"#)),
            ],
            &["bq:secret:jobs"],
        );
        let mut claimed = BTreeSet::new();
        let entries = BeeQueue.recognise(&s, &Keys::new(), &mut claimed);
        let got: Vec<(String, Vec<Unit>)> =
            entries.into_iter().map(|(p, u)| (p.prefix, u)).collect();
        assert_eq!(
            got,
            [
                ("bq".to_string(), vec![Unit::Queue(b"mail".to_vec())]),
                (
                    "legacy:bq".to_string(),
                    vec![Unit::Queue(b"reports".to_vec())]
                ),
            ]
        );
        // The counters beside them, and beside the unread one, are no
        // other library's.
        let claimed: Vec<&[u8]> = claimed.iter().map(Vec::as_slice).collect();
        assert_eq!(
            claimed,
            [&b"bq:mail:id"[..], b"bq:secret:id", b"legacy:bq:reports:id"]
        );
    }

    #[test]
    fn its_id_counter_beside_active_and_delayed_is_never_taken_for_bulls() {
        // bee-queue's keys, which look like an old Bull queue's: an integer
        // `id` beside an `active` list and a `delayed` zset.
        let keys = found(&[
            ("bq:mail:active", KeyType::List),
            ("bq:mail:delayed", KeyType::Zset),
            ("bq:secret:active", KeyType::List),
            ("bq:secret:delayed", KeyType::Zset),
        ]);
        let s = seen(
            &[
                ("bq:mail:jobs", one_job(JOB)),
                ("bq:mail:id", bulk("5")),
                ("bq:secret:id", bulk("2")),
            ],
            &["bq:secret:jobs"],
        );
        let r = super::super::super::zero::classify::recognise(&s, &keys, &[]);
        let kinds: Vec<(&str, &str)> = r
            .entries
            .iter()
            .map(|(spec, _)| (spec.preset.kind.as_str(), spec.preset.prefix.as_str()))
            .collect();
        assert_eq!(kinds, [("bee-queue", "bq")], "{:?}", r.entries);
        assert!(r.consumed.contains(&b"bq:mail:active"[..]));
        // The unread queue's keys: neither bee-queue's nor plain.
        let withheld: Vec<&[u8]> = r.withheld.iter().map(Vec::as_slice).collect();
        assert_eq!(withheld, [&b"bq:secret:active"[..], b"bq:secret:delayed"]);
        assert_eq!(
            BeeQueue.hidden(b"bq:secret:jobs"),
            Some(Hidden::Names(vec!["secret".into(), "bq:secret".into()]))
        );
    }

    #[test]
    fn a_configured_entry_finds_its_queues_by_their_jobs_hashes() {
        let preset = Preset::new(KIND, "bq");
        assert_eq!(
            BeeQueue.registry(&preset),
            Registry::Scan {
                pattern: b"bq:*:jobs".to_vec(),
                key_type: Some(KeyType::Hash),
            }
        );
        let q = |k: &str| BeeQueue.queue_of_key(&preset, k.as_bytes());
        assert_eq!(q("bq:mail:jobs"), Some(b"mail".to_vec()));
        assert_eq!(q("bq:eu:mail:jobs"), Some(b"eu:mail".to_vec()));
        assert_eq!(q("bq::jobs"), None);
        assert_eq!(q("bqx:mail:jobs"), None);
        assert_eq!(
            BeeQueue.owned(&preset, &[Unit::Queue(b"mail".to_vec())]),
            [Owned::Under(b"bq:mail:".to_vec())]
        );
    }

    #[test]
    fn a_jobs_hash_is_bee_queues_when_its_job_is_one() {
        let pair = |v: &str| Value::Array(vec![bulk("1"), bulk(v)]);
        assert_eq!(has_marks(&pair(JOB)), Ok(true));
        assert_eq!(has_marks(&pair(r#"{"name":"x"}"#)), Ok(false));
        assert_eq!(has_marks(&pair("plain text")), Ok(false));
        // An empty hash (none) and a key of another type mark nothing.
        assert_eq!(has_marks(&Value::Array(vec![])), Ok(false));
        let wrongtype = redis::parse_redis_value(
            b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        )
        .unwrap();
        assert_eq!(has_marks(&wrongtype), Ok(false));
        assert!(has_marks(&refused()).is_err());
        // RESP3 answers `WITHVALUES` as one array per pair.
        let resp3 = Value::Array(vec![Value::Array(vec![bulk("1"), bulk(JOB)])]);
        assert_eq!(has_marks(&resp3), Ok(true));
    }
}
