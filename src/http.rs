//! The HTTP listener: `/metrics`, `/healthz`, `/readyz`, a landing page and
//! the KEDA scaler's decisions ([`scalers`]). Handlers only read snapshots
//! and telemetry; none of them reaches a backend. Optionally HTTPS ([`tls`])
//! and basic auth ([`auth`]), configured under `web:`.

pub mod auth;
pub mod scalers;
pub mod tls;

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use tower_http::compression::CompressionLayer;

use crate::config::WebConfig;
use crate::crypto::PemFileError;
use crate::exposition::{Exposition, Format, accepts_gzip};
use crate::hub::Hub;
use crate::shutdown::Shutdown;
use crate::telemetry::Telemetry;

/// Shared state of the HTTP handlers.
#[derive(Debug, Clone)]
pub struct HttpState {
    /// Renders `/metrics`.
    pub exposition: Arc<Exposition>,
    /// For readiness and the landing page.
    pub hub: Hub,
    /// The scaler's recorded decisions, for `/scalers`.
    pub telemetry: Arc<Telemetry>,
}

/// What `web:` asks of the listener, loaded once at startup.
#[derive(Clone, Default)]
pub struct HttpSecurity {
    /// Serve HTTPS with this config.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Require basic auth (except on [`auth::OPEN_PATHS`]).
    pub auth: Option<Arc<auth::BasicAuth>>,
    /// `web.http_server_config.headers`, added to every response.
    pub headers: Arc<Vec<(HeaderName, HeaderValue)>>,
}

impl std::fmt::Debug for HttpSecurity {
    // Shows what is on, never the key material the TLS config holds.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpSecurity")
            .field("tls", &self.tls.is_some())
            .field("auth", &self.auth)
            .field("headers", &self.headers)
            .finish()
    }
}

impl HttpSecurity {
    /// Reads the TLS files and sets up basic auth.
    pub fn from_config(web: &WebConfig) -> Result<HttpSecurity, HttpError> {
        let tls = match &web.tls_server_config {
            Some(cfg) => Some(Arc::new(tls::server_config(cfg)?)),
            None => None,
        };
        let auth = auth::BasicAuth::new(&web.basic_auth_users)?.map(Arc::new);
        let headers = web
            .http_server_config
            .headers
            .iter()
            .map(|(name, value)| {
                // The config checked names and values at load; a failure
                // here is still an error, not a panic.
                let bad = || HttpError::Header { name: name.clone() };
                Ok((
                    HeaderName::try_from(name.as_str()).map_err(|_| bad())?,
                    HeaderValue::try_from(value.as_str()).map_err(|_| bad())?,
                ))
            })
            .collect::<Result<Vec<_>, HttpError>>()?;
        Ok(HttpSecurity {
            tls,
            auth,
            headers: Arc::new(headers),
        })
    }
}

/// Builds the router (gzip when the client accepts it), behind basic auth
/// when `auth` is set, adding `headers` to every response.
pub fn router(
    state: HttpState,
    auth: Option<Arc<auth::BasicAuth>>,
    headers: Arc<Vec<(HeaderName, HeaderValue)>>,
) -> Router {
    let router = Router::new()
        .route("/", get(landing))
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/scalers", get(scalers::page))
        .route("/api/v1/scalers", get(scalers::api));
    // Around every route and the fallback: an unauthenticated request is
    // refused before any work, and unknown paths answer 401, not 404, as
    // with exporter-toolkit.
    let router = match auth {
        Some(a) => router.layer(axum::middleware::from_fn_with_state(a, auth::require)),
        None => router,
    };
    // Outside auth, so a 401 carries them too (as with exporter-toolkit).
    let router = if headers.is_empty() {
        router
    } else {
        router.layer(axum::middleware::map_response_with_state(
            headers,
            add_headers,
        ))
    };
    router
        .layer(
            CompressionLayer::new()
                .gzip(true)
                .no_br()
                .no_deflate()
                .no_zstd(),
        )
        .with_state(state)
}

/// Adds `web.http_server_config.headers` to a response.
async fn add_headers(
    State(headers): State<Arc<Vec<(HeaderName, HeaderValue)>>>,
    mut response: Response,
) -> Response {
    for (name, value) in headers.iter() {
        response.headers_mut().insert(name.clone(), value.clone());
    }
    response
}

/// A listener problem.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// The address could not be bound.
    #[error(transparent)]
    Bind(#[from] crate::listen::BindError),
    /// The server failed while running.
    #[error("HTTP server failed: {0}")]
    Serve(#[source] std::io::Error),
    /// A `web.tls_server_config` file cannot be used.
    #[error("web.tls_server_config.{field}: {error}")]
    TlsFile {
        /// The config field naming the file.
        field: &'static str,
        /// Why.
        #[source]
        error: PemFileError,
    },
    /// rustls refused the certificates (a key that does not match, ...).
    #[error("web.tls_server_config.{field}: {error}")]
    Tls {
        /// The config field most likely at fault.
        field: &'static str,
        /// rustls' error (never key material).
        #[source]
        error: rustls::Error,
    },
    /// A `web.http_server_config.headers` entry is not a valid header.
    #[error("web.http_server_config.headers.{name}: not a valid HTTP header")]
    Header {
        /// The header's name as written.
        name: String,
    },
    /// Basic auth could not be set up.
    #[error(transparent)]
    Auth(#[from] auth::NoRandomness),
}

/// Serves until shutdown; in-flight requests are given time to finish.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: HttpState,
    security: HttpSecurity,
    shutdown: Shutdown,
) -> Result<(), HttpError> {
    let app = router(state, security.auth, security.headers);
    let mut stop = shutdown.clone();
    let signal = async move { stop.recv().await };
    match security.tls {
        // No Nagle delay: a scrape's last small write (the live part after
        // the cached one) otherwise waited for the client's delayed ACK,
        // 40 ms, which set the p99 of plain scrapes in the benchmark.
        None => axum::serve(
            axum::serve::ListenerExt::tap_io(listener, |tcp| {
                // Best effort: a socket that refuses keeps Nagle.
                let _ = tcp.set_nodelay(true);
            }),
            app,
        )
        .with_graceful_shutdown(signal)
        .await
        .map_err(HttpError::Serve),
        Some(config) => {
            let listener =
                tls::TlsListener::new(listener, config, shutdown).map_err(HttpError::Serve)?;
            axum::serve(listener, app)
                .with_graceful_shutdown(signal)
                .await
                .map_err(HttpError::Serve)
        }
    }
}

/// A rendered `/metrics` body.
enum MetricsBody {
    /// Already gzip-compressed.
    Gzip(Vec<u8>),
    /// Plain text: the cached snapshot part and the live part.
    Plain(crate::exposition::Body),
}

async fn metrics(State(state): State<HttpState>, headers: HeaderMap) -> Response {
    let header_str = |name| {
        headers
            .get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
    };
    let format = Format::negotiate(header_str(header::ACCEPT));
    let gzip = accepts_gzip(header_str(header::ACCEPT_ENCODING));
    // Encoding thousands of series is CPU work; keep it off the reactor.
    let exposition = state.exposition.clone();
    let rendered = tokio::task::spawn_blocking(move || {
        // The gzip body reuses the snapshot part compressed once per
        // snapshot. If compression fails, the plain body is served (and the
        // compression layer compresses it).
        if gzip && let Some(gz) = exposition.render_gzip(format)? {
            return Ok(MetricsBody::Gzip(gz));
        }
        exposition.render(format).map(MetricsBody::Plain)
    })
    .await;
    let content_type = (header::CONTENT_TYPE, format.content_type());
    match rendered {
        // With Content-Encoding set, the compression layer leaves it alone.
        Ok(Ok(MetricsBody::Gzip(gz))) => (
            [
                content_type,
                (header::CONTENT_ENCODING, "gzip"),
                (header::VARY, "accept-encoding"),
            ],
            gz,
        )
            .into_response(),
        Ok(Ok(MetricsBody::Plain(body))) => {
            // Two chunks, so the cached part (megabytes with thousands of
            // queues) is sent without a copy per scrape.
            let len = body.len();
            let chunks = [body.cached, body.live].map(Ok::<_, std::convert::Infallible>);
            (
                [content_type],
                [(header::CONTENT_LENGTH, len.to_string())],
                axum::body::Body::from_stream(futures_util::stream::iter(chunks)),
            )
                .into_response()
        }
        // Never a truncated body: a scraper would take it for missing series.
        Ok(Err(e)) => rendering_failed(&e),
        Err(e) => rendering_failed(&e),
    }
}

fn rendering_failed(error: &dyn std::error::Error) -> Response {
    tracing::error!(error = %error, "rendering /metrics failed");
    (StatusCode::INTERNAL_SERVER_ERROR, "rendering failed\n").into_response()
}

async fn healthz() -> &'static str {
    "ok\n"
}

/// Ready once every source has finished its first poll, whether it
/// succeeded or not: a down backend is reported through `source_up`, and
/// taking the exporter out of rotation would hide exactly that.
async fn readyz(State(state): State<HttpState>) -> Response {
    let mut body = String::new();
    for s in state.hub.snapshots() {
        let status = match (s.polled, s.up) {
            (false, _) => "pending",
            (true, true) => "up",
            (true, false) => "down",
        };
        body.push_str(&format!("{} {} {}\n", s.source, s.kind.as_str(), status));
    }
    if state.hub.all_polled() {
        (StatusCode::OK, body).into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, body).into_response()
    }
}

async fn landing(State(state): State<HttpState>) -> Html<String> {
    let mut rows = String::new();
    for s in state.hub.snapshots() {
        let status = if s.up {
            "up"
        } else if s.polled {
            "down"
        } else {
            "pending"
        };
        rows.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            html_escape(&s.source),
            s.kind.as_str(),
            status,
            s.queues.len()
        ));
    }
    Html(format!(
        "<!doctype html><html><head><title>queue-exporter</title></head><body>\
         <h1>queue-exporter {}</h1>\
         <ul><li><a href=\"metrics\">/metrics</a></li><li><a href=\"healthz\">/healthz</a></li>\
         <li><a href=\"readyz\">/readyz</a></li><li><a href=\"scalers\">/scalers</a></li></ul>\
         <table border=\"1\"><tr><th>source</th><th>type</th><th>status</th><th>queues</th></tr>{rows}</table>\
         </body></html>",
        env!("CARGO_PKG_VERSION")
    ))
}

/// `s` safe inside HTML text and attribute values.
pub fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}
