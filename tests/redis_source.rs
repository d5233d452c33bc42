//! The Redis source against a private redis-server per test: what each key
//! type reports, discovery, type changes, odd key names and outages.
mod support;

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use support::*;

const WAIT: Duration = Duration::from_secs(15);

/// The default age buckets: 1 s to 1 day, and `+Inf`.
const DEFAULT_LES: [&str; 8] = [
    "1.0", "10.0", "60.0", "300.0", "900.0", "3600.0", "86400.0", "+Inf",
];

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// A timestamp `secs` before `t`, in seconds with milliseconds.
fn ago(t: f64, secs: f64) -> String {
    format!("{:.3}", t - secs)
}

/// Source `main` over `url`, polled every 100 ms and rediscovered every
/// 300 ms, watching `queues` (a YAML list, flush left or indented).
fn config(url: &str, queues: &str) -> String {
    config_with(url, "", queues)
}

/// As [`config`], with `settings` (YAML lines) added to the source; a
/// setting named there replaces the default of the same name.
fn config_with(url: &str, settings: &str, queues: &str) -> String {
    let settings = dedent(settings);
    let named = |key: &str| settings.lines().any(|l| l.starts_with(&format!("{key}:")));
    let mut source = String::new();
    for (key, default) in [("poll_interval", "100ms"), ("discovery_interval", "300ms")] {
        if !named(key) {
            source += &format!("{key}: {default}\n");
        }
    }
    source += &settings;
    format!(
        r#"listen: {{ grpc: null }}
sources:
  - name: main
    type: redis
    url: {url}
{source}    queues:
{queues}"#,
        source = indent(&source, 4),
        queues = indent(queues, 6),
    )
}

fn run(redis: &RedisServer, args: &[&str]) {
    let mut c = redis::cmd(args[0]);
    for a in &args[1..] {
        c.arg(*a);
    }
    let _: redis::Value = c.query(&mut redis.conn()).unwrap();
}

/// Waits until source `main` has counted `min` errors with `reason`, and
/// returns that scrape.
async fn wait_errors(app: &TestApp, reason: &str, min: f64) -> Scrape {
    app.scrape_until(&format!("{min} {reason} errors counted"), WAIT, |s| {
        s.errors("main", reason).is_some_and(|n| n >= min)
    })
    .await
}

/// Waits until the source `main` has finished `n` more polls.
async fn wait_polls(app: &TestApp, n: f64) {
    let polls = || async {
        app.scrape().await.value(
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

/// Waits until `name{labels}` has the value `want`, and returns that scrape.
async fn wait_value(app: &TestApp, name: &str, labels: &[(&str, &str)], want: f64) -> Scrape {
    app.wait_value(name, labels, want, WAIT).await
}

/// Waits until `queue_depth{queue}` is `want`, and returns that scrape.
async fn wait_depth(app: &TestApp, queue: &str, want: f64) -> Scrape {
    wait_value(app, "queue_depth", &[("queue", queue)], want).await
}

/// Waits until source `main` tracks `n` keys, and returns that scrape.
async fn wait_tracked(app: &TestApp, n: f64) -> Scrape {
    wait_value(app, "queue_exporter_tracked_keys", &[("source", "main")], n).await
}

// Lists.

#[tokio::test]
async fn a_list_reports_its_depth_and_the_age_of_its_head_item() {
    let redis = RedisServer::start();
    let t = now() as i64;
    let head = format!(r#"{{"enqueued_at":{}}}"#, t - 100);
    run(&redis, &["RPUSH", "emails", &head, r#"{"enqueued_at":1}"#]);
    let app = TestApp::start(&config(
        &redis.url,
        r#"
        - key: emails
          age: { end: head, field: enqueued_at, unit: auto }
        "#,
    ))
    .await;
    let scrape = wait_depth(&app, "emails", 2.0).await;
    assert_eq!(scrape.queue("queue_messages_ready", "emails"), Some(2.0));
    let age = scrape.age("emails").unwrap();
    assert!((99.0..130.0).contains(&age), "head age {age}");
    app.stop().await;
}

#[tokio::test]
async fn the_age_can_be_read_from_the_tail_in_milliseconds() {
    let redis = RedisServer::start();
    let t = now() as i64;
    run(
        &redis,
        &["LPUSH", "lifo", &format!("{}", (t - 50) * 1000), "x"],
    );
    let app = TestApp::start(&config(
        &redis.url,
        r#"
        - key: lifo
          age: { end: tail, unit: milliseconds }
        "#,
    ))
    .await;
    let scrape = wait_depth(&app, "lifo", 2.0).await;
    let age = scrape.age("lifo").unwrap();
    assert!((49.0..80.0).contains(&age), "tail age {age}");
    app.stop().await;
}

#[tokio::test]
async fn the_age_can_be_an_rfc3339_date_in_a_nested_field() {
    let redis = RedisServer::start();
    run(
        &redis,
        &["RPUSH", "rfc", r#"{"meta":{"at":"2020-01-01T00:00:00Z"}}"#],
    );
    let app = TestApp::start(&config(
        &redis.url,
        r#"
        - key: rfc
          age: { field: meta.at, unit: rfc3339 }
        "#,
    ))
    .await;
    let scrape = wait_depth(&app, "rfc", 1.0).await;
    let age = scrape.age("rfc").unwrap();
    assert!(age > 86400.0 * 365.0, "rfc3339 age {age}");
    app.stop().await;
}

#[tokio::test]
async fn an_unparseable_head_item_has_no_age_keeps_its_depth_and_is_counted() {
    let redis = RedisServer::start();
    run(&redis, &["RPUSH", "garbage", "not json"]);
    let app = TestApp::start(&config(
        &redis.url,
        r#"
        - key: garbage
          age: { field: enqueued_at }
        "#,
    ))
    .await;
    let scrape = wait_depth(&app, "garbage", 1.0).await;
    // Absent, never 0.
    assert_eq!(scrape.age("garbage"), None);
    assert_eq!(scrape.depth("garbage"), Some(1.0));
    assert!(
        scrape
            .value(
                "queue_exporter_age_parse_failures_total",
                &[("source", "main")]
            )
            .unwrap()
            >= 1.0
    );
    app.stop().await;
}

#[tokio::test]
async fn a_missing_exact_key_is_an_empty_queue_of_type_none_with_age_zero() {
    let redis = RedisServer::start();
    let app = TestApp::start(&config(
        &redis.url,
        r#"
        - key: empty
          age: { field: enqueued_at }
        "#,
    ))
    .await;
    let scrape = wait_depth(&app, "empty", 0.0).await;
    assert_eq!(scrape.depth("empty"), Some(0.0));
    assert_eq!(scrape.age("empty"), Some(0.0));
    assert!(scrape.has_type("empty", "none"));
    app.stop().await;
}

/// Pushes each `(key, head item, age spec)` as the head of a list with a
/// newer item behind it, starts an app watching them, and waits until the
/// last list is read.
async fn start_with_list_heads(redis: &RedisServer, lists: &[(&str, String, &str)]) -> TestApp {
    let mut queues = String::new();
    for (key, head, age) in lists {
        run(redis, &["RPUSH", key, head, "newer"]);
        queues += &format!("- {{ key: {key}, age: {age} }}\n");
    }
    let app = TestApp::start(&config(&redis.url, &queues)).await;
    let (last, _, _) = lists.last().expect("a list");
    wait_depth(&app, last, 2.0).await;
    app
}

/// Asserts that each `(key, seconds)` reports an age of about `seconds`.
fn assert_ages(scrape: &Scrape, want: &[(&str, f64)]) {
    for (key, want) in want {
        let age = scrape
            .age(key)
            .unwrap_or_else(|| panic!("{key}: no age\n{scrape}"));
        assert!(
            age >= want - 1.0 && age < want + 30.0,
            "{key}: age {age}, want about {want}"
        );
    }
}

#[tokio::test]
async fn list_ages_are_read_in_seconds_milli_micro_and_nanoseconds() {
    let redis = RedisServer::start();
    let t = now();
    let app = start_with_list_heads(
        &redis,
        &[
            ("u:s", format!("{:.3}", t - 10.5), "{ unit: seconds }"),
            (
                "u:ms",
                format!(r#"{{"at":{}}}"#, ((t - 20.0) * 1e3) as i64),
                "{ field: at, unit: milliseconds }",
            ),
            (
                "u:us",
                format!(r#"{{"at":{}}}"#, ((t - 30.0) * 1e6) as i64),
                "{ field: at, unit: microseconds }",
            ),
            (
                "u:ns",
                format!(r#"{{"a":{{"b":[{}]}}}}"#, ((t - 40.0) * 1e9) as i64),
                "{ field: a.b.0, unit: nanoseconds }",
            ),
        ],
    )
    .await;
    assert_ages(
        &app.scrape().await,
        &[
            ("u:s", 10.5),
            ("u:ms", 20.0),
            ("u:us", 30.0),
            ("u:ns", 40.0),
        ],
    );
    app.stop().await;
}

#[tokio::test]
async fn unit_auto_reads_a_millisecond_string_and_an_rfc3339_date() {
    let redis = RedisServer::start();
    let t = now();
    let rfc = chrono::DateTime::from_timestamp((t - 200.0) as i64, 0)
        .unwrap()
        .with_timezone(&chrono::FixedOffset::east_opt(2 * 3600).unwrap())
        .to_rfc3339();
    let app = start_with_list_heads(
        &redis,
        &[
            (
                "u:auto-ms-string",
                format!(r#"{{"at":"{}"}}"#, ((t - 50.0) * 1e3) as i64),
                "{ field: at }",
            ),
            ("u:auto-rfc", rfc, "{ unit: auto }"),
        ],
    )
    .await;
    assert_ages(
        &app.scrape().await,
        &[("u:auto-ms-string", 50.0), ("u:auto-rfc", 200.0)],
    );
    app.stop().await;
}

#[tokio::test]
async fn a_timestamp_in_the_future_is_age_zero_not_negative() {
    // Clock skew between the producer and the exporter.
    let redis = RedisServer::start();
    let future = format!("{}", (now() + 3600.0) as i64);
    let app = start_with_list_heads(&redis, &[("u:future", future, "{ unit: seconds }")]).await;
    assert_eq!(app.scrape().await.age("u:future"), Some(0.0));
    app.stop().await;
}

/// Two lists whose head items have no readable time.
fn unreadable_heads() -> [(&'static str, String, &'static str); 2] {
    [
        (
            "bad:no-field",
            r#"{"other":1}"#.to_string(),
            "{ field: at }",
        ),
        ("bad:rfc", "yesterday".to_string(), "{ unit: rfc3339 }"),
    ]
}

#[tokio::test]
async fn an_unreadable_head_item_has_no_age_rather_than_zero() {
    let redis = RedisServer::start();
    let app = start_with_list_heads(&redis, &unreadable_heads()).await;
    let scrape = app.scrape().await;
    for key in ["bad:no-field", "bad:rfc"] {
        assert_eq!(
            scrape.age(key),
            None,
            "{key}: an unreadable item has no age, not 0"
        );
    }
    app.stop().await;
}

#[tokio::test]
async fn age_parse_failures_keep_counting_on_every_poll() {
    let redis = RedisServer::start();
    let app = start_with_list_heads(&redis, &unreadable_heads()).await;
    let failures = |s: &Scrape| {
        s.value(
            "queue_exporter_age_parse_failures_total",
            &[("source", "main")],
        )
    };
    // Two unreadable items per poll: the counter keeps growing.
    let first = failures(&app.scrape().await).unwrap();
    assert!(first >= 2.0, "{first}");
    app.scrape_until("parse failures grow", WAIT, |s| {
        failures(s).is_some_and(|n| n >= first + 2.0)
    })
    .await;
    app.stop().await;
}

// Sorted sets.

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
    let app = TestApp::start(&config(
        &redis.url,
        r#"
        - key: jobs:pending:s
          score: timestamp
          score_unit: seconds
        - key: jobs:pending:ms
          score: timestamp
          score_unit: milliseconds
        "#,
    ))
    .await;
    let scrape = wait_depth(&app, "jobs:pending:ms", 5.0).await;
    for q in ["jobs:pending:s", "jobs:pending:ms"] {
        assert_eq!(scrape.depth(q), Some(5.0), "{q}");
        assert_eq!(scrape.queue("queue_messages_ready", q), Some(3.0), "{q}");
        assert_eq!(
            scrape.queue("queue_messages_scheduled", q),
            Some(2.0),
            "{q}"
        );
        let age = scrape.age(q).unwrap();
        assert!((99.0..130.0).contains(&age), "{q} age {age}");
    }
    app.stop().await;
}

#[tokio::test]
async fn a_plain_zset_has_a_depth_but_no_schedule_and_no_age() {
    let redis = RedisServer::start();
    run(&redis, &["ZADD", "prio", "1", "a", "5", "b"]);
    let app = TestApp::start(&config(&redis.url, "- key: prio")).await;
    let scrape = wait_depth(&app, "prio", 2.0).await;
    assert_eq!(scrape.depth("prio"), Some(2.0));
    assert_eq!(scrape.queue("queue_messages_scheduled", "prio"), None);
    assert_eq!(scrape.age("prio"), None);
    app.stop().await;
}

#[tokio::test]
async fn a_timestamp_zset_with_nothing_due_is_known_empty_with_age_zero() {
    let redis = RedisServer::start();
    let t = now();
    let s = |off: f64| format!("{:.3}", t + off);
    run(&redis, &["ZADD", "later", &s(100.0), "a", &s(200.0), "b"]);
    let app = TestApp::start(&config(
        &redis.url,
        r#"
        - key: later
          score: timestamp
        "#,
    ))
    .await;
    let scrape = wait_depth(&app, "later", 2.0).await;
    let q = |name: &str| scrape.queue(name, "later");
    assert_eq!(q("queue_depth"), Some(2.0));
    assert_eq!(q("queue_messages_ready"), Some(0.0));
    assert_eq!(q("queue_messages_scheduled"), Some(2.0));
    // Nothing waiting: 0, which is known (not absent).
    assert_eq!(q("queue_oldest_message_age_seconds"), Some(0.0));
    assert_eq!(q("queue_message_age_seconds_gcount"), Some(0.0));
    for le in DEFAULT_LES {
        assert_eq!(scrape.bucket("later", le), Some(0.0), "later le={le}");
    }
    app.stop().await;
}

#[tokio::test]
async fn fractional_second_scores_land_in_the_right_buckets() {
    let redis = RedisServer::start();
    let t = now();
    let s = |off: f64| format!("{:.3}", t + off);
    // All due, well inside the first default bucket (1 s) apart from one
    // that is 5 s old.
    run(
        &redis,
        &["ZADD", "frac", &s(-0.25), "a", &s(-0.5), "b", &s(-5.0), "c"],
    );
    let app = TestApp::start(&config(
        &redis.url,
        r#"
        - key: frac
          score: timestamp
        "#,
    ))
    .await;
    let scrape = wait_depth(&app, "frac", 3.0).await;
    assert_eq!(scrape.queue("queue_messages_ready", "frac"), Some(3.0));
    assert_eq!(scrape.queue("queue_messages_scheduled", "frac"), Some(0.0));
    let age = scrape.age("frac").unwrap();
    assert!((5.0..30.0).contains(&age), "{age}");
    assert_eq!(scrape.bucket("frac", "10.0"), Some(3.0));
    assert_eq!(scrape.bucket("frac", "+Inf"), Some(3.0));
    assert!(scrape.bucket("frac", "1.0").is_some_and(|c| c <= 2.0));
    app.stop().await;
}

#[tokio::test]
async fn a_missing_timestamp_zset_reads_empty_and_is_measured_at_once_when_it_appears() {
    let redis = RedisServer::start();
    let app = TestApp::start(&config(
        &redis.url,
        r#"
        - key: gone
          score: timestamp
          score_unit: milliseconds
        "#,
    ))
    .await;
    // Empty, type none, every series present so dashboards and autoscalers
    // see a 0.
    let scrape = wait_depth(&app, "gone", 0.0).await;
    let q = |name: &str| scrape.queue(name, "gone");
    assert_eq!(q("queue_depth"), Some(0.0));
    assert_eq!(q("queue_messages_ready"), Some(0.0));
    assert_eq!(q("queue_messages_scheduled"), Some(0.0));
    assert_eq!(q("queue_oldest_message_age_seconds"), Some(0.0));
    assert!(scrape.has_type("gone", "none"));
    for le in DEFAULT_LES {
        assert_eq!(scrape.bucket("gone", le), Some(0.0), "gone le={le}");
    }
    // It appears: measured at once (in milliseconds), no discovery needed.
    let t = now();
    let ms = |off: f64| format!("{}", ((t + off) * 1000.0) as i64);
    run(&redis, &["ZADD", "gone", &ms(-90.0), "a", &ms(90.0), "b"]);
    let scrape = wait_depth(&app, "gone", 2.0).await;
    assert_eq!(scrape.queue("queue_messages_ready", "gone"), Some(1.0));
    assert_eq!(scrape.bucket("gone", "300.0"), Some(1.0));
    assert_eq!(scrape.bucket("gone", "60.0"), Some(0.0));
    app.stop().await;
}

// The age histogram.

/// `delayed`: items 2 s, 20 s, 200 s and 2000 s old, and one scheduled in
/// the future; its histogram has bounds 10 s, 100 s, 1000 s and 1 h and is
/// measured on every poll (the cadence has its own tests below). Returns
/// the app once all four waiting items are counted, and `t`.
async fn start_with_delayed(redis: &RedisServer) -> (TestApp, f64) {
    let t = now();
    run(
        redis,
        &[
            "ZADD",
            "delayed",
            &ago(t, 2.0),
            "a",
            &ago(t, 20.0),
            "b",
            &ago(t, 200.0),
            "c",
            &ago(t, 2000.0),
            "d",
            &ago(t, -500.0),
            "e",
        ],
    );
    let app = TestApp::start(&config_with(
        &redis.url,
        r#"
        age_buckets: [10s, 100s, 1000s, 1h]
        age_histogram_interval: 0s
        "#,
        r#"
        - key: delayed
          score: timestamp
        "#,
    ))
    .await;
    wait_value(
        &app,
        "queue_message_age_seconds_gcount",
        &[("queue", "delayed")],
        4.0,
    )
    .await;
    (app, t)
}

#[tokio::test]
async fn the_age_histogram_counts_waiting_items_per_bucket() {
    let redis = RedisServer::start();
    let (app, _) = start_with_delayed(&redis).await;
    let scrape = app.scrape().await;
    assert_eq!(scrape.bucket("delayed", "10.0"), Some(1.0));
    assert_eq!(scrape.bucket("delayed", "100.0"), Some(2.0));
    assert_eq!(scrape.bucket("delayed", "1000.0"), Some(3.0));
    assert_eq!(scrape.bucket("delayed", "3600.0"), Some(4.0));
    assert_eq!(scrape.bucket("delayed", "+Inf"), Some(4.0));
    app.stop().await;
}

#[tokio::test]
async fn openmetrics_carries_the_same_counts_in_a_gauge_histogram() {
    let redis = RedisServer::start();
    let (app, _) = start_with_delayed(&redis).await;
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
    app.stop().await;
}

#[tokio::test]
async fn steady_polls_that_skip_implied_buckets_keep_the_same_counts() {
    let redis = RedisServer::start();
    let (app, _) = start_with_delayed(&redis).await;
    wait_polls(&app, 3.0).await;
    let scrape = app.scrape().await;
    assert_eq!(scrape.bucket("delayed", "1000.0"), Some(3.0));
    assert_eq!(scrape.bucket("delayed", "3600.0"), Some(4.0));
    app.stop().await;
}

#[tokio::test]
async fn an_older_item_arriving_after_the_hint_was_learned_is_counted_right() {
    let redis = RedisServer::start();
    let (app, t) = start_with_delayed(&redis).await;
    wait_polls(&app, 3.0).await;
    run(&redis, &["ZADD", "delayed", &ago(t, 3000.0), "f"]);
    let scrape = wait_value(
        &app,
        "queue_message_age_seconds_gcount",
        &[("queue", "delayed")],
        5.0,
    )
    .await;
    assert_eq!(scrape.bucket("delayed", "1000.0"), Some(3.0));
    assert_eq!(scrape.bucket("delayed", "3600.0"), Some(5.0));
    app.stop().await;
}

/// `delayed`: items 200 s and 2000 s old, a histogram with bounds 100 s,
/// 1000 s and 1 h re-measured every 5 s. Returns the app once both items
/// are read, and `t`.
async fn start_with_histogram_interval(redis: &RedisServer) -> (TestApp, f64, Scrape) {
    let t = now();
    run(
        redis,
        &["ZADD", "delayed", &ago(t, 200.0), "a", &ago(t, 2000.0), "b"],
    );
    let app = TestApp::start(&config_with(
        &redis.url,
        r#"
        age_buckets: [100s, 1000s, 1h]
        age_histogram_interval: 5s
        "#,
        r#"
        - key: delayed
          score: timestamp
        "#,
    ))
    .await;
    let scrape = wait_value(&app, "queue_messages_ready", &[("queue", "delayed")], 2.0).await;
    (app, t, scrape)
}

#[tokio::test]
async fn the_age_histogram_is_measured_at_start_then_once_per_interval() {
    let redis = RedisServer::start();
    let (app, t, scrape) = start_with_histogram_interval(&redis).await;
    assert_eq!(scrape.bucket("delayed", "1000.0"), Some(1.0));
    assert_eq!(scrape.bucket("delayed", "+Inf"), Some(2.0));

    // The key's first re-measurement comes at its own point within the
    // interval (keys are spread over it); after that, once per interval.
    run(&redis, &["ZADD", "delayed", &ago(t, 20.0), "c"]);
    wait_value(
        &app,
        "queue_message_age_seconds_gcount",
        &[("queue", "delayed")],
        3.0,
    )
    .await;
    // Just measured: a new item shows in depth and ready on the next poll,
    // while the histogram keeps its measurement until the 5 s interval ends.
    run(&redis, &["ZADD", "delayed", &ago(t, 30.0), "d"]);
    let scrape = wait_value(&app, "queue_messages_ready", &[("queue", "delayed")], 4.0).await;
    assert_eq!(scrape.bucket("delayed", "+Inf"), Some(3.0), "{scrape}");
    let scrape = wait_value(
        &app,
        "queue_message_age_seconds_gcount",
        &[("queue", "delayed")],
        4.0,
    )
    .await;
    assert_eq!(scrape.bucket("delayed", "100.0"), Some(2.0));
    assert_eq!(scrape.bucket("delayed", "1000.0"), Some(3.0));
    assert_eq!(scrape.bucket("delayed", "3600.0"), Some(4.0));
    app.stop().await;
}

#[tokio::test]
async fn a_drained_queue_has_every_bucket_at_zero_at_once_not_after_the_interval() {
    let redis = RedisServer::start();
    let (app, _, _) = start_with_histogram_interval(&redis).await;
    run(&redis, &["ZREM", "delayed", "a", "b"]);
    let scrape = wait_value(&app, "queue_messages_ready", &[("queue", "delayed")], 0.0).await;
    for le in ["100.0", "1000.0", "3600.0", "+Inf"] {
        assert_eq!(scrape.bucket("delayed", le), Some(0.0), "le={le}\n{scrape}");
    }
    app.stop().await;
}

#[tokio::test]
async fn only_young_items_under_the_smallest_bound_are_counted_exactly_at_once() {
    let redis = RedisServer::start();
    let (app, t, _) = start_with_histogram_interval(&redis).await;
    run(&redis, &["ZREM", "delayed", "a", "b"]);
    wait_value(&app, "queue_messages_ready", &[("queue", "delayed")], 0.0).await;
    run(
        &redis,
        &[
            "ZADD",
            "delayed",
            &ago(t, 5.0),
            "d",
            &ago(t, -100.0),
            "later",
        ],
    );
    let scrape = wait_value(&app, "queue_messages_ready", &[("queue", "delayed")], 1.0).await;
    for le in ["100.0", "1000.0", "3600.0", "+Inf"] {
        assert_eq!(scrape.bucket("delayed", le), Some(1.0), "le={le}\n{scrape}");
    }
    app.stop().await;
}

/// The age histogram of a queue that producers feed at *now* and workers
/// drain from its oldest end stays exact, poll after poll, as its counts
/// move (the windows around the last counts hit, miss and follow trends):
/// compared after each round of writes with a brute-force count of the
/// zset's scores. No item comes near a bucket bound during the test (new
/// items stay under 30 s, the seeded ones are at least 30 s from a bound),
/// so the counts change only with the writes.
#[tokio::test]
async fn the_histogram_of_a_queue_fed_at_now_and_drained_from_its_oldest_end_stays_exact() {
    let redis = RedisServer::start();
    let t = now();
    let mut seeded = vec!["ZADD".to_string(), "jobs".to_string()];
    for i in 0..100 {
        // 0..40: 35-265 s; 40..90: 335-2935 s; 90..100: 3035-3485 s.
        let age = match i {
            0..40 => 35.0 + 5.75 * f64::from(i),
            40..90 => 335.0 + 52.0 * f64::from(i - 40),
            _ => 3035.0 + 50.0 * f64::from(i - 90),
        };
        seeded.push(ago(t, age));
        seeded.push(format!("seed{i}"));
    }
    run(
        &redis,
        &seeded.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let app = TestApp::start(&config_with(
        &redis.url,
        r#"
        age_buckets: [30s, 300s, 3000s]
        age_histogram_interval: 0s
        "#,
        r#"
        - key: jobs
          score: timestamp
        "#,
    ))
    .await;
    wait_value(
        &app,
        "queue_message_age_seconds_gcount",
        &[("queue", "jobs")],
        100.0,
    )
    .await;
    // Rounds of 1 to 9 jobs in and as many oldest out; a few large ones
    // move the counts past any window.
    for (round, n) in [1, 2, 1, 3, 9, 1, 1, 2, 4, 1, 8, 2, 1, 1, 3]
        .iter()
        .enumerate()
    {
        for j in 0..*n {
            run(
                &redis,
                &["ZADD", "jobs", &ago(now(), 0.0), &format!("r{round}.{j}")],
            );
        }
        run(&redis, &["ZPOPMIN", "jobs", &n.to_string()]);
        wait_polls(&app, 2.0).await;
        let scrape = app.scrape().await;
        let scores: Vec<f64> = redis::cmd("ZRANGE")
            .arg("jobs")
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query::<Vec<(String, f64)>>(&mut redis.conn())
            .unwrap()
            .into_iter()
            .map(|(_, s)| s)
            .collect();
        let at = now();
        for (le, secs) in [("30.0", 30.0), ("300.0", 300.0), ("3000.0", 3000.0)] {
            let truth = scores.iter().filter(|&&s| at - s <= secs).count() as f64;
            assert_eq!(
                scrape.bucket("jobs", le),
                Some(truth),
                "round {round}, le={le}\n{scrape}"
            );
        }
        assert_eq!(scrape.bucket("jobs", "+Inf"), Some(100.0));
    }
    // Measured on every poll here (interval 0s): never more than a poll old.
    let staleness = app.scrape().await.value(
        "queue_exporter_message_age_staleness_seconds",
        &[("source", "main")],
    );
    assert!(staleness.is_some_and(|s| s < 1.0), "{staleness:?}");
    app.stop().await;
}

// Hashes, sets and streams.

#[tokio::test]
async fn a_hash_reports_its_field_count_as_depth() {
    let redis = RedisServer::start();
    run(
        &redis,
        &["HSET", "jobs:processing", "a", "1", "b", "2", "c", "3"],
    );
    let app = TestApp::start(&config(&redis.url, "- key: jobs:processing")).await;
    let scrape = wait_depth(&app, "jobs:processing", 3.0).await;
    assert_eq!(scrape.depth("jobs:processing"), Some(3.0));
    assert!(scrape.has_type("jobs:processing", "hash"));
    app.stop().await;
}

#[tokio::test]
async fn a_set_reports_its_member_count_as_depth() {
    let redis = RedisServer::start();
    run(&redis, &["SADD", "tags", "x", "y"]);
    let app = TestApp::start(&config(&redis.url, "- key: tags")).await;
    let scrape = wait_depth(&app, "tags", 2.0).await;
    assert_eq!(scrape.depth("tags"), Some(2.0));
    assert!(scrape.has_type("tags", "set"));
    app.stop().await;
}

#[tokio::test]
async fn a_stream_reports_lag_pending_and_consumers_per_group_and_entries_added() {
    let redis = RedisServer::start();
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
    let app = TestApp::start(&config(&redis.url, "- key: events")).await;
    let scrape = wait_depth(&app, "events", 5.0).await;
    let group = [("queue", "events"), ("group", "workers")];
    assert_eq!(scrape.value("queue_stream_group_lag", &group), Some(3.0));
    assert_eq!(
        scrape.value("queue_stream_group_pending", &group),
        Some(2.0)
    );
    assert_eq!(
        scrape.value("queue_stream_group_consumers", &group),
        Some(1.0)
    );
    assert_eq!(
        scrape.queue("queue_messages_published_total", "events"),
        Some(5.0)
    );
    app.stop().await;
}

// Patterns and discovery.

/// Lists `jobs:pending:{high,normal,low}`, a string and a hash under the same prefix.
fn fill_jobs_pending(redis: &RedisServer) {
    for p in ["high", "normal", "low"] {
        run(redis, &["RPUSH", &format!("jobs:pending:{p}"), "a"]);
    }
    run(redis, &["SET", "jobs:pending:string", "not a queue"]);
    run(redis, &["HSET", "jobs:pending:hash", "a", "1"]);
}

#[tokio::test]
async fn named_captures_of_a_pattern_become_labels() {
    let redis = RedisServer::start();
    fill_jobs_pending(&redis);
    let app = TestApp::start(&config(
        &redis.url,
        r#"
        - pattern: "jobs:pending:*"
          labels: "jobs:pending:(?P<priority>[^:]+)"
          types: [list]
        "#,
    ))
    .await;
    let scrape = wait_tracked(&app, 3.0).await;
    for p in ["high", "normal", "low"] {
        let queue = format!("jobs:pending:{p}");
        assert_eq!(
            scrape.value("queue_depth", &[("queue", &queue), ("priority", p)]),
            Some(1.0),
            "{queue}"
        );
    }
    app.stop().await;
}

#[tokio::test]
async fn a_pattern_with_types_skips_keys_of_other_types() {
    let redis = RedisServer::start();
    fill_jobs_pending(&redis);
    let app = TestApp::start(&config(
        &redis.url,
        r#"
        - pattern: "jobs:pending:*"
          types: [list]
        "#,
    ))
    .await;
    let scrape = wait_tracked(&app, 3.0).await;
    assert_eq!(scrape.depth("jobs:pending:hash"), None);
    assert_eq!(scrape.depth("jobs:pending:string"), None);
    app.stop().await;
}

#[tokio::test]
async fn max_keys_tracks_the_first_keys_in_sorted_order_and_counts_the_rest() {
    let redis = RedisServer::start();
    fill_jobs_pending(&redis);
    let app = TestApp::start(&config_with(
        &redis.url,
        "max_keys: 2",
        r#"
        - pattern: "jobs:pending:*"
          labels: "jobs:pending:(?P<priority>[^:]+)"
          types: [list]
        "#,
    ))
    .await;
    let scrape = wait_tracked(&app, 2.0).await;
    assert_eq!(
        scrape.value("queue_exporter_dropped_keys", &[("source", "main")]),
        Some(1.0)
    );
    // Sorted key order: high, low are tracked; normal is the excess.
    assert_eq!(
        scrape.value(
            "queue_depth",
            &[("queue", "jobs:pending:high"), ("priority", "high")]
        ),
        Some(1.0)
    );
    assert_eq!(
        scrape.value(
            "queue_depth",
            &[("queue", "jobs:pending:low"), ("priority", "low")]
        ),
        Some(1.0)
    );
    assert_eq!(scrape.depth("jobs:pending:hash"), None);
    assert_eq!(scrape.depth("jobs:pending:string"), None);
    app.stop().await;
}

#[tokio::test]
async fn discovery_finds_new_keys_and_forgets_vanished_ones() {
    let redis = RedisServer::start();
    run(&redis, &["RPUSH", "q:a", "1", "2"]);
    let app = TestApp::start(&config(&redis.url, r#"- pattern: "q:*""#)).await;
    wait_depth(&app, "q:a", 2.0).await;
    run(&redis, &["RPUSH", "q:b", "1"]);
    wait_depth(&app, "q:b", 1.0).await;
    run(&redis, &["DEL", "q:a"]);
    app.scrape_until("q:a gone after discovery", WAIT, |s| {
        s.depth("q:a").is_none()
    })
    .await;
    app.stop().await;
}

#[tokio::test]
async fn a_key_that_changes_type_is_measured_right_without_waiting_for_discovery() {
    let redis = RedisServer::start();
    run(&redis, &["RPUSH", "shape", "a", "b"]);
    let app = TestApp::start(&config_with(
        &redis.url,
        "discovery_interval: 1h",
        "- key: shape",
    ))
    .await;
    let wait_type = |kind: &'static str| {
        let app = &app;
        async move {
            wait_value(
                app,
                "queue_info",
                &[("queue", "shape"), ("type", kind)],
                1.0,
            )
            .await
        }
    };
    wait_type("list").await;
    run(&redis, &["DEL", "shape"]);
    run(&redis, &["ZADD", "shape", "1", "a", "2", "b", "3", "c"]);
    let scrape = wait_type("zset").await;
    assert_eq!(scrape.depth("shape"), Some(3.0));
    // Deleted: an exact key reports 0, then a new type appears.
    run(&redis, &["DEL", "shape"]);
    wait_depth(&app, "shape", 0.0).await;
    run(&redis, &["HSET", "shape", "f", "v"]);
    let scrape = wait_type("hash").await;
    assert_eq!(scrape.depth("shape"), Some(1.0));
    // Not a queue type: the type is shown, the depth is unknown (absent).
    run(&redis, &["DEL", "shape"]);
    run(&redis, &["SET", "shape", "plain string"]);
    let scrape = wait_type("string").await;
    assert_eq!(scrape.depth("shape"), None);
    // And back to a stream.
    run(&redis, &["DEL", "shape"]);
    run(&redis, &["XADD", "shape", "*", "k", "v"]);
    let scrape = wait_type("stream").await;
    assert_eq!(scrape.depth("shape"), Some(1.0));
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
    let app = TestApp::start(&config_with(
        &redis.url,
        "discovery_interval: 3s",
        r#"
        - pattern: "v:*"
          score: timestamp
          age: { unit: seconds }
        "#,
    ))
    .await;
    wait_tracked(&app, 5.0).await;
    wait_depth(&app, "v:stream", 1.0).await;
    let keys = ["v:list", "v:zset", "v:hash", "v:set", "v:stream"];
    for k in keys {
        run(&redis, &["DEL", k]);
    }
    // Deleted, but discovery has not confirmed it: 0, still tracked.
    let scrape = app
        .scrape_until("all five read 0", WAIT, |s| {
            keys.iter().all(|k| s.depth(k) == Some(0.0))
        })
        .await;
    assert_eq!(
        scrape.value("queue_exporter_tracked_keys", &[("source", "main")]),
        Some(5.0)
    );
    assert_eq!(scrape.queue("queue_messages_ready", "v:zset"), Some(0.0));
    assert_eq!(scrape.queue("queue_messages_ready", "v:stream"), Some(0.0));
    assert_eq!(
        scrape.source_up("main"),
        Some(1.0),
        "a vanished key is not an error"
    );
    // The next discovery forgets them.
    let scrape = wait_tracked(&app, 0.0).await;
    for k in keys {
        assert_eq!(scrape.depth(k), None, "{k}");
        assert!(!scrape.shows_queue(k), "{k} still shown");
    }
    app.stop().await;
}

#[tokio::test]
async fn overlapping_patterns_give_a_key_to_the_first_spec_that_matches() {
    let redis = RedisServer::start();
    let (app, _monitor) = start_with_overlapping_patterns(&redis).await;
    let scrape = wait_tracked(&app, 4.0).await;
    assert_eq!(scrape.depth("queue:list:1"), Some(2.0));
    assert_eq!(scrape.depth("other:list"), Some(1.0));
    // Timestamp semantics prove the first spec claimed the zsets.
    assert_eq!(
        scrape.queue("queue_messages_ready", "queue:zset:1"),
        Some(1.0)
    );
    assert_eq!(
        scrape.queue("queue_messages_scheduled", "queue:zset:2"),
        Some(1.0)
    );
    assert_eq!(scrape.depth("cache:1"), None);
    app.stop().await;
}

#[tokio::test]
async fn patterns_without_types_share_one_scan_over_their_common_prefix() {
    let redis = RedisServer::start();
    let (app, mut monitor) = start_with_overlapping_patterns(&redis).await;
    wait_tracked(&app, 4.0).await;
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

/// Lists and zsets under `queue:`, a list under `other:`, 50 strings under
/// `cache:`, and an app whose three patterns overlap: `queue:zset:*` is
/// claimed by the timestamp spec (listed first), the catch-all `queue:*`
/// gets the rest, `other:*` has its own glob. Returns the app and a MONITOR
/// connection opened before it started.
async fn start_with_overlapping_patterns(redis: &RedisServer) -> (TestApp, redis::Connection) {
    let t = now();
    run(redis, &["RPUSH", "queue:list:1", "a", "b"]);
    run(
        redis,
        &["ZADD", "queue:zset:1", &format!("{}", t - 30.0), "a"],
    );
    run(
        redis,
        &["ZADD", "queue:zset:2", &format!("{}", t + 60.0), "a"],
    );
    run(redis, &["RPUSH", "other:list", "a"]);
    for i in 0..50 {
        run(redis, &["SET", &format!("cache:{i}"), "v"]);
    }
    // Watch the SCANs the exporter sends.
    let monitor = start_monitor(redis);
    let app = TestApp::start(&config_with(
        &redis.url,
        "discovery_interval: 1h",
        r#"
        - pattern: "queue:z?et:*"
          score: timestamp
        - pattern: "queue:*"
        - pattern: "other:*"
        "#,
    ))
    .await;
    (app, monitor)
}

// Outages and permissions.

#[tokio::test]
async fn every_error_reason_is_exported_at_zero_before_anything_fails() {
    // So that rate() alerts see the first error.
    let redis = RedisServer::start();
    run(&redis, &["RPUSH", "work", "a", "b", "c"]);
    let app = TestApp::start(&config(&redis.url, "- key: work")).await;
    let scrape = wait_depth(&app, "work", 3.0).await;
    for reason in ["connect", "auth", "timeout", "backend"] {
        assert_eq!(scrape.errors("main", reason), Some(0.0), "{reason}");
    }
    app.stop().await;
}

#[tokio::test]
async fn a_restarted_redis_goes_up_down_up_and_values_are_right_after() {
    let mut redis = RedisServer::start();
    run(&redis, &["RPUSH", "work", "a", "b", "c"]);
    let app = TestApp::start(&config(&redis.url, "- key: work")).await;
    let scrape = wait_depth(&app, "work", 3.0).await;
    assert_eq!(scrape.source_up("main"), Some(1.0));

    redis.stop();
    let scrape = wait_value(&app, "queue_exporter_source_up", &[("source", "main")], 0.0).await;
    let last_success = |s: &Scrape| {
        s.value(
            "queue_exporter_last_success_timestamp_seconds",
            &[("source", "main")],
        )
    };
    // Down: queue series are dropped, not shown stale; the last success stays.
    assert_eq!(scrape.depth("work"), None);
    assert!(last_success(&scrape).is_some());
    let first_errors = scrape.errors("main", "connect").unwrap_or(0.0);
    assert!(first_errors >= 1.0, "{scrape}");
    let frozen = last_success(&scrape);
    // More failed polls (retries keep going, the process keeps serving):
    // the errors grow, the last success does not move, nothing reappears.
    let scrape = wait_errors(&app, "connect", first_errors + 2.0).await;
    assert_eq!(last_success(&scrape), frozen);
    assert_eq!(scrape.depth("work"), None);
    assert_eq!(scrape.source_up("main"), Some(0.0));

    redis.restart();
    run(&redis, &["RPUSH", "work", "x"]);
    let scrape = wait_depth(&app, "work", 1.0).await;
    assert_eq!(scrape.source_up("main"), Some(1.0));
    assert!(last_success(&scrape) > frozen);
    app.stop().await;
}

/// A Redis whose queues live in database 1, read by user `qe` who may only
/// read (`+@read +@connection`, so the exporter also has to SELECT), with
/// the password in a file; a MONITOR connection opened before the app
/// starts. Returns once every queue has been read.
async fn start_under_a_read_only_acl()
-> (RedisServer, TestApp, redis::Connection, tempfile::TempDir) {
    let redis = RedisServer::start();
    redis.acl_user("qe", "s3cret", &[READ_ONLY_ACL, &["&*"]].concat());
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
    let monitor = start_monitor(&redis);

    let dir = tempfile::tempdir().unwrap();
    let pw = write_file(&dir, "pw", "s3cret\n");
    let url = format!("{}/1", redis.url.replace("redis://", "redis://qe@"));
    let app = TestApp::start(&config_with(
        &url,
        &format!("password_file: {}", pw.display()),
        r#"
        - key: work
        - pattern: "jobs:*"
          score: timestamp
        - key: ev
        "#,
    ))
    .await;
    wait_depth(&app, "ev", 1.0).await;
    (redis, app, monitor, dir)
}

#[tokio::test]
async fn a_read_only_acl_user_in_database_1_reads_every_queue_without_errors() {
    let (_redis, app, _monitor, _dir) = start_under_a_read_only_acl().await;
    let scrape = app.scrape().await;
    assert_eq!(scrape.depth("ev"), Some(1.0));
    assert_eq!(scrape.depth("work"), Some(1.0));
    assert_eq!(scrape.depth("jobs:z"), Some(1.0));
    wait_polls(&app, 5.0).await;
    let scrape = app.scrape().await;
    let errors: Vec<&str> = scrape
        .text()
        .lines()
        .filter(|l| l.starts_with("queue_exporter_poll_errors_total{") && !l.ends_with(" 0"))
        .collect();
    assert!(errors.is_empty(), "errors under read-only ACL: {errors:?}");
    app.stop().await;
}

#[tokio::test]
async fn only_read_commands_are_sent_and_none_is_refused() {
    let (redis, app, mut monitor, _dir) = start_under_a_read_only_acl().await;
    wait_polls(&app, 5.0).await;
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
    for expected in ["SCAN", "LLEN", "ZRANGE", "XINFO", "SELECT"] {
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
async fn a_redis_that_is_down_at_start_is_picked_up_when_it_comes_up() {
    let mut redis = RedisServer::start();
    redis.stop();
    let app = TestApp::start(&config(&redis.url, "- key: work")).await;
    let scrape = wait_errors(&app, "connect", 2.0).await;
    assert_eq!(scrape.source_up("main"), Some(0.0));
    // Never polled successfully: no queue series and no last success.
    assert_eq!(scrape.depth("work"), None);
    assert_eq!(
        scrape.value(
            "queue_exporter_last_success_timestamp_seconds",
            &[("source", "main")]
        ),
        None
    );
    redis.restart();
    run(&redis, &["RPUSH", "work", "a", "b"]);
    let scrape = wait_depth(&app, "work", 2.0).await;
    assert_eq!(scrape.source_up("main"), Some(1.0));
    assert!(
        scrape
            .value(
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
    let app = TestApp::start(&config_with(
        &silent.redis_url(),
        "timeout: 200ms",
        "- key: work",
    ))
    .await;
    let scrape = wait_errors(&app, "timeout", 1.0).await;
    assert_eq!(scrape.source_up("main"), Some(0.0));
    // Still serving.
    let (status, _, _) = http_get(&format!("{}/healthz", app.base), &[]).await;
    assert_eq!(status, 200);
    app.stop().await;
}

#[tokio::test]
async fn a_key_the_acl_does_not_cover_is_unknown_and_counted_not_zero() {
    let redis = RedisServer::start();
    // This user may read `q:*` only.
    redis.acl_user("lim", "pw", &["~q:*", "-@all", "+@read", "+@connection"]);
    run(&redis, &["RPUSH", "q:1", "a"]);
    run(&redis, &["RPUSH", "secret", "a", "b", "c"]);
    run(&redis, &["XADD", "secret:stream", "*", "k", "v"]);
    let url = redis.url.replace("redis://", "redis://lim:pw@");
    let app = TestApp::start(&config(
        &url,
        r#"
        - key: q:1
        - key: secret
        - key: secret:stream
        - key: q:missing
        "#,
    ))
    .await;
    let scrape = wait_errors(&app, "auth", 4.0).await;
    // The readable keys are fine and the source is up.
    assert_eq!(scrape.source_up("main"), Some(1.0));
    assert_eq!(scrape.depth("q:1"), Some(1.0));
    assert_eq!(scrape.depth("q:missing"), Some(0.0));
    // The refused ones are unknown: no made-up empty queue, no made-up type.
    for key in ["secret", "secret:stream"] {
        assert!(!scrape.shows_queue(key), "{key} reported:\n{scrape}");
    }
    app.stop().await;
}
