//! The priority-zset layout: `<prefix>:pending:<priority>` zsets scored by
//! enqueue time in float seconds (due items are waiting, future ones
//! delayed), a `<prefix>:processing` hash (job → worker), a
//! `<prefix>:completed` zset and a `<prefix>:dlq` list. One logical queue,
//! `<prefix>`, with a `priority` label on the per-priority samples.

use super::super::library::{
    JobState, KeyType, Library, OptionError, Preset, PresetKind, Registry, Stage, Unit, Written,
    cmd, count, display_key, escape_glob, kept_elsewhere, key, options_of, prefix_or,
    preset_sample, reply, set_state, shared,
};
use redis::Value;
use serde::Deserialize;

/// The states kept in the layout's shared keys (`processing`, `completed`,
/// `dlq`), for all priorities together.
pub const SHARED_STATES: &[JobState] = &[JobState::Active, JobState::Failed, JobState::Completed];

/// The states kept per priority: its `pending` zset (due: waiting; future:
/// delayed).
pub const QUEUE_STATES: &[JobState] = &[JobState::Waiting, JobState::Delayed];

/// Round 1: three commands per priority, three for the shared keys.
pub fn plan(prefix: &str, unit: &Unit, now: f64) -> Vec<redis::Cmd> {
    let pre = prefix.as_bytes();
    let Unit::Queue(p) = unit else {
        return vec![
            cmd("HLEN", &key(&[pre, b":processing"])),
            cmd("ZCARD", &key(&[pre, b":completed"])),
            cmd("LLEN", &key(&[pre, b":dlq"])),
        ];
    };
    let zset = key(&[pre, b":pending:", p]);
    let mut due = cmd("ZCOUNT", &zset);
    due.arg("-inf").arg(now);
    let mut first = cmd("ZRANGE", &zset);
    first.arg(0).arg(0).arg("WITHSCORES");
    vec![cmd("ZCARD", &zset), due, first]
}

/// Reads [`plan`]'s replies (pure).
pub fn read(prefix: &str, unit: &Unit, r: &[Value], now: f64) -> Stage {
    let at = |i: usize| r.get(i).unwrap_or(&Value::Nil);
    let mut s = preset_sample(KIND, prefix.as_bytes());
    let Unit::Queue(p) = unit else {
        shared(&mut s);
        kept_elsewhere(&mut s, QUEUE_STATES);
        set_state(&mut s, JobState::Active, count(at(0)));
        set_state(&mut s, JobState::Completed, count(at(1)));
        set_state(&mut s, JobState::Failed, count(at(2)));
        return Stage::done(s);
    };
    s.labels = vec![("priority".into(), display_key(p))];
    kept_elsewhere(&mut s, SHARED_STATES);
    let total = count(at(0));
    let due = count(at(1));
    set_state(&mut s, JobState::Waiting, due);
    set_state(
        &mut s,
        JobState::Delayed,
        total.zip(due).map(|(t, d)| t.saturating_sub(d)),
    );
    // The lowest score is the oldest enqueue time; in the future it means
    // nothing is due yet.
    s.oldest_age_seconds = reply::first_score(at(2)).map(|first| match first {
        Some(score) => (now - score).max(0.0),
        None => 0.0,
    });
    Stage::done(s)
}

/// The priority-zset layout's `preset` name.
pub const KIND: PresetKind = PresetKind::named("priority-zset");

/// The options of a `- preset: priority-zset` entry: the one declaration of the
/// words it takes (`Library::options`, and the refusal of any other).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Options {
    /// `prefix:`, `jobs` by default.
    #[serde(default)]
    prefix: Option<String>,
}

/// `<prefix>:pending:{priority}` zsets and friends: one logical queue,
/// named by its prefix, with a sample per priority.
pub struct PriorityZset;

impl Library for PriorityZset {
    fn kind(&self) -> PresetKind {
        KIND
    }

    fn title(&self) -> &'static str {
        "priority-zset"
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
        "jobs"
    }

    fn takes_counters(&self) -> bool {
        true
    }

    /// Each priority is a "queue" of the entry.
    fn registry(&self, preset: &Preset) -> Registry {
        let p = escape_glob(preset.prefix.as_bytes());
        Registry::Scan {
            pattern: key(&[&p, b":pending:*"]),
            key_type: Some(KeyType::Zset),
        }
    }

    fn queue_of_key(&self, preset: &Preset, k: &[u8]) -> Option<Vec<u8>> {
        let start = preset.prefix.len() + b":pending:".len();
        k.get(start..).filter(|p| !p.is_empty()).map(<[u8]>::to_vec)
    }

    /// The keys shared by all priorities.
    fn fixed_queues(&self, _: &Preset) -> Vec<Unit> {
        vec![Unit::Shared]
    }

    fn fixed_names(&self, preset: &Preset) -> Vec<String> {
        vec![preset.prefix.clone()]
    }

    fn plan(&self, preset: &Preset, unit: &Unit, now: f64) -> Vec<redis::Cmd> {
        plan(&preset.prefix, unit, now)
    }

    fn read(&self, preset: &Preset, unit: &Unit, r: &[Value], now: f64) -> Stage {
        read(&preset.prefix, unit, r, now)
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::test_util::*;
    use super::*;

    #[test]
    fn due_items_wait_and_future_items_are_delayed() {
        let st = read(
            "jobs",
            &Unit::Queue(b"high".to_vec()),
            &[int(5), int(3), list(&["j1", "990.5"])],
            1000.0,
        );
        let f = st.sample.preset.as_ref().unwrap();
        assert_eq!(f.states[&JobState::Waiting], Some(3));
        assert_eq!(f.states[&JobState::Delayed], Some(2));
        assert_eq!(st.sample.name, "jobs");
        assert_eq!(st.sample.labels, vec![("priority".into(), "high".into())]);
        assert_eq!(st.sample.oldest_age_seconds, Some(9.5));
        // Only future items: nothing is late.
        let st = read(
            "jobs",
            &Unit::Queue(b"low".to_vec()),
            &[int(1), int(0), list(&["j", "2000"])],
            1000.0,
        );
        assert_eq!(st.sample.oldest_age_seconds, Some(0.0));
    }

    #[test]
    fn shared_keys_map_to_active_completed_failed() {
        let st = read("jobs", &Unit::Shared, &[int(2), int(10), int(1)], 0.0);
        let f = st.sample.preset.as_ref().unwrap();
        assert_eq!(f.states[&JobState::Active], Some(2));
        assert_eq!(f.states[&JobState::Completed], Some(10));
        assert_eq!(f.states[&JobState::Failed], Some(1));
        assert!(st.sample.labels.is_empty());
    }

    /// Each unit holds exactly the states it says, and names the other's
    /// as kept elsewhere (what the scaler refuses when asked of it alone).
    #[test]
    fn each_unit_holds_its_states_and_names_the_others_as_elsewhere() {
        let shared = read("jobs", &Unit::Shared, &[int(2), int(10), int(1)], 0.0);
        let queue = read(
            "jobs",
            &Unit::Queue(b"high".to_vec()),
            &[int(1), int(1), Value::Nil],
            0.0,
        );
        let (shared, queue) = (shared.sample.preset.unwrap(), queue.sample.preset.unwrap());
        let held = |f: &crate::snapshot::PresetFacts| f.states.keys().copied().collect::<Vec<_>>();
        assert_eq!(held(&shared), SHARED_STATES);
        assert_eq!(held(&queue), QUEUE_STATES);
        assert_eq!(
            (shared.elsewhere, queue.elsewhere),
            (QUEUE_STATES, SHARED_STATES)
        );
    }
}
