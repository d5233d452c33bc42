//! Discovery's limits, against a private redis-server per test (issue 24,
//! points 2, 3, 7 and 8):
//!
//! - preset queues count against `max_keys`, one budget per source shared
//!   with key and pattern entries; which are kept is deterministic and the
//!   excess is counted in `queue_exporter_dropped_keys`, logged once;
//! - a discovery command Redis refuses is counted under `reason="auth"` and
//!   never makes a source look healthy and empty;
//! - a discovery slower than a poll's deadline never keeps a source down:
//!   it goes on across polls, and polls serve the keys known so far;
//! - a poll that times out leaves no task of its own behind.
mod reliability_support;
mod scaler_common;
mod support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use queue_exporter::config::SourceConfig;
use queue_exporter::sources::Source;
use queue_exporter::sources::redis::RedisSource;
use reliability_support::{Exporter, Proxy, ProxyMode};
use scaler_common::{Observer, client, redis_config, up_runs, wait_code};
use support::*;

const WAIT: Duration = Duration::from_secs(20);

/// Source `main` over `url` with `settings` (YAML at the source's level,
/// flush left or as an indented raw string, ending in `queues:`).
fn source(url: &str, settings: &str) -> String {
    format!(
        "sources:\n  - name: main\n    type: redis\n    url: {url}\n{}",
        indent(settings, 4)
    )
}

/// Registers `n` RQ queues `q000`, `q001`, … in `rq:queues`, in a shuffled
/// order (so "kept" cannot mean "first registered"), each with one job.
fn rq_queues(redis: &RedisServer, n: usize) {
    let mut c = redis.conn();
    let mut pipe = redis::pipe();
    for i in (0..n).rev() {
        let q = format!("q{i:03}");
        pipe.cmd("SADD")
            .arg("rq:queues")
            .arg(format!("rq:queue:{q}"));
        pipe.cmd("RPUSH").arg(format!("rq:queue:{q}")).arg("job");
    }
    pipe.query::<()>(&mut c).expect("write RQ queues");
}

/// The `queue` labels of preset samples of `queue_depth`.
fn preset_queues(s: &Scrape, preset: &str) -> BTreeSet<String> {
    s.samples("queue_depth", &[("preset", preset)])
        .filter_map(|x| x.labels.get("queue").map(str::to_string))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preset_queues_beyond_max_keys_are_dropped_last_by_name_counted_and_logged_once() {
    let redis = RedisServer::start();
    rq_queues(&redis, 300);
    let exp = Exporter::start(
        &source(
            &redis.url,
            r#"
            poll_interval: 100ms
            discovery_interval: 200ms
            max_keys: 100
            queues:
              - preset: rq
            "#,
        ),
        &[],
        &[],
    )
    .await;
    let polls = |s: &Scrape| {
        s.value(
            "queue_exporter_poll_duration_seconds_count",
            &[("source", "main")],
        )
        .unwrap_or(0.0)
    };
    let first = wait_for("100 RQ queues tracked", WAIT, || async {
        let s = Scrape::parse(&exp.metrics().await);
        (s.value("queue_exporter_tracked_keys", &[("source", "main")]) == Some(100.0)).then_some(s)
    })
    .await;
    assert_eq!(
        first.value("queue_exporter_dropped_keys", &[("source", "main")]),
        Some(200.0)
    );
    let expected: BTreeSet<String> = (0..100).map(|i| format!("q{i:03}")).collect();
    assert_eq!(preset_queues(&first, "rq"), expected);
    // Ten more discovery rounds: the same queues, the warning still once.
    let later = polls(&first) + 20.0;
    let last = wait_for("20 more polls", WAIT, || async {
        let s = Scrape::parse(&exp.metrics().await);
        (polls(&s) >= later).then_some(s)
    })
    .await;
    assert_eq!(preset_queues(&last, "rq"), expected);
    let warnings = exp
        .stderr()
        .matches("more preset queues than max_keys")
        .count();
    assert_eq!(warnings, 1, "{}", exp.stderr());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_max_keys_budget_is_shared_by_key_pattern_and_preset_entries() {
    let redis = RedisServer::start();
    rq_queues(&redis, 10);
    for k in ["work", "jobs:a", "jobs:b"] {
        redis.run::<()>(&[b"RPUSH", k.as_bytes(), b"x"]);
    }
    let app = TestApp::start(&source(
        &redis.url,
        r#"
        poll_interval: 100ms
        max_keys: 8
        queues:
          - key: work
          - pattern: jobs:*
          - preset: rq
        "#,
    ))
    .await;
    let s = app
        .until("8 keys tracked", WAIT, |s| {
            s.value("queue_exporter_tracked_keys", &[("source", "main")]) == Some(8.0)
        })
        .await;
    // The key and pattern entries first, then the presets' queues by name.
    assert_eq!(s.depth("work"), Some(1.0));
    assert_eq!(s.depth("jobs:a"), Some(1.0));
    assert_eq!(s.depth("jobs:b"), Some(1.0));
    let kept: BTreeSet<String> = (0..5).map(|i| format!("q{i:03}")).collect();
    assert_eq!(preset_queues(&s, "rq"), kept);
    assert_eq!(
        s.value("queue_exporter_dropped_keys", &[("source", "main")]),
        Some(5.0)
    );
    app.stop().await;
}

/// A redis-server with user `qe` (password `pw`) allowed to read everything
/// but `refused` (an ACL rule such as `-type`); returns the server and the
/// URL that logs in as `qe`.
fn redis_refusing(refused: &str) -> (RedisServer, String) {
    let redis = RedisServer::start();
    let url = redis.acl_user("qe", "pw", &[READ_ONLY_ACL, &[refused]].concat());
    (redis, url)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_type_is_counted_as_auth_and_its_queue_is_unknown_never_empty() {
    let (redis, url) = redis_refusing("-type");
    redis.run::<()>(&[b"RPUSH", b"q:a", b"1", b"2", b"3"]);
    let app = TestApp::start(&redis_config(&url, "100ms", "- pattern: q:*")).await;
    let s = app
        .until("auth errors counted", WAIT, |s| {
            s.errors("main", "auth").is_some_and(|n| n >= 1.0)
        })
        .await;
    // Up (everything else answered), but no made-up depth for `q:a`.
    assert_eq!(s.source_up("main"), Some(1.0), "{s}");
    assert_eq!(s.depth("q:a"), None, "{s}");
    // KEDA hears that the queue's size is unknown, not that it is empty.
    let c = client(&app).await;
    wait_code(
        &c,
        &[("source", "main"), ("queue", "q:a")],
        tonic::Code::Unavailable,
        WAIT,
    )
    .await;
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_scan_marks_the_source_down_with_reason_auth() {
    let (redis, url) = redis_refusing("-scan");
    redis.run::<()>(&[b"RPUSH", b"q:a", b"1"]);
    let app = TestApp::start(&redis_config(&url, "100ms", "- pattern: q:*")).await;
    let s = app
        .until("auth errors counted", WAIT, |s| {
            s.errors("main", "auth").is_some_and(|n| n >= 1.0)
        })
        .await;
    assert_eq!(s.source_up("main"), Some(0.0), "{s}");
    assert!(!s.shows_queue("q:a"), "{s}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_slower_than_the_poll_deadline_never_keeps_the_source_down() {
    let redis = RedisServer::start();
    // 20,000 other keys: at COUNT 50, a SCAN pass is 400 round trips.
    let mut c = redis.conn();
    for batch in 0..20 {
        let mut pipe = redis::pipe();
        for i in 0..1000 {
            pipe.cmd("SET")
                .arg(format!("other:{batch}:{i}"))
                .arg("x")
                .ignore();
        }
        pipe.query::<()>(&mut c).expect("write other keys");
    }
    for (k, n) in [("q:1", 1), ("q:2", 2), ("q:3", 3)] {
        for _ in 0..n {
            redis.run::<()>(&[b"RPUSH", k.as_bytes(), b"x"]);
        }
    }
    // Every reply delayed 10 ms: a pass takes over 4 s, a poll's deadline
    // is 1 s (4 × timeout).
    let proxy = Proxy::start(&format!("127.0.0.1:{}", redis.port)).await;
    proxy.set(ProxyMode::Slow(Duration::from_millis(10)));
    let exp = Exporter::start(
        &format!(
            "scaler: {{ max_staleness: 5s }}\n{}",
            source(
                &format!("redis://127.0.0.1:{}", proxy.port),
                r#"
                timeout: 250ms
                poll_interval: 200ms
                discovery_interval: 1s
                scan_count: 50
                queues:
                  - pattern: q:*
                "#,
            )
        ),
        &[],
        &[],
    )
    .await;
    let obs = Observer::start(&exp.base, exp.grpc, "main", "q:3").await;
    let t0 = Instant::now();
    let up = obs
        .wait_scrape(t0, Duration::from_secs(60), "q:3 = 3 and up", |s| {
            s.value == Some(3.0) && s.up == Some(1.0)
        })
        .await;
    eprintln!("up with queues {:?} after start", up.at - t0);
    // Rounds keep running (each slower than a poll's deadline) while the
    // source stays up; a key added now shows up once one has finished.
    redis.run::<()>(&[b"RPUSH", b"q:4", b"x"]);
    let added = Instant::now();
    wait_for("q:4 discovered", Duration::from_secs(60), || async {
        let s = Scrape::parse(&exp.metrics().await);
        (s.depth("q:4") == Some(1.0)).then_some(())
    })
    .await;
    eprintln!("q:4 discovered {:?} after it was written", added.elapsed());
    let scrapes: Vec<_> = obs
        .scrapes()
        .into_iter()
        .filter(|s| s.at >= up.at)
        .collect();
    drop(obs);
    assert!(!scrapes.is_empty());
    assert_eq!(up_runs(&scrapes), [1.0], "the source went down");
    assert!(
        scrapes.iter().all(|s| s.value == Some(3.0)),
        "{:?}",
        scrapes.iter().find(|s| s.value != Some(3.0))
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_poll_that_times_out_leaves_no_task_behind() {
    let redis = RedisServer::start();
    // 8,000 keys: 8 chunks of commands, 4 in flight at once.
    let mut c = redis.conn();
    let mut pipe = redis::pipe();
    for i in 0..8000 {
        pipe.cmd("RPUSH").arg(format!("q:{i}")).arg("x").ignore();
    }
    pipe.query::<()>(&mut c).expect("write keys");
    // Each command may wait 30 s for its reply: a chunk task left behind
    // would live that long. Untracked, so the poll goes straight to its
    // chunks (no `PING` on a tracking connection first).
    let (config, _dir) = load_config(&format!(
        "sources:\n  - name: main\n    type: redis\n    url: {}\n    timeout: 30s\n    client_tracking: false\n    queues:\n      - pattern: q:*\n",
        redis.url
    ));
    let Some(SourceConfig::Redis(config)) = config.sources.into_iter().next() else {
        panic!("one redis source");
    };
    let mut source = RedisSource::new(config);
    let out = source.poll().await.expect("first poll");
    assert_eq!(out.queues.len(), 8000);
    let metrics = tokio::runtime::Handle::current().metrics();
    let before = metrics.num_alive_tasks();

    // Redis stops answering; the poll is cut off by its deadline, as the
    // poll loop does.
    redis.freeze();
    let cut = tokio::time::timeout(Duration::from_millis(500), source.poll()).await;
    assert!(cut.is_err(), "the poll should have timed out");
    let left = poll_until(Duration::from_secs(5), || async {
        (metrics.num_alive_tasks() <= before).then_some(())
    })
    .await;
    let alive = metrics.num_alive_tasks();
    redis.thaw();
    assert!(
        left.is_some(),
        "{alive} tasks alive after the timed-out poll, {before} before it"
    );
}
