//! asynq (v0.26 layout): keys under `<prefix>:{<q>}:`; `pending` is LPUSHed
//! and taken from the tail, so the oldest is at `LINDEX -1`.

use super::super::library::{
    Arrivals, Follow, Hidden, JobState, JobTotals, Keys, Library, MarkRead, OptionError, Owned,
    Preset, PresetKind, Recognise, Registry, Seen, Stage, TimeUnit, Unit, Written, below, cmd,
    count, due_count, facts, key, options_of, prefix_or, prefixed_registry_hides, preset_sample,
    registry_prefix, reply, set_state, sum, under, under_prefixed_registry,
};
use serde::Deserialize;
use std::collections::BTreeSet;

use redis::Value;

/// `<prefix>:{<q>}:<name>`.
fn k(prefix: &str, q: &[u8], name: &[u8]) -> Vec<u8> {
    key(&[prefix.as_bytes(), b":{", q, b"}:", name])
}

/// Round 1: thirteen read-only commands.
pub fn plan(prefix: &str, q: &[u8], now: f64) -> Vec<redis::Cmd> {
    let c = |name: &str, n: &[u8]| cmd(name, &k(prefix, q, n));
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
    let mut s = preset_sample(KIND, q);
    set_state(&mut s, JobState::Waiting, count(at(0)));
    set_state(&mut s, JobState::Active, count(at(1)));
    set_state(&mut s, JobState::Delayed, count(at(2)));
    set_state(&mut s, JobState::Retry, count(at(3)));
    set_state(&mut s, JobState::Failed, count(at(4)));
    set_state(&mut s, JobState::Completed, count(at(5)));
    let f = facts(&mut s);
    f.paused = reply::as_u64(at(6)).map(|n| n == 1);
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
            if let Some(id) = reply::as_bytes(v) {
                let mut c = cmd("HGET", &k(prefix, q, &key(&[b"t:", id])));
                c.arg("pending_since");
                follow.push((c, Follow::Stamp(TimeUnit::Nanoseconds)));
            }
        }
    }
    Stage { sample: s, follow }
}

/// asynq's `preset` name.
pub const KIND: PresetKind = PresetKind::named("asynq");

/// The options of a `- preset: asynq` entry: the one declaration of the
/// words it takes (`Library::options`, and the refusal of any other).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Options {
    /// `prefix:`, asynq's own `asynq` by default.
    #[serde(default)]
    prefix: Option<String>,
}

/// asynq: queues from the `<prefix>:queues` set of bare names.
pub struct Asynq;

impl Library for Asynq {
    fn kind(&self) -> PresetKind {
        KIND
    }

    fn title(&self) -> &'static str {
        "asynq"
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
        "asynq"
    }

    fn registry(&self, preset: &Preset) -> Registry {
        Registry::Set(key(&[preset.prefix.as_bytes(), b":queues"]))
    }

    /// `servers`, `workers`, `schedulers`, and every key of a queue under
    /// `<prefix>:{<q>}:`.
    fn owned(&self, preset: &Preset, units: &[Unit]) -> Vec<Owned> {
        let p = preset.prefix.as_bytes();
        let mut v: Vec<Owned> = [&b"servers"[..], b"workers", b"schedulers"]
            .iter()
            .map(|n| Owned::Key(key(&[p, b":", n])))
            .collect();
        v.extend(units.iter().filter_map(|u| match u {
            Unit::Queue(q) => Some(Owned::Under(key(&[p, b":{", q, b"}:"]))),
            Unit::Shared => None,
        }));
        v
    }

    /// Its `processed` total per queue.
    fn arrivals(&self) -> Arrivals {
        Arrivals::ProcessedTotal
    }

    fn plan(&self, preset: &Preset, unit: &Unit, now: f64) -> Vec<redis::Cmd> {
        plan(&preset.prefix, unit.name(), now)
    }

    fn read(&self, preset: &Preset, unit: &Unit, r: &[Value], _: f64) -> Stage {
        read(&preset.prefix, unit.name(), r)
    }

    /// An unread `<prefix>:queues`: any key under `<prefix>:` may be asynq's.
    fn withheld(&self, mark: &[u8], keys: &Keys) -> Vec<Vec<u8>> {
        under_prefixed_registry(mark, keys)
    }

    fn hidden(&self, mark: &[u8]) -> Option<Hidden> {
        prefixed_registry_hides(mark)
    }

    fn recognition(&self) -> Option<&dyn Recognise> {
        Some(self)
    }
}

impl Recognise for Asynq {
    fn fixed_marks(&self) -> &'static [&'static [u8]] {
        &[b"asynq:queues"]
    }

    /// A set `<prefix>:queues` (shared in shape with other libraries':
    /// the prefix or the keys beside tell).
    fn mark_read(&self, key: &[u8]) -> Option<MarkRead> {
        registry_prefix(key)
            .filter(|p| !p.is_empty())
            .map(|_| MarkRead::Set)
    }

    /// A key under an asynq-shaped `<p>:{<q>}:`, but not its task hashes
    /// `t:` nor its daily `processed:`/`failed:` strings (the bulk of its
    /// keys, never a list, zset or stream).
    fn is_evidence(&self, k: &[u8]) -> bool {
        k.windows(2)
            .position(|w| w == b":{")
            .and_then(|at| {
                k[at..]
                    .windows(2)
                    .position(|w| w == b"}:")
                    .map(|e| at + e + 2)
            })
            .is_some_and(|rest| {
                let rest = &k[rest..];
                ![&b"t:"[..], b"processed:", b"failed:"]
                    .iter()
                    .any(|p| rest.starts_with(p))
            })
    }

    /// A registry at asynq's own prefix is told; at another, the kept keys
    /// under `<p>:{<m>}:` of its members say.
    fn evidence(
        &self,
        seen: &Seen,
        names: &[Vec<u8>],
        told: &mut BTreeSet<Vec<u8>>,
    ) -> Vec<Vec<u8>> {
        // The `<p>:{<m>}:` prefixes, looked up by each name's own (no pass
        // over every member for every name).
        let mut under_asynq: BTreeSet<Vec<u8>> = BTreeSet::new();
        for (set, members) in seen.sets() {
            let Some(prefix) = registry_prefix(set).filter(|p| !p.is_empty()) else {
                continue;
            };
            if told.contains(set) {
                continue;
            }
            if prefix == self.default_prefix().as_bytes() {
                told.insert(set.clone());
                continue;
            }
            for m in members {
                under_asynq.insert(key(&[prefix, b":{", m, b"}:"]));
            }
        }
        if under_asynq.is_empty() {
            return Vec::new();
        }
        names
            .iter()
            .filter(|k| braced(k).any(|p| under_asynq.contains(p)))
            .cloned()
            .collect()
    }

    /// A set `<prefix>:queues` of bare names where the prefix is `asynq`
    /// or some member `<m>` has a list or zset `<prefix>:{<m>}:...`.
    fn recognise(
        &self,
        seen: &Seen,
        keys: &Keys,
        claimed: &mut BTreeSet<Vec<u8>>,
    ) -> Vec<(Preset, Vec<Unit>)> {
        let mut out = Vec::new();
        for (set, members) in seen.sets() {
            let Some(prefix) = registry_prefix(set).filter(|p| !p.is_empty()) else {
                continue;
            };
            let Ok(text) = std::str::from_utf8(prefix) else {
                continue;
            };
            if claimed.contains(set) || members.is_empty() || members.iter().any(Vec::is_empty) {
                continue;
            }
            let asynq = text == self.default_prefix()
                || members.iter().any(|m| {
                    under(keys, &key(&[prefix, b":{", m, b"}:"]))
                        .next()
                        .is_some()
                });
            if asynq {
                claimed.insert(set.clone());
                let preset = Preset::new(KIND, text);
                let units = self.registry_units(&preset, members.clone());
                out.push((preset, units));
            }
        }
        out
    }
}

/// Each prefix of `k` that ends an asynq-shaped `:{…}:` (pure): `a:{b}:`
/// and `a:{b}:c:{d}:` of `a:{b}:c:{d}:e`. A name has a few, so looking
/// each up costs a name its length, whatever the registries hold.
pub(super) fn braced(k: &[u8]) -> impl Iterator<Item = &[u8]> + '_ {
    let opens = k.windows(2).enumerate().filter(|(_, w)| *w == b":{");
    opens.flat_map(move |(at, _)| {
        k.windows(2)
            .enumerate()
            .skip(at + 2)
            .filter(|(_, w)| *w == b"}:")
            .map(move |(end, _)| &k[..end + 2])
    })
}

#[cfg(test)]
mod tests {
    use super::super::super::test_util::*;
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

#[cfg(test)]
mod recognition_tests {
    //! Zero config's recognition of this library, through the generic
    //! pass (`zero::classify::recognise`).
    use super::super::super::zero::classify::test_util::*;
    use super::super::asynq;

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
        // Each member's `work:queue:<m>`, the namespace's three zsets, the
        // two keys that would make it another library's, and the 50,000
        // names under a member's braces.
        assert_eq!(wanted.len(), 1000 + 3 + 2 + 50_000);
        assert!(wanted.contains(&b"work:{q999}:pending:999".to_vec()));
        assert!(!wanted.contains(&b"work:{q1000}:pending:1000".to_vec()));
        // Speed is not asserted here (a timed test fails on a loaded
        // machine): names × members, 10^8 prefix comparisons, took 13.8 s
        // in a debug build; by each name's own prefixes, 0.6 s.
    }

    #[test]
    fn braced_prefixes_are_each_open_brace_to_each_close_after_it() {
        let all: Vec<&[u8]> = asynq::braced(b"a:{b}:c:{d}:e").collect();
        // From the first `:{`, and from the second.
        assert_eq!(all, [&b"a:{b}:"[..], b"a:{b}:c:{d}:", b"a:{b}:c:{d}:"]);
        assert_eq!(asynq::braced(b"plain:key").count(), 0);
    }
}
