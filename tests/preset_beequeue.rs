//! bee-queue end to end: the real library (npm `bee-queue` 2.0.0, driven by
//! `tests/fixtures/presets/node/beequeue_fixture.js`) writes jobs waiting,
//! delayed (one overdue, one retrying after a backoff), succeeded, failed
//! and stalled by its own rule into a private Redis, at its default prefix
//! `bq` and at `legacy:bq`. The exporter must report each state as the
//! library's own `checkHealth` counts it, recognise the queues with no
//! config (no key of them a plain key), answer KEDA through a real gRPC
//! client, follow a queue that comes and goes, answer `UNAVAILABLE` for a
//! read Redis refuses, and print the queues from `discover`.
//!
//! A library that is not installed fails its test, naming the library and
//! how to install it (`scripts/setup-services` installs them all).
mod scaler_common;
mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use scaler_common::*;
use support::*;
use tonic::Code;

const PRESET: &str = "bee-queue";
const WAIT: Duration = Duration::from_secs(20);

/// One Redis source `main` over `url` polling every 100 ms, rediscovering
/// every 200 ms, with `queues` (a YAML list, flush left; empty: zero config).
fn config(url: &str, queues: &str) -> String {
    let queues = if queues.is_empty() {
        String::new()
    } else {
        format!("    queues:\n{}", indent(queues, 6))
    };
    format!(
        "listen: {{ grpc: 127.0.0.1:0 }}\nsources:\n  - name: main\n    type: redis\n    url: {url}\n    poll_interval: 100ms\n    discovery_interval: 200ms\n{queues}"
    )
}

/// The presets for the fixture's two prefixes.
const BOTH_PREFIXES: &str = "- preset: bee-queue\n- preset: bee-queue\n  prefix: legacy:bq\n";

/// Runs the fixture against `url`; `None` only when the library is missing
/// and may be skipped. Returns the library's own counts per queue.
fn write_jobs(url: &str) -> Option<BTreeMap<String, BTreeMap<String, f64>>> {
    let out = Library::BeeQueue.run("node/beequeue_fixture.js", &[url])?;
    let v: serde_json::Value = serde_json::from_str(out.trim()).expect("fixture JSON");
    let counts = v["counts"].as_object().expect("counts");
    Some(
        counts
            .iter()
            .map(|(q, c)| {
                let c = c.as_object().expect("a queue's counts");
                let c = c.iter().map(|(k, n)| (k.clone(), n.as_f64().unwrap()));
                (q.clone(), c.collect())
            })
            .collect(),
    )
}

fn gauge(s: &Scrape, name: &str, queue: &str) -> Option<f64> {
    s.value(name, &[("queue", queue), ("preset", PRESET)])
}

/// Waits until every fixture queue is reported with its stalled job.
async fn all_queues(app: &TestApp) -> Scrape {
    app.scrape_until("bee-queue queues", WAIT, |s| {
        ["mail", "done", "stall", "reports"]
            .iter()
            .all(|q| depth(s, q, PRESET, "waiting").is_some())
            && gauge(s, "queue_stalled_jobs", "stall").is_some()
    })
    .await
}

/// The states of the fixture's queues, as the library itself counts them.
fn assert_states(s: &Scrape, lib: &BTreeMap<String, BTreeMap<String, f64>>) {
    for (q, c) in lib {
        for (state, theirs) in [
            ("waiting", "waiting"),
            ("active", "active"),
            ("delayed", "delayed"),
            ("completed", "succeeded"),
            ("failed", "failed"),
        ] {
            assert_eq!(
                depth(s, q, PRESET, state),
                Some(c[theirs]),
                "{q} {state}\n{s}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn states_latency_overdue_stalled_and_arrivals_of_real_jobs() {
    let redis = RedisServer::start();
    let before = wall();
    let Some(lib) = write_jobs(&redis.url) else {
        return;
    };
    let app = TestApp::start(&config(&redis.url, BOTH_PREFIXES)).await;
    let s = all_queues(&app).await;
    assert_states(&s, &lib);
    // As the fixture made them (and checkHealth agrees, above).
    assert_eq!(depth(&s, "mail", PRESET, "waiting"), Some(4.0), "{s}");
    assert_eq!(depth(&s, "mail", PRESET, "delayed"), Some(2.0));
    assert_eq!(depth(&s, "done", PRESET, "completed"), Some(1.0));
    assert_eq!(depth(&s, "done", PRESET, "failed"), Some(1.0));
    // The job retrying after its 600 s backoff.
    assert_eq!(depth(&s, "done", PRESET, "delayed"), Some(1.0));
    assert_eq!(depth(&s, "stall", PRESET, "active"), Some(1.0));
    assert_eq!(depth(&s, "reports", PRESET, "waiting"), Some(1.0));
    // bee-queue has no retry state of its own and no pause.
    assert_eq!(depth(&s, "mail", PRESET, "retry"), None);
    assert_eq!(gauge(&s, "queue_paused", "mail"), None);
    // `soon` fell due 200 ms after it was made and nothing raises it.
    assert_eq!(gauge(&s, "queue_overdue_jobs", "mail"), Some(1.0));
    assert_eq!(gauge(&s, "queue_overdue_jobs", "done"), Some(0.0));
    // The killed worker's job missed its window: stalled by bee-queue's rule.
    assert_eq!(lib["stall"]["stalling"], 1.0);
    assert_eq!(gauge(&s, "queue_stalled_jobs", "stall"), Some(1.0));
    assert_eq!(gauge(&s, "queue_stalled_jobs", "mail"), Some(0.0));
    // The `id` counter: jobs made without an id of their own (not
    // `welcome-1`), as checkHealth's `newestJob`.
    for q in ["mail", "done", "stall"] {
        assert_eq!(
            gauge(&s, "queue_messages_published_total", q),
            Some(lib[q]["newestJob"]),
            "{q}\n{s}"
        );
    }
    assert_eq!(lib["mail"]["newestJob"], 5.0);
    for q in ["mail", "reports"] {
        let age = gauge(&s, "queue_oldest_message_age_seconds", q).unwrap();
        assert!(age > 0.0 && age <= wall() - before + 1.0, "{q} age {age}");
    }
    assert_eq!(
        gauge(&s, "queue_oldest_message_age_seconds", "done"),
        Some(0.0)
    );
    // No service time: bee-queue keeps no start or end stamps.
    assert_eq!(
        s.value("queue_service_time_seconds", &[("preset", PRESET)]),
        None
    );
    // The exporter only read: the overdue job is still in `delayed`, the
    // stalled one still in `stalling`.
    let mut conn = redis.conn();
    let delayed: u64 = redis::cmd("ZCARD")
        .arg("bq:mail:delayed")
        .query(&mut conn)
        .unwrap();
    assert_eq!(delayed, 2);
    let stalling: u64 = redis::cmd("SCARD")
        .arg("bq:stall:stalling")
        .query(&mut conn)
        .unwrap();
    assert_eq!(stalling, 1);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stall_window_still_open_counts_no_job_stalled() {
    let redis = RedisServer::start();
    if write_jobs(&redis.url).is_none() {
        return;
    }
    // A stall check's window as bee-queue opens it (`SET stallBlock 1 PX
    // <stallInterval> NX`), over the job left in `stalling`.
    let mut conn = redis.conn();
    rcmd(
        &mut conn,
        &["SET", "bq:stall:stallBlock", "1", "PX", "60000", "NX"],
    );
    let app = TestApp::start(&config(&redis.url, BOTH_PREFIXES)).await;
    let s = all_queues(&app).await;
    assert_eq!(gauge(&s, "queue_stalled_jobs", "stall"), Some(0.0), "{s}");
    assert_eq!(depth(&s, "stall", PRESET, "active"), Some(1.0));
    // The window ends: the job has missed it.
    rcmd(&mut conn, &["DEL", "bq:stall:stallBlock"]);
    app.scrape_until("the stalled job", WAIT, |s| {
        gauge(s, "queue_stalled_jobs", "stall") == Some(1.0)
    })
    .await;
    app.stop().await;
}

/// Every plain key's `queue_depth` (no `preset` label), by queue.
fn plain_queues(s: &Scrape) -> Vec<String> {
    s.samples("queue_depth", &[])
        .filter(|x| x.labels.get("preset").is_none())
        .map(|x| x.labels.get("queue").unwrap_or_default().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_config_recognises_it_at_the_default_and_a_custom_prefix() {
    let redis = RedisServer::start();
    let Some(lib) = write_jobs(&redis.url) else {
        return;
    };
    let mut conn = redis.conn();
    rcmd(&mut conn, &["RPUSH", "tasks", "a"]);
    // An app's own `jobs` hash beside a list is no bee-queue queue.
    rcmd(
        &mut conn,
        &["HSET", "app:users:jobs", "1", r#"{"name":"x"}"#],
    );
    rcmd(&mut conn, &["RPUSH", "app:users:waiting", "1"]);
    let app = TestApp::start(&config(&redis.url, "")).await;
    let s = all_queues(&app).await;
    assert_states(&s, &lib);
    assert_eq!(gauge(&s, "queue_stalled_jobs", "stall"), Some(1.0), "{s}");
    // No key of bee-queue's is a plain key, nor taken for Bull's (its `id`
    // counter beside `active` and `delayed` looks like Bull's).
    let mut plain = plain_queues(&s);
    plain.sort();
    assert_eq!(plain, ["app:users:waiting", "tasks"], "{s}");
    assert!(!s.text().contains("preset=\"bull\""), "{s}");
    app.stop().await;

    // With `plain_keys: false` (the libraries alone, in one scan pass): the same.
    let only_libraries = format!("{}    plain_keys: false\n", config(&redis.url, ""));
    let app = TestApp::start(&only_libraries).await;
    let s = all_queues(&app).await;
    assert_states(&s, &lib);
    assert!(plain_queues(&s).is_empty(), "{s}");
    assert!(!s.text().contains("preset=\"bull\""), "{s}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keda_reads_waiting_age_and_wait_time_inputs() {
    let redis = RedisServer::start();
    let Some(_) = write_jobs(&redis.url) else {
        return;
    };
    let app = TestApp::start(&config(&redis.url, BOTH_PREFIXES)).await;
    all_queues(&app).await;
    let mut c = client(&app).await;
    // QueueLength reads `waiting`.
    assert_eq!(metrics(&mut c, &[("queue", "mail")]).await.unwrap().1, 4.0);
    let q = [("queue", "mail"), ("state", "waiting,delayed")];
    assert_eq!(metrics(&mut c, &q).await.unwrap().1, 6.0);
    assert!(active(&mut c, &[("queue", "mail")]).await.unwrap());
    assert!(!active(&mut c, &[("queue", "done")]).await.unwrap());
    // Age: the next job's.
    let age = [("queue", "mail"), ("mode", "Age")];
    let (_, a) = metrics(&mut c, &age).await.unwrap();
    assert!(a > 0.0 && a < 60.0, "age {a}");
    // WaitTime with processingTime: the backlog, the age and the arrivals
    // from the `id` counter are all known.
    let wait = [
        ("queue", "mail"),
        ("mode", "WaitTime"),
        ("targetWait", "10s"),
        ("processingTime", "1s"),
        ("window", "1s"),
    ];
    let answered = wait_for("a WaitTime answer", WAIT, || {
        let mut c = c.clone();
        async move { metrics(&mut c, &wait).await.ok() }
    })
    .await;
    assert!(answered.1 > 0.0, "{answered:?}");
    let unset: Vec<(&str, &str)> = wait
        .into_iter()
        .filter(|(k, _)| *k != "processingTime")
        .collect();
    // Without it: bee-queue keeps no start and end stamps, so no service
    // time can ever be measured; the trigger is refused as for the other
    // libraries that keep none, naming the key and why, never a number.
    let e = metrics(&mut c, &unset).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    for needle in [
        "scalerMetadata.processingTime: required for queue \"mail\"",
        "keeps no finished jobs with their start and end times",
    ] {
        assert!(e.message().contains(needle), "{needle}: {}", e.message());
    }
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_that_comes_and_goes_between_rounds() {
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    rcmd(&mut conn, &["RPUSH", "tasks", "a"]);
    for queues in ["", "- preset: bee-queue\n"] {
        let app = TestApp::start(&config(&redis.url, queues)).await;
        let pop =
            |how: &str| Library::BeeQueue.run("node/beequeue_fixture.js", &[&redis.url, "bq", how]);
        if pop("add").is_none() {
            return;
        }
        let s = app
            .scrape_until("the new queue", WAIT, |s| {
                depth(s, "pop", PRESET, "waiting") == Some(1.0)
            })
            .await;
        if queues.is_empty() {
            assert_eq!(plain_queues(&s), ["tasks"], "{s}");
        }
        let mut c = client(&app).await;
        assert_eq!(metrics(&mut c, &[("queue", "pop")]).await.unwrap().1, 1.0);
        pop("destroy");
        let s = app
            .scrape_until("the queue gone", WAIT, |s| {
                !s.has("queue_depth", &[("queue", "pop")])
            })
            .await;
        if queues.is_empty() {
            assert_eq!(plain_queues(&s), ["tasks"], "{s}");
        }
        app.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_redis_refuses_is_unavailable_never_zero() {
    let redis = RedisServer::start();
    if write_jobs(&redis.url).is_none() {
        return;
    }
    // Every key of queue `mail` but its `waiting` list.
    let keys: Vec<String> = [
        "active",
        "delayed",
        "succeeded",
        "failed",
        "stalling",
        "stallBlock",
        "id",
        "jobs",
    ]
    .iter()
    .map(|k| format!("~bq:mail:{k}"))
    .collect();
    let mut rules = vec!["-@all", "+@read", "+@connection"];
    rules.extend(keys.iter().map(String::as_str));
    let url = redis.acl_user("qe", "pw", &rules);
    let app = TestApp::start(&config(&url, "- preset: bee-queue\n")).await;
    let s = app
        .until("mail read, its waiting refused", WAIT, |s| {
            depth(s, "mail", PRESET, "delayed") == Some(2.0)
                && s.errors("main", "auth").is_some_and(|n| n >= 1.0)
        })
        .await;
    assert_eq!(depth(&s, "mail", PRESET, "waiting"), None, "{s}");
    assert_eq!(gauge(&s, "queue_oldest_message_age_seconds", "mail"), None);
    let c = client(&app).await;
    for q in [
        vec![("queue", "mail")],
        vec![("queue", "mail"), ("mode", "Age")],
    ] {
        let e = wait_code(&c, &q, Code::Unavailable, WAIT).await;
        assert!(e.message().contains("mail"), "{}", e.message());
    }
    // A state it could read still answers.
    let q = [("queue", "mail"), ("state", "delayed")];
    assert_eq!(metrics(&mut c.clone(), &q).await.unwrap().1, 2.0);
    app.stop().await;
}

#[test]
fn discover_prints_it_and_once_reads_what_zero_config_reads() {
    let redis = RedisServer::start();
    if write_jobs(&redis.url).is_none() {
        return;
    }
    let (ok, yaml, err) = run_exporter(&["discover", "--url", &redis.url]);
    assert!(ok, "{err}");
    assert!(yaml.contains("- preset: bee-queue\n"), "{yaml}");
    assert!(yaml.contains("prefix: \"legacy:bq\""), "{yaml}");
    assert!(!yaml.contains("bq:mail"), "{yaml}");
    assert!(!yaml.contains("preset: bull\n"), "{yaml}");
    let dir = tempfile::tempdir().unwrap();
    let discovered = write_file(&dir, "discovered.yaml", &yaml);
    let (ok, out, err) = run_exporter(&["once", "--config", discovered.to_str().unwrap()]);
    assert!(ok, "{err}\n{yaml}");
    let s = Scrape::parse(&out);
    assert_eq!(depth(&s, "mail", PRESET, "waiting"), Some(4.0), "{out}");
    assert_eq!(depth(&s, "reports", PRESET, "waiting"), Some(1.0), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_config_leaves_a_queue_whose_jobs_hash_it_may_not_read_unknown() {
    let redis = RedisServer::start();
    if write_jobs(&redis.url).is_none() {
        return;
    }
    // `HRANDFIELD` of `bq:stall:jobs` refused: whose its keys are is unknown.
    let url = redis.acl_user(
        "qe",
        "pw",
        &[
            READ_ONLY_ACL,
            &[
                "-hrandfield",
                "(+hrandfield ~bq:mail:* ~bq:done:* ~legacy:bq:*)",
            ],
        ]
        .concat(),
    );
    let app = TestApp::start(&config(&url, "")).await;
    let s = app
        .until("the readable queues and the refusal", WAIT, |s| {
            ["mail", "done", "reports"]
                .iter()
                .all(|q| depth(s, q, PRESET, "waiting").is_some())
                && s.errors("main", "auth").is_some_and(|n| n >= 1.0)
        })
        .await;
    assert_eq!(s.source_up("main"), Some(1.0), "{s}");
    // Neither bee-queue's, nor Bull's (its `id` beside `active`), nor plain.
    assert!(!s.has("queue_depth", &[("queue", "stall")]), "{s}");
    assert!(!s.text().contains("preset=\"bull\""), "{s}");
    assert!(plain_queues(&s).is_empty(), "{s}");
    let c = client(&app).await;
    let e = wait_code(&c, &[("queue", "stall")], Code::Unavailable, WAIT).await;
    assert!(e.message().contains("bq:stall:jobs"), "{}", e.message());
    // The readable ones answer.
    assert_eq!(
        metrics(&mut c.clone(), &[("queue", "mail")])
            .await
            .unwrap()
            .1,
        4.0
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_entry_leaves_a_queue_whose_jobs_hash_it_may_not_read_unknown() {
    let redis = RedisServer::start();
    if write_jobs(&redis.url).is_none() {
        return;
    }
    let url = redis.acl_user(
        "qe",
        "pw",
        &[
            READ_ONLY_ACL,
            &["-hrandfield", "(+hrandfield ~bq:mail:* ~bq:done:*)"],
        ]
        .concat(),
    );
    let app = TestApp::start(&config(&url, "- preset: bee-queue\n")).await;
    let s = app
        .until("the readable queues and the refusal", WAIT, |s| {
            ["mail", "done"]
                .iter()
                .all(|q| depth(s, q, PRESET, "waiting").is_some())
                && s.errors("main", "auth").is_some_and(|n| n >= 1.0)
        })
        .await;
    assert!(!s.has("queue_depth", &[("queue", "stall")]), "{s}");
    let c = client(&app).await;
    let e = wait_code(&c, &[("queue", "stall")], Code::Unavailable, WAIT).await;
    assert!(e.message().contains("bq:stall:jobs"), "{}", e.message());
    assert_eq!(
        metrics(&mut c.clone(), &[("queue", "mail")])
            .await
            .unwrap()
            .1,
        4.0
    );
    app.stop().await;
}
