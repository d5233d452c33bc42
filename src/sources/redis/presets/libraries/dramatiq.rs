//! Dramatiq's `RedisBroker` (PyPI `dramatiq[redis]` 2.x; every write is its
//! `dispatch.lua`): under a namespace (`dramatiq`), per queue `<q>` a list
//! of message ids `<ns>:<q>` (RPUSH, the workers' `fetch` LPOPs the head)
//! beside a hash `<ns>:<q>.msgs` of id → message; a delay queue `<q>.DQ`
//! laid out the same way; a dead-letter zset `<ns>:<q>.XQ` (scored by
//! when, in ms) with its `.XQ.msgs` hash; per worker and queue a set of the
//! ids it fetched and has not acked, `<ns>:__acks__.<worker id>.<q>`; and
//! the zset `<ns>:__heartbeats__` of worker ids scored by their last
//! dispatch (ms). No registry of queue names, no counter.

use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use redis::Value;

use super::super::library::{
    Follow, Hidden, JobState, KeyType, Keys, Library, MarkRead, OptionError, Owned, Preset,
    PresetKind, Recognise, Registry, Seen, Stage, TimeUnit, Unit, Written, cmd, count, display_key,
    escape_glob, facts, key, options_of, prefix_or, preset_sample, queue_label, reply, set_state,
    sorted, stalled_check_limit, timeout, under as keys_under,
};

/// Dramatiq's `preset` name.
pub const KIND: PresetKind = PresetKind::named("dramatiq");

/// `RedisBroker`'s default `namespace`.
pub const DEFAULT_NAMESPACE: &str = "dramatiq";

/// `RedisBroker`'s default `heartbeat_timeout` (`DEFAULT_HEARTBEAT_TIMEOUT`,
/// 60,000 ms): a worker silent this long is dead, and its acks are work
/// the broker's maintenance will put back on the queue.
pub const DEFAULT_HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(60);

/// The suffix of a queue's delay queue (`common.dq_name`).
const DELAY: &[u8] = b".DQ";

/// The suffix of a queue's dead-letter queue (`common.xq_name`).
const DEAD: &[u8] = b".XQ";

/// The suffix of the hash holding a list's (or zset's) messages.
const MESSAGES: &[u8] = b".msgs";

/// The heartbeats zset's name under the namespace.
const HEARTBEATS: &[u8] = b"__heartbeats__";

/// The acks sets' name under the namespace, before `.<worker>.<queue>`.
const ACKS: &[u8] = b"__acks__";

/// `<ns>:<name>`.
fn under(ns: &str, name: &[u8]) -> Vec<u8> {
    key(&[ns.as_bytes(), b":", name])
}

/// `<ns>:__heartbeats__`: the zset every dispatch (a producer's `enqueue`
/// too) adds its broker id to, scored by the time in ms; the mark of a
/// namespace.
pub fn heartbeats(ns: &str) -> Vec<u8> {
    under(ns, HEARTBEATS)
}

/// `<ns>:__acks__.<worker>.<q>`: the ids `worker` fetched from `q` and has
/// not acked yet.
fn acks(ns: &str, worker: &[u8], q: &[u8]) -> Vec<u8> {
    under(ns, &key(&[ACKS, b".", worker, b".", q]))
}

/// The keys of queue `q` the poll reads, by what they hold.
struct QueueKeys {
    /// `<ns>:<q>`: ids of the messages waiting.
    list: Vec<u8>,
    /// `<ns>:<q>.msgs`: every message of `q` neither acked nor dead.
    messages: Vec<u8>,
    /// `<ns>:<q>.DQ.msgs`: every delayed message, fetched or not.
    delayed: Vec<u8>,
    /// `<ns>:<q>.XQ`: the dead-lettered ids.
    dead: Vec<u8>,
}

impl QueueKeys {
    /// The keys of queue `q` under the namespace `ns`.
    fn of(ns: &str, q: &[u8]) -> QueueKeys {
        QueueKeys {
            list: under(ns, q),
            messages: under(ns, &key(&[q, MESSAGES])),
            delayed: under(ns, &key(&[q, DELAY, MESSAGES])),
            dead: under(ns, &key(&[q, DEAD])),
        }
    }
}

/// Every key of queue `q` under `ns`, for ownership: its list and delay
/// list, the dead-letter zset, their three message hashes. (The acks sets
/// carry a worker id: the namespace's are owned as one prefix.)
pub fn owned(ns: &str, q: &[u8]) -> Vec<Vec<u8>> {
    let name = |suffix: &[&[u8]]| {
        let mut parts = vec![q];
        parts.extend_from_slice(suffix);
        under(ns, &key(&parts))
    };
    vec![
        name(&[]),
        name(&[MESSAGES]),
        name(&[DELAY]),
        name(&[DELAY, MESSAGES]),
        name(&[DEAD]),
        name(&[DEAD, MESSAGES]),
    ]
}

/// Whether `name` can be a Dramatiq queue's: the actor's check
/// (`actor._queue_name_re`, `[a-zA-Z_][a-zA-Z0-9._-]*`), so it holds no
/// `:` and a namespace's keys never pass for another's.
pub fn is_queue_name(name: &[u8]) -> bool {
    matches!(name.first(), Some(b) if b.is_ascii_alphabetic() || *b == b'_')
        && name
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// The queue a key under the namespace belongs to (`rest` is the key less
/// `<ns>:`): `<q>`, `<q>.msgs`, `<q>.DQ`, `<q>.DQ.msgs`, `<q>.XQ`,
/// `<q>.XQ.msgs` all give `<q>` (`common.q_name`); `None` for the
/// heartbeats zset, acks sets and any name no queue can have.
pub fn queue_of(rest: &[u8]) -> Option<&[u8]> {
    let q = rest.strip_suffix(MESSAGES).unwrap_or(rest);
    let q = q
        .strip_suffix(DELAY)
        .or_else(|| q.strip_suffix(DEAD))
        .unwrap_or(q);
    // A queue may be named `__heartbeats__` or `__acks__.x` by the actor's
    // rule, but its keys would be the broker's own: those names are not
    // taken for queues.
    let broker_own = rest == HEARTBEATS || rest.starts_with(&key(&[ACKS, b"."]));
    (is_queue_name(q) && !broker_own).then_some(q)
}

/// Round 1: six read-only commands. `dead_before_ms` is the newest
/// heartbeat of a dead worker (now − `heartbeat_timeout`, in ms, as
/// maintenance computes it); at most `limit` + 1 dead workers are listed.
pub fn plan(ns: &str, q: &[u8], dead_before_ms: u64, limit: usize) -> Vec<redis::Cmd> {
    let k = QueueKeys::of(ns, q);
    let mut head = cmd("LINDEX", &k.list);
    head.arg(0);
    let mut dead_workers = cmd("ZRANGEBYSCORE", &heartbeats(ns));
    dead_workers
        .arg("-inf")
        .arg(dead_before_ms)
        .arg("LIMIT")
        .arg(0)
        .arg(limit + 1);
    vec![
        cmd("LLEN", &k.list),
        cmd("HLEN", &k.messages),
        cmd("HLEN", &k.delayed),
        cmd("ZCARD", &k.dead),
        head,
        dead_workers,
    ]
}

/// The head message's `HGET` reply is its JSON (`JSONEncoder`, Dramatiq's
/// default), whose `message_timestamp` is when it was sent, in ms
/// (`Message.message_timestamp`). A `PickleEncoder`'s message is no JSON:
/// its age stays unknown.
const SENT_AT: Follow = Follow::JsonStamp("/message_timestamp", TimeUnit::Milliseconds);

/// Reads [`plan`]'s replies (pure).
pub fn read(ns: &str, q: &[u8], r: &[Value], limit: usize) -> Stage {
    let at = |i: usize| r.get(i).unwrap_or(&Value::Nil);
    let k = QueueKeys::of(ns, q);
    let mut s = preset_sample(KIND, q);
    let waiting = count(at(0));
    set_state(&mut s, JobState::Waiting, waiting);
    // `.msgs` holds every message of the queue until it is acked or dead:
    // those in the list and those in some worker's acks set (`fetch` moves
    // an id from the list to the acks set, `ack` drops both, maintenance
    // and `requeue` push it back). So the acks hold the rest.
    let active = count(at(1))
        .zip(waiting)
        .map(|(all, listed)| all.saturating_sub(listed));
    set_state(&mut s, JobState::Active, active);
    // Delayed messages a worker fetched wait in its memory (and its
    // `.DQ` acks set) until their eta; the hash holds both kinds.
    set_state(&mut s, JobState::Delayed, count(at(2)));
    set_state(&mut s, JobState::Failed, count(at(3)));
    let mut follow = Vec::new();
    match at(4) {
        Value::Nil => s.oldest_age_seconds = Some(0.0),
        v => {
            if let Some(id) = reply::as_bytes(v) {
                let mut c = cmd("HGET", &k.messages);
                c.arg(id);
                follow.push((c, SENT_AT));
            }
        }
    }
    let dead: Option<Vec<&[u8]>> =
        reply::as_array(at(5)).and_then(|items| items.iter().map(reply::as_bytes).collect());
    // More dead workers than the limit: their acks are not all read, so
    // the stalled count is unknown rather than a part of it.
    if let Some(dead) = dead.filter(|d| d.len() <= limit) {
        facts(&mut s).stalled = Some(0);
        for worker in dead {
            follow.push((cmd("SCARD", &acks(ns, worker, q)), Follow::AddStalled));
        }
    }
    Stage { sample: s, follow }
}

/// Whether `id` is a uuid4 as text (`str(uuid4())`, a `RedisBroker`'s
/// `broker_id`): 36 characters, hex digits and four dashes.
fn is_uuid(id: &[u8]) -> bool {
    id.len() == 36
        && id.iter().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => *b == b'-',
            _ => b.is_ascii_hexdigit(),
        })
}

/// The namespace of a heartbeats zset's name `<ns>:__heartbeats__` (a
/// non-empty namespace: an entry's `prefix` may not be empty).
fn namespace_of_heartbeats(k: &[u8]) -> Option<&[u8]> {
    k.strip_suffix(HEARTBEATS)?
        .strip_suffix(b":")
        .filter(|ns| !ns.is_empty())
}

/// The namespace and queue of a message hash `<ns>:<q>.msgs` (also
/// `<q>.DQ.msgs`, `<q>.XQ.msgs`): queue names hold no `:`, so the
/// namespace is everything before the last one.
fn queue_of_messages(k: &[u8]) -> Option<(&[u8], &[u8])> {
    k.strip_suffix(MESSAGES)?;
    let at = k.iter().rposition(|b| *b == b':')?;
    let (ns, rest) = (&k[..at], &k[at + 1..]);
    Some((ns, queue_of(rest)?)).filter(|(ns, _)| !ns.is_empty())
}

/// The options of a `- preset: dramatiq` entry: the one declaration of the
/// words it takes (`Library::options`, and the refusal of any other).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Options {
    /// `prefix:`, `RedisBroker`'s `namespace` (`dramatiq` by default).
    #[serde(default)]
    prefix: Option<String>,
    /// `heartbeat_timeout:`, as the broker is given it (60 s by default),
    /// a duration.
    #[serde(default)]
    heartbeat_timeout: Option<String>,
    /// `stalled_check_limit:`: the workers' heartbeats checked per poll,
    /// at most.
    #[serde(default)]
    stalled_check_limit: Option<usize>,
}

/// Dramatiq's `RedisBroker`: queues found by their message hashes.
pub struct Dramatiq;

impl Library for Dramatiq {
    fn kind(&self) -> PresetKind {
        KIND
    }

    fn title(&self) -> &'static str {
        "Dramatiq"
    }

    fn options(&self) -> &'static [&'static str] {
        options_of::<Options>()
    }

    /// `RedisBroker`'s `namespace`.
    fn default_prefix(&self) -> &'static str {
        DEFAULT_NAMESPACE
    }

    /// `heartbeat_timeout` as the broker is given it (60 s by default):
    /// kept as the time after which a taken job counts as stalled.
    fn configure(&self, written: &Written) -> Result<Preset, OptionError> {
        let given: Options = written.read()?;
        let limit = stalled_check_limit(given.stalled_check_limit)?;
        let prefix = prefix_or(given.prefix, self.default_prefix())?;
        let timeout = timeout("heartbeat_timeout", given.heartbeat_timeout.as_deref())?
            .unwrap_or(DEFAULT_HEARTBEAT_TIMEOUT);
        if timeout.is_zero() {
            return Err("heartbeat_timeout: must be greater than 0s".into());
        }
        Ok(Preset {
            visibility_timeout: timeout,
            stalled_check_limit: limit,
            ..Preset::new(self.kind(), &prefix)
        })
    }

    fn printed_options(&self, preset: &Preset, _: fn(&str) -> String) -> Vec<String> {
        let t = preset.visibility_timeout;
        if t == DEFAULT_HEARTBEAT_TIMEOUT || t.is_zero() {
            return Vec::new();
        }
        vec![format!("heartbeat_timeout: {}ms", t.as_millis())]
    }

    /// No registry: every message of a queue is in one of its three
    /// message hashes until acked, so `SCAN MATCH <ns>:*.msgs TYPE hash`
    /// finds every queue holding a message (a drained queue has no key).
    fn registry(&self, preset: &Preset) -> Registry {
        let ns = escape_glob(preset.prefix.as_bytes());
        Registry::Scan {
            pattern: key(&[&ns, b":*", MESSAGES]),
            key_type: Some(KeyType::Hash),
        }
    }

    fn queue_of_key(&self, preset: &Preset, k: &[u8]) -> Option<Vec<u8>> {
        queue_of_messages(k)
            .filter(|(ns, _)| *ns == preset.prefix.as_bytes())
            .map(|(_, q)| q.to_vec())
    }

    /// The delay list, the message hashes, the acks sets, and the
    /// heartbeats zset (read by `ZRANGEBYSCORE`, which the plan's types do
    /// not cover), even with no queue left.
    fn owned(&self, preset: &Preset, units: &[Unit]) -> Vec<Owned> {
        let ns = preset.prefix.as_str();
        let mut v = vec![
            Owned::Key(heartbeats(ns)),
            Owned::Under(under(ns, &key(&[ACKS, b"."]))),
        ];
        for q in units.iter().map(Unit::name).filter(|q| !q.is_empty()) {
            v.extend(owned(ns, q).into_iter().map(Owned::Key));
        }
        v
    }

    fn plan(&self, preset: &Preset, unit: &Unit, now: f64) -> Vec<redis::Cmd> {
        let timeout_ms = preset.visibility_timeout.as_secs_f64() * 1e3;
        let dead_before_ms = (now * 1e3 - timeout_ms).max(0.0) as u64;
        plan(
            &preset.prefix,
            unit.name(),
            dead_before_ms,
            preset.stalled_check_limit,
        )
    }

    fn read(&self, preset: &Preset, unit: &Unit, r: &[Value], _: f64) -> Stage {
        read(&preset.prefix, unit.name(), r, preset.stalled_check_limit)
    }

    /// An unread heartbeats zset: any key under its namespace may be
    /// Dramatiq's; an unread message hash: its queue's keys.
    fn withheld(&self, mark: &[u8], keys: &Keys) -> Vec<Vec<u8>> {
        if let Some(ns) = namespace_of_heartbeats(mark) {
            return keys_under(keys, &key(&[ns, b":"])).cloned().collect();
        }
        let Some((ns, q)) = queue_of_messages(mark) else {
            return Vec::new();
        };
        let ns = String::from_utf8_lossy(ns);
        owned(&ns, q)
            .into_iter()
            .filter(|k| keys.contains_key(k))
            .collect()
    }

    /// An unread heartbeats zset: every name (a queue whose messages are
    /// all taken has only hashes, which no scan types); an unread message
    /// hash: its queue.
    fn hidden(&self, mark: &[u8]) -> Option<Hidden> {
        if namespace_of_heartbeats(mark).is_some() {
            return Some(Hidden::Every);
        }
        let (ns, q) = queue_of_messages(mark)?;
        let label = queue_label(q);
        let qualified = format!("{}:{label}", display_key(ns));
        Some(Hidden::Names(vec![label, qualified]))
    }

    /// By its heartbeats zset and message hashes ([`Recognise::recognise`]).
    fn recognition(&self) -> Option<&dyn Recognise> {
        Some(self)
    }
}

impl Recognise for Dramatiq {
    /// Its queues are listed by a SCAN of one pattern, as BullMQ's.
    fn relisted_each_round(&self) -> bool {
        true
    }

    /// `<ns>:__heartbeats__` (read for its first member, a broker id) and
    /// the message hashes `<ns>:<q>.msgs` (read for their size: a hash).
    fn mark_read(&self, k: &[u8]) -> Option<MarkRead> {
        if namespace_of_heartbeats(k).is_some() {
            let mut c = cmd("ZRANGE", k);
            c.arg(0).arg(0);
            return Some(MarkRead::Cmd(c));
        }
        queue_of_messages(k).map(|_| MarkRead::Cmd(cmd("HLEN", k)))
    }

    /// A namespace whose `__heartbeats__` zset holds a broker id, with a
    /// queue per message hash under it (a hash alone, or a heartbeats zset
    /// of other members, is some app's and marks nothing).
    fn recognise(
        &self,
        seen: &Seen,
        _: &Keys,
        _: &mut BTreeSet<Vec<u8>>,
    ) -> Vec<(Preset, Vec<Unit>)> {
        let mut namespaces: BTreeMap<&[u8], Vec<Unit>> = BTreeMap::new();
        for (k, reply) in seen.replies() {
            let first = reply::as_array(reply)
                .and_then(|m| m.first())
                .and_then(reply::as_bytes);
            if let (Some(ns), Some(id)) = (namespace_of_heartbeats(k), first)
                && is_uuid(id)
            {
                namespaces.entry(ns).or_default();
            }
        }
        for (k, reply) in seen.replies() {
            if let (Some((ns, q)), Some(_)) = (queue_of_messages(k), reply::as_u64(reply))
                && let Some(units) = namespaces.get_mut(ns)
            {
                units.push(Unit::Queue(q.to_vec()));
            }
        }
        namespaces
            .into_iter()
            .filter_map(|(ns, units)| {
                let mut preset = Preset::new(KIND, std::str::from_utf8(ns).ok()?);
                preset.visibility_timeout = DEFAULT_HEARTBEAT_TIMEOUT;
                Some((preset, sorted(units)))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::apply;
    use super::super::super::test_util::*;
    use super::*;

    /// Round-1 replies: `waiting` listed, `messages` in `.msgs`, `delayed`,
    /// `dead`, the head's id, the dead workers.
    fn replies(waiting: i64, messages: i64, head: Option<&str>, dead: &[&str]) -> Vec<Value> {
        vec![
            int(waiting),
            int(messages),
            int(2),
            int(1),
            head.map_or(Value::Nil, bulk),
            list(dead),
        ]
    }

    fn states(st: &Stage) -> &std::collections::BTreeMap<JobState, Option<u64>> {
        &st.sample.preset.as_ref().unwrap().states
    }

    #[test]
    fn the_list_the_message_hashes_and_the_dead_letters_map_to_states() {
        let st = read(
            "dramatiq",
            b"default",
            &replies(3, 5, Some("id1"), &[]),
            100,
        );
        let s = states(&st);
        assert_eq!(s[&JobState::Waiting], Some(3));
        // Five messages not acked, three of them listed: two fetched.
        assert_eq!(s[&JobState::Active], Some(2));
        assert_eq!(s[&JobState::Delayed], Some(2));
        assert_eq!(s[&JobState::Failed], Some(1));
        assert_eq!(s.len(), 4, "no retry, completed or paused state: {s:?}");
        let f = st.sample.preset.as_ref().unwrap();
        assert_eq!((f.paused, f.overdue, f.stalled), (None, None, Some(0)));
        assert_eq!(st.follow.len(), 1);
        assert_eq!(
            st.follow[0].0.get_packed_command(),
            redis::cmd("HGET")
                .arg("dramatiq:default.msgs")
                .arg("id1")
                .get_packed_command()
        );
    }

    #[test]
    fn an_empty_queue_is_zero_with_age_zero_and_nothing_to_follow() {
        let st = read("dramatiq", b"q", &replies(0, 0, None, &[]), 100);
        assert_eq!(states(&st)[&JobState::Waiting], Some(0));
        assert_eq!(states(&st)[&JobState::Active], Some(0));
        assert_eq!(st.sample.oldest_age_seconds, Some(0.0));
        assert!(st.follow.is_empty());
    }

    #[test]
    fn each_dead_workers_acks_of_the_queue_are_counted_as_stalled() {
        let w1 = "0b8e3c1e-8d5e-4f0a-9d43-6c1f4a2b7e10";
        let w2 = "5f1d2c3b-1111-4222-8333-944455556666";
        let mut st = read("ns:eu", b"q", &replies(0, 3, None, &[w1, w2]), 100);
        let cmds: Vec<_> = st
            .follow
            .iter()
            .map(|(c, f)| (c.get_packed_command(), *f))
            .collect();
        assert_eq!(
            cmds,
            [w1, w2].map(|w| (
                redis::cmd("SCARD")
                    .arg(format!("ns:eu:__acks__.{w}.q"))
                    .get_packed_command(),
                Follow::AddStalled
            ))
        );
        apply(&mut st.sample, Follow::AddStalled, &int(2), 0.0);
        apply(&mut st.sample, Follow::AddStalled, &Value::Nil, 0.0);
        assert_eq!(st.sample.preset.as_ref().unwrap().stalled, Some(2));
        apply(&mut st.sample, Follow::AddStalled, &refused(), 0.0);
        assert_eq!(st.sample.preset.as_ref().unwrap().stalled, None);
    }

    #[test]
    fn more_dead_workers_than_the_limit_leave_stalled_unknown() {
        let st = read("dramatiq", b"q", &replies(0, 3, None, &["a", "b", "c"]), 2);
        assert_eq!(st.sample.preset.as_ref().unwrap().stalled, None);
        assert!(st.follow.is_empty());
        let refused_list = {
            let mut r = replies(0, 3, None, &[]);
            r[5] = refused();
            r
        };
        let st = read("dramatiq", b"q", &refused_list, 2);
        assert_eq!(st.sample.preset.as_ref().unwrap().stalled, None);
    }

    #[test]
    fn an_unreadable_reply_leaves_its_state_unknown() {
        let mut r = replies(3, 5, None, &[]);
        r[0] = refused();
        let st = read("dramatiq", b"q", &r, 100);
        // Waiting unknown, and so active, which is counted from it.
        assert_eq!(states(&st)[&JobState::Waiting], None);
        assert_eq!(states(&st)[&JobState::Active], None);
        assert_eq!(states(&st)[&JobState::Delayed], Some(2));
        let mut r = replies(3, 5, None, &[]);
        r[1] = refused();
        let st = read("dramatiq", b"q", &r, 100);
        assert_eq!(states(&st)[&JobState::Waiting], Some(3));
        assert_eq!(states(&st)[&JobState::Active], None);
    }

    #[test]
    fn the_age_is_since_the_head_message_was_sent() {
        let mut s = preset_sample(KIND, b"q");
        let json = br#"{"queue_name":"q","actor_name":"noop","args":[],"kwargs":{},"options":{"redis_message_id":"x"},"message_id":"y","message_timestamp":1700000000000}"#;
        apply(
            &mut s,
            SENT_AT,
            &Value::BulkString(json.to_vec()),
            1_700_000_010.5,
        );
        assert_eq!(s.oldest_age_seconds, Some(10.5));
        // Acked between the rounds (nil), pickled, or without the field:
        // the age stays unknown, never 0.
        let mut s = preset_sample(KIND, b"q");
        for v in [
            Value::Nil,
            Value::BulkString(b"\x80\x04\x95".to_vec()),
            bulk(r#"{"message_id":"y"}"#),
            refused(),
        ] {
            apply(&mut s, SENT_AT, &v, 1e9);
            assert_eq!(s.oldest_age_seconds, None, "{v:?}");
        }
    }

    #[test]
    fn plan_is_six_commands_with_the_maintenance_bound() {
        let p = plan("dramatiq", b"default", 1_700_000_000_000, 100);
        assert_eq!(p.len(), 6);
        let packed = |c: &mut redis::Cmd| c.get_packed_command();
        assert_eq!(
            p[1].get_packed_command(),
            packed(redis::cmd("HLEN").arg("dramatiq:default.msgs"))
        );
        assert_eq!(
            p[2].get_packed_command(),
            packed(redis::cmd("HLEN").arg("dramatiq:default.DQ.msgs"))
        );
        assert_eq!(
            p[3].get_packed_command(),
            packed(redis::cmd("ZCARD").arg("dramatiq:default.XQ"))
        );
        assert_eq!(
            p[5].get_packed_command(),
            packed(
                redis::cmd("ZRANGEBYSCORE")
                    .arg("dramatiq:__heartbeats__")
                    .arg("-inf")
                    .arg(1_700_000_000_000u64)
                    .arg("LIMIT")
                    .arg(0)
                    .arg(101)
            )
        );
    }

    #[test]
    fn every_key_of_a_queue_names_its_queue() {
        for k in ["q", "q.msgs", "q.DQ", "q.DQ.msgs", "q.XQ", "q.XQ.msgs"] {
            assert_eq!(queue_of(k.as_bytes()), Some(&b"q"[..]), "{k}");
        }
        for k in owned("dramatiq", b"q.v2") {
            let rest = k.strip_prefix(b"dramatiq:").unwrap();
            assert_eq!(queue_of(rest), Some(&b"q.v2"[..]));
        }
        for k in ["__heartbeats__", "a:b", "9q", "", "q msgs"] {
            assert_eq!(queue_of(k.as_bytes()), None, "{k}");
        }
    }

    const W: &str = "0b8e3c1e-8d5e-4f0a-9d43-6c1f4a2b7e10";

    /// What zero config's mark reads saw: `replies` by mark name.
    fn seen(replies: &[(&str, Value)]) -> Seen {
        Seen {
            replies: replies
                .iter()
                .map(|(k, v)| (k.as_bytes().to_vec(), v.clone()))
                .collect(),
            ..Seen::default()
        }
    }

    fn recognised(s: &Seen) -> Vec<(String, Vec<String>)> {
        Dramatiq
            .recognise(s, &Keys::new(), &mut BTreeSet::new())
            .into_iter()
            .map(|(p, units)| {
                let names = units
                    .iter()
                    .map(|u| String::from_utf8_lossy(u.name()).into_owned())
                    .collect();
                (p.prefix, names)
            })
            .collect()
    }

    #[test]
    fn a_namespace_is_marked_by_a_heartbeats_zset_of_broker_ids_and_its_queues_by_message_hashes() {
        let wrongtype = redis::parse_redis_value(b"-WRONGTYPE Operation\r\n").unwrap();
        let s = seen(&[
            ("dramatiq:__heartbeats__", list(&[W])),
            ("dramatiq:default.msgs", int(3)),
            ("dramatiq:default.DQ.msgs", int(1)),
            ("dramatiq:failing.XQ.msgs", int(1)),
            // A key of another type named like a message hash: no queue.
            ("dramatiq:notes.msgs", wrongtype),
            // A namespace with a colon, and one with no queue left.
            ("ns:eu:__heartbeats__", list(&[W])),
            ("ns:eu:q.msgs", int(2)),
            ("idle:__heartbeats__", list(&[W])),
            // A hash under no heartbeats zset, and a zset of other members.
            ("cache:user.msgs", int(2)),
            ("app:__heartbeats__", list(&["web-1"])),
            ("app:jobs.msgs", int(2)),
        ]);
        assert_eq!(
            recognised(&s),
            [
                ("dramatiq".into(), vec!["default".into(), "failing".into()]),
                ("idle".into(), vec![]),
                ("ns:eu".into(), vec!["q".into()]),
            ]
        );
        for (p, _) in Dramatiq.recognise(&s, &Keys::new(), &mut BTreeSet::new()) {
            assert_eq!(p.visibility_timeout, DEFAULT_HEARTBEAT_TIMEOUT);
        }
        assert!(Dramatiq.mark_read(b"dramatiq:__heartbeats__").is_some());
        assert!(Dramatiq.mark_read(b"dramatiq:q.XQ.msgs").is_some());
        for not_a_mark in [
            &b"__heartbeats__"[..],
            b":__heartbeats__",
            b"dramatiq:q",
            b"q.msgs",
        ] {
            assert!(Dramatiq.mark_read(not_a_mark).is_none(), "{not_a_mark:?}");
        }
    }

    #[test]
    fn a_configured_namespace_lists_its_queues_from_the_message_hashes_under_it_alone() {
        let p = Preset::new(KIND, "dramatiq");
        assert_eq!(
            Dramatiq.registry(&p),
            Registry::Scan {
                pattern: b"dramatiq:*.msgs".to_vec(),
                key_type: Some(KeyType::Hash),
            }
        );
        let of = |k: &str| Dramatiq.queue_of_key(&p, k.as_bytes());
        assert_eq!(of("dramatiq:default.msgs"), Some(b"default".to_vec()));
        assert_eq!(of("dramatiq:default.DQ.msgs"), Some(b"default".to_vec()));
        assert_eq!(of("dramatiq:eu:default.msgs"), None);
        let star = Preset::new(KIND, "a*b");
        let Registry::Scan { pattern, .. } = Dramatiq.registry(&star) else {
            panic!("a scan");
        };
        assert_eq!(pattern, b"a\\*b:*.msgs");
    }

    #[test]
    fn the_namespace_keeps_its_heartbeats_and_acks_and_each_queue_its_six_keys() {
        let p = Preset::new(KIND, "dramatiq");
        let owned = Dramatiq.owned(&p, &[Unit::Queue(b"q".to_vec())]);
        let k = |s: &str| Owned::Key(s.as_bytes().to_vec());
        assert_eq!(
            owned,
            [
                k("dramatiq:__heartbeats__"),
                Owned::Under(b"dramatiq:__acks__.".to_vec()),
                k("dramatiq:q"),
                k("dramatiq:q.msgs"),
                k("dramatiq:q.DQ"),
                k("dramatiq:q.DQ.msgs"),
                k("dramatiq:q.XQ"),
                k("dramatiq:q.XQ.msgs"),
            ]
        );
        assert_eq!(Dramatiq.owned(&p, &[]).len(), 2);
    }

    #[test]
    fn an_unread_mark_hides_its_namespace_or_its_queue() {
        assert_eq!(
            Dramatiq.hidden(b"dramatiq:__heartbeats__"),
            Some(Hidden::Every)
        );
        assert_eq!(
            Dramatiq.hidden(b"ns:eu:q.DQ.msgs"),
            Some(Hidden::Names(vec!["q".into(), "ns:eu:q".into()]))
        );
        assert_eq!(Dramatiq.hidden(b"bull:q:meta"), None);
        let mut keys = Keys::new();
        for k in ["dramatiq:q", "dramatiq:q.XQ", "dramatiq:r", "other:q"] {
            let c = super::super::super::super::discovery::Candidate {
                spec: 0,
                exact: false,
                state: super::super::super::super::tracked::KeyState::Typed(KeyType::List),
            };
            keys.insert(k.as_bytes().to_vec(), c);
        }
        let names = |v: Vec<Vec<u8>>| {
            v.into_iter()
                .map(|k| String::from_utf8(k).unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names(Dramatiq.withheld(b"dramatiq:q.msgs", &keys)),
            ["dramatiq:q", "dramatiq:q.XQ"]
        );
        assert_eq!(
            names(Dramatiq.withheld(b"dramatiq:__heartbeats__", &keys)),
            ["dramatiq:q", "dramatiq:q.XQ", "dramatiq:r"]
        );
    }

    #[test]
    fn heartbeat_timeout_is_the_brokers_and_sets_the_dead_workers_bound() {
        let configured = |written: Option<&str>| {
            let options = match written {
                Some(t) => serde_json::json!({"heartbeat_timeout": t}),
                None => serde_json::json!({}),
            };
            super::super::super::options::configured(&Dramatiq, options)
        };
        let p = configured(None).unwrap();
        assert_eq!(p.visibility_timeout, Duration::from_secs(60));
        assert!(Dramatiq.printed_options(&p, |s| s.to_string()).is_empty());
        let p = configured(Some("5s")).unwrap();
        assert_eq!(
            Dramatiq.printed_options(&p, |s| s.to_string()),
            ["heartbeat_timeout: 5000ms"]
        );
        // Maintenance's bound: heartbeats at or before now − timeout, in ms.
        let cmds = Dramatiq.plan(&p, &Unit::Queue(b"q".to_vec()), 1_700_000_010.0);
        assert_eq!(
            cmds[5].get_packed_command(),
            redis::cmd("ZRANGEBYSCORE")
                .arg("dramatiq:__heartbeats__")
                .arg("-inf")
                .arg(1_700_000_005_000u64)
                .arg("LIMIT")
                .arg(0)
                .arg(101)
                .get_packed_command()
        );
        assert!(
            configured(Some("0s"))
                .unwrap_err()
                .starts_with("heartbeat_timeout:")
        );
        assert!(
            configured(Some("5"))
                .unwrap_err()
                .starts_with("heartbeat_timeout:")
        );
    }
}
