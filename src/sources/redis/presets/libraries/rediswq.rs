//! The Kubernetes fine-parallel work queue (`rediswq.py`): the main list
//! `<name>`, a `<name>:processing` list, and a lease key per taken item,
//! `<name>:leased_by_session:<sha224 hex of the item>`. Items carry no
//! timestamp, so there is no latency.

use super::super::library::{
    Follow, JobState, Library, OptionError, Preset, PresetKind, Stage, Unit, Written, cmd, count,
    facts, key, options_of, preset_sample, reply, set_state, stalled_check_limit,
};
use redis::Value;
use serde::Deserialize;
use sha2::{Digest, Sha224};

/// Round 1: three read-only commands.
pub fn plan(name: &[u8], limit: usize) -> Vec<redis::Cmd> {
    let processing = key(&[name, b":processing"]);
    let mut items = cmd("LRANGE", &processing);
    items.arg(0).arg(limit.saturating_sub(1));
    vec![cmd("LLEN", name), cmd("LLEN", &processing), items]
}

/// The lease key of `item`.
pub fn lease_key(name: &[u8], item: &[u8]) -> Vec<u8> {
    let hex: String = Sha224::digest(item)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    key(&[name, b":leased_by_session:", hex.as_bytes()])
}

/// Reads [`plan`]'s replies (pure).
pub fn read(name: &[u8], r: &[Value]) -> Stage {
    let at = |i: usize| r.get(i).unwrap_or(&Value::Nil);
    let mut s = preset_sample(KIND, name);
    set_state(&mut s, JobState::Waiting, count(at(0)));
    set_state(&mut s, JobState::Active, count(at(1)));
    let mut follow = Vec::new();
    if let Some(items) = reply::as_array(at(2)) {
        // Processing items whose lease expired: the library never requeues them.
        facts(&mut s).stalled = Some(0);
        for item in items.iter().filter_map(reply::as_bytes) {
            follow.push((
                cmd("EXISTS", &lease_key(name, item)),
                Follow::StalledIfMissing,
            ));
        }
    }
    Stage { sample: s, follow }
}

/// rediswq's `preset` name.
pub const KIND: PresetKind = PresetKind::named("rediswq");

/// The options of a `- preset: rediswq` entry: the one declaration of the
/// words it takes (`Library::options`, and the refusal of any other).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Options {
    /// `name:`, the main list's name (required).
    #[serde(default)]
    name: Option<String>,
    /// `stalled_check_limit:`: the leases checked per poll, at most.
    #[serde(default)]
    stalled_check_limit: Option<usize>,
}

/// The Kubernetes fine-parallel work queue: one queue, the main list
/// `name:` (`job2` in the Kubernetes example).
pub struct Rediswq;

impl Library for Rediswq {
    fn kind(&self) -> PresetKind {
        KIND
    }

    fn title(&self) -> &'static str {
        "rediswq"
    }

    fn options(&self) -> &'static [&'static str] {
        options_of::<Options>()
    }

    fn configure(&self, written: &Written) -> Result<Preset, OptionError> {
        let given: Options = written.read()?;
        let limit = stalled_check_limit(given.stalled_check_limit)?;
        let name = match given.name {
            Some(n) if !n.is_empty() => n,
            Some(_) => return Err("name: must not be empty".into()),
            None => return Err("name: required by preset rediswq (the main list)".into()),
        };
        Ok(Preset {
            name,
            stalled_check_limit: limit,
            ..Preset::new(self.kind(), self.default_prefix())
        })
    }

    fn takes_counters(&self) -> bool {
        true
    }

    fn fixed_queues(&self, preset: &Preset) -> Vec<Unit> {
        vec![Unit::Queue(preset.name.as_bytes().to_vec())]
    }

    fn fixed_names(&self, preset: &Preset) -> Vec<String> {
        vec![preset.name.clone()]
    }

    fn plan(&self, preset: &Preset, unit: &Unit, _: f64) -> Vec<redis::Cmd> {
        plan(unit.name(), preset.stalled_check_limit)
    }

    fn read(&self, _: &Preset, unit: &Unit, r: &[Value], _: f64) -> Stage {
        read(unit.name(), r)
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::test_util::*;
    use super::*;

    #[test]
    fn lease_keys_hash_the_item_like_python() {
        // hashlib.sha224(b"date").hexdigest()
        assert_eq!(
            String::from_utf8(lease_key(b"job2", b"date")).unwrap(),
            "job2:leased_by_session:83959d06013e19da41ce9fd80f26a0224790452f73e69535f8f750b6"
        );
    }

    #[test]
    fn lists_map_to_states_and_each_item_is_checked() {
        let st = read(b"job2", &[int(3), int(2), list(&["a", "b"])]);
        let f = st.sample.preset.as_ref().unwrap();
        assert_eq!(f.states[&JobState::Waiting], Some(3));
        assert_eq!(f.states[&JobState::Active], Some(2));
        assert_eq!(f.stalled, Some(0));
        assert_eq!(st.follow.len(), 2);
        assert_eq!(st.sample.oldest_age_seconds, None);
    }
}
