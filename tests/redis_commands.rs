//! What a poll asks Redis, watched with MONITOR on a private server: a
//! timestamp zset is split into ready and scheduled by one count of the
//! scheduled side (`ZCOUNT k (now +inf`, answered from the last score when
//! everything is due), never by a ZCOUNT over every due item.
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
async fn timestamp_zsets_count_only_their_scheduled_side_once_per_poll() {
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
    # What every poll asks when it reads a key; with tracking (the default,
    # tests/redis_tracking.rs) an unchanged key asks nothing.
    client_tracking: false
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
    // 3 whole polls watched (one may have been in flight).
    app.wait_polls("main", 4, Duration::from_secs(10)).await;
    let lines = monitored(&mut monitor);
    assert!(
        calls(&lines, "ZCARD", "due").len() >= 3,
        "polls were watched"
    );
    for key in ["due", "later", "both"] {
        let counts = calls(&lines, "ZCOUNT", key);
        assert_eq!(
            counts.len(),
            calls(&lines, "ZCARD", key).len(),
            "one count per poll, in the first round trip: {lines:#?}"
        );
        for c in counts {
            assert!(
                c.contains(" \"(") && c.ends_with("\"+inf\""),
                "only the scheduled side is counted: {c}"
            );
        }
    }
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

/// The bucket counts a test computes itself from the ages it wrote.
fn truth(ages: &[f64], bounds: &[f64]) -> Vec<f64> {
    bounds
        .iter()
        .map(|b| ages.iter().filter(|a| *a <= b).count() as f64)
        .collect()
}

#[tokio::test]
async fn probed_histograms_match_the_true_counts_as_the_queue_churns() {
    // Ages stay at least 5 s away from every bound, and the test ends long
    // before an item could drift across one, so the truth does not move.
    let redis = RedisServer::start();
    let bounds = [10.0, 60.0, 300.0, 900.0];
    let t = now();
    let mut ages: Vec<f64> = (0..60).map(|i| 20.0 + f64::from(i) * 13.0).collect();
    ages.retain(|a| bounds.iter().all(|b| (a - b).abs() > 5.0));
    let write = |ages: &[f64]| {
        let _: () = redis::cmd("DEL")
            .arg("churn")
            .query(&mut redis.conn())
            .unwrap();
        let scores: Vec<f64> = ages.iter().map(|a| t - a).collect();
        if !scores.is_empty() {
            zadd(&redis, "churn", &scores);
        }
    };
    write(&ages);
    let app = TestApp::start(&format!(
        r#"listen: {{ grpc: null }}
sources:
  - name: main
    type: redis
    url: {}
    poll_interval: 100ms
    age_buckets: [10s, 60s, 300s, 900s]
    age_histogram_interval: 0s
    queues:
      - key: churn
        score: timestamp
"#,
        redis.url
    ))
    .await;
    let check = |ages: Vec<f64>, step: &'static str| {
        let app = &app;
        async move {
            let want = truth(&ages, &bounds);
            let n = ages.len() as f64;
            app.scrape_until(step, Duration::from_secs(10), |s| {
                s.value("queue_messages_ready", &[("queue", "churn")]) == Some(n)
                    && ["10.0", "60.0", "300.0", "900.0"]
                        .iter()
                        .zip(&want)
                        .all(|(le, w)| s.bucket("churn", le) == Some(*w))
            })
            .await;
        }
    };
    check(ages.clone(), "first measurement").await;
    let mut monitor = start_monitor(&redis);
    // A small change: inside the probes' windows.
    ages.extend([30.0, 31.5]);
    write(&ages);
    check(ages.clone(), "two young items").await;
    // A big change: outside them (a probe misses and ZCOUNT answers).
    ages.extend((0..12).map(|i| 100.0 + f64::from(i)));
    write(&ages);
    check(ages.clone(), "twelve more in one bucket").await;
    // Items leave from the middle, and one arrives older than any bound.
    ages.retain(|a| !(150.0..400.0).contains(a));
    ages.push(2000.0);
    write(&ages);
    check(ages.clone(), "middle removed, a very old one added").await;
    ages.clear();
    write(&ages);
    check(ages.clone(), "drained").await;

    let lines = monitored(&mut monitor);
    let probes = lines
        .iter()
        .filter(|l| l.contains("\"ZRANGE\" \"churn\"") && l.contains("\"REV\" \"LIMIT\""))
        .count();
    assert!(probes > 0, "steady measurements probe: {lines:#?}");
    app.stop().await;
}
