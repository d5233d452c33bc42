//! What a poll asks Redis, watched with MONITOR on a private server: the
//! cheap path for timestamp zsets (no ZCOUNT over every due item when all
//! items are due or all are scheduled), and a count only where a zset holds
//! both due and scheduled items.
mod support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use support::*;

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

fn zadd(redis: &RedisServer, key: &str, scores: &[f64]) {
    let mut c = redis::cmd("ZADD");
    c.arg(key);
    for (i, s) in scores.iter().enumerate() {
        c.arg(format!("{s:.3}")).arg(format!("m{i}"));
    }
    let _: () = c.query(&mut redis.conn()).unwrap();
}

/// Lines MONITOR saw whose command is `name` on `key`.
fn calls<'a>(lines: &'a [String], name: &str, key: &str) -> Vec<&'a String> {
    let needle = format!("\"{name}\" \"{key}\"");
    lines.iter().filter(|l| l.contains(&needle)).collect()
}

#[tokio::test]
async fn timestamp_zsets_are_counted_only_when_they_hold_due_and_scheduled_items() {
    let redis = RedisServer::start();
    let t = now();
    zadd(&redis, "due", &[t - 100.5, t - 50.25, t - 1.125]);
    zadd(&redis, "later", &[t + 100.5, t + 200.25]);
    zadd(&redis, "both", &[t - 10.5, t - 5.25, t + 300.75]);
    let app = TestApp::start(&format!(
        r#"listen: {{ grpc: null }}
sources:
  - name: main
    type: redis
    url: {}
    poll_interval: 100ms
    age_buckets: []
    queues:
      - pattern: "*"
        score: timestamp
"#,
        redis.url
    ))
    .await;
    let scrape = app
        .scrape_until("all three zsets", Duration::from_secs(10), |s| {
            s.depth("both").is_some()
        })
        .await;
    let ready = |q: &str| scrape.value("queue_messages_ready", &[("queue", q)]);
    let scheduled = |q: &str| scrape.value("queue_messages_scheduled", &[("queue", q)]);
    assert_eq!((ready("due"), scheduled("due")), (Some(3.0), Some(0.0)));
    assert_eq!((ready("later"), scheduled("later")), (Some(0.0), Some(2.0)));
    assert_eq!((ready("both"), scheduled("both")), (Some(2.0), Some(1.0)));

    // Steady polls from here on.
    let mut monitor = start_monitor(&redis);
    tokio::time::sleep(Duration::from_millis(600)).await;
    let lines = monitored(&mut monitor);
    assert!(
        calls(&lines, "ZCARD", "due").len() >= 3,
        "polls were watched"
    );
    assert!(calls(&lines, "ZCOUNT", "due").is_empty(), "{lines:#?}");
    assert!(calls(&lines, "ZCOUNT", "later").is_empty(), "{lines:#?}");
    assert_eq!(
        calls(&lines, "ZCOUNT", "both").len(),
        calls(&lines, "ZCARD", "both").len(),
        "a mixed zset is counted once per poll, in the first round trip"
    );
    // Every command is a read.
    for l in &lines {
        let cmd = l.split('"').nth(1).unwrap_or_default().to_uppercase();
        assert!(
            [
                "ZCARD", "ZRANGE", "ZCOUNT", "SCAN", "TYPE", "PING", "INFO", "CLIENT", "HELLO",
                "SELECT"
            ]
            .contains(&cmd.as_str()),
            "unexpected command {l}"
        );
    }
    app.stop().await;
}
