//! Which keys a recognised library's entry consumes, so that none is also
//! reported as a plain key: the keys its plan reads with the type the
//! library gives them, and the library's other keys of the same queues
//! (layouts: ../shared/reference/queue-layouts.md). Used by a scan's
//! recognition, by a library round for the plain keys a new queue owns,
//! and for the keys of a queue removed while a round ran.

use std::collections::{BTreeMap, BTreeSet};

use super::super::cluster::key_of;
use super::super::discovery::Candidate;
use super::library::{Owned, type_at, under};
use super::spec::PresetSpec;
use super::{Unit, plan};
use crate::config::KeyType;

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

/// The keys the entries consume: what their plans read with the type the
/// library gives it, and the library's other keys ([`owned`]); a read key
/// of another type is a lookalike and stays plain.
///
/// [`owned`]: super::library::Library::owned
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
        for o in super::lib(&spec.preset).owned(&spec.preset, units) {
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
