//! Measured service time (issue 27): real BullMQ, Bull and RQ workers run jobs
//! that take 200 ms against a private redis-server while the exporter
//! polls; `queue_service_time_seconds` reads about 0.2, a `WaitTime`
//! trigger without `processingTime` (real gRPC client) answers replicas
//! computed from it, and a queue that keeps no finished job (BullMQ
//! `removeOnComplete`, RQ `result_ttl=0`) has no service time: absent on
//! /metrics and `UNAVAILABLE` for KEDA, never a 0.
mod scaler_common;
mod support;

use std::time::Duration;

use scaler_common::*;
use support::*;
use tonic::Code;

/// How long a poll may take to show what a test waits for.
const WAIT: Duration = Duration::from_secs(15);

/// What each fixture job takes in its worker.
const JOB: f64 = 0.2;

/// Measured over a real worker: the job's own 200 ms plus the library's
/// bookkeeping between its start and end stamps, on a shared machine.
const TOLERANCE: std::ops::RangeInclusive<f64> = JOB..=JOB + 0.15;

/// One Redis source over `url` with `presets` (a YAML list, flush left),
/// polling every 100 ms and rediscovering every 200 ms.
fn config(url: &str, presets: &str) -> String {
    format!(
        "listen: {{ grpc: 127.0.0.1:0 }}\nsources:\n  - name: main\n    type: redis\n    url: {url}\n    poll_interval: 100ms\n    discovery_interval: 200ms\n    queues:\n{}",
        indent(presets, 6)
    )
}

/// `queue_service_time_seconds` of a preset queue, measured from finished jobs.
fn service_time(s: &Scrape, queue: &str, preset: &str) -> Option<f64> {
    s.value(
        "queue_service_time_seconds",
        &[
            ("queue", queue),
            ("preset", preset),
            ("from", "finished_jobs"),
        ],
    )
}

/// A WaitTime trigger on `queue` of `preset` without `processingTime`:
/// jobs should start within 10 s, arrivals averaged over 1 s.
fn trigger<'a>(queue: &'a str, preset: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("queue", queue),
        ("preset", preset),
        ("mode", "WaitTime"),
        ("targetWait", "10s"),
        ("window", "1s"),
    ]
}

/// Runs `library`'s `script` against `redis` while `app` polls, and waits
/// until queue `timed` of `preset` is measured with `timed` jobs waiting
/// (and, where the fixture fills one, `unkept` jobs in the queue that keeps
/// no finished job). Checks the measured time against [`TOLERANCE`] and
/// that `unkept` has none: unknown, absent, never 0. `None` only when the
/// library is missing and may be skipped; else the measured time.
async fn measure(
    app: &TestApp,
    redis: &RedisServer,
    (library, script, preset): (Library, &str, &str),
    timed: f64,
    unkept: Option<f64>,
) -> Option<f64> {
    // The worker runs while the exporter polls: jobs are read as they finish.
    library.run_async(script, &[&redis.url]).await?;
    let s = app
        .scrape_until("timed measured and its backlog read", WAIT, |s| {
            service_time(s, "timed", preset).is_some()
                && depth(s, "timed", preset, "waiting") == Some(timed)
                && unkept.is_none_or(|n| depth(s, "unkept", preset, "waiting") == Some(n))
        })
        .await;
    let measured = service_time(&s, "timed", preset).unwrap();
    eprintln!("measured service time: {measured} s (jobs of {JOB} s)");
    assert!(TOLERANCE.contains(&measured), "{measured}\n{s}");
    assert_eq!(
        s.value("queue_service_time_seconds", &[("queue", "unkept")]),
        None,
        "{s}"
    );
    Some(measured)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bullmq_jobs_of_200ms_measure_0_2s_and_size_a_trigger_without_processing_time() {
    let redis = RedisServer::start();
    let app = TestApp::start(&config(&redis.url, "- preset: bullmq\n")).await;
    // `unkept` is added with removeOnComplete: it keeps no finished job.
    let fixture = (Library::Bullmq, "node/bullmq_service_fixture.js", "bullmq");
    let Some(measured) = measure(&app, &redis, fixture, 40.0, Some(3.0)).await else {
        return;
    };

    // 40 jobs of the measured time to start within 10 s, nothing added
    // over the last second: 40 · S / 10 workers.
    let c = client(&app).await;
    let timed = trigger("timed", "bullmq");
    let want = 40.0 * measured / 10.0;
    wait_value(&c, &timed, want).await;
    assert!(active(&mut c.clone(), &timed).await.unwrap());
    // The decision shows the service time it used, and that it was measured.
    let scrape = app.scrape().await;
    assert_eq!(
        scrape.value(
            "queue_exporter_scaler_service_time_seconds",
            &[("queue", "timed"), ("mode", "WaitTime")]
        ),
        Some(measured),
        "{}",
        scrape.text()
    );
    let (status, body, _) = http_get(&format!("{}/api/v1/scalers", app.base), &[]).await;
    assert_eq!(status, 200);
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    let model = &json["scalers"][0]["get_metrics"]["model"];
    assert_eq!(model["service_time_from"], "finished_jobs", "{body}");
    assert_eq!(model["service_time_seconds"], measured, "{body}");
    let (_, page, _) = http_get(&format!("{}/scalers", app.base), &[]).await;
    assert!(page.contains("s (measured: finished_jobs)"), "{page}");

    // Jobs wait on a queue that keeps none finished: UNAVAILABLE, saying
    // which queue, why, and that processingTime can be set.
    // (Waited for: its arrival rate needs two polls within the 1 s window
    // first, which a loaded machine may delay.)
    let e = wait_for("unkept's service time refused", WAIT, || {
        let mut c = c.clone();
        async move {
            match metrics(&mut c, &trigger("unkept", "bullmq")).await {
                Err(e) if e.message().contains("service time") => Some(e),
                _ => None,
            }
        }
    })
    .await;
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    for needle in [
        "\"unkept\"",
        "its service time is unknown",
        "removeOnComplete",
        "set processingTime",
    ] {
        assert!(e.message().contains(needle), "{needle}: {}", e.message());
    }
    // With processingTime set, that queue is sized from it: 3 jobs of 2 s.
    let mut set = trigger("unkept", "bullmq");
    set.push(("processingTime", "2s"));
    wait_value(&c, &set, 3.0 * 2.0 / 10.0).await;
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bull_jobs_of_200ms_measure_0_2s_and_size_a_trigger_without_processing_time() {
    let redis = RedisServer::start();
    let app = TestApp::start(&config(&redis.url, "- preset: bull\n")).await;
    let fixture = (Library::Bull, "node/bull_service_fixture.js", "bull");
    let Some(measured) = measure(&app, &redis, fixture, 40.0, None).await else {
        return;
    };
    let c = client(&app).await;
    wait_value(&c, &trigger("timed", "bull"), 40.0 * measured / 10.0).await;
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rq_jobs_of_200ms_measure_0_2s_and_unkept_results_leave_it_unknown() {
    let redis = RedisServer::start();
    let app = TestApp::start(&config(&redis.url, "- preset: rq\n")).await;
    // `unkept` is enqueued with result_ttl=0: it keeps no finished job.
    let fixture = (Library::Rq, "rq_service_fixture.py", "rq");
    if measure(&app, &redis, fixture, 20.0, Some(2.0))
        .await
        .is_none()
    {
        return;
    }
    // RQ keeps no count of jobs enqueued, so a WaitTime trigger on it is
    // refused for its arrival rate, not for processingTime: the service
    // time is measured.
    let c = client(&app).await;
    let e = metrics(&mut c.clone(), &trigger("timed", "rq"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    assert!(
        e.message().contains("its arrival rate is unknown"),
        "{}",
        e.message()
    );
    app.stop().await;
}

/// Issue 36, case 4: BullMQ stamps are whole milliseconds, so a job shorter
/// than 1 ms has `processedOn == finishedOn`. It counts as the stamps'
/// resolution (1 ms), never 0: 1,000 jobs waiting behind jobs that all
/// took under 1 ms ask for 1000 · 0.001 / 10 = 0.1, not for 0 replicas.
/// (The fixture keeps only such jobs finished, as a quiet machine would.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bullmq_jobs_shorter_than_its_millisecond_stamps_count_as_1ms_never_0() {
    let redis = RedisServer::start();
    let Some(out) = Library::Bullmq.run("node/bullmq_instant_fixture.js", &[&redis.url]) else {
        return;
    };
    // Started after the fixture: it reads only the jobs kept.
    let app = TestApp::start(&config(&redis.url, "- preset: bullmq\n")).await;
    eprintln!("fixture: {out}");
    let out: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    // The case is there: the finished jobs kept all have equal stamps.
    assert!(out["equal"].as_u64().unwrap() >= 10, "{out}");
    let s = app
        .scrape_until("instant measured with its backlog", WAIT, |s| {
            service_time(s, "instant", "bullmq").is_some()
                && depth(s, "instant", "bullmq", "waiting") == Some(1000.0)
        })
        .await;
    let measured = service_time(&s, "instant", "bullmq").unwrap();
    eprintln!("measured service time: {measured} s");
    assert!((measured - 0.001).abs() < 1e-12, "{measured}\n{s}");
    let c = client(&app).await;
    // 1,000 jobs of the measured time to start within 10 s: at least 0.1.
    wait_value(&c, &trigger("instant", "bullmq"), 1000.0 * measured / 10.0).await;
    app.stop().await;
}

/// Issue 36: RQ scores `rq:finished:<q>` by expiry (when the job finished
/// plus its `result_ttl`), not by when it finished. One job kept for a day
/// sits far above jobs kept the default 500 s; those that finish after it
/// are measured all the same, at once, not a day later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rq_jobs_finishing_after_one_kept_a_day_are_measured() {
    let redis = RedisServer::start();
    let app = TestApp::start(&config(&redis.url, "- preset: rq\n")).await;
    let Some(day) = Library::Rq
        .run_async("rq_ttl_fixture.py", &[&redis.url, "day"])
        .await
    else {
        return;
    };
    eprintln!("fixture: {day}");
    // The day-long job (a no-op) is measured first.
    let s = app
        .scrape_until("the job kept a day measured", WAIT, |s| {
            service_time(s, "ttl", "rq").is_some()
        })
        .await;
    let first = service_time(&s, "ttl", "rq").unwrap();
    assert!(first < JOB / 2.0, "{first}\n{s}");
    // Then 20 jobs of 200 ms, kept the default 500 s: their registry
    // scores are a day below the first job's.
    let later = Library::Rq
        .run_async("rq_ttl_fixture.py", &[&redis.url, "default"])
        .await
        .unwrap();
    eprintln!("fixture: {later}");
    let s = app
        .scrape_until("the default-TTL jobs measured", WAIT, |s| {
            service_time(s, "ttl", "rq").is_some_and(|t| t >= 0.9 * JOB)
                && depth(s, "ttl", "rq", "waiting") == Some(20.0)
        })
        .await;
    let measured = service_time(&s, "ttl", "rq").unwrap();
    eprintln!("measured service time: {measured} s (jobs of {JOB} s)");
    // 20 jobs of 200 ms and one no-op: whichever estimator, about 0.2.
    assert!(
        (0.9 * JOB..=*TOLERANCE.end()).contains(&measured),
        "{measured}\n{s}"
    );
    app.stop().await;
}

/// Issue 36: a measurement is kept `service_time_max_age` (here 3 s) with
/// no newly finished job, then dropped while jobs still wait: absent on
/// /metrics and `UNAVAILABLE` for WaitTime without `processingTime`,
/// naming the setting, never the old figure. The next jobs to finish are
/// measured afresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_time_with_nothing_finishing_lapses_after_service_time_max_age() {
    const MAX_AGE: f64 = 3.0;
    let redis = RedisServer::start();
    let yaml = config(&redis.url, "- preset: bullmq\n").replace(
        "    queues:\n",
        &format!("    service_time_max_age: {MAX_AGE}s\n    queues:\n"),
    );
    let app = TestApp::start(&yaml).await;
    let fixture = (Library::Bullmq, "node/bullmq_service_fixture.js", "bullmq");
    // Returns once its worker has closed: nothing finishes after this.
    let Some(measured) = measure(&app, &redis, fixture, 40.0, Some(3.0)).await else {
        return;
    };
    eprintln!("measured {measured} s");
    let last_finished = std::time::Instant::now();
    // Lapsed within its max age (plus a read, every MAX_AGE / 2, and a
    // poll) of the last job: not the default 10 minutes.
    let s = app
        .scrape_until("timed's service time lapsed", WAIT, |s| {
            service_time(s, "timed", "bullmq").is_none()
        })
        .await;
    let lapsed = last_finished.elapsed().as_secs_f64();
    eprintln!("lapsed {lapsed} s after the fixture's last job");
    let c = client(&app).await;
    let timed = trigger("timed", "bullmq");
    assert_eq!(depth(&s, "timed", "bullmq", "waiting"), Some(40.0), "{s}");
    let e = metrics(&mut c.clone(), &timed).await.unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    for needle in [
        "\"timed\"",
        "its service time is unknown",
        "service_time_max_age",
        "set processingTime",
    ] {
        assert!(e.message().contains(needle), "{needle}: {}", e.message());
    }
    // processingTime still sizes it.
    let mut set = timed.clone();
    set.push(("processingTime", "2s"));
    wait_value(&c, &set, 40.0 * 2.0 / 10.0).await;

    // Work resumes: measured again from the new jobs.
    Library::Bullmq
        .run_async("node/bullmq_service_fixture.js", &[&redis.url])
        .await
        .unwrap();
    let s = app
        .scrape_until("timed measured again", WAIT, |s| {
            service_time(s, "timed", "bullmq").is_some()
        })
        .await;
    let again = service_time(&s, "timed", "bullmq").unwrap();
    assert!(TOLERANCE.contains(&again), "{again}\n{s}");
    app.stop().await;
}
