//! Faults, with real processes: the exporter binary runs as a child process
//! and is watched from outside (`/metrics` every 25 ms, gRPC `GetMetrics`
//! every 50 ms) while its Redis is killed, restarted, frozen, or while
//! other sources hang. Each test reads as the guarantee it checks.
//!
//! The guarantees (issue 14, "Faults"):
//! - the process keeps serving `/metrics` and gRPC through any backend fault;
//! - `queue_exporter_source_up` goes 1 → 0 → 1, once;
//! - a source that is down shows no queue series (never a stale value as if
//!   fresh), and `last_success_timestamp` keeps the time of the last good data;
//! - values are right again within 2 s of Redis returning;
//! - gRPC serves the last good value only while it is younger than
//!   `scaler.max_staleness`, then answers `UNAVAILABLE`, never a made-up 0;
//! - one slow or dead source never delays another source's polls or readers.
mod reliability_support;
mod scaler_common;
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use reliability_support::*;
use scaler_common::{Answer, Observer, Scraped, up_runs, wall};
use support::{RedisServer, SilentServer, poll_until, sample};
use tonic::Code;

const POLL: f64 = 0.2;
const MAX_STALENESS: f64 = 1.0;

fn one_redis_source(url: &str) -> String {
    format!(
        "scaler: {{ max_staleness: 1s }}\nsources:\n  - name: main\n    type: redis\n    url: {url}\n    poll_interval: 200ms\n    timeout: 1s\n    queues:\n      - key: work\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_and_restarted_goes_up_down_up_never_stale_and_right_within_2s() {
    let mut redis = RedisServer::persistent();
    redis.run::<()>(&[b"RPUSH", b"work", b"a", b"b", b"c"]);
    let exp = Exporter::start(&one_redis_source(&redis.url), &[], &[]).await;
    let obs = Observer::start(&exp.base, exp.grpc, "main", "work").await;
    let t0 = Instant::now();
    obs.wait_scrape(t0, Duration::from_secs(15), "depth 3", |s| {
        s.value == Some(3.0) && s.up == Some(1.0)
    })
    .await;
    obs.wait_answer(t0, Duration::from_secs(15), "= 3", |a| a.result == Ok(3.0))
        .await;

    // SIGKILL.
    let killed = Instant::now();
    redis.stop();
    let down = obs
        .wait_scrape(killed, Duration::from_secs(10), "source_up 0", |s| {
            s.up == Some(0.0)
        })
        .await;
    let unavailable = obs
        .wait_answer(killed, Duration::from_secs(10), "UNAVAILABLE", |a| {
            a.result == Err(Code::Unavailable)
        })
        .await;
    // Down a while longer: the exporter keeps retrying and serving.
    tokio::time::sleep(Duration::from_millis(1500)).await;

    // Back, with the data it had (append-only file), plus two new items so
    // that "right" cannot be mistaken for "stale".
    let restarting = Instant::now();
    redis.restart();
    let back = Instant::now();
    redis.run::<()>(&[b"RPUSH", b"work", b"d", b"e"]);
    let recovered = obs
        .wait_scrape(back, Duration::from_secs(10), "depth 5 and up", |s| {
            s.value == Some(5.0) && s.up == Some(1.0)
        })
        .await;
    let grpc_recovered = obs
        .wait_answer(back, Duration::from_secs(10), "= 5", |a| {
            a.result == Ok(5.0)
        })
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let scrapes = obs.scrapes();
    let answers = obs.answers();
    drop(obs);

    let recovery = recovered.at.saturating_duration_since(back);
    let grpc_recovery = grpc_recovered.at.saturating_duration_since(back);
    eprintln!(
        "scrapes {}, answers {}; down seen {:?} after the kill, UNAVAILABLE {:?} after; \
         /metrics right {:?} after Redis returned, GetMetrics right {:?} after",
        scrapes.len(),
        answers.len(),
        down.at - killed,
        unavailable.at - killed,
        recovery,
        grpc_recovery
    );

    // The process kept serving: every scrape answered 200.
    assert!(scrapes.iter().all(|s| s.ok), "a scrape failed");
    assert!(scrapes.len() > 30, "only {} scrapes", scrapes.len());
    // Up, down, up: once.
    let after_first_up: Vec<Scraped> = scrapes
        .iter()
        .skip_while(|s| s.up != Some(1.0))
        .cloned()
        .collect();
    assert_eq!(up_runs(&after_first_up), [1.0, 0.0, 1.0]);
    // Right again within 2 s of Redis returning, on both readers.
    assert!(recovery < Duration::from_secs(2), "{recovery:?}");
    assert!(grpc_recovery < Duration::from_secs(2), "{grpc_recovery:?}");

    let frozen = down.last_success.expect("last success kept while down");
    for s in &scrapes {
        // Never a stale value shown as fresh: a down source has no queue
        // series, and any depth shown is a real one (3 before, 5 after).
        if s.up == Some(0.0) {
            assert_eq!(s.value, None, "depth shown while down: {s:?}");
            assert_eq!(s.last_success, Some(frozen), "last success moved: {s:?}");
        }
        if let Some(d) = s.value {
            assert_eq!(s.up, Some(1.0), "{s:?}");
            assert!(d == 3.0 || d == 5.0, "made-up depth {d}: {s:?}");
        }
        if s.at > down.at && s.at < restarting {
            assert_eq!(s.up, Some(0.0), "up while Redis is dead: {s:?}");
        }
    }
    // A depth shown as up is at most one poll (plus the poll's own time) old.
    let fresh_bound = POLL + 1.5;
    let mut seen_up = 0;
    for s in scrapes.iter().filter(|s| s.up == Some(1.0)) {
        let age = wall() - s.at.elapsed().as_secs_f64() - s.last_success.unwrap();
        assert!(age < fresh_bound, "up with {age:.2}s old data: {s:?}");
        seen_up += 1;
    }
    // Enough up scrapes for the check above to mean something (a loaded
    // machine scrapes less often than every 25 ms).
    assert!(seen_up >= 3, "only {seen_up} scrapes while up");

    // gRPC: only real values (3 or 5), the old one only while younger than
    // max_staleness, UNAVAILABLE otherwise; never another code. A 3 after
    // the restart began is a fresh read: the restarted Redis holds the 3
    // items of its append-only file until the test pushes two more (on a
    // loaded machine a poll lands in between).
    for a in answers.iter().filter(|a| a.at > killed) {
        match a.result {
            Ok(3.0) => assert!(
                a.sent_wall - frozen <= MAX_STALENESS + 0.05 || a.at > restarting,
                "3 served {:.2}s after the last good poll: {a:?}",
                a.sent_wall - frozen
            ),
            Ok(v) => assert_eq!(v, 5.0, "{a:?}"),
            Err(code) => {
                assert_eq!(code, Code::Unavailable, "{a:?}");
                assert!(
                    a.at < grpc_recovered.at,
                    "UNAVAILABLE after recovery: {a:?}"
                );
            }
        }
    }
    // And UNAVAILABLE came once the data was too old, not much later.
    let unavailable_after = unavailable.sent_wall - frozen;
    assert!(
        unavailable_after <= MAX_STALENESS + 1.0,
        "UNAVAILABLE only {unavailable_after:.2}s after the last good poll"
    );
    // Readers never waited on the dead backend.
    let slowest = scrapes.iter().map(|s| s.took).max().unwrap();
    let slowest_rpc = answers.iter().map(|a| a.took).max().unwrap();
    eprintln!("slowest scrape {slowest:?}, slowest GetMetrics {slowest_rpc:?}");
    assert!(slowest < Duration::from_secs(1), "{slowest:?}");
    assert!(slowest_rpc < Duration::from_secs(1), "{slowest_rpc:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_redis_times_out_is_shown_down_and_recovers_within_2s_of_thawing() {
    let redis = RedisServer::start();
    redis.run::<()>(&[b"RPUSH", b"work", b"a", b"b"]);
    let yaml = one_redis_source(&redis.url).replace("timeout: 1s", "timeout: 500ms");
    let exp = Exporter::start(&yaml, &[], &[]).await;
    let obs = Observer::start(&exp.base, exp.grpc, "main", "work").await;
    let t0 = Instant::now();
    obs.wait_scrape(t0, Duration::from_secs(15), "depth 2", |s| {
        s.value == Some(2.0)
    })
    .await;

    // SIGSTOP: connections stay open, nothing answers.
    let frozen_at = Instant::now();
    redis.freeze();
    let down = obs
        .wait_scrape(frozen_at, Duration::from_secs(10), "source_up 0", |s| {
            s.up == Some(0.0)
        })
        .await;
    obs.wait_answer(frozen_at, Duration::from_secs(10), "UNAVAILABLE", |a| {
        a.result == Err(Code::Unavailable)
    })
    .await;
    let body = exp.metrics().await;
    let timeouts = sample(
        &body,
        "queue_exporter_poll_errors_total",
        &[("source", "main"), ("reason", "timeout")],
    )
    .unwrap();
    assert!(timeouts >= 1.0, "{body}");
    tokio::time::sleep(Duration::from_secs(1)).await;

    let thawed = Instant::now();
    redis.thaw();
    redis.run::<()>(&[b"RPUSH", b"work", b"c"]);
    let back = obs
        .wait_scrape(thawed, Duration::from_secs(10), "depth 3", |s| {
            s.value == Some(3.0) && s.up == Some(1.0)
        })
        .await;
    let scrapes = obs.scrapes();
    drop(obs);
    let recovery = back.at.saturating_duration_since(thawed);
    eprintln!(
        "frozen: down seen after {:?} ({timeouts} timeouts); right {recovery:?} after thawing",
        down.at - frozen_at
    );
    assert!(recovery < Duration::from_secs(2), "{recovery:?}");
    assert!(scrapes.iter().all(|s| s.ok));
    for s in scrapes.iter().filter(|s| s.up == Some(0.0)) {
        assert_eq!(s.value, None, "{s:?}");
    }
    // The readers never waited for the frozen server.
    let slowest = scrapes.iter().map(|s| s.took).max().unwrap();
    assert!(slowest < Duration::from_secs(1), "{slowest:?}");
}

/// A raw HTTP server that sends its status line, then one byte every 300 ms
/// forever: a management API that is alive but crawling.
async fn dribbling_http() -> String {
    raw_http_server(Arc::new(|_path, mut sock| {
        Box::pin(async move {
            let head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100000\r\n\r\n";
            if !write_all(&mut sock, head).await {
                return;
            }
            loop {
                tokio::time::sleep(Duration::from_millis(300)).await;
                if !write_all(&mut sock, b" ").await {
                    return;
                }
            }
        })
    }))
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_or_crawling_source_never_delays_another_sources_polls_or_readers() {
    let good = RedisServer::start();
    good.run::<()>(&[b"RPUSH", b"work", b"a", b"b"]);
    let frozen = RedisServer::start();
    frozen.run::<()>(&[b"RPUSH", b"work", b"a"]);
    let silent = SilentServer::start();
    let black_hole = SilentServer::start();
    let crawling = dribbling_http().await;
    // The others time out after 2 s (their polls hang that long, and up to
    // 8 × 2 s for a whole RabbitMQ poll); `good` polls every 100 ms.
    let yaml = format!(
        "sources:
  - name: good
    type: redis
    url: {good}
    poll_interval: 100ms
    queues: [{{ key: work }}]
  - name: frozen-redis
    type: redis
    url: {frozen}
    poll_interval: 100ms
    timeout: 2s
    queues: [{{ key: work }}]
  - name: silent-redis
    type: redis
    url: {silent}
    poll_interval: 100ms
    timeout: 2s
    queues: [{{ key: work }}]
  - name: black-hole-rabbit
    type: rabbitmq
    url: http://guest:guest@127.0.0.1:{hole}
    poll_interval: 100ms
    timeout: 2s
  - name: crawling-rabbit
    type: rabbitmq
    url: {crawling}
    username: guest
    password: guest
    poll_interval: 100ms
    timeout: 2s
",
        good = good.url,
        frozen = frozen.url,
        silent = silent.redis_url(),
        hole = black_hole.port,
    );
    let exp = Exporter::start(&yaml, &[], &[]).await;
    let obs = Observer::start(&exp.base, exp.grpc, "good", "work").await;
    let t0 = Instant::now();
    obs.wait_scrape(t0, Duration::from_secs(15), "good depth 2", |s| {
        s.value == Some(2.0)
    })
    .await;
    // `frozen-redis` has been polled successfully; now it hangs.
    poll_until(Duration::from_secs(10), || async {
        (exp.value("queue_exporter_source_up", &[("source", "frozen-redis")])
            .await
            == Some(1.0))
        .then_some(())
    })
    .await
    .expect("frozen-redis up before freezing");
    frozen.freeze();
    let polls = |body: &str| {
        sample(
            body,
            "queue_exporter_poll_duration_seconds_count",
            &[("source", "good")],
        )
        .unwrap()
    };
    let before = polls(&exp.metrics().await);
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let body = exp.metrics().await;
    let window = start.elapsed();
    let after = polls(&body);
    let scrapes: Vec<Scraped> = obs
        .scrapes()
        .into_iter()
        .filter(|s| s.at >= start)
        .collect();
    let answers: Vec<Answer> = obs
        .answers()
        .into_iter()
        .filter(|a| a.at >= start)
        .collect();
    drop(obs);
    frozen.thaw();

    // Every other source is down for its own reason, counted.
    for (source, reason) in [
        ("frozen-redis", "timeout"),
        ("silent-redis", "timeout"),
        ("black-hole-rabbit", "timeout"),
        ("crawling-rabbit", "timeout"),
    ] {
        let n = sample(
            &body,
            "queue_exporter_poll_errors_total",
            &[("source", source), ("reason", reason)],
        )
        .unwrap_or(0.0);
        assert!(n >= 1.0, "{source}: {n} {reason} errors\n{body}");
        assert_eq!(
            sample(&body, "queue_exporter_source_up", &[("source", source)]),
            Some(0.0),
            "{source}"
        );
    }

    // `good` kept its pace: polls every 100 ms (plus the poll's own time),
    // so at least half the ideal count, and no gap in its last-success
    // timestamps longer than 1 s.
    let ideal = window.as_secs_f64() / 0.1;
    let done = after - before;
    let mut stamps: Vec<f64> = scrapes.iter().filter_map(|s| s.last_success).collect();
    stamps.dedup();
    let max_gap = stamps
        .windows(2)
        .map(|w| w[1] - w[0])
        .fold(0.0_f64, f64::max);
    let slowest = scrapes.iter().map(|s| s.took).max().unwrap();
    let slowest_rpc = answers.iter().map(|a| a.took).max().unwrap();
    eprintln!(
        "good: {done} polls in {window:?} (ideal {ideal:.0}), largest gap between successes \
         {max_gap:.3}s; {} scrapes (slowest {slowest:?}), {} GetMetrics (slowest {slowest_rpc:?})",
        scrapes.len(),
        answers.len()
    );
    assert!(done >= ideal / 2.0, "{done} polls, ideal {ideal:.0}");
    assert!(max_gap < 1.0, "gap of {max_gap:.3}s between good polls");
    // Its readers were never held up either, and always got the real value.
    assert!(
        scrapes
            .iter()
            .all(|s| s.ok && s.up == Some(1.0) && s.value == Some(2.0))
    );
    assert!(slowest < Duration::from_secs(1), "{slowest:?}");
    assert!(!answers.is_empty());
    assert!(
        answers.iter().all(|a| a.result == Ok(2.0)),
        "{:?}",
        answers.iter().find(|a| a.result != Ok(2.0))
    );
    assert!(slowest_rpc < Duration::from_secs(1), "{slowest_rpc:?}");
}
