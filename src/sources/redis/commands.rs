//! The Redis commands discovery and polling send, in one place: SCAN, TYPE,
//! single commands and pipelined batches, over a [`Conn`]: one server (also
//! a master found through sentinels) or a Redis Cluster (per-primary SCAN,
//! pipelines split per slot owner, MOVED/ASK followed; see `cluster`).
//! Nothing above this seam knows which.

use std::future::Future;
use std::pin::Pin;

use futures_util::stream::FuturesUnordered;
use futures_util::{StreamExt, TryStreamExt};
use redis::Value;
use redis::aio::{ConnectionLike, ConnectionManager, MultiplexedConnection};

use super::cluster::ClusterConn;
use super::cmd::cmd;
use super::reply;
use super::tracked::KeyState;
use crate::config::KeyType;
use crate::snapshot::Reason;

/// How a source reaches its keys.
#[derive(Clone)]
pub enum Conn {
    /// One server: a standalone Redis, or the master sentinels named.
    Single(ConnectionManager),
    /// The same server over the connection whose reads Redis tracks (see
    /// `tracking`). It never reconnects by itself: a new connection would
    /// not be tracked, so a break ends the tracking session instead.
    Tracking(MultiplexedConnection),
    /// A Redis Cluster.
    Cluster(ClusterConn),
}

impl Conn {
    /// Whether this is a cluster, whose SCAN spans several nodes (so a key
    /// moving between nodes during the scan can be missed; discovery then
    /// re-checks the keys it already tracks).
    pub fn is_cluster(&self) -> bool {
        matches!(self, Conn::Cluster(_))
    }

    /// A new discovery round starts: a cluster re-reads its slot map, so
    /// added or removed primaries are scanned. Nothing for one server.
    pub fn begin_discovery(&self) {
        if let Conn::Cluster(c) = self {
            c.mark_stale();
        }
    }
}

/// Commands per pipelined round trip.
pub const PIPELINE_CHUNK: usize = 1000;
/// Pipelined round trips in flight at once on the multiplexed connection.
pub const PIPELINES_IN_FLIGHT: usize = 4;

/// Sends `cmds` in pipelined chunks (several in flight) and returns one reply
/// per command, in order. Error replies come back as `Value::ServerError`.
pub async fn pipelined(conn: &Conn, cmds: Vec<redis::Cmd>) -> redis::RedisResult<Vec<Value>> {
    match conn {
        Conn::Single(c) => pipelined_single(c, cmds).await,
        Conn::Tracking(c) => pipelined_single(c, cmds).await,
        Conn::Cluster(c) => c.pipelined(cmds, PIPELINE_CHUNK, PIPELINES_IN_FLIGHT).await,
    }
}

/// One command's reply, converted; an error reply is an error.
pub async fn query<T: redis::FromRedisValue>(
    conn: &Conn,
    cmd: redis::Cmd,
) -> redis::RedisResult<T> {
    match conn {
        Conn::Single(c) => cmd.query_async(&mut c.clone()).await,
        Conn::Tracking(c) => cmd.query_async(&mut c.clone()).await,
        Conn::Cluster(c) => {
            let reply = c
                .pipelined(vec![cmd], PIPELINE_CHUNK, PIPELINES_IN_FLIGHT)
                .await?
                .pop()
                .unwrap_or(Value::Nil);
            Ok(T::from_redis_value(reply.extract_error()?)?)
        }
    }
}

/// [`pipelined`] on one server.
async fn pipelined_single<C: ConnectionLike + Clone + Send + Sync>(
    conn: &C,
    cmds: Vec<redis::Cmd>,
) -> redis::RedisResult<Vec<Value>> {
    let mut chunks: Vec<redis::Pipeline> = Vec::new();
    let mut current = redis::Pipeline::with_capacity(PIPELINE_CHUNK);
    for c in cmds {
        if current.len() == PIPELINE_CHUNK {
            chunks.push(std::mem::replace(
                &mut current,
                redis::Pipeline::with_capacity(PIPELINE_CHUNK),
            ));
        }
        current.add_command(c);
    }
    if !current.is_empty() {
        chunks.push(current);
    }
    let replies: Vec<Vec<Value>> = futures_util::stream::iter(chunks)
        .map(|mut p| {
            let mut conn = conn.clone();
            async move { p.ignore_errors().query_async::<Vec<Value>>(&mut conn).await }
        })
        .buffered(PIPELINES_IN_FLIGHT)
        .try_collect()
        .await?;
    Ok(replies.into_iter().flatten().collect())
}

/// Full SCAN over the keyspace with MATCH (and TYPE), COUNT-bounded; in a
/// cluster, over every primary.
pub async fn scan(
    conn: &mut Conn,
    pattern: &[u8],
    key_type: Option<KeyType>,
    count: u32,
) -> redis::RedisResult<Vec<Vec<u8>>> {
    scan_where(conn, pattern, key_type, count, &|_| true).await
}

/// [`scan`], keeping only the keys `keep` accepts as each reply arrives, so
/// a pass that MATCHes much more than it wants (zero config's one pass
/// for the names that may mark a library) never holds the whole keyspace.
pub async fn scan_where(
    conn: &mut Conn,
    pattern: &[u8],
    key_type: Option<KeyType>,
    count: u32,
    keep: &(dyn Fn(&[u8]) -> bool + Sync),
) -> redis::RedisResult<Vec<Vec<u8>>> {
    let pages = ScanPages::new(conn, pattern, key_type, count).await?;
    // A failed page has made a cluster re-read its slot map already.
    let result = pages.kept(keep).await;
    match conn {
        Conn::Single(_) | Conn::Tracking(_) => result,
        Conn::Cluster(_) => {
            // A key in a slot being migrated may be on two nodes for a moment.
            let mut keys = result?;
            keys.sort_unstable();
            keys.dedup();
            Ok(keys)
        }
    }
}

/// Keys the process's SCAN calls have asked Redis to visit (their COUNT
/// hints, so an estimate), for `discover`'s progress on a large keyspace.
pub static SCANNED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// One server's connection, as a [`ScanPages`] walks it.
enum Node {
    Manager(ConnectionManager),
    Multiplexed(MultiplexedConnection),
}

/// A SCAN pass (MATCH, TYPE, bounded COUNT) handed out one reply at a
/// time, so a caller can act on each page before the next is asked for
/// (zero config's full round asks `TYPE` of every name a page holds)
/// without ever holding the keyspace. In a cluster, every primary at once:
/// one SCAN call in flight on each, pages handed out as they come.
pub struct ScanPages {
    /// The next SCAN call of each server still being walked.
    calls: FuturesUnordered<ScanCall>,
    /// What every call asks beside its cursor.
    args: ScanArgs,
    /// The cluster walked, if any: a failed call makes it re-read its slot
    /// map (a node gone, or a failover), whoever walks the pages.
    cluster: Option<ClusterConn>,
}

/// A SCAN call on its server: the server back, with the reply.
type ScanCall = Pin<Box<dyn Future<Output = (Node, redis::RedisResult<ScanReply>)> + Send>>;

/// A SCAN reply: the next cursor (0 once the server is walked) and names.
type ScanReply = (u64, Vec<Vec<u8>>);

/// A pass's SCAN arguments after the cursor.
#[derive(Clone)]
struct ScanArgs {
    pattern: Vec<u8>,
    key_type: Option<KeyType>,
    count: u32,
}

impl ScanArgs {
    /// `SCAN cursor MATCH .. COUNT .. [TYPE ..]` on `node`.
    fn call(&self, mut node: Node, cursor: u64) -> ScanCall {
        let mut cmd = redis::cmd("SCAN");
        cmd.arg(cursor)
            .arg("MATCH")
            .arg(&self.pattern)
            .arg("COUNT")
            .arg(self.count);
        if let Some(t) = self.key_type {
            cmd.arg("TYPE").arg(t.as_str());
        }
        Box::pin(async move {
            let reply = match &mut node {
                Node::Manager(c) => cmd.query_async(c).await,
                Node::Multiplexed(c) => cmd.query_async(c).await,
            };
            (node, reply)
        })
    }
}

impl ScanPages {
    /// A pass over every server of `conn` (each primary of a cluster).
    pub async fn new(
        conn: &Conn,
        pattern: &[u8],
        key_type: Option<KeyType>,
        count: u32,
    ) -> redis::RedisResult<Self> {
        let nodes = match conn {
            Conn::Single(c) => vec![Node::Manager(c.clone())],
            Conn::Tracking(c) => vec![Node::Multiplexed(c.clone())],
            Conn::Cluster(c) => match c.primaries().await {
                Ok(nodes) => nodes.into_iter().map(Node::Manager).collect(),
                Err(e) => {
                    c.mark_stale();
                    return Err(e);
                }
            },
        };
        let args = ScanArgs {
            pattern: pattern.to_vec(),
            key_type,
            count,
        };
        let calls = nodes.into_iter().map(|n| args.call(n, 0)).collect();
        let cluster = match conn {
            Conn::Cluster(c) => Some(c.clone()),
            Conn::Single(_) | Conn::Tracking(_) => None,
        };
        Ok(ScanPages {
            calls,
            args,
            cluster,
        })
    }

    /// The next SCAN reply's names (possibly none: SCAN may return an empty
    /// page mid-pass), or `None` once every server is walked. A name may
    /// come twice (SCAN's guarantee while Redis rehashes, or a key whose
    /// slot moves between two primaries).
    pub async fn next_page(&mut self) -> redis::RedisResult<Option<Vec<Vec<u8>>>> {
        let Some((node, reply)) = self.calls.next().await else {
            return Ok(None);
        };
        let (next, page) = match reply {
            Ok(r) => r,
            Err(e) => {
                if let Some(c) = &self.cluster {
                    c.mark_stale();
                }
                return Err(e);
            }
        };
        SCANNED.fetch_add(
            u64::from(self.args.count),
            std::sync::atomic::Ordering::Relaxed,
        );
        if next != 0 {
            self.calls.push(self.args.call(node, next));
        }
        Ok(Some(page))
    }

    /// The whole pass's names that `keep` accepts, filtered page by page.
    async fn kept(
        mut self,
        keep: &(dyn Fn(&[u8]) -> bool + Sync),
    ) -> redis::RedisResult<Vec<Vec<u8>>> {
        let mut keys = Vec::new();
        while let Some(page) = self.next_page().await? {
            keys.extend(page.into_iter().filter(|k| keep(k)));
        }
        Ok(keys)
    }
}

/// TYPE for each key, pipelined.
pub async fn type_of(conn: &Conn, keys: &[Vec<u8>]) -> redis::RedisResult<Vec<KeyState>> {
    let cmds: Vec<redis::Cmd> = keys.iter().map(|k| cmd("TYPE", k)).collect();
    let replies = pipelined(conn, cmds).await?;
    Ok(replies.iter().map(key_state).collect())
}

/// A TYPE reply as a [`KeyState`]. An error reply (or one that is not a
/// type name) leaves the type unknown: before, it read as `none`, so a
/// refused `TYPE` made a key missing (an empty queue) or dropped it.
pub fn key_state(v: &Value) -> KeyState {
    if let Some(reason) = reply::refusal(v) {
        return KeyState::Unknown(reason);
    }
    match reply::as_str(v) {
        Some("none") => KeyState::Missing,
        None => KeyState::Unknown(Reason::Malformed),
        Some(t) => match KeyType::from_redis(t) {
            Some(kt) => KeyState::Typed(kt),
            None => KeyState::Unsupported(t.to_string()),
        },
    }
}
