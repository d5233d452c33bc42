//! Huey end to end: real Huey (pip `huey`, `RedisHuey` and
//! `PriorityRedisHuey`) writes its keys into a private Redis through
//! `tests/fixtures/presets/huey_fixture.py`, which runs, fails, retries and
//! schedules tasks with Huey's own worker step and leaves tasks waiting.
//! The exporter must report each Huey instance as one queue (`preset:
//! huey`): `waiting` (priorities counted once), `delayed` (the schedule,
//! overdue jobs counted), `completed` (stored results); the oldest age only
//! where Huey keeps a stamp outside the pickle; and answer KEDA through a
//! real gRPC client, `UNAVAILABLE` for what Huey does not keep.
mod scaler_common;
mod support;

use std::time::Duration;

use scaler_common::*;
use support::*;

const WAIT: Duration = Duration::from_secs(20);

/// One Redis source `main` over `url` polling every 100 ms, rediscovering
/// every 200 ms, with `queues` (a YAML list, flush left; none: zero config).
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

/// What the fixture reports Huey itself counts.
struct Counts {
    waiting: f64,
    delayed: f64,
    overdue: f64,
    completed: f64,
}

/// Runs the fixture for the Huey instance `name` with `flags`; `None` only
/// when Huey is missing and a skip is allowed (never under CI).
fn huey(url: &str, name: &str, flags: &[&str]) -> Option<Counts> {
    let args: Vec<&str> = [url, name]
        .into_iter()
        .chain(flags.iter().copied())
        .collect();
    let out = Library::Huey.run("huey_fixture.py", &args)?;
    if flags.contains(&"flush") {
        return Some(Counts {
            waiting: 0.0,
            delayed: 0.0,
            overdue: 0.0,
            completed: 0.0,
        });
    }
    let v: serde_json::Value = serde_json::from_str(out.trim()).expect("fixture JSON");
    let n = |k: &str| v[k].as_f64().unwrap_or_else(|| panic!("{k} in {out}"));
    Some(Counts {
        waiting: n("waiting"),
        delayed: n("delayed"),
        overdue: n("overdue"),
        completed: n("completed"),
    })
}

fn gauge(s: &Scrape, name: &str, queue: &str) -> Option<f64> {
    s.value(name, &[("queue", queue), ("preset", "huey")])
}

fn age(s: &Scrape, queue: &str) -> Option<f64> {
    gauge(s, "queue_oldest_message_age_seconds", queue)
}

/// The states Huey's own counts give, as `/metrics` must show them.
fn assert_states(s: &Scrape, queue: &str, c: &Counts) {
    assert_eq!(depth(s, queue, "huey", "waiting"), Some(c.waiting), "{s}");
    assert_eq!(depth(s, queue, "huey", "delayed"), Some(c.delayed), "{s}");
    assert_eq!(
        depth(s, queue, "huey", "completed"),
        Some(c.completed),
        "{s}"
    );
    assert_eq!(gauge(s, "queue_overdue_jobs", queue), Some(c.overdue));
    // Huey keeps nothing in Redis for these: no series rather than a 0.
    for state in ["active", "failed", "retry"] {
        assert_eq!(depth(s, queue, "huey", state), None, "{state}: {s}");
    }
    assert_eq!(gauge(s, "queue_stalled_jobs", queue), None);
    assert_eq!(gauge(s, "queue_paused", queue), None);
}

/// Every plain key's name (no `preset` label) on `queue_depth`.
fn plain_keys(s: &Scrape) -> Vec<String> {
    let mut v: Vec<String> = s
        .samples("queue_depth", &[])
        .filter(|x| x.labels.get("preset").is_none())
        .map(|x| x.labels.get("queue").unwrap_or_default().to_string())
        .collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_huey_queue_has_its_waiting_scheduled_overdue_and_stored_results() {
    let redis = RedisServer::start();
    let Some(c) = huey(&redis.url, "huey", &[]) else {
        return;
    };
    assert_eq!(
        (c.waiting, c.delayed, c.overdue, c.completed),
        (3.0, 3.0, 1.0, 4.0)
    );
    let app = TestApp::start(&config(&redis.url, "- preset: huey\n")).await;
    let s = app
        .scrape_until("huey's queue", WAIT, |s| {
            depth(s, "huey", "huey", "waiting").is_some()
        })
        .await;
    assert_states(&s, "huey", &c);
    // A list message is a pickle with no enqueue time: the age is unknown.
    assert_eq!(age(&s, "huey"), None, "{s}");

    let mut g = client(&app).await;
    let q = [("queue", "huey"), ("preset", "huey")];
    assert_eq!(metrics(&mut g, &q).await.unwrap().1, 3.0);
    assert!(active(&mut g, &q).await.unwrap());
    let sum = [("queue", "huey"), ("state", "waiting,delayed")];
    assert_eq!(metrics(&mut g, &sum).await.unwrap().1, 6.0);
    let err = metrics(&mut g, &[("queue", "huey"), ("mode", "Age")])
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unavailable, "{err:?}");
    assert!(err.message().contains("age"), "{}", err.message());
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_priority_huey_queue_counts_each_job_once_whatever_its_priority() {
    let redis = RedisServer::start();
    let Some(c) = huey(&redis.url, "prio", &["priority"]) else {
        return;
    };
    let app = TestApp::start(&config(&redis.url, "- preset: huey\n  name: prio\n")).await;
    let s = app
        .scrape_until("the priority queue", WAIT, |s| {
            depth(s, "prio", "huey", "waiting").is_some()
        })
        .await;
    // Priorities 0, 5, 5: three jobs, each once.
    assert_eq!(c.waiting, 3.0);
    assert_states(&s, "prio", &c);
    // Its members carry their enqueue time, but the oldest may wait at any
    // priority: unknown, not the next job's.
    assert_eq!(age(&s, "prio"), None, "{s}");
    let mut g = client(&app).await;
    assert_eq!(metrics(&mut g, &[("queue", "prio")]).await.unwrap().1, 3.0);
    let err = metrics(&mut g, &[("queue", "prio"), ("mode", "Age")])
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unavailable, "{err:?}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_time_names_what_huey_does_not_keep() {
    let redis = RedisServer::start();
    if huey(&redis.url, "busy", &[]).is_none() {
        return;
    }
    let mut conn = redis.conn();
    rcmd(&mut conn, &["SET", "busy:enqueued", "10"]);
    rcmd(&mut conn, &["SET", "idle:enqueued", "10"]);
    // `idle` and `bare` hold no job; only `busy` and `idle` have a counter.
    let app = TestApp::start(&config(
        &redis.url,
        "- preset: huey\n  name: busy\n  counters: { enqueued: busy:enqueued }\n\
         - preset: huey\n  name: idle\n  counters: { enqueued: idle:enqueued }\n\
         - preset: huey\n  name: bare\n",
    ))
    .await;
    app.scrape_until("the three queues", WAIT, |s| {
        depth(s, "busy", "huey", "waiting") == Some(3.0)
            && depth(s, "idle", "huey", "waiting") == Some(0.0)
            && depth(s, "bare", "huey", "waiting") == Some(0.0)
    })
    .await;
    let g = client(&app).await;
    let wait = |queue: &'static str, processing: bool| {
        let mut m = vec![
            ("queue", queue),
            ("mode", "WaitTime"),
            ("targetWait", "10s"),
            ("window", "2s"),
        ];
        if processing {
            m.push(("processingTime", "1s"));
        }
        m
    };
    // Huey keeps no start and end times: processingTime is required.
    let err = metrics(&mut g.clone(), &wait("busy", false))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert!(
        err.message().contains("processingTime"),
        "{}",
        err.message()
    );
    // Jobs wait and their enqueue time is in the pickle: unknown, named.
    let err = metrics(&mut g.clone(), &wait("busy", true))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unavailable, "{err:?}");
    assert!(err.message().contains("oldest age"), "{}", err.message());
    // No arrival counter of Huey's own: unknown, named.
    let err = metrics(&mut g.clone(), &wait("bare", true))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unavailable, "{err:?}");
    assert!(err.message().contains("arrival rate"), "{}", err.message());
    // With `counters: enqueued`, processingTime and nothing waiting: an
    // answer, no worker needed.
    wait_value_for(&g, &wait("idle", true), 0.0, WAIT).await;
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_config_recognises_huey_at_its_default_and_a_custom_name_and_no_key_is_plain() {
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    rcmd(&mut conn, &["RPUSH", "tasks", "a"]);
    // Named like Huey's keys, but no name Huey writes (`clean_name`), or
    // not the type Huey gives that key: an app's keys, plain.
    rcmd(&mut conn, &["RPUSH", "huey.redis.a.b", "x"]);
    rcmd(&mut conn, &["ZADD", "huey.results.other", "1", "x"]);
    // With result notifications: a `huey.notify.huey.<id>` list per result.
    let Some(default) = huey(&redis.url, "huey", &["notify"]) else {
        return;
    };
    let Some(custom) = huey(&redis.url, "myapp_2", &["priority"]) else {
        return;
    };
    let app = TestApp::start(&config(&redis.url, "")).await;
    let s = app
        .scrape_until("both Huey instances", WAIT, |s| {
            depth(s, "huey", "huey", "waiting").is_some()
                && depth(s, "myapp_2", "huey", "waiting").is_some()
        })
        .await;
    assert_states(&s, "huey", &default);
    assert_states(&s, "myapp_2", &custom);
    assert_eq!(
        plain_keys(&s),
        ["huey.redis.a.b", "huey.results.other", "tasks"],
        "{s}"
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huey_queue_appears_and_disappears_between_discovery_rounds() {
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    rcmd(&mut conn, &["RPUSH", "tasks", "a"]);
    let app = TestApp::start(&config(&redis.url, "")).await;
    app.scrape_until("the plain list", WAIT, |s| s.depth("tasks") == Some(1.0))
        .await;
    let Some(c) = huey(&redis.url, "late", &[]) else {
        return;
    };
    let s = app
        .scrape_until("the new Huey queue", Duration::from_secs(30), |s| {
            depth(s, "late", "huey", "waiting") == Some(c.waiting)
        })
        .await;
    assert_states(&s, "late", &c);
    assert_eq!(plain_keys(&s), ["tasks"], "{s}");
    // Huey's own flush() deletes its queue, schedule and results.
    huey(&redis.url, "late", &["flush"]).expect("huey ran before");
    let s = app
        .scrape_until("the queue gone", Duration::from_secs(30), |s| {
            !s.has("queue_depth", &[("queue", "late")])
        })
        .await;
    assert_eq!(plain_keys(&s), ["tasks"], "{s}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_read_is_unavailable_never_zero() {
    let redis = RedisServer::start();
    if huey(&redis.url, "huey", &[]).is_none() {
        return;
    }
    // Every read but LLEN and HLEN: the queue's length and the results'
    // count are refused (NOPERM), the schedule stays readable.
    let url = redis.acl_user("qe", "pw", &[READ_ONLY_ACL, &["-llen", "-hlen"]].concat());
    let app = TestApp::start(&config(&url, "- preset: huey\n")).await;
    let s = app
        .scrape_until("the refusal counted", WAIT, |s| {
            depth(s, "huey", "huey", "delayed").is_some()
                && s.errors("main", "auth").is_some_and(|n| n >= 1.0)
        })
        .await;
    assert_eq!(depth(&s, "huey", "huey", "waiting"), None, "{s}");
    assert_eq!(depth(&s, "huey", "huey", "completed"), None, "{s}");
    assert_eq!(depth(&s, "huey", "huey", "delayed"), Some(3.0), "{s}");
    assert_eq!(s.source_up("main"), Some(1.0));
    let mut g = client(&app).await;
    for q in [
        vec![("queue", "huey")],
        vec![("queue", "huey"), ("state", "completed")],
    ] {
        let err = metrics(&mut g, &q).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::Unavailable, "{q:?}: {err:?}");
    }
    assert_eq!(
        metrics(&mut g, &[("queue", "huey"), ("state", "delayed")])
            .await
            .unwrap()
            .1,
        3.0
    );
    app.stop().await;
}

#[test]
fn discover_prints_each_huey_instance_as_an_entry_and_plain_keys_false_finds_them() {
    let redis = RedisServer::start();
    if huey(&redis.url, "huey", &[]).is_none() || huey(&redis.url, "myapp", &["priority"]).is_none()
    {
        return;
    }
    let (ok, yaml, err) = run_exporter(&["discover", "--url", &redis.url]);
    assert!(ok, "{err}");
    assert!(yaml.contains("preset: huey"), "{yaml}");
    assert!(yaml.contains("name: \"myapp\""), "{yaml}");
    // Each entry `discover` prints reads what zero config reads.
    let dir = tempfile::tempdir().unwrap();
    let path = write_file(&dir, "discovered.yaml", &yaml);
    let (ok, text, err) = run_exporter(&["once", "--config", path.to_str().unwrap()]);
    assert!(ok, "{err}\n{yaml}");
    let s = Scrape::parse(&text);
    assert_eq!(depth(&s, "huey", "huey", "waiting"), Some(3.0), "{text}");
    assert_eq!(depth(&s, "myapp", "huey", "waiting"), Some(3.0), "{text}");
    assert_eq!(plain_keys(&s), Vec::<String>::new(), "{text}");
    // Zero config with `plain_keys: false` (Huey's names are its evidence,
    // typed on their own) finds the same queues.
    let libs = write_file(
        &dir,
        "libs.yaml",
        &format!(
            "sources:\n  - name: redis\n    type: redis\n    url: {}\n    plain_keys: false\n",
            redis.url
        ),
    );
    let (ok, text, err) = run_exporter(&["once", "--config", libs.to_str().unwrap()]);
    assert!(ok, "{err}");
    let s = Scrape::parse(&text);
    for q in ["huey", "myapp"] {
        assert_eq!(depth(&s, q, "huey", "waiting"), Some(3.0), "{q}: {text}");
        assert_eq!(depth(&s, q, "huey", "delayed"), Some(3.0), "{q}: {text}");
    }
}
