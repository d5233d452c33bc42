//! Zero config end to end: one private Redis holds the real RQ, Sidekiq,
//! Celery (with priorities) and BullMQ (default prefix with a paused queue,
//! and the custom prefix `myapp:eu`) libraries' keys, written by the fixture
//! scripts under `tests/fixtures/presets/`, asynq's layout built key by key
//! as its source defines it (hibiken/asynq v0.26.0 `internal/base/base.go`:
//! `AllQueues` = `asynq:queues`, `QueueKeyPrefix` = `asynq:{<qname>}:`,
//! `PendingKey`, `ScheduledKey`, `TaskKey` = `<prefix>t:<id>`, `AllServers`
//! = `asynq:servers`; its Go client does not run on these machines), plain
//! lists, zsets and streams, and lookalikes. A source with no `queues:`
//! must report every library queue exactly as its `- preset:` entry does,
//! every other list/zset/stream as a plain key, and nothing twice.
mod scaler_common;
mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use scaler_common::*;
use support::*;

/// One Redis source `main` over `url` with no `queues:` (zero config),
/// polling every 100 ms and rediscovering every 200 ms, plus `extra` source
/// fields (flush left).
fn config(url: &str, extra: &str) -> String {
    format!(
        "listen: {{ grpc: 127.0.0.1:0 }}\nsources:\n  - name: main\n    type: redis\n    url: {url}\n    poll_interval: 100ms\n    discovery_interval: 200ms\n{}",
        indent(extra, 4)
    )
}

/// Every plain key's `queue_depth` (no `preset` label), by queue.
fn plain_depths(s: &Scrape) -> BTreeMap<String, f64> {
    s.samples("queue_depth", &[])
        .filter(|x| x.labels.get("preset").is_none())
        .map(|x| {
            let v = match x.value {
                prometheus_parse::Value::Gauge(v) | prometheus_parse::Value::Untyped(v) => v,
                _ => f64::NAN,
            };
            (x.labels.get("queue").unwrap_or_default().to_string(), v)
        })
        .collect()
}

/// Runs every library fixture against `url` (each fails the test when its
/// library is missing, see `support::libraries`). `false`: one was skipped.
fn write_libraries(url: &str) -> bool {
    let runs = [
        Library::Rq.run("rq_fixture.py", &[url]),
        Library::Sidekiq.run("sidekiq_fixture.rb", &[url]),
        Library::Celery.run("celery_fixture.py", &[url]),
        Library::Bullmq.run("node/bullmq_fixture.js", &[url]),
        Library::Bullmq.run("node/bullmq_prefix_fixture.js", &[url]),
        // Old Bull beside BullMQ: its queues at prefix `old` (and
        // `legacy:app`), named like BullMQ's.
        Library::Bull.run("node/bull_fixture.js", &[url, "old"]),
        // Resque (node-resque) at its `resque` namespace: its `queues`
        // set and `queue:<q>` lists are a Sidekiq 6 namespace's names.
        Library::Resque.run("node/resque_fixture.js", &[url]),
    ];
    runs.iter().all(Option::is_some)
}

/// asynq's layout for queue `critical`: 2 pending tasks, 1 scheduled in
/// 10 minutes, and a server registered in `asynq:servers`.
fn write_asynq(conn: &mut redis::Connection) {
    let t = wall();
    rcmd(conn, &["SADD", "asynq:queues", "critical"]);
    for (id, age) in [("t1", 20.0), ("t2", 10.0)] {
        rcmd(conn, &["LPUSH", "asynq:{critical}:pending", id]);
        let ns = format!("{}", ((t - age) * 1e9) as u128);
        let task = format!("asynq:{{critical}}:t:{id}");
        rcmd(
            conn,
            &["HSET", &task, "state", "pending", "pending_since", &ns],
        );
    }
    let later = format!("{}", (t + 600.0) as u64);
    rcmd(conn, &["ZADD", "asynq:{critical}:scheduled", &later, "s1"]);
    rcmd(conn, &["ZADD", "asynq:servers", &later, "host:1:abc"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_libraries_plain_keys_and_lookalikes_in_one_redis() {
    let redis = RedisServer::start();
    if !write_libraries(&redis.url) {
        return;
    }
    let mut conn = redis.conn();
    write_asynq(&mut conn);
    let t = format!("{}", wall());
    // Plain keys of every queue type.
    rcmd(&mut conn, &["RPUSH", "jobs:pending:high", "a", "b"]);
    rcmd(&mut conn, &["RPUSH", "jobs:pending:low", "c"]);
    rcmd(
        &mut conn,
        &["ZADD", "plain:zset", &t, "x", &t, "y", &t, "z"],
    );
    rcmd(&mut conn, &["XADD", "plain:events", "*", "f", "1"]);
    rcmd(&mut conn, &["XADD", "plain:events", "*", "f", "2"]);
    // Lookalikes: a `meta` hash without BullMQ's marks; a list where kombu
    // keeps a binding set; a `<ns>:queues` set whose `<ns>:queue:x` is a
    // zset, not Sidekiq's list; a Sidekiq-looking list no registry names.
    rcmd(&mut conn, &["HSET", "other:thing:meta", "version", "1.0"]);
    rcmd(&mut conn, &["RPUSH", "other:thing:wait", "w"]);
    rcmd(&mut conn, &["RPUSH", "_kombu.binding.fake", "f"]);
    rcmd(&mut conn, &["SADD", "nope:queues", "x"]);
    rcmd(&mut conn, &["ZADD", "nope:queue:x", "1", "a"]);
    rcmd(&mut conn, &["RPUSH", "queue:ghost", "g"]);

    let app = TestApp::start(&config(&redis.url, "")).await;
    let s = app
        .scrape_until("every library's queues", Duration::from_secs(20), |s| {
            depth(s, "stall", "bullmq", "active").is_some()
                && depth(s, "reports", "bullmq", "waiting").is_some()
                && depth(s, "stall", "bull", "active").is_some()
                && depth(s, "reports", "bull", "waiting").is_some()
                && depth(s, "slowq", "rq", "active").is_some()
                && depth(s, "critical", "asynq", "waiting").is_some()
                && depth(s, "emails", "celery", "waiting").is_some()
                && depth(s, "(all)", "sidekiq", "retry").is_some()
                && depth(s, "(all)", "resque", "active").is_some()
        })
        .await;
    // Each library's queues, with the states its preset reports.
    let want = [
        ("default", "rq", "waiting", 3.0),
        ("default", "rq", "delayed", 1.0),
        ("low", "rq", "waiting", 2.0),
        ("failing", "rq", "failed", 1.0),
        ("slowq", "rq", "active", 1.0),
        ("critical", "sidekiq", "waiting", 2.0),
        ("default", "sidekiq", "waiting", 3.0),
        ("(all)", "sidekiq", "delayed", 2.0),
        ("(all)", "sidekiq", "retry", 2.0),
        // None and 0..9 over `celery` and its three priority lists.
        ("celery", "celery", "waiting", 11.0),
        ("emails", "celery", "waiting", 2.0),
        ("(all)", "celery", "active", 0.0),
        ("mail", "bullmq", "waiting", 5.0),
        ("mail", "bullmq", "delayed", 2.0),
        ("held", "bullmq", "waiting", 2.0),
        ("flow", "bullmq", "waiting", 1.0),
        ("flow", "bullmq", "delayed", 1.0),
        ("stall", "bullmq", "active", 1.0),
        // 2 waiting + 1 prioritized, under the prefix `myapp:eu`.
        ("reports", "bullmq", "waiting", 3.0),
        ("critical", "asynq", "waiting", 2.0),
        ("critical", "asynq", "delayed", 1.0),
        // Bull: a prioritised job counted once (it is in `wait` and
        // `priority`); a paused queue's jobs in `paused` still waiting.
        ("mail", "bull", "waiting", 4.0),
        ("mail", "bull", "delayed", 2.0),
        ("held", "bull", "waiting", 2.0),
        ("done", "bull", "completed", 1.0),
        ("done", "bull", "failed", 1.0),
        ("stall", "bull", "active", 1.0),
        ("reports", "bull", "waiting", 1.0),
        // Resque, not a Sidekiq namespace `resque`.
        ("default", "resque", "waiting", 3.0),
        ("critical", "resque", "waiting", 2.0),
        ("(all)", "resque", "delayed", 3.0),
        ("(all)", "resque", "failed", 1.0),
        ("(all)", "resque", "active", 1.0),
    ];
    for (queue, preset, state, n) in want {
        let labels = [("queue", queue), ("preset", preset), ("state", state)];
        assert_eq!(
            s.samples("queue_depth", &labels).count(),
            1,
            "{queue} {preset} {state}\n{s}"
        );
        assert_eq!(
            depth(&s, queue, preset, state),
            Some(n),
            "{queue} {preset} {state}"
        );
    }
    let paused = |q: &str| s.value("queue_paused", &[("queue", q), ("preset", "bullmq")]);
    assert_eq!(paused("held"), Some(1.0));
    assert_eq!(paused("mail"), Some(0.0));
    let paused = |q: &str| s.value("queue_paused", &[("queue", q), ("preset", "bull")]);
    assert_eq!(paused("held"), Some(1.0));
    assert_eq!(paused("mail"), Some(0.0));
    assert_eq!(
        s.value(
            "queue_stalled_jobs",
            &[("queue", "stall"), ("preset", "bull")]
        ),
        Some(1.0)
    );
    // Resque's `default` is no Sidekiq namespace's (it would be qualified).
    assert_eq!(
        s.samples(
            "queue_depth",
            &[("preset", "sidekiq"), ("queue", "resque:default")]
        )
        .count(),
        0
    );
    // BullMQ's queues (they have an `id` counter too) are not also Bull's.
    assert_eq!(depth(&s, "flow", "bull", "waiting"), None);
    assert_eq!(
        s.value(
            "queue_stalled_jobs",
            &[("queue", "stall"), ("preset", "bullmq")]
        ),
        Some(1.0)
    );
    // Everything else, and nothing a library owns (its events streams,
    // markers, priority lists, registries, result streams...), is plain.
    let plain = plain_depths(&s);
    let expected: BTreeMap<String, f64> = [
        ("_kombu.binding.fake", 1.0),
        ("jobs:pending:high", 2.0),
        ("jobs:pending:low", 1.0),
        ("nope:queue:x", 1.0),
        ("other:thing:wait", 1.0),
        ("plain:events", 2.0),
        ("plain:zset", 3.0),
        ("queue:ghost", 1.0),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    assert_eq!(plain, expected, "{s}");
    assert!(s.has_type("plain:events", "stream"), "{s}");
    assert!(s.has_type("nope:queue:x", "zset"), "{s}");

    // KEDA hears each as its preset entry's queue.
    let mut c = client(&app).await;
    let q = [("queue", "mail"), ("preset", "bullmq")];
    assert_eq!(metrics(&mut c, &q).await.unwrap().1, 5.0);
    let q = [
        ("queue", "default"),
        ("preset", "rq"),
        ("state", "waiting,delayed"),
    ];
    assert_eq!(metrics(&mut c, &q).await.unwrap().1, 4.0);
    let q = [("queue", "reports"), ("preset", "bullmq")];
    assert_eq!(metrics(&mut c, &q).await.unwrap().1, 3.0);
    let q = [("queue", "mail"), ("preset", "bull")];
    assert_eq!(metrics(&mut c, &q).await.unwrap().1, 4.0);
    // RQ and Sidekiq both have `default`: the trigger must pick one.
    let e = metrics(&mut c, &[("queue", "default")]).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(e.message().starts_with("scalerMetadata.preset: "), "{e:?}");
    let e = metrics(&mut c, &[("queue", "mail"), ("preset", "bullmq2")])
        .await
        .unwrap_err();
    assert!(e.message().starts_with("scalerMetadata.preset: "), "{e:?}");
    assert_eq!(
        metrics(&mut c, &[("queue", "queue:ghost")])
            .await
            .unwrap()
            .1,
        1.0
    );
    // Only read: BullMQ's overdue job is still in `delayed`.
    let delayed: u64 = redis::cmd("ZCARD")
        .arg("bull:mail:delayed")
        .query(&mut conn)
        .unwrap();
    assert_eq!(delayed, 2);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_library_queue_appears_and_disappears_between_rounds() {
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    rcmd(&mut conn, &["RPUSH", "tasks", "a"]);
    let app = TestApp::start(&config(&redis.url, "")).await;
    app.scrape_until("the plain list", Duration::from_secs(10), |s| {
        s.depth("tasks") == Some(1.0)
    })
    .await;
    let bullmq =
        |how: &str| Library::Bullmq.run("node/bullmq_prefix_fixture.js", &[&redis.url, how]);
    if bullmq("add").is_none() {
        return;
    }
    let s = app
        .scrape_until("the new BullMQ queue", Duration::from_secs(30), |s| {
            depth(s, "reports", "bullmq", "waiting") == Some(3.0)
        })
        .await;
    // Its keys are the queue's, not plain ones.
    let plain = plain_depths(&s);
    assert_eq!(plain.keys().collect::<Vec<_>>(), ["tasks"], "{s}");
    if bullmq("obliterate").is_none() {
        return;
    }
    let s = app
        .scrape_until("the queue gone", Duration::from_secs(30), |s| {
            !s.has("queue_depth", &[("queue", "reports")])
        })
        .await;
    assert_eq!(s.depth("tasks"), Some(1.0), "{s}");
    assert_eq!(plain_depths(&s).len(), 1, "{s}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn library_queues_come_first_in_max_keys_and_a_queue_named_all_is_its_own() {
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    // Sidekiq's layout: a queue literally named `(all)`, beside `a`.
    rcmd(&mut conn, &["SADD", "queues", "(all)", "a"]);
    rcmd(&mut conn, &["RPUSH", "queue:(all)", "j1", "j2"]);
    rcmd(&mut conn, &["RPUSH", "queue:a", "j3"]);
    rcmd(&mut conn, &["ZADD", "retry", "1", "r1"]);
    for i in 1..=5 {
        rcmd(&mut conn, &["RPUSH", &format!("p{i}"), "x"]);
    }
    // Read-only, as every source runs: the ACL the docs give.
    let url = redis.acl_user("ro", "pw", READ_ONLY_ACL);
    // 3 Sidekiq units (two queues and the shared keys) + 2 of the 5 plain lists.
    let app = TestApp::start(&config(&url, "max_keys: 5\n")).await;
    let s = app
        .scrape_until("sidekiq queues", Duration::from_secs(10), |s| {
            depth(s, "a", "sidekiq", "waiting").is_some()
        })
        .await;
    // Its label is `\x28all)` (prometheus_parse keeps the exposition's
    // escaped backslash); the shared keys keep `(all)`.
    assert_eq!(
        depth(&s, "\\\\x28all)", "sidekiq", "waiting"),
        Some(2.0),
        "{s}"
    );
    assert_eq!(depth(&s, "(all)", "sidekiq", "retry"), Some(1.0));
    assert_eq!(depth(&s, "(all)", "sidekiq", "waiting"), None);
    assert_eq!(depth(&s, "a", "sidekiq", "waiting"), Some(1.0));
    let plain = plain_depths(&s);
    assert_eq!(plain.keys().collect::<Vec<_>>(), ["p1", "p2"], "{s}");
    let stat = |name: &str| s.value(name, &[("source", "main")]);
    assert_eq!(stat("queue_exporter_dropped_keys"), Some(3.0), "{s}");
    assert_eq!(stat("queue_exporter_tracked_keys"), Some(5.0), "{s}");
    for reason in ["auth", "backend"] {
        assert_eq!(s.errors("main", reason), Some(0.0), "{reason}\n{s}");
    }
    // KEDA tells the queue `(all)` from the shared keys too.
    let mut c = client(&app).await;
    let q = [("queue", "\\x28all)")];
    assert_eq!(metrics(&mut c, &q).await.unwrap().1, 2.0);
    app.stop().await;
    // `discover` needs no more than that ACL either.
    let (ok, yaml, err) = run_exporter(&["discover", "--url", &url]);
    assert!(ok, "{err}");
    assert!(yaml.contains("- preset: sidekiq\n"), "{yaml}");
    assert!(!yaml.contains(":pw@"), "{yaml}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_two_entries_of_one_library_share_is_told_apart_by_prefix() {
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    // Sidekiq at the bare keys and in the redis-namespace `ns`, both with
    // a queue `default` (and each its shared keys); BullMQ at `bull` and
    // at `eu`, both with a queue `mail`.
    rcmd(&mut conn, &["SADD", "queues", "default"]);
    rcmd(&mut conn, &["RPUSH", "queue:default", "j1"]);
    rcmd(&mut conn, &["SADD", "ns:queues", "default"]);
    rcmd(&mut conn, &["RPUSH", "ns:queue:default", "j2", "j3"]);
    for (prefix, jobs) in [("bull", 1), ("eu", 4)] {
        let meta = format!("{prefix}:mail:meta");
        rcmd(&mut conn, &["HSET", &meta, "version", "bullmq:6.7.0"]);
        for j in 0..jobs {
            rcmd(
                &mut conn,
                &["LPUSH", &format!("{prefix}:mail:wait"), &j.to_string()],
            );
        }
    }
    let app = TestApp::start(&config(&redis.url, "")).await;
    let s = app
        .scrape_until("both libraries twice", Duration::from_secs(10), |s| {
            depth(s, "eu:mail", "bullmq", "waiting").is_some()
                && depth(s, "ns:default", "sidekiq", "waiting").is_some()
        })
        .await;
    // Every series once: a duplicate would make the whole exposition invalid.
    let mut seen = std::collections::BTreeSet::new();
    for line in s.text().lines().filter(|l| !l.starts_with('#')) {
        let series = line.rsplit_once(' ').map_or(line, |(k, _)| k);
        assert!(seen.insert(series.to_string()), "twice: {series}\n{s}");
    }
    // The library's default prefix keeps the bare name.
    assert_eq!(depth(&s, "mail", "bullmq", "waiting"), Some(1.0), "{s}");
    assert_eq!(depth(&s, "eu:mail", "bullmq", "waiting"), Some(4.0));
    assert_eq!(depth(&s, "default", "sidekiq", "waiting"), Some(1.0));
    assert_eq!(depth(&s, "ns:default", "sidekiq", "waiting"), Some(2.0));
    assert!(depth(&s, "(all)", "sidekiq", "retry").is_some());
    assert!(depth(&s, "ns:(all)", "sidekiq", "retry").is_some());
    let mut c = client(&app).await;
    let q = [("queue", "eu:mail"), ("preset", "bullmq")];
    assert_eq!(metrics(&mut c, &q).await.unwrap().1, 4.0);
    app.stop().await;
}

/// `discover` of `url`, then `once` with the config it printed and `once`
/// in zero config: what a user's round trip shows.
struct RoundTrip {
    /// The printed config.
    yaml: String,
    /// It, written to a file (for `check`).
    discovered: std::path::PathBuf,
    /// `once` with it: stdout.
    with_config: String,
    /// `once` in zero config: stdout and stderr (its log).
    zero_config: String,
    zero_log: String,
    /// Holds the files.
    _dir: tempfile::TempDir,
}

fn discover_then_once(url: &str) -> RoundTrip {
    let (ok, yaml, err) = run_exporter(&["discover", "--url", url]);
    assert!(ok, "{err}");
    let dir = tempfile::tempdir().unwrap();
    let discovered = write_file(&dir, "discovered.yaml", &yaml);
    let zero = write_file(
        &dir,
        "zero.yaml",
        &format!("sources:\n  - name: redis\n    type: redis\n    url: {url}\n"),
    );
    let (ok, with_config, err) = run_exporter(&["once", "--config", discovered.to_str().unwrap()]);
    assert!(ok, "{err}\n{yaml}");
    let (ok, zero_config, zero_log) = run_exporter(&["once", "--config", zero.to_str().unwrap()]);
    assert!(ok, "{zero_log}");
    RoundTrip {
        yaml,
        discovered,
        with_config,
        zero_config,
        zero_log,
        _dir: dir,
    }
}

/// `queue_depth` and `queue_paused` of `once`'s output, by (metric, queue,
/// preset, state), capture labels aside.
fn series(text: &str) -> BTreeMap<(String, String, String, String), f64> {
    let s = Scrape::parse(text);
    let mut out = BTreeMap::new();
    for name in ["queue_depth", "queue_paused"] {
        for x in s.samples(name, &[]) {
            let label = |k: &str| x.labels.get(k).unwrap_or_default().to_string();
            let v = match x.value {
                prometheus_parse::Value::Gauge(v) | prometheus_parse::Value::Untyped(v) => v,
                _ => f64::NAN,
            };
            let key = (name.into(), label("queue"), label("preset"), label("state"));
            assert!(out.insert(key, v).is_none(), "a series twice: {text}");
        }
    }
    out
}

#[test]
fn discover_prints_a_config_that_check_accepts_and_once_reads_as_zero_config_does() {
    let redis = RedisServer::start();
    let written = [
        Library::Celery.run("celery_fixture.py", &[&redis.url]),
        Library::Bullmq.run("node/bullmq_prefix_fixture.js", &[&redis.url]),
    ];
    if written.iter().any(Option::is_none) {
        return;
    }
    let mut conn = redis.conn();
    // Sidekiq's layout, and plain keys: two sharing `jobs:pending:`.
    rcmd(&mut conn, &["SADD", "queues", "default"]);
    rcmd(&mut conn, &["RPUSH", "queue:default", "j1", "j2"]);
    rcmd(&mut conn, &["RPUSH", "jobs:pending:high", "a", "b"]);
    rcmd(&mut conn, &["ZADD", "jobs:pending:low", "1", "c"]);
    rcmd(&mut conn, &["XADD", "events", "*", "f", "1"]);

    let RoundTrip {
        yaml,
        discovered,
        with_config,
        zero_config,
        zero_log: err,
        _dir,
    } = discover_then_once(&redis.url);
    assert!(
        yaml.contains("- preset: bullmq\n        prefix: \"myapp:eu\"\n"),
        "{yaml}"
    );
    assert!(
        yaml.contains("- preset: celery\n        queues: [\"celery\", \"emails\"]\n"),
        "{yaml}"
    );
    assert!(yaml.contains("- preset: sidekiq\n"), "{yaml}");
    assert!(
        yaml.contains(
            "- pattern: \"jobs:pending:*\"\n        types: [list, zset]\n        labels: \"^jobs:pending:(?P<part>[^:]+)$\"\n"
        ),
        "{yaml}"
    );
    assert!(yaml.contains("- key: \"events\"\n"), "{yaml}");
    let (ok, out, check_err) = run_exporter(&["check", "--config", discovered.to_str().unwrap()]);
    assert!(
        ok && out.contains(": ok (1 sources)"),
        "{out}{check_err}\n{yaml}"
    );

    // The one line zero config logs of what it sees.
    let picture = "recognised 1 BullMQ queue (prefix myapp:eu), 1 Sidekiq queue, 2 Celery queues; \
                   1 plain list, 1 plain zset, 1 plain stream";
    assert_eq!(err.matches("recognised ").count(), 1, "{err}");
    assert!(err.contains(picture), "{err}");
    assert!(yaml.contains(&format!("# {picture}\n")), "{yaml}");
    let (a, b) = (series(&with_config), series(&zero_config));
    assert_eq!(
        a, b,
        "discovered:\n{with_config}\nzero config:\n{zero_config}"
    );
    let key = |q: &str, p: &str, s: &str| ("queue_depth".into(), q.into(), p.into(), s.into());
    assert_eq!(a.get(&key("reports", "bullmq", "waiting")), Some(&3.0));
    assert_eq!(a.get(&key("celery", "celery", "waiting")), Some(&11.0));
    assert_eq!(a.get(&key("default", "sidekiq", "waiting")), Some(&2.0));
    assert_eq!(a.get(&key("jobs:pending:high", "", "")), Some(&2.0));
    // The pattern's capture is the one difference.
    let s = Scrape::parse(&with_config);
    assert_eq!(
        s.value(
            "queue_depth",
            &[("queue", "jobs:pending:low"), ("part", "low")]
        ),
        Some(1.0),
        "{with_config}"
    );
    // Read-only: the keys are as the libraries and this test wrote them.
    let len: u64 = redis::cmd("LLEN")
        .arg("queue:default")
        .query(&mut conn)
        .unwrap();
    assert_eq!(len, 2);
}

/// SCAN calls one full untyped pass over `redis`'s keyspace makes with
/// `COUNT count` (the count a pass makes whatever it filters).
fn scan_calls_of_one_pass(conn: &mut redis::Connection, count: u32) -> u64 {
    let (mut cursor, mut calls) = (0u64, 0);
    loop {
        let (next, _): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("COUNT")
            .arg(count)
            .query(conn)
            .unwrap();
        calls += 1;
        if next == 0 {
            return calls;
        }
        cursor = next;
    }
}

/// What `once` reports of a zero-config source over `redis` with
/// `scan_count: 100`, then of the same with `plain_keys: false`: each one's
/// `queue_depth`/`queue_paused` series, SCAN calls and log.
type Once = (BTreeMap<(String, String, String, String), f64>, u64, String);
fn once_both_ways(redis: &RedisServer) -> (Once, Once) {
    let dir = tempfile::tempdir().unwrap();
    let source = |extra: &str| {
        format!(
            "sources:\n  - name: redis\n    type: redis\n    url: {}\n    scan_count: 100\n{extra}",
            redis.url
        )
    };
    let every = write_file(&dir, "zero.yaml", &source(""));
    let libraries = write_file(&dir, "libs.yaml", &source("    plain_keys: false\n"));
    let once = |cfg: &std::path::Path| {
        redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query::<()>(&mut redis.conn())
            .unwrap();
        let (ok, out, err) = run_exporter(&["once", "--config", cfg.to_str().unwrap()]);
        assert!(ok, "{err}");
        let scans = redis.commandstats().get("scan").map_or(0, |s| s.0);
        (series(&out), scans, err)
    };
    (once(&every), once(&libraries))
}

/// 3,000 strings, so that a pass over the keyspace takes many SCAN calls.
fn write_strings(conn: &mut redis::Connection) {
    write_n_strings(conn, 3000);
}

/// `n` string keys `cache:<i>`, in pipelines of 10,000.
fn write_n_strings(conn: &mut redis::Connection, n: usize) {
    for start in (0..n).step_by(10_000) {
        let mut strings = redis::pipe();
        for i in start..n.min(start + 10_000) {
            strings
                .cmd("SET")
                .arg(format!("cache:{i}"))
                .arg("v")
                .ignore();
        }
        strings.query::<()>(conn).unwrap();
    }
}

/// The series with a `preset` label, and those without.
type Series = BTreeMap<(String, String, String, String), f64>;
fn split_plain(all: Series) -> (Series, Series) {
    all.into_iter()
        .partition(|((_, _, preset, _), _)| !preset.is_empty())
}

#[test]
fn plain_keys_false_recognises_the_same_library_queues_in_one_scan_pass() {
    let redis = RedisServer::start();
    if !write_libraries(&redis.url) {
        return;
    }
    let mut conn = redis.conn();
    write_asynq(&mut conn);
    // asynq at a prefix of its own: only its `work:{q}:pending` list tells
    // it from a Sidekiq namespace.
    rcmd(&mut conn, &["SADD", "work:queues", "q"]);
    rcmd(&mut conn, &["LPUSH", "work:{q}:pending", "t1", "t2"]);
    rcmd(&mut conn, &["RPUSH", "jobs:pending:high", "a", "b"]);
    rcmd(&mut conn, &["ZADD", "plain:zset", "1", "x"]);
    rcmd(&mut conn, &["XADD", "plain:events", "*", "f", "1"]);
    write_strings(&mut conn);
    let ((all, all_scans, _), (libs, libs_scans, log)) = once_both_ways(&redis);

    // The same library series, and no plain one.
    let (from_libraries, plain) = split_plain(all);
    assert_eq!(libs, from_libraries);
    assert_eq!(plain.len(), 3, "{plain:?}");
    let key = |q: &str, p: &str, s: &str| ("queue_depth".into(), q.into(), p.into(), s.into());
    assert_eq!(libs.get(&key("q", "asynq", "waiting")), Some(&2.0));
    assert_eq!(libs.get(&key("critical", "asynq", "waiting")), Some(&2.0));
    assert_eq!(libs.get(&key("celery", "celery", "waiting")), Some(&11.0));
    assert_eq!(libs.get(&key("reports", "bullmq", "waiting")), Some(&3.0));
    // Old Bull beside BullMQ's same-named queue: told by its `id`.
    assert_eq!(libs.get(&key("mail", "bull", "waiting")), Some(&4.0));
    // Resque told from a Sidekiq namespace by the keys beside its registry.
    assert_eq!(libs.get(&key("default", "resque", "waiting")), Some(&3.0));
    assert_eq!(libs.get(&key("(all)", "resque", "failed")), Some(&1.0));
    assert!(log.contains("; no plain key"), "{log}");
    // One pass over the keyspace either way (plain keys cost a TYPE of
    // every name beside it at a full round).
    let pass = scan_calls_of_one_pass(&mut conn, 100);
    assert!(pass >= 20, "{pass}");
    assert_eq!(libs_scans, pass);
    assert!(
        all_scans.abs_diff(pass) <= 2,
        "{all_scans} SCAN calls against {pass} a pass"
    );
}

#[test]
fn plain_keys_false_tells_a_sidekiq_namespace_and_celery_steps_by_the_keys_beside_them() {
    // A Sidekiq 6 namespace (its `ns:queue:x` list) and a Celery queue
    // with `sep: ":"` and `priority_steps: range(10)` (the layout
    // `celery_fixture.py colon` writes, for a queue named `tasks`): their
    // registries alone do not say which library, nor which steps.
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    rcmd(&mut conn, &["SADD", "ns:queues", "x"]);
    rcmd(&mut conn, &["RPUSH", "ns:queue:x", "j1"]);
    rcmd(&mut conn, &["ZADD", "ns:retry", "1", "r1"]);
    rcmd(
        &mut conn,
        &["SADD", "app:_kombu.binding.tasks", "tasks::tasks"],
    );
    rcmd(&mut conn, &["RPUSH", "app:tasks", "m"]);
    rcmd(&mut conn, &["RPUSH", "app:tasks:7", "m", "m"]);
    write_strings(&mut conn);
    let ((all, _, _), (libs, libs_scans, _)) = once_both_ways(&redis);
    let (from_libraries, plain) = split_plain(all);
    assert_eq!(libs, from_libraries);
    assert!(plain.is_empty(), "{plain:?}");
    let key = |q: &str, p: &str, s: &str| ("queue_depth".into(), q.into(), p.into(), s.into());
    assert_eq!(libs.get(&key("x", "sidekiq", "waiting")), Some(&1.0));
    assert_eq!(libs.get(&key("(all)", "sidekiq", "retry")), Some(&1.0));
    assert_eq!(libs.get(&key("tasks", "celery", "waiting")), Some(&3.0));
    assert_eq!(libs_scans, scan_calls_of_one_pass(&mut conn, 100));
}

/// node-resque at a namespace of its own (`jobs`) beside a Sidekiq 6
/// namespace: both are a `<ns>:queues` set over `<ns>:queue:<q>` lists;
/// Resque's failed list and delayed schedule tell one, Sidekiq's `retry`
/// zset the other, whether or not plain keys are typed.
#[test]
fn a_resque_namespace_is_told_from_a_sidekiq_one_by_the_keys_beside_it() {
    let redis = RedisServer::start();
    let Some(_) = Library::Resque.run("node/resque_fixture.js", &[&redis.url, "jobs"]) else {
        return;
    };
    let mut conn = redis.conn();
    rcmd(&mut conn, &["SADD", "ns:queues", "x"]);
    rcmd(&mut conn, &["RPUSH", "ns:queue:x", "j1"]);
    rcmd(&mut conn, &["ZADD", "ns:retry", "1", "r1"]);
    let ((all, _, _), (libs, _, _)) = once_both_ways(&redis);
    let (from_libraries, plain) = split_plain(all);
    assert_eq!(libs, from_libraries);
    assert!(plain.is_empty(), "{plain:?}");
    let key = |q: &str, p: &str, s: &str| ("queue_depth".into(), q.into(), p.into(), s.into());
    assert_eq!(libs.get(&key("default", "resque", "waiting")), Some(&3.0));
    assert_eq!(libs.get(&key("(all)", "resque", "delayed")), Some(&3.0));
    assert_eq!(libs.get(&key("(all)", "resque", "failed")), Some(&1.0));
    assert_eq!(libs.get(&key("x", "sidekiq", "waiting")), Some(&1.0));
    assert_eq!(libs.get(&key("default", "sidekiq", "waiting")), None);
}

/// node-resque at its default namespace and at one of its own (`jobs`):
/// `discover` prints an entry for each (the custom one with its
/// `prefix`), `check` accepts them, and `once` with them reads what zero
/// config reads.
#[test]
fn discover_prints_resque_at_each_namespace_and_once_reads_it_as_zero_config_does() {
    let redis = RedisServer::start();
    let written = [
        Library::Resque.run("node/resque_fixture.js", &[&redis.url]),
        Library::Resque.run("node/resque_fixture.js", &[&redis.url, "jobs"]),
    ];
    if written.iter().any(Option::is_none) {
        return;
    }
    let RoundTrip {
        yaml,
        discovered,
        with_config,
        zero_config,
        zero_log,
        _dir,
    } = discover_then_once(&redis.url);
    assert!(yaml.contains("- preset: resque\n"), "{yaml}");
    assert!(
        yaml.contains("- preset: resque\n        prefix: \"jobs\"\n"),
        "{yaml}"
    );
    assert!(!yaml.contains("- key: \"resque:"), "{yaml}");
    assert!(!yaml.contains("- key: \"jobs:"), "{yaml}");
    let (ok, out, err) = run_exporter(&["check", "--config", discovered.to_str().unwrap()]);
    assert!(ok && out.contains(": ok (1 sources)"), "{out}{err}\n{yaml}");
    let (a, b) = (series(&with_config), series(&zero_config));
    assert_eq!(a, b, "discovered:\n{with_config}\nzero config:\n{zero_log}");
    let key = |q: &str, p: &str, s: &str| ("queue_depth".into(), q.into(), p.into(), s.into());
    assert_eq!(
        a.get(&key("default", "resque", "waiting")),
        Some(&3.0),
        "{a:?}"
    );
    assert_eq!(
        a.get(&key("jobs:default", "resque", "waiting")),
        Some(&3.0),
        "{a:?}"
    );
}

#[test]
fn discover_refuses_bad_arguments_with_exit_2_and_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_file(
        &dir,
        "c.yaml",
        "sources:\n  - name: main\n    type: redis\n  - name: r\n    type: rabbitmq\n",
    );
    let cfg = cfg.to_str().unwrap();
    for (args, want) in [
        (
            vec!["discover"],
            "discover: give --url URL, or --config FILE --source NAME".to_string(),
        ),
        (
            vec!["discover", "--url", "http://redis:6379"],
            "discover: --url: must start with redis://".to_string(),
        ),
        (
            vec!["discover", "--config", cfg, "--source", "nope"],
            format!("{cfg}: discover: --source nope: no such source"),
        ),
        (
            vec!["discover", "--config", cfg, "--source", "r"],
            format!("{cfg}: discover: --source r: not a type: redis source"),
        ),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_queue-exporter"))
            .args(&args)
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with(&want), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

#[test]
fn celery_with_the_sep_steps_and_key_prefix_its_docs_suggest() {
    let redis = RedisServer::start();
    let Some(_) = Library::Celery.run("celery_fixture.py", &[&redis.url, "colon"]) else {
        return;
    };
    let RoundTrip {
        yaml,
        with_config,
        zero_config,
        ..
    } = discover_then_once(&redis.url);
    assert!(
        yaml.contains(
            "      - preset: celery\n        prefix: \"app:\"\n        queues: [\"celery\", \"emails\"]\n        sep: \":\"\n        priority_steps: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]\n"
        ),
        "{yaml}"
    );
    let series = series(&zero_config);
    assert_eq!(series, self::series(&with_config), "{zero_config}");
    // None and 0..9, one list per priority: all `waiting` of `celery`.
    let key = |q: &str| {
        (
            "queue_depth".into(),
            q.into(),
            "celery".into(),
            "waiting".into(),
        )
    };
    assert_eq!(series.get(&key("celery")), Some(&11.0), "{zero_config}");
    assert_eq!(series.get(&key("emails")), Some(&2.0), "{zero_config}");
    // No plain key: the priority lists are the queue's.
    assert!(
        series.keys().all(|(_, _, preset, _)| !preset.is_empty()),
        "{zero_config}"
    );
}

/// The `recognised …` lines a `serve` process logged so far.
fn pictures(lines: &std::sync::Mutex<Vec<String>>) -> Vec<String> {
    let lines = lines.lock().unwrap();
    lines
        .iter()
        .filter_map(|l| l.find("recognised ").map(|i| l[i..].to_string()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_log_line_at_start_and_one_each_time_the_picture_changes() {
    use std::io::BufRead;
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    rcmd(&mut conn, &["SADD", "queues", "a"]);
    rcmd(&mut conn, &["RPUSH", "queue:a", "x"]);
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_file(
        &dir,
        "c.yaml",
        &format!(
            "listen: {{ http: 127.0.0.1:{port}, grpc: null }}\nsources:\n  - name: main\n    type: redis\n    url: {}\n    poll_interval: 100ms\n    discovery_interval: 200ms\n",
            redis.url
        ),
    );
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_queue-exporter"))
        .args(["serve", "--config", cfg.to_str().unwrap()])
        .env("NO_COLOR", "1")
        .env_remove("RUST_LOG")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let _child = KillOnDrop(child);
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = lines.clone();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            sink.lock().unwrap().push(l);
        }
    });
    let wait_for = |want: &'static str| {
        let lines = lines.clone();
        async move {
            wait_for(want, Duration::from_secs(20), || {
                let seen = pictures(&lines);
                async move { seen.iter().any(|l| l.starts_with(want)).then_some(()) }
            })
            .await
        }
    };
    wait_for("recognised 1 Sidekiq queue; no plain key").await;
    rcmd(&mut conn, &["RPUSH", "plain", "p"]);
    wait_for("recognised 1 Sidekiq queue; 1 plain list").await;
    rcmd(&mut conn, &["SADD", "queues", "b"]);
    wait_for("recognised 2 Sidekiq queues; 1 plain list").await;
    // Ten more polls (five more discovery rounds) change nothing: no line.
    let metrics = format!("http://127.0.0.1:{port}/metrics");
    let polls_now = || async {
        let (_, body, _) = http_get(&metrics, &[]).await;
        polls(&Scrape::parse(&body), "main")
    };
    let start = polls_now().await;
    wait_for_polls(&polls_now, start + 10).await;
    assert_eq!(
        pictures(&lines),
        [
            "recognised 1 Sidekiq queue; no plain key source=main",
            "recognised 1 Sidekiq queue; 1 plain list source=main",
            "recognised 2 Sidekiq queues; 1 plain list source=main",
        ],
        "{:?}",
        lines.lock().unwrap()
    );
}

/// Waits until `polls` reads at least `n`.
async fn wait_for_polls<F, Fut>(polls: &F, n: u64)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = u64>,
{
    wait_for("polls", Duration::from_secs(30), || async {
        (polls().await >= n).then_some(())
    })
    .await
}

#[test]
fn celery_workers_event_queues_are_not_reported_while_they_run_nor_after_a_kill() {
    let redis = RedisServer::start();
    // Two real workers on queue `work`: Celery's default `event_exchange`
    // and a custom one, each with its gossip's `celeryev.<uuid>` queue.
    let workers = [
        Library::Celery.spawn("celery_fixture.py", &[&redis.url, "worker"]),
        Library::Celery.spawn("celery_fixture.py", &[&redis.url, "worker", "myev"]),
    ];
    let Some(workers) = workers.into_iter().collect::<Option<Vec<_>>>() else {
        return;
    };
    let mut conn = redis.conn();
    let mut event_queues = Vec::new();
    for set in ["_kombu.binding.celeryev", "_kombu.binding.myev"] {
        let m = only_member(&redis, set);
        let queue = m.strip_prefix("worker.#\x06\x16\x06\x16celeryev.");
        assert_eq!(queue.map(str::len), Some(36), "{set}: {m:?}");
        event_queues.push(format!("celeryev.{}", queue.unwrap_or_default()));
    }
    only_member(&redis, "_kombu.binding.work");
    // `work` alone, in zero config and in the config `discover` prints,
    // with the workers running and after SIGKILL left their bindings.
    let check = |when: &str| {
        let RoundTrip {
            yaml,
            with_config,
            zero_config,
            zero_log: err,
            ..
        } = discover_then_once(&redis.url);
        assert!(
            yaml.contains("- preset: celery\n        queues: [\"work\"]\n"),
            "{when}: {yaml}"
        );
        assert!(!yaml.contains("celeryev"), "{when}: {yaml}");
        assert!(
            err.contains("recognised 1 Celery queue; no plain key"),
            "{when}: {err}"
        );
        let zero_series = series(&zero_config);
        assert_eq!(zero_series, series(&with_config), "{when}: {zero_config}");
        let queues: std::collections::BTreeSet<&str> =
            zero_series.keys().map(|(_, q, _, _)| q.as_str()).collect();
        assert_eq!(
            queues.into_iter().collect::<Vec<_>>(),
            ["(all)", "work"],
            "{when}: {zero_config}"
        );
        for q in &event_queues {
            assert!(!zero_config.contains(q.as_str()), "{when}: {zero_config}");
        }
    };
    check("running");
    drop(workers);
    for set in ["_kombu.binding.celeryev", "_kombu.binding.myev"] {
        let left: u64 = redis::cmd("SCARD").arg(set).query(&mut conn).unwrap();
        assert_eq!(left, 1, "{set}: a SIGKILLed worker leaves its binding");
    }
    check("killed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bullmq_and_a_paused_bull_queue_at_one_prefix_are_each_reported_once() {
    // Bull at its default prefix `bull` (`held` paused: Bull then writes a
    // `bull:held:meta` hash holding only `paused`), and BullMQ's `reports`
    // at that same prefix.
    let redis = RedisServer::start();
    let written = [
        Library::Bull.run("node/bull_fixture.js", &[&redis.url]),
        Library::Bullmq.run(
            "node/bullmq_prefix_fixture.js",
            &[&redis.url, "add", "bull"],
        ),
    ];
    if written.iter().any(Option::is_none) {
        return;
    }
    let paused: Vec<String> = redis::cmd("HKEYS")
        .arg("bull:held:meta")
        .query(&mut redis.conn())
        .unwrap();
    assert_eq!(paused, ["paused"]);
    let RoundTrip {
        yaml,
        with_config,
        zero_config,
        ..
    } = discover_then_once(&redis.url);
    assert!(
        yaml.contains("- preset: bullmq\n") && yaml.contains("- preset: bull\n"),
        "{yaml}"
    );
    let a = series(&with_config);
    assert_eq!(a, series(&zero_config), "discovered:\n{with_config}");
    // Each queue under its library's preset only (Bull's `reports` is at
    // `legacy:app`, BullMQ's at `bull`).
    let presets = |q: &str| -> Vec<String> {
        let p: std::collections::BTreeSet<String> = a
            .keys()
            .filter(|(_, queue, _, _)| queue == q)
            .map(|(_, _, preset, _)| preset.clone())
            .collect();
        p.into_iter().collect()
    };
    for (q, want) in [
        ("reports", &["bull", "bullmq"][..]),
        ("held", &["bull"]),
        ("mail", &["bull"]),
        ("done", &["bull"]),
        ("stall", &["bull"]),
    ] {
        assert_eq!(presets(q), want, "{q}: {with_config}");
    }
    let key = |q: &str, p: &str, s: &str| ("queue_depth".into(), q.into(), p.into(), s.into());
    assert_eq!(a.get(&key("held", "bull", "waiting")), Some(&2.0));
    assert_eq!(a.get(&key("reports", "bullmq", "waiting")), Some(&3.0));

    // `- preset: bullmq` alone takes BullMQ's queue and no Bull one; the
    // discovered config serves KEDA the paused Bull queue.
    let only = "listen: { grpc: 127.0.0.1:0 }\nsources:\n  - name: main\n    type: redis\n    url: URL\n    queues:\n      - preset: bullmq\n";
    let app = TestApp::start(&only.replace("URL", &redis.url)).await;
    let s = app
        .scrape_until("BullMQ's queue", Duration::from_secs(10), |s| {
            depth(s, "reports", "bullmq", "waiting").is_some()
        })
        .await;
    let queues: std::collections::BTreeSet<&str> = s
        .samples("queue_depth", &[])
        .filter_map(|x| x.labels.get("queue"))
        .collect();
    assert_eq!(queues, ["reports"].into(), "{s}");
    app.stop().await;
    let app = TestApp::start(&format!("listen: {{ grpc: 127.0.0.1:0 }}\n{yaml}")).await;
    app.scrape_until("the paused Bull queue", Duration::from_secs(10), |s| {
        depth(s, "held", "bull", "waiting").is_some()
    })
    .await;
    let mut c = client(&app).await;
    assert_eq!(metrics(&mut c, &[("queue", "held")]).await.unwrap().1, 2.0);
    assert_eq!(
        metrics(&mut c, &[("queue", "reports"), ("preset", "bullmq")])
            .await
            .unwrap()
            .1,
        3.0
    );
    app.stop().await;
}

#[test]
fn discover_shows_its_progress_on_stderr_and_prints_the_config_on_stdout() {
    // 100,000 strings and one plain list, scanned ten keys a call: a round
    // of a few seconds, so a progress line (one a second) must show.
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    write_n_strings(&mut conn, 100_000);
    rcmd(&mut conn, &["RPUSH", "jobs", "a"]);
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_file(
        &dir,
        "c.yaml",
        &format!(
            "sources:\n  - name: main\n    type: redis\n    url: {}\n    scan_count: 10\n",
            redis.url
        ),
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_queue-exporter"))
        .args([
            "discover",
            "--config",
            cfg.to_str().unwrap(),
            "--source",
            "main",
        ])
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let yaml = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{err}");
    // `discover: scanned ~N of 100001 keys (P%)`, N never past the total.
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("discover: scanned ~"))
        .collect();
    assert!(!lines.is_empty(), "no progress line: {err}");
    for line in &lines {
        let rest = line.trim_start_matches("discover: scanned ~");
        let (n, total) = rest.split_once(" of ").expect("N of total");
        let n: u64 = n.parse().expect("a count");
        assert!(total.starts_with("100001 keys ("), "{line}");
        assert!(n <= 100_001, "{line}");
    }
    // stdout is the config alone.
    assert!(!yaml.contains("scanned"), "{yaml}");
    assert!(yaml.contains("key: \"jobs\""), "{yaml}");
}
