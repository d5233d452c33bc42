//! Which polled keys changed since their last read, from Redis itself
//! (server-assisted client-side caching, `CLIENT TRACKING`, Redis 6+).
//!
//! A poll reads its keys over a RESP3 connection with tracking on. Redis
//! remembers every key a read on it touched; when such a key is written,
//! deleted, expires or is evicted (or the database is flushed) it pushes one
//! `invalidate` message naming it, and forgets it until the next read. A
//! key no message has named since its last read still holds what that read
//! found, so the poll serves it from there (`TrackedKey::unchanged`) and
//! sends nothing for it: an idle queue costs Redis nothing per poll, and a
//! busy one costs what it did before. Only what time alone cannot change is
//! kept (see [`Unchanged`](super::tracked::Unchanged)); ages are computed
//! from the kept timestamps at each poll.
//!
//! Why nothing is missed:
//! - pushes travel on the same connection as replies, in order, and the
//!   client hands each one to our channel before any later reply is
//!   delivered. A poll first makes one round trip (`PING`), then drains the
//!   channel: every change Redis applied before that `PING` is in hand;
//! - the connection never reconnects by itself (a reconnected one would not
//!   be tracked). When it breaks, the session ends and everything kept is
//!   forgotten; the next session starts with every key read again;
//! - when Redis's tracking table is full it evicts keys from it, and sends
//!   their invalidation, so the cost is a re-read, never a stale value.
//!
//! A server that refuses tracking (older than 6, a proxy, an ACL without
//! `+@connection`) is polled the old way, on the shared connection, and is
//! asked again after [`RETRY_REFUSED`]. `client_tracking: false` turns it off.
//!
//! Where nearly every key changes between polls, tracking spares no read
//! and costs the exporter a push to parse per change (about 50 % more CPU
//! per poll at 4,000 keys all written each second), and Redis a tracking
//! table entry per read (in `scripts/bench` scenario 10, every queue fed and
//! drained each second: 4.3 µs per `ZRANGE` tracked against 1.3 µs
//! untracked, 15.2 against 8.6 ms of Redis time per poll). So when the polls
//! of a window of [`NOT_WORTH_POLLS`] served fewer than [`WORTH_SHARE`] of
//! their keys unchanged, all told, the session ends and polls go untracked
//! for [`PAUSE_NOT_WORTH`], then try again. All told, not poll by poll:
//! writers that work in bursts leave a poll now and then that finds nothing
//! changed, which must not keep tracking on.
//!
//! Cost on the server: one entry per tracked key in its tracking table
//! (the key name and a small radix-tree node), and one push per change.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, PushInfo, PushKind, Value};
use tokio::sync::mpsc::{UnboundedReceiver, error::TryRecvError};

use super::commands::Conn;
use super::reply;

/// How long polls go without tracking after the server refused it.
pub const RETRY_REFUSED: Duration = Duration::from_secs(60);

/// The share of keys a poll must serve unchanged for tracking to pay.
pub const WORTH_SHARE: f64 = 0.1;

/// Polls over which the share of keys served unchanged is judged.
pub const NOT_WORTH_POLLS: u32 = 30;

/// How long tracking pauses when it does not pay.
pub const PAUSE_NOT_WORTH: Duration = Duration::from_secs(600);

/// Which kept keys may have changed since the last poll.
#[derive(Debug, PartialEq)]
pub enum Changes {
    /// Anything may have: a new session, or the database was flushed.
    All,
    /// These keys were invalidated; every other kept key is unchanged.
    Keys(HashSet<Vec<u8>>),
}

impl Changes {
    /// Whether what was kept for `key` may be stale.
    pub fn touches(&self, key: &[u8]) -> bool {
        match self {
            Changes::All => true,
            Changes::Keys(keys) => keys.contains(key),
        }
    }
}

/// A source's tracking: the client it connects with, and its session.
pub struct ChangeTracking {
    /// Speaks RESP3 (pushes need it); the source's timeouts and TLS.
    client: redis::Client,
    /// The source's timeouts, for the tracked connection.
    config: AsyncConnectionConfig,
    /// The live session.
    session: Option<Session>,
    /// Until when the server's refusal (or a pause) stands: polls go untracked.
    refused_until: Option<Instant>,
    /// The tracked polls judged so far in this window, the keys they
    /// served unchanged and the keys they had (see [`NOT_WORTH_POLLS`]).
    window: (u32, u64, u64),
}

/// One tracked connection and the invalidations it received.
struct Session {
    /// The connection with `CLIENT TRACKING on`.
    conn: MultiplexedConnection,
    /// Its push messages, in the order Redis sent them.
    pushes: UnboundedReceiver<PushInfo>,
}

/// A poll's connection and what changed since the last poll.
pub struct Tracked {
    /// The tracked connection (every read on it is remembered by Redis).
    pub conn: Conn,
    /// What changed.
    pub changes: Changes,
}

impl ChangeTracking {
    /// Tracking over connections of `client` (which must speak RESP3),
    /// made with `config` (timeouts).
    pub fn new(client: redis::Client, config: AsyncConnectionConfig) -> Self {
        ChangeTracking {
            client,
            config,
            session: None,
            refused_until: None,
            window: (0, 0, 0),
        }
    }

    /// Records what a tracked poll spared: `unchanged` of `keys` keys were
    /// served without a read. Pauses tracking when it keeps not paying.
    pub fn record(&mut self, unchanged: u64, keys: usize) {
        let (polls, spared, all) = &mut self.window;
        *polls += 1;
        *spared += unchanged;
        *all += keys as u64;
        if *polls < NOT_WORTH_POLLS {
            return;
        }
        let worth = *spared as f64 >= *all as f64 * WORTH_SHARE;
        self.window = (0, 0, 0);
        if worth {
            return;
        }
        tracing::info!(
            polls = NOT_WORTH_POLLS,
            pause = ?PAUSE_NOT_WORTH,
            "nearly every Redis key changed between polls: reading them all without \
             CLIENT TRACKING for a while"
        );
        self.session = None;
        self.refused_until = Some(Instant::now() + PAUSE_NOT_WORTH);
    }

    /// Ends the session: after a failed poll (its replies and pushes may be
    /// lost), or when the server it tracks is no longer the one polled.
    pub fn end(&mut self) {
        self.session = None;
    }

    /// The connection for this poll and what changed since the last one:
    /// checks the live session with a round trip, or starts a new one.
    /// `Ok(None)`: the server refuses tracking; poll without it.
    pub async fn begin_poll(&mut self) -> redis::RedisResult<Option<Tracked>> {
        if self.refused_until.is_some_and(|t| Instant::now() < t) {
            return Ok(None);
        }
        if let Some(session) = &mut self.session {
            let ping: redis::RedisResult<()> = redis::cmd("PING")
                .query_async(&mut session.conn.clone())
                .await;
            match ping {
                Ok(()) => {
                    if let Some(changes) = session.drain() {
                        return Ok(Some(Tracked {
                            conn: Conn::Tracking(session.conn.clone()),
                            changes,
                        }));
                    }
                    tracing::debug!("tracked Redis connection closed; starting a new session");
                }
                Err(e) => {
                    tracing::debug!(error = %e, "tracked Redis connection broke; starting a new session");
                }
            }
            self.session = None;
        }
        let (tx, pushes) = tokio::sync::mpsc::unbounded_channel();
        let started = async {
            let config = self.config.clone().set_push_sender(tx);
            let mut conn = self
                .client
                .get_multiplexed_async_connection_with_config(&config)
                .await?;
            redis::cmd("CLIENT")
                .arg("TRACKING")
                .arg("ON")
                .query_async::<()>(&mut conn)
                .await?;
            Ok::<_, redis::RedisError>(conn)
        }
        .await;
        match started {
            Ok(conn) => {
                self.refused_until = None;
                self.session = Some(Session {
                    conn: conn.clone(),
                    pushes,
                });
                Ok(Some(Tracked {
                    conn: Conn::Tracking(conn),
                    changes: Changes::All,
                }))
            }
            Err(e) if is_refusal(&e) => {
                tracing::warn!(
                    error = %e,
                    retry_in = ?RETRY_REFUSED,
                    "Redis refused CLIENT TRACKING over RESP3; reading every key on every poll \
                     (set client_tracking: false to stop asking)"
                );
                self.refused_until = Some(Instant::now() + RETRY_REFUSED);
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}

/// Whether the server answered, but said no (unknown command, no
/// permission, RESP3 not spoken): as opposed to not answering at all, or
/// refusing our credentials, which fail the poll as on the shared connection.
fn is_refusal(e: &redis::RedisError) -> bool {
    let answered = !(e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal());
    let auth = e.code().is_some_and(super::is_auth_error_code) && e.code() != Some("NOPERM");
    answered && !auth && e.kind() != redis::ErrorKind::AuthenticationFailed
}

impl Session {
    /// Every push received so far as [`Changes`]; `None` once the
    /// connection has closed (what happened after that is unknown).
    fn drain(&mut self) -> Option<Changes> {
        let mut keys = HashSet::new();
        let mut all = false;
        loop {
            match self.pushes.try_recv() {
                Ok(push) => match push.kind {
                    PushKind::Invalidate => match push.data.first() {
                        Some(Value::Array(named)) => keys
                            .extend(named.iter().filter_map(reply::as_bytes).map(<[u8]>::to_vec)),
                        // A null: FLUSHALL or FLUSHDB.
                        _ => all = true,
                    },
                    PushKind::Disconnection => return None,
                    _ => {}
                },
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => return None,
            }
        }
        Some(if all {
            Changes::All
        } else {
            Changes::Keys(keys)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_named_keys_are_touched_unless_everything_may_have_changed() {
        let changes = Changes::Keys(HashSet::from([b"a".to_vec()]));
        assert!(changes.touches(b"a"));
        assert!(!changes.touches(b"b"));
        assert!(Changes::All.touches(b"b"));
    }

    #[test]
    fn a_refusal_is_an_answer_and_a_broken_connection_is_not() {
        let parse = |line: &str| {
            redis::parse_redis_value(format!("-{line}\r\n").as_bytes())
                .unwrap()
                .extract_error()
                .unwrap_err()
        };
        assert!(is_refusal(&parse("ERR unknown command 'HELLO'")));
        assert!(is_refusal(&parse(
            "NOPERM User qe has no permissions to run the 'client|tracking' command"
        )));
        assert!(!is_refusal(&parse(
            "WRONGPASS invalid username-password pair"
        )));
        let io = redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
        assert!(!is_refusal(&io));
    }
}
