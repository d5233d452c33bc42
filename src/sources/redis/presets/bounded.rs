//! The bounds of discovery's reads of library marks (docs/presets.md,
//! "What is bounded"): a round reads at most `max_keys` marks, and a set
//! (a registry, a kombu binding table) is read by `SSCAN` with a bounded
//! `COUNT`, and only when `SCARD` says it holds no more members than the
//! cap (`max_keys`); a larger one is not read at all, its size counted.
//! What is not read is a [`Bound`]: counted, logged and left unknown.

use std::collections::BTreeSet;

use redis::Value;

use super::super::cmd::cmd;
use super::super::commands::{Conn, pipelined};
use super::reply;

/// Why a library's mark was not read: a bound of discovery's work. The
/// keys it may own are held back and the names it may hide are unknown,
/// as for a mark Redis refused; it is counted as a dropped key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// Beyond the `max_keys` marks one round reads (the value).
    MaxKeys(usize),
    /// A set of `members` members, more than the `cap` a set is read to.
    Members {
        /// The set's size (`SCARD`, or what `SSCAN` had returned when it
        /// passed the cap).
        members: u64,
        /// The most members a set is read to (`max_keys`).
        cap: usize,
    },
}

impl std::fmt::Display for Bound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Bound::MaxKeys(n) => write!(f, "beyond max_keys {n}"),
            Bound::Members { members, cap } => {
                write!(f, "{members} members, over the cap of {cap}")
            }
        }
    }
}

/// What a bounded read of one set found.
#[derive(Debug, Clone, PartialEq)]
pub enum SetRead {
    /// Its members (none: no such key), each once.
    Members(Vec<Vec<u8>>),
    /// More members than the cap: not read.
    Over(Bound),
    /// The reply of a read that found no set: an error (a refusal, or
    /// `WRONGTYPE` for a key of another type).
    Reply(Value),
}

/// Reads `sets`, each whole if it holds at most `cap` members: one
/// pipeline of `SCARD` and the first `SSCAN … COUNT count` page of each,
/// then one pipeline per further page of the sets not done. A set over the
/// cap gets no further page ([`SetRead::Over`]); so a round reads at most
/// about `cap + count` members of one set, however large it is.
pub async fn read_sets(
    conn: &Conn,
    sets: &[Vec<u8>],
    count: u32,
    cap: usize,
) -> redis::RedisResult<Vec<SetRead>> {
    if sets.is_empty() {
        return Ok(Vec::new());
    }
    let mut cmds = Vec::with_capacity(sets.len() * 2);
    for s in sets {
        cmds.push(cmd("SCARD", s));
        cmds.push(sscan(s, b"0", count));
    }
    let replies = pipelined(conn, cmds).await?;
    let mut out: Vec<Option<SetRead>> = vec![None; sets.len()];
    // (index, cursor, members so far) of the sets with pages left.
    let mut pending: Vec<(usize, Vec<u8>, BTreeSet<Vec<u8>>)> = Vec::new();
    for (i, pair) in replies.chunks(2).enumerate() {
        let [card, page] = pair else {
            out[i] = Some(SetRead::Reply(Value::Nil));
            continue;
        };
        let Some(n) = reply::as_u64(card) else {
            out[i] = Some(SetRead::Reply(card.clone()));
            continue;
        };
        if n > cap as u64 {
            out[i] = Some(SetRead::Over(Bound::Members { members: n, cap }));
            continue;
        }
        let mut members = BTreeSet::new();
        match next_page(page, &mut members, cap) {
            Page::Done => out[i] = Some(SetRead::Members(members.into_iter().collect())),
            Page::More(cursor) => pending.push((i, cursor, members)),
            Page::Ended(read) => out[i] = Some(read),
        }
    }
    while !pending.is_empty() {
        let cmds = pending
            .iter()
            .map(|(i, cursor, _)| sscan(&sets[*i], cursor, count))
            .collect();
        let replies = pipelined(conn, cmds).await?;
        let mut still = Vec::new();
        for ((i, _, mut members), page) in pending.into_iter().zip(&replies) {
            match next_page(page, &mut members, cap) {
                Page::Done => out[i] = Some(SetRead::Members(members.into_iter().collect())),
                Page::More(cursor) => still.push((i, cursor, members)),
                Page::Ended(read) => out[i] = Some(read),
            }
        }
        pending = still;
    }
    Ok(out
        .into_iter()
        .map(|r| r.unwrap_or(SetRead::Reply(Value::Nil)))
        .collect())
}

/// `SSCAN key cursor COUNT count`.
fn sscan(key: &[u8], cursor: &[u8], count: u32) -> redis::Cmd {
    let mut c = cmd("SSCAN", key);
    c.arg(cursor).arg("COUNT").arg(count);
    c
}

/// What one `SSCAN` page says of its set.
enum Page {
    /// The last page: the members are all read.
    Done,
    /// More pages, from this cursor.
    More(Vec<u8>),
    /// The read ends here: refused, or past the cap.
    Ended(SetRead),
}

/// Adds an `SSCAN` reply's members to `members` (pure).
fn next_page(page: &Value, members: &mut BTreeSet<Vec<u8>>, cap: usize) -> Page {
    let parts = reply::as_array(page);
    let (Some([cursor, items]), true) = (parts, page_shaped(page)) else {
        return Page::Ended(SetRead::Reply(page.clone()));
    };
    if let Some(items) = reply::as_array(items) {
        members.extend(items.iter().filter_map(reply::as_bytes).map(<[u8]>::to_vec));
    }
    if members.len() > cap {
        let members = members.len() as u64;
        return Page::Ended(SetRead::Over(Bound::Members { members, cap }));
    }
    match reply::as_bytes(cursor) {
        Some(b"0") | None => Page::Done,
        Some(c) => Page::More(c.to_vec()),
    }
}

/// Whether `v` is a two-item array (`SSCAN`'s cursor and members).
fn page_shaped(v: &Value) -> bool {
    reply::as_array(v).is_some_and(|a| a.len() == 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(cursor: &str, items: &[&str]) -> Value {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        Value::Array(vec![
            bulk(cursor),
            Value::Array(items.iter().map(|s| bulk(s)).collect()),
        ])
    }

    #[test]
    fn pages_add_members_once_until_the_cursor_is_zero_or_the_cap_is_passed() {
        let mut m = BTreeSet::new();
        assert!(
            matches!(next_page(&page("17", &["a", "b"]), &mut m, 3), Page::More(c) if c == b"17")
        );
        assert!(matches!(
            next_page(&page("0", &["b", "c"]), &mut m, 3),
            Page::Done
        ));
        assert_eq!(m.len(), 3);
        let over = next_page(&page("9", &["d"]), &mut m, 3);
        let Page::Ended(SetRead::Over(b)) = over else {
            panic!("not over")
        };
        assert_eq!(b, Bound::Members { members: 4, cap: 3 });
        assert_eq!(b.to_string(), "4 members, over the cap of 3");
        let refused = redis::parse_redis_value(b"-NOPERM no\r\n").unwrap();
        assert!(matches!(
            next_page(&refused, &mut m, 3),
            Page::Ended(SetRead::Reply(Value::ServerError(_)))
        ));
    }
}
