//! Which keys a recognised library's entry consumes, so that none is also
//! reported as a plain key: the keys its plan reads with the type the
//! library gives them, and the library's other keys of the same queues
//! (layouts: ../shared/reference/queue-layouts.md). Used by a scan's
//! recognition, by a library round for the plain keys a new queue owns,
//! and for the keys of a queue removed while a round ran.

use std::collections::{BTreeMap, BTreeSet};

use super::super::cluster::key_of;
use super::super::discovery::Candidate;
use super::super::tracked::KeyState;
use super::{Unit, key, plan};
use crate::config::{KeyType, Preset, PresetSpec};

/// The type discovery found for `k`, if it found the key.
pub(super) fn type_at(keys: &BTreeMap<Vec<u8>, Candidate>, k: &[u8]) -> Option<KeyType> {
    match keys.get(k).map(|c| &c.state) {
        Some(KeyState::Typed(t)) => Some(*t),
        _ => None,
    }
}

/// Keys found that start with `prefix`.
pub(super) fn under<'a>(
    keys: &'a BTreeMap<Vec<u8>, Candidate>,
    prefix: &'a [u8],
) -> impl Iterator<Item = &'a Vec<u8>> + 'a {
    keys.range(prefix.to_vec()..)
        .map(|(k, _)| k)
        .take_while(move |k| k.starts_with(prefix))
}

/// The key type a read-only command of a preset's plan expects, for the
/// types a plain key can have; `None` for the others (`GET`, `EXISTS`,
/// hash and set reads).
fn expected_type(c: &redis::Cmd) -> Option<KeyType> {
    let name = match c.args_iter().next()? {
        redis::Arg::Simple(n) => n,
        _ => return None,
    };
    match name {
        b"LLEN" | b"LINDEX" | b"LRANGE" => Some(KeyType::List),
        b"ZCARD" | b"ZCOUNT" | b"ZRANGE" => Some(KeyType::Zset),
        b"XLEN" | b"XINFO" => Some(KeyType::Stream),
        _ => None,
    }
}

/// A library's keys beyond those its entry reads.
enum Owned {
    /// This key.
    Key(Vec<u8>),
    /// Every key starting with this.
    Under(Vec<u8>),
}

/// The keys of `preset`'s `units` that the entry does not read but that
/// are the library's all the same (layouts: ../shared/reference/queue-layouts.md).
fn owned(preset: &Preset, units: &[Unit]) -> Vec<Owned> {
    let names = units.iter().filter_map(|u| match u {
        Unit::Queue(q) => Some(q.as_slice()),
        Unit::Shared => None,
    });
    match preset {
        // `<prefix>:<q>:` holds every key of the queue: events, marker,
        // pc, stalled, job hashes and their logs.
        // Bull's too (its `priority` zset, `stalled-check`, job hashes).
        Preset::Bullmq { prefix, .. } | Preset::Bull { prefix, .. } => names
            .map(|q| Owned::Under(key(&[prefix.as_bytes(), b":", q, b":"])))
            .collect(),
        Preset::Rq { prefix } => {
            let p = prefix.as_bytes();
            let mut v: Vec<Owned> = [&b"results:"[..], b"executions:", b"execution:", b"rl:"]
                .iter()
                .map(|n| Owned::Under(key(&[p, b":", n])))
                .collect();
            for q in names {
                v.push(Owned::Under(key(&[p, b":queue:", q, b":"])));
                v.push(Owned::Key(key(&[p, b":ready:", q])));
                v.push(Owned::Key(key(&[p, b":canceled:", q])));
            }
            v
        }
        Preset::Asynq { prefix } => {
            let p = prefix.as_bytes();
            let mut v: Vec<Owned> = [&b"servers"[..], b"workers", b"schedulers"]
                .iter()
                .map(|n| Owned::Key(key(&[p, b":", n])))
                .collect();
            v.extend(names.map(|q| Owned::Under(key(&[p, b":{", q, b"}:"]))));
            v
        }
        Preset::Celery { prefix, .. } => vec![Owned::Key(key(&[
            prefix.as_bytes(),
            b"_kombu.binding_deadlines",
        ]))],
        Preset::Sidekiq { .. } | Preset::Rediswq { .. } | Preset::PriorityZset { .. } => Vec::new(),
    }
}

/// The keys the entries consume: what their plans read with the type the
/// library gives it, and the library's other keys ([`owned`]); a read key
/// of another type is a lookalike and stays plain.
pub(super) fn consumed(
    entries: &[(PresetSpec, Vec<Unit>)],
    keys: &BTreeMap<Vec<u8>, Candidate>,
) -> BTreeSet<Vec<u8>> {
    let mut taken = BTreeSet::new();
    let mut lookalikes = BTreeSet::new();
    for (spec, units) in entries {
        for unit in units {
            for c in plan(&spec.preset, unit, 0.0) {
                let (Some(k), Some(want)) = (key_of(&c), expected_type(&c)) else {
                    continue;
                };
                match type_at(keys, k) {
                    Some(t) if t == want => taken.insert(k.to_vec()),
                    Some(_) => lookalikes.insert(k.to_vec()),
                    None => false,
                };
            }
        }
        for o in owned(&spec.preset, units) {
            match o {
                Owned::Key(k) if keys.contains_key(&k) => {
                    taken.insert(k);
                }
                Owned::Key(_) => {}
                Owned::Under(p) => taken.extend(under(keys, &p).cloned()),
            }
        }
    }
    taken.retain(|k| !lookalikes.contains(k));
    taken
}
