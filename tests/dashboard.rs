//! The Grafana dashboard `dashboards/queue-exporter.json`:
//!
//! - is a current-schema dashboard with a uid, a title, a `datasource`
//!   variable and `source` / `vhost` / `queue` variables fed by `label_values`;
//! - has every panel the deployment issue lists, and every query uses
//!   `$__rate_interval` and is valid PromQL (`promtool check rules`);
//! - **live**: a real Prometheus (Debian's `prometheus`) scrapes the real
//!   exporter binary every second, over a private Redis and a throw-away
//!   RabbitMQ vhost whose queues are filled and drained while it runs, and
//!   the KEDA scaler answers real gRPC calls. Then every variable's
//!   `label_values` and every panel query, variables substituted, runs
//!   through Prometheus's HTTP API and must return at least one series, with
//!   no exception: a `rediswq` preset queue whose worker crashes now and then
//!   fills the stalled-jobs query with real data.
//!
//! `cargo test --test dashboard -- --ignored render` runs the same setup for
//! a few minutes and renders `dashboards/screenshots/*.png` with
//! `scripts/render-dashboard` (needs matplotlib: `pip install matplotlib`).

mod scaler_common;
mod support;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;
use lapin::BasicProperties;
use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicQosOptions};
use lapin::types::FieldTable;
use serde_json::Value;
use support::{KillOnDrop, RabbitVhost, RedisServer, free_port, pct};

/// What `$__rate_interval` becomes here: 60 scrapes at the test's 1 s interval.
const RATE_INTERVAL: &str = "1m";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn dashboard() -> Value {
    let path = root().join("dashboards/queue-exporter.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every panel that is not a row, including those inside collapsed rows.
fn panels(d: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    for p in d["panels"].as_array().unwrap() {
        if p["type"] == "row" {
            out.extend(p["panels"].as_array().into_iter().flatten().cloned());
        } else {
            out.push(p.clone());
        }
    }
    out
}

/// One query of one panel.
#[derive(Debug, Clone)]
struct Target {
    panel: String,
    ref_id: String,
    expr: String,
}

fn targets(d: &Value) -> Vec<Target> {
    panels(d)
        .iter()
        .flat_map(|p| {
            let title = p["title"].as_str().unwrap().to_string();
            p["targets"]
                .as_array()
                .unwrap_or_else(|| panic!("panel {title:?} has targets"))
                .iter()
                .map(move |t| Target {
                    panel: title.clone(),
                    ref_id: t["refId"].as_str().unwrap().to_string(),
                    expr: t["expr"].as_str().unwrap().to_string(),
                })
        })
        .collect()
}

/// The value each variable takes when "All" (or its default) is selected,
/// as Grafana interpolates it.
fn variable_values(d: &Value) -> Vec<(String, String)> {
    d["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["type"] != "datasource")
        .map(|v| {
            let name = v["name"].as_str().unwrap().to_string();
            let value = if v["includeAll"] == true {
                v["allValue"]
                    .as_str()
                    .unwrap_or_else(|| panic!("${name}: includeAll needs an allValue"))
            } else {
                v["current"]["value"]
                    .as_str()
                    .or(v["query"].as_str())
                    .unwrap_or_else(|| panic!("${name}: no default value"))
            };
            (name, value.to_string())
        })
        .collect()
}

/// An expression with the dashboard's variables and `$__rate_interval`
/// replaced, in each of Grafana's spellings (`$x`, `${x}`, `[[x]]`).
fn substitute(expr: &str, vars: &[(String, String)]) -> String {
    let mut e = expr.replace("$__rate_interval", RATE_INTERVAL);
    // Longest names first, so `$queue` never eats the start of `$queues`.
    let mut vars = vars.to_vec();
    vars.sort_by_key(|(n, _)| std::cmp::Reverse(n.len()));
    for (name, value) in &vars {
        e = e
            .replace(&format!("${{{name}}}"), value)
            .replace(&format!("[[{name}]]"), value)
            .replace(&format!("${name}"), value);
    }
    assert!(!e.contains('$'), "an unknown variable is left in {e}");
    e
}

/// `label_values(selector, label)` of a query variable.
fn label_values_query(v: &Value) -> (String, String) {
    let q = v["query"]["query"]
        .as_str()
        .or(v["definition"].as_str())
        .unwrap();
    let inner = q
        .strip_prefix("label_values(")
        .and_then(|r| r.strip_suffix(')'))
        .unwrap_or_else(|| panic!("variable {} is not label_values(...): {q}", v["name"]));
    let (selector, label) = inner.rsplit_once(',').unwrap();
    (selector.trim().to_string(), label.trim().to_string())
}

// ------------------------------------------------------------ static checks

#[test]
fn the_dashboard_has_a_current_schema_a_uid_a_title_and_label_values_variables() {
    let d = dashboard();
    assert!(
        d["schemaVersion"].as_i64().unwrap() >= 39,
        "schemaVersion {}",
        d["schemaVersion"]
    );
    assert_eq!(d["uid"], "queue-exporter");
    assert!(d["title"].as_str().is_some_and(|t| !t.is_empty()));

    let vars = d["templating"]["list"].as_array().unwrap();
    let var = |n: &str| {
        vars.iter()
            .find(|v| v["name"] == n)
            .unwrap_or_else(|| panic!("variable ${n}"))
    };
    assert_eq!(var("datasource")["type"], "datasource");
    assert_eq!(var("datasource")["query"], "prometheus");
    for (n, label) in [("source", "source"), ("vhost", "vhost"), ("queue", "queue")] {
        let v = var(n);
        assert_eq!(v["type"], "query", "${n}");
        assert_eq!(v["datasource"]["uid"], "${datasource}", "${n}");
        assert_eq!(label_values_query(v).1, label, "${n}");
        assert_eq!(v["includeAll"], true, "${n}");
    }

    // Every panel and query uses the datasource variable; ids are unique.
    let mut ids = BTreeSet::new();
    for p in d["panels"].as_array().unwrap() {
        assert!(
            ids.insert(p["id"].as_i64().unwrap()),
            "duplicate id {}",
            p["id"]
        );
        assert!(
            p["gridPos"]["w"].is_number(),
            "{} has a gridPos",
            p["title"]
        );
    }
    for p in panels(&d) {
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{}", p["title"]);
        for t in p["targets"].as_array().unwrap() {
            assert_eq!(t["datasource"]["uid"], "${datasource}", "{}", p["title"]);
        }
    }
}

#[test]
fn panels_fit_the_24_column_grid_without_overlapping() {
    let d = dashboard();
    let mut cells = BTreeSet::new();
    for p in d["panels"].as_array().unwrap() {
        let g = &p["gridPos"];
        let [x, y, w, h] = ["x", "y", "w", "h"].map(|k| g[k].as_i64().unwrap());
        assert!(
            x >= 0 && w > 0 && x + w <= 24,
            "{} is off the grid",
            p["title"]
        );
        for cx in x..x + w {
            for cy in y..y + h {
                assert!(
                    cells.insert((cx, cy)),
                    "{} overlaps another panel at ({cx}, {cy})",
                    p["title"]
                );
            }
        }
    }
}

#[test]
fn every_range_in_a_dashboard_query_is_the_rate_interval() {
    for t in targets(&dashboard()) {
        let ranges: Vec<&str> = t
            .expr
            .split('[')
            .skip(1)
            .map(|r| r.split(']').next().unwrap())
            .collect();
        for r in ranges {
            assert_eq!(
                r, "$__rate_interval",
                "{} {}: use [$__rate_interval], not [{r}]",
                t.panel, t.ref_id
            );
        }
    }
}

#[test]
fn the_dashboard_has_every_panel_the_issue_lists() {
    let d = dashboard();
    let all = panels(&d);
    let panel = |title: &str| -> Value {
        all.iter()
            .find(|p| p["title"] == title)
            .unwrap_or_else(|| panic!("a panel {title:?}"))
            .clone()
    };
    let exprs = |title: &str| -> String {
        panel(title)["targets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["expr"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
            .join("\n")
    };
    let needs = |title: &str, parts: &[&str]| {
        let e = exprs(title);
        for part in parts {
            assert!(e.contains(part), "{title:?} queries {part}:\n{e}");
        }
    };
    needs("Depth per queue", &["queue_depth"]);
    needs(
        "Ready vs unacked vs scheduled",
        &[
            "queue_messages_ready",
            "queue_messages_unacked",
            "queue_messages_scheduled",
        ],
    );
    needs(
        "Oldest waiting item age",
        &["queue_oldest_message_age_seconds"],
    );
    assert_eq!(panel("Age of waiting items")["type"], "heatmap");
    needs(
        "Age of waiting items",
        &["queue_message_age_seconds_bucket"],
    );
    needs(
        "Publish / deliver / ack rate",
        &[
            "rate(queue_messages_published_total",
            "rate(queue_messages_delivered_total",
            "rate(queue_messages_acknowledged_total",
        ],
    );
    needs(
        "Consumers and utilisation",
        &["queue_consumers", "queue_consumer_utilisation"],
    );
    needs(
        "Estimated time to drain",
        &["queue_messages_delivered_total", "deriv(queue_depth"],
    );
    needs(
        "Net inflow",
        &["queue_messages_published_total", "deriv(queue_depth"],
    );
    needs(
        "Stalled jobs and dead-letter queues",
        &["queue_stalled_jobs", "$dlq"],
    );
    needs("Sources up", &["queue_exporter_source_up"]);
    needs(
        "Poll duration p50 / p99",
        &[
            "histogram_quantile(0.5",
            "histogram_quantile(0.99",
            "queue_exporter_poll_duration_seconds_bucket",
        ],
    );
    needs(
        "Poll errors by reason",
        &["queue_exporter_poll_errors_total", "reason"],
    );
    needs(
        "Data age",
        &["queue_exporter_last_success_timestamp_seconds"],
    );
    needs(
        "Scaler requests by method and code",
        &["queue_exporter_grpc_requests_total", "method, code"],
    );
    needs(
        "Scaler latency p50 / p99",
        &[
            "queue_exporter_grpc_request_duration_seconds_bucket",
            "method",
        ],
    );
    needs("Open scaler streams", &["queue_exporter_scaler_streams"]);
    needs("Overdue jobs", &["queue_overdue_jobs"]);
    needs("Service time (measured)", &["queue_service_time_seconds"]);
    needs(
        "Desired replicas per ScaledObject",
        &["queue_exporter_scaler_desired_replicas", "scaledobject"],
    );
    needs(
        "WaitTime inputs",
        &[
            "queue_exporter_scaler_backlog",
            "queue_exporter_scaler_arrival_rate",
            "queue_exporter_scaler_oldest_age_seconds",
            "queue_exporter_scaler_service_time_seconds",
        ],
    );
}

#[test]
fn every_dashboard_query_is_valid_promql() {
    // promtool has no query checker, but it parses every recording rule's expr.
    let d = dashboard();
    let vars = variable_values(&d);
    let rules: Vec<Value> = targets(&d)
        .iter()
        .enumerate()
        .map(|(i, t)| serde_json::json!({"record": format!("dashboard_query_{i}"), "expr": substitute(&t.expr, &vars)}))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dashboard.rules.json");
    std::fs::write(
        &file,
        serde_json::to_string(
            &serde_json::json!({"groups": [{"name": "dashboard", "rules": rules}]}),
        )
        .unwrap(),
    )
    .unwrap();
    let out = Command::new("promtool")
        .args(["check", "rules", file.to_str().unwrap()])
        .output()
        .expect("promtool (scripts/setup-services installs the prometheus package)");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

// ------------------------------------------------------------------- live

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// A tiny deterministic pseudo-random sequence (no extra dependency).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, below: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % below
    }
}

fn cmd(conn: &mut redis::Connection, args: &[&str]) -> redis::Value {
    let mut c = redis::cmd(args[0]);
    for a in &args[1..] {
        c.arg(*a);
    }
    c.query(conn)
        .unwrap_or_else(|e| panic!("{}: {e}", args.join(" ")))
}

/// Queue data that keeps changing, on a private Redis, until `stop`:
/// - `work-queue`: a list of JSON jobs with `enqueued_at`, filled in bursts
///   (20/s for 24 s of every minute) and drained at 10/s, each job taken
///   counted in `work-queue:done` (its `counters: processed`);
/// - `mail`: a BullMQ queue with delayed jobs long due and no worker to
///   promote them (overdue), and five jobs finished in 150 ms each (its
///   measured service time);
/// - `draining`: a list drained at 20/s (refilled when empty);
/// - `jobs:pending:{high,normal,low}`: timestamp zsets, some jobs due (up to
///   an hour old), some scheduled in the future, due ones taken;
/// - `events`: a stream with the consumer group `mailer` reading behind;
/// - `jobs:dlq`: a dead-letter list that grows now and then;
/// - `render`: a Kubernetes `rediswq` work queue ([`Rediswq`]) whose worker
///   takes a job a second and crashes on every 15th, so its lease expires
///   and the job stays in `render:processing`, stalled.
fn redis_activity(url: String, stop: Arc<AtomicBool>) {
    let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
    let c = &mut conn;
    let now = unix_now();
    let mut rng = Lcg(42);
    for i in 0..50 {
        let job = format!(
            "{{\"id\":{i},\"enqueued_at\":{}}}",
            now - 30.0 + i as f64 * 0.5
        );
        cmd(c, &["RPUSH", "work-queue", &job]);
    }
    let fill_draining = |c: &mut redis::Connection| {
        let items: Vec<String> = (0..3000).map(|i| format!("d{i}")).collect();
        let mut args = vec!["RPUSH", "draining"];
        args.extend(items.iter().map(String::as_str));
        cmd(c, &args);
    };
    fill_draining(c);
    for (p, n) in [("high", 5), ("normal", 120), ("low", 400)] {
        for i in 0..n {
            let score = format!("{:.3}", now - rng.next(3600) as f64 - 1.0);
            cmd(
                c,
                &[
                    "ZADD",
                    &format!("jobs:pending:{p}"),
                    &score,
                    &format!("{p}-old-{i}"),
                ],
            );
        }
    }
    cmd(
        c,
        &["XGROUP", "CREATE", "events", "mailer", "$", "MKSTREAM"],
    );
    cmd(c, &["RPUSH", "jobs:dlq", "{\"id\":\"failed-0\"}"]);
    cmd(c, &["SET", "work-queue:done", "0"]);
    cmd(c, &["HSET", "bull:mail:meta", "opts.maxLenEvents", "10000"]);
    for i in 0..3 {
        // BullMQ's delayed score: due_ms * 4096 + seq, due a minute ago.
        let score = ((now - 60.0) * 1e3) as u64 * 4096 + i;
        cmd(
            c,
            &[
                "ZADD",
                "bull:mail:delayed",
                &score.to_string(),
                &format!("d{i}"),
            ],
        );
    }
    for i in 0..5 {
        // Finished a minute ago, 150 ms after a worker took each.
        let finished = ((now - 60.0) * 1e3) as u64 + i * 1000;
        let (job, at) = (format!("bull:mail:f{i}"), finished.to_string());
        let took = (finished - 150).to_string();
        cmd(c, &["HSET", &job, "processedOn", &took, "finishedOn", &at]);
        cmd(c, &["ZADD", "bull:mail:completed", &at, &format!("f{i}")]);
    }
    let mut render = Rediswq::start(c);

    let start = Instant::now();
    let mut tick: u64 = 0;
    while !stop.load(Ordering::Relaxed) {
        tick += 1;
        let t = start.elapsed().as_secs_f64();
        let now = unix_now();
        // work-queue: bursts in, steady out.
        if t % 60.0 < 24.0 {
            for k in 0..2 {
                let job = format!("{{\"id\":\"{tick}-{k}\",\"enqueued_at\":{now}}}");
                cmd(c, &["RPUSH", "work-queue", &job]);
            }
        }
        if !matches!(cmd(c, &["LPOP", "work-queue"]), redis::Value::Nil) {
            cmd(c, &["INCR", "work-queue:done"]);
        }
        // draining: out only.
        cmd(c, &["LPOP", "draining", "2"]);
        if tick.is_multiple_of(50) && matches!(cmd(c, &["LLEN", "draining"]), redis::Value::Int(0))
        {
            fill_draining(c);
        }
        // Priority zsets: a new job each tick, due now or up to a minute ahead.
        let p = ["high", "normal", "normal", "low"][rng.next(4) as usize];
        let score = format!("{:.3}", now + rng.next(60) as f64 - 20.0);
        cmd(
            c,
            &[
                "ZADD",
                &format!("jobs:pending:{p}"),
                &score,
                &format!("{p}-{tick}"),
            ],
        );
        for (p, every) in [("high", 1), ("normal", 2), ("low", 7)] {
            if tick.is_multiple_of(every) {
                let key = format!("jobs:pending:{p}");
                let due = cmd(
                    c,
                    &[
                        "ZRANGEBYSCORE",
                        &key,
                        "-inf",
                        &format!("{now:.3}"),
                        "LIMIT",
                        "0",
                        "1",
                    ],
                );
                if let redis::Value::Array(items) = due
                    && let Some(redis::Value::BulkString(m)) = items.first()
                {
                    cmd(c, &["ZREM", &key, &String::from_utf8_lossy(m)]);
                }
            }
        }
        // events: 10/s in; the group reads 4 every half second and acks 3.
        cmd(
            c,
            &[
                "XADD",
                "events",
                "MAXLEN",
                "~",
                "20000",
                "*",
                "n",
                &tick.to_string(),
            ],
        );
        if tick.is_multiple_of(5) {
            let read = cmd(
                c,
                &[
                    "XREADGROUP",
                    "GROUP",
                    "mailer",
                    "worker-1",
                    "COUNT",
                    "4",
                    "STREAMS",
                    "events",
                    ">",
                ],
            );
            let ids = stream_ids(&read);
            if !ids.is_empty() {
                let mut args = vec!["XACK", "events", "mailer"];
                args.extend(ids.iter().take(3).map(String::as_str));
                cmd(c, &args);
            }
        }
        if tick.is_multiple_of(10) {
            render.step(c);
        }
        // A job fails into the DLQ every 3 s.
        if tick.is_multiple_of(30) {
            cmd(
                c,
                &[
                    "RPUSH",
                    "jobs:dlq",
                    &format!("{{\"id\":\"failed-{tick}\"}}"),
                ],
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The `render` queue as the Kubernetes `rediswq.py` worker uses it: `lease`
/// moves a job from `render` to `render:processing` and sets its lease key
/// for 5 s; `complete` removes both. A crashed worker's job keeps its place
/// in `render:processing` after its lease expires: stalled.
struct Rediswq {
    /// Taken jobs to complete, oldest first: (job, step that completes it).
    taken: std::collections::VecDeque<(String, u64)>,
    /// Steps so far (one a second).
    steps: u64,
}

impl Rediswq {
    const NAME: &str = "render";

    /// 200 waiting jobs, and one taken by a worker that already crashed.
    fn start(c: &mut redis::Connection) -> Rediswq {
        let jobs: Vec<String> = (0..200).map(|i| format!("frame-{i}")).collect();
        let mut args = vec!["RPUSH", Self::NAME];
        args.extend(jobs.iter().map(String::as_str));
        cmd(c, &args);
        cmd(c, &["RPUSH", "render:processing", "frame-crashed"]);
        Rediswq {
            taken: Default::default(),
            steps: 0,
        }
    }

    fn lease_key(job: &str) -> String {
        use sha2::{Digest, Sha224};
        let hex: String = Sha224::digest(job.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        format!("{}:leased_by_session:{hex}", Self::NAME)
    }

    /// One second of the worker: completes what is done, takes a job (with
    /// a 3 s run, never completed on every 15th), refills when drained.
    fn step(&mut self, c: &mut redis::Connection) {
        self.steps += 1;
        while self.taken.front().is_some_and(|(_, at)| *at <= self.steps) {
            let (job, _) = self.taken.pop_front().unwrap();
            cmd(c, &["LREM", "render:processing", "0", &job]);
            cmd(c, &["DEL", &Self::lease_key(&job)]);
        }
        let taken = cmd(c, &["RPOPLPUSH", Self::NAME, "render:processing"]);
        if let redis::Value::BulkString(job) = taken {
            let job = String::from_utf8_lossy(&job).into_owned();
            cmd(c, &["SETEX", &Self::lease_key(&job), "5", "worker-1"]);
            if !self.steps.is_multiple_of(15) {
                self.taken.push_back((job, self.steps + 3));
            }
        } else {
            let jobs: Vec<String> = (0..200)
                .map(|i| format!("frame-{}-{i}", self.steps))
                .collect();
            let mut args = vec!["RPUSH", Self::NAME];
            args.extend(jobs.iter().map(String::as_str));
            cmd(c, &args);
        }
    }
}

/// Entry ids in an XREADGROUP reply (RESP2 or RESP3 shape).
fn stream_ids(v: &redis::Value) -> Vec<String> {
    let mut ids = Vec::new();
    fn walk(v: &redis::Value, ids: &mut Vec<String>) {
        match v {
            redis::Value::BulkString(b) => {
                let s = String::from_utf8_lossy(b);
                if s.contains('-') && s.split('-').all(|p| p.chars().all(|c| c.is_ascii_digit())) {
                    ids.push(s.into_owned());
                }
            }
            redis::Value::Array(a) | redis::Value::Set(a) => a.iter().for_each(|x| walk(x, ids)),
            redis::Value::Map(m) => m.iter().for_each(|(k, x)| {
                walk(k, ids);
                walk(x, ids);
            }),
            _ => {}
        }
    }
    walk(v, &mut ids);
    ids
}

/// RabbitMQ traffic in the vhost until `stop`: `emails` published at 10/s
/// (timestamp property set) and consumed at ~8/s by a consumer that holds up
/// to 20 unacked; `reports` drained at ~5/s; `emails.dlq` growing now and
/// then, without consumers.
async fn rabbit_activity(
    vhost: &RabbitVhost,
    stop: Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let conn = Arc::new(vhost.connect().await);
    let ch = support::confirm_channel(&conn).await;
    for q in ["emails", "emails.dlq", "reports"] {
        support::declare_queue(&ch, q, &[]).await;
    }
    support::publish(&ch, "reports", 1200, BasicProperties::default()).await;
    support::publish(&ch, "emails.dlq", 3, BasicProperties::default()).await;
    let mut tasks = Vec::new();

    let (c, s) = (conn.clone(), stop.clone());
    tasks.push(tokio::spawn(async move {
        let ch = support::confirm_channel(&c).await;
        let mut tick: u64 = 0;
        while !s.load(Ordering::Relaxed) {
            tick += 1;
            let props = BasicProperties::default().with_timestamp(unix_now() as u64);
            support::publish(&ch, "emails", 1, props).await;
            if tick.is_multiple_of(50) {
                support::publish(&ch, "emails.dlq", 1, BasicProperties::default()).await;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }));
    for (queue, prefetch, work_ms) in [("emails", 20, 120), ("reports", 5, 200)] {
        let (c, s) = (conn.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let ch = c.create_channel().await.unwrap();
            ch.basic_qos(prefetch, BasicQosOptions::default())
                .await
                .unwrap();
            let mut consumer = ch
                .basic_consume(
                    queue.into(),
                    format!("{queue}-worker").as_str().into(),
                    BasicConsumeOptions::default(),
                    FieldTable::default(),
                )
                .await
                .unwrap();
            while !s.load(Ordering::Relaxed) {
                let Ok(Some(Ok(d))) =
                    tokio::time::timeout(Duration::from_millis(500), consumer.next()).await
                else {
                    continue;
                };
                tokio::time::sleep(Duration::from_millis(work_ms)).await;
                let _ = d.ack(BasicAckOptions::default()).await;
            }
        }));
    }
    tasks
}

/// KEDA-like traffic on the scaler until `stop`: GetMetricSpec + GetMetrics
/// and IsActive every 250 ms, a query for a queue that does not exist now and
/// then (NOT_FOUND), and a StreamIsActive stream held open.
async fn scaler_activity(addr: std::net::SocketAddr, vhost: String, stop: Arc<AtomicBool>) {
    use scaler_common::{active, connect, metrics, obj};
    let mut c = connect(addr).await;
    let _push = c
        .stream_is_active(obj(&[
            ("queue", "jobs:pending:*"),
            ("mode", "Age"),
            ("operation", "max"),
        ]))
        .await
        .expect("StreamIsActive")
        .into_inner();
    let mut tick: u64 = 0;
    while !stop.load(Ordering::Relaxed) {
        tick += 1;
        let _ = metrics(&mut c, &[("source", "main"), ("queue", "work-queue")]).await;
        let _ = metrics(
            &mut c,
            &[
                ("source", "rabbit"),
                ("vhost", &vhost),
                ("queue", "emails"),
                ("mode", "Ready"),
            ],
        )
        .await;
        let _ = active(&mut c, &[("queue", "jobs:pending:*"), ("mode", "Ready")]).await;
        let _ = metrics(
            &mut c,
            &[
                ("source", "main"),
                ("queue", "work-queue"),
                ("mode", "WaitTime"),
                ("targetWait", "30s"),
                ("processingTime", "200ms"),
                ("window", "10s"),
            ],
        )
        .await;
        if tick.is_multiple_of(8) {
            let _ = metrics(&mut c, &[("source", "main"), ("queue", "no-such-queue")]).await;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The whole live setup: Redis, RabbitMQ vhost, the exporter binary, a
/// Prometheus scraping it, and the activity around them.
struct Live {
    prometheus_url: String,
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    redis_thread: Option<std::thread::JoinHandle<()>>,
    _prometheus: support::Prometheus,
    exporter: KillOnDrop,
    exporter_log: PathBuf,
    _vhost: RabbitVhost,
    _redis: RedisServer,
    _dir: tempfile::TempDir,
}

impl Live {
    async fn start() -> Live {
        let dir = tempfile::tempdir().unwrap();
        let redis = RedisServer::start();
        let vhost = RabbitVhost::create("dashboard").await;
        let stop = Arc::new(AtomicBool::new(false));

        let (url, s) = (redis.url.clone(), stop.clone());
        let redis_thread = std::thread::spawn(move || redis_activity(url, s));
        let mut tasks = rabbit_activity(&vhost, stop.clone()).await;

        // The exporter: both backends, polled every second. One configured
        // vhost does not exist, so the errors panel has a real reason to show.
        let (http, grpc) = (free_port(), free_port());
        let config = format!(
            r#"listen: {{ http: "127.0.0.1:{http}", grpc: "127.0.0.1:{grpc}" }}
log: {{ format: text, level: warn }}
sources:
  - name: main
    type: redis
    url: {redis_url}
    poll_interval: 1s
    discovery_interval: 2s
    age_histogram_interval: 1s
    queues:
      - key: work-queue
        age: {{ end: head, field: enqueued_at, unit: seconds }}
        counters: {{ processed: "work-queue:done" }}
      - key: draining
      - pattern: "jobs:pending:*"
        labels: "jobs:pending:(?P<priority>[^:]+)"
        score: timestamp
      - key: events
      - key: jobs:dlq
      - preset: rediswq
        name: render
      - preset: bullmq
  - name: rabbit
    type: rabbitmq
    method: management
    url: http://guest:guest@127.0.0.1:15672
    vhosts: ["{vhost}", "{vhost}-missing"]
    poll_interval: 1s
"#,
            redis_url = redis.url,
            vhost = vhost.name,
        );
        let config_path = dir.path().join("config.yaml");
        std::fs::write(&config_path, config).unwrap();
        let exporter_log = dir.path().join("exporter.log");
        let exporter = KillOnDrop(
            Command::new(env!("CARGO_BIN_EXE_queue-exporter"))
                .args(["--config", config_path.to_str().unwrap()])
                .env_remove("QUEUE_EXPORTER_CONFIG")
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&exporter_log).unwrap())
                .spawn()
                .expect("start the exporter"),
        );
        let base = format!("http://127.0.0.1:{http}");
        support::wait_for("the exporter's /readyz", Duration::from_secs(20), || {
            let url = format!("{base}/readyz");
            async move {
                let r = reqwest::get(&url).await.ok()?;
                r.status().is_success().then_some(())
            }
        })
        .await;

        let grpc_addr = format!("127.0.0.1:{grpc}").parse().unwrap();
        let (s, v) = (stop.clone(), vhost.name.clone());
        tasks.push(tokio::spawn(scaler_activity(grpc_addr, v, s)));

        // Prometheus, scraping every second.
        let prometheus = support::Prometheus::start(
            dir.path(),
            &format!(
                "  - job_name: queue-exporter\n    static_configs:\n      - targets: [\"127.0.0.1:{http}\"]\n"
            ),
        )
        .await;

        Live {
            prometheus_url: prometheus.url.clone(),
            stop,
            tasks,
            redis_thread: Some(redis_thread),
            _prometheus: prometheus,
            exporter,
            exporter_log,
            _vhost: vhost,
            _redis: redis,
            _dir: dir,
        }
    }

    /// An instant query; the number of series, or Prometheus's error.
    async fn series(&self, query: &str) -> Result<usize, String> {
        let url = format!("{}/api/v1/query?query={}", self.prometheus_url, pct(query));
        self.api(&url)
            .await
            .map(|data| data["result"].as_array().map_or(0, Vec::len))
    }

    /// `label_values(selector, label)`, as Grafana asks for it.
    async fn label_values(&self, selector: &str, label: &str) -> Result<Vec<String>, String> {
        let url = format!(
            "{}/api/v1/label/{label}/values?match[]={}",
            self.prometheus_url,
            pct(selector)
        );
        let data = self.api(&url).await?;
        Ok(data
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect())
    }

    async fn api(&self, url: &str) -> Result<Value, String> {
        let body: Value = reqwest::get(url)
            .await
            .map_err(|e| e.to_string())?
            .json()
            .await
            .map_err(|e| e.to_string())?;
        if body["status"] != "success" {
            return Err(format!("{}: {}", body["errorType"], body["error"]));
        }
        Ok(body["data"].clone())
    }

    fn exporter_alive(&mut self) -> bool {
        matches!(self.exporter.0.try_wait(), Ok(None))
    }

    fn exporter_log(&self) -> String {
        std::fs::read_to_string(&self.exporter_log).unwrap_or_default()
    }

    async fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks.drain(..) {
            let _ = tokio::time::timeout(Duration::from_secs(3), t).await;
        }
        if let Some(t) = self.redis_thread.take() {
            let _ = t.join();
        }
    }
}

/// Runs every target once; returns the empty ones (panel, refId, query, why).
async fn empty_targets(live: &Live, d: &Value) -> Vec<(Target, String, String)> {
    let vars = variable_values(d);
    let mut empty = Vec::new();
    for t in targets(d) {
        let q = substitute(&t.expr, &vars);
        match live.series(&q).await {
            Ok(0) => empty.push((t, q, "no series".to_string())),
            Ok(_) => {}
            Err(e) => empty.push((t, q, e)),
        }
    }
    empty
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_panel_shows_data_from_a_real_prometheus_scraping_the_real_exporter() {
    let d = dashboard();
    let mut live = Live::start().await;

    // Wait until every query returns series (rates need a few scrapes, and
    // RabbitMQ's counters move every 5 s): usually 10-20 s; the deadline is
    // generous for a machine busy with the rest of the suite.
    let deadline = Instant::now() + Duration::from_secs(90);
    let empty = loop {
        assert!(
            live.exporter_alive(),
            "the exporter exited:\n{}",
            live.exporter_log()
        );
        let empty = empty_targets(&live, &d).await;
        if empty.is_empty() || Instant::now() > deadline {
            break empty;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    assert!(
        empty.is_empty(),
        "panel queries without data:\n{}\nexporter log:\n{}",
        empty
            .iter()
            .map(|(t, q, why)| format!("  {} [{}]: {why}\n    {q}", t.panel, t.ref_id))
            .collect::<Vec<_>>()
            .join("\n"),
        live.exporter_log()
    );

    // The stalled-jobs panel shows the crashed worker's job, not just a 0.
    let stalled = r#"queue_stalled_jobs{source="main", queue="render", preset="rediswq"} >= 1"#;
    assert_eq!(
        live.series(stalled).await,
        Ok(1),
        "{stalled}\nexporter log:\n{}",
        live.exporter_log()
    );

    let vars = variable_values(&d);

    // Every query variable lists values.
    for v in d["templating"]["list"].as_array().unwrap() {
        if v["type"] != "query" {
            continue;
        }
        let (selector, label) = label_values_query(v);
        let values = live
            .label_values(&substitute(&selector, &vars), &label)
            .await
            .unwrap();
        assert!(!values.is_empty(), "${} lists no values", v["name"]);
    }
    live.stop().await;
}

/// Not a test: renders `dashboards/screenshots/*.png` from a few minutes of
/// the live setup (`QE_RENDER_SECONDS`, default 300) with
/// `scripts/render-dashboard`. Run by hand:
/// `cargo test --test dashboard -- --ignored render --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "renders the screenshots of README.md and docs/dashboards-alerts.md; needs matplotlib"]
async fn render_dashboard_screenshots() {
    let seconds: u64 = std::env::var("QE_RENDER_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    let mut live = Live::start().await;
    eprintln!(
        "Prometheus at {}; running for {seconds} s",
        live.prometheus_url
    );
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    assert!(live.exporter_alive(), "{}", live.exporter_log());
    let out = Command::new("python3")
        .arg(root().join("scripts/render-dashboard"))
        .args([
            "--prometheus",
            &live.prometheus_url,
            "--range",
            &format!("{}s", seconds.saturating_sub(10)),
            "--rate-interval",
            "30s",
        ])
        .current_dir(root())
        .status()
        .expect("python3");
    assert!(out.success(), "scripts/render-dashboard failed");
    live.stop().await;
}
