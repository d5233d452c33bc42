//! Bounded HTTP GETs for the management API and the Prometheus plugin: one
//! timeout per request (connect, headers and body), a cap on the body size,
//! and errors whose text never carries credentials.

use std::time::Duration;

use futures_util::StreamExt;

use super::credentials::Credentials;
use crate::config::RabbitSourceConfig;
use crate::sources::SourceError;

/// A reqwest client with the source's TLS settings and bounds.
#[derive(Debug, Clone)]
pub struct HttpClient {
    /// The underlying client (connection pool, TLS roots).
    client: reqwest::Client,
    /// Bound on one request, from connecting to the last body byte.
    timeout: Duration,
    /// Largest body accepted.
    max_bytes: u64,
    /// What to check when an `https://` server closes the connection
    /// before answering (see [`certificate_hint`]).
    certificate_hint: &'static str,
}

/// Where [`HttpClient::get_each`] puts a body as it arrives.
pub trait BodySink {
    /// The announced length (capped at 8 MiB; 64 KiB when unknown), before
    /// the first chunk.
    fn reserve(&mut self, _len: usize) {}
    /// The next chunk of the body.
    fn chunk(&mut self, chunk: &[u8]) -> Result<(), SourceError>;
}

/// The whole body in memory.
impl BodySink for Vec<u8> {
    fn reserve(&mut self, len: usize) {
        Vec::reserve(self, len);
    }

    fn chunk(&mut self, chunk: &[u8]) -> Result<(), SourceError> {
        self.extend_from_slice(chunk);
        Ok(())
    }
}

/// Why a GET failed, kept apart from [`SourceError`] so callers can react to
/// particular statuses (a 404 for one vhost, a 400 for a server-side regex).
#[derive(Debug)]
pub enum FetchError {
    /// The server answered with this non-success status.
    Status(u16),
    /// Anything else, already mapped.
    Other(SourceError),
}

impl FetchError {
    /// The error to report when the caller has no special handling.
    pub fn into_source_error(self, url: &reqwest::Url) -> SourceError {
        match self {
            FetchError::Status(401 | 403) => SourceError::Auth {
                target: display_url(url),
                cause: "the server refused the credentials or the user lacks permission".into(),
            },
            FetchError::Status(status) => SourceError::HttpStatus {
                status,
                target: display_url(url),
            },
            FetchError::Other(e) => e,
        }
    }
}

impl HttpClient {
    /// The client kept in `slot`, built on first use (so a bad `ca_file` is
    /// reported by a poll, not at start-up) and reused by later polls.
    pub fn lazily(
        slot: &mut Option<HttpClient>,
        config: &RabbitSourceConfig,
    ) -> Result<HttpClient, SourceError> {
        if let Some(c) = slot {
            return Ok(c.clone());
        }
        let c = HttpClient::new(config)?;
        *slot = Some(c.clone());
        Ok(c)
    }

    /// Builds the client; reads `tls.ca_file`, `tls.cert_file` and `tls.key_file` if set.
    pub fn new(config: &RabbitSourceConfig) -> Result<Self, SourceError> {
        Self::with_bounds(config, config.timeout, config.max_response_bytes)
    }

    /// Builds a client with explicit bounds (the default-source probe uses a short timeout).
    pub fn with_bounds(
        config: &RabbitSourceConfig,
        timeout: Duration,
        max_bytes: u64,
    ) -> Result<Self, SourceError> {
        crate::crypto::install_crypto_provider();
        let mut builder = reqwest::Client::builder()
            .connect_timeout(timeout)
            .timeout(timeout)
            .user_agent(concat!("queue-exporter/", env!("CARGO_PKG_VERSION")))
            .pool_max_idle_per_host(4);
        if let Some(path) = &config.tls.ca_file {
            let pem = std::fs::read(path).map_err(|e| {
                SourceError::Config(format!("cannot read tls.ca_file {}: {e}", path.display()))
            })?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|_| {
                SourceError::Config(format!(
                    "tls.ca_file {} holds no valid PEM certificate",
                    path.display()
                ))
            })?;
            for cert in certs {
                builder = builder.add_root_certificate(cert);
            }
        }
        if let (Some(cert), Some(key)) = (&config.tls.cert_file, &config.tls.key_file) {
            let read = |field: &str, path: &std::path::Path| {
                std::fs::read(path).map_err(|e| {
                    SourceError::Config(format!("cannot read tls.{field} {}: {e}", path.display()))
                })
            };
            // reqwest wants the certificate chain and the key in one PEM buffer.
            let mut pem = read("cert_file", cert)?;
            pem.push(b'\n');
            pem.extend(read("key_file", key)?);
            let identity = reqwest::Identity::from_pem(&pem).map_err(|_| {
                SourceError::Config(format!(
                    "tls.cert_file {} and tls.key_file {} are not a PEM certificate and its private key",
                    cert.display(),
                    key.display()
                ))
            })?;
            builder = builder.identity(identity);
        }
        if config.tls.insecure_skip_verify {
            builder = builder.danger_accept_invalid_certs(true);
        }
        let client = builder.build().map_err(|e| {
            SourceError::Config(format!("cannot build the HTTP client: {}", chain(&e)))
        })?;
        Ok(HttpClient {
            client,
            timeout,
            max_bytes,
            certificate_hint: certificate_hint(config),
        })
    }

    /// GETs `url` and returns the whole body, at most `max_bytes` long.
    pub async fn get(
        &self,
        url: &reqwest::Url,
        creds: Option<&Credentials>,
    ) -> Result<Vec<u8>, FetchError> {
        let mut body = Vec::new();
        self.get_each(url, creds, &mut body).await?;
        Ok(body)
    }

    /// GETs `url` and hands the body to `sink` chunk by chunk as it arrives,
    /// so that a caller can parse while the server is still sending (the
    /// Prometheus method hides its whole parse behind the transfer that
    /// way). Bounds, timeouts and error mapping are those of [`Self::get`];
    /// an error from `sink` ends the request and is returned as it is.
    pub async fn get_each(
        &self,
        url: &reqwest::Url,
        creds: Option<&Credentials>,
        sink: &mut impl BodySink,
    ) -> Result<(), FetchError> {
        let secret = creds.map(|c| c.password.as_str()).unwrap_or("");
        // reqwest's own timeout covers the body too; this outer one is a
        // second guard in case a body stream stalls between chunks.
        match tokio::time::timeout(self.timeout, self.get_inner(url, creds, sink)).await {
            Ok(result) => result.map_err(|e| match e {
                FetchError::Other(SourceError::Connect { target, cause }) => {
                    FetchError::Other(SourceError::Connect {
                        target,
                        cause: super::credentials::scrub(&cause, secret),
                    })
                }
                FetchError::Other(SourceError::Backend(cause)) => FetchError::Other(
                    SourceError::Backend(super::credentials::scrub(&cause, secret)),
                ),
                other => other,
            }),
            Err(_) => Err(FetchError::Other(SourceError::Timeout(self.timeout))),
        }
    }

    async fn get_inner(
        &self,
        url: &reqwest::Url,
        creds: Option<&Credentials>,
        sink: &mut impl BodySink,
    ) -> Result<(), FetchError> {
        let mut request = self.client.get(url.clone());
        if let Some(c) = creds {
            request = request.basic_auth(&c.username, Some(&c.password));
        }
        let response = request
            .send()
            .await
            .map_err(|e| FetchError::Other(self.map_reqwest(e, url)))?;
        let status = response.status();
        if !status.is_success() {
            return Err(FetchError::Status(status.as_u16()));
        }
        let too_large = || {
            FetchError::Other(SourceError::TooLarge {
                limit: self.max_bytes,
                target: display_url(url),
            })
        };
        if response
            .content_length()
            .is_some_and(|n| n > self.max_bytes)
        {
            return Err(too_large());
        }
        // Trust the announced length for the first allocation only up to 8 MiB.
        sink.reserve(
            response
                .content_length()
                .map_or(64 * 1024, |n| n.min(8 * 1024 * 1024) as usize),
        );
        let mut received = 0u64;
        let mut stream = response.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| FetchError::Other(self.map_reqwest(e, url)))?;
            received += chunk.len() as u64;
            if received > self.max_bytes {
                return Err(too_large());
            }
            sink.chunk(&chunk).map_err(FetchError::Other)?;
        }
        Ok(())
    }

    fn map_reqwest(&self, e: reqwest::Error, url: &reqwest::Url) -> SourceError {
        // The URL is named once, by `target`, without its query.
        let e = e.without_url();
        if e.is_timeout() {
            SourceError::Timeout(self.timeout)
        } else if e.is_connect() || is_tls_failure(&e) {
            SourceError::Connect {
                target: display_url(url),
                cause: chain(&e),
            }
        } else if closed_before_answering(&e) {
            // With TLS 1.3 a server that wants a client certificate may
            // close the connection before the client reads its alert.
            let hint = if url.scheme() == "https" {
                format!(
                    " (the server closed the TLS connection; {})",
                    self.certificate_hint
                )
            } else {
                String::new()
            };
            SourceError::Connect {
                target: display_url(url),
                cause: format!("{}{hint}", chain(&e)),
            }
        } else {
            SourceError::Backend(format!("GET {}: {}", display_url(url), chain(&e)))
        }
    }
}

/// Whether a TLS error is somewhere in the chain (a certificate refused,
/// an alert from the server). Such an error is a connection failure at
/// whatever stage the HTTP client met it: with TLS 1.3 a server refusing the
/// client certificate only says so on the first read, after the handshake
/// looked done to the client. rustls errors travel inside `io::Error`s,
/// whose `source()` skips them, so those are opened too.
fn is_tls_failure(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if err.is::<rustls::Error>() {
            return true;
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && io
                .get_ref()
                .is_some_and(|inner| inner.is::<rustls::Error>())
        {
            return true;
        }
        cur = err.source();
    }
    false
}

/// Whether the broker closed or reset the connection before its answer
/// was complete: hyper's request was cancelled (the pooled connection died
/// before it was sent), the message ended early, or the socket was reset.
/// That is a connection failure, not an answer from the backend.
fn closed_before_answering(e: &(dyn std::error::Error + 'static)) -> bool {
    use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset, UnexpectedEof};
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(h) = err.downcast_ref::<hyper::Error>()
            && (h.is_canceled() || h.is_incomplete_message())
        {
            return true;
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof
            )
        {
            return true;
        }
        cur = err.source();
    }
    false
}

/// What to check when a TLS server closes the connection right after the
/// handshake: TLS 1.3 ends the client's side of the handshake before the
/// server has judged the client certificate, so its refusal can arrive as
/// a reset instead of a readable alert.
pub fn certificate_hint(config: &RabbitSourceConfig) -> &'static str {
    if config.tls.cert_file.is_none() {
        "if it requires a client certificate, set tls.cert_file and tls.key_file"
    } else {
        "it may not accept the client certificate in tls.cert_file"
    }
}

/// The error and its causes, joined. URLs in them carry no credentials:
/// [`base_url`] strips them before any request is built.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        let text = err.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        cur = err.source();
    }
    parts.join(": ")
}

/// `scheme://host:port/path` of a URL: no user info, no query.
pub fn display_url(url: &reqwest::Url) -> String {
    let mut shown = url.clone();
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    shown.set_query(None);
    shown.to_string()
}

/// Parses a configured base URL and strips its user info (credentials are
/// sent as a header instead, and must not end up in error texts).
pub fn base_url(raw: &str) -> Result<reqwest::Url, SourceError> {
    let mut url = reqwest::Url::parse(raw)
        .map_err(|_| SourceError::Config("the url is not a valid URL".into()))?;
    let _ = url.set_username("");
    let _ = url.set_password(None);
    url.set_query(None);
    url.set_fragment(None);
    Ok(url)
}

/// `base` with `segments` appended as path segments; each is percent-encoded,
/// so the vhost `/` becomes `%2F`.
pub fn join(base: &reqwest::Url, segments: &[&str]) -> reqwest::Url {
    let mut url = base.clone();
    if let Ok(mut path) = url.path_segments_mut() {
        path.pop_if_empty();
        for s in segments {
            path.push(s);
        }
    }
    url
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_lose_credentials_and_encode_vhosts() {
        let base = base_url("http://user:secret@host:15672/").unwrap();
        assert_eq!(base.as_str(), "http://host:15672/");
        let u = join(&base, &["api", "queues", "/"]);
        assert_eq!(u.as_str(), "http://host:15672/api/queues/%2F");
        let u = join(
            &base_url("http://h/prefix").unwrap(),
            &["api", "queues", "a b/c"],
        );
        assert_eq!(u.as_str(), "http://h/prefix/api/queues/a%20b%2Fc");
        let mut q = u.clone();
        q.set_query(Some("page=1"));
        assert_eq!(display_url(&q), "http://h/prefix/api/queues/a%20b%2Fc");
    }
}
