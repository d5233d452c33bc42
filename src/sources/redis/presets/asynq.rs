//! asynq (v0.26 layout): keys under `<prefix>:{<q>}:`; `pending` is LPUSHed
//! and taken from the tail, so the oldest is at `LINDEX -1`.

use redis::Value;

use super::{Follow, Stage, below, count, due_count, key, preset_sample, set_state, sum};
use crate::snapshot::{JobState, JobTotals, PresetKind};
use crate::time::TimeUnit;

/// `<prefix>:{<q>}:<name>`.
fn k(prefix: &str, q: &[u8], name: &[u8]) -> Vec<u8> {
    key(&[prefix.as_bytes(), b":{", q, b"}:", name])
}

/// Round 1: thirteen read-only commands.
pub fn plan(prefix: &str, q: &[u8], now: f64) -> Vec<redis::Cmd> {
    let c = |name: &str, n: &[u8]| super::cmd(name, &k(prefix, q, n));
    let mut zcount = c("ZCOUNT", b"lease");
    zcount.arg("-inf").arg(below(now));
    let mut lindex = c("LINDEX", b"pending");
    lindex.arg(-1);
    vec![
        c("LLEN", b"pending"),
        c("LLEN", b"active"),
        c("ZCARD", b"scheduled"),
        c("ZCARD", b"retry"),
        c("ZCARD", b"archived"),
        c("ZCARD", b"completed"),
        c("EXISTS", b"paused"),
        zcount,
        c("GET", b"processed"),
        c("GET", b"failed"),
        lindex,
        // Due tasks the forwarder (every 5 s in a running server) has not
        // moved to `pending` yet.
        due_count(&k(prefix, q, b"scheduled"), now),
        due_count(&k(prefix, q, b"retry"), now),
    ]
}

/// Reads [`plan`]'s replies (pure).
pub fn read(prefix: &str, q: &[u8], r: &[Value]) -> Stage {
    let at = |i: usize| r.get(i).unwrap_or(&Value::Nil);
    let mut s = preset_sample(PresetKind::Asynq, q);
    set_state(&mut s, JobState::Waiting, count(at(0)));
    set_state(&mut s, JobState::Active, count(at(1)));
    set_state(&mut s, JobState::Delayed, count(at(2)));
    set_state(&mut s, JobState::Retry, count(at(3)));
    set_state(&mut s, JobState::Failed, count(at(4)));
    set_state(&mut s, JobState::Completed, count(at(5)));
    let f = super::facts(&mut s);
    f.paused = super::reply::as_u64(at(6)).map(|n| n == 1);
    // Lease scores are expiries: a past one is an orphaned task.
    f.stalled = count(at(7));
    f.overdue = sum(&[at(11), at(12)]);
    s.set_jobs(JobTotals {
        processed: count(at(8)),
        failed: count(at(9)),
    });
    let mut follow = Vec::new();
    match at(10) {
        Value::Nil => s.oldest_age_seconds = Some(0.0),
        v => {
            if let Some(id) = super::reply::as_bytes(v) {
                let mut c = super::cmd("HGET", &k(prefix, q, &key(&[b"t:", id])));
                c.arg("pending_since");
                follow.push((c, Follow::Stamp(TimeUnit::Nanoseconds)));
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
    fn keys_map_to_states() {
        let r = [
            int(5),
            int(1),
            int(2),
            int(3),
            int(4),
            int(6),
            int(0),
            int(1),
            bulk("100"),
            bulk("7"),
            bulk("id1"),
            int(1),
            int(2),
        ];
        let st = read("asynq", b"critical", &r);
        let f = st.sample.preset.as_ref().unwrap();
        assert_eq!(
            [
                JobState::Waiting,
                JobState::Active,
                JobState::Delayed,
                JobState::Retry,
                JobState::Failed,
                JobState::Completed
            ]
            .map(|s| f.known(s)),
            [5, 1, 2, 3, 4, 6].map(Some)
        );
        assert_eq!(f.states.len(), 6);
        assert_eq!(
            (f.paused, f.stalled, f.overdue),
            (Some(false), Some(1), Some(3))
        );
        assert_eq!(
            (st.sample.jobs().processed, st.sample.jobs().failed),
            (Some(100), Some(7))
        );
        assert_eq!(st.follow[0].1, Follow::Stamp(TimeUnit::Nanoseconds));
        let p = plan("asynq", b"q", 1000.5);
        assert_eq!(p.len(), 13);
        assert_eq!(
            p[12].get_packed_command(),
            redis::cmd("ZCOUNT")
                .arg("asynq:{q}:retry")
                .arg("-inf")
                .arg("1000.5")
                .get_packed_command()
        );
    }

    #[test]
    fn a_paused_queue_keeps_its_pending_tasks_waiting() {
        let mut r: Vec<Value> = (0..10).map(|_| int(0)).chain([Value::Nil]).collect();
        r.extend([int(0), int(0)]);
        r[0] = int(3);
        r[6] = int(1);
        let f = read("asynq", b"q", &r).sample.preset.unwrap();
        assert_eq!(f.states[&JobState::Waiting], Some(3));
        assert!(!f.states.contains_key(&JobState::Paused));
        assert_eq!(f.paused, Some(true));
        assert_eq!(f.overdue, Some(0));
    }
}
