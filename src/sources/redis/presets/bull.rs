//! Bull (3.x/4.x, the `bull` package, BullMQ's predecessor): keys under
//! `<prefix>:<q>:` (OptimalBits/bull 4.15 `lib/queue.js` `toKey`). `wait`
//! is LPUSHed and taken from the tail by `BRPOPLPUSH wait active`, so the
//! next job is at `LINDEX -1`; a paused queue's jobs sit in `paused` (the
//! pause renames `wait`, `pause-5.lua`) and the pause itself is the
//! `meta-paused` string. A prioritised job is in `wait` *and* in the
//! `priority` zset (`addJobWithPriority.lua`), so `priority` is not counted
//! again. `delayed` scores are `due_ms * 4096 + n` as in BullMQ; every
//! added job INCRs `id` (`addJob-6.lua`); an active job without its
//! `<id>:lock` key is stalled.

use redis::Value;

use super::bullmq::{Jobs, due_score_bound, ids, k, read_jobs};
use super::{Stage, count, preset_sample, set_state, sum};
use crate::snapshot::{JobState, PresetKind};

/// Where queue `q` keeps finished jobs: as BullMQ, `completed` and
/// `failed` scored by `finishedOn` (ms), the job hash with `processedOn` and
/// `finishedOn` (`moveToFinished-9.lua`, `moveToActive-8.lua`).
pub fn finished(prefix: &str, q: &[u8]) -> super::service::FinishedLayout {
    super::bullmq::finished(prefix, q)
}

/// The keys of a Bull queue that zero config may find by type (lists and
/// zsets), by their last name part; any of them beside an integer `id`
/// string marks a queue.
pub const TYPED_PARTS: [&[u8]; 7] = [
    b"wait",
    b"paused",
    b"active",
    b"delayed",
    b"priority",
    b"completed",
    b"failed",
];

/// The prefix and queue name of `<prefix>:<q>:<part>` where `<part>` is
/// `id` or one of [`TYPED_PARTS`]: zero config parses the name from the
/// right, so it recognises queues whose names hold no `:` (the prefix may).
pub fn queue_of_part(k: &[u8]) -> Option<(&[u8], &[u8])> {
    let colon = k.iter().rposition(|b| *b == b':')?;
    let (rest, part) = (&k[..colon], &k[colon + 1..]);
    if part != b"id" && !TYPED_PARTS.contains(&part) {
        return None;
    }
    let colon = rest.iter().rposition(|b| *b == b':')?;
    let (prefix, name) = (&rest[..colon], &rest[colon + 1..]);
    (!prefix.is_empty() && !name.is_empty()).then_some((prefix, name))
}

/// The queue name of `<prefix>:<q>:id` at a known `prefix`; `None` when
/// the key is not one, or the name is empty.
pub fn queue_of_id<'a>(prefix: &[u8], id_key: &'a [u8]) -> Option<&'a [u8]> {
    let rest = id_key.strip_prefix(prefix)?.strip_prefix(b":")?;
    rest.strip_suffix(b":id").filter(|q| !q.is_empty())
}

/// Round 1: twelve read-only commands.
pub fn plan(prefix: &str, q: &[u8], limit: usize, now: f64) -> Vec<redis::Cmd> {
    let c = |name: &str, n: &[u8]| super::cmd(name, &k(prefix, q, n));
    let mut wait_tail = c("LRANGE", b"wait");
    wait_tail.arg(-1).arg(-1);
    let mut paused_tail = c("LRANGE", b"paused");
    paused_tail.arg(-1).arg(-1);
    let mut active = c("LRANGE", b"active");
    active.arg(0).arg(limit.saturating_sub(1));
    let mut overdue = c("ZCOUNT", b"delayed");
    overdue.arg("-inf").arg(due_score_bound(now));
    vec![
        c("LLEN", b"wait"),
        c("LLEN", b"paused"),
        c("LLEN", b"active"),
        c("ZCARD", b"delayed"),
        c("ZCARD", b"completed"),
        c("ZCARD", b"failed"),
        c("EXISTS", b"meta-paused"),
        wait_tail,
        paused_tail,
        active,
        overdue,
        c("GET", b"id"),
    ]
}

/// Reads [`plan`]'s replies (pure).
pub fn read(prefix: &str, q: &[u8], r: &[Value]) -> Stage {
    let at = |i: usize| r.get(i).unwrap_or(&Value::Nil);
    let mut s = preset_sample(PresetKind::Bull, q);
    // Jobs of a paused queue wait in `paused`: still the backlog; the pause
    // is its own gauge.
    let backlog = sum(&[at(0), at(1)]);
    set_state(&mut s, JobState::Waiting, backlog);
    set_state(&mut s, JobState::Active, count(at(2)));
    set_state(&mut s, JobState::Delayed, count(at(3)));
    // The next job (the tail of `wait`, or of `paused` while paused) is the
    // oldest of a FIFO queue; unknown unless both tails were readable.
    let readable =
        super::reply::as_array(at(7)).is_some() && super::reply::as_array(at(8)).is_some();
    let next = ids(at(7)).into_iter().chain(ids(at(8))).next();
    let jobs = Jobs {
        completed: at(4),
        failed: at(5),
        paused: at(6),
        overdue: at(10),
        // Every added job INCRs `id`, custom job ids included.
        added: at(11),
        active: at(9),
        backlog,
        oldest: readable.then_some(next),
    };
    read_jobs(prefix, q, s, jobs)
}

#[cfg(test)]
mod tests {
    use super::super::Follow;
    use super::super::test_util::*;
    use super::*;
    use crate::time::TimeUnit;

    fn replies(paused: i64, wait_tail: &[&str], paused_tail: &[&str]) -> Vec<Value> {
        vec![
            int(wait_tail.len() as i64 * 2),
            int(paused_tail.len() as i64 * 3),
            int(2),
            int(4),
            int(5),
            int(6),
            int(paused),
            list(wait_tail),
            list(paused_tail),
            list(&["5", "6"]),
            int(1),
            Value::BulkString(b"17".to_vec()),
        ]
    }

    #[test]
    fn keys_map_to_states_without_counting_priority_twice() {
        let st = read("bull", b"mail", &replies(0, &["8"], &[]));
        let f = st.sample.preset.as_ref().unwrap();
        assert_eq!(f.preset, PresetKind::Bull);
        assert_eq!(f.states[&JobState::Waiting], Some(2));
        assert_eq!(f.states[&JobState::Active], Some(2));
        assert_eq!(f.states[&JobState::Delayed], Some(4));
        assert_eq!(f.states[&JobState::Completed], Some(5));
        assert_eq!(f.states[&JobState::Failed], Some(6));
        assert_eq!(f.states.len(), 5);
        assert_eq!(f.paused, Some(false));
        assert_eq!(f.overdue, Some(1));
        assert_eq!(f.stalled, Some(0));
        assert_eq!(st.sample.counters().published, Some(17));
        // The next job's stamp, then one lock check per active job.
        assert_eq!(st.follow.len(), 3);
        assert_eq!(
            st.follow[0].0.get_packed_command(),
            redis::cmd("HGET")
                .arg("bull:mail:8")
                .arg("timestamp")
                .get_packed_command()
        );
        assert_eq!(
            st.follow[2].0.get_packed_command(),
            redis::cmd("EXISTS")
                .arg("bull:mail:6:lock")
                .get_packed_command()
        );
        // `priority` is never read: its jobs are also in `wait`.
        assert!(
            plan("bull", b"mail", 10, 0.0)
                .iter()
                .all(|c| !String::from_utf8_lossy(&c.get_packed_command()).contains(":priority"))
        );
    }

    #[test]
    fn a_paused_queue_keeps_its_backlog_waiting_and_its_age() {
        let st = read("bull", b"q", &replies(1, &[], &["3"]));
        let f = st.sample.preset.as_ref().unwrap();
        assert_eq!(f.states[&JobState::Waiting], Some(3));
        assert_eq!(f.paused, Some(true));
        assert_eq!(st.follow[0].1, Follow::Stamp(TimeUnit::Milliseconds));
        assert_eq!(
            st.follow[0].0.get_packed_command(),
            redis::cmd("HGET")
                .arg("bull:q:3")
                .arg("timestamp")
                .get_packed_command()
        );
    }

    #[test]
    fn an_empty_queue_is_zero_old_and_a_refused_list_leaves_the_age_unknown() {
        let st = read("bull", b"q", &replies(0, &[], &[]));
        assert_eq!(st.sample.oldest_age_seconds, Some(0.0));
        let mut r = replies(0, &["1"], &[]);
        r[1] = refused();
        r[8] = refused();
        let st = read("bull", b"q", &r);
        let f = st.sample.preset.as_ref().unwrap();
        assert_eq!(f.states[&JobState::Waiting], None);
        assert_eq!(st.sample.oldest_age_seconds, None);
        assert!(
            st.follow
                .iter()
                .all(|(_, f)| *f != Follow::Stamp(TimeUnit::Milliseconds))
        );
        // No `id` key: arrivals unknown, not 0.
        let mut r = replies(0, &[], &[]);
        r[11] = Value::Nil;
        assert_eq!(read("bull", b"q", &r).sample.counters().published, None);
    }

    #[test]
    fn zero_config_parses_a_bull_key_from_the_right() {
        assert_eq!(
            queue_of_part(b"my:app:mail:wait"),
            Some((&b"my:app"[..], &b"mail"[..]))
        );
        assert_eq!(
            queue_of_part(b"bull:mail:id"),
            Some((&b"bull"[..], &b"mail"[..]))
        );
        assert_eq!(queue_of_part(b"bull:mail:meta"), None);
        assert_eq!(queue_of_part(b"mail:wait"), None);
        assert_eq!(queue_of_part(b"bull::wait"), None);
    }

    #[test]
    fn an_id_key_names_its_queue_at_a_known_prefix() {
        assert_eq!(queue_of_id(b"bull", b"bull:mail:id"), Some(&b"mail"[..]));
        assert_eq!(queue_of_id(b"my:app", b"my:app:a:b:id"), Some(&b"a:b"[..]));
        assert_eq!(queue_of_id(b"bull", b"bull::id"), None);
        assert_eq!(queue_of_id(b"bull", b"other:mail:id"), None);
        assert_eq!(queue_of_id(b"bull", b"bull:mail:ids"), None);
    }
}
