//! The Redis commands discovery and polling send, in one place: SCAN, TYPE
//! and pipelined batches. This is the seam a Redis Cluster implementation
//! replaces (per-node SCAN, per-slot pipelines); nothing above it changes.

use futures_util::{StreamExt, TryStreamExt};
use redis::Value;
use redis::aio::ConnectionManager;

use super::reply;
use super::tracked::KeyState;
use crate::config::KeyType;

/// Commands per pipelined round trip.
pub const PIPELINE_CHUNK: usize = 1000;
/// Pipelined round trips in flight at once on the multiplexed connection.
const PIPELINES_IN_FLIGHT: usize = 4;

/// A command with one key argument.
pub fn cmd(name: &str, key: &[u8]) -> redis::Cmd {
    let mut c = redis::cmd(name);
    c.arg(key);
    c
}

/// Sends `cmds` in pipelined chunks (several in flight) and returns one reply
/// per command, in order. Error replies come back as `Value::ServerError`.
pub async fn pipelined(
    conn: &ConnectionManager,
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

/// Full SCAN over the keyspace with MATCH (and TYPE), COUNT-bounded.
pub async fn scan(
    conn: &mut ConnectionManager,
    pattern: &[u8],
    key_type: Option<KeyType>,
    count: u32,
) -> redis::RedisResult<Vec<Vec<u8>>> {
    let mut cursor: u64 = 0;
    let mut keys = Vec::new();
    loop {
        let mut cmd = redis::cmd("SCAN");
        cmd.arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(count);
        if let Some(t) = key_type {
            cmd.arg("TYPE").arg(t.as_str());
        }
        let (next, batch): (u64, Vec<Vec<u8>>) = cmd.query_async(conn).await?;
        keys.extend(batch);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    Ok(keys)
}

/// TYPE for each key, pipelined.
pub async fn type_of(
    conn: &ConnectionManager,
    keys: &[Vec<u8>],
) -> redis::RedisResult<Vec<KeyState>> {
    let cmds: Vec<redis::Cmd> = keys.iter().map(|k| cmd("TYPE", k)).collect();
    let replies = pipelined(conn, cmds).await?;
    Ok(replies.iter().map(key_state).collect())
}

/// A TYPE reply as a [`KeyState`].
pub fn key_state(v: &Value) -> KeyState {
    match reply::as_str(v) {
        Some("none") | None => KeyState::Missing,
        Some(t) => match KeyType::from_redis(t) {
            Some(kt) => KeyState::Typed(kt),
            None => KeyState::Unsupported(t.to_string()),
        },
    }
}
