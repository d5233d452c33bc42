//! Lists: `LLEN`, and a `LINDEX` peek at the configured end for the oldest
//! item's age, paused a while after an item too large to peek.
//!
//! Separate from the other key types because only a list peeks at an item
//! and parses a timestamp out of it (with its own pause and failure count);
//! the chunked sending and the dispatch stay in `poll/mod.rs`.

use redis::Value;

use super::{Plan, identity};
use crate::config::{ListEnd, QueueSpec};
use crate::snapshot::{QueueSample, QueueType};
use crate::sources::redis::age::item_timestamp;
use crate::sources::redis::cmd::cmd;
use crate::sources::redis::reply;
use crate::sources::redis::tracked::{
    Head, MAX_PEEK_BYTES, PEEK_PAUSE_SECS, TrackedKey, Unchanged,
};

/// The commands that measure a list, and whether its age peek was skipped
/// (an oversized head item, recently).
pub(super) fn plan(key: &TrackedKey, spec: &QueueSpec, now_secs: f64) -> (Vec<redis::Cmd>, bool) {
    let k = key.key.as_slice();
    let mut peek_paused = false;
    let mut v = vec![cmd("LLEN", k)];
    if spec.age.is_some() && now_secs < key.peek_paused_until {
        peek_paused = true;
    } else if let Some(age) = &spec.age {
        let mut c = cmd("LINDEX", k);
        c.arg(match age.end {
            ListEnd::Head => 0,
            ListEnd::Tail => -1,
        });
        v.push(c);
    }
    (v, peek_paused)
}

/// A list's sample from its replies (or from what was kept while it is
/// unchanged), whether its age could not be read, and what may be kept.
pub(super) fn read(
    key: &TrackedKey,
    spec: &QueueSpec,
    plan: &Plan,
    r: &[Value],
    now_secs: f64,
) -> (QueueSample, bool, Option<Unchanged>) {
    let age_failed;
    let mut found = None;
    let mut s = identity(key, Some(QueueType::List));
    let (len, head) = match plan.unchanged {
        Some(Unchanged::List { len, head }) => {
            age_failed = head == Head::Unreadable;
            (Some(len), Some(head))
        }
        _ => {
            let len = r.first().and_then(reply::as_u64);
            let head;
            (head, age_failed) = list_head(spec, plan, len, r.get(1));
            (len, head)
        }
    };
    s.depth = len;
    s.ready = len;
    match head {
        Some(Head::Empty) => s.oldest_age_seconds = Some(0.0),
        Some(Head::At(ts)) => s.oldest_age_seconds = Some((now_secs - ts).max(0.0)),
        _ => {}
    }
    if let (Some(len), Some(head)) = (len, head) {
        found = Some(Unchanged::List { len, head });
    }
    (s, age_failed, found)
}

/// After a fresh read of a list whose peeked item was too large to parse:
/// pauses the peek for a while (warning once), so a huge head item is not
/// fetched on every poll.
pub(super) fn pause_oversized_peek(key: &mut TrackedKey, r: &[Value], now_secs: f64) {
    if let Some(Value::BulkString(item)) = r.get(1)
        && item.len() > MAX_PEEK_BYTES
    {
        if key.peek_paused_until == 0.0 {
            tracing::warn!(
                key = %key.name,
                bytes = item.len(),
                "head item too large to peek for age; its age is unknown, \
                 re-checked once a minute"
            );
        }
        key.peek_paused_until = now_secs + PEEK_PAUSE_SECS;
    }
}

/// What a list's age peek found, from the `LINDEX` reply, and whether its
/// age could not be read (counted as a parse failure). `None` when it is
/// unknown for now (skipped while paused, too large to parse, or the length
/// is unknown): never kept, so the next poll peeks again.
fn list_head(
    spec: &QueueSpec,
    plan: &Plan,
    len: Option<u64>,
    item: Option<&Value>,
) -> (Option<Head>, bool) {
    let Some(age) = &spec.age else {
        return (Some(Head::NotPeeked), false);
    };
    match (len, item) {
        (None, _) => (None, false),
        (Some(0), _) => (Some(Head::Empty), false),
        (Some(_), _) if plan.peek_paused => (None, true),
        (Some(_), Some(Value::BulkString(item))) if item.len() > MAX_PEEK_BYTES => (None, true),
        (Some(_), Some(Value::BulkString(item))) => match item_timestamp(item, age) {
            Some(ts) => (Some(Head::At(ts)), false),
            None => (Some(Head::Unreadable), true),
        },
        // The list emptied between LLEN and LINDEX.
        (Some(_), Some(Value::Nil)) => (Some(Head::Empty), false),
        _ => (None, false),
    }
}

#[cfg(test)]
mod tests {
    use super::super::KeyOutcome;
    use super::super::tests::{NOW, bulk, counts, key, list_with_age_field_t, read_with, sample};
    use crate::config::KeyType;
    use crate::sources::redis::tracked::KeyState;
    use redis::Value::{Int, Nil};

    #[test]
    fn a_list_reads_its_length_and_the_peeked_items_age() {
        let k = key(KeyState::Typed(KeyType::List));
        let spec = list_with_age_field_t();
        let item = bulk(&format!("{{\"t\":{}}}", NOW - 12.0));
        let s = sample(read_with(&k, &spec, &[Int(3), item]));
        assert_eq!(counts(&s), (Some(3), Some(3), None, Some(12.0)));
        // Emptied between LLEN and LINDEX: nothing waits.
        let s = sample(read_with(&k, &spec, &[Int(1), Nil]));
        assert_eq!(s.oldest_age_seconds, Some(0.0));
        // An unreadable item: age unknown, and counted as a parse failure.
        match read_with(&k, &spec, &[Int(1), bulk("garbage")]) {
            KeyOutcome::Sample(s, failed, _) => assert!(failed && s.oldest_age_seconds.is_none()),
            other => panic!("{other:?}"),
        }
    }
}
