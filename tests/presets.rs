//! Library presets end to end: real libraries (RQ, Sidekiq, Celery, BullMQ, Bull,
//! node-resque) write
//! real keys into a private Redis through the fixture scripts under
//! `tests/fixtures/presets/`; asynq, rediswq and the priority-zset layout
//! are built here key by key from their documented layouts (asynq's Go
//! client does not run on these machines). Each test asserts exact
//! per-state counts, latency within a tolerance, stalled counts, and one
//! KEDA GetMetrics/IsActive through the gRPC client.
//!
//! A library that is not installed fails its test, naming the library and
//! how to install it (`scripts/setup-services` installs them all).
//! `QUEUE_EXPORTER_ALLOW_MISSING_LIBS=1` lets a developer without, say,
//! Ruby skip those tests instead, with a loud message on stderr; CI
//! (`CI` set, as `.ci/run` does) ignores it: there a missing library always
//! fails.
mod scaler_common;
mod support;

use std::process::Command;
use std::time::Duration;

use scaler_common::*;
use support::*;

/// One Redis source `main` over `url` polling every 100 ms, rediscovering
/// every 200 ms, with `queues` (a YAML list, flush left).
fn config(url: &str, queues: &str) -> String {
    format!(
        "listen: {{ grpc: 127.0.0.1:0 }}\nsources:\n  - name: main\n    type: redis\n    url: {url}\n    poll_interval: 100ms\n    discovery_interval: 200ms\n    queues:\n{}",
        indent(queues, 6)
    )
}

fn gauge(s: &Scrape, name: &str, queue: &str, preset: &str) -> Option<f64> {
    s.value(name, &[("queue", queue), ("preset", preset)])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rq_queues_registries_latency_and_an_abandoned_job() {
    let redis = RedisServer::start();
    let before = wall();
    let Some(out) = Library::Rq.run("rq_fixture.py", &[&redis.url]) else {
        return;
    };
    let after = wall();
    let app = TestApp::start(&config(&redis.url, "- preset: rq\n")).await;
    let s = app
        .scrape_until("rq queues", Duration::from_secs(15), |s| {
            depth(s, "slowq", "rq", "active") == Some(1.0)
        })
        .await;
    assert_eq!(depth(&s, "default", "rq", "waiting"), Some(3.0), "{s}");
    assert_eq!(depth(&s, "default", "rq", "delayed"), Some(1.0));
    assert_eq!(depth(&s, "low", "rq", "waiting"), Some(2.0));
    assert_eq!(depth(&s, "low", "rq", "delayed"), Some(1.0));
    // default's scheduled job is 600 s out: not overdue.
    assert_eq!(gauge(&s, "queue_overdue_jobs", "default", "rq"), Some(0.0));
    assert_eq!(depth(&s, "failing", "rq", "failed"), Some(1.0));
    assert_eq!(depth(&s, "failing", "rq", "waiting"), Some(0.0));
    assert_eq!(gauge(&s, "queue_stalled_jobs", "slowq", "rq"), Some(0.0));
    // RQ has no pause: no gauge rather than a made-up 0.
    assert_eq!(gauge(&s, "queue_paused", "default", "rq"), None);
    let age = gauge(&s, "queue_oldest_message_age_seconds", "default", "rq").unwrap();
    let (lo, hi) = (wall() - after - 1.0, wall() - before + 1.0);
    assert!((lo..=hi).contains(&age), "age {age} not in {lo}..{hi}");
    assert_eq!(
        gauge(&s, "queue_oldest_message_age_seconds", "low", "rq").map(|a| a <= hi),
        Some(true)
    );

    let mut c = client(&app).await;
    let q = [("queue", "default"), ("preset", "rq")];
    assert_eq!(metrics(&mut c, &q).await.unwrap().1, 3.0);
    let qs = [("queue", "default"), ("state", "waiting,delayed")];
    assert_eq!(metrics(&mut c, &qs).await.unwrap().1, 4.0);
    assert!(active(&mut c, &q).await.unwrap());
    // failing is drained but still in rq:queues: 0, not NOT_FOUND.
    assert_eq!(
        metrics(&mut c, &[("queue", "failing")]).await.unwrap().1,
        0.0
    );
    assert!(!active(&mut c, &[("queue", "failing")]).await.unwrap());

    // The killed worker's wip entry expires 62 s after its last heartbeat.
    let expiry: f64 = out
        .split("\"wip_expiry\": ")
        .nth(1)
        .and_then(|r| r.split([',', '}']).next())
        .and_then(|v| v.trim().parse().ok())
        .expect("wip_expiry in fixture output");
    let wait = (expiry - wall()).max(0.0) + 10.0;
    assert!(wait < 90.0, "wip expiry {expiry} too far out");
    let s = app
        .wait_value(
            "queue_stalled_jobs",
            &[("queue", "slowq"), ("preset", "rq")],
            1.0,
            Duration::from_secs_f64(wait),
        )
        .await;
    assert_eq!(depth(&s, "slowq", "rq", "active"), Some(1.0));
    // low's job was due 1 s after the fixture ran; no worker runs RQ's
    // scheduler, so it is still in rq:scheduled:low, overdue.
    assert_eq!(depth(&s, "low", "rq", "delayed"), Some(1.0));
    assert_eq!(gauge(&s, "queue_overdue_jobs", "low", "rq"), Some(1.0));
    assert_eq!(gauge(&s, "queue_overdue_jobs", "default", "rq"), Some(0.0));
    app.stop().await;
}

/// One busy `rq worker` (the forking Worker) holds each job in both
/// `intermediate` and `wip` for a few ms (it adds the execution to `wip`,
/// forks, and the child LREMs `intermediate`): every poll of the exporter
/// (`poll_interval` 20 ms) must still show at most the one job it runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rq_active_never_counts_a_job_twice_under_a_real_worker() {
    const JOBS: u64 = 100;
    let redis = RedisServer::start();
    let n = JOBS.to_string();
    if Library::Rq
        .run("rq_busy_fixture.py", &[&redis.url, "enqueue", &n])
        .is_none()
    {
        return;
    }
    let yaml = config(&redis.url, "- preset: rq\n").replace("100ms", "20ms");
    let app = TestApp::start(&yaml).await;
    app.scrape_until("rq queue busy", Duration::from_secs(15), |s| {
        depth(s, "busy", "rq", "waiting") == Some(JOBS as f64)
    })
    .await;
    let url = redis.url.clone();
    let work =
        tokio::task::spawn_blocking(move || Library::Rq.run("rq_busy_fixture.py", &[&url, "work"]));
    // Every poll's `active`, by poll number (scrapes between polls repeat it).
    let mut seen = std::collections::BTreeMap::new();
    while !work.is_finished() {
        let s = app.scrape().await;
        let active = depth(&s, "busy", "rq", "active");
        seen.insert(polls(&s, "main"), active);
        assert!(
            active.is_some_and(|a| a <= 1.0),
            "one worker, active {active:?} at poll {}",
            polls(&s, "main")
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let out = work.await.expect("fixture task").expect("rq installed");
    let field = |name: &str| -> u64 {
        out.split(&format!("\"{name}\": "))
            .nth(1)
            .and_then(|r| r.split([',', '}']).next())
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("{name} in fixture output {out}"))
    };
    assert_eq!(field("finished"), JOBS, "{out}");
    // Without an overlap the test could not catch a double count.
    assert!(field("overlaps") > 0, "no job seen in both keys: {out}");
    let busy = seen.values().filter(|a| **a == Some(1.0)).count();
    assert!(
        busy >= 20,
        "only {busy} polls saw the worker busy: {seen:?}"
    );
    eprintln!("{} polls read, {busy} busy; fixture: {out}", seen.len());
    let s = app
        .scrape_until("busy drained", Duration::from_secs(5), |s| {
            depth(s, "busy", "rq", "completed") == Some(JOBS as f64)
        })
        .await;
    assert_eq!(depth(&s, "busy", "rq", "active"), Some(0.0), "{s}");
    assert_eq!(depth(&s, "busy", "rq", "waiting"), Some(0.0), "{s}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidekiq_queues_global_sets_latency_and_a_dead_process() {
    let redis = RedisServer::start();
    let before = wall();
    let Some(_) = Library::Sidekiq.run("sidekiq_fixture.rb", &[&redis.url]) else {
        return;
    };
    let after = wall();
    // A process registered in `processes` whose heartbeat hash is gone (a
    // crashed Sidekiq, written by hand: its hash would take 60 s to expire),
    // and a live one with 2 busy threads.
    let mut conn = redis.conn();
    rcmd(
        &mut conn,
        &["SADD", "processes", "host:1:dead", "host:2:live"],
    );
    rcmd(
        &mut conn,
        &["HSET", "host:2:live", "busy", "2", "beat", "1"],
    );
    rcmd(&mut conn, &["SET", "stat:processed", "41"]);
    // Sidekiq Pro's `paused` set (Pro does not run here): `critical` is
    // paused, and its jobs stay `waiting`.
    rcmd(&mut conn, &["SADD", "paused", "critical"]);

    let app = TestApp::start(&config(&redis.url, "- preset: sidekiq\n")).await;
    // The 1 s schedule and QuickJob's retry (due in 1-10 s) turn overdue:
    // no Sidekiq process polls the sets.
    let s = app
        .scrape_until("sidekiq overdue jobs", Duration::from_secs(40), |s| {
            gauge(s, "queue_overdue_jobs", "(all)", "sidekiq") == Some(2.0)
        })
        .await;
    assert_eq!(
        depth(&s, "critical", "sidekiq", "waiting"),
        Some(2.0),
        "{s}"
    );
    assert_eq!(depth(&s, "default", "sidekiq", "waiting"), Some(3.0));
    assert_eq!(gauge(&s, "queue_paused", "critical", "sidekiq"), Some(1.0));
    assert_eq!(depth(&s, "critical", "sidekiq", "paused"), None);
    assert_eq!(depth(&s, "(all)", "sidekiq", "delayed"), Some(2.0));
    assert_eq!(depth(&s, "(all)", "sidekiq", "retry"), Some(2.0));
    assert_eq!(depth(&s, "(all)", "sidekiq", "failed"), Some(0.0));
    assert_eq!(depth(&s, "(all)", "sidekiq", "active"), Some(2.0));
    assert_eq!(
        gauge(&s, "queue_stalled_jobs", "(all)", "sidekiq"),
        Some(1.0)
    );
    assert_eq!(gauge(&s, "queue_paused", "default", "sidekiq"), Some(0.0));
    assert_eq!(
        gauge(&s, "queue_jobs_processed_total", "(all)", "sidekiq"),
        Some(41.0)
    );
    let age = gauge(&s, "queue_oldest_message_age_seconds", "default", "sidekiq").unwrap();
    let (lo, hi) = (wall() - after - 1.0, wall() - before + 1.0);
    assert!((lo..=hi).contains(&age), "age {age} not in {lo}..{hi}");

    let mut c = client(&app).await;
    assert_eq!(
        metrics(&mut c, &[("queue", "default")]).await.unwrap().1,
        3.0
    );
    let retry = [("queue", "(all)"), ("state", "retry,delayed")];
    assert_eq!(metrics(&mut c, &retry).await.unwrap().1, 4.0);
    // Retries are Sidekiq's, not a queue's: asked of `default`, refused,
    // naming where they are (issue 36: it answered 0).
    let e = metrics(&mut c, &[("queue", "default"), ("state", "retry")])
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains(r#"under queue "(all)""#), "{e:?}");
    assert!(active(&mut c, &[("queue", "critical")]).await.unwrap());
    app.stop().await;
}

/// `processes` is read bounded, never whole: with more Sidekiq processes
/// than `stalled_check_limit`, the busy threads of those not checked would
/// be missing from `active`, so it (and stalled) is unknown: absent, and
/// `UNAVAILABLE` for KEDA, never the part that was read (it was before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_sidekiq_processes_than_the_check_limit_leave_active_unknown() {
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    // Three live processes (heartbeat hashes as Sidekiq writes them), with
    // 1, 2 and 3 busy threads.
    for (p, busy) in [("h:1:a", "1"), ("h:2:b", "2"), ("h:3:c", "3")] {
        rcmd(&mut conn, &["SADD", "processes", p]);
        rcmd(&mut conn, &["HSET", p, "busy", busy, "beat", "1"]);
    }
    let preset = |limit: u32| format!("- preset: sidekiq\n  stalled_check_limit: {limit}\n");
    let app = TestApp::start(&config(&redis.url, &preset(2))).await;
    let s = app
        .scrape_until("sidekiq (all)", Duration::from_secs(15), |s| {
            depth(s, "(all)", "sidekiq", "delayed").is_some()
        })
        .await;
    assert_eq!(depth(&s, "(all)", "sidekiq", "active"), None, "{s}");
    assert_eq!(gauge(&s, "queue_stalled_jobs", "(all)", "sidekiq"), None);
    let mut c = client(&app).await;
    let e = metrics(&mut c, &[("queue", "(all)"), ("state", "active")])
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
    app.stop().await;
    // Within the limit, every process is checked: 1 + 2 + 3.
    let app = TestApp::start(&config(&redis.url, &preset(3))).await;
    let s = app
        .scrape_until("sidekiq active", Duration::from_secs(15), |s| {
            depth(s, "(all)", "sidekiq", "active").is_some()
        })
        .await;
    assert_eq!(depth(&s, "(all)", "sidekiq", "active"), Some(6.0), "{s}");
    assert_eq!(
        gauge(&s, "queue_stalled_jobs", "(all)", "sidekiq"),
        Some(0.0)
    );
    app.stop().await;
}

/// Resque through node-resque (its Node port, the same keys): each queue's
/// list is `waiting`, with no age while jobs wait (a job holds no enqueue
/// time) and 0 once none does; under `(all)`, the failed list, the totals,
/// the delayed lists (one due an hour ago, overdue, as no scheduler runs)
/// and a worker that died mid-job, still `active`, its job's age since the
/// worker took it (`run_at`) the oldest active job's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resque_states_totals_delayed_and_a_worker_that_died_mid_job() {
    let redis = RedisServer::start();
    let Some(out) = Library::Resque.run("node/resque_fixture.js", &[&redis.url]) else {
        return;
    };
    let used: serde_json::Value = serde_json::from_str(out.trim()).expect("the fixture's times");
    let (before, after) = (
        used["before"].as_f64().unwrap(),
        used["after"].as_f64().unwrap(),
    );
    let app = TestApp::start(&config(&redis.url, "- preset: resque\n")).await;
    let s = app
        .scrape_until("resque queues and (all)", Duration::from_secs(15), |s| {
            depth(s, "(all)", "resque", "active").is_some()
                && depth(s, "default", "resque", "waiting").is_some()
        })
        .await;
    assert_eq!(depth(&s, "default", "resque", "waiting"), Some(3.0), "{s}");
    assert_eq!(depth(&s, "critical", "resque", "waiting"), Some(2.0));
    assert_eq!(depth(&s, "work", "resque", "waiting"), Some(0.0));
    assert_eq!(depth(&s, "(all)", "resque", "failed"), Some(1.0));
    assert_eq!(depth(&s, "(all)", "resque", "delayed"), Some(3.0));
    assert_eq!(depth(&s, "(all)", "resque", "active"), Some(1.0));
    assert_eq!(
        gauge(&s, "queue_overdue_jobs", "(all)", "resque"),
        Some(1.0)
    );
    assert_eq!(
        gauge(&s, "queue_jobs_processed_total", "(all)", "resque"),
        Some(1.0)
    );
    assert_eq!(
        gauge(&s, "queue_jobs_failed_total", "(all)", "resque"),
        Some(1.0)
    );
    // No stamp in a job: unknown while jobs wait, never a guess.
    let age = |q: &str| gauge(&s, "queue_oldest_message_age_seconds", q, "resque");
    assert_eq!(age("default"), None);
    assert_eq!(age("work"), Some(0.0));
    assert_eq!(gauge(&s, "queue_stalled_jobs", "(all)", "resque"), None);
    assert_eq!(gauge(&s, "queue_paused", "default", "resque"), None);
    // The slow job started between `before` and `after`; `run_at` is
    // written to the second.
    let running = gauge(&s, "queue_oldest_active_job_age_seconds", "(all)", "resque")
        .expect("the running job's age");
    let scraped = wall();
    assert!(
        running >= scraped - after - 10.0 && running >= 0.0,
        "{running}"
    );
    assert!(running <= scraped - before + 1.0, "{running}");

    let mut c = client(&app).await;
    assert_eq!(
        metrics(&mut c, &[("queue", "default")]).await.unwrap().1,
        3.0
    );
    let shared = [("queue", "(all)"), ("state", "delayed,failed,active")];
    assert_eq!(metrics(&mut c, &shared).await.unwrap().1, 5.0);
    // Failed jobs are every queue's: asked of one queue, refused, naming
    // where they are.
    let e = metrics(&mut c, &[("queue", "default"), ("state", "failed")])
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains(r#"under queue "(all)""#), "{e:?}");
    let e = metrics(&mut c, &[("queue", "default"), ("mode", "Age")])
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
    app.stop().await;
}

/// KEDA on node-resque's queues: `waiting` is a number; the oldest
/// waiting job's age is unknown while jobs wait (a Resque job holds no
/// enqueue time), so `Age` and `WaitTime`'s inputs are `UNAVAILABLE`
/// saying so, never a number.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keda_hears_resques_waiting_and_unavailable_naming_the_unknown_age() {
    let redis = RedisServer::start();
    let Some(_) = Library::Resque.run("node/resque_fixture.js", &[&redis.url]) else {
        return;
    };
    let app = TestApp::start(&config(&redis.url, "- preset: resque\n")).await;
    app.scrape_until("resque's default queue", Duration::from_secs(15), |s| {
        depth(s, "default", "resque", "waiting") == Some(3.0)
    })
    .await;
    let mut c = client(&app).await;
    let q = [("queue", "default"), ("preset", "resque")];
    assert_eq!(metrics(&mut c, &q).await.unwrap().1, 3.0);
    assert!(active(&mut c, &q).await.unwrap());
    let age = [("queue", "default"), ("preset", "resque"), ("mode", "Age")];
    let e = metrics(&mut c, &age).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
    assert!(
        e.message()
            .contains("Age of queue \"default\" in source main is unknown")
            && e.message().contains("Resque's jobs carry no enqueue time"),
        "{}",
        e.message()
    );
    let wait = [
        ("queue", "default"),
        ("preset", "resque"),
        ("mode", "WaitTime"),
        ("targetWait", "10s"),
        ("processingTime", "1s"),
    ];
    let e = metrics(&mut c, &wait).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
    assert!(
        e.message().contains("its oldest age is unknown")
            && e.message().contains("Resque's jobs carry no enqueue time"),
        "{}",
        e.message()
    );
    app.stop().await;
}

/// A Redis user that may not read one of Resque's keys: the queue lists
/// (`waiting`), or the workers' job strings (`active` of `(all)`). KEDA
/// hears `UNAVAILABLE`, never 0, and the oldest active job's age is absent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_resque_read_is_unavailable_never_zero() {
    let redis = RedisServer::start();
    let Some(_) = Library::Resque.run("node/resque_fixture.js", &[&redis.url]) else {
        return;
    };
    // Every key of the namespace readable but the one of each case.
    let all = [
        "~resque:queues",
        "~resque:queue:*",
        "~resque:failed",
        "~resque:failed_queues",
        "~resque:stat:*",
        "~resque:workers",
        "~resque:worker:*",
        "~resque:delayed*",
    ];
    let cases = [
        ("q", "~resque:queue:*", "default", "waiting"),
        ("w", "~resque:worker:*", "(all)", "active"),
    ];
    for (user, withheld, queue, state) in cases {
        let mut rules = vec!["-@all", "+@read", "+@connection"];
        rules.extend(all.iter().copied().filter(|k| *k != withheld));
        let url = redis.acl_user(user, "pw", &rules);
        let app = TestApp::start(&config(&url, "- preset: resque\n")).await;
        let s = app
            .scrape_until("the refusal counted", Duration::from_secs(15), |s| {
                s.errors("main", "auth").is_some_and(|n| n >= 1.0)
                    && depth(s, "(all)", "resque", "failed").is_some()
            })
            .await;
        assert_eq!(depth(&s, queue, "resque", state), None, "{withheld}\n{s}");
        if state == "active" {
            assert_eq!(
                gauge(&s, "queue_oldest_active_job_age_seconds", "(all)", "resque"),
                None
            );
            assert_eq!(depth(&s, "default", "resque", "waiting"), Some(3.0));
        }
        let mut c = client(&app).await;
        let q = [("queue", queue), ("preset", "resque"), ("state", state)];
        let e = metrics(&mut c, &q).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unavailable, "{withheld}: {e:?}");
        assert!(e.message().contains(state), "{}", e.message());
        app.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn celery_priority_lists_sum_into_waiting() {
    let redis = RedisServer::start();
    let Some(_) = Library::Celery.run("celery_fixture.py", &[&redis.url]) else {
        return;
    };
    let app = TestApp::start(&config(
        &redis.url,
        "- preset: celery\n  queues: [celery, emails]\n  visibility_timeout: 1m\n",
    ))
    .await;
    let s = app
        .scrape_until("celery queues", Duration::from_secs(15), |s| {
            depth(s, "celery", "celery", "waiting").is_some()
        })
        .await;
    // None and 0..9: 4 in `celery`, 3 + 3 + 1 in the priority lists.
    assert_eq!(depth(&s, "celery", "celery", "waiting"), Some(11.0), "{s}");
    assert_eq!(depth(&s, "emails", "celery", "waiting"), Some(2.0));
    assert_eq!(depth(&s, "(all)", "celery", "active"), Some(0.0));
    assert_eq!(
        gauge(&s, "queue_stalled_jobs", "(all)", "celery"),
        Some(0.0)
    );
    // Messages carry no enqueue time; kombu keeps no delayed set.
    assert_eq!(
        gauge(&s, "queue_oldest_message_age_seconds", "celery", "celery"),
        None
    );
    assert_eq!(gauge(&s, "queue_overdue_jobs", "celery", "celery"), None);
    let mut c = client(&app).await;
    assert_eq!(
        metrics(&mut c, &[("queue", "celery")]).await.unwrap().1,
        11.0
    );
    assert!(active(&mut c, &[("queue", "emails")]).await.unwrap());
    // Reserved tasks are kombu's, not a queue's (`unacked`, under `(all)`).
    let e = metrics(&mut c, &[("queue", "celery"), ("state", "active")])
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains(r#"under queue "(all)""#), "{e:?}");

    // Drained: kombu deletes the lists; a configured queue reads 0.
    let mut conn = redis.conn();
    rcmd(&mut conn, &["FLUSHALL"]);
    wait_value(&c, &[("queue", "emails")], 0.0).await;
    assert!(!active(&mut c, &[("queue", "emails")]).await.unwrap());
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bullmq_waiting_prioritized_delayed_overdue_flows_paused_and_stalled() {
    let redis = RedisServer::start();
    let before = wall();
    let Some(_) = Library::Bullmq.run("node/bullmq_fixture.js", &[&redis.url]) else {
        return;
    };
    let app = TestApp::start(&config(&redis.url, "- preset: bullmq\n")).await;
    let s = app
        .scrape_until("bullmq queues", Duration::from_secs(15), |s| {
            depth(s, "stall", "bullmq", "active").is_some()
                && depth(s, "mail", "bullmq", "waiting").is_some()
                && depth(s, "held", "bullmq", "waiting").is_some()
                && depth(s, "flow", "bullmq", "waiting").is_some()
        })
        .await;
    // 3 in `wait` + 2 in `prioritized`.
    assert_eq!(depth(&s, "mail", "bullmq", "waiting"), Some(5.0), "{s}");
    // `later` (600 s) and `soon` (200 ms, never promoted: no worker).
    assert_eq!(depth(&s, "mail", "bullmq", "delayed"), Some(2.0));
    assert_eq!(gauge(&s, "queue_overdue_jobs", "mail", "bullmq"), Some(1.0));
    assert_eq!(depth(&s, "mail", "bullmq", "active"), Some(0.0));
    assert_eq!(gauge(&s, "queue_paused", "mail", "bullmq"), Some(0.0));
    // A paused queue's backlog stays `waiting`; the pause is its own gauge.
    assert_eq!(gauge(&s, "queue_paused", "held", "bullmq"), Some(1.0));
    assert_eq!(depth(&s, "held", "bullmq", "waiting"), Some(2.0));
    assert_eq!(depth(&s, "held", "bullmq", "paused"), None);
    assert_eq!(gauge(&s, "queue_overdue_jobs", "held", "bullmq"), Some(0.0));
    // The flow's child waits; its parent waits on the child, in
    // `waiting-children`: state `delayed`, and never overdue.
    assert_eq!(depth(&s, "flow", "bullmq", "waiting"), Some(1.0));
    assert_eq!(depth(&s, "flow", "bullmq", "delayed"), Some(1.0));
    assert_eq!(depth(&s, "flow", "bullmq", "active"), Some(0.0));
    assert_eq!(gauge(&s, "queue_overdue_jobs", "flow", "bullmq"), Some(0.0));
    assert_eq!(depth(&s, "stall", "bullmq", "active"), Some(1.0));
    // The killed worker's lock expired: stalled, as BullMQ's checker will see it.
    assert_eq!(
        gauge(&s, "queue_stalled_jobs", "stall", "bullmq"),
        Some(1.0)
    );
    assert_eq!(gauge(&s, "queue_stalled_jobs", "mail", "bullmq"), Some(0.0));
    let age = gauge(&s, "queue_oldest_message_age_seconds", "mail", "bullmq").unwrap();
    assert!(age >= 0.0 && age <= wall() - before + 1.0, "age {age}");
    let age = gauge(&s, "queue_oldest_message_age_seconds", "held", "bullmq").unwrap();
    assert!(age >= 0.0 && age <= wall() - before + 1.0, "held age {age}");
    // The exporter only read: the overdue job is still in `delayed`.
    let mut conn = redis.conn();
    let delayed: u64 = redis::cmd("ZCARD")
        .arg("bull:mail:delayed")
        .query(&mut conn)
        .unwrap();
    assert_eq!(delayed, 2);

    let mut c = client(&app).await;
    assert_eq!(metrics(&mut c, &[("queue", "mail")]).await.unwrap().1, 5.0);
    let q = [("queue", "mail"), ("state", "waiting,delayed")];
    assert_eq!(metrics(&mut c, &q).await.unwrap().1, 7.0);
    let q = [("queue", "flow"), ("state", "waiting,delayed")];
    assert_eq!(metrics(&mut c, &q).await.unwrap().1, 2.0);
    assert!(active(&mut c, &[("queue", "mail")]).await.unwrap());
    // The paused queue's backlog is `waiting`: KEDA sees it.
    assert_eq!(metrics(&mut c, &[("queue", "held")]).await.unwrap().1, 2.0);
    assert!(active(&mut c, &[("queue", "held")]).await.unwrap());
    // Drained (BullMQ keeps `meta`, so the queue stays discovered): 0.
    rcmd(
        &mut conn,
        &["DEL", "bull:held:wait", "bull:held:1", "bull:held:2"],
    );
    wait_value(&c, &[("queue", "held")], 0.0).await;
    assert!(!active(&mut c, &[("queue", "held")]).await.unwrap());
    app.stop().await;
}

/// A BullMQ queue `modern` with one job at BullMQ's default prefix, which
/// is Bull's too.
fn write_bullmq_beside_bull(url: &str) {
    let node_dir = fixture("node");
    let script = format!(
        "const {{ Queue }} = require('{node_dir}/node_modules/bullmq'); \
         const IORedis = require('{node_dir}/node_modules/ioredis'); \
         (async () => {{ const q = new Queue('modern', {{ connection: new IORedis('{url}', {{ maxRetriesPerRequest: null }}) }}); \
         await q.add('x', {{}}); await q.close(); process.exit(0); }})().catch((e) => {{ console.error(e); process.exit(1); }});"
    );
    let out = Command::new("node").args(["-e", &script]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bull_waiting_priority_delayed_overdue_paused_finished_stalled_and_a_prefix() {
    let redis = RedisServer::start();
    let before = wall();
    let Some(_) = Library::Bull.run("node/bull_fixture.js", &[&redis.url]) else {
        return;
    };
    write_bullmq_beside_bull(&redis.url);
    let app = TestApp::start(&config(
        &redis.url,
        "- preset: bull\n- preset: bull\n  prefix: legacy:app\n",
    ))
    .await;
    let s = app
        .scrape_until("bull queues", Duration::from_secs(15), |s| {
            ["mail", "held", "done", "stall", "reports"]
                .iter()
                .all(|q| depth(s, q, "bull", "waiting").is_some())
        })
        .await;
    // 3 FIFO jobs + 1 prioritised: in `wait` (and `priority`), counted once.
    assert_eq!(depth(&s, "mail", "bull", "waiting"), Some(4.0), "{s}");
    assert_eq!(depth(&s, "mail", "bull", "delayed"), Some(2.0));
    assert_eq!(gauge(&s, "queue_overdue_jobs", "mail", "bull"), Some(1.0));
    assert_eq!(gauge(&s, "queue_paused", "mail", "bull"), Some(0.0));
    // Paused: the jobs moved to `paused`; still the backlog.
    assert_eq!(gauge(&s, "queue_paused", "held", "bull"), Some(1.0));
    assert_eq!(depth(&s, "held", "bull", "waiting"), Some(2.0));
    assert_eq!(depth(&s, "done", "bull", "completed"), Some(1.0));
    assert_eq!(depth(&s, "done", "bull", "failed"), Some(1.0));
    assert_eq!(depth(&s, "done", "bull", "waiting"), Some(0.0));
    assert_eq!(depth(&s, "stall", "bull", "active"), Some(1.0));
    assert_eq!(gauge(&s, "queue_stalled_jobs", "stall", "bull"), Some(1.0));
    assert_eq!(gauge(&s, "queue_stalled_jobs", "mail", "bull"), Some(0.0));
    assert_eq!(depth(&s, "reports", "bull", "waiting"), Some(1.0));
    for q in ["mail", "held", "reports"] {
        let age = gauge(&s, "queue_oldest_message_age_seconds", q, "bull").unwrap();
        assert!(age >= 0.0 && age <= wall() - before + 1.0, "{q} age {age}");
    }
    assert_eq!(
        gauge(&s, "queue_oldest_message_age_seconds", "done", "bull"),
        Some(0.0)
    );
    // The BullMQ queue at the same prefix is not Bull's.
    assert_eq!(depth(&s, "modern", "bull", "waiting"), None, "{s}");

    let mut c = client(&app).await;
    assert_eq!(metrics(&mut c, &[("queue", "mail")]).await.unwrap().1, 4.0);
    assert_eq!(metrics(&mut c, &[("queue", "held")]).await.unwrap().1, 2.0);
    assert!(active(&mut c, &[("queue", "reports")]).await.unwrap());
    assert!(!active(&mut c, &[("queue", "done")]).await.unwrap());
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asynq_layout_states_latency_orphans_and_pause() {
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    let t = wall();
    rcmd(&mut conn, &["SADD", "asynq:queues", "critical", "default"]);
    // Enqueued t1, t2, t3 with LPUSH: t1 (30 s old) is the tail.
    for (id, age) in [("t1", 30.0), ("t2", 20.0), ("t3", 10.0)] {
        rcmd(&mut conn, &["LPUSH", "asynq:{critical}:pending", id]);
        let ns = format!("{}", ((t - age) * 1e9) as u128);
        rcmd(
            &mut conn,
            &[
                "HSET",
                &format!("asynq:{{critical}}:t:{id}"),
                "state",
                "pending",
                "pending_since",
                &ns,
            ],
        );
    }
    rcmd(&mut conn, &["RPUSH", "asynq:{critical}:active", "a1", "a2"]);
    let (past, future) = (
        format!("{}", (t - 10.0) as u64),
        format!("{}", (t + 30.0) as u64),
    );
    rcmd(
        &mut conn,
        &["ZADD", "asynq:{critical}:lease", &past, "a1", &future, "a2"],
    );
    // s3 and r2 are due: no server's forwarder moved them (overdue).
    rcmd(
        &mut conn,
        &[
            "ZADD",
            "asynq:{critical}:scheduled",
            &future,
            "s1",
            &future,
            "s2",
            &past,
            "s3",
        ],
    );
    rcmd(
        &mut conn,
        &["ZADD", "asynq:{critical}:retry", &future, "r1", &past, "r2"],
    );
    rcmd(
        &mut conn,
        &["ZADD", "asynq:{critical}:archived", &past, "x1"],
    );
    rcmd(
        &mut conn,
        &[
            "ZADD",
            "asynq:{critical}:completed",
            &future,
            "c1",
            &future,
            "c2",
        ],
    );
    rcmd(&mut conn, &["SET", "asynq:{critical}:processed", "120"]);
    rcmd(&mut conn, &["SET", "asynq:{critical}:failed", "7"]);
    rcmd(&mut conn, &["LPUSH", "asynq:{default}:pending", "d1", "d2"]);
    rcmd(&mut conn, &["SET", "asynq:{default}:paused", &past]);

    let app = TestApp::start(&config(&redis.url, "- preset: asynq\n")).await;
    let s = app
        .scrape_until("asynq queues", Duration::from_secs(15), |s| {
            gauge(s, "queue_paused", "default", "asynq").is_some()
        })
        .await;
    for (state, n) in [
        ("waiting", 3.0),
        ("active", 2.0),
        ("delayed", 3.0),
        ("retry", 2.0),
        ("failed", 1.0),
        ("completed", 2.0),
    ] {
        assert_eq!(
            depth(&s, "critical", "asynq", state),
            Some(n),
            "{state}\n{s}"
        );
    }
    assert_eq!(
        gauge(&s, "queue_stalled_jobs", "critical", "asynq"),
        Some(1.0)
    );
    assert_eq!(gauge(&s, "queue_paused", "critical", "asynq"), Some(0.0));
    assert_eq!(
        gauge(&s, "queue_overdue_jobs", "critical", "asynq"),
        Some(2.0)
    );
    assert_eq!(
        gauge(&s, "queue_overdue_jobs", "default", "asynq"),
        Some(0.0)
    );
    // A paused queue keeps its pending tasks `waiting`; the pause is a gauge.
    assert_eq!(gauge(&s, "queue_paused", "default", "asynq"), Some(1.0));
    assert_eq!(depth(&s, "default", "asynq", "waiting"), Some(2.0));
    assert_eq!(depth(&s, "default", "asynq", "paused"), None);
    assert_eq!(
        gauge(&s, "queue_jobs_processed_total", "critical", "asynq"),
        Some(120.0)
    );
    assert_eq!(
        gauge(&s, "queue_jobs_failed_total", "critical", "asynq"),
        Some(7.0)
    );
    let age = gauge(&s, "queue_oldest_message_age_seconds", "critical", "asynq").unwrap();
    let expected = wall() - (t - 30.0);
    assert!(
        (age - expected).abs() < 1.5,
        "age {age}, expected {expected}"
    );

    let mut c = client(&app).await;
    assert_eq!(
        metrics(&mut c, &[("queue", "critical")]).await.unwrap().1,
        3.0
    );
    assert!(active(&mut c, &[("queue", "critical")]).await.unwrap());
    // A paused queue's backlog is `waiting`, for KEDA too.
    assert_eq!(
        metrics(&mut c, &[("queue", "default")]).await.unwrap().1,
        2.0
    );
    assert!(active(&mut c, &[("queue", "default")]).await.unwrap());
    let e = metrics(&mut c, &[("queue", "critical"), ("state", "queued")])
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(e.message().starts_with("scalerMetadata.state: "), "{e:?}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediswq_waiting_processing_and_expired_leases() {
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    rcmd(&mut conn, &["RPUSH", "job2", "apple", "banana", "cherry"]);
    rcmd(
        &mut conn,
        &["RPUSH", "job2:processing", "date", "elder", "fig"],
    );
    // Only `date` still has its lease (sha224("date")).
    rcmd(
        &mut conn,
        &[
            "SET",
            "job2:leased_by_session:83959d06013e19da41ce9fd80f26a0224790452f73e69535f8f750b6",
            "session",
        ],
    );
    let app = TestApp::start(&config(
        &redis.url,
        "- preset: rediswq\n  name: job2\n  stalled_check_limit: 2\n",
    ))
    .await;
    let s = app
        .scrape_until("rediswq", Duration::from_secs(15), |s| {
            depth(s, "job2", "rediswq", "waiting").is_some()
        })
        .await;
    assert_eq!(depth(&s, "job2", "rediswq", "waiting"), Some(3.0), "{s}");
    assert_eq!(depth(&s, "job2", "rediswq", "active"), Some(3.0));
    // Bounded: only the first 2 processing items are checked (date, elder).
    assert_eq!(
        gauge(&s, "queue_stalled_jobs", "job2", "rediswq"),
        Some(1.0)
    );
    assert_eq!(
        gauge(&s, "queue_oldest_message_age_seconds", "job2", "rediswq"),
        None
    );
    assert_eq!(gauge(&s, "queue_overdue_jobs", "job2", "rediswq"), None);
    let mut c = client(&app).await;
    assert_eq!(metrics(&mut c, &[("queue", "job2")]).await.unwrap().1, 3.0);
    rcmd(&mut conn, &["FLUSHALL"]);
    wait_value(&c, &[("queue", "job2")], 0.0).await;
    assert!(!active(&mut c, &[("queue", "job2")]).await.unwrap());
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priority_zset_due_and_future_items_counters_and_exposition() {
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    let t = wall();
    let at = |d: f64| format!("{}", t + d);
    rcmd(
        &mut conn,
        &[
            "ZADD",
            "jobs:pending:high",
            &at(-20.0),
            "h1",
            &at(-5.0),
            "h2",
            &at(300.0),
            "h3",
        ],
    );
    rcmd(&mut conn, &["ZADD", "jobs:pending:low", &at(-3.0), "l1"]);
    rcmd(
        &mut conn,
        &["HSET", "jobs:processing", "p1", "w1", "p2", "w2"],
    );
    rcmd(
        &mut conn,
        &[
            "ZADD",
            "jobs:completed",
            "1",
            "c1",
            "2",
            "c2",
            "3",
            "c3",
            "4",
            "c4",
        ],
    );
    rcmd(&mut conn, &["RPUSH", "jobs:dlq", "d1"]);
    rcmd(&mut conn, &["SET", "stats:processed", "100"]);
    rcmd(&mut conn, &["SET", "stats:failed", "3"]);
    let app = TestApp::start(&config(
        &redis.url,
        "- preset: priority-zset\n  counters: { processed: stats:processed, failed: stats:failed }\n- key: plain\n  counters: { processed: stats:processed }\n- preset: rq\n",
    ))
    .await;
    let s = app
        .scrape_until("priority zsets", Duration::from_secs(15), |s| {
            s.has("queue_depth", &[("priority", "low")])
        })
        .await;
    let p = |prio: &str, state: &str| {
        s.value(
            "queue_depth",
            &[("queue", "jobs"), ("priority", prio), ("state", state)],
        )
    };
    assert_eq!(p("high", "waiting"), Some(2.0), "{s}");
    assert_eq!(p("high", "delayed"), Some(1.0));
    assert_eq!(p("low", "waiting"), Some(1.0));
    assert_eq!(depth(&s, "jobs", "priority-zset", "active"), Some(2.0));
    assert_eq!(depth(&s, "jobs", "priority-zset", "completed"), Some(4.0));
    assert_eq!(depth(&s, "jobs", "priority-zset", "failed"), Some(1.0));
    // Due items already count as waiting: no overdue gauge.
    assert!(!s.has("queue_overdue_jobs", &[("queue", "jobs")]), "{s}");
    assert_eq!(
        gauge(&s, "queue_jobs_processed_total", "jobs", "priority-zset"),
        Some(100.0)
    );
    assert_eq!(
        gauge(&s, "queue_jobs_failed_total", "jobs", "priority-zset"),
        Some(3.0)
    );
    // Counters on a plain key entry.
    assert_eq!(
        s.value("queue_jobs_processed_total", &[("queue", "plain")]),
        Some(100.0)
    );
    // Plain keys keep their stateless queue_depth.
    assert_eq!(s.depth("plain"), Some(0.0));
    let age = s
        .value(
            "queue_oldest_message_age_seconds",
            &[("queue", "jobs"), ("priority", "high")],
        )
        .unwrap();
    let expected = wall() - (t - 20.0);
    assert!(
        (age - expected).abs() < 1.5,
        "age {age}, expected {expected}"
    );

    // Plain and preset series in one family stay valid for promtool and
    // for Python's strict OpenMetrics parser.
    let text = app.metrics().await;
    let (ok, out) = promtool_check(&text);
    assert!(ok, "promtool: {out}\n{text}");
    let om = http_get(
        &format!("{}/metrics", app.base),
        &[("accept", "application/openmetrics-text; version=1.0.0")],
    )
    .await
    .1;
    python_parse(&om, true).unwrap_or_else(|e| panic!("strict OpenMetrics: {e}\n{om}"));

    let mut c = client(&app).await;
    assert_eq!(metrics(&mut c, &[("queue", "jobs")]).await.unwrap().1, 3.0);
    let delayed = [("queue", "jobs"), ("state", "delayed")];
    assert_eq!(metrics(&mut c, &delayed).await.unwrap().1, 1.0);
    let age_q = [("queue", "jobs"), ("mode", "Age"), ("operation", "max")];
    let a = metrics(&mut c, &age_q).await.unwrap().1;
    assert!((a - (wall() - (t - 20.0))).abs() < 1.5, "Age {a}");
    assert!(active(&mut c, &[("queue", "jobs")]).await.unwrap());
    // The priority-zset's queue is configured: drained, it reads 0.
    rcmd(&mut conn, &["FLUSHALL"]);
    wait_value(&c, &[("queue", "jobs")], 0.0).await;
    app.stop().await;
}

#[test]
fn a_bad_preset_entry_is_one_line_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    for (entry, want) in [
        (
            "- key: a\n- preset: bull3\n",
            "sources[0].queues[1]: preset: unknown preset \"bull3\"",
        ),
        (
            "- preset: rq\n  sep: \":\"\n",
            "sources[0].queues[0]: sep: not an option of preset rq",
        ),
        (
            "- preset: rediswq\n",
            "sources[0].queues[0]: name: required by preset rediswq",
        ),
        (
            "- preset: celery\n  visibility_timeout: soon\n",
            "sources[0].queues[0]: visibility_timeout: invalid duration \"soon\"",
        ),
        (
            "- pattern: \"a:*\"\n  counters: { processed: p }\n",
            "sources[0].queues[0]: counters: only on a key entry",
        ),
    ] {
        let path = write_file(&dir, "c.yaml", &config("redis://127.0.0.1:1", entry));
        let out = Command::new(env!("CARGO_BIN_EXE_queue-exporter"))
            .args(["check", "--config"])
            .arg(&path)
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{entry}");
        let line = err
            .lines()
            .find(|l| l.contains(path.to_str().unwrap()))
            .unwrap_or("");
        assert!(
            line.contains(&format!("{}: {want}", path.display())),
            "{entry}\n{err}"
        );
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    }
}

/// Sidekiq keeps `retry`, `delayed` (`schedule`), `failed` (`dead`) and
/// `active` (`processes`) only for all its queues together, under `(all)`;
/// kombu keeps `active` (`unacked`) likewise. Asked of one queue such a
/// state is refused, naming `(all)`, never read as 0 (issue 36: the docs'
/// own `state: waiting,retry` on `default` answered 3 while 2 jobs waited
/// for a retry); a glob that also matches `(all)` counts each job once,
/// where it lives, with `operation: sum` only. Layouts written key by key,
/// as Sidekiq 6 and kombu write them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_kept_only_under_all_is_refused_per_queue_and_counted_once_by_a_glob() {
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    rcmd(&mut conn, &["SADD", "queues", "default", "critical"]);
    rcmd(&mut conn, &["LPUSH", "queue:default", "{}", "{}", "{}"]);
    rcmd(&mut conn, &["LPUSH", "queue:critical", "{}"]);
    let later = format!("{}", wall() + 3600.0);
    rcmd(&mut conn, &["ZADD", "retry", &later, "r1", &later, "r2"]);
    rcmd(&mut conn, &["ZADD", "schedule", &later, "s1"]);
    rcmd(&mut conn, &["LPUSH", "celery", "m1", "m2"]);
    rcmd(&mut conn, &["HSET", "unacked", "t1", "{}"]);
    let app = TestApp::start(&config(
        &redis.url,
        "- preset: sidekiq\n- preset: celery\n  queues: [celery]\n",
    ))
    .await;
    let s = app
        .scrape_until("sidekiq and celery", Duration::from_secs(15), |s| {
            depth(s, "critical", "sidekiq", "waiting").is_some()
                && depth(s, "(all)", "celery", "active").is_some()
        })
        .await;
    assert_eq!(depth(&s, "(all)", "sidekiq", "retry"), Some(2.0), "{s}");
    assert_eq!(depth(&s, "default", "sidekiq", "retry"), None, "{s}");
    let mut c = client(&app).await;
    let sk = |queue: &'static str, state: &'static str| {
        vec![("queue", queue), ("preset", "sidekiq"), ("state", state)]
    };
    let refused = |e: tonic::Status, state: &str| {
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
        let m = e.message();
        assert!(m.starts_with("scalerMetadata.state: "), "{m}");
        assert!(m.contains(&format!("keeps {state} jobs")), "{m}");
        m.to_string()
    };

    // The docs' old example, and each state Sidekiq keeps under (all).
    for (queue, state) in [
        ("default", "waiting,retry"),
        ("default", "retry"),
        ("default", "delayed"),
        ("default", "failed"),
        ("critical", "active"),
        // A glob that matches queues only.
        ("crit*", "retry"),
    ] {
        let e = metrics(&mut c, &sk(queue, state)).await.unwrap_err();
        let m = refused(e, state.trim_start_matches("waiting,"));
        assert!(m.contains(r#"under queue "(all)""#), "{m}");
        let e = active(&mut c, &sk(queue, state)).await.unwrap_err();
        assert_eq!(
            e.code(),
            tonic::Code::InvalidArgument,
            "IsActive {queue} {state}"
        );
    }
    // Celery's unacked tasks are kept for all queues together, too.
    let e = metrics(
        &mut c,
        &[
            ("queue", "celery"),
            ("preset", "celery"),
            ("state", "active"),
        ],
    )
    .await
    .unwrap_err();
    let m = refused(e, "active");
    assert!(m.contains(r#"under queue "(all)""#), "{m}");
    // Where the state lives, it is read.
    let all_retry = sk("(all)", "retry,delayed");
    assert_eq!(metrics(&mut c, &all_retry).await.unwrap().1, 3.0);
    assert_eq!(
        metrics(&mut c, &sk("default", "waiting")).await.unwrap().1,
        3.0
    );
    // A glob over the queues and (all): each job counted once, where it lives.
    let every = sk("*", "waiting,retry");
    assert_eq!(metrics(&mut c, &every).await.unwrap().1, 3.0 + 1.0 + 2.0);
    let only_retry = [("operation", "max")]
        .into_iter()
        .chain(sk("*", "retry"))
        .collect::<Vec<_>>();
    assert_eq!(metrics(&mut c, &only_retry).await.unwrap().1, 2.0);
    // max/avg would compare one queue with every queue's retries.
    for op in ["max", "avg"] {
        let q = [("operation", op)]
            .into_iter()
            .chain(sk("*", "waiting,retry"))
            .collect::<Vec<_>>();
        let e = metrics(&mut c, &q).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{op}: {e:?}");
        assert!(
            e.message().starts_with("scalerMetadata.operation: "),
            "{e:?}"
        );
        assert!(e.message().contains(r#""(all)""#), "{e:?}");
    }
    app.stop().await;
}

/// A `key:` entry on a key a preset counts jobs in (docs/keda.md advised
/// `counters: enqueued` on the queue's list for Sidekiq, RQ and Celery)
/// showed the same jobs twice, `queue_depth{queue="rq:queue:high"} 1`
/// beside RQ's `high` `waiting` 1, and `queue: "*"` summed both (issue 36).
/// The key is counted once, as the preset queue, which gets the entry's
/// counters: `/metrics` has no series of the key, the preset queue carries
/// `queue_messages_published_total`, KEDA reads its publish rate, and the
/// key's name is refused naming the queue to ask for. RQ's layout written
/// key by key, as RQ 1.x/2.x writes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_entry_on_a_presets_list_is_counted_once_as_the_preset_queue_with_its_counters() {
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    rcmd(
        &mut conn,
        &["SADD", "rq:queues", "rq:queue:high", "rq:queue:low"],
    );
    rcmd(&mut conn, &["RPUSH", "rq:queue:high", "j1"]);
    rcmd(&mut conn, &["RPUSH", "rq:queue:low", "j2", "j3"]);
    rcmd(&mut conn, &["SET", "high:enqueued", "5"]);
    rcmd(&mut conn, &["RPUSH", "plain", "p1"]);
    let app = TestApp::start(&config(
        &redis.url,
        "- preset: rq\n- key: rq:queue:high\n  counters: { enqueued: high:enqueued }\n- key: plain\n",
    ))
    .await;
    let s = app
        .scrape_until(
            "rq queues and the plain key",
            Duration::from_secs(15),
            |s| {
                depth(s, "high", "rq", "waiting").is_some()
                    && depth(s, "low", "rq", "waiting").is_some()
                    && s.depth("plain").is_some()
            },
        )
        .await;
    assert_eq!(depth(&s, "high", "rq", "waiting"), Some(1.0), "{s}");
    assert!(!s.text().contains("rq:queue:high"), "{s}");
    let published = [("queue", "high"), ("preset", "rq")];
    assert_eq!(
        s.value("queue_messages_published_total", &published),
        Some(5.0),
        "{s}"
    );
    // sum(queue_depth) counts each job once: 1 + 2 in RQ's lists, 1 plain.
    let total = total_depth(&s);
    assert_eq!(total, 4.0, "{s}");
    assert_eq!(s.depth("plain"), Some(1.0));

    let mut c = client(&app).await;
    assert_eq!(metrics(&mut c, &[("queue", "*")]).await.unwrap().1, 4.0);
    assert_eq!(metrics(&mut c, &[("queue", "high")]).await.unwrap().1, 1.0);
    for q in ["rq:queue:high", "rq:queue:*"] {
        let e = metrics(&mut c, &[("queue", q)]).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{q}: {e:?}");
        assert!(
            e.message().contains(r#"set queue: "high" and preset: rq"#),
            "{q}: {e:?}"
        );
    }
    // The counter the entry asked for is the queue's: its publish rate.
    rcmd(&mut conn, &["INCRBY", "high:enqueued", "20"]);
    let rate = [
        ("queue", "high"),
        ("preset", "rq"),
        ("mode", "PublishRate"),
        ("window", "30s"),
    ];
    let got = wait_for("a publish rate on high", Duration::from_secs(10), || {
        let mut c = c.clone();
        async move {
            let v = metrics(&mut c, &rate).await.ok()?.1;
            (v > 0.0).then_some(v)
        }
    })
    .await;
    assert!(got > 0.0, "{got}");
    app.stop().await;
}

/// A `pattern:` over a preset's keys (`rq:queue:*` beside `preset: rq`)
/// counts each job once, as the preset queue, as a `key:` entry does: the
/// lists the pattern finds keep only their identity (they were shown twice
/// before), a key no preset queue reads stays the pattern's, and KEDA is
/// told where the jobs are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pattern_over_a_presets_lists_counts_each_job_once_as_the_preset_queue() {
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    rcmd(
        &mut conn,
        &["SADD", "rq:queues", "rq:queue:high", "rq:queue:low"],
    );
    rcmd(&mut conn, &["RPUSH", "rq:queue:high", "j1"]);
    rcmd(&mut conn, &["RPUSH", "rq:queue:low", "j2", "j3"]);
    // A list under the pattern that is no RQ queue (not in the registry).
    rcmd(
        &mut conn,
        &["RPUSH", "rq:queue:stray", "x1", "x2", "x3", "x4"],
    );
    let app = TestApp::start(&config(
        &redis.url,
        "- preset: rq\n- pattern: \"rq:queue:*\"\n",
    ))
    .await;
    let s = app
        .scrape_until(
            "rq queues and the stray list",
            Duration::from_secs(15),
            |s| {
                depth(s, "high", "rq", "waiting").is_some()
                    && depth(s, "low", "rq", "waiting").is_some()
                    && s.depth("rq:queue:stray").is_some()
            },
        )
        .await;
    assert_eq!(s.depth("rq:queue:high"), None, "{s}");
    assert_eq!(s.depth("rq:queue:low"), None, "{s}");
    assert_eq!(s.depth("rq:queue:stray"), Some(4.0), "{s}");
    // sum(queue_depth) counts each job once: 1 + 2 in RQ's queues, 4 stray.
    let total = total_depth(&s);
    assert_eq!(total, 7.0, "{s}");
    let mut c = client(&app).await;
    assert_eq!(metrics(&mut c, &[("queue", "*")]).await.unwrap().1, 7.0);
    assert_eq!(
        metrics(&mut c, &[("queue", "rq:queue:stray")])
            .await
            .unwrap()
            .1,
        4.0
    );
    let e = metrics(&mut c, &[("queue", "rq:queue:high")])
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(
        e.message().contains(r#"set queue: "high" and preset: rq"#),
        "{e:?}"
    );
    app.stop().await;
}

/// `sum(queue_depth)` of source `main`: what a dashboard's total shows
/// (NaN if a series is no gauge).
fn total_depth(s: &Scrape) -> f64 {
    s.samples("queue_depth", &[("source", "main")])
        .map(|x| match x.value {
            prometheus_parse::Value::Gauge(v) => v,
            _ => f64::NAN,
        })
        .sum()
}
