//! Redis Sentinel: which server is the master now.
//!
//! Before every poll the source asks a sentinel
//! `SENTINEL GET-MASTER-ADDR-BY-NAME <name>` (one round trip to the
//! sentinel, none to Redis) and reconnects when the answer changes, so a
//! failover is followed within one poll of the sentinels announcing it. A
//! sentinel reports the promoted replica only once it has really become a
//! master. Sentinels are tried in the configured order, starting with the
//! one that answered last.

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ErrorKind, RedisError, RedisResult, Value};

use crate::config::SentinelSpec;

/// The sentinels of one source, with a lazily made connection to each.
pub struct Sentinels {
    /// The master's name and the sentinels' addresses.
    spec: SentinelSpec,
    /// Reconnect, timeout and retry settings for each sentinel.
    config: ConnectionManagerConfig,
    /// A connection per sentinel (same order as `spec.sentinels`), made on first use.
    conns: Vec<Option<ConnectionManager>>,
    /// The sentinel that answered last: asked first next time.
    preferred: usize,
    /// The master address the source's connection points at.
    pub current: Option<(String, u16)>,
}

impl Sentinels {
    /// Sentinels for `spec`; no connection is made until [`Sentinels::master`].
    pub fn new(spec: SentinelSpec, config: ConnectionManagerConfig) -> Self {
        Sentinels {
            conns: vec![None; spec.sentinels.len()],
            spec,
            config,
            preferred: 0,
            current: None,
        }
    }

    /// The master's name, for messages.
    pub fn master_name(&self) -> &str {
        &self.spec.master_name
    }

    /// The master's `host:port` as the first sentinel that answers names it.
    /// Errors when no sentinel answers, or none knows the name.
    pub async fn master(&mut self) -> RedisResult<(String, u16)> {
        let n = self.conns.len();
        let mut last_error = None;
        let first = self.preferred;
        for i in (0..n).map(|k| (first + k) % n) {
            let conn = self.conn(i);
            let mut cmd = redis::cmd("SENTINEL");
            cmd.arg("GET-MASTER-ADDR-BY-NAME")
                .arg(&self.spec.master_name);
            let answer = async {
                let reply: Value = cmd.query_async(&mut conn?).await?;
                master_addr(&reply)
            }
            .await;
            match answer {
                Ok(Some(addr)) => {
                    self.preferred = i;
                    return Ok(addr);
                }
                Ok(None) => {
                    last_error = Some(RedisError::from((
                        ErrorKind::MasterNameNotFoundBySentinel,
                        "the sentinel knows no master of that name",
                        self.spec.master_name.clone(),
                    )));
                }
                Err(e) => last_error = Some(e),
            }
        }
        Err(last_error.unwrap_or_else(|| {
            RedisError::from((ErrorKind::EmptySentinelList, "no sentinel configured"))
        }))
    }

    /// The connection to sentinel `i`, created on first use.
    fn conn(&mut self, i: usize) -> RedisResult<ConnectionManager> {
        if let Some(Some(c)) = self.conns.get(i) {
            return Ok(c.clone());
        }
        let info = self.spec.sentinels.get(i).cloned().ok_or_else(|| {
            RedisError::from((ErrorKind::EmptySentinelList, "no sentinel configured"))
        })?;
        let client = redis::Client::open(info)?;
        let conn = ConnectionManager::new_lazy_with_config(client, self.config.clone())?;
        if let Some(slot) = self.conns.get_mut(i) {
            *slot = Some(conn.clone());
        }
        Ok(conn)
    }
}

/// A `GET-MASTER-ADDR-BY-NAME` reply: `[host, port]`, or nil for an unknown name.
fn master_addr(reply: &Value) -> RedisResult<Option<(String, u16)>> {
    let text = |v: &Value| match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    match reply {
        Value::Nil => Ok(None),
        Value::Array(items) if items.len() == 2 => {
            let host = text(&items[0]);
            let port = text(&items[1]).and_then(|p| p.parse::<u16>().ok());
            match (host, port) {
                (Some(h), Some(p)) if !h.is_empty() => Ok(Some((h, p))),
                _ => Err(RedisError::from((
                    ErrorKind::UnexpectedReturnType,
                    "sentinel answered a malformed master address",
                ))),
            }
        }
        _ => Err(RedisError::from((
            ErrorKind::UnexpectedReturnType,
            "sentinel answered a malformed master address",
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn master_addresses_are_read_from_the_sentinel_reply() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        assert_eq!(
            master_addr(&Value::Array(vec![bulk("10.0.0.5"), bulk("6380")])).unwrap(),
            Some(("10.0.0.5".to_string(), 6380))
        );
        assert_eq!(master_addr(&Value::Nil).unwrap(), None);
        assert!(master_addr(&Value::Array(vec![bulk("h"), bulk("x")])).is_err());
        assert!(master_addr(&Value::Array(vec![bulk(""), bulk("1")])).is_err());
        assert!(master_addr(&Value::Int(1)).is_err());
    }
}
