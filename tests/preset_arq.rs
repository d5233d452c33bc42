//! arq (PyPI `arq` 0.28) end to end: the real library writes its keys into a
//! private Redis through `tests/fixtures/presets/arq_fixture.py` (arq's own
//! `enqueue_job` and `Worker`: jobs enqueued, deferred, re-queued by
//! `Retry`, failed, and one started by a worker that is then killed), and
//! the exporter reads them as `- preset: arq` and with zero config; KEDA
//! asks through the real gRPC client.
//!
//! arq missing fails these tests (`scripts/setup-services` installs it);
//! `QUEUE_EXPORTER_ALLOW_MISSING_LIBS=1` skips them outside CI.
mod scaler_common;
mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use scaler_common::*;
use support::*;
use tonic::Code;

/// Runs the arq fixture with `args` against `url`: `None` only when arq is
/// missing and a skip is allowed.
fn arq(url: &str, args: &[&str]) -> Option<String> {
    let script = fixture("arq_fixture.py");
    let all: Vec<&str> = [script.as_str(), url]
        .into_iter()
        .chain(args.iter().copied())
        .collect();
    run_fixture(
        "arq (pip install --no-deps arq==0.28.0)",
        &["python3", "-c", "import arq"],
        "python3",
        &all,
    )
}

/// A number from the fixture's JSON line: `"<name>": <n>`.
fn field(out: &str, name: &str) -> f64 {
    out.split(&format!("\"{name}\": "))
        .nth(1)
        .and_then(|r| r.split([',', '}']).next())
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name} in fixture output {out}"))
}

/// The fixture's queues, as `- preset: arq` names them.
const QUEUES: &str = "[arq:queue, arq:retrying, arq:failing, app:slow]";

/// One Redis source over `url` polling every 100 ms, rediscovering every
/// 200 ms, with `queues` (YAML, flush left; none: zero config).
fn config(url: &str, queues: &str) -> String {
    let mut yaml = format!(
        "listen: {{ grpc: 127.0.0.1:0 }}\nsources:\n  - name: main\n    type: redis\n    url: {url}\n    poll_interval: 100ms\n    discovery_interval: 200ms\n"
    );
    if !queues.is_empty() {
        yaml.push_str(&format!("    queues:\n{}", indent(queues, 6)));
    }
    yaml
}

/// The preset entry over the fixture's queues.
fn preset() -> String {
    format!("- preset: arq\n  queues: {QUEUES}\n")
}

/// `queue_depth` of plain keys (no `preset` label), by queue.
fn plain_depths(s: &Scrape) -> BTreeMap<String, f64> {
    s.samples("queue_depth", &[])
        .filter(|x| x.labels.get("preset").is_none())
        .filter_map(|x| {
            let v = match x.value {
                prometheus_parse::Value::Gauge(v) | prometheus_parse::Value::Untyped(v) => v,
                _ => return None,
            };
            Some((x.labels.get("queue")?.to_string(), v))
        })
        .collect()
}

fn gauge(s: &Scrape, name: &str, queue: &str) -> Option<f64> {
    s.value(name, &[("queue", queue), ("preset", "arq")])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arq_states_after_real_jobs_enqueued_deferred_retried_failed_and_a_killed_worker() {
    let redis = RedisServer::start();
    let before = wall();
    let Some(out) = arq(&redis.url, &["states"]) else {
        return;
    };
    let after = wall();
    let app = TestApp::start(&config(&redis.url, &preset())).await;
    let s = app
        .scrape_until("arq queues", Duration::from_secs(20), |s| {
            depth(s, "app:slow", "arq", "active") == Some(1.0)
        })
        .await;
    let states =
        |q: &str| ["waiting", "active", "retry", "delayed"].map(|st| depth(&s, q, "arq", st));
    // 3 enqueued, 1 deferred by 600 s.
    assert_eq!(states("arq:queue"), [3.0, 0.0, 0.0, 1.0].map(Some), "{s}");
    // Retry(): due again, run once; Retry(defer=600): delayed.
    assert_eq!(states("arq:retrying"), [0.0, 0.0, 1.0, 1.0].map(Some));
    // The failed job left the queue (its result is pickled, in no
    // per-queue set); the job enqueued after it waits.
    assert_eq!(states("arq:failing"), [1.0, 0.0, 0.0, 0.0].map(Some));
    assert_eq!(states("app:slow"), [0.0, 1.0, 0.0, 0.0].map(Some));
    for q in ["arq:queue", "arq:failing"] {
        // Finished jobs cannot be counted per queue: absent, never 0.
        assert_eq!(depth(&s, q, "arq", "completed"), None, "{q}");
        assert_eq!(depth(&s, q, "arq", "failed"), None, "{q}");
        // arq has no pause, no lock to tell a stalled job, no mover of due
        // jobs (workers take them from the zset): no such gauges.
        for g in ["queue_paused", "queue_stalled_jobs", "queue_overdue_jobs"] {
            assert_eq!(gauge(&s, g, q), None, "{g} {q}");
        }
        assert_eq!(gauge(&s, "queue_service_time_seconds", q), None);
    }
    let age = gauge(&s, "queue_oldest_message_age_seconds", "arq:queue").unwrap();
    let (lo, hi) = (wall() - after - 1.0, wall() - before + 1.0);
    assert!((lo..=hi).contains(&age), "age {age} not in {lo}..{hi}");
    // app:slow's one job runs: nothing waits there.
    assert_eq!(
        gauge(&s, "queue_oldest_message_age_seconds", "app:slow"),
        Some(0.0)
    );

    // The killed worker's in-progress key expires (job timeout 10 s + 10 s):
    // the job is due again, run once: retry, as arq will run it again.
    let wait = field(&out, "then_retry_after_ms") / 1e3 + 10.0;
    let s = app
        .scrape_until(
            "the killed job due again",
            Duration::from_secs_f64(wait),
            |s| depth(s, "app:slow", "arq", "retry") == Some(1.0),
        )
        .await;
    assert_eq!(depth(&s, "app:slow", "arq", "active"), Some(0.0), "{s}");
    assert!(gauge(&s, "queue_oldest_message_age_seconds", "app:slow").unwrap() >= 10.0);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keda_reads_waiting_states_and_age_and_wait_time_names_what_arq_lacks() {
    let redis = RedisServer::start();
    let before = wall();
    if arq(&redis.url, &["states"]).is_none() {
        return;
    }
    let app = TestApp::start(&config(&redis.url, &preset())).await;
    app.scrape_until("arq:queue", Duration::from_secs(15), |s| {
        depth(s, "arq:queue", "arq", "waiting") == Some(3.0)
    })
    .await;
    let mut c = client(&app).await;
    let q = [("queue", "arq:queue"), ("preset", "arq")];
    assert_eq!(metrics(&mut c, &q).await.unwrap().1, 3.0);
    assert!(active(&mut c, &q).await.unwrap());
    let qs = [
        ("queue", "arq:retrying"),
        ("state", "waiting,retry,delayed"),
    ];
    assert_eq!(metrics(&mut c, &qs).await.unwrap().1, 2.0);
    let age = [("queue", "arq:queue"), ("mode", "Age")];
    let (_, a) = metrics(&mut c, &age).await.unwrap();
    assert!(a > 0.0 && a <= wall() - before + 1.0, "age {a}");

    // Finished jobs are not countable per queue: unknown, never 0.
    let failed = [("queue", "arq:failing"), ("state", "failed")];
    let e = metrics(&mut c, &failed).await.unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    assert!(e.message().contains("failed"), "{}", e.message());

    // arq keeps no count of jobs enqueued or processed: no arrival rate.
    let wait = [
        ("queue", "arq:queue"),
        ("preset", "arq"),
        ("mode", "WaitTime"),
        ("targetWait", "10s"),
        ("processingTime", "1s"),
        ("window", "2s"),
    ];
    let e = metrics(&mut c, &wait).await.unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    assert!(
        e.message().contains("arrival rate is unknown"),
        "{}",
        e.message()
    );
    // Nor a service time it can read: processingTime is required, as for
    // every library that keeps none readable.
    let unset: Vec<(&str, &str)> = wait
        .iter()
        .copied()
        .filter(|(k, _)| *k != "processingTime")
        .collect();
    let e = metrics(&mut c, &unset).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(
        e.message()
            .starts_with("scalerMetadata.processingTime: required for queue \"arq:queue\""),
        "{}",
        e.message()
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_config_recognises_arqs_default_and_custom_queues_and_no_key_of_it_is_plain() {
    let redis = RedisServer::start();
    if arq(&redis.url, &["states"]).is_none() {
        return;
    }
    let mut conn = redis.conn();
    rcmd(&mut conn, &["RPUSH", "tasks", "a"]);
    rcmd(&mut conn, &["ZADD", "app:zset", "1", "m"]);
    let app = TestApp::start(&config(&redis.url, "")).await;
    let s = app
        .scrape_until("arq recognised", Duration::from_secs(20), |s| {
            depth(s, "app:slow", "arq", "active").is_some()
                && depth(s, "arq:queue", "arq", "waiting") == Some(3.0)
        })
        .await;
    // The killed worker's job: active, or due again once its key expired.
    let slow = ["active", "retry"].map(|st| depth(&s, "app:slow", "arq", st).unwrap_or(-1.0));
    assert_eq!(slow[0] + slow[1], 1.0, "{s}");
    // arq's default queue, a custom one in its `arq:` namespace, and one
    // outside it known by its worker's health check: each as configured.
    assert_eq!(depth(&s, "arq:queue", "arq", "delayed"), Some(1.0), "{s}");
    assert_eq!(depth(&s, "arq:retrying", "arq", "retry"), Some(1.0), "{s}");
    assert_eq!(depth(&s, "arq:failing", "arq", "waiting"), Some(1.0), "{s}");
    // `arq:abort`, the queues' zsets, the job keys: none is a plain key.
    let plain = plain_depths(&s);
    assert_eq!(
        plain.keys().collect::<Vec<_>>(),
        ["app:zset", "tasks"],
        "{s}"
    );
    app.stop().await;

    // The libraries alone (no `TYPE` of every name): the same queues.
    let yaml = config(&redis.url, "").replace(
        "    discovery_interval: 200ms\n",
        "    discovery_interval: 200ms\n    plain_keys: false\n",
    );
    let app = TestApp::start(&yaml).await;
    let s = app
        .scrape_until("arq recognised alone", Duration::from_secs(20), |s| {
            depth(s, "app:slow", "arq", "active").is_some()
                && depth(s, "arq:queue", "arq", "waiting") == Some(3.0)
        })
        .await;
    assert_eq!(depth(&s, "arq:retrying", "arq", "retry"), Some(1.0), "{s}");
    assert_eq!(depth(&s, "arq:failing", "arq", "waiting"), Some(1.0), "{s}");
    assert!(plain_depths(&s).is_empty(), "{s}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_arq_queue_that_comes_and_goes_between_discovery_rounds() {
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    rcmd(&mut conn, &["RPUSH", "tasks", "a"]);
    let app = TestApp::start(&config(&redis.url, "")).await;
    app.scrape_until("the plain list", Duration::from_secs(10), |s| {
        s.depth("tasks") == Some(1.0)
    })
    .await;
    if arq(&redis.url, &["enqueue", "arq:emails", "2"]).is_none() {
        return;
    }
    let s = app
        .scrape_until("the new arq queue", Duration::from_secs(30), |s| {
            depth(s, "arq:emails", "arq", "waiting") == Some(2.0)
        })
        .await;
    assert_eq!(
        plain_depths(&s).keys().collect::<Vec<_>>(),
        ["tasks"],
        "{s}"
    );
    // A worker drains it: arq's zset is deleted with its last job.
    arq(&redis.url, &["drain", "arq:emails"]);
    let s = app
        .scrape_until("the queue gone", Duration::from_secs(30), |s| {
            !s.has("queue_depth", &[("queue", "arq:emails")])
        })
        .await;
    assert_eq!(
        plain_depths(&s).keys().collect::<Vec<_>>(),
        ["tasks"],
        "{s}"
    );
    // Zero config may see any name again: drained reads 0, not unknown.
    let mut c = client(&app).await;
    let q = [("queue", "arq:emails")];
    assert_eq!(metrics(&mut c, &q).await.unwrap().1, 0.0);
    arq(&redis.url, &["enqueue", "arq:emails", "1"]);
    app.scrape_until("the queue back", Duration::from_secs(30), |s| {
        depth(s, "arq:emails", "arq", "waiting") == Some(1.0)
    })
    .await;
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_in_progress_check_is_unavailable_never_zero() {
    let redis = RedisServer::start();
    if arq(&redis.url, &["states"]).is_none() {
        return;
    }
    // Read-only, and every key but arq's in-progress markers.
    let url = redis.acl_user(
        "ro",
        "pw",
        &[
            "-@all",
            "+@read",
            "+@connection",
            "~arq:queue",
            "~arq:retrying",
            "~arq:failing",
            "~app:slow",
            "~arq:retry:*",
        ],
    );
    let app = TestApp::start(&config(&url, &preset())).await;
    let s = app
        .scrape_until("arq:queue read", Duration::from_secs(15), |s| {
            depth(s, "arq:queue", "arq", "delayed") == Some(1.0)
        })
        .await;
    // Which due job runs is unknown: the split is absent, not 0.
    for st in ["waiting", "active", "retry"] {
        assert_eq!(depth(&s, "arq:queue", "arq", st), None, "{st}\n{s}");
    }
    assert_eq!(
        gauge(&s, "queue_oldest_message_age_seconds", "arq:queue"),
        None
    );
    assert!(s.errors("main", "auth").unwrap_or(0.0) > 0.0, "{s}");
    let mut c = client(&app).await;
    let q = [("queue", "arq:queue"), ("preset", "arq")];
    let e = metrics(&mut c, &q).await.unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    assert!(e.message().contains("waiting"), "{}", e.message());
    let e = active(&mut c, &q).await.unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    // `delayed` needs no check: it still answers.
    let d = [("queue", "arq:queue"), ("state", "delayed")];
    assert_eq!(metrics(&mut c, &d).await.unwrap().1, 1.0);
    app.stop().await;
}

#[test]
fn discover_prints_arq_and_once_reads_it_as_zero_config_does() {
    let redis = RedisServer::start();
    if arq(&redis.url, &["states"]).is_none() {
        return;
    }
    let (ok, yaml, err) = run_exporter(&["discover", "--url", &redis.url]);
    assert!(ok, "{err}");
    assert!(
        yaml.contains(
            "- preset: arq\n        queues: [\"app:slow\", \"arq:failing\", \"arq:queue\", \"arq:retrying\"]\n"
        ),
        "{yaml}"
    );
    assert!(!yaml.contains("arq:abort"), "{yaml}");
    let dir = tempfile::tempdir().unwrap();
    let path = write_file(&dir, "discovered.yaml", &yaml);
    let (ok, out, err) = run_exporter(&["check", "--config", path.to_str().unwrap()]);
    assert!(ok && out.contains(": ok (1 sources)"), "{out}{err}\n{yaml}");
    let (ok, text, err) = run_exporter(&["once", "--config", path.to_str().unwrap()]);
    assert!(ok, "{err}");
    let s = Scrape::parse(&text);
    assert_eq!(
        depth(&s, "arq:queue", "arq", "waiting"),
        Some(3.0),
        "{text}"
    );
    assert_eq!(
        depth(&s, "arq:retrying", "arq", "retry"),
        Some(1.0),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_entry_on_an_arq_queue_gives_it_the_arrivals_its_producers_count() {
    let redis = RedisServer::start();
    if arq(&redis.url, &["enqueue", "arq:queue", "2"]).is_none() {
        return;
    }
    let mut conn = redis.conn();
    // What the app's producers INCR beside each `enqueue_job`.
    rcmd(&mut conn, &["SET", "arq:enqueued", "2"]);
    let queues = "- preset: arq\n- key: arq:queue\n  counters: { enqueued: arq:enqueued }\n";
    let app = TestApp::start(&config(&redis.url, queues)).await;
    let s = app
        .scrape_until(
            "the counter on the arq queue",
            Duration::from_secs(15),
            |s| gauge(s, "queue_messages_published_total", "arq:queue") == Some(2.0),
        )
        .await;
    // Counted once, as the arq queue: the key has no series of its own.
    assert_eq!(depth(&s, "arq:queue", "arq", "waiting"), Some(2.0), "{s}");
    assert!(plain_depths(&s).is_empty(), "{s}");
    let c = client(&app).await;
    let wait = [
        ("queue", "arq:queue"),
        ("preset", "arq"),
        ("mode", "WaitTime"),
        ("targetWait", "10s"),
        ("processingTime", "1s"),
        ("window", "2s"),
    ];
    // No arrivals in the window: 2 jobs of 1 s to start within 10 s.
    wait_value_for(&c, &wait, 0.2, Duration::from_secs(15)).await;
    app.stop().await;
}
