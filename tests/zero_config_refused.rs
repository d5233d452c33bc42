//! A library's mark that Redis will not let the exporter read (an ACL that
//! allows `SCAN` and the queue keys but refuses `HMGET` of a BullMQ `meta`
//! hash or `SCARD`/`SSCAN` of a registry or kombu binding table) tells nothing
//! about whose keys those beside it are. Those keys are then reported
//! neither as the library's queues nor as plain keys, the refusal is
//! counted (`reason="auth"`), the source stays up, and the rest is
//! reported as usual. Before, a refused read read as "no mark": the
//! library's lists showed up as plain queues (zero config), or Bull's entry
//! took a BullMQ queue (presets).
mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use support::*;

const WAIT: Duration = Duration::from_secs(20);

/// Source `main` over `url` with `queues` (none: zero config), polling
/// every 100 ms and rediscovering every 200 ms.
fn config(url: &str, queues: &str) -> String {
    format!(
        "listen: {{ grpc: 127.0.0.1:0 }}\nsources:\n  - name: main\n    type: redis\n    url: {url}\n    poll_interval: 100ms\n    discovery_interval: 200ms\n{}",
        indent(queues, 4)
    )
}

/// A BullMQ queue `<prefix>:<name>` as BullMQ lays it out: the `meta`
/// hash with the marks its `Queue` constructor writes, `waiting` jobs in
/// `wait`, one `delayed`, the `events` stream and the `id` counter.
fn bullmq_queue(conn: &mut redis::Connection, prefix: &str, name: &str, waiting: usize) {
    let k = |part: &str| format!("{prefix}:{name}:{part}");
    rcmd(
        conn,
        &[
            "HSET",
            &k("meta"),
            "version",
            "bullmq:5.34.0",
            "opts.maxLenEvents",
            "10000",
        ],
    );
    for id in 1..=waiting {
        rcmd(conn, &["LPUSH", &k("wait"), &id.to_string()]);
        let now_ms = (std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis())
        .to_string();
        rcmd(conn, &["HSET", &k(&id.to_string()), "timestamp", &now_ms]);
    }
    rcmd(conn, &["ZADD", &k("delayed"), "4096", "99"]);
    rcmd(conn, &["XADD", &k("events"), "*", "event", "added"]);
    rcmd(conn, &["SET", &k("id"), &waiting.to_string()]);
}

/// Every `queue` label of `queue_depth`, with its `preset` label ("" for a
/// plain key).
fn queues(s: &Scrape) -> BTreeSet<(String, String)> {
    s.samples("queue_depth", &[])
        .map(|x| {
            let label = |n: &str| x.labels.get(n).unwrap_or_default().to_string();
            (label("preset"), label("queue"))
        })
        .collect()
}

fn set(items: &[(&str, &str)]) -> BTreeSet<(String, String)> {
    items
        .iter()
        .map(|(p, q)| (p.to_string(), q.to_string()))
        .collect()
}

/// Waits until the scrape shows `want` (preset, queue) pairs exactly and at
/// least one refusal counted; checks the source stays up.
async fn settled(app: &TestApp, want: &BTreeSet<(String, String)>) -> Scrape {
    let s = app
        .until(
            "the readable queues reported and the refusal counted",
            WAIT,
            |s| queues(s) == *want && s.errors("main", "auth").is_some_and(|n| n >= 1.0),
        )
        .await;
    assert_eq!(s.source_up("main"), Some(1.0), "{s}");
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_meta_hash_redis_refuses_leaves_its_queue_out_and_its_lists_are_never_plain() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    bullmq_queue(&mut c, "bull", "email", 2);
    bullmq_queue(&mut c, "secret", "jobs", 3);
    rcmd(&mut c, &["RPUSH", "plain:list", "x"]);
    // HMGET only under `bull:`: `secret:jobs:meta` is refused, its lists
    // and the rest stay readable.
    let url = redis.acl_user(
        "qe",
        "pw",
        &[READ_ONLY_ACL, &["-hmget", "(+hmget ~bull:*)"]].concat(),
    );
    let app = TestApp::start(&config(&url, "")).await;
    let s = settled(&app, &set(&[("bullmq", "email"), ("", "plain:list")])).await;
    assert_eq!(
        s.value(
            "queue_depth",
            &[("source", "main"), ("preset", "bullmq"), ("queue", "email")]
        ),
        Some(2.0),
        "{s}"
    );
    assert!(!s.to_string().contains("secret:"), "{s}");
    // Later rounds count the refusal again and still show nothing of it.
    let before = s.errors("main", "auth").unwrap_or_default();
    let later = app
        .until("two more refusals counted", WAIT, |x| {
            x.errors("main", "auth").is_some_and(|n| n >= before + 2.0)
        })
        .await;
    assert_eq!(
        queues(&later),
        set(&[("bullmq", "email"), ("", "plain:list")])
    );
    app.stop().await;

    // `discover` prints no key of it, and says what it left out.
    let (ok, yaml, err) = run_exporter(&["discover", "--url", &url]);
    assert!(ok, "{err}");
    assert!(!yaml.contains("secret"), "{yaml}");
    assert!(
        yaml.contains(
            "# recognised 1 BullMQ queue; 1 plain list; 3 keys left out: \
             Redis refused reading 1 library mark"
        ),
        "{yaml}"
    );

    // With `plain_keys: false` too: the readable queue alone.
    let app = TestApp::start(&config(&url, "plain_keys: false")).await;
    settled(&app, &set(&[("bullmq", "email")])).await;
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_redis_refuses_leaves_that_librarys_keys_out() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    rcmd(&mut c, &["SADD", "queues", "default"]);
    rcmd(&mut c, &["RPUSH", "queue:default", "{}"]);
    rcmd(&mut c, &["SADD", "rq:queues", "rq:queue:high"]);
    rcmd(&mut c, &["RPUSH", "rq:queue:high", "a", "b"]);
    rcmd(&mut c, &["HSET", "rq:job:a", "status", "queued"]);
    rcmd(&mut c, &["RPUSH", "plain:list", "x"]);
    // Set reads of Sidekiq's keys only: `rq:queues` is refused.
    let url = redis.acl_user(
        "qe",
        "pw",
        &[
            READ_ONLY_ACL,
            &["-scard", "-sscan", "(+scard +sscan ~queues ~processes)"],
        ]
        .concat(),
    );
    let app = TestApp::start(&config(&url, "")).await;
    let s = settled(
        &app,
        &set(&[
            ("sidekiq", "default"),
            ("sidekiq", "(all)"),
            ("", "plain:list"),
        ]),
    )
    .await;
    assert!(!s.to_string().contains("rq:queue:high"), "{s}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kombu_binding_redis_refuses_leaves_every_list_out_since_any_may_be_celerys() {
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
    rcmd(&mut c, &["RPUSH", "celery", "m1", "m2"]);
    rcmd(&mut c, &["RPUSH", "plain:list", "x"]);
    rcmd(&mut c, &["ZADD", "plain:zset", "1", "a"]);
    let url = redis.acl_user("qe", "pw", &[READ_ONLY_ACL, &["-scard", "-sscan"]].concat());
    let app = TestApp::start(&config(&url, "")).await;
    // `celery` may be a Celery queue (whose depth is more than its list's
    // length when it has priorities), and so may `plain:list`: neither is
    // reported as a plain list. The zset is no kombu queue.
    settled(&app, &set(&[("", "plain:zset")])).await;
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presets_bullmq_and_bull_at_one_prefix_take_no_queue_whose_meta_is_refused() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    bullmq_queue(&mut c, "bull", "jobs", 2);
    // An old Bull queue: no `meta` hash, an `id` counter.
    rcmd(&mut c, &["LPUSH", "bull:old:wait", "1"]);
    rcmd(&mut c, &["SET", "bull:old:id", "1"]);
    // HMGET only under `bull:old:`: `bull:jobs:meta` is refused.
    let url = redis.acl_user(
        "qe",
        "pw",
        &[READ_ONLY_ACL, &["-hmget", "(+hmget ~bull:old:*)"]].concat(),
    );
    let presets = "queues:\n  - preset: bullmq\n  - preset: bull\n";
    let app = TestApp::start(&config(&url, presets)).await;
    // Bull's entry takes `old`; neither takes `jobs`, which is BullMQ's or
    // Bull's as its `meta` says.
    let s = settled(&app, &set(&[("bull", "old")])).await;
    assert_eq!(
        s.value(
            "queue_depth",
            &[("source", "main"), ("preset", "bull"), ("queue", "old")]
        ),
        Some(1.0),
        "{s}"
    );
    app.stop().await;
}
