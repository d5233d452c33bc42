//! RQ (`rq` 2.x/3.x): `<prefix>:queue:<q>` lists (RPUSH, LPOP: the oldest
//! is at the head) and one zset registry per state.

use redis::Value;

use super::{Follow, Stage, below, count, due_count, key, preset_sample, set_state, sum};
use crate::snapshot::{JobState, PresetKind};
use crate::time::TimeUnit;

/// The keys of queue `q`: `<prefix>:<kind>:<q>`.
fn k(prefix: &str, kind: &str, q: &[u8]) -> Vec<u8> {
    key(&[prefix.as_bytes(), b":", kind.as_bytes(), b":", q])
}

/// Where queue `q` keeps finished jobs: the `finished` and `failed`
/// registries (scored by expiry: end time plus `result_ttl`/`failure_ttl`),
/// and each job's hash `<prefix>:job:<id>` with `started_at` and `ended_at`
/// (RQ's `%Y-%m-%dT%H:%M:%S.%fZ`). Empty with `result_ttl=0`.
pub fn finished(prefix: &str, q: &[u8]) -> super::service::FinishedLayout {
    super::service::FinishedLayout {
        sets: [k(prefix, "finished", q), k(prefix, "failed", q)],
        job_prefix: key(&[prefix.as_bytes(), b":job:"]),
        fields: ["started_at", "ended_at"],
        unit: TimeUnit::Rfc3339,
    }
}

/// Round 1: ten read-only commands.
pub fn plan(prefix: &str, q: &[u8], now: f64) -> Vec<redis::Cmd> {
    let list = k(prefix, "queue", q);
    let zcard = |kind: &str| super::cmd("ZCARD", &k(prefix, kind, q));
    let mut zcount = super::cmd("ZCOUNT", &k(prefix, "wip", q));
    zcount.arg("-inf").arg(below(now));
    let mut lindex = super::cmd("LINDEX", &list);
    lindex.arg(0);
    vec![
        super::cmd("LLEN", &list),
        super::cmd("LLEN", &key(&[&list, b":intermediate"])),
        zcard("wip"),
        zcard("finished"),
        zcard("failed"),
        zcard("deferred"),
        zcard("scheduled"),
        zcount,
        lindex,
        // Due jobs no `--with-scheduler` worker has enqueued yet.
        due_count(&k(prefix, "scheduled", q), now),
    ]
}

/// Reads [`plan`]'s replies (pure).
pub fn read(prefix: &str, q: &[u8], r: &[Value]) -> Stage {
    let mut s = preset_sample(PresetKind::Rq, q);
    let at = |i: usize| r.get(i).unwrap_or(&Value::Nil);
    // Deferred jobs (waiting on dependencies) count as waiting: they are
    // queued work a worker will run without anyone scheduling it.
    set_state(&mut s, JobState::Waiting, sum(&[at(0), at(5)]));
    set_state(&mut s, JobState::Active, sum(&[at(1), at(2)]));
    set_state(&mut s, JobState::Completed, count(at(3)));
    set_state(&mut s, JobState::Failed, count(at(4)));
    set_state(&mut s, JobState::Delayed, count(at(6)));
    // wip scores are heartbeat expiries: past ones are abandoned jobs.
    let f = super::facts(&mut s);
    f.stalled = count(at(7));
    f.overdue = count(at(9));
    let mut follow = Vec::new();
    match at(8) {
        Value::Nil => s.oldest_age_seconds = Some(0.0),
        v => {
            if let Some(id) = super::reply::as_bytes(v) {
                let mut c = super::cmd("HGET", &k(prefix, "job", id));
                c.arg("enqueued_at");
                follow.push((c, Follow::Stamp(TimeUnit::Rfc3339)));
            }
        }
    }
    Stage { sample: s, follow }
}

#[cfg(test)]
mod tests {
    use super::super::test_util::*;
    use super::*;

    #[test]
    fn registries_map_to_states() {
        let r = [
            int(2),
            int(1),
            int(3),
            int(4),
            int(5),
            int(6),
            int(7),
            int(1),
            bulk("abc"),
            int(2),
        ];
        let st = read("rq", b"default", &r);
        let f = st.sample.preset.as_ref().unwrap();
        assert_eq!(f.preset, PresetKind::Rq);
        assert_eq!(f.states[&JobState::Waiting], Some(2 + 6));
        assert_eq!(f.states[&JobState::Active], Some(1 + 3));
        assert_eq!(f.states[&JobState::Completed], Some(4));
        assert_eq!(f.states[&JobState::Failed], Some(5));
        assert_eq!(f.states[&JobState::Delayed], Some(7));
        assert_eq!(f.stalled, Some(1));
        assert_eq!(f.overdue, Some(2));
        assert_eq!(f.paused, None);
        assert_eq!(st.follow.len(), 1);
        assert_eq!(st.follow[0].1, Follow::Stamp(TimeUnit::Rfc3339));
        assert_eq!(st.sample.oldest_age_seconds, None);
    }

    #[test]
    fn an_empty_queue_is_zero_and_not_followed() {
        let r: Vec<Value> = (0..8).map(|_| int(0)).chain([Value::Nil]).collect();
        let st = read("rq", b"q", &r);
        assert!(st.follow.is_empty());
        assert_eq!(st.sample.oldest_age_seconds, Some(0.0));
        assert_eq!(
            st.sample.preset.unwrap().states[&JobState::Waiting],
            Some(0)
        );
    }

    #[test]
    fn an_error_reply_leaves_its_state_unknown() {
        let mut r: Vec<Value> = (0..8).map(|_| int(0)).chain([Value::Nil]).collect();
        r[3] = bulk("not a number");
        let st = read("rq", b"q", &r);
        // Present (RQ has the state) but unknown: never 0, never "no such state".
        assert_eq!(
            st.sample.preset.unwrap().states.get(&JobState::Completed),
            Some(&None)
        );
    }

    #[test]
    fn plan_is_ten_commands() {
        let p = plan("rq", b"q", 1.5);
        assert_eq!(p.len(), 10);
        assert_eq!(
            p[9].get_packed_command(),
            redis::cmd("ZCOUNT")
                .arg("rq:scheduled:q")
                .arg("-inf")
                .arg("1.5")
                .get_packed_command()
        );
    }
}
