//! Dramatiq's `RedisBroker` end to end: the real library (PyPI
//! `dramatiq[redis]` 2.2.1) writes its keys into a private Redis through
//! `tests/fixtures/presets/dramatiq_fixture.py` (messages sent, delayed,
//! dead-lettered by a real Worker; a Worker killed while it holds a message,
//! whose acks its heartbeat then leaves stalled until the broker's own
//! maintenance requeues them), and the exporter reports them as
//! `preset: dramatiq`, configured or recognised, for `/metrics`, KEDA and
//! `discover`. Layout: docs/presets.md, "Dramatiq".
mod scaler_common;
mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use scaler_common::*;
use support::*;
use tonic::Code;

const WAIT: Duration = Duration::from_secs(30);

/// The fixture's `heartbeat_timeout` (its `HEARTBEAT_MS`), as the entry
/// says it.
const HEARTBEAT: &str = "5s";

/// Source `main` over `url` polling every 100 ms, rediscovering every
/// 200 ms, with `queues` (a YAML list, flush left; none: zero config).
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

/// The configured entry at namespace `ns`, with the fixture's heartbeat timeout.
fn entry(ns: &str) -> String {
    format!("- preset: dramatiq\n  prefix: \"{ns}\"\n  heartbeat_timeout: {HEARTBEAT}\n")
}

/// Runs the fixture against `url` in namespace `ns`; `None` only when the
/// library is missing and skipping is allowed.
fn fixture(url: &str, ns: &str, mode: &str) -> Option<String> {
    Library::Dramatiq.run("dramatiq_fixture.py", &[url, ns, mode])
}

/// `name{queue, preset="dramatiq"}`.
fn gauge(s: &Scrape, name: &str, queue: &str) -> Option<f64> {
    s.value(name, &[("queue", queue), ("preset", "dramatiq")])
}

/// `queue_depth{queue, preset="dramatiq", state}`.
fn state(s: &Scrape, queue: &str, st: &str) -> Option<f64> {
    depth(s, queue, "dramatiq", st)
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn states_of_real_messages_and_a_killed_workers_acks_stalled_until_maintenance_requeues_them()
{
    let redis = RedisServer::start();
    let Some(out) = fixture(&redis.url, "dramatiq", "setup") else {
        return;
    };
    let sent: f64 = out
        .split("\"oldest_sent_ms\": ")
        .nth(1)
        .and_then(|r| r.split(['}', ',']).next())
        .and_then(|v| v.trim().parse().ok())
        .expect("oldest_sent_ms in the fixture's output");
    let Some(_worker) =
        Library::Dramatiq.spawn("dramatiq_fixture.py", &[&redis.url, "dramatiq", "hold"])
    else {
        return;
    };
    let app = TestApp::start(&config(&redis.url, &entry("dramatiq"))).await;
    let s = app
        .until("the worker holding slowq's messages", WAIT, |s| {
            state(s, "slowq", "active") == Some(1.0) && state(s, "slowq", "delayed") == Some(1.0)
        })
        .await;
    // Three sent and one delayed 600 s (in the delay queue's list: no
    // worker consumes default here).
    assert_eq!(state(&s, "default", "waiting"), Some(3.0), "{s}");
    assert_eq!(state(&s, "default", "delayed"), Some(1.0));
    assert_eq!(state(&s, "default", "active"), Some(0.0));
    assert_eq!(state(&s, "default", "failed"), Some(0.0));
    // The failing actor's message, nacked onto the dead-letter queue.
    assert_eq!(state(&s, "failing", "failed"), Some(1.0));
    assert_eq!(state(&s, "failing", "waiting"), Some(0.0));
    // slowq: one running, one delayed held in the worker's memory, whose
    // heartbeat is fresh.
    assert_eq!(state(&s, "slowq", "waiting"), Some(0.0));
    assert_eq!(gauge(&s, "queue_stalled_jobs", "slowq"), Some(0.0));
    // What Dramatiq does not keep has no series: no pause, no retry or
    // completed state, no overdue count (the eta is in each message).
    assert_eq!(gauge(&s, "queue_paused", "default"), None);
    assert_eq!(gauge(&s, "queue_overdue_jobs", "default"), None);
    for absent in ["retry", "completed"] {
        assert_eq!(state(&s, "default", absent), None, "{absent}");
    }
    let age = gauge(&s, "queue_oldest_message_age_seconds", "default").unwrap();
    let since_sent = wall() - sent / 1e3;
    assert!(
        (since_sent - 2.0..=since_sent + 0.5).contains(&age),
        "age {age}, sent {since_sent} s ago"
    );
    assert_eq!(
        gauge(&s, "queue_oldest_message_age_seconds", "slowq"),
        Some(0.0)
    );

    // KEDA: QueueLength on waiting, states summed, Age, IsActive. WaitTime:
    // Dramatiq keeps no finished job with its times, so processingTime is
    // required (as for every queue the exporter cannot measure), and with
    // it the arrival rate is unknown: no count of messages sent is kept.
    let mut c = client(&app).await;
    let q = [("queue", "default"), ("preset", "dramatiq")];
    assert_eq!(metrics(&mut c, &q).await.unwrap().1, 3.0);
    let qs = [("queue", "default"), ("state", "waiting,delayed")];
    assert_eq!(metrics(&mut c, &qs).await.unwrap().1, 4.0);
    assert!(active(&mut c, &q).await.unwrap());
    let (_, keda_age) = metrics(&mut c, &[("queue", "default"), ("mode", "Age")])
        .await
        .unwrap();
    assert!((age - 2.0..=age + 5.0).contains(&keda_age), "{keda_age}");
    let mut wait = vec![
        ("queue", "default"),
        ("mode", "WaitTime"),
        ("targetWait", "30s"),
    ];
    let e = metrics(&mut c, &wait).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("processingTime: required"), "{e:?}");
    wait.push(("processingTime", "1s"));
    let e = metrics(&mut c, &wait).await.unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    assert!(e.message().contains("its arrival rate is unknown"), "{e:?}");

    // Killed: its heartbeat stops, and after heartbeat_timeout its acks
    // are stalled; they stay active, and the delayed one stays delayed.
    drop(_worker);
    let s = app
        .wait_value(
            "queue_stalled_jobs",
            &[("queue", "slowq"), ("preset", "dramatiq")],
            1.0,
            WAIT,
        )
        .await;
    assert_eq!(state(&s, "slowq", "active"), Some(1.0), "{s}");
    assert_eq!(state(&s, "slowq", "delayed"), Some(1.0));

    // The broker's maintenance puts them back: waiting again, none stalled.
    fixture(&redis.url, "dramatiq", "maintain").expect("dramatiq installed");
    let s = app
        .until("slowq's message requeued", WAIT, |s| {
            state(s, "slowq", "waiting") == Some(1.0)
        })
        .await;
    assert_eq!(state(&s, "slowq", "active"), Some(0.0), "{s}");
    assert_eq!(gauge(&s, "queue_stalled_jobs", "slowq"), Some(0.0));
    assert_eq!(state(&s, "slowq", "delayed"), Some(1.0));
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_config_recognises_the_default_and_a_custom_namespace_and_no_key_of_them_is_plain() {
    let redis = RedisServer::start();
    let ns = "myapp:jobs";
    if fixture(&redis.url, "dramatiq", "setup").is_none()
        || fixture(&redis.url, ns, "setup").is_none()
    {
        return;
    }
    // A queue whose messages are all taken has no list left: only its
    // message hash and the worker's acks name it.
    let Some(_worker) = Library::Dramatiq.spawn("dramatiq_fixture.py", &[&redis.url, ns, "hold"])
    else {
        return;
    };
    let mut conn = redis.conn();
    rcmd(&mut conn, &["RPUSH", "tasks", "a"]);
    // Lookalikes under no heartbeats zset: an app's list beside a hash
    // named like a message hash stays a plain key.
    rcmd(&mut conn, &["RPUSH", "cache:user", "x"]);
    rcmd(&mut conn, &["HSET", "cache:user.msgs", "k", "v"]);
    let app = TestApp::start(&config(&redis.url, "")).await;
    // The custom namespace's queues share names with the default's, so
    // they are labelled by namespace.
    // slowq is the custom namespace's alone: its bare name.
    let held = "slowq";
    let s = app
        .until("both namespaces' queues", WAIT, |s| {
            state(s, "default", "waiting") == Some(3.0)
                && state(s, &format!("{ns}:default"), "waiting") == Some(3.0)
                && state(s, held, "active") == Some(1.0)
        })
        .await;
    assert_eq!(state(&s, "failing", "failed"), Some(1.0), "{s}");
    assert_eq!(state(&s, &format!("{ns}:failing"), "failed"), Some(1.0));
    assert_eq!(state(&s, "default", "delayed"), Some(1.0));
    assert_eq!(state(&s, held, "delayed"), Some(1.0));
    let plain = plain_depths(&s);
    assert_eq!(
        plain.keys().collect::<Vec<_>>(),
        ["cache:user", "tasks"],
        "{s}"
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_that_comes_and_goes_between_rounds() {
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    rcmd(&mut conn, &["RPUSH", "tasks", "a"]);
    let app = TestApp::start(&config(&redis.url, "")).await;
    app.until("the plain list", WAIT, |s| s.depth("tasks") == Some(1.0))
        .await;
    if fixture(&redis.url, "dramatiq", "burst").is_none() {
        return;
    }
    let s = app
        .until("the new queue", WAIT, |s| {
            state(s, "burst", "waiting") == Some(2.0)
        })
        .await;
    assert_eq!(
        plain_depths(&s).keys().collect::<Vec<_>>(),
        ["tasks"],
        "{s}"
    );
    let mut c = client(&app).await;
    let q = [("queue", "burst"), ("preset", "dramatiq")];
    assert_eq!(metrics(&mut c, &q).await.unwrap().1, 2.0);
    fixture(&redis.url, "dramatiq", "flush").expect("dramatiq installed");
    let s = app
        .until("the queue gone", WAIT, |s| {
            !s.has("queue_depth", &[("queue", "burst")])
        })
        .await;
    assert_eq!(s.depth("tasks"), Some(1.0), "{s}");
    assert_eq!(plain_depths(&s).len(), 1, "{s}");
    // Gone is empty: any queue may appear in a namespace, and none of its
    // keys is left.
    assert_eq!(metrics(&mut c, &q).await.unwrap().1, 0.0);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_redis_refuses_to_size_answers_unavailable_never_zero() {
    let redis = RedisServer::start();
    if fixture(&redis.url, "dramatiq", "setup").is_none() {
        return;
    }
    // LLEN only under `dramatiq:f*`: default's list is refused.
    let url = redis.acl_user(
        "qe",
        "pw",
        &[READ_ONLY_ACL, &["-llen", "(+llen ~dramatiq:f*)"]].concat(),
    );
    let app = TestApp::start(&config(&url, &entry("dramatiq"))).await;
    let s = app
        .until("default read but its list refused", WAIT, |s| {
            state(s, "default", "delayed") == Some(1.0)
                && s.errors("main", "auth").is_some_and(|n| n >= 1.0)
        })
        .await;
    // Waiting is unknown, and so is active (counted from it): no series.
    assert_eq!(state(&s, "default", "waiting"), None, "{s}");
    assert_eq!(state(&s, "default", "active"), None);
    assert_eq!(state(&s, "failing", "waiting"), Some(0.0));
    let mut c = client(&app).await;
    let e = metrics(&mut c, &[("queue", "default"), ("preset", "dramatiq")])
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    assert!(e.message().contains("default"), "{e:?}");
    let failing = [("queue", "failing"), ("preset", "dramatiq")];
    assert_eq!(metrics(&mut c, &failing).await.unwrap().1, 0.0);
    app.stop().await;
}

#[test]
fn discover_prints_an_entry_per_namespace_that_check_accepts() {
    let redis = RedisServer::start();
    if fixture(&redis.url, "dramatiq", "setup").is_none()
        || fixture(&redis.url, "myapp:jobs", "setup").is_none()
    {
        return;
    }
    let (ok, yaml, err) = run_exporter(&["discover", "--url", &redis.url]);
    assert!(ok, "{err}");
    assert!(
        yaml.contains(
            "# Dramatiq at prefix \"dramatiq\": default, failing\n      - preset: dramatiq\n"
        ),
        "{yaml}"
    );
    assert!(
        yaml.contains("      - preset: dramatiq\n        prefix: \"myapp:jobs\"\n"),
        "{yaml}"
    );
    // No Dramatiq key is printed as a plain key.
    assert!(!yaml.contains("key: \"dramatiq:"), "{yaml}");
    assert!(!yaml.contains("pattern: \"dramatiq:"), "{yaml}");
    let dir = tempfile::tempdir().unwrap();
    let path = write_file(&dir, "discovered.yaml", &yaml);
    let (ok, _, err) = run_exporter(&["check", "--config", path.to_str().unwrap()]);
    assert!(ok, "{err}\n{yaml}");
    let (ok, text, err) = run_exporter(&["once", "--config", path.to_str().unwrap()]);
    assert!(ok, "{err}\n{yaml}");
    let s = Scrape::parse(&text);
    assert_eq!(state(&s, "default", "waiting"), Some(3.0), "{text}");
    assert_eq!(state(&s, "myapp:jobs:default", "waiting"), Some(3.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_entry_on_a_queues_list_gives_it_the_arrivals_wait_time_needs() {
    let redis = RedisServer::start();
    if fixture(&redis.url, "dramatiq", "setup").is_none() {
        return;
    }
    // A total the producers INCR beside each send (Dramatiq keeps none).
    rcmd(&mut redis.conn(), &["SET", "default:sent", "3"]);
    let queues = format!(
        "{}- key: dramatiq:default\n  counters: {{ enqueued: \"default:sent\" }}\n",
        entry("dramatiq")
    );
    let app = TestApp::start(&config(&redis.url, &queues)).await;
    let s = app
        .until("the counter on the queue", WAIT, |s| {
            gauge(s, "queue_messages_published_total", "default") == Some(3.0)
        })
        .await;
    // Counted once, as the queue: the list has no series of its own.
    assert!(
        !s.has("queue_depth", &[("queue", "dramatiq:default")]),
        "{s}"
    );
    let mut c = client(&app).await;
    let wait = [
        ("queue", "default"),
        ("preset", "dramatiq"),
        ("mode", "WaitTime"),
        ("targetWait", "30s"),
        ("processingTime", "1s"),
    ];
    let deadline = std::time::Instant::now() + WAIT;
    let replicas = loop {
        match metrics(&mut c, &wait).await {
            Ok((_, v)) => break v,
            Err(e) if std::time::Instant::now() < deadline => {
                assert_eq!(e.code(), Code::Unavailable, "{e:?}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("WaitTime never answered: {e:?}"),
        }
    };
    // Three waiting, 1 s each, within 30 s, and no arrivals: a tenth of a worker.
    assert!((replicas - 0.1).abs() < 1e-9, "{replicas}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_sent_to_in_a_known_namespace_is_found_by_a_library_round_between_scans() {
    let redis = RedisServer::start();
    if fixture(&redis.url, "dramatiq", "setup").is_none() {
        return;
    }
    // One scan, then library rounds only: they list the namespace's
    // queues again by their message hashes.
    let yaml = format!("{}    keyspace_scan_interval: 1h\n", config(&redis.url, ""));
    let app = TestApp::start(&yaml).await;
    app.until("the namespace's queues", WAIT, |s| {
        state(s, "default", "waiting") == Some(3.0)
    })
    .await;
    fixture(&redis.url, "dramatiq", "burst").expect("dramatiq installed");
    let s = app
        .until("the new queue, between scans", WAIT, |s| {
            state(s, "burst", "waiting") == Some(2.0)
        })
        .await;
    let rounds = |kind: &str| {
        s.value(
            "queue_exporter_discovery_rounds_total",
            &[("source", "main"), ("round", kind)],
        )
    };
    assert_eq!(rounds("full"), Some(1.0), "{s}");
    assert!(rounds("libraries").is_some_and(|n| n >= 1.0), "{s}");
    assert!(plain_depths(&s).is_empty(), "{s}");
    fixture(&redis.url, "dramatiq", "flush").expect("dramatiq installed");
    app.until("the queue gone, between scans", WAIT, |s| {
        !s.has("queue_depth", &[("queue", "burst")])
    })
    .await;
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_config_leaves_out_a_queue_whose_message_hash_redis_refuses_and_names_it_unknown() {
    let redis = RedisServer::start();
    if fixture(&redis.url, "dramatiq", "setup").is_none() {
        return;
    }
    // HLEN only under `dramatiq:d*`: failing's dead-letter hash, the mark
    // that names it, is refused.
    let url = redis.acl_user(
        "qe",
        "pw",
        &[READ_ONLY_ACL, &["-hlen", "(+hlen ~dramatiq:d*)"]].concat(),
    );
    let app = TestApp::start(&config(&url, "")).await;
    let s = app
        .until("default recognised and the refusal counted", WAIT, |s| {
            state(s, "default", "waiting") == Some(3.0)
                && s.errors("main", "auth").is_some_and(|n| n >= 1.0)
        })
        .await;
    // Its dead-letter zset is neither the library's nor a plain key.
    assert!(!s.has("queue_depth", &[("queue", "failing")]), "{s}");
    assert!(plain_depths(&s).is_empty(), "{s}");
    let mut c = client(&app).await;
    let e = metrics(&mut c, &[("queue", "failing"), ("state", "failed")])
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    assert!(e.message().contains("failing.XQ.msgs"), "{e:?}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_config_with_a_heartbeats_zset_redis_refuses_answers_no_name_with_a_number() {
    let redis = RedisServer::start();
    if fixture(&redis.url, "dramatiq", "setup").is_none() {
        return;
    }
    // ZRANGE refused: whose keys those under the namespace are is unknown,
    // and a queue may have only hashes, which no scan types.
    let url = redis.acl_user("qe", "pw", &[READ_ONLY_ACL, &["-zrange"]].concat());
    let app = TestApp::start(&config(&url, "")).await;
    let s = app
        .until("the refusal counted", WAIT, |s| {
            s.errors("main", "auth").is_some_and(|n| n >= 1.0)
        })
        .await;
    assert!(!s.has("queue_depth", &[]), "{s}");
    let mut c = client(&app).await;
    // `failing` has a dead-letter zset alone: its name is no part of a key.
    for q in ["default", "failing", "anything"] {
        let e = metrics(&mut c, &[("queue", q)]).await.unwrap_err();
        assert_eq!(e.code(), Code::Unavailable, "{q}: {e:?}");
        assert!(e.message().contains("dramatiq:__heartbeats__"), "{e:?}");
    }
    app.stop().await;
}
