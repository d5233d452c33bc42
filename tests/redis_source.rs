//! The Redis source against a private redis-server per test: what each key
//! type reports, discovery, type changes, odd key names and outages.
mod support;

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
        "    age_buckets: [10s, 100s, 1000s, 1h]\n    queues:\n",
    );
    let app = TestApp::start(&yaml).await;
    let body = wait_value(
        &app,
        "queue_message_age_seconds_gcount",
        &[("queue", "delayed")],
        4.0,
    )
    .await;
    let bucket = |le: &str| {
        sample(
            &body,
            "queue_message_age_seconds_bucket",
            &[("queue", "delayed"), ("le", le)],
        )
    };
    assert_eq!(bucket("10.0"), Some(1.0));
    assert_eq!(bucket("100.0"), Some(2.0));
    assert_eq!(bucket("1000.0"), Some(3.0));
    assert_eq!(bucket("3600.0"), Some(4.0));
    assert_eq!(bucket("+Inf"), Some(4.0));
    // Steady polls (which skip implied buckets) keep the same answer.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let body = app.metrics().await;
    assert_eq!(
        sample(
            &body,
            "queue_message_age_seconds_bucket",
            &[("queue", "delayed"), ("le", "1000.0")]
        ),
        Some(3.0)
    );
    assert_eq!(
        sample(
            &body,
            "queue_message_age_seconds_bucket",
            &[("queue", "delayed"), ("le", "3600.0")]
        ),
        Some(4.0)
    );
    // An older item arriving after the hint was learned is still counted right.
    run(&redis, &["ZADD", "delayed", &s(3000.0), "f"]);
    let body = wait_value(
        &app,
        "queue_message_age_seconds_gcount",
        &[("queue", "delayed")],
        5.0,
    )
    .await;
    assert_eq!(
        sample(
            &body,
            "queue_message_age_seconds_bucket",
            &[("queue", "delayed"), ("le", "1000.0")]
        ),
        Some(3.0)
    );
    assert_eq!(
        sample(
            &body,
            "queue_message_age_seconds_bucket",
            &[("queue", "delayed"), ("le", "3600.0")]
        ),
        Some(5.0)
    );
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
    app.stop().await;
}

#[tokio::test]
async fn a_restarted_redis_goes_up_down_up_and_values_are_right_after() {
    let mut redis = RedisServer::start();
    run(&redis, &["RPUSH", "work", "a", "b", "c"]);
    let app = TestApp::start(&config(&redis.url, "      - key: work\n")).await;
    wait_value(&app, "queue_depth", &[("queue", "work")], 3.0).await;
    assert_eq!(
        sample(
            &app.metrics().await,
            "queue_exporter_source_up",
            &[("source", "main")]
        ),
        Some(1.0)
    );

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
    assert!(
        sample(
            &body,
            "queue_exporter_poll_errors_total",
            &[("source", "main"), ("reason", "connect")]
        )
        .unwrap_or(0.0)
            >= 1.0
    );

    redis.restart();
    run(&redis, &["RPUSH", "work", "x"]);
    let body = wait_value(&app, "queue_depth", &[("queue", "work")], 1.0).await;
    assert_eq!(
        sample(&body, "queue_exporter_source_up", &[("source", "main")]),
        Some(1.0)
    );
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
    run(&redis, &["RPUSH", "work", "a"]);
    run(&redis, &["ZADD", "jobs:z", "1", "a"]);
    run(&redis, &["XADD", "ev", "*", "k", "v"]);
    run(&redis, &["XGROUP", "CREATE", "ev", "g", "0"]);
    // Watch every command the server receives.
    let client = redis::Client::open(redis.url.as_str()).unwrap();
    let mut monitor = client.get_connection().unwrap();
    redis::cmd("MONITOR").exec(&mut monitor).unwrap();
    monitor
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let pw = write_file(&dir, "pw", "s3cret\n");
    let url = redis.url.replace("redis://", "redis://qe@");
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
    tokio::time::sleep(Duration::from_millis(500)).await;
    let body = app.metrics().await;
    assert!(
        !body.contains("queue_exporter_poll_errors_total{"),
        "errors under read-only ACL:\n{body}"
    );
    app.stop().await;

    let mut seen = Vec::new();
    while let Ok(v) = monitor.recv_response() {
        if let redis::Value::SimpleString(s) = v {
            seen.push(s);
        }
    }
    assert!(!seen.is_empty(), "MONITOR saw nothing");
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
