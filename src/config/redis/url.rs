//! A Redis source's URL: `redis://`, `rediss://`, `unix://`, and the
//! `redis+cluster://` and `redis+sentinel://` schemes, checked and parsed
//! once at load into connection info. Apart from the source struct because
//! the scheme grammar (sentinel lists, master names) is its own parser, and
//! because the text may carry a password, which only [`Redacted`] shows.

use redis::{ConnectionInfo, IntoConnectionInfo};
use serde::{Deserialize, Deserializer};

use crate::config::secret::Redacted;

/// A Redis URL, checked and parsed once at load. Keeps the text (for
/// redacted display) and the parsed connection info (for connecting).
#[derive(Clone)]
pub struct RedisUrl {
    /// The URL as written; may carry a password, so only shown through [`Redacted`].
    text: String,
    /// What the `redis` crate parsed from it. For `redis+sentinel://`, the
    /// user, password, database and TLS used on the master (its address is
    /// replaced by the one the sentinels answer).
    info: ConnectionInfo,
    /// Which deployment the scheme names.
    kind: UrlKind,
}

/// The deployment a URL's scheme names.
#[derive(Debug, Clone)]
pub enum UrlKind {
    /// `redis://`, `rediss://`, `unix://`: one server.
    Standalone,
    /// `redis+cluster://`, `rediss+cluster://`: a node of a Redis Cluster.
    Cluster,
    /// `redis+sentinel://`, `rediss+sentinel://`: the master sentinels name
    /// (boxed: rare, and it would make every source config larger).
    Sentinel(Box<SentinelSpec>),
}

/// The sentinels of a `redis+sentinel://` URL and the master to ask them for.
#[derive(Debug, Clone)]
pub struct SentinelSpec {
    /// The name the sentinels monitor the master under (`sentinel monitor <name> …`).
    pub master_name: String,
    /// Each sentinel (no credentials; TLS as the URL's scheme says), tried in order.
    pub sentinels: Vec<ConnectionInfo>,
}

/// The port of a sentinel written without one.
const SENTINEL_PORT: u16 = 26379;

impl RedisUrl {
    /// The default, `redis://127.0.0.1:6379`.
    const DEFAULT: &'static str = "redis://127.0.0.1:6379";

    /// Parses a URL; the error never echoes it (it may carry a password).
    pub fn parse(text: &str) -> Result<RedisUrl, String> {
        let parse = |url: &str| {
            url.into_connection_info()
                .map_err(|e| format!("is not a valid Redis URL ({:?})", e.kind()))
        };
        let (info, kind) = if let Some(rest) = text.strip_prefix("redis+cluster://") {
            (parse(&format!("redis://{rest}"))?, UrlKind::Cluster)
        } else if let Some(rest) = text.strip_prefix("rediss+cluster://") {
            (parse(&format!("rediss://{rest}"))?, UrlKind::Cluster)
        } else if let Some(rest) = text.strip_prefix("redis+sentinel://") {
            parse_sentinel("redis", rest)?
        } else if let Some(rest) = text.strip_prefix("rediss+sentinel://") {
            parse_sentinel("rediss", rest)?
        } else {
            let schemes = ["redis://", "rediss://", "unix://", "redis+unix://"];
            if !schemes.iter().any(|s| text.starts_with(s)) {
                return Err(
                    "must start with redis://, rediss://, unix://, redis+cluster:// or redis+sentinel://"
                        .into(),
                );
            }
            (parse(text)?, UrlKind::Standalone)
        };
        Ok(RedisUrl {
            text: text.to_string(),
            info,
            kind,
        })
    }

    /// Which deployment the URL names.
    pub fn kind(&self) -> &UrlKind {
        &self.kind
    }

    /// The URL as written. Never log it: use [`RedisUrl::redacted`].
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The URL with any user info hidden, for logs and errors.
    pub fn redacted(&self) -> String {
        Redacted(&self.text).to_string()
    }

    /// The parsed connection info.
    pub fn info(&self) -> &ConnectionInfo {
        &self.info
    }
}

/// `[user[:password]@]host[:port][,host[:port]…]/master_name[/db][?query]`
/// after a `redis+sentinel://` (`scheme` `redis`) or `rediss+sentinel://`
/// (`rediss`): the master's connection info (credentials, database, TLS, and
/// the first sentinel's address as a placeholder) and the sentinels. Errors
/// never echo the text (it may carry a password).
fn parse_sentinel(scheme: &str, rest: &str) -> Result<(ConnectionInfo, UrlKind), String> {
    let (rest, query) = match rest.split_once('?') {
        Some((r, q)) => (r, format!("?{q}")),
        None => (rest, String::new()),
    };
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let (user_info, hosts) = match authority.rsplit_once('@') {
        Some((u, h)) => (format!("{u}@"), h),
        None => (String::new(), authority),
    };
    let usage = "(redis+sentinel://[user:password@]host:port[,host:port…]/master_name[/db])";
    let mut sentinels = Vec::new();
    let mut first = None;
    for host in hosts.split(',') {
        if host.is_empty() {
            return Err(format!("has an empty sentinel address {usage}"));
        }
        // A port is present after the last `:` unless that `:` is inside
        // an IPv6 literal (`[::1]`).
        let has_port = match host.rfind(']') {
            Some(end) => host[end..].contains(':'),
            None => host.contains(':'),
        };
        let host = if has_port {
            host.to_string()
        } else {
            format!("{host}:{SENTINEL_PORT}")
        };
        let info = format!("{scheme}://{host}")
            .into_connection_info()
            .map_err(|e| format!("has an invalid sentinel address ({:?}) {usage}", e.kind()))?;
        first.get_or_insert(host);
        sentinels.push(info);
    }
    let first = first.ok_or_else(|| format!("names no sentinel {usage}"))?;
    let mut segments = path.split('/');
    let master_name = segments
        .next()
        .map(|m| {
            percent_encoding::percent_decode_str(m)
                .decode_utf8_lossy()
                .into_owned()
        })
        .filter(|m| !m.is_empty())
        .ok_or_else(|| format!("needs the master's name after the sentinels {usage}"))?;
    let db = segments.next().unwrap_or("");
    if segments.next().is_some() {
        return Err(format!("has more path than /master_name/db {usage}"));
    }
    let info = format!("{scheme}://{user_info}{first}/{db}{query}")
        .into_connection_info()
        .map_err(|e| format!("is not a valid Redis URL ({:?}) {usage}", e.kind()))?;
    Ok((
        info,
        UrlKind::Sentinel(Box::new(SentinelSpec {
            master_name,
            sentinels,
        })),
    ))
}

impl Default for RedisUrl {
    fn default() -> Self {
        // A constant the `redis` crate always parses (covered by a test).
        RedisUrl::parse(Self::DEFAULT).unwrap_or_else(|e| unreachable!("{e}"))
    }
}

impl std::fmt::Debug for RedisUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl<'de> Deserialize<'de> for RedisUrl {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        RedisUrl::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_url_parses_and_never_shows_a_password() {
        assert_eq!(RedisUrl::default().as_str(), "redis://127.0.0.1:6379");
        let u = RedisUrl::parse("redis://user:secret@host:6379/1").unwrap();
        assert!(!format!("{u:?}").contains("secret"));
        assert!(RedisUrl::parse("http://x").is_err());
    }

    #[test]
    fn cluster_and_sentinel_urls_parse() {
        let u = RedisUrl::parse("redis+cluster://u:p@10.0.0.1:7000").unwrap();
        assert!(matches!(u.kind(), UrlKind::Cluster));
        assert_eq!(
            u.info().addr(),
            &redis::ConnectionAddr::Tcp("10.0.0.1".into(), 7000)
        );
        assert_eq!(u.info().redis_settings().password(), Some("p"));
        let u = RedisUrl::parse("rediss+cluster://10.0.0.1:7000").unwrap();
        assert!(matches!(
            u.info().addr(),
            redis::ConnectionAddr::TcpTls { port: 7000, .. }
        ));

        let u = RedisUrl::parse("redis+sentinel://qe:p%40ss@s1:26380,s2,[::1]:5/my%20master/2")
            .unwrap();
        let UrlKind::Sentinel(spec) = u.kind() else {
            panic!("sentinel")
        };
        assert_eq!(spec.master_name, "my master");
        let addrs: Vec<_> = spec.sentinels.iter().map(|s| s.addr().clone()).collect();
        assert_eq!(
            addrs,
            [
                redis::ConnectionAddr::Tcp("s1".into(), 26380),
                redis::ConnectionAddr::Tcp("s2".into(), 26379),
                redis::ConnectionAddr::Tcp("::1".into(), 5),
            ]
        );
        // Credentials and database are the master's, never the sentinels'.
        assert_eq!(u.info().redis_settings().password(), Some("p@ss"));
        assert_eq!(u.info().redis_settings().username(), Some("qe"));
        assert_eq!(u.info().redis_settings().db(), 2);
        assert!(
            spec.sentinels
                .iter()
                .all(|s| s.redis_settings().password().is_none())
        );
        assert!(!format!("{u:?}").contains("p%40ss"));

        for bad in [
            "redis+sentinel://:secret@s1:26379",
            "redis+sentinel://:secret@s1,,s2/m",
            "redis+sentinel://:secret@s1/m/0/x",
            "redis+sentinel://:secret@s1/m/notadb",
            "redis+sentinel://:secret@s1:99999/m",
        ] {
            let e = RedisUrl::parse(bad).map(|_| ()).unwrap_err();
            assert!(!e.contains("secret"), "{e}");
        }
    }
}
