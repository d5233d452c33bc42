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
use crate::scaler::selector::QueueSelector;

/// Where and what to read.
#[derive(Debug, Clone)]
pub struct Source {
    /// Prometheus' base URL, e.g. `http://prometheus:9090`.
    pub url: String,
    /// The queue's name (its `queue` label), or a glob of names as the
    /// trigger's `queue` takes it: every queue it matches is read, and the
    /// replay holds all their jobs in one queue.
    pub queue: String,
    /// The exporter's source (its `source` label), when several have the queue.
    pub source: Option<String>,
    /// The job library (its `preset` label), when queues of two libraries
    /// share a name.
    pub preset: Option<String>,
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

/// Each queue's series, by queue name.
type ByQueue = BTreeMap<String, Series>;

/// What was read: the trace, and the queues it sums.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// The queues' traffic, as one queue's.
    pub trace: Trace,
    /// The queues read (one, or those a glob matched).
    pub queues: Vec<String>,
    /// The `preset` labels of their series (none for plain keys): the job
    /// library a trigger counting job states reads them as.
    pub presets: Vec<String>,
    /// Whether the service times are the exporter's own measurement
    /// (`queue_service_time_seconds`), not `--processing-time` alone.
    pub service_measured: bool,
}

/// Reads the queue's trace from Prometheus.
pub fn read(source: &Source) -> Result<Recorded, PrometheusError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| PrometheusError(format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(read_async(source))
}

/// A label value quoted for PromQL (JSON's string quoting is PromQL's).
fn quote(s: &str) -> String {
    serde_json::Value::String(s.to_owned()).to_string()
}

/// The label matchers of the source and preset, each with a leading comma.
fn scope(source: &Source) -> String {
    let mut m = String::new();
    if let Some(s) = &source.source {
        m.push_str(&format!(",source={}", quote(s)));
    }
    if let Some(p) = &source.preset {
        m.push_str(&format!(",preset={}", quote(p)));
    }
    m
}

/// The label matchers of the queues read: `queue="name"` for one, a
/// regex of the names (each escaped, so only they match) for several.
fn matchers(source: &Source, queues: &[String]) -> String {
    let queue = match queues {
        [one] => format!("queue={}", quote(one)),
        many => {
            let names: Vec<String> = many.iter().map(|q| regex::escape(q)).collect();
            format!("queue=~{}", quote(&names.join("|")))
        }
    };
    format!("{queue}{}", scope(source))
}

/// The queues `source.queue` names: itself, or where it is a glob, every
/// queue with a `queue_depth` sample in the period that the exporter's
/// own selector ([`QueueSelector`], the trigger's `queue`) matches.
async fn queues(client: &Client, source: &Source) -> Result<Vec<String>, PrometheusError> {
    let selector = QueueSelector::new(&source.queue);
    if !selector.is_glob() {
        return Ok(vec![source.queue.clone()]);
    }
    let series = format!("queue_depth{{queue!=\"\"{}}}", scope(source));
    let names: Vec<String> = client
        .label_values(source, "queue", &series)
        .await?
        .into_iter()
        .filter(|q| selector.matches(q))
        .collect();
    if names.is_empty() {
        return Err(PrometheusError(format!(
            "{}: no queue_depth{{{}}} series from {} to {} has a queue matching the glob {}",
            source.url,
            scope(source).trim_start_matches(','),
            rfc3339(source.from),
            rfc3339(source.to),
            quote(&source.queue)
        )));
    }
    Ok(names)
}

async fn read_async(source: &Source) -> Result<Recorded, PrometheusError> {
    let client = Client::new(source)?;
    let queues = queues(&client, source).await?;
    let m = matchers(source, &queues);
    let w = format!("{}s", source.step.round().max(1.0));
    let depth = client
        .by_queue(
            source,
            &format!(
                "sum by (queue) (last_over_time(queue_depth{{{m},state=~\"|waiting\"}}[{w}]))"
            ),
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
        .by_queue(
            source,
            &format!("avg by (queue) (last_over_time(queue_service_time_seconds{{{m}}}[{w}]))"),
        )
        .await?;
    if service.is_empty() && source.processing_time.is_none() {
        return Err(PrometheusError(format!(
            "{}: queue_service_time_seconds{{{m}}} has no sample (the exporter measures no service time for this queue): give --processing-time",
            source.url
        )));
    }
    let rows = rows(source, &depth, &arrivals, &service);
    let trace = trace::from_rows(&source.url, &rows).map_err(|e| PrometheusError(e.to_string()))?;
    let presets = client
        .label_values(source, "preset", &format!("queue_depth{{{m}}}"))
        .await?;
    Ok(Recorded {
        trace,
        queues,
        presets,
        service_measured: !service.is_empty(),
    })
}

/// Where a queue's arrivals come from, as the exporter counts them.
enum Arrivals {
    /// `queue_messages_published_total`: every job added, counted where
    /// it is added (RabbitMQ's publishes, BullMQ's and Bull's `id`
    /// counter, a stream's entries added, a `counters: enqueued` key).
    Published(ByQueue),
    /// `queue_jobs_processed_total` with `queue_depth`: what came in is
    /// what is held more plus what was taken out (a plain key with
    /// `counters: processed`, the libraries that keep totals).
    Flow(ByQueue),
}

/// The queues' arrivals series: the published total where the exporter
/// has one for the queues, else the processed total; with neither, an
/// error naming both.
async fn arrivals(
    client: &Client,
    source: &Source,
    m: &str,
    w: &str,
) -> Result<Arrivals, PrometheusError> {
    let total = |name: &str| format!("sum by (queue) (last_over_time({name}{{{m}}}[{w}]))");
    let published = client
        .by_queue(source, &total("queue_messages_published_total"))
        .await?;
    if !published.is_empty() {
        return Ok(Arrivals::Published(published));
    }
    let processed = client
        .by_queue(source, &total("queue_jobs_processed_total"))
        .await?;
    if processed.is_empty() {
        return Err(PrometheusError(format!(
            "{}: neither queue_messages_published_total{{{m}}} nor queue_jobs_processed_total{{{m}}} has a sample: the arrivals of queue {:?} are not measured",
            source.url, source.queue
        )));
    }
    Ok(Arrivals::Flow(processed))
}

/// Jobs one queue received over the step ending at `t` (ms): from its
/// published total at both ends, or from its processed total and its depth
/// at both ends; `None` where an end has no sample.
fn arrived(
    arrivals: &Arrivals,
    depth: Option<&Series>,
    queue: &str,
    t: i64,
    step_ms: i64,
) -> Option<f64> {
    let at = |s: Option<&Series>, t: i64| s.and_then(|s| s.get(&t)).copied();
    // A reset counter starts again from 0.
    let counted = |c0: f64, c1: f64| if c1 >= c0 { c1 - c0 } else { c1 };
    match arrivals {
        Arrivals::Published(p) => {
            let p = p.get(queue);
            Some(counted(at(p, t - step_ms)?, at(p, t)?))
        }
        Arrivals::Flow(p) => {
            let p = p.get(queue);
            let (d0, d1) = (at(depth, t - step_ms)?, at(depth, t)?);
            Some(counted(at(p, t - step_ms)?, at(p, t)?) + d1 - d0)
        }
    }
}

/// True when `series` has samples at or before `from` and at or after `to`.
fn within(series: Option<&Series>, from: i64, to: i64) -> bool {
    series.is_some_and(|s| s.range(..=from).next().is_some() && s.range(to..).next().is_some())
}

/// Rows at each step after the first, summed over the queues: the jobs
/// that arrived over the step at the queues whose readings tell it, and
/// their service time weighted by those arrivals (the plain mean of the
/// queues measured where none arrived); `None` where no queue tells.
fn rows(
    source: &Source,
    depth: &ByQueue,
    arrivals: &Arrivals,
    service: &ByQueue,
) -> Vec<(f64, Option<f64>, Option<f64>)> {
    let step_ms = (source.step * 1000.0).round() as i64;
    let first = (source.from * 1000.0).round() as i64;
    let last = (source.to * 1000.0).round() as i64;
    let names: std::collections::BTreeSet<&String> = depth.keys().chain(service.keys()).collect();
    let mut out = Vec::new();
    let mut t = first + step_ms;
    while t <= last {
        let (mut came, mut weighted, mut told) = (0.0, 0.0, false);
        let (mut plain, mut measured) = (0.0, 0usize);
        let mut unknown = false;
        for &q in &names {
            let s = service
                .get(q)
                .and_then(|s| s.get(&t))
                .copied()
                .or(source.processing_time);
            if let Some(s) = s {
                plain += s;
                measured += 1;
            }
            match arrived(arrivals, depth.get(q), q, t, step_ms) {
                Some(n) => {
                    let n = n.max(0.0);
                    came += n;
                    told = true;
                    weighted += n * s.unwrap_or(f64::NAN);
                }
                // A queue read before and after this step but not over it
                // (its exporter down, say): the step's arrivals are not
                // known. One that is not there yet, or no more, took none.
                None => unknown |= within(depth.get(q), t - step_ms, t),
            }
        }
        let rate = (told && !unknown).then_some(came / source.step);
        let service = if came > 0.0 && weighted.is_finite() {
            Some(weighted / came)
        } else if came > 0.0 {
            // A queue that took jobs has no service time: unknown.
            None
        } else {
            (measured > 0).then(|| plain / measured as f64)
        };
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

    /// Asks the API's `path` with `params` and returns its `data`; `what`
    /// names the request in errors. `query_range` is POSTed as a form (so
    /// a query naming many queues is never too long for a URL); the label
    /// values API takes only GET, its parameters in the URL.
    async fn api(
        &self,
        source: &Source,
        path: &str,
        params: &[(&str, &str)],
        what: &str,
    ) -> Result<serde_json::Value, PrometheusError> {
        let encode = |s: &str| {
            percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
        };
        let form: Vec<String> = params
            .iter()
            .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
            .collect();
        let url = format!("{}/api/v1/{path}", source.url.trim_end_matches('/'));
        let mut request = if path == "query_range" {
            self.http
                .post(&url)
                .header(
                    reqwest::header::CONTENT_TYPE,
                    "application/x-www-form-urlencoded",
                )
                .body(form.join("&"))
        } else {
            self.http.get(format!("{url}?{}", form.join("&")))
        };
        request = match &self.auth {
            Some(Auth::Bearer(t)) => request.bearer_auth(t),
            Some(Auth::Basic(u, p)) => request.basic_auth(u, Some(p)),
            None => request,
        };
        let fail = |why: String| PrometheusError(format!("{}: {what}: {why}", source.url));
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
        Ok(body["data"].clone())
    }

    /// `query_range` of `query` (summed `by (queue)`) over the source's
    /// period: each queue's step time → value.
    async fn by_queue(&self, source: &Source, query: &str) -> Result<ByQueue, PrometheusError> {
        let (start, end, step) = (
            format!("{:.3}", source.from),
            format!("{:.3}", source.to),
            source.step.to_string(),
        );
        let params = [
            ("query", query),
            ("start", start.as_str()),
            ("end", end.as_str()),
            ("step", step.as_str()),
        ];
        let data = self.api(source, "query_range", &params, query).await?;
        let mut out = ByQueue::new();
        for r in data["result"].as_array().map_or(&[][..], Vec::as_slice) {
            let queue = r["metric"]["queue"].as_str().unwrap_or_default().to_owned();
            let series = out.entry(queue).or_default();
            for pair in r["values"].as_array().map_or(&[][..], Vec::as_slice) {
                let t = pair[0].as_f64();
                let v = pair[1].as_str().and_then(|v| v.parse::<f64>().ok());
                if let (Some(t), Some(v)) = (t, v)
                    && v.is_finite()
                {
                    series.insert((t * 1000.0).round() as i64, v);
                }
            }
        }
        out.retain(|_, s| !s.is_empty());
        Ok(out)
    }

    /// The values of `label` on the series `series` selects within the
    /// source's period.
    async fn label_values(
        &self,
        source: &Source,
        label: &str,
        series: &str,
    ) -> Result<Vec<String>, PrometheusError> {
        let (start, end) = (format!("{:.3}", source.from), format!("{:.3}", source.to));
        let params = [
            ("match[]", series),
            ("start", start.as_str()),
            ("end", end.as_str()),
        ];
        let path = format!("label/{label}/values");
        let data = self.api(source, &path, &params, series).await?;
        Ok(data
            .as_array()
            .map_or(&[][..], Vec::as_slice)
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect())
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
