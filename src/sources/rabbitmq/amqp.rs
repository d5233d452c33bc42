//! Method `amqp`: one connection (lapin) and a **passive** `queue.declare`
//! per configured queue. Passive declares never create or change anything.
//! A missing queue answers 404, which closes the channel it was asked on, so
//! a channel that saw an error is replaced and the other queues are not
//! disturbed; the channels that are still open at the end of a poll are kept
//! for the next one. The reply carries ready messages and consumers only.
//!
//! Recovery is ours, not lapin's: a poll that fails in any other way drops
//! the connection and cuts its socket, and the next poll opens a new one,
//! bounded by `timeout`. (lapin's own auto-recovery retried in the
//! background on its schedule: ~11 s after a black-holed path healed, and now
//! and then minutes.) The socket is cut through a duplicate of its file
//! descriptor ([`SocketCutter`]), because lapin runs each connection on its
//! own I/O thread that only ends when the socket does: a handshake that a
//! black hole never answers would otherwise keep a thread and a socket per
//! attempt.

use crate::snapshot::Reason;
use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::join_all;
use lapin::options::QueueDeclareOptions;
use lapin::tcp::{OwnedIdentity, OwnedTLSConfig};
use lapin::types::FieldTable;
use lapin::uri::{AMQPScheme, AMQPUri};
use lapin::{AsyncTcpStream, Channel, Connection, ConnectionProperties, ErrorKind};

use super::access;
use super::credentials::{self, Credentials};
use super::filter::QueueFilter;
use super::sample;
use crate::config::{RabbitSourceConfig, Redacted};
use crate::snapshot::{Coverage, QueueSample};
use crate::sources::{PollOutput, SourceError};

/// Channels declaring at once; each works through the queue list in turn.
const CHANNELS_IN_FLIGHT: usize = 8;

/// State of the AMQP method between polls.
#[derive(Default)]
pub struct Amqp {
    /// The connection, once made (boxed: it is large). Dropped, with its
    /// socket cut, by any poll that fails on it; the next poll makes a new one.
    conn: Option<Box<Live>>,
    /// Queues missing or refused at the last poll, so that a change is
    /// logged once rather than at every poll.
    unseen: HashSet<String>,
}

impl std::fmt::Debug for Amqp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Amqp")
            .field(
                "connected",
                &self.conn.as_ref().map(|c| c.conn.status().connected()),
            )
            .finish()
    }
}

/// An open connection and the means to cut its socket.
struct Live {
    /// The lapin connection.
    conn: Connection,
    /// Shuts its TCP socket down when the connection is given up.
    socket: SocketCutter,
    /// Declaring channels left open by the last poll for the next one:
    /// opening and closing [`CHANNELS_IN_FLIGHT`] channels at every poll
    /// cost two round trips each (about 10 ms of a 2,000-queue poll in the
    /// issue 11 benchmark, whose bare client keeps its channels). They go
    /// with the connection.
    channels: Vec<Channel>,
}

impl Live {
    /// Gives the connection up at once: the socket is shut down (so lapin's
    /// I/O thread ends now, not when a dead peer times out) and the
    /// connection dropped.
    fn abandon(self) {
        self.socket.cut();
        drop(self.conn);
    }
}

/// A duplicate of a connection's TCP socket (`dup` of its descriptor),
/// filled in by the connect function that lapin calls. Shutting the
/// duplicate down shuts the one socket down for lapin too, in whatever
/// state its handshake or I/O is.
#[derive(Clone, Default)]
struct SocketCutter(Arc<Mutex<Option<std::net::TcpStream>>>);

impl SocketCutter {
    /// Keeps the duplicate of the latest socket.
    fn keep(&self, socket: std::net::TcpStream) {
        // A poisoned lock only means a panic elsewhere while holding it; the
        // slot itself is still usable.
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(socket);
    }

    /// Shuts the socket down (both directions), if one was opened.
    fn cut(&self) {
        if let Some(s) = self.0.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// What a passive declare said about one queue.
#[derive(Debug, Clone, Copy)]
enum DeclareOutcome {
    /// The queue exists.
    Found {
        /// Ready messages (not unacked).
        ready: u32,
        /// Consumers.
        consumers: u32,
    },
    /// 404: no such queue.
    Missing,
    /// 403: the user may not look at this queue.
    Refused,
}

impl Amqp {
    /// One poll: a passive declare per configured queue.
    pub async fn poll(
        &mut self,
        config: &RabbitSourceConfig,
        filter: &QueueFilter,
    ) -> Result<PollOutput, SourceError> {
        let creds = credentials::resolve(config)?;
        let who = access::who(creds.as_ref());
        let target = Redacted(&config.url).to_string();
        let secret = creds
            .as_ref()
            .map(|c| c.password.clone())
            .unwrap_or_default();
        let uri = amqp_uri(config, creds.as_ref())?;
        let vhost = uri.vhost.clone();
        let live = self.connection(config, uri, &target, &secret).await?;
        let mut spare = std::mem::take(&mut live.channels);

        let mut unique = HashSet::new();
        let names: Vec<&str> = config
            .queues
            .iter()
            .map(String::as_str)
            .filter(|q| unique.insert(*q) && filter.keeps(&vhost, q))
            .collect();
        let next = AtomicUsize::new(0);
        let workers = CHANNELS_IN_FLIGHT.min(names.len()).max(1);
        let ctx = Worker {
            conn: &live.conn,
            names: &names,
            next: &next,
            timeout: config.timeout,
            target: &target,
            secret: &secret,
        };
        let results = join_all((0..workers).map(|_| ctx.run(spare.pop()))).await;

        let mut outcomes: Vec<Option<DeclareOutcome>> = vec![None; names.len()];
        let mut kept = spare;
        for (r, channel) in results {
            kept.extend(channel);
            match r {
                Ok(found) => {
                    for (i, o) in found {
                        outcomes[i] = Some(o);
                    }
                }
                Err(e) => {
                    // Whatever went wrong (a lost or hung connection, a
                    // connection-level refusal), the next poll starts from a
                    // new connection instead of waiting on this one.
                    if let Some(live) = self.conn.take() {
                        live.abandon();
                    }
                    return Err(e);
                }
            }
        }
        if let Some(live) = self.conn.as_deref_mut() {
            live.channels = kept;
        }
        Ok(self.report(&config.name, &vhost, &who, &names, outcomes))
    }

    /// The poll's output from what each passive declare said: a found
    /// queue's figures, a missing one counted as `not_found`, a refused one
    /// counted as `auth` and recorded as a coverage gap (a glob over it
    /// would otherwise sum the others only).
    fn report(
        &mut self,
        source: &str,
        vhost: &str,
        who: &str,
        names: &[&str],
        outcomes: Vec<Option<DeclareOutcome>>,
    ) -> PollOutput {
        let mut queues = Vec::new();
        let mut partial_errors = Vec::new();
        let mut gaps = Vec::new();
        let mut unseen = HashSet::new();
        for (name, outcome) in names.iter().zip(outcomes) {
            match outcome {
                Some(DeclareOutcome::Found { ready, consumers }) => {
                    let mut q = QueueSample::named(*name);
                    q.broker_mut().vhost = vhost.to_string();
                    // A passive declare reports ready messages only: depth
                    // (ready + unacked) stays unknown rather than invented.
                    q.ready = Some(u64::from(ready));
                    q.broker_mut().consumers = Some(u64::from(consumers));
                    queues.push(q);
                }
                Some(DeclareOutcome::Missing) => {
                    if !self.unseen.contains(*name) {
                        tracing::warn!(source = %source, queue = %name, vhost = %vhost, "queue not found; counted as not_found while it is missing");
                    }
                    unseen.insert(name.to_string());
                    partial_errors.push(Reason::NotFound);
                }
                Some(DeclareOutcome::Refused) => {
                    if !self.unseen.contains(*name) {
                        tracing::warn!(source = %source, queue = %name, vhost = %vhost, "access to queue refused; counted as auth, and unknown to KEDA");
                    }
                    unseen.insert(name.to_string());
                    partial_errors.push(Reason::Auth);
                    gaps.push(access::refused_queue(who, vhost, name));
                }
                None => {}
            }
        }
        self.unseen = unseen;
        let mut out = PollOutput::new(Coverage::with_gaps(gaps));
        out.stats = sample::stats(&queues, &[vhost.to_string()]);
        out.queues = queues;
        out.partial_errors = partial_errors;
        out
    }

    /// The live connection, connecting first if there is none (or if the
    /// one kept has closed since the last poll).
    async fn connection(
        &mut self,
        config: &RabbitSourceConfig,
        uri: AMQPUri,
        target: &str,
        secret: &str,
    ) -> Result<&mut Live, SourceError> {
        if self
            .conn
            .as_ref()
            .is_some_and(|c| !c.conn.status().connected())
            && let Some(dead) = self.conn.take()
        {
            tracing::debug!(source = %config.name, %target, "AMQP connection lost; reconnecting");
            dead.abandon();
        }
        if self.conn.is_none() {
            let live = open(config, uri, target, secret).await?;
            tracing::debug!(source = %config.name, %target, "AMQP connection open");
            self.conn = Some(Box::new(live));
        }
        self.conn
            .as_deref_mut()
            .ok_or_else(|| SourceError::Connect {
                target: target.to_string(),
                cause: "no connection".into(),
            })
    }
}

/// The addresses of `uri`'s host, looked up within `config`'s timeout.
async fn resolve(
    config: &RabbitSourceConfig,
    uri: &AMQPUri,
    target: &str,
) -> Result<Vec<SocketAddr>, SourceError> {
    let host = uri.authority.host.as_str();
    let port = uri.authority.port;
    match tokio::time::timeout(config.timeout, tokio::net::lookup_host((host, port))).await {
        Ok(Ok(a)) => Ok(a.collect()),
        Ok(Err(e)) => Err(SourceError::Connect {
            target: target.to_string(),
            cause: format!("cannot resolve {host}: {e}"),
        }),
        Err(_) => Err(SourceError::Timeout(config.timeout)),
    }
}

/// Opens a connection (TCP, TLS for `amqps://`, the AMQP handshake) within
/// `timeout`. lapin retries nothing: the poll loop is the retry.
async fn open(
    config: &RabbitSourceConfig,
    uri: AMQPUri,
    target: &str,
    secret: &str,
) -> Result<Live, SourceError> {
    let tls = Arc::new(tls_config(config)?);
    // A server that refuses the client certificate (or requires one) may
    // reset the connection before its alert is read, since TLS 1.3 ends
    // the client's handshake first: the error then says what to check.
    let certificate_hint =
        matches!(uri.scheme, AMQPScheme::AMQPS).then(|| super::client::certificate_hint(config));
    let addrs = resolve(config, &uri, target).await?;
    let runtime = lapin::runtime::default_runtime()
        .map_err(|e| SourceError::Config(format!("no async runtime for lapin: {e}")))?;
    let props = ConnectionProperties::default()
        .with_connection_name(format!("queue-exporter {}", config.name).into());
    crate::crypto::install_crypto_provider();
    let socket = SocketCutter::default();
    let keep = socket.clone();
    // Whatever ends this attempt early (an error, `timeout`, or the poll's
    // own deadline dropping this future) cuts the socket on the way out.
    let mut unless_kept = CutOnDrop(Some(socket.clone()));
    let connect = Connection::connector(
        uri,
        runtime,
        async move |uri: AMQPUri, runtime| {
            let stream = AsyncTcpStream::connect(&runtime, addrs.clone()).await?;
            if let AsyncTcpStream::Plain(s) = &stream {
                keep.keep(duplicate(s.get_ref())?);
            }
            Ok(match uri.scheme {
                AMQPScheme::AMQPS => {
                    stream
                        .into_tls(&uri.authority.host, OwnedTLSConfig::as_ref(&tls))
                        .await?
                }
                AMQPScheme::AMQP => stream,
            })
        },
        props,
    );
    match tokio::time::timeout(config.timeout, connect).await {
        Ok(Ok(conn)) => {
            unless_kept.0 = None;
            Ok(Live {
                conn,
                socket,
                channels: Vec::new(),
            })
        }
        Ok(Err(e)) => Err(match map_error(&e, target, secret) {
            SourceError::Connect { target, cause }
                if let Some(hint) = certificate_hint
                    && cut_off(&e) =>
            {
                SourceError::Connect {
                    target,
                    cause: format!("{cause} (the server closed the TLS connection; {hint})"),
                }
            }
            other => other,
        }),
        // The handshake got no answer (a black hole, a hung broker); the
        // guard ends lapin's attempt rather than leave it waiting.
        Err(_) => Err(SourceError::Timeout(config.timeout)),
    }
}

/// Cuts the socket when dropped, unless emptied first (the connection was
/// handed over).
struct CutOnDrop(Option<SocketCutter>);

impl Drop for CutOnDrop {
    fn drop(&mut self) {
        if let Some(s) = self.0.take() {
            s.cut();
        }
    }
}

/// A second handle on the same socket, for [`SocketCutter`].
fn duplicate(s: &tokio::net::TcpStream) -> std::io::Result<std::net::TcpStream> {
    use std::os::fd::AsFd;
    Ok(std::net::TcpStream::from(s.as_fd().try_clone_to_owned()?))
}

/// TLS settings for `amqps://`: `tls.ca_file` as extra roots, and
/// `tls.cert_file`/`tls.key_file` as the client identity. Files are read at
/// every connect, so a rotated certificate is picked up by the next one.
fn tls_config(config: &RabbitSourceConfig) -> Result<OwnedTLSConfig, SourceError> {
    let read = |field: &str, path: &std::path::Path| {
        std::fs::read(path).map_err(|e| {
            SourceError::Config(format!("cannot read tls.{field} {}: {e}", path.display()))
        })
    };
    let cert_chain = match &config.tls.ca_file {
        Some(path) => Some(String::from_utf8(read("ca_file", path)?).map_err(|_| {
            SourceError::Config(format!(
                "tls.ca_file {} holds no valid PEM certificate",
                path.display()
            ))
        })?),
        None => None,
    };
    let identity = match (&config.tls.cert_file, &config.tls.key_file) {
        (Some(cert), Some(key)) => Some(OwnedIdentity::PKCS8 {
            pem: read("cert_file", cert)?,
            key: read("key_file", key)?,
        }),
        // Validation requires both or neither.
        _ => None,
    };
    Ok(OwnedTLSConfig {
        identity,
        cert_chain,
    })
}

/// What the declaring channels share.
struct Worker<'a> {
    /// The connection.
    conn: &'a Connection,
    /// Queues to declare, in config order.
    names: &'a [&'a str],
    /// Index of the next queue to take.
    next: &'a AtomicUsize,
    /// Bound on each AMQP operation.
    timeout: Duration,
    /// Redacted URL for errors.
    target: &'a str,
    /// The password, scrubbed from error texts.
    secret: &'a str,
}

impl Worker<'_> {
    /// Takes queues from the shared list until it is empty, on `channel`
    /// (one kept from the last poll) or a new one. Returns what it found,
    /// and its channel if it is still open, for the next poll.
    async fn run(
        &self,
        channel: Option<Channel>,
    ) -> (
        Result<Vec<(usize, DeclareOutcome)>, SourceError>,
        Option<Channel>,
    ) {
        let mut channel = channel;
        let mut done = Vec::new();
        let result = loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            let Some(name) = self.names.get(i) else {
                break Ok(());
            };
            let ch = match &channel {
                Some(c) if c.status().connected() => c.clone(),
                _ => match self.timed(self.conn.create_channel()).await {
                    Ok(c) => {
                        channel = Some(c.clone());
                        c
                    }
                    Err(e) => break Err(e),
                },
            };
            let options = QueueDeclareOptions {
                passive: true,
                ..QueueDeclareOptions::default()
            };
            let declare = ch.queue_declare((*name).into(), options, FieldTable::default());
            match tokio::time::timeout(self.timeout, declare).await {
                Err(_) => break Err(SourceError::Timeout(self.timeout)),
                Ok(Ok(q)) => done.push((
                    i,
                    DeclareOutcome::Found {
                        ready: q.message_count(),
                        consumers: q.consumer_count(),
                    },
                )),
                Ok(Err(e)) => match soft_code(&e) {
                    // The server closed this channel; the next queue gets a new one.
                    Some(404) => {
                        channel = None;
                        done.push((i, DeclareOutcome::Missing));
                    }
                    Some(403) => {
                        channel = None;
                        done.push((i, DeclareOutcome::Refused));
                    }
                    _ => break Err(map_error(&e, self.target, self.secret)),
                },
            }
        };
        // After an error the connection is given up anyway, channels and all.
        let keep = channel.filter(|ch| result.is_ok() && ch.status().connected());
        (result.map(|()| done), keep)
    }

    async fn timed<T>(
        &self,
        f: impl std::future::Future<Output = lapin::Result<T>>,
    ) -> Result<T, SourceError> {
        match tokio::time::timeout(self.timeout, f).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(map_error(&e, self.target, self.secret)),
            Err(_) => Err(SourceError::Timeout(self.timeout)),
        }
    }
}

/// The reply code of a channel-level (soft) AMQP error.
fn soft_code(e: &lapin::Error) -> Option<u16> {
    match e.kind() {
        ErrorKind::ProtocolError(p) if e.is_amqp_soft_error() => Some(p.get_id()),
        _ => None,
    }
}

/// Whether the connection was cut (reset or closed) rather than refused
/// with a reason.
fn cut_off(e: &lapin::Error) -> bool {
    matches!(e.kind(), ErrorKind::IOError(io) if matches!(
        io.kind(),
        std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::UnexpectedEof
            | std::io::ErrorKind::BrokenPipe
    ))
}

/// Maps a lapin error to a reason-labelled [`SourceError`]; the text is
/// scrubbed of the password.
fn map_error(e: &lapin::Error, target: &str, secret: &str) -> SourceError {
    let cause = credentials::scrub(&e.to_string(), secret);
    let target = target.to_string();
    match e.kind() {
        // 403 ACCESS_REFUSED (login or permissions), 530 NOT_ALLOWED (vhost).
        ErrorKind::ProtocolError(p) if matches!(p.get_id(), 403 | 530) => {
            SourceError::Auth { target, cause }
        }
        ErrorKind::ProtocolError(p) if p.get_id() == 404 => SourceError::NotFound(cause),
        // 320 CONNECTION_FORCED: the broker is shutting down or an operator
        // closed the connection; it is gone, as after a reset.
        ErrorKind::ProtocolError(p) if p.get_id() == 320 => SourceError::Connect { target, cause },
        ErrorKind::AuthProviderError(_) => SourceError::Auth { target, cause },
        ErrorKind::IOError(_)
        | ErrorKind::InvalidConnectionState(_)
        | ErrorKind::InvalidChannelState(..)
        | ErrorKind::InvalidChannel(_)
        | ErrorKind::MissingHeartbeatError => SourceError::Connect { target, cause },
        ErrorKind::ParsingError(_) => SourceError::Malformed(cause),
        _ => SourceError::Backend(cause),
    }
}

/// The URL as lapin wants it, with the configured credentials.
fn amqp_uri(
    config: &RabbitSourceConfig,
    creds: Option<&Credentials>,
) -> Result<lapin::uri::AMQPUri, SourceError> {
    // The parse error may quote the URL, so it is not passed on.
    let mut uri: lapin::uri::AMQPUri = config
        .url
        .parse()
        .map_err(|_| SourceError::Config("the url is not a valid AMQP URL".into()))?;
    if let Some(c) = creds {
        uri.authority.userinfo.username = c.username.clone();
        uri.authority.userinfo.password = c.password.clone();
    }
    Ok(uri)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::NameQuery;

    #[test]
    fn a_refused_queue_is_counted_and_unknown_to_a_glob_a_missing_one_only_counted() {
        let mut amqp = Amqp::default();
        let names = ["jobs.a", "jobs.b", "jobs.c"];
        let outcomes = vec![
            Some(DeclareOutcome::Found {
                ready: 3,
                consumers: 1,
            }),
            Some(DeclareOutcome::Refused),
            Some(DeclareOutcome::Missing),
        ];
        let out = amqp.report("s", "v", "user \"u\"", &names, outcomes);
        let found: Vec<(&str, Option<u64>)> = out
            .queues
            .iter()
            .map(|q| (q.name.as_str(), q.ready))
            .collect();
        assert_eq!(found, [("jobs.a", Some(3))]);
        assert_eq!(out.queues[0].depth, None);
        assert_eq!(out.partial_errors, [Reason::Auth, Reason::NotFound]);

        let query = |text: &'static str, vhost: Option<&'static str>| {
            let selects: &'static dyn Fn(&str) -> bool = if text.ends_with('*') {
                &|n: &str| n.starts_with("jobs.")
            } else {
                &|n: &str| n == "jobs.b"
            };
            NameQuery {
                text,
                is_glob: text.ends_with('*'),
                literal_prefix: text.trim_end_matches('*'),
                selects,
                vhost,
                preset: None,
            }
        };
        let gap = out.coverage.vouch(&query("jobs.*", None)).unwrap_err();
        assert_eq!(
            gap.cause,
            "user \"u\" may not read queue \"jobs.b\" in vhost \"v\" (RabbitMQ refused its \
             passive declare), so it is unknown"
        );
        assert!(out.coverage.vouch(&query("jobs.b", Some("v"))).is_err());
        // A missing queue is no gap: RabbitMQ keeps a drained queue, so it
        // is not there (NOT_FOUND), not unknown.
        assert_eq!(out.coverage.gaps().len(), 1);
    }
}
