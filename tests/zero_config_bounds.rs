//! Zero config's discovery work has bounds (issue 36, "Bounded discovery"):
//! the library marks a scan reads (`*:meta` hashes, `*:queues` sets, kombu
//! bindings, Bull `id`s) count against `max_keys`, and marks beyond it are
//! not read but counted and left unknown (KEDA gets no number for the
//! names they may hide); sets are read by bounded `SSCAN`, and a set over
//! the cap is not read at all (its size counted), never by one `SMEMBERS`;
//! a bare `queues` set is Sidekiq's only with Sidekiq's other keys beside
//! it. Each test runs a private `redis-server` and the exporter in process.
mod scaler_common;
mod support;

use std::time::Duration;

use queue_exporter::sources::Source;
use scaler_common::*;
use support::*;
use tonic::Code;

const WAIT: Duration = Duration::from_secs(20);

/// Source `main` over `url` with `extra` source lines (zero config: no
/// `queues:`), polling every 100 ms and rediscovering every 200 ms.
fn config(url: &str, extra: &str) -> String {
    format!(
        "listen: {{ grpc: 127.0.0.1:0 }}\nsources:\n  - name: main\n    type: redis\n    url: {url}\n    poll_interval: 100ms\n    discovery_interval: 200ms\n{}",
        indent(extra, 4)
    )
}

/// BullMQ queue `bull:<name>` with one job waiting, its `meta` as BullMQ's
/// `Queue` writes it.
fn bullmq_queue(redis: &RedisServer, name: &str) {
    let meta = format!("bull:{name}:meta");
    let wait = format!("bull:{name}:wait");
    redis.run::<()>(&[b"HSET", meta.as_bytes(), b"version", b"bullmq:5.34.0"]);
    redis.run::<()>(&[b"LPUSH", wait.as_bytes(), b"1"]);
}

/// Calls of `command` since the last `reset_stats`.
fn calls(redis: &RedisServer, command: &str) -> u64 {
    redis.commandstats().get(command).map_or(0, |s| s.0)
}

/// Asserts `e` is `UNAVAILABLE` and its message holds every one of `words`.
fn assert_unavailable(e: &tonic::Status, words: &[&str]) {
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    for w in words {
        assert!(e.message().contains(w), "{w:?} not in {:?}", e.message());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn marks_beyond_max_keys_are_not_read_but_counted_and_their_names_are_unknown() {
    let redis = RedisServer::start();
    for q in 1..=6 {
        bullmq_queue(&redis, &format!("q{q}"));
    }
    redis.run::<()>(&[b"RPUSH", b"plain:list", b"x"]);
    // A scan reads at most `max_keys` marks: 3 of the 6 `meta` hashes.
    let mut source = zero_config_redis_source(&redis.url, "    max_keys: 3\n");
    redis.reset_stats();
    let out = source.poll().await.expect("poll");
    assert_eq!(calls(&redis, "hmget"), 3, "{:?}", redis.commandstats());
    // The three marks not read are counted as dropped keys, beside the
    // plain list the three queues read left no room for.
    assert_eq!(out.stats.dropped_keys, 4, "{:?}", out.stats);
    let mut names: Vec<&str> = out.queues.iter().map(|q| q.name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["q1", "q2", "q3"], "{:?}", out.queues);

    // KEDA: the queues read have their number; the unread marks' queues
    // (and globs that may select them) have none, and the answer says why;
    // a name no unread mark can hold is an empty queue, as before.
    let app = TestApp::start(&config(&redis.url, "max_keys: 3\n")).await;
    let s = app
        .until("three BullMQ queues", WAIT, |s| {
            s.value("queue_exporter_dropped_keys", &[("source", "main")]) == Some(4.0)
                && s.value("queue_depth", &[("queue", "q3"), ("preset", "bullmq")]) == Some(1.0)
        })
        .await;
    assert!(!s.to_string().contains("\"q4\""), "{s}");
    assert!(!s.to_string().contains("plain:list"), "{s}");
    let mut c = client(&app).await;
    assert_eq!(metrics(&mut c, &[("queue", "q1")]).await.unwrap().1, 1.0);
    for q in ["q5", "bull:q4", "q*"] {
        let e = metrics(&mut c, &[("queue", q)]).await.unwrap_err();
        assert_unavailable(&e, &["max_keys 3", "bull:q4:meta"]);
    }
    assert_eq!(metrics(&mut c, &[("queue", "other")]).await.unwrap().1, 0.0);
    let e = metrics(&mut c, &[("queue", "plain:list")])
        .await
        .unwrap_err();
    assert_unavailable(&e, &["max_keys 3"]);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sets_are_read_by_bounded_sscan_and_one_over_the_cap_is_not_read_but_counted() {
    let redis = RedisServer::start();
    // Sidekiq's registry with 8 queues, each with a job: over a cap of 5.
    for q in 1..=8 {
        let name = format!("s{q}");
        redis.run::<()>(&[b"SADD", b"queues", name.as_bytes()]);
        let list = format!("queue:{name}");
        redis.run::<()>(&[b"RPUSH", list.as_bytes(), b"{}"]);
    }
    // RQ's registry, small: read whole by SSCAN.
    redis.run::<()>(&[b"SADD", b"rq:queues", b"rq:queue:high"]);
    redis.run::<()>(&[b"RPUSH", b"rq:queue:high", b"a"]);
    let mut source = zero_config_redis_source(&redis.url, "    max_keys: 5\n");
    redis.reset_stats();
    let out = source.poll().await.expect("poll");
    let stats = redis.commandstats();
    assert_eq!(calls(&redis, "smembers"), 0, "{stats:?}");
    assert!(calls(&redis, "sscan") >= 1, "{stats:?}");
    // No Sidekiq queue: its registry was not read. RQ's was.
    let mut names: Vec<(String, Option<String>)> = out
        .queues
        .iter()
        .map(|q| {
            let preset = q.preset.as_ref().map(|p| format!("{:?}", p.preset));
            (q.name.clone(), preset)
        })
        .collect();
    names.sort();
    assert_eq!(names, [("high".to_string(), Some("Rq".to_string()))]);
    assert_eq!(out.stats.dropped_keys, 1, "{:?}", out.stats);

    let app = TestApp::start(&config(&redis.url, "max_keys: 5\n")).await;
    app.until("RQ's queue read", WAIT, |s| {
        s.value("queue_depth", &[("queue", "high"), ("preset", "rq")]) == Some(1.0)
    })
    .await;
    let mut c = client(&app).await;
    let e = metrics(&mut c, &[("queue", "s1")]).await.unwrap_err();
    assert_unavailable(&e, &["\"queues\"", "8 members"]);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bare_queues_set_with_nothing_else_of_sidekiqs_is_no_sidekiq() {
    let redis = RedisServer::start();
    // The app's own keys: a set named `queues` and zsets named like
    // Sidekiq's global ones, with no `queue:<member>` list, no `processes`.
    redis.run::<()>(&[b"SADD", b"queues", b"alpha", b"beta"]);
    for z in ["schedule", "retry", "dead"] {
        redis.run::<()>(&[b"ZADD", z.as_bytes(), b"1", b"x"]);
    }
    let app = TestApp::start(&config(&redis.url, "")).await;
    let s = app
        .until("the zsets as plain keys", WAIT, |s| {
            ["schedule", "retry", "dead"]
                .iter()
                .all(|z| s.depth(z) == Some(1.0))
        })
        .await;
    assert!(!s.to_string().contains("sidekiq"), "{s}");
    assert!(!s.to_string().contains("\"alpha\""), "{s}");
    app.stop().await;

    // With Sidekiq's `processes` beside it (a running Sidekiq), it is
    // Sidekiq's: its members are queues and the zsets its `(all)`.
    redis.run::<()>(&[b"SADD", b"processes", b"host:1:abc"]);
    let app = TestApp::start(&config(&redis.url, "")).await;
    let s = app
        .until("Sidekiq recognised", WAIT, |s| {
            s.value(
                "queue_depth",
                &[
                    ("queue", "(all)"),
                    ("preset", "sidekiq"),
                    ("state", "retry"),
                ],
            ) == Some(1.0)
        })
        .await;
    assert_eq!(
        s.value(
            "queue_depth",
            &[
                ("queue", "alpha"),
                ("preset", "sidekiq"),
                ("state", "waiting")
            ]
        ),
        Some(0.0),
        "{s}"
    );
    assert_eq!(s.depth("retry"), None, "{s}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn library_rounds_make_the_same_bounded_reads_and_scan_only_when_a_set_comes_under_the_cap() {
    let redis = RedisServer::start();
    for q in 1..=8 {
        let name = format!("s{q}");
        redis.run::<()>(&[b"SADD", b"queues", name.as_bytes()]);
        let list = format!("queue:{name}");
        redis.run::<()>(&[b"RPUSH", list.as_bytes(), b"{}"]);
    }
    for q in 1..=2 {
        bullmq_queue(&redis, &format!("q{q}"));
    }
    // A round every 100 ms, a keyspace scan only the first.
    let extra = "    max_keys: 5\n    discovery_interval: 100ms\n    keyspace_scan_interval: 1h\n";
    let mut source = zero_config_redis_source(&redis.url, extra);
    let first = source.poll().await.expect("poll");
    // One set over the cap (8 members, `max_keys` 5), not read; the two
    // `meta` hashes read.
    assert_eq!(first.stats.dropped_keys, 1, "{:?}", first.stats);
    redis.reset_stats();
    let mut rounds = first.stats.discovery_rounds.expect("rounds");
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        let out = source.poll().await.expect("poll");
        rounds = out.stats.discovery_rounds.expect("rounds");
        // The same picture at each round: nothing read whole, nothing new.
        assert_eq!(out.stats.dropped_keys, 1, "{:?}", out.stats);
        let mut names: Vec<&str> = out.queues.iter().map(|q| q.name.as_str()).collect();
        names.sort_unstable();
        assert_eq!(names, ["q1", "q2"]);
    }
    assert_eq!((rounds.full, rounds.remembered), (1, 0), "{rounds:?}");
    assert!(rounds.libraries >= 3, "{rounds:?}");
    assert_eq!(calls(&redis, "smembers"), 0);
    assert_eq!(calls(&redis, "scan"), 3, "one bullmq pass a round");

    // The set comes under the cap: the next round scans, and reads it.
    for q in 3..=8 {
        let name = format!("s{q}");
        redis.run::<()>(&[b"SREM", b"queues", name.as_bytes()]);
        let list = format!("queue:{name}");
        redis.run::<()>(&[b"DEL", list.as_bytes()]);
    }
    tokio::time::sleep(Duration::from_millis(150)).await;
    let out = source.poll().await.expect("poll");
    let rounds = out.stats.discovery_rounds.expect("rounds");
    assert_eq!(rounds.full + rounds.remembered, 2, "{rounds:?}");
    assert_eq!(out.stats.dropped_keys, 0, "{:?}", out.stats);
    assert!(
        out.queues.iter().any(|q| q.name == "s1"),
        "{:?}",
        out.queues
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preset_entries_registries_and_meta_hashes_have_the_same_bounds() {
    let redis = RedisServer::start();
    // Sidekiq's registry over a configured registry's cap (10 ×
    // `max_keys`), and four BullMQ queues: with `max_keys: 3`, the registry
    // counts one mark, two `meta` hashes more.
    for q in 1..=31 {
        let name = format!("s{q}");
        redis.run::<()>(&[b"SADD", b"queues", name.as_bytes()]);
    }
    for q in 1..=4 {
        bullmq_queue(&redis, &format!("q{q}"));
    }
    let queues = "max_keys: 3\nqueues:\n  - preset: sidekiq\n  - preset: bullmq\n";
    let app = TestApp::start(&config(&redis.url, queues)).await;
    let s = app
        .until("two BullMQ queues", WAIT, |s| {
            s.value("queue_depth", &[("queue", "q2"), ("preset", "bullmq")]) == Some(1.0)
        })
        .await;
    assert_eq!(
        s.value("queue_depth", &[("queue", "q3"), ("preset", "bullmq")]),
        None,
        "{s}"
    );
    // (Sidekiq's poll reads `SRANDMEMBER processes`, bounded; no set is read whole.)
    assert!(calls(&redis, "scard") >= 1, "{:?}", redis.commandstats());
    // The registry's members are unknown, so no name has a number.
    let mut c = client(&app).await;
    for q in ["s1", "q3", "q1"] {
        let e = metrics(&mut c, &[("queue", q)]).await.unwrap_err();
        assert_unavailable(
            &e,
            &[
                "\"queues\" (31 members, over the cap of 30)",
                "\"bull:q3:meta\" (beyond max_keys 3)",
            ],
        );
    }
    app.stop().await;
}
