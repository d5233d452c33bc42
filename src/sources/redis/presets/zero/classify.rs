//! Zero config's classify stage (pure): the keys a round gathered, against
//! the libraries' marks as read, give each library's entries, the keys
//! they consume and those an unread mark withholds ([`recognise`]); the
//! keys a queue polled until now owned that nothing claims now
//! ([`Recognition::recheck`]); and, for a library round, whether a mark
//! changed since the scan ([`changed_since`]). Imports no later stage and
//! not the orchestrator (`tests/architecture.rs`).

use std::collections::{BTreeMap, BTreeSet};

use super::super::super::discovery::{Candidate, Candidates};
use super::super::LIBRARIES;
use super::super::Unit;
use super::super::consumed::consumed;
use super::super::library::Seen;
use super::learnt::Learnt;
use super::marks::by_claim_rank;
use crate::config::PresetSpec;

/// The outcome of recognition.
#[derive(Debug, Default)]
pub struct Recognition {
    /// One entry per library and prefix, with its units.
    pub entries: Vec<(PresetSpec, Vec<Unit>)>,
    /// Keys the entries own: never reported as plain keys.
    pub consumed: BTreeSet<Vec<u8>>,
    /// Keys a mark Redis would not let us read may own: whose they are is
    /// unknown, so they are reported neither as a library's nor as plain.
    pub withheld: BTreeSet<Vec<u8>>,
    /// Keys the entries polled until now owned that these entries leave
    /// plain: a queue removed while the round ran (between its keys' `TYPE`
    /// and its mark's read) left them typed as they were, so they are typed
    /// again before they are adopted (`gather::retype`).
    pub recheck: Vec<Vec<u8>>,
}

/// Recognises the libraries the marks show (pure): each library's
/// entries (`Library::recognise`, in claim order: a registry set one
/// library takes is no other's), sorted by library in the list's order,
/// then as each library found them; the keys they consume; and those of
/// the entries `polled` until now that they leave plain.
pub fn recognise(
    seen: &Seen,
    found: &Candidates,
    polled: &[(PresetSpec, Vec<Unit>)],
) -> Recognition {
    let keys = &found.keys;
    let mut entries: Vec<(PresetSpec, Vec<Unit>)> = Vec::new();
    let mut claimed = BTreeSet::new();
    for library in by_claim_rank() {
        let found = library.recognise(seen, keys, &mut claimed);
        entries.extend(
            found
                .into_iter()
                .map(|(preset, units)| (spec(preset), units)),
        );
    }
    entries.sort_by_key(|(s, _)| super::super::library::rank(s.preset.kind()));
    let taken = consumed(&entries, keys);
    let mut withheld = withheld(seen.unread.keys().chain(seen.bounded.keys()), keys);
    withheld.retain(|k| !taken.contains(k));
    let recheck = consumed(polled, keys)
        .into_iter()
        .filter(|k| !taken.contains(k) && !withheld.contains(k))
        .collect();
    Recognition {
        entries,
        consumed: taken,
        withheld,
        recheck,
    }
}

/// The keys found that the `unread` marks (refused, or not read for a
/// bound) may own, as each mark's library says (`Library::withheld`).
fn withheld<'a>(
    unread: impl Iterator<Item = &'a Vec<u8>>,
    keys: &BTreeMap<Vec<u8>, Candidate>,
) -> BTreeSet<Vec<u8>> {
    let mut owned = BTreeSet::new();
    for mark in unread {
        for library in LIBRARIES {
            owned.extend(library.withheld(mark, keys));
        }
    }
    owned
}

/// A `- preset:` entry for `preset`, without `counters:`.
fn spec(preset: crate::config::Preset) -> PresetSpec {
    PresetSpec {
        preset,
        counters: None,
    }
}

/// Whether the marks a library round read by name (`seen`) differ from
/// what the scan `learnt` read of them (a registry's members, a binding's
/// work queues, a refusal, a bound): the round must scan instead.
pub fn changed_since(seen: &Seen, learnt: &Learnt) -> bool {
    let unread: BTreeSet<&Vec<u8>> = seen.unread.keys().collect();
    let over: BTreeSet<&Vec<u8>> = seen.bounded.keys().collect();
    let over_then: BTreeSet<&Vec<u8>> = learnt
        .over
        .keys()
        .filter(|m| !learnt.beyond_max_keys(m))
        .collect();
    seen.set_members() != learnt.sets
        || unread != learnt.unread.iter().collect()
        || over != over_then
}

/// Whether reading the relisted entries' registries met a mark refused
/// since the scan (a `meta` hash): whose keys are beside it is unknown, so
/// the round must scan instead.
pub fn refused_since(refused: &[(Vec<u8>, crate::snapshot::Reason)], learnt: &Learnt) -> bool {
    refused.iter().any(|(m, _)| !learnt.unread.contains(m))
}

#[cfg(test)]
mod tests {
    use super::super::super::super::tracked::KeyState;
    use super::super::super::bounded::SetRead;
    use super::super::super::library::MarkRead;
    use super::super::super::{asynq, bull, bullmq, celery, rq, sidekiq};
    use super::super::marks::{
        Hides, Marks, beside_marks, evidence, hides, is_evidence, is_mark, mark_read,
    };
    use super::*;
    use crate::config::KeyType;
    use crate::snapshot::{PresetKind, Reason};
    use redis::Value;

    fn keys(list: &[(&str, KeyType)]) -> Candidates {
        let mut c = Candidates::default();
        for (k, t) in list {
            c.keys.insert(
                k.as_bytes().to_vec(),
                Candidate {
                    spec: 0,
                    exact: false,
                    state: KeyState::Typed(*t),
                },
            );
        }
        c
    }

    /// A reply to a `meta` hash's marks read: BullMQ's.
    fn bullmq_marks() -> Value {
        Value::Array(vec![
            Value::BulkString(b"bullmq:5.1.0".to_vec()),
            Value::Nil,
        ])
    }

    fn seen(sets: &[(&str, &[&str])], bullmq: &[&str]) -> Seen {
        Seen {
            sets: sets
                .iter()
                .map(|(k, m)| {
                    let members = m.iter().map(|s| s.as_bytes().to_vec()).collect();
                    (k.as_bytes().to_vec(), members)
                })
                .collect(),
            replies: bullmq
                .iter()
                .map(|s| (s.as_bytes().to_vec(), bullmq_marks()))
                .collect(),
            unread: BTreeMap::new(),
            bounded: BTreeMap::new(),
        }
    }

    /// `s` with the integer `id`s `ids` read.
    fn with_ids(mut s: Seen, ids: &[&str]) -> Seen {
        for id in ids {
            let v = Value::BulkString(b"7".to_vec());
            s.replies.insert(id.as_bytes().to_vec(), v);
        }
        s
    }

    /// A mark named `name`, with its library's read.
    fn cmd_mark(name: &str) -> (Vec<u8>, redis::Cmd) {
        let Some(MarkRead::Cmd(c) | MarkRead::Sign(c)) = mark_read(name.as_bytes()) else {
            panic!("{name} is no mark read by a command")
        };
        (name.as_bytes().to_vec(), c)
    }

    /// `s` with `marks` unread (refused).
    fn refused(mut s: Seen, marks: &[&str]) -> Seen {
        for m in marks {
            s.unread.insert(m.as_bytes().to_vec(), Reason::Auth);
        }
        s
    }

    fn strings(set: &BTreeSet<Vec<u8>>) -> Vec<String> {
        set.iter()
            .map(|k| String::from_utf8_lossy(k).into_owned())
            .collect()
    }

    #[test]
    fn what_library_rounds_compare_leaves_event_receivers_and_empty_reads_out() {
        let gossip = "worker.#\x06\x16\x06\x16celeryev.2b0f3c3e-8a4f-4a53-9d55-0b7e0c9c1f10";
        let before = seen(
            &[
                ("_kombu.binding.tasks", &["celery\x06\x16\x06\x16celery"]),
                ("queues", &["b", "a"]),
                ("rq:queues", &[]),
            ],
            &[],
        );
        let after = seen(
            &[
                (
                    "_kombu.binding.tasks",
                    &[gossip, "celery\x06\x16\x06\x16celery"],
                ),
                ("queues", &["a", "b"]),
            ],
            &[],
        );
        assert_eq!(before.set_members(), after.set_members());
        let view = before.set_members();
        assert_eq!(view.len(), 2, "{view:?}");
        let added = seen(&[("queues", &["a", "b", "c"])], &[]);
        assert_ne!(
            added.set_members().get(&b"queues"[..]),
            view.get(&b"queues"[..])
        );
    }

    #[test]
    fn an_unread_meta_withholds_its_queues_keys_and_is_never_taken_for_bull() {
        let found = keys(&[
            ("secret:jobs:wait", List),
            ("secret:jobs:events", Stream),
            ("secret:jobsx:wait", List),
            ("plain", List),
        ]);
        // Bull's `id` beside it is an integer: still not Bull's.
        let s = with_ids(
            refused(seen(&[], &[]), &["secret:jobs:meta"]),
            &["secret:jobs:id"],
        );
        let r = recognise(&s, &found, &[]);
        assert!(r.entries.is_empty());
        assert_eq!(
            strings(&r.withheld),
            ["secret:jobs:events", "secret:jobs:wait"]
        );
    }

    #[test]
    fn an_unread_registry_withholds_the_keys_its_library_may_own() {
        let found = keys(&[
            ("rq:queue:high", List),
            ("queue:default", List),
            ("retry", Zset),
            ("retry:other", Zset),
            ("plain", List),
        ]);
        let r = recognise(&refused(seen(&[], &[]), &["rq:queues"]), &found, &[]);
        assert_eq!(strings(&r.withheld), ["rq:queue:high"]);
        let r = recognise(&refused(seen(&[], &[]), &["queues"]), &found, &[]);
        assert_eq!(strings(&r.withheld), ["queue:default", "retry"]);
    }

    #[test]
    fn an_unread_kombu_binding_withholds_every_list_under_its_prefix() {
        let found = keys(&[
            ("celery", List),
            ("app:celery", List),
            ("app:unacked_index", Zset),
            ("app:events", Stream),
            ("other", List),
        ]);
        let r = recognise(
            &refused(seen(&[], &[]), &["app:_kombu.binding.celery"]),
            &found,
            &[],
        );
        assert_eq!(strings(&r.withheld), ["app:celery", "app:unacked_index"]);
        // A pidbox exchange carries no work: nothing to withhold.
        let r = recognise(
            &refused(seen(&[], &[]), &["_kombu.binding.celery.pidbox"]),
            &found,
            &[],
        );
        assert!(r.withheld.is_empty());
    }

    #[test]
    fn a_refused_read_is_unread_and_a_wrongtype_one_marks_nothing() {
        let reply = |resp: &[u8]| redis::parse_redis_value(resp).unwrap();
        let marks = Marks {
            sets: vec![b"queues".to_vec(), b"rq:queues".to_vec()],
            cmds: vec![cmd_mark("a:q:meta"), cmd_mark("b:q:meta")],
            ..Marks::default()
        };
        let sets = vec![
            SetRead::Reply(reply(
                b"-NOPERM this user has no permissions to access one of the keys\r\n",
            )),
            SetRead::Members(vec![b"rq:queue:high".to_vec()]),
        ];
        let replies = [
            reply(b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"),
            reply(b"-ERR something else\r\n"),
        ];
        let s = super::super::marks::seen(marks, sets, &replies);
        assert_eq!(
            s.unread,
            BTreeMap::from([
                (b"b:q:meta".to_vec(), Reason::Backend),
                (b"queues".to_vec(), Reason::Auth),
            ])
        );
        assert_eq!(s.sets.keys().collect::<Vec<_>>(), [b"rq:queues"]);
        assert!(!bullmq::marked(&s, b"a:q:meta"));
    }

    fn names(r: &Recognition) -> Vec<(PresetKind, String, Vec<Unit>)> {
        r.entries
            .iter()
            .map(|(s, u)| {
                let prefix = s.preset.prefix.clone();
                (s.preset.kind(), prefix, u.clone())
            })
            .collect()
    }

    fn q(name: &str) -> Unit {
        Unit::Queue(name.as_bytes().to_vec())
    }

    use KeyType::{List, Stream, Zset};

    #[test]
    fn registries_tell_rq_asynq_and_sidekiq_apart() {
        let found = keys(&[
            ("rq:queue:default", List),
            ("rq:queue:default:intermediate", List),
            ("rq:wip:default", Zset),
            ("rq:results:abc", Stream),
            ("asynq:{critical}:pending", List),
            ("queue:mail", List),
            ("retry", Zset),
            ("ns:queue:x", List),
            ("plain", List),
        ]);
        let s = seen(
            &[
                ("rq:queues", &["rq:queue:default"]),
                ("asynq:queues", &["critical"]),
                ("queues", &["mail", "(all)"]),
                ("ns:queues", &["x"]),
                // No mark beside it: somebody's own set.
                ("other:queues", &["a"]),
            ],
            &[],
        );
        let r = recognise(&s, &found, &[]);
        assert_eq!(
            names(&r),
            vec![
                (sidekiq::KIND, "ns".into(), vec![q("x"), Unit::Shared]),
                (
                    sidekiq::KIND,
                    "".into(),
                    vec![q("(all)"), q("mail"), Unit::Shared]
                ),
                (rq::KIND, "rq".into(), vec![q("default")]),
                (asynq::KIND, "asynq".into(), vec![q("critical")]),
            ]
        );
        let consumed: Vec<&str> = r
            .consumed
            .iter()
            .map(|k| std::str::from_utf8(k).unwrap())
            .collect();
        assert_eq!(
            consumed,
            [
                "asynq:{critical}:pending",
                "ns:queue:x",
                "queue:mail",
                "retry",
                "rq:queue:default",
                "rq:queue:default:intermediate",
                "rq:results:abc",
                "rq:wip:default"
            ]
        );
    }

    #[test]
    fn bullmq_at_any_prefix_consumes_its_queue_keys_but_not_lookalikes() {
        let found = keys(&[
            ("bull:mail:wait", List),
            ("bull:mail:events", Stream),
            ("bull:mail:marker", Zset),
            ("bull:mail:1:logs", List),
            // BullMQ's `wait` is a list: a zset is somebody else's.
            ("my:app:jobs:wait", Zset),
            ("my:app:jobs:delayed", Zset),
            ("bull:mailer:wait", List),
        ]);
        let s = seen(&[], &["bull:mail:meta", "my:app:jobs:meta"]);
        let r = recognise(&s, &found, &[]);
        assert_eq!(
            names(&r),
            vec![
                (bullmq::KIND, "bull".into(), vec![q("mail")]),
                (bullmq::KIND, "my:app".into(), vec![q("jobs")]),
            ]
        );
        let consumed: Vec<&[u8]> = r.consumed.iter().map(Vec::as_slice).collect();
        assert_eq!(
            consumed,
            [
                &b"bull:mail:1:logs"[..],
                b"bull:mail:events",
                b"bull:mail:marker",
                b"bull:mail:wait",
                b"my:app:jobs:delayed",
            ]
        );
    }

    #[test]
    fn bull_is_an_integer_id_beside_its_keys_where_no_bullmq_meta_is() {
        let found = keys(&[
            ("bull:old:wait", List),
            ("bull:old:priority", Zset),
            ("bull:old:completed", Zset),
            ("bull:old:1", List),
            ("bull:new:wait", List),
            ("my:app:paused:paused", List),
            ("plain:thing:wait", List),
        ]);
        // Probed: one `id` per `<prefix>:<name>` with a Bull-like key.
        let ids = |limit| -> Vec<Vec<u8>> {
            beside_marks(&found.keys, limit)
                .into_iter()
                .map(|(k, _)| k)
                .collect()
        };
        assert_eq!(
            ids(100),
            [
                b"bull:new:id".to_vec(),
                b"bull:old:id".to_vec(),
                b"my:app:paused:id".to_vec(),
                b"plain:thing:id".to_vec(),
            ]
        );
        assert_eq!(ids(2).len(), 2);
        // `bull:new` has an `id` too, but its BullMQ `meta` says BullMQ;
        // `plain:thing:id` held no integer.
        let s = with_ids(
            seen(&[], &["bull:new:meta"]),
            &["bull:old:id", "bull:new:id", "my:app:paused:id"],
        );
        let r = recognise(&s, &found, &[]);
        assert_eq!(
            names(&r),
            [
                (bullmq::KIND, "bull".into(), vec![q("new")]),
                (bull::KIND, "bull".into(), vec![q("old")]),
                (bull::KIND, "my:app".into(), vec![q("paused")]),
            ]
        );
        let consumed: Vec<&[u8]> = r.consumed.iter().map(Vec::as_slice).collect();
        assert_eq!(
            consumed,
            [
                &b"bull:new:wait"[..],
                b"bull:old:1",
                b"bull:old:completed",
                b"bull:old:priority",
                b"bull:old:wait",
                b"my:app:paused:paused",
            ]
        );
    }

    #[test]
    fn celery_bindings_give_queues_and_their_priority_lists() {
        let found = keys(&[
            ("celery", List),
            ("celery\x06\x163", List),
            ("celery\x06\x161", List),
            ("emails", Zset),
            ("unacked_index", Zset),
        ]);
        let s = seen(
            &[
                (
                    "_kombu.binding.celery",
                    &[
                        "celery\x06\x16\x06\x16celery",
                        "emails\x06\x16\x06\x16emails",
                    ],
                ),
                (
                    "_kombu.binding.reply.celery.pidbox",
                    &["x\x06\x16\x06\x16reply"],
                ),
                ("_kombu.binding.broken", &["no separators"]),
            ],
            &[],
        );
        let r = recognise(&s, &found, &[]);
        let [(spec, units)] = &r.entries[..] else {
            panic!("{:?}", r.entries)
        };
        let (queues, priority_steps) = (&spec.preset.queues, &spec.preset.priority_steps);
        assert_eq!(spec.preset.kind, celery::KIND);
        assert_eq!(queues, &["celery", "emails"]);
        assert_eq!(priority_steps, &[0, 1, 3, 6, 9]);
        assert_eq!(units, &[q("celery"), q("emails"), Unit::Shared]);
        // `emails` is a zset: not kombu's list, so it stays plain.
        let consumed: Vec<&[u8]> = r.consumed.iter().map(Vec::as_slice).collect();
        assert_eq!(
            consumed,
            [
                &b"celery"[..],
                b"celery\x06\x161",
                b"celery\x06\x163",
                b"unacked_index"
            ]
        );
    }

    #[test]
    fn celery_event_receivers_are_no_work_queues() {
        let uuid = "74e6b2c1-9f3a-4d2e-8b1c-0a5f6e7d8c9b";
        let ev = |rk: &str, q: &str| format!("{rk}\x06\x16\x06\x16{q}.{uuid}");
        let gossip = ev("worker.#", "celeryev");
        let monitor = ev("#", "celeryev");
        let custom = ev("worker.#", "myev");
        let colon = format!("worker.#::celeryev.{uuid}");
        // A uuid-named queue under a routing key of its own is work.
        let own = ev("jobs", "jobs");
        let members = |m: &[&String]| m.iter().map(|s| s.as_bytes().to_vec()).collect();
        let mut s = seen(&[], &[]);
        s.sets = [
            ("_kombu.binding.celery", vec![&own]),
            // Celery's default `event_exchange`, at the bare keys and
            // under a `global_keyprefix`: skipped by name.
            ("_kombu.binding.celeryev", vec![&gossip, &monitor, &own]),
            ("app:_kombu.binding.celeryev", vec![&gossip]),
            // A custom `event_exchange`: told by the receivers' bindings,
            // beside a work queue bound to it.
            ("_kombu.binding.events", vec![&custom, &monitor, &colon]),
            (
                "_kombu.binding.tasks",
                vec![&"tasks\x06\x16\x06\x16tasks".to_string()],
            ),
            // Not a receiver's: a routing key of its own, or no uuid.
            (
                "_kombu.binding.other",
                vec![
                    &format!("worker.#\x06\x16\x06\x16celeryev.{}", &uuid[1..]),
                    &"worker.#\x06\x16\x06\x16logs.v2".to_string(),
                ],
            ),
        ]
        .into_iter()
        .map(|(k, m)| (k.as_bytes().to_vec(), members(&m)))
        .collect();
        assert!(!is_mark(b"_kombu.binding.celeryev"));
        assert!(!is_mark(b"app:_kombu.binding.celeryev"));
        assert!(is_mark(b"_kombu.binding.celeryev2"));
        let r = recognise(&s, &keys(&[]), &[]);
        let queues: Vec<(String, Vec<String>)> = r
            .entries
            .iter()
            .map(|(spec, _)| match &spec.preset {
                p if p.kind == celery::KIND => (p.prefix.clone(), p.queues.clone()),
                p => panic!("{p:?}"),
            })
            .collect();
        let want = vec![
            format!("celeryev.{}", &uuid[1..]),
            format!("jobs.{uuid}"),
            "logs.v2".to_string(),
            "tasks".to_string(),
        ];
        assert_eq!(queues, [(String::new(), want)]);
        // The libraries-only pass asks nothing of them either.
        let names = vec![format!("myev.{uuid}\x06\x167").into_bytes()];
        assert!(evidence(&s, names).is_empty());
    }

    #[test]
    fn celery_with_the_colon_sep_its_docs_suggest_is_recognised_too() {
        let found = keys(&[
            ("app:tasks", List),
            ("app:tasks:1", List),
            ("app:tasks:7", List),
            ("app:tasks:x", List),
        ]);
        let s = seen(
            &[(
                "app:_kombu.binding.tasks",
                &["tasks::tasks", "a:b:c:d", "\x06\x16\x06\x16"],
            )],
            &[],
        );
        let r = recognise(&s, &found, &[]);
        let [(spec, _)] = &r.entries[..] else {
            panic!("{:?}", r.entries)
        };
        let p = &spec.preset;
        assert_eq!(p.kind, celery::KIND);
        let (queues, priority_steps, sep, prefix) =
            (&p.queues, &p.priority_steps, &p.sep, &p.prefix);
        assert_eq!(
            (queues.as_slice(), sep.as_str(), prefix.as_str()),
            (&["tasks".to_string()][..], ":", "app:")
        );
        assert_eq!(priority_steps, &[0, 1, 3, 6, 7, 9]);
        let consumed: Vec<&[u8]> = r.consumed.iter().map(Vec::as_slice).collect();
        // `app:tasks:x` is no step: it stays plain.
        assert_eq!(
            consumed,
            [&b"app:tasks"[..], b"app:tasks:1", b"app:tasks:7"]
        );
    }

    #[test]
    fn bullmq_marks_are_the_version_or_max_len_events() {
        let marks = Marks {
            cmds: vec![
                cmd_mark("a:q:meta"),
                cmd_mark("b:q:meta"),
                cmd_mark("c:q:meta"),
            ],
            sets: vec![b"queues".to_vec(), b"x:queues".to_vec()],
            beside: ["old:q:id", "app:x:id"]
                .map(|k| (k.as_bytes().to_vec(), redis::cmd("GET")))
                .to_vec(),
            evidence: Vec::new(),
            signs: vec![cmd_mark("processes"), cmd_mark("stat:processed")],
        };
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let wrong_type = redis::parse_redis_value(
            b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        )
        .unwrap();
        // `x:queues` is a list: not a registry.
        let sets = vec![
            SetRead::Members(vec![b"mail".to_vec()]),
            SetRead::Reply(wrong_type),
        ];
        let replies = [
            Value::Array(vec![bulk("bullmq:6.7.0"), Value::Nil]),
            Value::Array(vec![Value::Nil, bulk("10000")]),
            Value::Array(vec![bulk("1.0"), Value::Nil]),
            // Bull's job counter; somebody's own `id` text.
            bulk("41"),
            bulk("a3f9"),
            // `TYPE` of Sidekiq's signs: `processes` is some app's list.
            Value::SimpleString("list".into()),
            Value::SimpleString("none".into()),
        ];
        let s = super::super::marks::seen(marks, sets, &replies);
        assert_eq!(s.sets[&b"queues".to_vec()], [b"mail".to_vec()]);
        assert_eq!(s.sets.len(), 1);
        // `a` and `b` are BullMQ's; Bull's `old` counts jobs, `app:x` not;
        // the bare `queues` has no sign of Sidekiq's beside it.
        let r = recognise(&s, &keys(&[]), &[]);
        assert_eq!(
            names(&r),
            [
                (bullmq::KIND, "a".into(), vec![q("q")]),
                (bullmq::KIND, "b".into(), vec![q("q")]),
                (bull::KIND, "old".into(), vec![q("q")]),
            ]
        );
    }

    #[test]
    fn the_evidence_check_indexes_names_by_their_own_prefixes() {
        // A registry of 1,000 bare names at a prefix that is not asynq's,
        // and 100,000 names under asynq-shaped `work:{<q>}:`, half of them
        // a member's.
        let members: Vec<String> = (0..1000).map(|i| format!("q{i}")).collect();
        let refs: Vec<&str> = members.iter().map(String::as_str).collect();
        let s = seen(&[("work:queues", &refs)], &[]);
        let names: Vec<Vec<u8>> = (0..100_000)
            .map(|i| format!("work:{{q{}}}:pending:{i}", i % 2000).into_bytes())
            .collect();
        let wanted = evidence(&s, names);
        // Each member's `work:queue:<m>`, the namespace's three zsets, and
        // the 50,000 names under a member's braces.
        assert_eq!(wanted.len(), 1000 + 3 + 50_000);
        assert!(wanted.contains(&b"work:{q999}:pending:999".to_vec()));
        assert!(!wanted.contains(&b"work:{q1000}:pending:1000".to_vec()));
        // Speed is not asserted here (a timed test fails on a loaded
        // machine): names × members, 10^8 prefix comparisons, took 13.8 s
        // in a debug build; by each name's own prefixes, 0.6 s.
    }

    #[test]
    fn an_unread_meta_or_id_hides_its_queue_a_registry_any_name_a_binding_none() {
        let h = hides([&b"eu:app:mail:meta"[..], b"bull:old:id"].into_iter());
        assert!(!h.any);
        let names: Vec<&str> = h.names.iter().map(String::as_str).collect();
        assert_eq!(names, ["bull:old", "eu:app:mail", "mail", "old"]);
        assert!(hides([&b"_kombu.binding.celery"[..]].into_iter()) == Hides::default());
        assert!(hides([&b"queues"[..]].into_iter()).any);
        assert!(hides([&b"rq:queues"[..]].into_iter()).any);
    }

    #[test]
    fn braced_prefixes_are_each_open_brace_to_each_close_after_it() {
        let all: Vec<&[u8]> = asynq::braced(b"a:{b}:c:{d}:e").collect();
        // From the first `:{`, and from the second.
        assert_eq!(all, [&b"a:{b}:"[..], b"a:{b}:c:{d}:", b"a:{b}:c:{d}:"]);
        assert_eq!(asynq::braced(b"plain:key").count(), 0);
    }

    #[test]
    fn libraries_only_asks_the_type_of_just_what_recognition_looks_at() {
        let s = seen(
            &[
                ("rq:queues", &["rq:queue:default"]),
                ("asynq:queues", &["critical"]),
                ("queues", &["mail"]),
                ("ns:queues", &["x"]),
                ("work:queues", &["q"]),
                ("_kombu.binding.celery", &["celery\x06\x16\x06\x16celery"]),
            ],
            &["bull:mail:meta"],
        );
        let names = [
            "bull:mail:wait",
            "old:q:wait",
            "old:q:priority",
            "old:q:id",
            "work:{q}:pending",
            "work:{q}:t:5f1c",
            "work:{q}:processed:2026-11-26",
            "asynq:{critical}:pending",
            "celery\x06\x163",
            "celery\x06\x167",
            "celery\x06\x16300",
            "cache:7",
            "other\x06\x162",
            "plain",
        ];
        let kept: Vec<Vec<u8>> = names
            .iter()
            .map(|n| n.as_bytes().to_vec())
            .filter(|n| is_evidence(n))
            .collect();
        let kept_names: Vec<&str> = kept
            .iter()
            .map(|k| std::str::from_utf8(k).unwrap())
            .collect();
        assert_eq!(
            kept_names,
            [
                "bull:mail:wait",
                "old:q:wait",
                "old:q:priority",
                "work:{q}:pending",
                "asynq:{critical}:pending",
                "celery\x06\x163",
                "celery\x06\x167",
                "cache:7",
                "other\x06\x162"
            ]
        );
        // RQ's and asynq's registries tell themselves; kombu's default
        // steps need no look; nor does a queue BullMQ's `meta` marks.
        let wanted: Vec<String> = evidence(&s, kept)
            .into_iter()
            .map(|k| String::from_utf8(k).unwrap())
            .collect();
        assert_eq!(
            wanted,
            [
                "celery\x06\x167",
                "ns:dead",
                "ns:queue:x",
                "ns:retry",
                "ns:schedule",
                "old:q:priority",
                "old:q:wait",
                "queue:mail",
                "work:dead",
                "work:queue:q",
                "work:retry",
                "work:schedule",
                "work:{q}:pending"
            ]
        );
    }
}
