//! Sidekiq (6.x–8.x): `queue:<q>` lists (LPUSH, BRPOP: the oldest is at the
//! tail), and source-wide `schedule`, `retry`, `dead` zsets, `stat:*`
//! totals and `processes`, reported once under the queue `(all)`. A queue
//! in Sidekiq Pro's `paused` set keeps its jobs in `waiting`.

use serde::Deserialize;
use std::collections::BTreeSet;

use super::super::library::{
    ALL_QUEUES, Follow, Hidden, JobState, JobTotals, KeyType, Keys, Library, MarkRead, OptionError,
    Preset, PresetKind, Recognise, Registry, Seen, Stage, Unit, Written, cmd, count, due_count,
    facts, kept_elsewhere, key, options_of, prefix_or, preset_sample, registry_prefix, reply,
    set_state, shared_sample, sorted, stalled_check_limit, sum, type_at, under,
};
use redis::Value;

/// A Sidekiq key under an optional redis-namespace prefix.
pub fn k(prefix: &str, name: &[u8]) -> Vec<u8> {
    if prefix.is_empty() {
        name.to_vec()
    } else {
        key(&[prefix.as_bytes(), b":", name])
    }
}

/// The states Sidekiq keeps for all its queues together, under `(all)`:
/// `schedule` (delayed), `retry`, `dead` (failed), and the busy threads of
/// `processes` (active). A queue's own list holds only its `waiting` jobs.
pub const SHARED_STATES: &[JobState] = &[
    JobState::Active,
    JobState::Delayed,
    JobState::Retry,
    JobState::Failed,
];

/// The states Sidekiq keeps per queue: its `queue:<q>` list.
pub const QUEUE_STATES: &[JobState] = &[JobState::Waiting];

/// Round 1: three commands per queue; eight for the shared keys (`(all)`).
/// `processes` is read bounded: at most `limit` + 1 of its members
/// (`SRANDMEMBER` with a positive count returns distinct members, the
/// whole set when it holds no more), so a reply of `limit` or fewer is all
/// of it.
pub fn plan(prefix: &str, unit: &Unit, now: f64, limit: usize) -> Vec<redis::Cmd> {
    let q = match unit {
        Unit::Queue(q) => q.as_slice(),
        Unit::Shared => {
            let mut members = cmd("SRANDMEMBER", &k(prefix, b"processes"));
            members.arg(limit.saturating_add(1));
            return vec![
                cmd("ZCARD", &k(prefix, b"schedule")),
                cmd("ZCARD", &k(prefix, b"retry")),
                cmd("ZCARD", &k(prefix, b"dead")),
                cmd("GET", &k(prefix, b"stat:processed")),
                cmd("GET", &k(prefix, b"stat:failed")),
                members,
                // Due jobs the scheduled-set poller (every ~5 s across all
                // processes) has not pushed to their queue yet.
                due_count(&k(prefix, b"schedule"), now),
                due_count(&k(prefix, b"retry"), now),
            ];
        }
    };
    let list = k(prefix, &key(&[b"queue:", q]));
    let mut lindex = cmd("LINDEX", &list);
    lindex.arg(-1);
    // `paused` is filled by Sidekiq Pro only; OSS never pauses.
    let mut paused = cmd("SISMEMBER", &k(prefix, b"paused"));
    paused.arg(q);
    vec![cmd("LLEN", &list), lindex, paused]
}

/// Reads [`plan`]'s replies (pure).
pub fn read(prefix: &str, unit: &Unit, r: &[Value], now: f64, limit: usize) -> Stage {
    let at = |i: usize| r.get(i).unwrap_or(&Value::Nil);
    let Unit::Queue(q) = unit else {
        let mut s = shared_sample(KIND);
        kept_elsewhere(&mut s, QUEUE_STATES);
        set_state(&mut s, JobState::Delayed, count(at(0)));
        set_state(&mut s, JobState::Retry, count(at(1)));
        set_state(&mut s, JobState::Failed, count(at(2)));
        s.set_jobs(JobTotals {
            processed: count(at(3)),
            failed: count(at(4)),
        });
        facts(&mut s).overdue = sum(&[at(6), at(7)]);
        let mut follow = Vec::new();
        // All of `processes`, read within the limit: more processes than
        // that, and the busy threads of those not checked would be missing
        // from a sum presented as whole, so it is unknown instead.
        let processes = reply::as_array(at(5)).filter(|members| members.len() <= limit);
        if let Some(processes) = processes {
            // Busy threads of live processes; dead processes (heartbeat
            // hash expired while still in `processes`) lost their jobs.
            set_state(&mut s, JobState::Active, Some(0));
            facts(&mut s).stalled = Some(0);
            for p in processes.iter().filter_map(reply::as_bytes) {
                let identity = k(prefix, p);
                follow.push((cmd("EXISTS", &identity), Follow::StalledIfMissing));
                let mut busy = cmd("HGET", &identity);
                busy.arg("busy");
                follow.push((busy, Follow::AddActive));
            }
        } else {
            // `processes` refused, unreadable, or beyond the limit: who is
            // busy is unknown.
            set_state(&mut s, JobState::Active, None);
        }
        return Stage { sample: s, follow };
    };
    let mut s = preset_sample(KIND, q);
    kept_elsewhere(&mut s, SHARED_STATES);
    set_state(&mut s, JobState::Waiting, count(at(0)));
    facts(&mut s).paused = reply::as_u64(at(2)).map(|n| n == 1);
    s.oldest_age_seconds = match at(1) {
        Value::Nil => Some(0.0),
        v => reply::as_bytes(v).and_then(|job| latency(job, now)),
    };
    Stage::done(s)
}

/// Sidekiq's own `Queue#latency`: `enqueued_at` (or `created_at`); a float
/// is seconds (≤ 7.x), an integer milliseconds (8.x).
pub fn latency(job: &[u8], now: f64) -> Option<f64> {
    let json: serde_json::Value = serde_json::from_slice(job).ok()?;
    let ts = json.get("enqueued_at").or_else(|| json.get("created_at"))?;
    let n = ts.as_number()?;
    let seconds = if n.is_f64() {
        n.as_f64()?
    } else {
        n.as_f64()? / 1e3
    };
    Some((now - seconds).max(0.0))
}

/// Sidekiq's `preset` name.
pub const KIND: PresetKind = PresetKind::named("sidekiq");

/// The options of a `- preset: sidekiq` entry: the one declaration of the
/// words it takes (`Library::options`, and the refusal of any other).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Options {
    /// `prefix:`, none (Sidekiq's keys have no namespace) by default.
    #[serde(default)]
    prefix: Option<String>,
    /// `stalled_check_limit:`: the leases checked per poll, at most.
    #[serde(default)]
    stalled_check_limit: Option<usize>,
}

/// Sidekiq 6–8: queues from the `queues` set (under a redis-namespace
/// `prefix`, as Sidekiq 6 deployments used; none for 7.x/8.x), and the
/// source-wide keys under `(all)`.
pub struct Sidekiq;

impl Library for Sidekiq {
    fn kind(&self) -> PresetKind {
        KIND
    }

    fn title(&self) -> &'static str {
        "Sidekiq"
    }

    fn options(&self) -> &'static [&'static str] {
        options_of::<Options>()
    }

    fn configure(&self, written: &Written) -> Result<Preset, OptionError> {
        let o: Options = written.read()?;
        Ok(Preset {
            stalled_check_limit: stalled_check_limit(o.stalled_check_limit)?,
            ..Preset::new(self.kind(), &prefix_or(o.prefix, self.default_prefix())?)
        })
    }

    fn registry(&self, preset: &Preset) -> Registry {
        Registry::Set(k(&preset.prefix, b"queues"))
    }

    fn fixed_queues(&self, _: &Preset) -> Vec<Unit> {
        vec![Unit::Shared]
    }

    fn fixed_names(&self, _: &Preset) -> Vec<String> {
        vec![ALL_QUEUES.to_string()]
    }

    /// Bare names, and the shared keys beside them.
    fn registry_units(&self, _: &Preset, members: Vec<Vec<u8>>) -> Vec<Unit> {
        let mut units: Vec<Unit> = members.into_iter().map(Unit::Queue).collect();
        units.push(Unit::Shared);
        sorted(units)
    }

    fn plan(&self, preset: &Preset, unit: &Unit, now: f64) -> Vec<redis::Cmd> {
        plan(&preset.prefix, unit, now, preset.stalled_check_limit)
    }

    fn read(&self, preset: &Preset, unit: &Unit, r: &[Value], now: f64) -> Stage {
        read(&preset.prefix, unit, r, now, preset.stalled_check_limit)
    }

    /// An unread `queues`: its queue lists and global zsets; an unread
    /// `<ns>:queues`: any key under `<ns>:`.
    fn withheld(&self, mark: &[u8], keys: &Keys) -> Vec<Vec<u8>> {
        match registry_prefix(mark) {
            Some(b"") => {
                let mut owned: Vec<Vec<u8>> = under(keys, b"queue:").cloned().collect();
                for n in GLOBAL_ZSETS {
                    owned.extend(keys.get_key_value(n).map(|(k, _)| k.clone()));
                }
                owned
            }
            Some(p) => under(keys, &key(&[p, b":"])).cloned().collect(),
            None => Vec::new(),
        }
    }

    fn hidden(&self, mark: &[u8]) -> Option<Hidden> {
        registry_prefix(mark).map(|_| Hidden::Any)
    }

    fn recognition(&self) -> Option<&dyn Recognise> {
        Some(self)
    }
}

impl Recognise for Sidekiq {
    fn fixed_marks(&self) -> &'static [&'static [u8]] {
        &[b"queues"]
    }

    /// The set `queues` (7.x/8.x keep bare keys) or `<ns>:queues` (a 6.x
    /// redis-namespace); and Sidekiq's own keys beside a bare `queues`
    /// ([`SIGNS`]), whose type is asked.
    fn mark_read(&self, key: &[u8]) -> Option<MarkRead> {
        if let Some((name, _)) = SIGNS.iter().find(|(n, _)| *n == key) {
            return Some(MarkRead::Sign(cmd("TYPE", name)));
        }
        registry_prefix(key).map(|_| MarkRead::Set)
    }

    /// A registry no other library told: its queue lists, and a
    /// namespace's `schedule`/`retry`/`dead` zsets, are what say Sidekiq.
    fn evidence(&self, seen: &Seen, _: &[Vec<u8>], told: &mut BTreeSet<Vec<u8>>) -> Vec<Vec<u8>> {
        let mut wanted = Vec::new();
        for (set, members) in seen.sets() {
            let Some(prefix) = registry_prefix(set) else {
                continue;
            };
            if prefix.is_empty() {
                // Sidekiq's bare `queues`: a `queue:<member>` list says it.
                wanted.extend(members.iter().map(|m| key(&[&b"queue:"[..], m])));
                continue;
            }
            if told.contains(set) {
                continue;
            }
            wanted.extend(members.iter().map(|m| key(&[prefix, b":queue:", m])));
            for n in GLOBAL_ZSETS {
                wanted.push(key(&[prefix, b":", n]));
            }
        }
        wanted
    }

    /// Told by other keys than its registry's members: after the
    /// libraries whose registries their members or prefix tell.
    fn claim_rank(&self) -> u8 {
        1
    }

    /// A bare `queues` is Sidekiq's only beside a `queue:<member>` list or
    /// one of Sidekiq's [`SIGNS`] (a set an app calls `queues` would
    /// otherwise make its members Sidekiq queues, and its own `schedule`,
    /// `retry` or `dead` zsets Sidekiq's); a `<ns>:queues` beside a list
    /// `<ns>:queue:<m>` for some member or a `<ns>:schedule`/`retry`/`dead`
    /// zset.
    fn recognise(
        &self,
        seen: &Seen,
        keys: &Keys,
        claimed: &mut BTreeSet<Vec<u8>>,
    ) -> Vec<(Preset, Vec<Unit>)> {
        let signs = SIGNS
            .iter()
            .any(|(name, want)| seen.reply(name).and_then(reply::as_str) == Some(*want));
        let mut out = Vec::new();
        for (set, members) in seen.sets() {
            let Some(prefix) = registry_prefix(set) else {
                continue;
            };
            let Ok(text) = std::str::from_utf8(prefix) else {
                continue;
            };
            if claimed.contains(set) || members.is_empty() || members.iter().any(Vec::is_empty) {
                continue;
            }
            let queue_list = members.iter().any(|m| {
                type_at(keys, &k(text, &key(&[&b"queue:"[..], m]))) == Some(KeyType::List)
            });
            let global_zset = GLOBAL_ZSETS
                .iter()
                .any(|n| type_at(keys, &k(text, n)) == Some(KeyType::Zset));
            let evidence = match prefix.is_empty() {
                true => queue_list || signs,
                false => queue_list || global_zset,
            };
            if evidence {
                claimed.insert(set.clone());
                let preset = Preset::new(KIND, text);
                let units = self.registry_units(&preset, members.clone());
                out.push((preset, units));
            }
        }
        out
    }
}

/// Sidekiq's keys at the bare names beside its `queues` registry, with the
/// type Sidekiq gives them: the live processes' set, the processed total.
const SIGNS: [(&[u8], &str); 2] = [(b"processes", "set"), (b"stat:processed", "string")];

/// Sidekiq's source-wide zsets.
const GLOBAL_ZSETS: [&[u8]; 3] = [b"schedule", b"retry", b"dead"];

#[cfg(test)]
mod tests {
    use super::super::super::test_util::*;
    use super::*;

    #[test]
    fn a_queue_reads_depth_and_latency_in_both_units() {
        let job7 = r#"{"class":"J","enqueued_at":1000.5}"#;
        let st = read(
            "",
            &Unit::Queue(b"default".to_vec()),
            &[int(3), bulk(job7), int(0)],
            1010.0,
            10,
        );
        let f = st.sample.preset.as_ref().unwrap();
        assert_eq!(f.states[&JobState::Waiting], Some(3));
        assert_eq!(f.paused, Some(false));
        assert_eq!(st.sample.oldest_age_seconds, Some(9.5));
        let job8 = r#"{"class":"J","enqueued_at":1000500}"#;
        let st = read(
            "",
            &Unit::Queue(b"default".to_vec()),
            &[int(3), bulk(job8), int(0)],
            1010.0,
            10,
        );
        assert_eq!(st.sample.oldest_age_seconds, Some(9.5));
        let created = r#"{"class":"J","created_at":1001.0}"#;
        assert_eq!(latency(created.as_bytes(), 1011.0), Some(10.0));
        assert_eq!(latency(b"not json", 1.0), None);
    }

    #[test]
    fn a_paused_queue_keeps_its_jobs_waiting() {
        let st = read(
            "",
            &Unit::Queue(b"q".to_vec()),
            &[int(4), Value::Nil, int(1)],
            1.0,
            10,
        );
        let f = st.sample.preset.unwrap();
        assert_eq!(f.states[&JobState::Waiting], Some(4));
        assert_eq!(f.states.len(), 1);
        assert_eq!(f.paused, Some(true));
        // Per-queue samples have no time-ordered set of their own.
        assert_eq!(f.overdue, None);
    }

    #[test]
    fn all_with_processes_refused_has_active_unknown_and_is_shared() {
        let r = [
            int(1),
            int(2),
            int(3),
            bulk("10"),
            bulk("1"),
            refused(),
            int(0),
            int(0),
        ];
        let st = read("", &Unit::Shared, &r, 0.0, 2);
        let f = st.sample.preset.as_ref().unwrap();
        assert_eq!(f.states[&JobState::Active], None);
        assert_eq!(f.stalled, None);
        assert!(st.follow.is_empty());
        assert_eq!(f.unit, crate::snapshot::PresetUnit::Shared);
        // A per-queue sample is a queue, whatever was read.
        let q = read(
            "",
            &Unit::Queue(b"q".to_vec()),
            &[refused(), refused(), int(0)],
            1.0,
            10,
        );
        let f = q.sample.preset.as_ref().unwrap();
        assert_eq!(f.unit, crate::snapshot::PresetUnit::Queue);
        assert_eq!(f.states[&JobState::Waiting], None);
        assert_eq!(q.sample.oldest_age_seconds, None);
    }

    #[test]
    fn all_reads_global_sets_totals_and_checks_each_process() {
        let r = [
            int(1),
            int(2),
            int(3),
            bulk("10"),
            Value::Nil,
            list(&["h:1:a", "h:2:b", "h:3:c"]),
            int(1),
            int(1),
        ];
        let st = read("ns", &Unit::Shared, &r, 0.0, 3);
        let f = st.sample.preset.as_ref().unwrap();
        assert_eq!(f.states[&JobState::Delayed], Some(1));
        assert_eq!(f.states[&JobState::Retry], Some(2));
        assert_eq!(f.states[&JobState::Failed], Some(3));
        assert_eq!(f.states[&JobState::Active], Some(0));
        assert_eq!(f.stalled, Some(0));
        assert_eq!(f.overdue, Some(2));
        assert_eq!(st.sample.jobs().processed, Some(10));
        assert_eq!(st.sample.jobs().failed, Some(0));
        // Each of the three processes checked, two commands each.
        assert_eq!(st.follow.len(), 6);
        let all = plan("ns", &Unit::Shared, 1000.25, 3);
        assert_eq!(all.len(), 8);
        assert_eq!(
            all[5].get_packed_command(),
            redis::cmd("SRANDMEMBER")
                .arg("ns:processes")
                .arg(4)
                .get_packed_command()
        );
        assert_eq!(
            all[6].get_packed_command(),
            redis::cmd("ZCOUNT")
                .arg("ns:schedule")
                .arg("-inf")
                .arg("1000.25")
                .get_packed_command()
        );
        assert_eq!(plan("", &Unit::Queue(b"q".to_vec()), 0.0, 3).len(), 3);
    }

    /// More processes than `stalled_check_limit` (the reply of limit + 1
    /// members says so): the busy threads of those not checked would be
    /// missing from the sum, so `active` and `stalled` are unknown, never a
    /// part presented as the whole; nothing is checked.
    #[test]
    fn more_processes_than_the_limit_leave_active_and_stalled_unknown() {
        let r = [
            int(0),
            int(0),
            int(0),
            Value::Nil,
            Value::Nil,
            list(&["h:1:a", "h:2:b", "h:3:c"]),
            int(0),
            int(0),
        ];
        let st = read("", &Unit::Shared, &r, 0.0, 2);
        let f = st.sample.preset.as_ref().unwrap();
        assert_eq!(f.states[&JobState::Active], None);
        assert_eq!(f.stalled, None);
        assert!(st.follow.is_empty());
    }

    /// The states each unit reads are exactly those it says it holds, and
    /// each names the other's as kept elsewhere: what the scaler refuses
    /// (a queue's `retry`) comes from what the reads do, not from a list
    /// that could drift.
    #[test]
    fn each_unit_holds_its_states_and_names_the_others_as_elsewhere() {
        let all = [
            int(1),
            int(2),
            int(3),
            Value::Nil,
            Value::Nil,
            list(&[]),
            int(0),
            int(0),
        ];
        let shared = read("", &Unit::Shared, &all, 0.0, 2).sample.preset.unwrap();
        let queue = read(
            "",
            &Unit::Queue(b"q".to_vec()),
            &[int(1), Value::Nil, int(0)],
            0.0,
            2,
        )
        .sample
        .preset
        .unwrap();
        let held = |f: &crate::snapshot::PresetFacts| f.states.keys().copied().collect::<Vec<_>>();
        assert_eq!(held(&shared), SHARED_STATES);
        assert_eq!(held(&queue), QUEUE_STATES);
        assert_eq!(shared.elsewhere, QUEUE_STATES);
        assert_eq!(queue.elsewhere, SHARED_STATES);
        assert_eq!(
            queue.held_elsewhere(&[JobState::Waiting, JobState::Retry]),
            [JobState::Retry]
        );
        assert_eq!(
            shared.held_elsewhere(&[JobState::Waiting, JobState::Retry]),
            [JobState::Waiting]
        );
    }
}
