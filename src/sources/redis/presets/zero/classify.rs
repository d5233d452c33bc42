//! Zero config's classify stage (pure): the keys a round gathered, against
//! the libraries' marks as read, give each library's entries, the keys
//! they consume and those an unread mark withholds ([`recognise`]); the
//! keys a queue polled until now owned that nothing claims now
//! ([`Recognition::recheck`]); and, for a library round, whether a mark
//! changed since the scan ([`changed_since`]). Imports no later stage and
//! not the orchestrator (`tests/architecture.rs`).

use std::collections::{BTreeMap, BTreeSet};

use super::super::super::discovery::{Candidate, Candidates};
use super::super::consumed::consumed;
use super::super::library::{self, Seen};
use super::super::spec::{Preset, PresetSpec};
use super::super::unit::Unit;
use super::learnt::Learnt;
use super::marks::by_claim_rank;

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
/// entries (`Recognise::recognise`, in claim order: a registry set one
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
/// bound) may own, as each mark's library says (`Library::withheld`, asked
/// of every library: a library's layout).
fn withheld<'a>(
    unread: impl Iterator<Item = &'a Vec<u8>>,
    keys: &BTreeMap<Vec<u8>, Candidate>,
) -> BTreeSet<Vec<u8>> {
    let mut owned = BTreeSet::new();
    for mark in unread {
        for library in library::all() {
            owned.extend(library.withheld(mark, keys));
        }
    }
    owned
}

/// A `- preset:` entry for `preset`, without `counters:`.
fn spec(preset: Preset) -> PresetSpec {
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
pub(in super::super) mod test_util {
    //! Recognition's test fixtures, shared with the libraries' own tests
    //! of it: keys found, marks read, refused, with their readers.

    pub use super::super::super::super::tracked::KeyState;
    pub use super::super::super::Unit;
    pub use super::super::super::bounded::SetRead;
    pub use super::super::super::library::{MarkRead, Seen};
    pub(in crate::sources::redis::presets) use super::super::marks::{
        Hides, Marks, beside_marks, evidence, hides, is_evidence, is_mark, mark_read,
    };
    pub use super::{Recognition, recognise};
    pub use crate::config::KeyType::{self, List, Stream, Zset};
    pub use crate::snapshot::{PresetKind, Reason};
    pub use redis::Value;
    pub use std::collections::{BTreeMap, BTreeSet};

    use super::super::super::super::discovery::{Candidate, Candidates};

    pub fn keys(list: &[(&str, KeyType)]) -> Candidates {
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

    pub fn seen(sets: &[(&str, &[&str])], bullmq: &[&str]) -> Seen {
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
    pub fn with_ids(mut s: Seen, ids: &[&str]) -> Seen {
        for id in ids {
            let v = Value::BulkString(b"7".to_vec());
            s.replies.insert(id.as_bytes().to_vec(), v);
        }
        s
    }

    /// A mark named `name`, with its library's read.
    pub fn cmd_mark(name: &str) -> (Vec<u8>, redis::Cmd) {
        let Some(MarkRead::Cmd(c) | MarkRead::Sign(c)) = mark_read(name.as_bytes()) else {
            panic!("{name} is no mark read by a command")
        };
        (name.as_bytes().to_vec(), c)
    }

    /// `s` with `marks` unread (refused).
    pub fn refused(mut s: Seen, marks: &[&str]) -> Seen {
        for m in marks {
            s.unread.insert(m.as_bytes().to_vec(), Reason::Auth);
        }
        s
    }

    pub fn strings(set: &BTreeSet<Vec<u8>>) -> Vec<String> {
        set.iter()
            .map(|k| String::from_utf8_lossy(k).into_owned())
            .collect()
    }

    pub fn names(r: &Recognition) -> Vec<(PresetKind, String, Vec<Unit>)> {
        r.entries
            .iter()
            .map(|(s, u)| {
                let prefix = s.preset.prefix.clone();
                (s.preset.kind(), prefix, u.clone())
            })
            .collect()
    }

    pub fn q(name: &str) -> Unit {
        Unit::Queue(name.as_bytes().to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::libraries::{asynq, bull, bullmq, rq, sidekiq};
    use super::test_util::*;

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
                // Resque's failed list and delayed schedule tell a
                // `<ns>:queues` from a Sidekiq namespace.
                "ns:delayed_queue_schedule",
                "ns:failed",
                "ns:queue:x",
                "ns:retry",
                "ns:schedule",
                "old:q:priority",
                "old:q:wait",
                "queue:mail",
                "work:dead",
                "work:delayed_queue_schedule",
                "work:failed",
                "work:queue:q",
                "work:retry",
                "work:schedule",
                "work:{q}:pending"
            ]
        );
    }
}
