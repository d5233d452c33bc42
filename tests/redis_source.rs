//! The Redis source against a private redis-server per test: what each key
//! type reports, discovery, type changes, odd key names and outages.
mod support;

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use support::*;

const WAIT: Duration = Duration::from_secs(15);

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

fn config(url: &str, queues: &str) -> String {
    format!(
        "listen: {{ grpc: null }}\nsources:\n  - name: main\n    type: redis\n    url: {url}\n    poll_interval: 100ms\n    discovery_interval: 300ms\n    queues:\n{queues}"
    )
}

fn run(redis: &RedisServer, args: &[&str]) {
    let mut c = redis::cmd(args[0]);
    for a in &args[1..] {
        c.arg(*a);
    }
    let _: redis::Value = c.query(&mut redis.conn()).unwrap();
}

/// A connection in MONITOR mode on `redis`, read with [`monitored`].
fn start_monitor(redis: &RedisServer) -> redis::Connection {
    let client = redis::Client::open(redis.url.as_str()).unwrap();
    let mut monitor = client.get_connection().unwrap();
    redis::cmd("MONITOR").exec(&mut monitor).unwrap();
    monitor
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    monitor
}

/// Every command line MONITOR reported so far (until it goes quiet).
fn monitored(monitor: &mut redis::Connection) -> Vec<String> {
    let mut seen = Vec::new();
    while let Ok(v) = monitor.recv_response() {
        if let redis::Value::SimpleString(line) = v {
            seen.push(line);
        }
    }
    seen
}

/// Waits until source `main` has counted `min` errors with `reason`, and
/// returns the body.
async fn wait_errors(app: &TestApp, reason: &str, min: f64) -> String {
    wait_for(&format!("{min} {reason} errors counted"), WAIT, || async {
        let body = app.metrics().await;
        let n = sample(
            &body,
            "queue_exporter_poll_errors_total",
            &[("source", "main"), ("reason", reason)],
        )?;
        (n >= min).then_some(body)
    })
    .await
}

/// `queue_message_age_seconds_bucket{queue, le}`.
fn bucket(body: &str, queue: &str, le: &str) -> Option<f64> {
    sample(
        body,
        "queue_message_age_seconds_bucket",
        &[("queue", queue), ("le", le)],
    )
}

/// Waits until the source `main` has finished `n` more polls.
async fn wait_polls(app: &TestApp, n: f64) {
    let polls = || async {
        sample(
            &app.metrics().await,
            "queue_exporter_poll_duration_seconds_count",
            &[("source", "main")],
        )
    };
    let start = polls().await.unwrap_or(0.0);
    wait_for(&format!("{n} more polls"), WAIT, || async {
        (polls().await? >= start + n).then_some(())
    })
    .await;
}

/// Waits until `name{labels}` has the value `want`, and returns the body.
async fn wait_value(app: &TestApp, name: &str, labels: &[(&str, &str)], want: f64) -> String {
    wait_for(&format!("{name}{labels:?} == {want}"), WAIT, || async {
        let body = app.metrics().await;
        (sample(&body, name, labels) == Some(want)).then_some(body)
    })
    .await
}

#[tokio::test]
async fn lists_report_depth_and_the_age_of_the_head_item() {
    let redis = RedisServer::start();
    let t = now() as i64;
    run(
        &redis,
        &[
            "RPUSH",
            "emails",
            &format!("{{\"enqueued_at\":{}}}", t - 100),
            "{\"enqueued_at\":1}",
        ],
    );
    run(
        &redis,
        &["LPUSH", "lifo", &format!("{}", (t - 50) * 1000), "x"],
    );
    run(
        &redis,
        &[
            "RPUSH",
            "rfc",
            "{\"meta\":{\"at\":\"2020-01-01T00:00:00Z\"}}",
        ],
    );
    run(&redis, &["RPUSH", "garbage", "not json"]);
    let app = TestApp::start(&config(
        &redis.url,
        "      - key: emails\n        age: { end: head, field: enqueued_at, unit: auto }\n      - key: lifo\n        age: { end: tail, unit: milliseconds }\n      - key: rfc\n        age: { field: meta.at, unit: rfc3339 }\n      - key: garbage\n        age: { field: enqueued_at }\n      - key: empty\n        age: { field: enqueued_at }\n",
    ))
    .await;
    let body = wait_value(&app, "queue_depth", &[("queue", "emails")], 2.0).await;
    assert_eq!(
        sample(&body, "queue_messages_ready", &[("queue", "emails")]),
        Some(2.0)
    );
    let age = sample(
        &body,
        "queue_oldest_message_age_seconds",
        &[("queue", "emails")],
    )
    .unwrap();
    assert!((99.0..130.0).contains(&age), "head age {age}");
    let age = sample(
        &body,
        "queue_oldest_message_age_seconds",
        &[("queue", "lifo")],
    )
    .unwrap();
    assert!((49.0..80.0).contains(&age), "tail age {age}");
    let age = sample(
        &body,
        "queue_oldest_message_age_seconds",
        &[("queue", "rfc")],
    )
    .unwrap();
    assert!(age > 86400.0 * 365.0, "rfc3339 age {age}");
    // Unparseable: absent, never 0, and counted.
    assert_eq!(
        sample(
            &body,
            "queue_oldest_message_age_seconds",
            &[("queue", "garbage")]
        ),
        None
    );
    assert_eq!(
        sample(&body, "queue_depth", &[("queue", "garbage")]),
        Some(1.0)
    );
    assert!(
        sample(
            &body,
            "queue_exporter_age_parse_failures_total",
            &[("source", "main")]
        )
        .unwrap()
            >= 1.0
    );
    // A missing exact key is an empty queue: depth 0 and age 0, type none.
    assert_eq!(
        sample(&body, "queue_depth", &[("queue", "empty")]),
        Some(0.0)
    );
    assert_eq!(
        sample(
            &body,
            "queue_oldest_message_age_seconds",
            &[("queue", "empty")]
        ),
        Some(0.0)
    );
    assert_eq!(
        sample(&body, "queue_info", &[("queue", "empty"), ("type", "none")]),
        Some(1.0)
    );
    app.stop().await;
}

#[tokio::test]
async fn timestamp_zsets_split_due_and_scheduled_in_seconds_and_milliseconds() {
    let redis = RedisServer::start();
    let t = now();
    for (key, scale) in [("jobs:pending:s", 1.0), ("jobs:pending:ms", 1000.0)] {
        let s = |off: f64| format!("{}", ((t + off) * scale).round());
        run(
            &redis,
            &[
                "ZADD",
                key,
                &s(-100.0),
                "a",
                &s(-30.0),
                "b",
                &s(-3.0),
                "c",
                &s(600.0),
                "d",
                &s(7200.0),
                "e",
            ],
        );
    }
    run(&redis, &["ZADD", "prio", "1", "a", "5", "b"]);
    let app = TestApp::start(&config(
        &redis.url,
        "      - key: jobs:pending:s\n        score: timestamp\n        score_unit: seconds\n      - key: jobs:pending:ms\n        score: timestamp\n        score_unit: milliseconds\n      - key: prio\n",
    ))
    .await;
    let body = wait_value(&app, "queue_depth", &[("queue", "jobs:pending:ms")], 5.0).await;
    for q in ["jobs:pending:s", "jobs:pending:ms"] {
        assert_eq!(
            sample(&body, "queue_depth", &[("queue", q)]),
            Some(5.0),
            "{q}"
        );
        assert_eq!(
            sample(&body, "queue_messages_ready", &[("queue", q)]),
            Some(3.0),
            "{q}"
        );
        assert_eq!(
            sample(&body, "queue_messages_scheduled", &[("queue", q)]),
            Some(2.0),
            "{q}"
        );
        let age = sample(&body, "queue_oldest_message_age_seconds", &[("queue", q)]).unwrap();
        assert!((99.0..130.0).contains(&age), "{q} age {age}");
    }
    // A plain zset: depth and ready, no time semantics.
    assert_eq!(
        sample(&body, "queue_depth", &[("queue", "prio")]),
        Some(2.0)
    );
    assert_eq!(
        sample(&body, "queue_messages_scheduled", &[("queue", "prio")]),
        None
    );
    assert_eq!(
        sample(
            &body,
            "queue_oldest_message_age_seconds",
            &[("queue", "prio")]
        ),
        None
    );
    app.stop().await;
}

#[tokio::test]
async fn the_age_histogram_counts_waiting_items_per_bucket() {
    let redis = RedisServer::start();
    let t = now();
    // Ages 2 s, 20 s, 200 s, 2000 s; one scheduled in the future.
    let s = |off: f64| format!("{:.3}", t - off);
    run(
        &redis,
        &[
            "ZADD",
            "delayed",
            &s(2.0),
            "a",
            &s(20.0),
            "b",
            &s(200.0),
            "c",
            &s(2000.0),
            "d",
            &s(-500.0),
            "e",
        ],
    );
    let yaml = config(
        &redis.url,
        "      - key: delayed\n        score: timestamp\n",
    )
    .replace(
        "    queues:\n",
        // Measured on every poll here; the cadence has its own test below.
        "    age_buckets: [10s, 100s, 1000s, 1h]\n    age_histogram_interval: 0s\n    queues:\n",
    );
    let app = TestApp::start(&yaml).await;
    let body = wait_value(
        &app,
        "queue_message_age_seconds_gcount",
        &[("queue", "delayed")],
        4.0,
    )
    .await;
    assert_eq!(bucket(&body, "delayed", "10.0"), Some(1.0));
    assert_eq!(bucket(&body, "delayed", "100.0"), Some(2.0));
    assert_eq!(bucket(&body, "delayed", "1000.0"), Some(3.0));
    assert_eq!(bucket(&body, "delayed", "3600.0"), Some(4.0));
    assert_eq!(bucket(&body, "delayed", "+Inf"), Some(4.0));
    // OpenMetrics carries the same cumulative counts in a gauge histogram.
    let (_, om, _) = http_get(
        &format!("{}/metrics", app.base),
        &[("accept", "application/openmetrics-text; version=1.0.0")],
    )
    .await;
    let parsed = python_parse(&om, true).unwrap_or_else(|e| panic!("{e}\n{om}"));
    let om_buckets: Vec<(String, f64)> = parsed
        .iter()
        .filter(|s| s.name == "queue_message_age_seconds_bucket" && s.labels["queue"] == "delayed")
        .map(|s| (s.labels["le"].clone(), s.value))
        .collect();
    assert!(
        parsed
            .iter()
            .any(|s| s.family == "queue_message_age_seconds" && s.family_type == "gaugehistogram")
    );
    let want: Vec<(String, f64)> = [
        ("10.0", 1.0),
        ("100.0", 2.0),
        ("1000.0", 3.0),
        ("3600.0", 4.0),
        ("+Inf", 4.0),
    ]
    .iter()
    .map(|(l, v)| (l.to_string(), *v))
    .collect();
    assert_eq!(om_buckets, want);
    // Steady polls (which skip implied buckets) keep the same answer.
    wait_polls(&app, 3.0).await;
    let body = app.metrics().await;
    assert_eq!(bucket(&body, "delayed", "1000.0"), Some(3.0));
    assert_eq!(bucket(&body, "delayed", "3600.0"), Some(4.0));
    // An older item arriving after the hint was learned is still counted right.
    run(&redis, &["ZADD", "delayed", &s(3000.0), "f"]);
    let body = wait_value(
        &app,
        "queue_message_age_seconds_gcount",
        &[("queue", "delayed")],
        5.0,
    )
    .await;
    assert_eq!(bucket(&body, "delayed", "1000.0"), Some(3.0));
    assert_eq!(bucket(&body, "delayed", "3600.0"), Some(5.0));
    app.stop().await;
}

#[tokio::test]
async fn the_age_histogram_is_remeasured_every_interval_and_at_once_when_drained() {
    let redis = RedisServer::start();
    let t = now();
    let s = |off: f64| format!("{:.3}", t - off);
    // Ages 200 s and 2000 s.
    run(
        &redis,
        &["ZADD", "delayed", &s(200.0), "a", &s(2000.0), "b"],
    );
    let yaml = config(
        &redis.url,
        "      - key: delayed\n        score: timestamp\n",
    )
    .replace(
        "    queues:\n",
        "    age_buckets: [100s, 1000s, 1h]\n    age_histogram_interval: 5s\n    queues:\n",
    );
    let app = TestApp::start(&yaml).await;
    let body = wait_value(&app, "queue_messages_ready", &[("queue", "delayed")], 2.0).await;
    assert_eq!(bucket(&body, "delayed", "1000.0"), Some(1.0));
    assert_eq!(bucket(&body, "delayed", "+Inf"), Some(2.0));

    // The key's first re-measurement comes at its own point within the
    // interval (keys are spread over it); after that, once per interval.
    run(&redis, &["ZADD", "delayed", &s(20.0), "c"]);
    wait_value(
        &app,
        "queue_message_age_seconds_gcount",
        &[("queue", "delayed")],
        3.0,
    )
    .await;
    // Just measured: a new item shows in depth and ready on the next poll,
    // while the histogram keeps its measurement until the 5 s interval ends.
    run(&redis, &["ZADD", "delayed", &s(30.0), "d"]);
    let body = wait_value(&app, "queue_messages_ready", &[("queue", "delayed")], 4.0).await;
    assert_eq!(bucket(&body, "delayed", "+Inf"), Some(3.0), "{body}");
    let body = wait_value(
        &app,
        "queue_message_age_seconds_gcount",
        &[("queue", "delayed")],
        4.0,
    )
    .await;
    assert_eq!(bucket(&body, "delayed", "100.0"), Some(2.0));
    assert_eq!(bucket(&body, "delayed", "1000.0"), Some(3.0));
    assert_eq!(bucket(&body, "delayed", "3600.0"), Some(4.0));

    // Drained: every bucket is 0 at once, not after the interval.
    run(&redis, &["ZREM", "delayed", "a", "b", "c", "d"]);
    let body = wait_value(&app, "queue_messages_ready", &[("queue", "delayed")], 0.0).await;
    for le in ["100.0", "1000.0", "3600.0", "+Inf"] {
        assert_eq!(bucket(&body, "delayed", le), Some(0.0), "le={le}\n{body}");
    }
    // Only young items (all under the smallest bound): exact at once too.
    run(
        &redis,
        &["ZADD", "delayed", &s(5.0), "d", &s(-100.0), "later"],
    );
    let body = wait_value(&app, "queue_messages_ready", &[("queue", "delayed")], 1.0).await;
    for le in ["100.0", "1000.0", "3600.0", "+Inf"] {
        assert_eq!(bucket(&body, "delayed", le), Some(1.0), "le={le}\n{body}");
    }
    app.stop().await;
}

#[tokio::test]
async fn hashes_sets_and_streams_with_groups() {
    let redis = RedisServer::start();
    run(
        &redis,
        &["HSET", "jobs:processing", "a", "1", "b", "2", "c", "3"],
    );
    run(&redis, &["SADD", "tags", "x", "y"]);
    for i in 0..5 {
        run(&redis, &["XADD", "events", "*", "n", &i.to_string()]);
    }
    run(&redis, &["XGROUP", "CREATE", "events", "workers", "0"]);
    // The group reads 2 entries (pending 2), leaving a lag of 3.
    run(
        &redis,
        &[
            "XREADGROUP",
            "GROUP",
            "workers",
            "w1",
            "COUNT",
            "2",
            "STREAMS",
            "events",
            ">",
        ],
    );
    let app = TestApp::start(&config(
        &redis.url,
        "      - key: jobs:processing\n      - key: tags\n      - key: events\n",
    ))
    .await;
    let body = wait_value(&app, "queue_depth", &[("queue", "events")], 5.0).await;
    assert_eq!(
        sample(&body, "queue_depth", &[("queue", "jobs:processing")]),
        Some(3.0)
    );
    assert_eq!(
        sample(
            &body,
            "queue_info",
            &[("queue", "jobs:processing"), ("type", "hash")]
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(&body, "queue_depth", &[("queue", "tags")]),
        Some(2.0)
    );
    assert_eq!(
        sample(&body, "queue_info", &[("queue", "tags"), ("type", "set")]),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &body,
            "queue_stream_group_lag",
            &[("queue", "events"), ("group", "workers")]
        ),
        Some(3.0)
    );
    assert_eq!(
        sample(
            &body,
            "queue_stream_group_pending",
            &[("queue", "events"), ("group", "workers")]
        ),
        Some(2.0)
    );
    assert_eq!(
        sample(
            &body,
            "queue_stream_group_consumers",
            &[("queue", "events"), ("group", "workers")]
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &body,
            "queue_messages_published_total",
            &[("queue", "events")]
        ),
        Some(5.0)
    );
    app.stop().await;
}

#[tokio::test]
async fn patterns_capture_labels_respect_types_and_max_keys() {
    let redis = RedisServer::start();
    for p in ["high", "normal", "low"] {
        run(&redis, &["RPUSH", &format!("jobs:pending:{p}"), "a"]);
    }
    run(&redis, &["SET", "jobs:pending:string", "not a queue"]);
    run(&redis, &["HSET", "jobs:pending:hash", "a", "1"]);
    let yaml = config(
        &redis.url,
        "      - pattern: \"jobs:pending:*\"\n        labels: \"jobs:pending:(?P<priority>[^:]+)\"\n        types: [list]\n",
    )
    .replace("    queues:\n", "    max_keys: 2\n    queues:\n");
    let app = TestApp::start(&yaml).await;
    let body = wait_value(
        &app,
        "queue_exporter_tracked_keys",
        &[("source", "main")],
        2.0,
    )
    .await;
    assert_eq!(
        sample(&body, "queue_exporter_dropped_keys", &[("source", "main")]),
        Some(1.0)
    );
    // Sorted key order: high, low are tracked; normal is the excess.
    assert_eq!(
        sample(
            &body,
            "queue_depth",
            &[("queue", "jobs:pending:high"), ("priority", "high")]
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &body,
            "queue_depth",
            &[("queue", "jobs:pending:low"), ("priority", "low")]
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(&body, "queue_depth", &[("queue", "jobs:pending:hash")]),
        None
    );
    assert_eq!(
        sample(&body, "queue_depth", &[("queue", "jobs:pending:string")]),
        None
    );
    app.stop().await;
}

#[tokio::test]
async fn discovery_finds_new_keys_and_forgets_vanished_ones() {
    let redis = RedisServer::start();
    run(&redis, &["RPUSH", "q:a", "1", "2"]);
    let app = TestApp::start(&config(&redis.url, "      - pattern: \"q:*\"\n")).await;
    wait_value(&app, "queue_depth", &[("queue", "q:a")], 2.0).await;
    run(&redis, &["RPUSH", "q:b", "1"]);
    wait_value(&app, "queue_depth", &[("queue", "q:b")], 1.0).await;
    run(&redis, &["DEL", "q:a"]);
    wait_for("q:a gone after discovery", WAIT, || async {
        let body = app.metrics().await;
        sample(&body, "queue_depth", &[("queue", "q:a")])
            .is_none()
            .then_some(())
    })
    .await;
    app.stop().await;
}

#[tokio::test]
async fn a_key_that_changes_type_is_measured_right_without_waiting_for_discovery() {
    let redis = RedisServer::start();
    run(&redis, &["RPUSH", "shape", "a", "b"]);
    let yaml = config(&redis.url, "      - key: shape\n")
        .replace("discovery_interval: 300ms", "discovery_interval: 1h");
    let app = TestApp::start(&yaml).await;
    wait_value(
        &app,
        "queue_info",
        &[("queue", "shape"), ("type", "list")],
        1.0,
    )
    .await;
    run(&redis, &["DEL", "shape"]);
    run(&redis, &["ZADD", "shape", "1", "a", "2", "b", "3", "c"]);
    let body = wait_value(
        &app,
        "queue_info",
        &[("queue", "shape"), ("type", "zset")],
        1.0,
    )
    .await;
    assert_eq!(
        sample(&body, "queue_depth", &[("queue", "shape")]),
        Some(3.0)
    );
    // Deleted: an exact key reports 0, then a new type appears.
    run(&redis, &["DEL", "shape"]);
    wait_value(&app, "queue_depth", &[("queue", "shape")], 0.0).await;
    run(&redis, &["HSET", "shape", "f", "v"]);
    let body = wait_value(
        &app,
        "queue_info",
        &[("queue", "shape"), ("type", "hash")],
        1.0,
    )
    .await;
    assert_eq!(
        sample(&body, "queue_depth", &[("queue", "shape")]),
        Some(1.0)
    );
    // Not a queue type: the type is shown, the depth is unknown (absent).
    run(&redis, &["DEL", "shape"]);
    run(&redis, &["SET", "shape", "plain string"]);
    let body = wait_value(
        &app,
        "queue_info",
        &[("queue", "shape"), ("type", "string")],
        1.0,
    )
    .await;
    assert_eq!(sample(&body, "queue_depth", &[("queue", "shape")]), None);
    // And back to a stream.
    run(&redis, &["DEL", "shape"]);
    run(&redis, &["XADD", "shape", "*", "k", "v"]);
    let body = wait_value(
        &app,
        "queue_info",
        &[("queue", "shape"), ("type", "stream")],
        1.0,
    )
    .await;
    assert_eq!(
        sample(&body, "queue_depth", &[("queue", "shape")]),
        Some(1.0)
    );
    app.stop().await;
}

#[tokio::test]
async fn a_restarted_redis_goes_up_down_up_and_values_are_right_after() {
    let mut redis = RedisServer::start();
    run(&redis, &["RPUSH", "work", "a", "b", "c"]);
    let app = TestApp::start(&config(&redis.url, "      - key: work\n")).await;
    let body = wait_value(&app, "queue_depth", &[("queue", "work")], 3.0).await;
    assert_eq!(
        sample(&body, "queue_exporter_source_up", &[("source", "main")]),
        Some(1.0)
    );
    // Every error reason is exported at 0 before anything fails, so rate()
    // alerts see the first error.
    for reason in ["connect", "auth", "timeout", "backend"] {
        assert_eq!(
            sample(
                &body,
                "queue_exporter_poll_errors_total",
                &[("source", "main"), ("reason", reason)]
            ),
            Some(0.0),
            "{reason}"
        );
    }

    redis.stop();
    let body = wait_value(&app, "queue_exporter_source_up", &[("source", "main")], 0.0).await;
    // Down: queue series are dropped, not shown stale; the last success stays.
    assert_eq!(sample(&body, "queue_depth", &[("queue", "work")]), None);
    assert!(
        sample(
            &body,
            "queue_exporter_last_success_timestamp_seconds",
            &[("source", "main")]
        )
        .is_some()
    );
    let errors = |body: &str| {
        sample(
            body,
            "queue_exporter_poll_errors_total",
            &[("source", "main"), ("reason", "connect")],
        )
    };
    let first_errors = errors(&body).unwrap_or(0.0);
    assert!(first_errors >= 1.0, "{body}");
    let last_success = |body: &str| {
        sample(
            body,
            "queue_exporter_last_success_timestamp_seconds",
            &[("source", "main")],
        )
    };
    let frozen = last_success(&body);
    // More failed polls (retries keep going, the process keeps serving):
    // the errors grow, the last success does not move, nothing reappears.
    let body = wait_for("more connect errors", WAIT, || async {
        let body = app.metrics().await;
        (errors(&body)? >= first_errors + 2.0).then_some(body)
    })
    .await;
    assert_eq!(last_success(&body), frozen);
    assert_eq!(sample(&body, "queue_depth", &[("queue", "work")]), None);
    assert_eq!(
        sample(&body, "queue_exporter_source_up", &[("source", "main")]),
        Some(0.0)
    );

    redis.restart();
    run(&redis, &["RPUSH", "work", "x"]);
    let body = wait_value(&app, "queue_depth", &[("queue", "work")], 1.0).await;
    assert_eq!(
        sample(&body, "queue_exporter_source_up", &[("source", "main")]),
        Some(1.0)
    );
    assert!(last_success(&body) > frozen);
    app.stop().await;
}

#[tokio::test]
async fn works_under_a_read_only_acl_and_sends_no_writes() {
    let redis = RedisServer::start();
    run(
        &redis,
        &[
            "ACL",
            "SETUSER",
            "qe",
            "on",
            ">s3cret",
            "~*",
            "&*",
            "-@all",
            "+@read",
            "+@connection",
        ],
    );
    // The queues live in database 1, so the exporter also has to SELECT
    // (in `@connection` on Redis 7).
    let db1 = redis::Client::open(format!("{}/1", redis.url)).unwrap();
    let mut db1 = db1.get_connection().unwrap();
    for args in [
        &["RPUSH", "work", "a"][..],
        &["ZADD", "jobs:z", "1", "a"],
        &["XADD", "ev", "*", "k", "v"],
        &["XGROUP", "CREATE", "ev", "g", "0"],
    ] {
        let mut c = redis::cmd(args[0]);
        for a in &args[1..] {
            c.arg(*a);
        }
        let _: redis::Value = c.query(&mut db1).unwrap();
    }
    // Watch every command the server receives.
    let mut monitor = start_monitor(&redis);

    let dir = tempfile::tempdir().unwrap();
    let pw = write_file(&dir, "pw", "s3cret\n");
    let url = format!("{}/1", redis.url.replace("redis://", "redis://qe@"));
    let yaml = config(&url, "      - key: work\n      - pattern: \"jobs:*\"\n        score: timestamp\n      - key: ev\n")
        .replace("    queues:\n", &format!("    password_file: {}\n    queues:\n", pw.display()));
    let app = TestApp::start(&yaml).await;
    let body = wait_value(&app, "queue_depth", &[("queue", "ev")], 1.0).await;
    assert_eq!(
        sample(&body, "queue_depth", &[("queue", "work")]),
        Some(1.0)
    );
    assert_eq!(
        sample(&body, "queue_depth", &[("queue", "jobs:z")]),
        Some(1.0)
    );
    wait_polls(&app, 5.0).await;
    let body = app.metrics().await;
    let errors: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with("queue_exporter_poll_errors_total{") && !l.ends_with(" 0"))
        .collect();
    assert!(errors.is_empty(), "errors under read-only ACL: {errors:?}");
    app.stop().await;

    let seen = monitored(&mut monitor);
    assert!(!seen.is_empty(), "MONITOR saw nothing");
    // Every command the exporter sent is one of these read-only ones
    // (the monitoring connection itself sent nothing after MONITOR).
    let allowed = [
        "SCAN", "TYPE", "LLEN", "LINDEX", "ZCARD", "ZCOUNT", "ZRANGE", "HLEN", "SCARD", "XINFO",
        "HELLO", "AUTH", "CLIENT", "PING", "SELECT",
    ];
    let mut names = std::collections::BTreeSet::new();
    for line in &seen {
        // `1700000000.123456 [0 127.0.0.1:5555] "SCAN" "0" ...`
        let name = line
            .split_once("] \"")
            .and_then(|(_, rest)| rest.split('"').next())
            .unwrap_or_default()
            .to_ascii_uppercase();
        assert!(
            allowed.contains(&name.as_str()),
            "unexpected command {name:?}: {line}"
        );
        names.insert(name);
    }
    for expected in ["SCAN", "LLEN", "ZCOUNT", "XINFO", "SELECT"] {
        assert!(names.contains(expected), "{expected} not seen in {names:?}");
    }
    // Nothing was refused by the ACL either (a refused command is not shown by MONITOR).
    let log: Vec<redis::Value> = redis::cmd("ACL")
        .arg("LOG")
        .query(&mut redis.conn())
        .unwrap();
    assert!(log.is_empty(), "ACL denials: {log:?}");
    let writes = [
        "\"SET\"",
        "\"DEL\"",
        "\"RPUSH\"",
        "\"LPOP\"",
        "\"ZADD\"",
        "\"KEYS\"",
        "\"EXPIRE\"",
        "\"XACK\"",
        "\"HSET\"",
    ];
    for line in &seen {
        assert!(
            !writes.iter().any(|w| line.contains(w)),
            "write or KEYS sent: {line}"
        );
    }
    assert!(seen.iter().any(|l| l.contains("\"SCAN\"")), "no SCAN seen");
}

#[tokio::test]
async fn list_ages_in_every_unit_and_parse_failures_keep_counting() {
    let redis = RedisServer::start();
    let t = now();
    let rfc = chrono::DateTime::from_timestamp((t - 200.0) as i64, 0)
        .unwrap()
        .with_timezone(&chrono::FixedOffset::east_opt(2 * 3600).unwrap())
        .to_rfc3339();
    let items: Vec<(&str, String, &str)> = vec![
        // (key, head item, age spec)
        ("u:s", format!("{:.3}", t - 10.5), "{ unit: seconds }"),
        (
            "u:ms",
            format!("{{\"at\":{}}}", ((t - 20.0) * 1e3) as i64),
            "{ field: at, unit: milliseconds }",
        ),
        (
            "u:us",
            format!("{{\"at\":{}}}", ((t - 30.0) * 1e6) as i64),
            "{ field: at, unit: microseconds }",
        ),
        (
            "u:ns",
            format!("{{\"a\":{{\"b\":[{}]}}}}", ((t - 40.0) * 1e9) as i64),
            "{ field: a.b.0, unit: nanoseconds }",
        ),
        (
            "u:auto-ms-string",
            format!("{{\"at\":\"{}\"}}", ((t - 50.0) * 1e3) as i64),
            "{ field: at }",
        ),
        ("u:auto-rfc", rfc, "{ unit: auto }"),
        (
            "u:future",
            format!("{}", (t + 3600.0) as i64),
            "{ unit: seconds }",
        ),
        ("bad:no-field", "{\"other\":1}".to_string(), "{ field: at }"),
        ("bad:rfc", "yesterday".to_string(), "{ unit: rfc3339 }"),
    ];
    let mut queues = String::new();
    for (key, item, age) in &items {
        // The oldest item at the head, a newer one behind it.
        run(&redis, &["RPUSH", key, item, "newer"]);
        queues.push_str(&format!("      - key: {key}\n        age: {age}\n"));
    }
    let app = TestApp::start(&config(&redis.url, &queues)).await;
    let body = wait_value(&app, "queue_depth", &[("queue", "bad:rfc")], 2.0).await;
    for (key, want) in [
        ("u:s", 10.5),
        ("u:ms", 20.0),
        ("u:us", 30.0),
        ("u:ns", 40.0),
        ("u:auto-ms-string", 50.0),
        ("u:auto-rfc", 200.0),
    ] {
        let age = sample(&body, "queue_oldest_message_age_seconds", &[("queue", key)])
            .unwrap_or_else(|| panic!("{key}: no age\n{body}"));
        assert!(
            age >= want - 1.0 && age < want + 30.0,
            "{key}: age {age}, want about {want}"
        );
    }
    // A timestamp in the future (clock skew) is not a negative age.
    assert_eq!(
        sample(
            &body,
            "queue_oldest_message_age_seconds",
            &[("queue", "u:future")]
        ),
        Some(0.0)
    );
    for key in ["bad:no-field", "bad:rfc"] {
        assert_eq!(
            sample(&body, "queue_oldest_message_age_seconds", &[("queue", key)]),
            None,
            "{key}: an unreadable item has no age, not 0"
        );
    }
    // Two unreadable items per poll: the counter keeps growing.
    let first = sample(
        &body,
        "queue_exporter_age_parse_failures_total",
        &[("source", "main")],
    )
    .unwrap();
    assert!(first >= 2.0, "{first}");
    wait_for("parse failures grow", WAIT, || async {
        let n = sample(
            &app.metrics().await,
            "queue_exporter_age_parse_failures_total",
            &[("source", "main")],
        )?;
        (n >= first + 2.0).then_some(())
    })
    .await;
    app.stop().await;
}

#[tokio::test]
async fn timestamp_zsets_with_nothing_due_fractional_scores_and_missing_keys() {
    let redis = RedisServer::start();
    let t = now();
    let s = |off: f64| format!("{:.3}", t + off);
    // Nothing due yet.
    run(&redis, &["ZADD", "later", &s(100.0), "a", &s(200.0), "b"]);
    // Fractional seconds, all due, well inside the first default bucket (1 s)
    // apart from one that is 5 s old.
    run(
        &redis,
        &["ZADD", "frac", &s(-0.25), "a", &s(-0.5), "b", &s(-5.0), "c"],
    );
    let app = TestApp::start(&config(
        &redis.url,
        "      - key: later\n        score: timestamp\n      - key: frac\n        score: timestamp\n      - key: gone\n        score: timestamp\n        score_unit: milliseconds\n",
    ))
    .await;
    let body = wait_value(&app, "queue_depth", &[("queue", "frac")], 3.0).await;
    let q = |name: &str, queue: &str| sample(&body, name, &[("queue", queue)]);
    assert_eq!(q("queue_depth", "later"), Some(2.0));
    assert_eq!(q("queue_messages_ready", "later"), Some(0.0));
    assert_eq!(q("queue_messages_scheduled", "later"), Some(2.0));
    // Nothing waiting: 0, which is known (not absent).
    assert_eq!(q("queue_oldest_message_age_seconds", "later"), Some(0.0));
    assert_eq!(q("queue_message_age_seconds_gcount", "later"), Some(0.0));

    assert_eq!(q("queue_messages_ready", "frac"), Some(3.0));
    assert_eq!(q("queue_messages_scheduled", "frac"), Some(0.0));
    let age = q("queue_oldest_message_age_seconds", "frac").unwrap();
    assert!((5.0..30.0).contains(&age), "{age}");
    // Default buckets run from 1 s to 1 day.
    let les = [
        "1.0", "10.0", "60.0", "300.0", "900.0", "3600.0", "86400.0", "+Inf",
    ];
    for le in les {
        assert_eq!(bucket(&body, "later", le), Some(0.0), "later le={le}");
        assert_eq!(bucket(&body, "gone", le), Some(0.0), "gone le={le}");
    }
    assert_eq!(bucket(&body, "frac", "10.0"), Some(3.0));
    assert_eq!(bucket(&body, "frac", "+Inf"), Some(3.0));
    assert!(bucket(&body, "frac", "1.0").is_some_and(|c| c <= 2.0));

    // A configured timestamp zset that does not exist: empty, type none,
    // every series present so dashboards and autoscalers see a 0.
    assert_eq!(q("queue_depth", "gone"), Some(0.0));
    assert_eq!(q("queue_messages_ready", "gone"), Some(0.0));
    assert_eq!(q("queue_messages_scheduled", "gone"), Some(0.0));
    assert_eq!(q("queue_oldest_message_age_seconds", "gone"), Some(0.0));
    assert_eq!(
        sample(&body, "queue_info", &[("queue", "gone"), ("type", "none")]),
        Some(1.0)
    );
    // It appears: measured at once (in milliseconds), no discovery needed.
    let ms = |off: f64| format!("{}", ((t + off) * 1000.0) as i64);
    run(&redis, &["ZADD", "gone", &ms(-90.0), "a", &ms(90.0), "b"]);
    let body = wait_value(&app, "queue_depth", &[("queue", "gone")], 2.0).await;
    assert_eq!(
        sample(&body, "queue_messages_ready", &[("queue", "gone")]),
        Some(1.0)
    );
    assert_eq!(bucket(&body, "gone", "300.0"), Some(1.0));
    assert_eq!(bucket(&body, "gone", "60.0"), Some(0.0));
    app.stop().await;
}

#[tokio::test]
async fn vanished_pattern_keys_read_zero_until_the_next_discovery() {
    let redis = RedisServer::start();
    let t = now();
    run(&redis, &["RPUSH", "v:list", "a", "b"]);
    run(&redis, &["ZADD", "v:zset", &format!("{}", t - 10.0), "a"]);
    run(&redis, &["HSET", "v:hash", "f", "1"]);
    run(&redis, &["SADD", "v:set", "m"]);
    run(&redis, &["XADD", "v:stream", "*", "k", "v"]);
    // Discovery every 3 s: long enough to see the zeros in between.
    let yaml = config(
        &redis.url,
        "      - pattern: \"v:*\"\n        score: timestamp\n        age: { unit: seconds }\n",
    )
    .replace("discovery_interval: 300ms", "discovery_interval: 3s");
    let app = TestApp::start(&yaml).await;
    wait_value(
        &app,
        "queue_exporter_tracked_keys",
        &[("source", "main")],
        5.0,
    )
    .await;
    wait_value(&app, "queue_depth", &[("queue", "v:stream")], 1.0).await;
    let keys = ["v:list", "v:zset", "v:hash", "v:set", "v:stream"];
    for k in keys {
        run(&redis, &["DEL", k]);
    }
    // Deleted, but discovery has not confirmed it: 0, still tracked.
    let body = wait_for("all five read 0", WAIT, || async {
        let body = app.metrics().await;
        keys.iter()
            .all(|k| sample(&body, "queue_depth", &[("queue", k)]) == Some(0.0))
            .then_some(body)
    })
    .await;
    assert_eq!(
        sample(&body, "queue_exporter_tracked_keys", &[("source", "main")]),
        Some(5.0)
    );
    assert_eq!(
        sample(&body, "queue_messages_ready", &[("queue", "v:zset")]),
        Some(0.0)
    );
    assert_eq!(
        sample(&body, "queue_messages_ready", &[("queue", "v:stream")]),
        Some(0.0)
    );
    assert_eq!(
        sample(&body, "queue_exporter_source_up", &[("source", "main")]),
        Some(1.0),
        "a vanished key is not an error"
    );
    // The next discovery forgets them.
    let body = wait_value(
        &app,
        "queue_exporter_tracked_keys",
        &[("source", "main")],
        0.0,
    )
    .await;
    for k in keys {
        assert_eq!(sample(&body, "queue_depth", &[("queue", k)]), None, "{k}");
        assert!(!body.contains(&format!("queue=\"{k}\"")), "{k} still shown");
    }
    app.stop().await;
}

#[tokio::test]
async fn a_redis_that_is_down_at_start_is_picked_up_when_it_comes_up() {
    let mut redis = RedisServer::start();
    redis.stop();
    let app = TestApp::start(&config(&redis.url, "      - key: work\n")).await;
    let body = wait_errors(&app, "connect", 2.0).await;
    assert_eq!(
        sample(&body, "queue_exporter_source_up", &[("source", "main")]),
        Some(0.0)
    );
    // Never polled successfully: no queue series and no last success.
    assert_eq!(sample(&body, "queue_depth", &[("queue", "work")]), None);
    assert_eq!(
        sample(
            &body,
            "queue_exporter_last_success_timestamp_seconds",
            &[("source", "main")]
        ),
        None
    );
    redis.restart();
    run(&redis, &["RPUSH", "work", "a", "b"]);
    let body = wait_value(&app, "queue_depth", &[("queue", "work")], 2.0).await;
    assert_eq!(
        sample(&body, "queue_exporter_source_up", &[("source", "main")]),
        Some(1.0)
    );
    assert!(
        sample(
            &body,
            "queue_exporter_last_success_timestamp_seconds",
            &[("source", "main")]
        )
        .is_some_and(|ts| (ts - now()).abs() < 60.0)
    );
    app.stop().await;
}

#[tokio::test]
async fn a_redis_that_never_answers_counts_timeouts() {
    let silent = SilentServer::start();
    let yaml = config(&silent.redis_url(), "      - key: work\n")
        .replace("    queues:\n", "    timeout: 200ms\n    queues:\n");
    let app = TestApp::start(&yaml).await;
    let body = wait_errors(&app, "timeout", 1.0).await;
    assert_eq!(
        sample(&body, "queue_exporter_source_up", &[("source", "main")]),
        Some(0.0)
    );
    // Still serving.
    let (status, _, _) = http_get(&format!("{}/healthz", app.base), &[]).await;
    assert_eq!(status, 200);
    app.stop().await;
}

#[tokio::test]
async fn a_key_the_acl_does_not_cover_is_unknown_and_counted_not_zero() {
    let redis = RedisServer::start();
    // This user may read `q:*` only.
    run(
        &redis,
        &[
            "ACL",
            "SETUSER",
            "lim",
            "on",
            ">pw",
            "~q:*",
            "-@all",
            "+@read",
            "+@connection",
        ],
    );
    run(&redis, &["RPUSH", "q:1", "a"]);
    run(&redis, &["RPUSH", "secret", "a", "b", "c"]);
    run(&redis, &["XADD", "secret:stream", "*", "k", "v"]);
    let url = redis.url.replace("redis://", "redis://lim:pw@");
    let app = TestApp::start(&config(
        &url,
        "      - key: q:1\n      - key: secret\n      - key: secret:stream\n      - key: q:missing\n",
    ))
    .await;
    let body = wait_errors(&app, "auth", 4.0).await;
    // The readable keys are fine and the source is up.
    assert_eq!(
        sample(&body, "queue_exporter_source_up", &[("source", "main")]),
        Some(1.0)
    );
    assert_eq!(sample(&body, "queue_depth", &[("queue", "q:1")]), Some(1.0));
    assert_eq!(
        sample(&body, "queue_depth", &[("queue", "q:missing")]),
        Some(0.0)
    );
    // The refused ones are unknown: no made-up empty queue, no made-up type.
    for key in ["secret", "secret:stream"] {
        assert!(
            !body.contains(&format!("queue=\"{key}\"")),
            "{key} reported:\n{body}"
        );
    }
    app.stop().await;
}

#[tokio::test]
async fn patterns_without_types_share_one_scan_and_the_first_spec_wins() {
    let redis = RedisServer::start();
    let t = now();
    run(&redis, &["RPUSH", "queue:list:1", "a", "b"]);
    run(
        &redis,
        &["ZADD", "queue:zset:1", &format!("{}", t - 30.0), "a"],
    );
    run(
        &redis,
        &["ZADD", "queue:zset:2", &format!("{}", t + 60.0), "a"],
    );
    run(&redis, &["RPUSH", "other:list", "a"]);
    for i in 0..50 {
        run(&redis, &["SET", &format!("cache:{i}"), "v"]);
    }
    // Watch the SCANs the exporter sends.
    let mut monitor = start_monitor(&redis);
    // `queue:zset:*` is claimed by the timestamp spec (listed first); the
    // catch-all `queue:*` gets the rest; `other:*` has its own glob.
    let yaml = config(
        &redis.url,
        "      - pattern: \"queue:z?et:*\"\n        score: timestamp\n      - pattern: \"queue:*\"\n      - pattern: \"other:*\"\n",
    )
    .replace("discovery_interval: 300ms", "discovery_interval: 1h");
    let app = TestApp::start(&yaml).await;
    let body = wait_value(
        &app,
        "queue_exporter_tracked_keys",
        &[("source", "main")],
        4.0,
    )
    .await;
    let q = |name: &str, queue: &str| sample(&body, name, &[("queue", queue)]);
    assert_eq!(q("queue_depth", "queue:list:1"), Some(2.0));
    assert_eq!(q("queue_depth", "other:list"), Some(1.0));
    // Timestamp semantics prove the first spec claimed the zsets.
    assert_eq!(q("queue_messages_ready", "queue:zset:1"), Some(1.0));
    assert_eq!(q("queue_messages_scheduled", "queue:zset:2"), Some(1.0));
    assert_eq!(q("queue_depth", "cache:1"), None);
    app.stop().await;

    let mut scans = BTreeSet::new();
    for line in monitored(&mut monitor) {
        if line.contains("\"SCAN\"") {
            // The MATCH argument of each SCAN call.
            let args: Vec<&str> = line.split('"').skip(1).step_by(2).collect();
            if let Some(i) = args.iter().position(|a| a.eq_ignore_ascii_case("MATCH")) {
                scans.insert(args[i + 1].to_string());
            }
        }
    }
    // One pass over the three globs' common prefix: the empty prefix here.
    assert_eq!(scans, BTreeSet::from(["*".to_string()]), "{scans:?}");
}
