//! Helpers shared by the `scaler_*` tests: a gRPC client generated from the
//! same proto the server uses, metadata builders, KEDA's replica arithmetic,
//! and Redis test-data writers; and, for the `faults_*` tests, an
//! [`Observer`] that records `/metrics` and `GetMetrics` over time.
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use queue_exporter::scaler::proto::external_scaler_client::ExternalScalerClient;
use queue_exporter::scaler::proto::{GetMetricSpecResponse, GetMetricsRequest, ScaledObjectRef};
use tonic::transport::Channel;

use crate::support::{RabbitVhost, TestApp, indent, sample};

/// A client for the app's scaler.
pub type Client = ExternalScalerClient<Channel>;

/// Connects a plaintext client to `addr`.
pub async fn connect(addr: SocketAddr) -> Client {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .expect("endpoint")
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .expect("connect to scaler");
    ExternalScalerClient::new(channel)
}

/// Connects a plaintext client to the app's scaler.
pub async fn client(app: &TestApp) -> Client {
    connect(app.app().grpc_addr.expect("gRPC enabled")).await
}

/// Trigger metadata from pairs: the one place the scaler tests turn
/// `[("queue", "work-queue"), ...]` into what KEDA sends.
pub fn meta(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A ScaledObjectRef as KEDA sends it: its own keys included.
pub fn obj(pairs: &[(&str, &str)]) -> ScaledObjectRef {
    let mut m = meta(pairs);
    m.entry("scalerAddress".into())
        .or_insert_with(|| "queue-exporter.keda:9732".into());
    ScaledObjectRef {
        name: "worker".into(),
        namespace: "default".into(),
        scaler_metadata: m,
    }
}

/// `GetMetricSpec`, returning the only spec.
pub async fn spec(
    c: &mut Client,
    pairs: &[(&str, &str)],
) -> Result<(String, i64, f64), tonic::Status> {
    spec_of(c, obj(pairs)).await
}

async fn spec_of(c: &mut Client, r: ScaledObjectRef) -> Result<(String, i64, f64), tonic::Status> {
    let r: GetMetricSpecResponse = c.get_metric_spec(r).await?.into_inner();
    assert_eq!(r.metric_specs.len(), 1, "exactly one metric spec");
    let s = &r.metric_specs[0];
    Ok((s.metric_name.clone(), s.target_size, s.target_size_float))
}

/// `GetMetrics` with the name from `GetMetricSpec` (as KEDA strips `sN-`),
/// returning `(int, float)` of the only value.
pub async fn metrics(c: &mut Client, pairs: &[(&str, &str)]) -> Result<(i64, f64), tonic::Status> {
    value_of(c, obj(pairs)).await
}

/// `GetMetrics` for the ScaledObject `r` (its own name and namespace).
pub async fn metrics_for(c: &mut Client, r: ScaledObjectRef) -> Result<(i64, f64), tonic::Status> {
    value_of(c, r).await
}

async fn value_of(c: &mut Client, r: ScaledObjectRef) -> Result<(i64, f64), tonic::Status> {
    let (name, _, _) = spec_of(c, r.clone()).await?;
    metrics_of(c, r, &name).await
}

/// `GetMetrics` with an explicit metric name.
pub async fn metrics_named(
    c: &mut Client,
    pairs: &[(&str, &str)],
    name: &str,
) -> Result<(i64, f64), tonic::Status> {
    metrics_of(c, obj(pairs), name).await
}

async fn metrics_of(
    c: &mut Client,
    r: ScaledObjectRef,
    name: &str,
) -> Result<(i64, f64), tonic::Status> {
    let r = c
        .get_metrics(GetMetricsRequest {
            scaled_object_ref: Some(r),
            metric_name: name.to_string(),
        })
        .await?
        .into_inner();
    assert_eq!(
        r.metric_values.len(),
        1,
        "exactly one metric value (the HPA sums them)"
    );
    let v = &r.metric_values[0];
    Ok((v.metric_value, v.metric_value_float))
}

/// `IsActive`.
pub async fn active(c: &mut Client, pairs: &[(&str, &str)]) -> Result<bool, tonic::Status> {
    Ok(c.is_active(obj(pairs)).await?.into_inner().result)
}

/// The value KEDA uses: the float if > 0, else the int.
pub fn keda_value(int: i64, float: f64) -> f64 {
    if float > 0.0 { float } else { int as f64 }
}

/// Replicas the HPA sets for an `AverageValue` target: ceil(value / target).
pub fn keda_replicas(value: f64, target: f64) -> u64 {
    (value / target).ceil() as u64
}

/// Asks `GetMetrics` (as [`metrics`] does) until `accept` takes the answer.
async fn wait_metrics<T>(
    c: &Client,
    pairs: &[(&str, &str)],
    what: &str,
    timeout: Duration,
    accept: impl Fn(Result<(i64, f64), tonic::Status>) -> Option<T>,
) -> T {
    let r = obj(pairs);
    let (r, accept) = (&r, &accept);
    crate::support::wait_for(what, timeout, || async move {
        accept(value_of(&mut c.clone(), r.clone()).await)
    })
    .await
}

/// Waits until `GetMetrics` answers `expected` (the float field).
pub async fn wait_value(c: &Client, pairs: &[(&str, &str)], expected: f64) {
    wait_value_for(c, pairs, expected, Duration::from_secs(10)).await
}

/// Waits up to `timeout` until `GetMetrics` answers `expected` (the float field).
pub async fn wait_value_for(c: &Client, pairs: &[(&str, &str)], expected: f64, timeout: Duration) {
    let what = format!("GetMetrics = {expected}");
    wait_metrics(c, pairs, &what, timeout, |answer| match answer {
        Ok((_, f)) if (f - expected).abs() < 1e-9 => Some(()),
        _ => None,
    })
    .await
}

/// Waits until `GetMetrics` fails with `code`; returns the status.
pub async fn wait_code(
    c: &Client,
    pairs: &[(&str, &str)],
    code: tonic::Code,
    timeout: Duration,
) -> tonic::Status {
    let what = format!("GetMetrics {code:?}");
    wait_metrics(c, pairs, &what, timeout, |answer| match answer {
        Err(s) if s.code() == code => Some(s),
        _ => None,
    })
    .await
}

/// A config with one Redis source `main` and the scaler on. `queues` is the
/// list under `queues:`, written flush left or as an indented raw string:
///
/// ```ignore
/// redis_config(&redis.url, "100ms", r#"
///     - key: delayed
///       score: timestamp
/// "#)
/// ```
pub fn redis_config(url: &str, poll: &str, queues: &str) -> String {
    format!(
        r#"listen: {{ grpc: 127.0.0.1:0 }}
sources:
  - name: main
    type: redis
    url: {url}
    poll_interval: {poll}
    queues:
{queues}"#,
        queues = indent(queues, 6)
    )
}

/// One management source `rabbit` over `vhosts`.
pub fn rabbit_config(vhosts: &[RabbitVhost], poll: &str) -> String {
    let list = vhosts
        .iter()
        .map(|v| format!("\"{}\"", v.name))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        r#"
        sources:
          - name: rabbit
            type: rabbitmq
            url: http://127.0.0.1:15672
            username: guest
            password: guest
            vhosts: [{list}]
            poll_interval: {poll}
        "#
    )
}

/// Makes list `key` hold exactly `n` items.
pub fn set_list_len(conn: &mut redis::Connection, key: &str, n: usize) {
    let _: () = redis::cmd("DEL").arg(key).query(conn).expect("DEL");
    if n > 0 {
        let items: Vec<String> = (0..n).map(|i| format!("job-{i}")).collect();
        let _: () = redis::cmd("RPUSH")
            .arg(key)
            .arg(items)
            .query(conn)
            .expect("RPUSH");
    }
}

/// A gauge or counter from the app's `/metrics`.
pub async fn self_metric(app: &TestApp, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    sample(&app.metrics().await, name, labels)
}

/// Seconds since the Unix epoch, now.
pub fn wall() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// One `/metrics` scrape as an [`Observer`] saw it.
#[derive(Debug, Clone)]
pub struct Scraped {
    /// When it was sent.
    pub at: std::time::Instant,
    /// Status 200 and a body that parses.
    pub ok: bool,
    /// `queue_exporter_source_up{source}`.
    pub up: Option<f64>,
    /// The watched per-queue metric (`queue_depth` unless told otherwise).
    pub value: Option<f64>,
    /// `queue_exporter_last_success_timestamp_seconds{source}`.
    pub last_success: Option<f64>,
    /// How long the scrape took.
    pub took: Duration,
}

/// One `GetMetrics` answer: the value, or the status code.
#[derive(Debug, Clone)]
pub struct Answer {
    /// When it was sent.
    pub at: std::time::Instant,
    /// Wall-clock time when the request was sent.
    pub sent_wall: f64,
    /// The float value, or the status code.
    pub result: Result<f64, tonic::Code>,
    /// How long the call took.
    pub took: Duration,
}

/// Scrapes `/metrics` every 25 ms and asks `GetMetrics` for one queue every
/// 50 ms, recording everything, until dropped: how the faults tests watch an
/// exporter from outside while its backend breaks.
pub struct Observer {
    scrapes: std::sync::Arc<std::sync::Mutex<Vec<Scraped>>>,
    answers: std::sync::Arc<std::sync::Mutex<Vec<Answer>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Observer {
    /// Watches `queue_depth{source, queue}` and `GetMetrics` (mode
    /// `QueueLength`) of the exporter at `base` (HTTP) and `grpc`.
    pub async fn start(base: &str, grpc: SocketAddr, source: &str, queue: &str) -> Observer {
        Self::start_with(base, grpc, source, queue, "queue_depth", &[]).await
    }

    /// Watches `metric{source, queue}` and `GetMetrics` with `extra`
    /// metadata (a `mode` matching the metric, say).
    pub async fn start_with(
        base: &str,
        grpc: SocketAddr,
        source: &str,
        queue: &str,
        metric: &str,
        extra: &[(&str, &str)],
    ) -> Observer {
        use std::sync::{Arc, Mutex};
        use std::time::Instant;
        let scrapes: Arc<Mutex<Vec<Scraped>>> = Arc::default();
        let answers: Arc<Mutex<Vec<Answer>>> = Arc::default();
        let url = format!("{base}/metrics");
        let (s, src, q, m) = (
            scrapes.clone(),
            source.to_string(),
            queue.to_string(),
            metric.to_string(),
        );
        let scraper = tokio::spawn(async move {
            let client = reqwest::Client::builder()
                .timeout(Duration::from_secs(5))
                .build()
                .unwrap();
            loop {
                let at = Instant::now();
                let body = match client.get(&url).send().await {
                    Ok(r) if r.status() == 200 => r.text().await.ok(),
                    _ => None,
                };
                let took = at.elapsed();
                let parsed = body.as_deref().map(|b| {
                    let scrape = crate::support::Scrape::parse(b);
                    let labels = [("source", src.as_str())];
                    (
                        scrape.value("queue_exporter_source_up", &labels),
                        scrape.value(&m, &[("source", src.as_str()), ("queue", q.as_str())]),
                        scrape.value("queue_exporter_last_success_timestamp_seconds", &labels),
                    )
                });
                let (up, value, last_success) = parsed.unwrap_or((None, None, None));
                s.lock().unwrap().push(Scraped {
                    at,
                    ok: body.is_some(),
                    up,
                    value,
                    last_success,
                    took,
                });
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
        });
        let c = connect(grpc).await;
        let mut pairs: Vec<(String, String)> = vec![
            ("source".into(), source.into()),
            ("queue".into(), queue.into()),
        ];
        pairs.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let a = answers.clone();
        let asker = tokio::spawn(async move {
            let pairs: Vec<(&str, &str)> = pairs
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            loop {
                let mut c = c.clone();
                let at = Instant::now();
                let sent_wall = wall();
                let r = metrics(&mut c, &pairs).await;
                a.lock().unwrap().push(Answer {
                    at,
                    sent_wall,
                    result: r.map(|(_, f)| f).map_err(|s| s.code()),
                    took: at.elapsed(),
                });
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        Observer {
            scrapes,
            answers,
            tasks: vec![scraper, asker],
        }
    }

    /// Every scrape so far.
    pub fn scrapes(&self) -> Vec<Scraped> {
        self.scrapes.lock().unwrap().clone()
    }

    /// Every `GetMetrics` answer so far.
    pub fn answers(&self) -> Vec<Answer> {
        self.answers.lock().unwrap().clone()
    }

    /// Waits (up to `timeout`) for a scrape after `since` that satisfies `f`.
    pub async fn wait_scrape(
        &self,
        since: std::time::Instant,
        timeout: Duration,
        what: &str,
        f: impl Fn(&Scraped) -> bool,
    ) -> Scraped {
        crate::support::wait_for(&format!("a scrape with {what}"), timeout, || async {
            self.scrapes().into_iter().find(|s| s.at >= since && f(s))
        })
        .await
    }

    /// Waits (up to `timeout`) for a gRPC answer sent after `since` that satisfies `f`.
    pub async fn wait_answer(
        &self,
        since: std::time::Instant,
        timeout: Duration,
        what: &str,
        f: impl Fn(&Answer) -> bool,
    ) -> Answer {
        crate::support::wait_for(&format!("a GetMetrics answer {what}"), timeout, || async {
            self.answers().into_iter().find(|a| a.at >= since && f(a))
        })
        .await
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// The run-length compression of `source_up` over the scrapes: `[1, 0, 1]`
/// means up, then down once, then up again.
pub fn up_runs(scrapes: &[Scraped]) -> Vec<f64> {
    let mut runs: Vec<f64> = Vec::new();
    for s in scrapes {
        if let Some(u) = s.up
            && runs.last() != Some(&u)
        {
            runs.push(u);
        }
    }
    runs
}
