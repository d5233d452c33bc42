//! Keys measured by their size alone: hashes (`HLEN`), sets (`SCARD`), and
//! zsets whose scores are not times (`ZCARD`, all of it ready).
//!
//! Separate from the other key types because one count is all these give:
//! no peek, no time split, no groups, and what is kept while unchanged is
//! that count.

use redis::Value;

use super::{Plan, identity};
use crate::config::KeyType;
use crate::snapshot::{QueueSample, QueueType};
use crate::sources::redis::cmd::cmd;
use crate::sources::redis::reply;
use crate::sources::redis::tracked::{TrackedKey, Unchanged};

/// The one command that measures a key of type `t` (a hash, a set, or a
/// zset whose scores are not times).
pub(super) fn plan(t: &KeyType, k: &[u8]) -> redis::Cmd {
    match t {
        KeyType::Zset => cmd("ZCARD", k),
        KeyType::Hash => cmd("HLEN", k),
        _ => cmd("SCARD", k),
    }
}

/// The sample of a key measured by its size (from its reply, or from what
/// was kept while it is unchanged), and what may be kept.
pub(super) fn read(
    key: &TrackedKey,
    t: &KeyType,
    plan: &Plan,
    r: &[Value],
) -> (QueueSample, Option<Unchanged>) {
    let (queue_type, ready) = match t {
        KeyType::Zset => (QueueType::Zset, true),
        KeyType::Hash => (QueueType::Hash, false),
        _ => (QueueType::Set, false),
    };
    let mut s = identity(key, Some(queue_type));
    s.depth = match plan.unchanged {
        Some(Unchanged::Size(n)) => Some(n),
        _ => r.first().and_then(reply::as_u64),
    };
    if ready {
        s.ready = s.depth;
    }
    let found = s.depth.map(Unchanged::Size);
    (s, found)
}
