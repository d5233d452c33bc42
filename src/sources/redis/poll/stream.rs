//! Streams: `XINFO STREAM` (length, entries added) and `XINFO GROUPS` (each
//! consumer group's lag, pending and consumers; `ready` is the slowest
//! group's lag).
//!
//! Separate from the other key types because a stream reads structured
//! replies (maps per group) rather than a count, and a deleted stream
//! answers an error instead of an empty value.

use redis::Value;

use super::identity;
use crate::snapshot::{Counters, GroupSample, QueueSample, QueueType};
use crate::sources::redis::keyname::display_key;
use crate::sources::redis::reply;
use crate::sources::redis::tracked::TrackedKey;

/// The commands that measure a stream.
pub(super) fn plan(k: &[u8]) -> Vec<redis::Cmd> {
    let mut info = redis::cmd("XINFO");
    info.arg("STREAM").arg(k);
    let mut groups = redis::cmd("XINFO");
    groups.arg("GROUPS").arg(k);
    vec![info, groups]
}

/// A stream's sample from its replies.
pub(super) fn read(key: &TrackedKey, r: &[Value]) -> QueueSample {
    // A missing key (or one that was deleted) makes some commands answer
    // "no such key"; for streams that is an error, for the rest an empty value.
    let no_such_key = r
        .iter()
        .filter_map(reply::server_error)
        .any(|e| e.contains("no such key"));
    let mut s = identity(key, Some(QueueType::Stream));
    if no_such_key {
        // Deleted since discovery: empty until discovery confirms it is gone.
        s.depth = Some(0);
        s.ready = Some(0);
    } else {
        read_stream(&mut s, r);
    }
    s
}

/// A stream's length, counter and consumer groups from `XINFO STREAM` and
/// `XINFO GROUPS` (pure). A group field that is missing or not a count stays
/// `None` (absent on `/metrics`), never 0; a group entry that cannot be read
/// at all, or a groups reply that is not a list, makes `ready` unknown, since
/// the unread group may be the slowest.
fn read_stream(s: &mut QueueSample, r: &[Value]) {
    if let Some(info) = r.first().and_then(reply::as_pairs) {
        s.depth = reply::field(&info, "length").and_then(reply::as_u64);
        s.set_counters(Counters {
            published: reply::field(&info, "entries-added").and_then(reply::as_u64),
            ..Counters::default()
        });
    }
    let groups = r.get(1).and_then(reply::as_array);
    let mut every_group_read = groups.is_some();
    for g in groups.unwrap_or_default() {
        // Group names are binary-safe like keys: render them the same way
        // rather than skipping a group whose name is not UTF-8.
        let Some((p, name)) = reply::as_pairs(g).and_then(|p| {
            let name = reply::field(&p, "name").and_then(reply::as_bytes)?;
            Some((p, name))
        }) else {
            every_group_read = false;
            continue;
        };
        let count = |field: &str| reply::field(&p, field).and_then(reply::as_u64);
        s.groups.push(GroupSample {
            name: display_key(name),
            lag: count("lag"),
            pending: count("pending"),
            consumers: count("consumers"),
        });
    }
    // Work waiting for the slowest group; absent when Redis cannot tell a lag
    // or a group could not be read.
    s.ready = if !every_group_read {
        None
    } else if s.groups.is_empty() {
        s.depth
    } else {
        s.groups
            .iter()
            .map(|g| g.lag)
            .collect::<Option<Vec<_>>>()
            .and_then(|l| l.into_iter().max())
    };
}

#[cfg(test)]
mod tests {
    use super::super::tests::{bulk, error, key, read_with, sample};
    use super::read_stream;
    use crate::config::{KeyType, QueueSpec, QueueTarget};
    use crate::snapshot::QueueSample;
    use crate::sources::redis::tracked::KeyState;
    use redis::Value;
    use redis::Value::{Array, Int, Nil};

    /// `XINFO GROUPS` replies, one group each, with what it must read as.
    #[test]
    fn stream_group_fields_missing_or_malformed_are_unknown_never_zero() {
        let info = Array(vec![bulk("length"), Int(9), bulk("entries-added"), Int(12)]);
        let group = |fields: Vec<Value>| Array(vec![Array(fields)]);
        let complete = || {
            vec![
                bulk("name"),
                bulk("g"),
                bulk("consumers"),
                Int(2),
                bulk("pending"),
                Int(3),
                bulk("lag"),
                Int(4),
            ]
        };
        let without = |field: &str| {
            let mut f = complete();
            let i = f.iter().position(|v| *v == bulk(field)).unwrap();
            f.drain(i..i + 2);
            f
        };
        let with = |field: &str, v: Value| {
            let mut f = complete();
            let i = f.iter().position(|x| *x == bulk(field)).unwrap();
            f[i + 1] = v;
            f
        };
        // (case, groups reply, pending, consumers, lag, stream ready)
        type Row = (
            &'static str,
            Value,
            Option<u64>,
            Option<u64>,
            Option<u64>,
            Option<u64>,
        );
        let table: Vec<Row> = vec![
            (
                "complete",
                group(complete()),
                Some(3),
                Some(2),
                Some(4),
                Some(4),
            ),
            (
                "pending missing",
                group(without("pending")),
                None,
                Some(2),
                Some(4),
                Some(4),
            ),
            (
                "consumers missing",
                group(without("consumers")),
                Some(3),
                None,
                Some(4),
                Some(4),
            ),
            (
                "pending not a count",
                group(with("pending", bulk("x"))),
                None,
                Some(2),
                Some(4),
                Some(4),
            ),
            (
                "consumers negative",
                group(with("consumers", Int(-1))),
                Some(3),
                None,
                Some(4),
                Some(4),
            ),
            (
                "lag nil (Redis cannot tell)",
                group(with("lag", Nil)),
                Some(3),
                Some(2),
                None,
                None,
            ),
        ];
        for (case, groups, pending, consumers, lag, ready) in table {
            let mut s = QueueSample::named("s");
            read_stream(&mut s, &[info.clone(), groups]);
            let g = &s.groups[0];
            assert_eq!(
                (g.pending, g.consumers, g.lag),
                (pending, consumers, lag),
                "{case}"
            );
            assert_eq!(s.ready, ready, "{case}");
            assert_eq!(s.depth, Some(9), "{case}");
        }
        // A group entry without a name, or a groups reply that is not a
        // list: that group may be the slowest, so `ready` is unknown.
        for (case, groups) in [
            ("group without a name", group(without("name"))),
            ("group not a map", Array(vec![Int(1)])),
            ("groups not a list", bulk("?")),
        ] {
            let mut s = QueueSample::named("s");
            read_stream(&mut s, &[info.clone(), groups]);
            assert!(s.groups.is_empty(), "{case}");
            assert_eq!(s.ready, None, "{case}");
        }
        // No groups at all: everything in the stream is ready.
        let mut s = QueueSample::named("s");
        read_stream(&mut s, &[info.clone(), Array(vec![])]);
        assert_eq!(s.ready, Some(9));
    }

    #[test]
    fn a_deleted_stream_is_empty_until_discovery_confirms_it_is_gone() {
        let k = key(KeyState::Typed(KeyType::Stream));
        let spec = QueueSpec::new(QueueTarget::Key("k".into()));
        let gone = error("ERR no such key");
        let s = sample(read_with(&k, &spec, &[gone.clone(), gone]));
        assert_eq!((s.depth, s.ready), (Some(0), Some(0)));
    }
}
