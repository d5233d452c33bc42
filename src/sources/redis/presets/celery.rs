//! Celery on kombu's Redis transport: a list per queue and priority step
//! (`<q>`, `<q><sep><step>`), and the broker-wide `unacked` hash and
//! `unacked_index` zset, reported once under the queue `(all)`. Messages
//! carry no enqueue time, so there is no latency.

use std::time::Duration;

use redis::Value;

use super::{Stage, Unit, below, count, key, preset_sample, set_state, shared_sample, sum};
use crate::snapshot::{JobState, PresetKind};

/// The states kombu keeps for all queues together, under `(all)`: the
/// `unacked` hash (reserved and running tasks: active).
pub const SHARED_STATES: &[JobState] = &[JobState::Active];

/// The states kept per queue: its lists (waiting).
pub const QUEUE_STATES: &[JobState] = &[JobState::Waiting];

/// Round 1: one LLEN per priority step; two commands for `(all)`.
pub fn plan(
    prefix: &str,
    sep: &str,
    steps: &[u8],
    unit: &Unit,
    now: f64,
    visibility_timeout: Duration,
) -> Vec<redis::Cmd> {
    let p = prefix.as_bytes();
    let Unit::Queue(q) = unit else {
        let mut stalled = super::cmd("ZCOUNT", &key(&[p, b"unacked_index"]));
        stalled
            .arg("-inf")
            .arg(below(now - visibility_timeout.as_secs_f64()));
        return vec![super::cmd("HLEN", &key(&[p, b"unacked"])), stalled];
    };
    steps
        .iter()
        .map(|step| {
            let list = if *step == 0 {
                key(&[p, q])
            } else {
                key(&[p, q, sep.as_bytes(), step.to_string().as_bytes()])
            };
            super::cmd("LLEN", &list)
        })
        .collect()
}

/// Reads [`plan`]'s replies (pure).
pub fn read(unit: &Unit, r: &[Value]) -> Stage {
    let Unit::Queue(q) = unit else {
        let mut s = shared_sample(PresetKind::Celery);
        super::kept_elsewhere(&mut s, QUEUE_STATES);
        let at = |i: usize| r.get(i).unwrap_or(&Value::Nil);
        // Reserved (prefetched) tasks, and running ones under acks_late.
        set_state(&mut s, JobState::Active, count(at(0)));
        super::facts(&mut s).stalled = count(at(1));
        return Stage::done(s);
    };
    let mut s = preset_sample(PresetKind::Celery, q);
    super::kept_elsewhere(&mut s, SHARED_STATES);
    let all: Vec<&Value> = r.iter().collect();
    set_state(&mut s, JobState::Waiting, sum(&all));
    Stage::done(s)
}

#[cfg(test)]
mod tests {
    use super::super::test_util::*;
    use super::*;

    #[test]
    fn priority_lists_sum_into_waiting() {
        let st = read(
            &Unit::Queue(b"celery".to_vec()),
            &[int(4), int(3), int(3), int(1)],
        );
        let f = st.sample.preset.as_ref().unwrap();
        assert_eq!(f.states[&JobState::Waiting], Some(11));
        assert_eq!(st.sample.oldest_age_seconds, None);
        let cmds = plan(
            "",
            "\x06\x16",
            &[0, 3, 6, 9],
            &Unit::Queue(b"celery".to_vec()),
            0.0,
            Duration::ZERO,
        );
        assert_eq!(
            cmds[1].get_packed_command(),
            redis::cmd("LLEN")
                .arg("celery\x06\x163")
                .get_packed_command()
        );
    }

    #[test]
    fn all_reads_unacked_and_stalled() {
        let st = read(&Unit::Shared, &[int(5), int(2)]);
        let f = st.sample.preset.as_ref().unwrap();
        assert_eq!(f.states[&JobState::Active], Some(5));
        assert_eq!(f.stalled, Some(2));
        let cmds = plan(
            "",
            ":",
            &[0],
            &Unit::Shared,
            5000.0,
            Duration::from_secs(3600),
        );
        assert_eq!(
            cmds[1].get_packed_command(),
            redis::cmd("ZCOUNT")
                .arg("unacked_index")
                .arg("-inf")
                .arg("(1400")
                .get_packed_command()
        );
    }

    /// Each unit holds exactly the states it says, and names the other's
    /// as kept elsewhere (what the scaler refuses when asked of it alone).
    #[test]
    fn each_unit_holds_its_states_and_names_the_others_as_elsewhere() {
        let shared = read(&Unit::Shared, &[int(5), int(2)])
            .sample
            .preset
            .unwrap();
        let queue = read(&Unit::Queue(b"q".to_vec()), &[int(4)])
            .sample
            .preset
            .unwrap();
        let held = |f: &crate::snapshot::PresetFacts| f.states.keys().copied().collect::<Vec<_>>();
        assert_eq!(held(&shared), SHARED_STATES);
        assert_eq!(held(&queue), QUEUE_STATES);
        assert_eq!(
            (shared.elsewhere, queue.elsewhere),
            (QUEUE_STATES, SHARED_STATES)
        );
    }
}
