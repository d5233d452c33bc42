//! `plan --prometheus URL`: the exporter's own series of one queue, read
//! through Prometheus' `query_range` API and turned into a [`Trace`]: at
//! each step, arrivals per second are the jobs published over the step
//! (`queue_messages_published_total`, where the exporter counts them) or
//! else the jobs processed plus the change in depth
//! (`queue_jobs_processed_total`, `queue_depth` of the `waiting` state or
//! of a queue without states), and the service
//! time is `queue_service_time_seconds` (or `--processing-time` where the
//! exporter measures none). Each series is read with `last_over_time` over
//! one step, so a stretch with no sample stays empty (Prometheus' 5-minute
//! lookback would repeat the last one) and becomes a gap.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use crate::plan::trace::{self, Trace};

/// Where and what to read.
#[derive(Debug, Clone)]
pub struct Source {
    /// Prometheus' base URL, e.g. `http://prometheus:9090`.
    pub url: String,
    /// The queue's name (its `queue` label).
    pub queue: String,
    /// The exporter's source (its `source` label), when several have the queue.
    pub source: Option<String>,
    /// From when (unix seconds).
    pub from: f64,
    /// Until when (unix seconds).
    pub to: f64,
    /// The step, seconds: at most the scrape interval.
    pub step: f64,
    /// The service time to use where the exporter measures none.
    pub processing_time: Option<f64>,
    /// A file holding a bearer token.
    pub bearer_token_file: Option<PathBuf>,
    /// Basic auth: the user, and a file holding the password.
    pub basic_auth: Option<(String, PathBuf)>,
    /// A PEM file of the CA certificates that sign an `https://`
    /// Prometheus' certificate, trusted besides the system's roots.
    pub ca_file: Option<PathBuf>,
    /// A client certificate and its key (PEM files), for a Prometheus that
    /// asks for one (`client_auth_type: RequireAndVerifyClientCert`).
    pub client_cert: Option<(PathBuf, PathBuf)>,
}

/// Why Prometheus could not be read: one line, exit 2.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct PrometheusError(pub String);

/// One series' values by step time (millisecond unix time, exact).
type Series = BTreeMap<i64, f64>;

/// Reads the queue's trace from Prometheus.
pub fn read(source: &Source) -> Result<Trace, PrometheusError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| PrometheusError(format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(read_async(source))
}

/// The label matchers of the queue's series.
fn matchers(source: &Source) -> String {
    let quote = |s: &str| serde_json::Value::String(s.to_owned()).to_string();
    let mut m = format!("queue={}", quote(&source.queue));
    if let Some(s) = &source.source {
        m.push_str(&format!(",source={}", quote(s)));
    }
    m
}

async fn read_async(source: &Source) -> Result<Trace, PrometheusError> {
    let client = Client::new(source)?;
    let m = matchers(source);
    let w = format!("{}s", source.step.round().max(1.0));
    let depth = client
        .range(
            source,
            &format!("sum(last_over_time(queue_depth{{{m},state=~\"|waiting\"}}[{w}]))"),
        )
        .await?;
    if depth.is_empty() {
        return Err(PrometheusError(format!(
            "{}: queue_depth{{{m}}} has no sample from {} to {}",
            source.url,
            rfc3339(source.from),
            rfc3339(source.to)
        )));
    }
    let arrivals = arrivals(&client, source, &m, &w).await?;
    let service = client
        .range(
            source,
            &format!("avg(last_over_time(queue_service_time_seconds{{{m}}}[{w}]))"),
        )
        .await?;
    if service.is_empty() && source.processing_time.is_none() {
        return Err(PrometheusError(format!(
            "{}: queue_service_time_seconds{{{m}}} has no sample (the exporter measures no service time for this queue): give --processing-time",
            source.url
        )));
    }
    let rows = rows(source, &depth, &arrivals, &service);
    trace::from_rows(&source.url, &rows).map_err(|e| PrometheusError(e.to_string()))
}

/// Where a queue's arrivals come from, as the exporter counts them.
enum Arrivals {
    /// `queue_messages_published_total`: every job added, counted where
    /// it is added (RabbitMQ's publishes, BullMQ's and Bull's `id`
    /// counter, a stream's entries added, a `counters: enqueued` key).
    Published(Series),
    /// `queue_jobs_processed_total` with `queue_depth`: what came in is
    /// what is held more plus what was taken out (a plain key with
    /// `counters: processed`, the libraries that keep totals).
    Flow(Series),
}

/// The queue's arrivals series: the published total where the exporter
/// has one for the queue, else the processed total; with neither, an
/// error naming both.
async fn arrivals(
    client: &Client,
    source: &Source,
    m: &str,
    w: &str,
) -> Result<Arrivals, PrometheusError> {
    let total = |name: &str| format!("sum(last_over_time({name}{{{m}}}[{w}]))");
    let published = client
        .range(source, &total("queue_messages_published_total"))
        .await?;
    if !published.is_empty() {
        return Ok(Arrivals::Published(published));
    }
    let processed = client
        .range(source, &total("queue_jobs_processed_total"))
        .await?;
    if processed.is_empty() {
        return Err(PrometheusError(format!(
            "{}: neither queue_messages_published_total{{{m}}} nor queue_jobs_processed_total{{{m}}} has a sample: the arrivals of queue {:?} are not measured",
            source.url, source.queue
        )));
    }
    Ok(Arrivals::Flow(processed))
}

/// Rows at each step after the first: arrivals over the step from the
/// published total at both ends, or from the processed total and the
/// depth at both ends; `None` where an end has no sample.
fn rows(
    source: &Source,
    depth: &Series,
    arrivals: &Arrivals,
    service: &Series,
) -> Vec<(f64, Option<f64>, Option<f64>)> {
    let step_ms = (source.step * 1000.0).round() as i64;
    let first = (source.from * 1000.0).round() as i64;
    let last = (source.to * 1000.0).round() as i64;
    let mut out = Vec::new();
    let mut t = first + step_ms;
    // A reset counter starts again from 0.
    let counted = |c0: f64, c1: f64| if c1 >= c0 { c1 - c0 } else { c1 };
    while t <= last {
        let at = |s: &Series, t: i64| s.get(&t).copied();
        let came = match arrivals {
            Arrivals::Published(p) => match (at(p, t - step_ms), at(p, t)) {
                (Some(p0), Some(p1)) => Some(counted(p0, p1)),
                _ => None,
            },
            Arrivals::Flow(p) => match (
                at(depth, t - step_ms),
                at(depth, t),
                at(p, t - step_ms),
                at(p, t),
            ) {
                (Some(d0), Some(d1), Some(p0), Some(p1)) => Some(counted(p0, p1) + d1 - d0),
                _ => None,
            },
        };
        let rate = came.map(|n| (n / source.step).max(0.0));
        let service = at(service, t).or(source.processing_time);
        // A row holds from its time; arrivals counted over (t - step, t].
        out.push(((t - step_ms) as f64 / 1000.0, rate, service));
        t += step_ms;
    }
    out
}

/// Unix seconds as RFC 3339.
fn rfc3339(s: f64) -> String {
    chrono::DateTime::from_timestamp_millis((s * 1000.0).round() as i64).map_or_else(
        || s.to_string(),
        |d| d.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    )
}

/// An HTTP client of Prometheus' API with the source's credentials.
struct Client {
    http: reqwest::Client,
    auth: Option<Auth>,
}

/// Credentials for Prometheus.
enum Auth {
    Bearer(String),
    Basic(String, String),
}

impl Client {
    fn new(source: &Source) -> Result<Client, PrometheusError> {
        let read = |p: &PathBuf| {
            crate::config::read_secret_file(p)
                .map_err(|e| PrometheusError(format!("{}: cannot read: {e}", p.display())))
        };
        let auth = match (&source.bearer_token_file, &source.basic_auth) {
            (Some(f), _) => Some(Auth::Bearer(read(f)?)),
            (None, Some((user, f))) => Some(Auth::Basic(user.clone(), read(f)?)),
            (None, None) => None,
        };
        let mut builder = reqwest::Client::builder().timeout(Duration::from_secs(60));
        if let Some(path) = &source.ca_file {
            for cert in ca_certificates(path)? {
                builder = builder.add_root_certificate(cert);
            }
        }
        if let Some((cert, key)) = &source.client_cert {
            builder = builder.identity(client_identity(cert, key)?);
        }
        let http = builder
            .build()
            .map_err(|e| PrometheusError(format!("HTTP client: {e}")))?;
        Ok(Client { http, auth })
    }

    /// `query_range` of `query` over the source's period: step time → value.
    async fn range(&self, source: &Source, query: &str) -> Result<Series, PrometheusError> {
        let encode = |s: &str| {
            percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
        };
        let url = format!(
            "{}/api/v1/query_range?query={}&start={:.3}&end={:.3}&step={}",
            source.url.trim_end_matches('/'),
            encode(query),
            source.from,
            source.to,
            source.step
        );
        let mut request = self.http.get(&url);
        request = match &self.auth {
            Some(Auth::Bearer(t)) => request.bearer_auth(t),
            Some(Auth::Basic(u, p)) => request.basic_auth(u, Some(p)),
            None => request,
        };
        let fail = |what: String| PrometheusError(format!("{}: {query}: {what}", source.url));
        let response = request.send().await.map_err(|e| {
            PrometheusError(format!("cannot reach Prometheus at {}: {e}", source.url))
        })?;
        let status = response.status();
        let body: serde_json::Value = response
            .json()
            .await
            .map_err(|e| fail(format!("HTTP {status}, not Prometheus' JSON: {e}")))?;
        if body["status"] != "success" {
            return Err(fail(format!(
                "HTTP {status}: {}",
                body["error"].as_str().unwrap_or("error")
            )));
        }
        let mut out = Series::new();
        let results = body["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for pair in results
            .iter()
            .flat_map(|r| r["values"].as_array().cloned().unwrap_or_default())
        {
            let t = pair[0].as_f64();
            let v = pair[1].as_str().and_then(|v| v.parse::<f64>().ok());
            if let (Some(t), Some(v)) = (t, v)
                && v.is_finite()
            {
                out.insert((t * 1000.0).round() as i64, v);
            }
        }
        Ok(out)
    }
}

/// The certificates of the PEM bundle `path` (`--ca-file`); an unreadable
/// file, or one with no certificate, is an error naming it.
fn ca_certificates(path: &PathBuf) -> Result<Vec<reqwest::Certificate>, PrometheusError> {
    let shown = path.display();
    let pem = std::fs::read(path)
        .map_err(|e| PrometheusError(format!("--ca-file {shown}: cannot read: {e}")))?;
    match reqwest::Certificate::from_pem_bundle(&pem) {
        Ok(certs) if !certs.is_empty() => Ok(certs),
        _ => Err(PrometheusError(format!(
            "--ca-file {shown}: holds no PEM certificate"
        ))),
    }
}

/// The client certificate `cert` with its private key `key` (PEM files,
/// `--cert-file` and `--key-file`); a file that cannot be read, or that
/// holds no certificate or no key, is an error naming it. The key's
/// contents never appear in the error.
fn client_identity(cert: &PathBuf, key: &PathBuf) -> Result<reqwest::Identity, PrometheusError> {
    let read = |flag: &str, path: &PathBuf| {
        std::fs::read(path)
            .map_err(|e| PrometheusError(format!("{flag} {}: cannot read: {e}", path.display())))
    };
    let cert_pem = read("--cert-file", cert)?;
    let key_pem = read("--key-file", key)?;
    if !matches!(reqwest::Certificate::from_pem_bundle(&cert_pem), Ok(c) if !c.is_empty()) {
        return Err(PrometheusError(format!(
            "--cert-file {}: holds no PEM certificate",
            cert.display()
        )));
    }
    let has_key = |pem: &[u8]| {
        String::from_utf8_lossy(pem)
            .lines()
            .any(|l| l.starts_with("-----BEGIN") && l.contains("PRIVATE KEY-----"))
    };
    if !has_key(&key_pem) {
        return Err(PrometheusError(format!(
            "--key-file {}: holds no PEM private key",
            key.display()
        )));
    }
    let mut both = key_pem;
    both.push(b'\n');
    both.extend_from_slice(&cert_pem);
    reqwest::Identity::from_pem(&both).map_err(|_| {
        PrometheusError(format!(
            "--cert-file {} with --key-file {}: not a certificate and its key (RSA, EC or PKCS#8)",
            cert.display(),
            key.display()
        ))
    })
}

/// Now, unix seconds.
pub fn now() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}
