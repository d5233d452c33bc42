//! KEDA gets a number only for names the last poll vouched for (issue 36,
//! cases 1 and 2): a key beyond `max_keys`, a key held back because Redis
//! refused reading a library's mark, a queue an unread registry may name,
//! a preset queue beyond `max_keys` is unknown, so a name or glob that may
//! select it is `UNAVAILABLE` naming why, never a 0 or a partial sum.
//! Names the gaps cannot reach still get their numbers. Each test runs a
//! private `redis-server`, the exporter in process and the real gRPC client.
mod scaler_common;
mod support;

use std::time::Duration;

use scaler_common::*;
use support::*;
use tonic::Code;

const WAIT: Duration = Duration::from_secs(20);

/// Source `main` over `url`, polling every 100 ms, with `rest` (flush left)
/// appended to its entry.
fn config(url: &str, rest: &str) -> String {
    format!(
        "listen: {{ grpc: 127.0.0.1:0 }}\nsources:\n  - name: main\n    type: redis\n    url: {url}\n    poll_interval: 100ms\n    discovery_interval: 200ms\n{}",
        indent(rest, 4)
    )
}

/// Asserts `answer` is `UNAVAILABLE` with every one of `words` in its message.
fn assert_unavailable(answer: Result<(i64, f64), tonic::Status>, words: &[&str]) {
    let e = answer.expect_err("a number where the exporter cannot know it");
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    for w in words {
        assert!(e.message().contains(w), "{w:?} not in {:?}", e.message());
    }
}

/// Fills list `key` with `n` items.
fn list(c: &mut redis::Connection, key: &str, n: usize) {
    for i in 0..n {
        rcmd(c, &["RPUSH", key, &i.to_string()]);
    }
}

/// `job:1`..`job:12` holding 1..12 items (78 in all), and `alpha:a`,
/// `alpha:b` (2 + 3), which sort before every `job:` key and so stay
/// within any `max_keys` of 2 or more.
fn jobs_and_alpha(redis: &RedisServer) {
    let mut c = redis.conn();
    for i in 1..=12 {
        list(&mut c, &format!("job:{i}"), i);
    }
    list(&mut c, "alpha:a", 2);
    list(&mut c, "alpha:b", 3);
}

/// Checks the answers of a source tracking `alpha:a`, `alpha:b` and the
/// first three `job:` keys in key order (`job:1`, `job:10`, `job:11`).
async fn check_max_keys_answers(app: &TestApp) {
    app.until("the first poll", WAIT, |s| s.source_up("main") == Some(1.0))
        .await;
    let mut c = client(app).await;
    // A key beyond max_keys is not an empty queue.
    assert_unavailable(
        metrics(&mut c, &[("queue", "job:9")]).await,
        &["\"job:9\"", "beyond max_keys 5", "not read"],
    );
    // Nor is a glob over them a partial sum (truth 78), in any mode.
    for mode in ["QueueLength", "Age"] {
        assert_unavailable(
            metrics(&mut c, &[("queue", "job:*"), ("mode", mode)]).await,
            &["\"job:*\"", "max_keys"],
        );
    }
    let e = active(&mut c, &[("queue", "job:*")]).await.unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    assert_unavailable(
        metrics(
            &mut c,
            &[
                ("queue", "job:*"),
                ("mode", "WaitTime"),
                ("targetWait", "10s"),
                ("processingTime", "1s"),
            ],
        )
        .await,
        &["max_keys"],
    );
    // What was read still answers: a tracked key, and a glob no untracked
    // key can match.
    assert_eq!(
        metrics(&mut c, &[("queue", "job:11")]).await.unwrap().1,
        11.0
    );
    assert_eq!(
        metrics(&mut c, &[("queue", "alpha:*")]).await.unwrap().1,
        5.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_beyond_max_keys_are_unavailable_and_the_rest_still_answer() {
    let redis = RedisServer::start();
    jobs_and_alpha(&redis);
    let app = TestApp::start(&config(
        &redis.url,
        "max_keys: 5\nqueues:\n  - pattern: \"alpha:*\"\n  - pattern: \"job:*\"\n",
    ))
    .await;
    check_max_keys_answers(&app).await;
    let s = app.scrape().await;
    assert_eq!(
        s.value("queue_exporter_dropped_keys", &[("source", "main")]),
        Some(9.0),
        "{s}"
    );
    assert_eq!(gaps(&s), [("max_keys", 1.0)], "{s}");
    app.stop().await;
}

/// The causes `queue_exporter_coverage_gaps` shows above 0 for `main`;
/// every cause must be shown, at 0 when it left nothing unread.
fn gaps(s: &support::Scrape) -> Vec<(&'static str, f64)> {
    let causes = [
        "max_keys",
        "label_collision",
        "refused",
        "check_failed",
        "discovery_bounds",
        "round_unfinished",
    ];
    causes
        .into_iter()
        .map(|cause| {
            let labels = [("source", "main"), ("cause", cause)];
            let n = s.value("queue_exporter_coverage_gaps", &labels);
            (
                cause,
                n.unwrap_or_else(|| panic!("no {cause} series:\n{s}")),
            )
        })
        .filter(|(_, n)| *n > 0.0)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_config_beyond_max_keys_is_unavailable_too() {
    let redis = RedisServer::start();
    jobs_and_alpha(&redis);
    let app = TestApp::start(&config(&redis.url, "max_keys: 5\n")).await;
    check_max_keys_answers(&app).await;
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_held_back_for_an_unread_kombu_binding_are_unavailable_never_zero() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    rcmd(
        &mut c,
        &[
            "SADD",
            "_kombu.binding.celery",
            "celery\x06\x16\x06\x16celery",
        ],
    );
    list(&mut c, "celery", 2);
    list(&mut c, "plain:list", 3);
    list(&mut c, "app:a", 16);
    rcmd(&mut c, &["ZADD", "app:z", "1", "a", "2", "b"]);
    let url = redis.acl_user(
        "qe",
        "pw",
        &[READ_ONLY_ACL, &["-smembers", "-scard", "-sscan"]].concat(),
    );
    let app = TestApp::start(&config(&url, "")).await;
    app.until("the zset read", WAIT, |s| {
        s.value("queue_depth", &[("queue", "app:z")]).is_some()
    })
    .await;
    let mut c = client(&app).await;
    for queue in ["celery", "plain:list", "app:*", "app:a"] {
        assert_unavailable(
            metrics(&mut c, &[("queue", queue)]).await,
            &["held back", "mark"],
        );
        assert_unavailable(
            metrics(
                &mut c,
                &[
                    ("queue", queue),
                    ("mode", "WaitTime"),
                    ("targetWait", "10s"),
                    ("processingTime", "1s"),
                ],
            )
            .await,
            &["held back"],
        );
    }
    // No list is withheld under a prefix no list has: a zset answers.
    assert_eq!(metrics(&mut c, &[("queue", "app:z")]).await.unwrap().1, 2.0);
    assert_eq!(gaps(&app.scrape().await), [("refused", 1.0)]);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queues_an_unread_registry_may_name_are_unavailable() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    rcmd(&mut c, &["SADD", "rq:queues", "rq:queue:high"]);
    list(&mut c, "rq:queue:high", 2);
    list(&mut c, "plain:list", 1);
    let url = redis.acl_user(
        "qe",
        "pw",
        &[READ_ONLY_ACL, &["-smembers", "-scard", "-sscan"]].concat(),
    );
    // Zero config recognises RQ by its keys but cannot read its registry;
    // a configured preset cannot either, and both keep the source up
    // (before, the configured one failed every poll).
    for rest in ["", "queues:\n  - preset: rq\n  - key: plain:list\n"] {
        let app = TestApp::start(&config(&url, rest)).await;
        app.until("the source up, the refusal counted", WAIT, |s| {
            s.source_up("main") == Some(1.0) && s.errors("main", "auth").is_some_and(|n| n >= 1.0)
        })
        .await;
        let mut c = client(&app).await;
        // `high`, which a key under `rq:` names, may be one of RQ's queues;
        // so may any glob selecting it.
        for queue in ["high", "*", "h*"] {
            assert_unavailable(
                metrics(&mut c, &[("queue", queue)]).await,
                &["Redis refused reading"],
            );
        }
        assert_unavailable(
            metrics(&mut c, &[("queue", "high")]).await,
            &["\"rq:queues\"", "registry"],
        );
        // A queue of RQ's with a job keeps it under `rq:`: a name no key
        // there has holds none of RQ's jobs, so what was read answers.
        assert_eq!(
            metrics(&mut c, &[("queue", "plain:list")]).await.unwrap().1,
            1.0
        );
        assert_eq!(metrics(&mut c, &[("queue", "p*")]).await.unwrap().1, 1.0);
        // A name no key under `rq:` has holds none of RQ's jobs: RQ (zero
        // config's or the entry's) covers every name, and no gap hides it.
        for trigger in [
            vec![("queue", "low")],
            vec![("queue", "low"), ("preset", "rq")],
        ] {
            assert_eq!(metrics(&mut c, &trigger).await.unwrap().1, 0.0, "{rest:?}");
        }
        app.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preset_queues_beyond_max_keys_are_unavailable() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    for (name, n) in [("a", 1), ("b", 2), ("c", 3)] {
        let key = format!("rq:queue:{name}");
        rcmd(&mut c, &["SADD", "rq:queues", &key]);
        list(&mut c, &key, n);
    }
    list(&mut c, "plain:a", 1);
    list(&mut c, "plain:b", 1);
    // Two keys first, then room for two of RQ's three queues (its registry,
    // of 3 members, is within max_keys and read).
    let app = TestApp::start(&config(
        &redis.url,
        "max_keys: 4\nqueues:\n  - key: plain:a\n  - key: plain:b\n  - preset: rq\n",
    ))
    .await;
    app.until("two RQ queues read", WAIT, |s| {
        s.value("queue_depth", &[("queue", "b"), ("state", "waiting")])
            .is_some()
    })
    .await;
    let mut c = client(&app).await;
    assert_eq!(metrics(&mut c, &[("queue", "a")]).await.unwrap().1, 1.0);
    assert_unavailable(
        metrics(&mut c, &[("queue", "c")]).await,
        &["preset queues beyond max_keys 4", "\"c\""],
    );
    assert_unavailable(metrics(&mut c, &[("queue", "*")]).await, &["max_keys"]);
    app.stop().await;
}

/// docs/metrics.md's `refused` cause: it counts refused reads that leave
/// names unknown (a library's registry or mark), not a queue's own key the
/// ACL refuses, whose values are absent and whose refusal is counted by
/// `queue_exporter_poll_errors_total{reason="auth"}` (issue 45). The page
/// says so, and a refused key shows so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_queue_key_is_an_auth_poll_error_not_a_refused_gap() {
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/metrics.md"))
        .expect("docs/metrics.md");
    let row = page
        .lines()
        .find(|l| l.starts_with("| `queue_exporter_coverage_gaps"))
        .expect("the coverage_gaps row of docs/metrics.md");
    let refused = row
        .split("`refused` (")
        .nth(1)
        .and_then(|r| r.split("), `check_failed`").next())
        .expect("the refused cause in the coverage_gaps row");
    assert!(
        refused.contains("mark")
            && refused.contains(r#"queue_exporter_poll_errors_total{reason="auth"}"#),
        "the refused cause says a refused queue key is an auth poll error: {refused}"
    );

    let redis = RedisServer::start();
    let mut c = redis.conn();
    list(&mut c, "work", 3);
    list(&mut c, "open:list", 2);
    let url = redis.acl_user("qe", "pw", &["-@all", "+@read", "+@connection", "~open:*"]);
    let app = TestApp::start(&config(
        &url,
        "queues: [{ key: work }, { key: \"open:list\" }]\n",
    ))
    .await;
    let s = app
        .until("the readable key and an auth error", WAIT, |s| {
            s.value("queue_depth", &[("queue", "open:list")]) == Some(2.0)
                && s.value(
                    "queue_exporter_poll_errors_total",
                    &[("source", "main"), ("reason", "auth")],
                )
                .is_some_and(|n| n > 0.0)
        })
        .await;
    assert_eq!(s.value("queue_depth", &[("queue", "work")]), None, "{s}");
    let gaps = gaps(&s);
    assert!(
        gaps.is_empty(),
        "a refused queue key is no coverage gap: {gaps:?}\n{s}"
    );
    let mut g = client(&app).await;
    assert!(metrics(&mut g, &[("queue", "work")]).await.is_err());
    app.stop().await;
}
