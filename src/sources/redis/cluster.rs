//! Redis Cluster behind the command seam: one reconnecting connection per
//! primary, the slot map from `CLUSTER SLOTS`, per-node SCAN, pipelines
//! split per slot owner, and MOVED/ASK followed command by command.
//!
//! The `redis` crate's own cluster connection routes a whole pipeline to the
//! node of its first key (a pipeline spanning slots is refused as CROSSSLOT)
//! and hands per-command MOVED/ASK replies back untouched, so it cannot carry
//! our pipelines; this module reuses the single-node `ConnectionManager` per
//! node instead. Only `commands` uses it.
//!
//! Correctness while slots move: a command answered `MOVED` is sent to the
//! new owner (and the slot map is re-read before the next batch); one answered
//! `ASK` is sent to the importing node behind `ASKING` (and the map re-read
//! too: the slot changes owner soon). Every reply handed up is therefore the
//! key's real answer, from the node that holds it. A node that cannot be
//! reached, and `CLUSTERDOWN`/`TRYAGAIN`, fail the whole batch (the source is
//! down) instead of turning into unknown or zero values; so does a slot map
//! that leaves slots without a primary ([`Gap`]), rather than an empty source.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::{StreamExt, TryStreamExt};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ConnectionAddr, ConnectionInfo, ErrorKind, RedisError, RedisResult, Value};

/// Hash slots in a Redis Cluster.
const SLOTS: usize = 16384;
/// Marks a slot no node serves in [`Topology::owner`].
const UNASSIGNED: u16 = u16::MAX;
/// Redirections followed for one command before the batch fails (a slot
/// moves once per resharding step; more hops means a topology in flux).
const MAX_REDIRECTS: usize = 5;

/// A node's address as the cluster announces it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeAddr {
    /// Host or IP, as `CLUSTER SLOTS` and `MOVED` name it.
    pub host: String,
    /// Port.
    pub port: u16,
}

impl std::fmt::Display for NodeAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// Which primary serves each slot, from one `CLUSTER SLOTS` reply.
#[derive(Debug, Clone, PartialEq)]
pub struct Topology {
    /// The primaries, in address order.
    pub primaries: Vec<NodeAddr>,
    /// Per slot, the index of its primary in `primaries`, or [`UNASSIGNED`].
    owner: Vec<u16>,
}

impl Topology {
    /// Reads a `CLUSTER SLOTS` reply; `answering` is the node that sent it
    /// (an empty or NULL host means that node's host). Ranges without a
    /// usable primary are left unassigned.
    pub fn parse(reply: &Value, answering: &NodeAddr) -> Option<Topology> {
        let Value::Array(ranges) = reply else {
            return None;
        };
        let mut primaries: Vec<NodeAddr> = Vec::new();
        let mut spans = Vec::new();
        for range in ranges {
            let Value::Array(items) = range else { continue };
            let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(node))) =
                (items.first(), items.get(1), items.get(2))
            else {
                continue;
            };
            let host = match node.first() {
                Some(Value::BulkString(h)) if !h.is_empty() => {
                    let h = String::from_utf8_lossy(h).into_owned();
                    if h == "?" {
                        continue;
                    }
                    h
                }
                Some(Value::BulkString(_)) | Some(Value::Nil) => answering.host.clone(),
                _ => continue,
            };
            let Some(Value::Int(port)) = node.get(1) else {
                continue;
            };
            let (Ok(start), Ok(end), Ok(port)) = (
                usize::try_from(*start),
                usize::try_from(*end),
                u16::try_from(*port),
            ) else {
                continue;
            };
            if start > end || end >= SLOTS {
                continue;
            }
            let addr = NodeAddr { host, port };
            if !primaries.contains(&addr) {
                primaries.push(addr.clone());
            }
            spans.push((start, end, addr));
        }
        primaries.sort();
        let mut owner = vec![UNASSIGNED; SLOTS];
        for (start, end, addr) in spans {
            // `primaries` has at most one entry per slot range, so far fewer
            // than u16::MAX; the position exists because every span's
            // address was pushed above.
            let i = primaries.iter().position(|p| *p == addr).unwrap_or(0) as u16;
            owner[start..=end].fill(i);
        }
        Some(Topology { primaries, owner })
    }

    /// The slots no primary serves: how many, and the first run of them
    /// (`first..=last`). `None` when every slot has a primary.
    pub fn uncovered(&self) -> Option<Gap> {
        let start = self.owner.iter().position(|&o| o == UNASSIGNED)?;
        let run = self.owner[start..]
            .iter()
            .take_while(|&&o| o == UNASSIGNED)
            .count();
        Some(Gap {
            slots: self.owner.iter().filter(|&&o| o == UNASSIGNED).count(),
            // Both below `SLOTS` (16384), so they fit a u16.
            first: start as u16,
            last: (start + run - 1) as u16,
        })
    }

    /// The primary serving `slot`, if any.
    pub fn owner(&self, slot: u16) -> Option<&NodeAddr> {
        let i = *self.owner.get(usize::from(slot))?;
        self.primaries.get(usize::from(i))
    }
}

/// Slots a `CLUSTER SLOTS` reply left without a primary (a cluster not
/// formed yet, slots deleted, or an owner whose address is unknown).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gap {
    /// How many of the 16384 slots have no primary.
    pub slots: usize,
    /// The first slot of the first run without a primary.
    pub first: u16,
    /// The last slot of that run.
    pub last: u16,
}

/// The error of a slot map with a [`Gap`], as `answering` sent it. Its kind,
/// `ClusterConnectionNotFound`, is made nowhere else in the sources (the
/// `redis` crate's own cluster client, its only other maker, is not used),
/// so [`is_gap`] tells it apart from every other error.
fn gap_error(gap: Gap, answering: &NodeAddr) -> RedisError {
    RedisError::from((
        ErrorKind::ClusterConnectionNotFound,
        "CLUSTER SLOTS leaves slots without a primary",
        format!(
            "{} of {SLOTS} slots have no primary in the slot map from {answering} (first {}-{}); the cluster is not formed, or slots were deleted",
            gap.slots, gap.first, gap.last
        ),
    ))
}

/// Whether `e` says the slot map leaves slots without a primary (made by
/// [`gap_error`]).
pub fn is_gap(e: &RedisError) -> bool {
    e.kind() == ErrorKind::ClusterConnectionNotFound
}

/// The hash slot of `key`: CRC16 (XMODEM) of the key, or of its hash tag
/// (the text between the first `{` and the next `}`, if not empty), mod 16384.
pub fn slot(key: &[u8]) -> u16 {
    let tagged = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let close = rest.iter().position(|&b| b == b'}')?;
            Some(&rest[..close])
        })
        .filter(|tag| !tag.is_empty());
    crc16::State::<crc16::XMODEM>::calculate(tagged.unwrap_or(key)) % SLOTS as u16
}

/// The key a command from this crate's sources acts on: the first argument,
/// or the second for commands with a subcommand (`XINFO STREAM key`).
/// `None` for keyless commands.
pub fn key_of(cmd: &redis::Cmd) -> Option<&[u8]> {
    let mut args = cmd.args_iter().map(|a| match a {
        redis::Arg::Simple(a) => a,
        // Cursors and any future kind of argument are never keys.
        _ => &[][..],
    });
    let name = args.next()?;
    let with_subcommand = [&b"XINFO"[..], b"OBJECT", b"MEMORY"]
        .iter()
        .any(|c| c.eq_ignore_ascii_case(name));
    if with_subcommand {
        args.next()?;
    }
    args.next()
}

/// Where a MOVED or ASK reply sends a command.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Redirect {
    /// The slot has a new owner: ask it, and re-read the slot map.
    Moved(NodeAddr),
    /// The key is being imported by this node: ask it behind `ASKING`, and
    /// re-read the slot map.
    Ask(NodeAddr),
}

/// The redirection an error reply asks for (`MOVED 3999 127.0.0.1:6381`);
/// an empty host means the host of the node that replied (`from`).
fn redirect(v: &Value, from: &NodeAddr) -> Option<Redirect> {
    let Value::ServerError(e) = v else {
        return None;
    };
    let ask = match e.code() {
        "MOVED" => false,
        "ASK" => true,
        _ => return None,
    };
    let target = e.details()?.split_whitespace().nth(1)?;
    let (host, port) = target.rsplit_once(':')?;
    let addr = NodeAddr {
        host: if host.is_empty() {
            from.host.clone()
        } else {
            host.to_string()
        },
        port: port.parse().ok()?,
    };
    Some(if ask {
        Redirect::Ask(addr)
    } else {
        Redirect::Moved(addr)
    })
}

/// Whether an error reply means the cluster cannot answer for any key now.
fn cluster_unavailable(v: &Value) -> Option<RedisError> {
    match v {
        Value::ServerError(e) if matches!(e.code(), "CLUSTERDOWN" | "TRYAGAIN") => {
            Some(RedisError::from(e.clone()))
        }
        _ => None,
    }
}

/// `base` (credentials, database, TLS settings) for the server at
/// `host:port`: how a cluster node or a sentinel-named master is reached.
pub fn at_addr(base: &ConnectionInfo, host: &str, port: u16) -> ConnectionInfo {
    let addr = match base.addr() {
        ConnectionAddr::TcpTls {
            insecure,
            tls_params,
            ..
        } => ConnectionAddr::TcpTls {
            host: host.to_string(),
            port,
            insecure: *insecure,
            tls_params: tls_params.clone(),
        },
        _ => ConnectionAddr::Tcp(host.to_string(), port),
    };
    base.clone().set_addr(addr)
}

/// A Redis Cluster: cheap to clone, shared by a source's concurrent calls.
#[derive(Clone)]
pub struct ClusterConn {
    /// Everything behind one `Arc`.
    inner: Arc<Inner>,
}

/// The state a [`ClusterConn`]'s clones share.
struct Inner {
    /// Credentials, TLS and timeouts for every node; the address is replaced per node.
    base: ConnectionInfo,
    /// The node of the configured URL, asked for the slot map when no known primary answers.
    seed: NodeAddr,
    /// Reconnect, timeout and retry settings for each node's connection.
    config: ConnectionManagerConfig,
    /// One lazily created, reconnecting connection per node ever addressed.
    nodes: Mutex<HashMap<NodeAddr, ConnectionManager>>,
    /// The current slot map; the lock also makes concurrent refreshes wait
    /// for one `CLUSTER SLOTS` instead of sending one each.
    topology: tokio::sync::Mutex<Option<Arc<Topology>>>,
    /// Set when the slot map may be out of date (a MOVED, an error, a new
    /// discovery round): the next call re-reads it first.
    stale: AtomicBool,
}

impl ClusterConn {
    /// A cluster reached first through the node in `info` (TCP or TLS).
    /// No connection is made until the first command.
    pub fn new(info: ConnectionInfo, config: ConnectionManagerConfig) -> RedisResult<Self> {
        let seed = match info.addr() {
            ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
                NodeAddr {
                    host: host.clone(),
                    port: *port,
                }
            }
            ConnectionAddr::Unix(_) => {
                return Err(RedisError::from((
                    ErrorKind::InvalidClientConfig,
                    "a Redis Cluster is reached over TCP, not a unix socket",
                )));
            }
            // `ConnectionAddr` is non-exhaustive.
            _ => {
                return Err(RedisError::from((
                    ErrorKind::InvalidClientConfig,
                    "unsupported address for a Redis Cluster",
                )));
            }
        };
        Ok(ClusterConn {
            inner: Arc::new(Inner {
                base: info,
                seed,
                config,
                nodes: Mutex::new(HashMap::new()),
                topology: tokio::sync::Mutex::new(None),
                stale: AtomicBool::new(true),
            }),
        })
    }

    /// Makes the next call re-read the slot map (once per discovery round,
    /// so added or removed primaries are scanned).
    pub fn mark_stale(&self) {
        self.inner.stale.store(true, Ordering::Relaxed);
    }

    /// The connection to `addr`, created on first use.
    fn node(&self, addr: &NodeAddr) -> RedisResult<ConnectionManager> {
        let mut nodes = self
            .inner
            .nodes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(c) = nodes.get(addr) {
            return Ok(c.clone());
        }
        let client = redis::Client::open(at_addr(&self.inner.base, &addr.host, addr.port))?;
        let conn = ConnectionManager::new_lazy_with_config(client, self.inner.config.clone())?;
        nodes.insert(addr.clone(), conn.clone());
        Ok(conn)
    }

    /// The slot map, re-read with `CLUSTER SLOTS` when stale: from the
    /// known primaries first, then the configured node.
    pub async fn topology(&self) -> RedisResult<Arc<Topology>> {
        let mut current = self.inner.topology.lock().await;
        if let Some(t) = current.as_ref()
            && !self.inner.stale.load(Ordering::Relaxed)
        {
            return Ok(t.clone());
        }
        // Cleared before asking, so a MOVED seen while we ask marks it again.
        self.inner.stale.store(false, Ordering::Relaxed);
        let mut candidates: Vec<NodeAddr> = current
            .as_ref()
            .map(|t| t.primaries.clone())
            .unwrap_or_default();
        if !candidates.contains(&self.inner.seed) {
            candidates.push(self.inner.seed.clone());
        }
        let mut last_error = None;
        // A node that answered with slots left without a primary: reported
        // over any other node's failure, as it says what is unknown.
        let mut gap = None;
        for addr in candidates {
            let mut conn = self.node(&addr)?;
            let mut cmd = redis::cmd("CLUSTER");
            cmd.arg("SLOTS");
            match cmd.query_async::<Value>(&mut conn).await {
                Ok(reply) => {
                    let Some(t) = Topology::parse(&reply, &addr) else {
                        last_error = Some(RedisError::from((
                            ErrorKind::Parse,
                            "CLUSTER SLOTS reply is not an array",
                            addr.to_string(),
                        )));
                        continue;
                    };
                    if let Some(g) = t.uncovered() {
                        // Another node may know the whole map (a node that
                        // has just joined); none does: the source is down.
                        gap.get_or_insert_with(|| gap_error(g, &addr));
                        continue;
                    }
                    let t = Arc::new(t);
                    if current.as_ref().is_some_and(|old| **old != *t) {
                        tracing::debug!(primaries = t.primaries.len(), "cluster slot map changed");
                    }
                    *current = Some(t.clone());
                    return Ok(t);
                }
                // Refused outright (NOPERM, NOAUTH): no other node answers differently.
                Err(e) if e.code().is_some_and(super::is_auth_error_code) => {
                    self.mark_stale();
                    return Err(e);
                }
                Err(e) => last_error = Some(e),
            }
        }
        // The old map stays only as the list of nodes to ask next time:
        // stale, so no command is routed by it.
        self.mark_stale();
        Err(gap.or(last_error).unwrap_or_else(|| {
            RedisError::from((ErrorKind::Client, "no cluster node to ask for the slot map"))
        }))
    }

    /// A connection to each primary, for per-node commands (SCAN).
    pub async fn primaries(&self) -> RedisResult<Vec<ConnectionManager>> {
        let topology = self.topology().await?;
        topology.primaries.iter().map(|a| self.node(a)).collect()
    }

    /// Sends `cmds` as pipelines per slot owner (chunks of `chunk`, `in_flight`
    /// per node at once) and returns one reply per command, in order, each
    /// from the node that holds its key.
    pub async fn pipelined(
        &self,
        cmds: Vec<redis::Cmd>,
        chunk: usize,
        in_flight: usize,
    ) -> RedisResult<Vec<Value>> {
        let result = self.pipelined_inner(&cmds, chunk, in_flight).await;
        if result.is_err() {
            self.mark_stale();
        }
        result
    }

    async fn pipelined_inner(
        &self,
        cmds: &[redis::Cmd],
        chunk: usize,
        in_flight: usize,
    ) -> RedisResult<Vec<Value>> {
        let topology = self.topology().await?;
        let mut replies: Vec<Value> = vec![Value::Nil; cmds.len()];
        // Round 0 routes by the slot map; later rounds by redirections.
        let mut route: HashMap<(NodeAddr, bool), Vec<usize>> = HashMap::new();
        for (i, c) in cmds.iter().enumerate() {
            let addr = key_of(c)
                .and_then(|k| topology.owner(slot(k)))
                .unwrap_or(&self.inner.seed);
            route.entry((addr.clone(), false)).or_default().push(i);
        }
        for _ in 0..=MAX_REDIRECTS {
            let batches = self.send(cmds, route, chunk, in_flight).await?;
            route = HashMap::new();
            for (addr, indices, values) in batches {
                for (i, v) in indices.into_iter().zip(values) {
                    if let Some(e) = cluster_unavailable(&v) {
                        return Err(e);
                    }
                    match redirect(&v, &addr) {
                        Some(Redirect::Moved(to)) => {
                            self.mark_stale();
                            route.entry((to, false)).or_default().push(i);
                        }
                        Some(Redirect::Ask(to)) => {
                            // A slot is being migrated: its owner changes soon.
                            self.mark_stale();
                            route.entry((to, true)).or_default().push(i);
                        }
                        None => replies[i] = v,
                    }
                }
            }
            if route.is_empty() {
                return Ok(replies);
            }
            tracing::debug!(
                commands = route.values().map(Vec::len).sum::<usize>(),
                "following cluster redirections"
            );
        }
        Err(RedisError::from((
            ErrorKind::Client,
            "cluster kept redirecting commands",
            format!("more than {MAX_REDIRECTS} redirections"),
        )))
    }

    /// One round: each node's commands in pipelined chunks, `ASKING` before
    /// each command where `asking`. Returns, per chunk, the node, the command
    /// indices and their replies.
    async fn send(
        &self,
        cmds: &[redis::Cmd],
        route: HashMap<(NodeAddr, bool), Vec<usize>>,
        chunk: usize,
        in_flight: usize,
    ) -> RedisResult<Vec<(NodeAddr, Vec<usize>, Vec<Value>)>> {
        let nodes = route.len().max(1);
        let mut work = Vec::new();
        for ((addr, asking), indices) in route {
            let conn = self.node(&addr)?;
            for part in indices.chunks(chunk) {
                let mut p = redis::Pipeline::with_capacity(part.len() * (1 + usize::from(asking)));
                for &i in part {
                    if asking {
                        p.add_command(redis::cmd("ASKING"));
                    }
                    p.add_command(cmds[i].clone());
                }
                work.push((addr.clone(), conn.clone(), asking, part.to_vec(), p));
            }
        }
        futures_util::stream::iter(work)
            .map(|(addr, mut conn, asking, indices, mut p)| async move {
                let values: Vec<Value> = p.ignore_errors().query_async(&mut conn).await?;
                let values = if asking {
                    // Drop the `ASKING` replies (OK) between the commands' replies.
                    values.into_iter().skip(1).step_by(2).collect()
                } else {
                    values
                };
                if values.len() != indices.len() {
                    return Err(RedisError::from((
                        ErrorKind::Client,
                        "pipeline returned fewer replies than commands",
                    )));
                }
                Ok((addr, indices, values))
            })
            .buffer_unordered(in_flight * nodes)
            .try_collect()
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::cluster_routing::Slot;

    fn node(host: &str, port: u16) -> NodeAddr {
        NodeAddr {
            host: host.into(),
            port,
        }
    }

    fn range(start: i64, end: i64, host: Value, port: i64) -> Value {
        Value::Array(vec![
            Value::Int(start),
            Value::Int(end),
            Value::Array(vec![
                host,
                Value::Int(port),
                Value::BulkString(b"id".to_vec()),
            ]),
        ])
    }

    #[test]
    fn slots_match_the_cluster_spec() {
        // Examples from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(slot(b"123456789"), 12739);
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"{user1000}.following"), slot(b"user1000"));
        assert_eq!(slot(b"foo{}{bar}"), slot(b"foo{}{bar}"));
        assert_ne!(slot(b"foo{}{bar}"), slot(b"bar"));
        assert_eq!(slot(b"foo{{bar}}zap"), slot(b"{bar"));
        assert_eq!(slot(b"foo{bar}{zap}"), slot(b"bar"));
    }

    #[test]
    fn slots_agree_with_the_redis_crate() {
        let keys: [&[u8]; 9] = [
            b"",
            b"a",
            b"{",
            b"}{",
            b"{}",
            b"x{y}z",
            b"{{}}",
            b"jobs:{tenant-7}:wait",
            b"\xff\x00{\x01}",
        ];
        for key in keys.into_iter().chain([&b"q:12345"[..], b"k:0", b"{t}:2"]) {
            assert_eq!(Slot::new(slot(key)), Some(Slot::for_key(key)), "{key:?}");
        }
    }

    #[test]
    fn the_key_of_every_command_the_sources_send_is_found() {
        for name in [
            "LLEN",
            "LINDEX",
            "ZCARD",
            "ZRANGE",
            "ZREVRANGEBYSCORE",
            "HMGET",
            "ZCOUNT",
            "HLEN",
            "SCARD",
            "TYPE",
            "HGET",
            "EXISTS",
            "GET",
            "LRANGE",
            "SISMEMBER",
            "SMEMBERS",
            "SSCAN",
            "llen",
        ] {
            let mut c = redis::cmd(name);
            c.arg(b"some{tag}key").arg(0).arg(1);
            assert_eq!(key_of(&c), Some(&b"some{tag}key"[..]), "{name}");
        }
        for sub in ["STREAM", "GROUPS"] {
            let mut c = redis::cmd("XINFO");
            c.arg(sub).arg(b"some{tag}key");
            assert_eq!(key_of(&c), Some(&b"some{tag}key"[..]), "XINFO {sub}");
        }
        assert_eq!(key_of(&redis::cmd("PING")), None);
    }

    #[test]
    fn the_slot_map_is_read_from_cluster_slots() {
        let me = node("10.0.0.9", 7000);
        let reply = Value::Array(vec![
            range(0, 5460, Value::BulkString(b"10.0.0.1".to_vec()), 7001),
            range(5461, 10922, Value::BulkString(Vec::new()), 7000),
            range(10923, 16000, Value::Nil, 7000),
            range(16001, 16383, Value::BulkString(b"?".to_vec()), 7003),
        ]);
        let t = Topology::parse(&reply, &me).unwrap();
        assert_eq!(t.primaries, vec![node("10.0.0.1", 7001), me.clone()]);
        assert_eq!(t.owner(0), Some(&node("10.0.0.1", 7001)));
        assert_eq!(t.owner(5461), Some(&me));
        assert_eq!(t.owner(16000), Some(&me));
        assert_eq!(t.owner(16001), None);
        assert_eq!(t.owner(16384), None);
        assert!(Topology::parse(&Value::Nil, &me).is_none());
        // The `?` range has no usable primary: a gap, so the map is refused.
        let gap = Gap {
            slots: 383,
            first: 16001,
            last: 16383,
        };
        assert_eq!(t.uncovered(), Some(gap));
        let e = gap_error(gap, &me);
        assert!(is_gap(&e));
        assert!(e.to_string().contains("383 of 16384 slots"), "{e}");
        assert!(!is_gap(&RedisError::from((ErrorKind::Client, "other"))));
    }

    #[test]
    fn a_slot_map_leaving_slots_without_a_primary_has_a_gap_and_a_whole_one_has_none() {
        let me = node("10.0.0.9", 7000);
        let host = || Value::BulkString(b"10.0.0.1".to_vec());
        // A node not joined yet: no slot at all.
        let empty = Topology::parse(&Value::Array(Vec::new()), &me).unwrap();
        assert!(empty.primaries.is_empty());
        assert_eq!(
            empty.uncovered(),
            Some(Gap {
                slots: 16384,
                first: 0,
                last: 16383
            })
        );
        // A node that has its own slots but has met no other yet.
        let alone = Value::Array(vec![range(0, 5460, Value::BulkString(Vec::new()), 7000)]);
        let alone = Topology::parse(&alone, &me).unwrap();
        assert_eq!(alone.primaries, vec![me.clone()]);
        assert_eq!(
            alone.uncovered(),
            Some(Gap {
                slots: 16384 - 5461,
                first: 5461,
                last: 16383
            })
        );
        // A hole in the middle.
        let holed = Value::Array(vec![
            range(0, 99, host(), 7001),
            range(200, 16383, host(), 7002),
        ]);
        assert_eq!(
            Topology::parse(&holed, &me).unwrap().uncovered(),
            Some(Gap {
                slots: 100,
                first: 100,
                last: 199
            })
        );
        let whole = Value::Array(vec![
            range(0, 8000, host(), 7001),
            range(8001, 16383, host(), 7002),
        ]);
        assert_eq!(Topology::parse(&whole, &me).unwrap().uncovered(), None);
    }

    #[test]
    fn moved_and_ask_name_the_node_to_ask() {
        let from = node("10.0.0.1", 7000);
        let err = |text: &str| {
            let v = redis::parse_redis_value(format!("-{text}\r\n").as_bytes()).unwrap();
            redirect(&v, &from)
        };
        assert_eq!(
            err("MOVED 3999 127.0.0.1:6381"),
            Some(Redirect::Moved(node("127.0.0.1", 6381)))
        );
        assert_eq!(
            err("ASK 3999 10.0.0.2:6380"),
            Some(Redirect::Ask(node("10.0.0.2", 6380)))
        );
        assert_eq!(
            err("MOVED 1 :6390"),
            Some(Redirect::Moved(node("10.0.0.1", 6390)))
        );
        assert_eq!(
            err("MOVED 1 ::1:6390"),
            Some(Redirect::Moved(node("::1", 6390)))
        );
        assert_eq!(err("WRONGTYPE Operation against a key"), None);
        assert!(
            cluster_unavailable(
                &redis::parse_redis_value(b"-CLUSTERDOWN The cluster is down\r\n").unwrap()
            )
            .is_some()
        );
    }
}
