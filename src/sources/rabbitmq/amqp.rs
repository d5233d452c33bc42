//! Method `amqp`: one connection (lapin, with auto-recovery) and a
//! **passive** `queue.declare` per configured queue. Passive declares never
//! create or change anything. A missing queue answers 404, which closes the
//! channel it was asked on, so declares run on throw-away channels: a
//! channel that saw an error is replaced and the other queues are not
//! disturbed. The reply carries ready messages and consumers only.

use crate::snapshot::Reason;
use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::future::join_all;
use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;
use lapin::{Channel, Connection, ConnectionProperties, ErrorKind};

use super::credentials::{self, Credentials};
use super::filter::QueueFilter;
use super::sample;
use crate::config::{RabbitSourceConfig, Redacted};
use crate::snapshot::QueueSample;
use crate::sources::{PollOutput, SourceError};

/// Channels declaring at once; each works through the queue list in turn.
const CHANNELS_IN_FLIGHT: usize = 8;

/// State of the AMQP method between polls.
#[derive(Default)]
pub struct Amqp {
    /// The connection, once made (boxed: it is large). Lapin recovers it
    /// after network errors; if recovery gives up, the next poll makes a new one.
    conn: Option<Box<Connection>>,
    /// Queues missing or refused at the last poll, so that a change is
    /// logged once rather than at every poll.
    unseen: HashSet<String>,
}

impl std::fmt::Debug for Amqp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Amqp")
            .field(
                "connected",
                &self.conn.as_ref().map(|c| c.status().connected()),
            )
            .finish()
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
        let target = Redacted(&config.url).to_string();
        let secret = creds
            .as_ref()
            .map(|c| c.password.clone())
            .unwrap_or_default();
        let uri = amqp_uri(config, creds.as_ref())?;
        let vhost = uri.vhost.clone();
        let conn = self.connection(config, uri, &target, &secret).await?;

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
            conn,
            names: &names,
            next: &next,
            timeout: config.timeout,
            target: &target,
            secret: &secret,
        };
        let results = join_all((0..workers).map(|_| ctx.run())).await;

        let mut outcomes: Vec<Option<DeclareOutcome>> = vec![None; names.len()];
        for r in results {
            for (i, o) in r? {
                outcomes[i] = Some(o);
            }
        }
        let mut out = PollOutput::default();
        let mut unseen = HashSet::new();
        for (name, outcome) in names.iter().zip(outcomes) {
            match outcome {
                Some(DeclareOutcome::Found { ready, consumers }) => {
                    let mut q = QueueSample::named(*name);
                    q.vhost = Some(vhost.clone());
                    // A passive declare reports ready messages only: depth
                    // (ready + unacked) stays unknown rather than invented.
                    q.ready = Some(u64::from(ready));
                    q.consumers = Some(u64::from(consumers));
                    out.queues.push(q);
                }
                Some(DeclareOutcome::Missing) => {
                    if !self.unseen.contains(*name) {
                        tracing::warn!(source = %config.name, queue = %name, vhost = %vhost, "queue not found; counted as not_found while it is missing");
                    }
                    unseen.insert(name.to_string());
                    out.partial_errors.push(Reason::NotFound);
                }
                Some(DeclareOutcome::Refused) => {
                    if !self.unseen.contains(*name) {
                        tracing::warn!(source = %config.name, queue = %name, vhost = %vhost, "access to queue refused; counted as auth");
                    }
                    unseen.insert(name.to_string());
                    out.partial_errors.push(Reason::Auth);
                }
                None => {}
            }
        }
        self.unseen = unseen;
        out.stats = sample::stats(&out.queues, std::slice::from_ref(&vhost));
        Ok(out)
    }

    /// The live connection, connecting first if there is none.
    async fn connection(
        &mut self,
        config: &RabbitSourceConfig,
        uri: lapin::uri::AMQPUri,
        target: &str,
        secret: &str,
    ) -> Result<&Connection, SourceError> {
        if let Some(c) = &self.conn {
            let status = c.status();
            if status.reconnecting() || status.connecting() {
                return Err(SourceError::Connect {
                    target: target.to_string(),
                    cause: "connection lost; lapin is recovering it".into(),
                });
            }
            if !status.connected() {
                self.conn = None;
            }
        }
        if self.conn.is_none() {
            let tls = lapin::tcp::OwnedTLSConfig {
                identity: None,
                cert_chain: match &config.tls.ca_file {
                    Some(path) => Some(std::fs::read_to_string(path).map_err(|e| {
                        SourceError::Config(format!(
                            "cannot read tls.ca_file {}: {e}",
                            path.display()
                        ))
                    })?),
                    None => None,
                },
            };
            let runtime = lapin::runtime::default_runtime()
                .map_err(|e| SourceError::Config(format!("no async runtime for lapin: {e}")))?;
            let props = ConnectionProperties::default()
                .with_connection_name(format!("queue-exporter {}", config.name).into())
                .enable_auto_recover()
                // Few, quick TCP retries: a broker that stays down is
                // reported by the next poll, not retried in the background.
                .configure_backoff(|b| {
                    b.with_min_delay(Duration::from_millis(100))
                        .with_max_delay(Duration::from_secs(1))
                        .with_max_times(3)
                });
            crate::crypto::install_crypto_provider();
            let connect = Connection::connect_uri_with_config(uri, props, tls, runtime);
            let conn = match tokio::time::timeout(config.timeout, connect).await {
                Ok(Ok(c)) => c,
                Ok(Err(e)) => return Err(map_error(&e, target, secret)),
                Err(_) => return Err(SourceError::Timeout(config.timeout)),
            };
            tracing::debug!(source = %config.name, %target, "AMQP connection open");
            self.conn = Some(Box::new(conn));
        }
        self.conn.as_deref().ok_or_else(|| SourceError::Connect {
            target: target.to_string(),
            cause: "no connection".into(),
        })
    }
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
    /// Takes queues from the shared list until it is empty.
    async fn run(&self) -> Result<Vec<(usize, DeclareOutcome)>, SourceError> {
        let mut channel: Option<Channel> = None;
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
        if let Some(ch) = channel
            && ch.status().connected()
        {
            let _ = tokio::time::timeout(self.timeout, ch.close(200, "done".into())).await;
        }
        result.map(|()| done)
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
