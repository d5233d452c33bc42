//! Hostile input, against the exporter binary as a child process (so a
//! crash, a stack overflow or an out-of-memory kill would show as a dead
//! process, and memory is read from `/proc/<pid>/status`).
//!
//! Redis data: a key that keeps changing type, 50,000 matching keys over
//! `max_keys: 10000` in a keyspace of a million, huge list items peeked for
//! age, and timestamps that cannot be read.
//!
//! HTTP: a management API (and a Prometheus plugin endpoint) answering 200 MB,
//! endless chunked data, a crawl, invalid UTF-8, JSON nested a million deep,
//! endless headers. Each is a counted error with its reason, memory stays
//! bounded, and the other sources are not affected.
mod reliability_support;
mod support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use reliability_support::*;
use support::{RedisServer, poll_until, sample};

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

fn redis_source(url: &str, extra: &str, queues: &str) -> String {
    format!(
        "sources:\n  - name: main\n    type: redis\n    url: {url}\n{extra}    queues:\n{queues}"
    )
}

/// Every `queue="…"` label value of the `queue_depth` lines of `body`
/// (plain key names only; no unescaping needed for them).
fn depth_queues(body: &str) -> BTreeSet<String> {
    body.lines()
        .filter(|l| l.starts_with("queue_depth{"))
        .filter_map(|l| {
            let rest = &l[l.find("queue=\"")? + 7..];
            Some(rest[..rest.find('"')?].to_string())
        })
        .collect()
}

// ---------------------------------------------------------------- Redis data

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_that_changes_type_between_polls_is_always_reported_as_what_it_is() {
    let redis = RedisServer::start();
    // Discovery only at start: re-typing must happen in the polls.
    let exp = Exporter::start(
        &redis_source(
            &redis.url,
            "    poll_interval: 50ms\n    discovery_interval: 1h\n",
            "      - key: shape\n",
        ),
        &[],
        &[],
    )
    .await;
    let set_list = |c: &mut redis::Connection| {
        redis::pipe()
            .atomic()
            .del("shape")
            .rpush("shape", &["a", "b"])
            .query::<()>(c)
            .unwrap()
    };
    let set_string = |c: &mut redis::Connection| {
        redis::pipe()
            .atomic()
            .del("shape")
            .set("shape", "not a queue")
            .query::<()>(c)
            .unwrap()
    };
    let set_zset = |c: &mut redis::Connection| {
        redis::pipe()
            .atomic()
            .del("shape")
            .zadd("shape", "a", 1)
            .zadd("shape", "b", 2)
            .zadd("shape", "c", 3)
            .query::<()>(c)
            .unwrap()
    };
    let shown = |body: &str| {
        let t = ["list", "zset", "string", "none"]
            .into_iter()
            .find(|t| sample(body, "queue_info", &[("queue", "shape"), ("type", t)]) == Some(1.0));
        (t, sample(body, "queue_depth", &[("queue", "shape")]))
    };

    // Step by step, list → string → zset, five times: each state is
    // reported as soon as a poll sees it.
    let mut c = redis.conn();
    let mut took = Vec::new();
    for _ in 0..5 {
        for (set, want) in [
            (
                &set_list as &dyn Fn(&mut redis::Connection),
                (Some("list"), Some(2.0)),
            ),
            (&set_string, (Some("string"), None)),
            (&set_zset, (Some("zset"), Some(3.0))),
        ] {
            set(&mut c);
            let t = Instant::now();
            poll_until(Duration::from_secs(10), || async {
                (shown(&exp.metrics().await) == want).then_some(())
            })
            .await
            .unwrap_or_else(|| panic!("{want:?} not shown"));
            took.push(t.elapsed());
        }
    }
    eprintln!(
        "each type change shown after at most {:?}",
        took.iter().max().unwrap()
    );

    // Now as fast as Redis allows, for 3 s, while scraping: every scrape
    // shows a consistent state (a list of 2, a string without depth, or a
    // zset of 3) or, when the key changed type twice within one poll, no
    // series at all for it (unknown, never a wrong type or depth); the
    // source stays up, and nothing is counted as an error.
    let stop = Arc::new(AtomicBool::new(false));
    let flipper = {
        let stop = stop.clone();
        let mut c = redis.conn();
        std::thread::spawn(move || {
            let mut flips = 0u64;
            while !stop.load(Ordering::SeqCst) {
                match flips % 3 {
                    0 => set_list(&mut c),
                    1 => set_string(&mut c),
                    _ => set_zset(&mut c),
                }
                flips += 1;
            }
            set_list(&mut c);
            flips
        })
    };
    let mut seen = std::collections::BTreeMap::new();
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        let body = exp.metrics().await;
        let state = shown(&body);
        assert!(
            matches!(
                state,
                (Some("list"), Some(2.0))
                    | (Some("string"), None)
                    | (Some("zset"), Some(3.0))
                    | (None, None)
            ),
            "inconsistent state {state:?}: {:?}",
            body.lines()
                .filter(|l| l.contains("shape") || l.contains("source_up"))
                .collect::<Vec<_>>()
        );
        assert_eq!(
            sample(&body, "queue_exporter_source_up", &[("source", "main")]),
            Some(1.0)
        );
        *seen.entry(state.0.unwrap_or("unknown")).or_insert(0) += 1;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.store(true, Ordering::SeqCst);
    let flips = flipper.join().unwrap();
    let body = poll_until(Duration::from_secs(10), || async {
        let body = exp.metrics().await;
        (shown(&body) == (Some("list"), Some(2.0))).then_some(body)
    })
    .await
    .expect("settles on the final list");
    eprintln!("{flips} type flips; scrapes saw {seen:?}");
    for reason in ["backend", "malformed", "timeout", "connect"] {
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
    let known: usize = seen
        .iter()
        .filter(|(t, _)| **t != "unknown")
        .map(|(_, n)| n)
        .sum();
    assert!(
        known > 0 && seen.len() >= 2,
        "the flips were not seen: {seen:?}"
    );
}

/// Writes `n` lists `jobs:{i:05}` in a shuffled order, 5,000 per pipeline.
fn fill_jobs(redis: &RedisServer, n: usize) {
    let mut order: Vec<usize> = (0..n).collect();
    // A fixed shuffle (LCG), so the keys are not written in sorted order.
    let mut x: u64 = 12345;
    for i in (1..order.len()).rev() {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        order.swap(i, (x >> 33) as usize % (i + 1));
    }
    let mut c = redis.conn();
    for chunk in order.chunks(5000) {
        let mut p = redis::pipe();
        for i in chunk {
            p.rpush(format!("jobs:{i:05}"), "x").ignore();
        }
        p.query::<()>(&mut c).unwrap();
    }
}

/// The value of `name{source="main"}` found by a plain line search: the
/// bodies with 10,000 queues are too big to parse on every poll of a wait.
fn series(body: &str, name: &str) -> Option<f64> {
    let prefix = format!("{name}{{source=\"main\"}} ");
    body.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
}

const CAPPED: &str = "    poll_interval: 500ms\n    discovery_interval: 1s\n    max_keys: 10000\n";

/// Runs an exporter until it tracks 10,000 keys; returns it, the body and
/// the first poll's duration (discovery included).
async fn capped_exporter(redis: &RedisServer) -> (Exporter, String, f64) {
    let exp = Exporter::start(
        &redis_source(&redis.url, CAPPED, "      - pattern: \"jobs:*\"\n"),
        &[],
        &[],
    )
    .await;
    let body = poll_until(Duration::from_secs(60), || async {
        let body = exp.metrics().await;
        (series(&body, "queue_exporter_tracked_keys") == Some(10000.0)).then_some(body)
    })
    .await
    .unwrap_or_else(|| panic!("10000 keys not tracked; stderr:\n{}", exp.stderr()));
    let first = series(&body, "queue_exporter_poll_duration_seconds_sum").unwrap()
        / series(&body, "queue_exporter_poll_duration_seconds_count").unwrap();
    (exp, body, first)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_thousand_keys_over_max_keys_are_capped_counted_logged_once_and_kept_deterministically()
 {
    let redis = RedisServer::start();
    fill_jobs(&redis, 50_000);
    let (exp, body, first_poll) = capped_exporter(&redis).await;
    assert_eq!(series(&body, "queue_exporter_dropped_keys"), Some(40000.0));
    // Which keys: the first 10,000 in byte order, whatever SCAN's order.
    let expected: BTreeSet<String> = (0..10_000).map(|i| format!("jobs:{i:05}")).collect();
    let kept = depth_queues(&body);
    assert_eq!(kept.len(), 10_000);
    assert!(
        kept == expected,
        "kept keys are not the first 10,000 in order"
    );

    // Three more discovery rounds (every second): the same keys, the same
    // count, and the warning logged once, not once per round.
    let polls = |b: &str| series(b, "queue_exporter_poll_duration_seconds_count").unwrap();
    let p0 = polls(&body);
    let started = Instant::now();
    let body = poll_until(Duration::from_secs(30), || async {
        let b = exp.metrics().await;
        (started.elapsed() > Duration::from_millis(3100) && polls(&b) >= p0 + 3.0).then_some(b)
    })
    .await
    .expect("more polls");
    assert_eq!(depth_queues(&body), expected);
    assert_eq!(series(&body, "queue_exporter_dropped_keys"), Some(40000.0));
    let stderr = exp.stderr();
    let warnings = stderr.matches("more queue keys than max_keys").count();
    assert_eq!(warnings, 1, "logged {warnings} times:\n{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.contains("more queue keys than max_keys"))
        .unwrap();
    assert!(
        line.contains("dropped=40000") && line.contains("max_keys=10000"),
        "{line}"
    );
    let status = exp.status();
    drop(exp);

    // A second process, the same answer.
    let (exp2, body2, _) = capped_exporter(&redis).await;
    assert_eq!(depth_queues(&body2), expected);
    drop(exp2);
    eprintln!(
        "50,000 keys, max_keys 10,000: first poll (discovery included) {first_poll:.2}s; \
         exporter RSS {} MiB (peak {} MiB)",
        status.rss_kib / 1024,
        status.hwm_kib / 1024
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_million_key_keyspace_is_discovered_in_bounded_scan_steps() {
    let redis = RedisServer::start_with(&["--enable-debug-command", "yes"]);
    redis.run::<()>(&[b"DEBUG", b"POPULATE", b"1000000", b"filler", b"8"]);
    fill_jobs(&redis, 1000);
    redis.reset_stats();
    let exp = Exporter::start(
        &redis_source(
            &redis.url,
            "    poll_interval: 1s\n    discovery_interval: 1h\n",
            "      - pattern: \"jobs:*\"\n",
        ),
        &[],
        &[],
    )
    .await;
    let body = poll_until(Duration::from_secs(30), || async {
        let b = exp.metrics().await;
        (sample(&b, "queue_exporter_tracked_keys", &[("source", "main")]) == Some(1000.0))
            .then_some(b)
    })
    .await
    .unwrap_or_else(|| panic!("1000 keys not tracked; stderr:\n{}", exp.stderr()));
    let first_poll = sample(
        &body,
        "queue_exporter_poll_duration_seconds_sum",
        &[("source", "main")],
    )
    .unwrap();
    let stats = redis.commandstats();
    drop(exp);
    let (scans, scan_usec) = stats["scan"];
    eprintln!(
        "1,001,000 keys: discovery + first poll {first_poll:.2}s; {scans} SCAN calls, \
         {scan_usec:.0} µs of Redis time each"
    );
    // Never KEYS: the keyspace is walked in SCAN steps of COUNT 1000, each a
    // bounded piece of Redis's time (it serves others in between).
    assert!(!stats.contains_key("keys"), "KEYS was sent");
    assert!(scans >= 900, "{scans} SCAN calls for a million keys");
    assert!(scan_usec < 50_000.0, "{scan_usec} µs per SCAN");
    // A round stays well inside the poll timeout (4 × the 5 s command
    // timeout), or the source could never come up.
    assert!(first_poll < 15.0, "first poll {first_poll:.1}s");
}

/// A list whose head item is `bytes` long: a JSON object with the enqueue
/// time first and padding after it.
fn huge_item(enqueued: f64, bytes: usize) -> Vec<u8> {
    let mut item = format!("{{\"enqueued_at\":{enqueued:.3},\"pad\":\"").into_bytes();
    item.resize(bytes - 2, b'x');
    item.extend_from_slice(b"\"}");
    item
}

const ITEM: usize = 8 * 1024 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_head_item_has_no_age_is_counted_and_does_no_harm() {
    let redis = RedisServer::start();
    let t = now() - 100.0;
    redis.run::<()>(&[b"RPUSH", b"big", &huge_item(t, ITEM), b"newer"]);
    redis.run::<()>(&[b"RPUSH", b"small", format!("{t}").as_bytes()]);
    let exp = Exporter::start(
        &redis_source(
            &redis.url,
            "    poll_interval: 200ms\n",
            "      - key: big\n        age: { field: enqueued_at, unit: seconds }\n      - key: small\n        age: { unit: seconds }\n",
        ),
        &[],
        &[],
    )
    .await;
    let failures = |b: &str| {
        sample(
            b,
            "queue_exporter_age_parse_failures_total",
            &[("source", "main")],
        )
        .unwrap_or(0.0)
    };
    let body = poll_until(Duration::from_secs(15), || async {
        let b = exp.metrics().await;
        (failures(&b) > 0.0).then_some(b)
    })
    .await
    .expect("the huge item counted as an unreadable age");
    // Over 1 MiB: not parsed, so no age (never a made-up one), but the
    // depth is right and the small list's age is read as usual.
    assert!(
        sample(
            &body,
            "queue_oldest_message_age_seconds",
            &[("queue", "big")]
        )
        .is_none()
    );
    assert_eq!(sample(&body, "queue_depth", &[("queue", "big")]), Some(2.0));
    let small = sample(
        &body,
        "queue_oldest_message_age_seconds",
        &[("queue", "small")],
    )
    .expect("small list age");
    assert!((100.0..130.0).contains(&small), "{small}");

    // Keep polling a while: the process stays up, readers stay fast.
    let before = redis.net_output_bytes();
    let polls = |b: &str| {
        sample(
            b,
            "queue_exporter_poll_duration_seconds_count",
            &[("source", "main")],
        )
        .unwrap()
    };
    let p0 = polls(&exp.metrics().await);
    let mut slowest = Duration::ZERO;
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        let t = Instant::now();
        let b = exp.metrics().await;
        slowest = slowest.max(t.elapsed());
        assert_eq!(
            sample(&b, "queue_exporter_source_up", &[("source", "main")]),
            Some(1.0)
        );
        // Sampling rate over the 2 s under test, not synchronisation.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let n = polls(&exp.metrics().await) - p0;
    let per_poll = (redis.net_output_bytes() - before) as f64 / n.max(1.0);
    let st = exp.status();
    eprintln!(
        "8 MiB head item: {n} polls, Redis sent {:.1} MiB per poll; exporter RSS {} MiB (peak {} \
         MiB); slowest scrape {slowest:?}",
        per_poll / 1048576.0,
        st.rss_kib / 1024,
        st.hwm_kib / 1024
    );
    assert!(n >= 3.0, "{n} polls");
    assert!(slowest < Duration::from_secs(1), "{slowest:?}");
    // Counted on every poll while its age is unknown; read once a minute.
    let f1 = failures(&exp.metrics().await);
    assert!(
        f1 - failures(&body) >= n - 1.0,
        "{f1} failures over {n} polls"
    );
    assert!(per_poll < 1048576.0, "{per_poll} bytes per poll");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_list_items_cost_a_bounded_read_per_poll() {
    let redis = RedisServer::start();
    redis.run::<()>(&[b"RPUSH", b"big", &huge_item(now() - 100.0, ITEM)]);
    let exp = Exporter::start(
        &redis_source(
            &redis.url,
            "    poll_interval: 200ms\n",
            "      - key: big\n        age: { field: enqueued_at, unit: seconds }\n",
        ),
        &[],
        &[],
    )
    .await;
    let polls = |b: &str| {
        sample(
            b,
            "queue_exporter_poll_duration_seconds_count",
            &[("source", "main")],
        )
    };
    poll_until(Duration::from_secs(15), || async {
        polls(&exp.metrics().await).filter(|n| *n >= 2.0)
    })
    .await
    .expect("polls");
    let before = redis.net_output_bytes();
    let p0 = polls(&exp.metrics().await).unwrap();
    // Bytes over several whole polls (counted, not a fixed time).
    let n = poll_until(Duration::from_secs(30), || async {
        polls(&exp.metrics().await).filter(|n| *n >= p0 + 6.0)
    })
    .await
    .expect("6 more polls within 30 s")
        - p0;
    let per_poll = (redis.net_output_bytes() - before) as f64 / n.max(1.0);
    // At most 1 MiB per poll, whatever the item's size.
    assert!(per_poll < 1048576.0, "{per_poll} bytes per poll");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_timestamps_have_no_age_and_are_counted_on_every_poll() {
    let redis = RedisServer::start();
    let deep = format!("{}1{}", "[".repeat(200_000), "]".repeat(200_000));
    let deep_field = format!("{{\"at\":{}}}", "[".repeat(200_000));
    let huge_digits = "9".repeat(100_000);
    let bad: Vec<(&str, Vec<u8>, &str)> = vec![
        ("deep-json", deep.into_bytes(), "{ field: at }"),
        ("deep-json-field", deep_field.into_bytes(), "{ field: at }"),
        (
            "not-utf8",
            b"\xff\xfe\x00\x01 1700000000".to_vec(),
            "{ unit: seconds }",
        ),
        (
            "not-utf8-json",
            b"{\"at\":\"\xff\xfe\"}".to_vec(),
            "{ field: at }",
        ),
        ("nan", b"NaN".to_vec(), "{ unit: seconds }"),
        ("inf", b"inf".to_vec(), "{ unit: auto }"),
        ("overflow", b"1e400".to_vec(), "{ unit: milliseconds }"),
        ("negative", b"-5".to_vec(), "{ unit: seconds }"),
        ("huge-digits", huge_digits.into_bytes(), "{ unit: auto }"),
        ("empty", b"".to_vec(), "{ unit: auto }"),
        ("null-field", b"{\"at\":null}".to_vec(), "{ field: at }"),
        ("bool-field", b"{\"at\":true}".to_vec(), "{ field: at }"),
        ("array-field", b"{\"at\":[1]}".to_vec(), "{ field: at }"),
        ("bad-index", b"{\"at\":[1]}".to_vec(), "{ field: at.7 }"),
        (
            "bad-date",
            b"2024-13-45T99:99:99Z".to_vec(),
            "{ unit: rfc3339 }",
        ),
        (
            "date-as-seconds",
            b"2024-01-01T00:00:00Z".to_vec(),
            "{ unit: seconds }",
        ),
    ];
    let mut queues = String::new();
    for (key, item, age) in &bad {
        redis.run::<()>(&[b"RPUSH", key.as_bytes(), item, b"newer"]);
        queues.push_str(&format!("      - key: {key}\n        age: {age}\n"));
    }
    redis.run::<()>(&[b"RPUSH", b"good", format!("{}", now() - 30.0).as_bytes()]);
    queues.push_str("      - key: good\n        age: { unit: seconds }\n");
    let exp = Exporter::start(
        &redis_source(&redis.url, "    poll_interval: 100ms\n", &queues),
        &[],
        &[],
    )
    .await;
    let failures = |b: &str| {
        sample(
            b,
            "queue_exporter_age_parse_failures_total",
            &[("source", "main")],
        )
        .unwrap_or(0.0)
    };
    let body = poll_until(Duration::from_secs(15), || async {
        let b = exp.metrics().await;
        (failures(&b) >= bad.len() as f64).then_some(b)
    })
    .await
    .expect("failures counted");
    for (key, _, _) in &bad {
        assert_eq!(
            sample(&body, "queue_depth", &[("queue", key)]),
            Some(2.0),
            "{key}: the depth is still known"
        );
        assert_eq!(
            sample(&body, "queue_oldest_message_age_seconds", &[("queue", key)]),
            None,
            "{key}: an unreadable timestamp is no age, not 0"
        );
    }
    let good = sample(
        &body,
        "queue_oldest_message_age_seconds",
        &[("queue", "good")],
    )
    .unwrap();
    assert!((30.0..60.0).contains(&good), "{good}");
    assert_eq!(
        sample(&body, "queue_exporter_source_up", &[("source", "main")]),
        Some(1.0)
    );
    // Counted on every poll: after 5 more polls, 5 × 16 more failures.
    let polls = |b: &str| {
        sample(
            b,
            "queue_exporter_poll_duration_seconds_count",
            &[("source", "main")],
        )
        .unwrap()
    };
    let (f0, p0) = (failures(&body), polls(&body));
    let body = poll_until(Duration::from_secs(15), || async {
        let b = exp.metrics().await;
        (polls(&b) >= p0 + 5.0).then_some(b)
    })
    .await
    .unwrap();
    let per_poll = (failures(&body) - f0) / (polls(&body) - p0);
    assert!(
        (per_poll - bad.len() as f64).abs() < 1.0,
        "{per_poll} failures per poll, {} bad items",
        bad.len()
    );
}

// ---------------------------------------------------------------- HTTP

/// `len` bytes of `fill` as one HTTP/1.1 chunk.
fn chunk(fill: u8, len: usize) -> Vec<u8> {
    let mut c = format!("{len:x}\r\n").into_bytes();
    c.resize(c.len() + len, fill);
    c.extend_from_slice(b"\r\n");
    c
}

/// What the hostile server answers, by the first path segment.
async fn hostile(path: String, mut sock: tokio::net::TcpStream) {
    const JSON: &str = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n";
    const CHUNKED: &str =
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n";
    let mode = path.trim_start_matches('/').split('/').next().unwrap_or("");
    let s = &mut sock;
    match mode {
        // 200 MB announced and sent (until the client hangs up).
        "big-length" => {
            let head = format!("{JSON}content-length: {}\r\n\r\n", 200_000_000);
            if !write_all(s, head.as_bytes()).await {
                return;
            }
            let block = vec![b' '; 1 << 20];
            for _ in 0..200 {
                if !write_all(s, &block).await {
                    return;
                }
            }
        }
        // 200 MB in chunks, no length announced.
        "big-chunked" => {
            if !write_all(s, CHUNKED.as_bytes()).await {
                return;
            }
            let block = chunk(b' ', 1 << 20);
            for _ in 0..200 {
                if !write_all(s, &block).await {
                    return;
                }
            }
            write_all(s, b"0\r\n\r\n").await;
        }
        // Chunks forever.
        "endless" => {
            if !write_all(s, CHUNKED.as_bytes()).await {
                return;
            }
            let block = chunk(b'[', 64 * 1024);
            while write_all(s, &block).await {}
        }
        // Chunks forever, slowly: a 10-byte chunk every 50 ms.
        "crawl" => {
            if !write_all(s, CHUNKED.as_bytes()).await {
                return;
            }
            loop {
                tokio::time::sleep(Duration::from_millis(50)).await;
                if !write_all(s, &chunk(b' ', 10)).await {
                    return;
                }
            }
        }
        // A queue name that is not UTF-8.
        "bad-utf8" => {
            let mut body = b"{\"items\":[{\"name\":\"q\xff\xfe\",\"vhost\":\"/\",\"messages\":1,\"messages_ready\":1}],\"page\":1,\"page_count\":1}\n".to_vec();
            body.extend_from_slice(
                b"# TYPE x gauge\nrabbitmq_identity_info{rabbitmq_node=\"\xff\"} 1\n",
            );
            let head = format!("{JSON}content-length: {}\r\n\r\n", body.len());
            write_all(s, head.as_bytes()).await;
            write_all(s, &body).await;
        }
        // JSON nested a million levels deep.
        "deep" => {
            let mut body = b"{\"items\":".to_vec();
            body.resize(body.len() + 1_000_000, b'[');
            let head = format!("{JSON}content-length: {}\r\n\r\n", body.len());
            write_all(s, head.as_bytes()).await;
            write_all(s, &body).await;
        }
        // Header lines forever.
        "endless-headers" => {
            if !write_all(s, b"HTTP/1.1 200 OK\r\n").await {
                return;
            }
            while write_all(s, b"x-filler: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n").await {}
        }
        _ => {
            let body = b"{\"error\":\"unknown mode\"}";
            let head = format!(
                "HTTP/1.1 404 Not Found\r\ncontent-length: {}\r\n\r\n",
                body.len()
            );
            write_all(s, head.as_bytes()).await;
            write_all(s, body).await;
        }
    }
}

/// (source name, method, mode, max_response_bytes or None for the default
/// 64 MiB, the reason its polls must fail with)
const HOSTILE: &[(&str, &str, &str, Option<u64>, &str)] = &[
    ("big-length", "management", "big-length", None, "too_large"),
    (
        "big-chunked",
        "management",
        "big-chunked",
        None,
        "too_large",
    ),
    (
        "endless",
        "management",
        "endless",
        Some(1 << 20),
        "too_large",
    ),
    (
        "endless-prom",
        "prometheus",
        "endless",
        Some(1 << 20),
        "too_large",
    ),
    ("crawl", "management", "crawl", Some(1 << 20), "timeout"),
    ("bad-utf8", "management", "bad-utf8", None, "malformed"),
    ("bad-utf8-prom", "prometheus", "bad-utf8", None, "malformed"),
    ("deep", "management", "deep", None, "malformed"),
    (
        "endless-headers",
        "management",
        "endless-headers",
        None,
        "backend",
    ),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_http_answers_are_counted_errors_with_bounded_memory() {
    let base = raw_http_server(Arc::new(|path, sock| Box::pin(hostile(path, sock)))).await;
    let redis = RedisServer::start();
    redis.run::<()>(&[b"RPUSH", b"work", b"a", b"b"]);
    let mut yaml = format!(
        "sources:\n  - name: redis\n    type: redis\n    url: {}\n    poll_interval: 100ms\n    queues: [{{ key: work }}]\n",
        redis.url
    );
    for (name, method, mode, max, _) in HOSTILE {
        yaml.push_str(&format!(
            "  - name: {name}\n    type: rabbitmq\n    method: {method}\n    url: {base}/{mode}\n    username: guest\n    password: guest\n    poll_interval: 1s\n    timeout: 2s\n"
        ));
        if let Some(m) = max {
            yaml.push_str(&format!("    max_response_bytes: {m}\n"));
        }
    }
    let mut exp = Exporter::start(&yaml, &[], &[]).await;
    let baseline = exp.status();
    let errors = |b: &str, source: &str, reason: &str| {
        sample(
            b,
            "queue_exporter_poll_errors_total",
            &[("source", source), ("reason", reason)],
        )
        .unwrap_or(0.0)
    };
    // Two counted failures each (so every hostile answer was met at least twice).
    let body = poll_until(Duration::from_secs(40), || async {
        let b = exp.metrics().await;
        HOSTILE
            .iter()
            .all(|(name, _, _, _, reason)| errors(&b, name, reason) >= 2.0)
            .then_some(b)
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "not every hostile source counted its reason; stderr:\n{}",
            exp.stderr()
        )
    });
    assert!(exp.running(), "the exporter died");
    let st = exp.status();
    for (name, _, _, _, reason) in HOSTILE {
        assert_eq!(
            sample(&body, "queue_exporter_source_up", &[("source", name)]),
            Some(0.0),
            "{name}"
        );
        assert_eq!(
            sample(&body, "queue_depth", &[("source", name)]),
            None,
            "{name}"
        );
        // Only its own reason.
        let total: f64 = [
            "connect",
            "auth",
            "timeout",
            "backend",
            "malformed",
            "http_4xx",
            "http_5xx",
            "too_large",
            "not_found",
            "config",
        ]
        .iter()
        .map(|r| errors(&body, name, r))
        .sum();
        assert_eq!(
            total,
            errors(&body, name, reason),
            "{name}: other reasons too"
        );
    }
    // The Redis source in the same process never noticed.
    assert_eq!(
        sample(
            &body,
            "queue_depth",
            &[("source", "redis"), ("queue", "work")]
        ),
        Some(2.0)
    );
    assert_eq!(
        sample(&body, "queue_exporter_source_up", &[("source", "redis")]),
        Some(1.0)
    );
    eprintln!(
        "RSS at start {} MiB; after the hostile answers {} MiB, peak {} MiB",
        baseline.rss_kib / 1024,
        st.rss_kib / 1024,
        st.hwm_kib / 1024
    );
    // Bounded memory: no 200 MB body was ever held; at most one source
    // here buffers up to the default 64 MiB.
    assert!(
        st.hwm_kib < 320 * 1024,
        "peak RSS {} MiB",
        st.hwm_kib / 1024
    );
    let stderr = exp.stderr();
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(exp.terminate().success());
}
