//! Odd key and group names: quotes, newlines, backslashes, unicode and bytes
//! that are not UTF-8. Distinct keys stay distinct series, capture labels see
//! the same names, and both exposition formats stay valid.
mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use support::*;

const WAIT: Duration = Duration::from_secs(15);

fn raw(redis: &RedisServer, args: &[&[u8]]) {
    let mut c = redis::cmd(std::str::from_utf8(args[0]).unwrap());
    for a in &args[1..] {
        c.arg(*a);
    }
    let _: redis::Value = c.query(&mut redis.conn()).unwrap();
}

/// (raw key, the `queue` label value it must get)
fn weird_keys() -> Vec<(Vec<u8>, String)> {
    vec![
        (b"n:\"quoted\"".to_vec(), "n:\"quoted\"".into()),
        (b"n:new\nline".to_vec(), "n:new\nline".into()),
        (b"n:back\\slash".to_vec(), "n:back\\slash".into()),
        (b"n:end\\".to_vec(), "n:end\\".into()),
        (b"n:tab\there".to_vec(), "n:tab\there".into()),
        (
            "n:ünïcødé ✓ 日本".as_bytes().to_vec(),
            "n:ünïcødé ✓ 日本".into(),
        ),
        (
            b"n:comma,{brace}=\"x\"".to_vec(),
            "n:comma,{brace}=\"x\"".into(),
        ),
        // Not UTF-8: each invalid byte as \xNN.
        (b"n:bad\xff".to_vec(), "n:bad\\xff".into()),
        (b"n:bad\xfe".to_vec(), "n:bad\\xfe".into()),
        // Not UTF-8 with backslashes: escaped, so these two stay apart.
        (b"d:\\xff\xfe".to_vec(), "d:\\\\xff\\xfe".into()),
        (b"d:\xff\\xfe".to_vec(), "d:\\xff\\\\xfe".into()),
    ]
}

async fn start(redis: &RedisServer) -> TestApp {
    for (k, _) in weird_keys() {
        raw(redis, &[b"RPUSH", &k, b"job"]);
    }
    // A non-UTF-8 key and a UTF-8 key spelled like its rendering: one label
    // value for two keys. Only the first (in key order) may be exported.
    raw(redis, &[b"RPUSH", b"c:x\\xff", b"1"]);
    raw(redis, &[b"RPUSH", b"c:x\xff", b"1", b"2"]);
    // A stream whose groups have odd names.
    raw(redis, &[b"XADD", b"s:events", b"*", b"k", b"v"]);
    for g in [&b"g\"1"[..], b"g\n2", b"g\xff3"] {
        raw(redis, &[b"XGROUP", b"CREATE", b"s:events", g, b"0"]);
    }
    let app = TestApp::start(&format!(
        r#"
        listen: {{ grpc: null }}
        sources:
          - name: main
            type: redis
            url: {url}
            poll_interval: 100ms
            queues:
              - pattern: "n:*"
                labels: "(?s)^n:(?P<rest>.*)$"
              - pattern: "[cds]:*"
        "#,
        url = redis.url
    ))
    .await;
    let want = expected_queues().len() as f64;
    app.wait_value(
        "queue_exporter_tracked_keys",
        &[("source", "main")],
        want,
        WAIT,
    )
    .await;
    app
}

fn expected_queues() -> BTreeSet<String> {
    let mut want: BTreeSet<String> = weird_keys().into_iter().map(|(_, n)| n).collect();
    want.insert("c:x\\xff".into());
    want.insert("s:events".into());
    want
}

fn check_parsed(samples: &[PySample], format: &str) {
    let depth: Vec<&PySample> = samples.iter().filter(|s| s.name == "queue_depth").collect();
    let queues: BTreeSet<String> = depth.iter().map(|s| s.labels["queue"].clone()).collect();
    assert_eq!(queues, expected_queues(), "{format}");
    assert_eq!(depth.len(), expected_queues().len(), "{format}: duplicates");
    for s in &depth {
        let q = &s.labels["queue"];
        // Capture labels see the same rendering as the queue label.
        if let Some(rest) = q.strip_prefix("n:") {
            assert_eq!(s.labels.get("rest"), Some(&rest.to_string()), "{format}");
        } else {
            assert!(!s.labels.contains_key("rest"), "{format}: {q}");
        }
        // The UTF-8 twin sorts first and wins; its depth is 1, not 2.
        if q == "c:x\\xff" {
            assert_eq!(s.value, 1.0, "{format}");
        }
    }
    let groups: BTreeSet<String> = samples
        .iter()
        .filter(|s| s.name == "queue_stream_group_lag")
        .map(|s| s.labels["group"].clone())
        .collect();
    let want: BTreeSet<String> = ["g\"1", "g\n2", "g\\xff3"]
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(groups, want, "{format}");
}

#[tokio::test]
async fn odd_names_stay_distinct_and_both_formats_stay_valid() {
    let redis = RedisServer::start();
    let app = start(&redis).await;

    let classic = app.metrics().await;
    let (ok, out) = promtool_check(&classic);
    assert!(ok, "promtool: {out}\n{classic}");
    let parsed = python_parse(&classic, false).unwrap_or_else(|e| panic!("{e}\n{classic}"));
    check_parsed(&parsed, "classic");
    // One line per sample: the newline in a key never splits a line.
    assert_eq!(
        classic
            .lines()
            .filter(|l| l.starts_with("queue_depth{"))
            .count(),
        expected_queues().len()
    );
    // The colliding key is counted, not silently lost.
    assert_eq!(
        Scrape::parse(&classic).value("queue_exporter_dropped_keys", &[("source", "main")]),
        Some(1.0)
    );

    let (_, om, _) = http_get(
        &format!("{}/metrics", app.base),
        &[("accept", "application/openmetrics-text; version=1.0.0")],
    )
    .await;
    assert!(om.ends_with("# EOF\n"));
    let parsed = python_parse(&om, true).unwrap_or_else(|e| panic!("{e}\n{om}"));
    check_parsed(&parsed, "openmetrics");
    app.stop().await;
}

#[tokio::test]
async fn odd_exact_keys_are_reported_under_their_own_names() {
    let redis = RedisServer::start();
    raw(&redis, &[b"ZADD", b"q \"x\"\\y", b"1", b"a"]);
    // YAML double-quoted escapes give the exact key bytes.
    let app = TestApp::start(&format!(
        r#"
        listen: {{ grpc: null }}
        sources:
          - name: main
            type: redis
            url: {url}
            poll_interval: 100ms
            queues:
              - key: "q \"x\"\\y"
              - key: "missing\nkey"
        "#,
        url = redis.url
    ))
    .await;
    let samples = wait_for("both keys reported", WAIT, || async {
        let parsed = python_parse(&app.metrics().await, false).ok()?;
        let n = parsed.iter().filter(|s| s.name == "queue_depth").count();
        (n == 2).then_some(parsed)
    })
    .await;
    let depth = |q: &str| {
        samples
            .iter()
            .find(|s| s.name == "queue_depth" && s.labels["queue"] == q)
            .map(|s| s.value)
    };
    assert_eq!(depth("q \"x\"\\y"), Some(1.0));
    assert_eq!(depth("missing\nkey"), Some(0.0));
    app.stop().await;
}
