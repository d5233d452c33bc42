//! Mode `WaitTime` on Sidekiq, RQ and Celery queues (issue 38), whose
//! libraries keep no count of the jobs each queue receives: the producers
//! keep one per queue (`myapp:enqueued:<queue>`, as docs/keda.md's recipe
//! for each library says), and the preset entry alone reads it through a
//! counter key template, `counters: { enqueued: "myapp:enqueued:{queue}" }`,
//! with no `key:` or `age:` entry beside it. Real libraries and real
//! producers (`tests/fixtures/presets/arrivals_*`), a real gRPC client.
mod scaler_common;
mod support;

use std::time::Duration;

use scaler_common::*;
use support::*;

/// How long a poll and the arrival window may take to show what a test
/// waits for (the producers start in about a second).
const WAIT: Duration = Duration::from_secs(30);

/// A source of one preset entry that reads each queue's arrivals from the
/// producers' counters.
fn config(url: &str, preset: &str) -> String {
    redis_config(
        url,
        "100ms",
        &format!("- preset: {preset}\n  counters: {{ enqueued: \"myapp:enqueued:{{queue}}\" }}\n"),
    )
}

/// The trigger over `queue` of `preset`: jobs should start within 30 s,
/// each takes 1 s, arrivals averaged over 3 s.
fn trigger<'a>(queue: &'a str, preset: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("queue", queue),
        ("preset", preset),
        ("mode", "WaitTime"),
        ("targetWait", "30s"),
        ("processingTime", "1s"),
        ("window", "3s"),
    ]
}

/// Waits until WaitTime answers for `queue` with the scaler's arrival-rate
/// gauge between `rate.0` and `rate.1` jobs a second; returns (replicas,
/// rate). Replicas are at least the offered load (rate × 1 s per job).
async fn wait_for_arrivals(
    app: &TestApp,
    c: &Client,
    queue: &str,
    preset: &str,
    rate: (f64, f64),
) -> (f64, f64) {
    let so = [
        ("namespace", "default"),
        ("scaledobject", "worker"),
        ("queue", queue),
        ("mode", "WaitTime"),
    ];
    let what = format!("WaitTime of {preset} queue {queue} at {rate:?} jobs/s");
    wait_for(&what, WAIT, || {
        let mut c = c.clone();
        let t = trigger(queue, preset);
        async move {
            let (_, replicas) = metrics(&mut c, &t).await.ok()?;
            let r = app
                .scrape()
                .await
                .value("queue_exporter_scaler_arrival_rate", &so)?;
            (r > rate.0 && r < rate.1 && replicas >= r).then_some((replicas, r))
        }
    })
    .await
}

/// The producers' counter of `queue`.
fn enqueued(redis: &RedisServer, queue: &str) -> f64 {
    redis::cmd("GET")
        .arg(format!("myapp:enqueued:{queue}"))
        .query(&mut redis.conn())
        .unwrap_or(0.0)
}

/// Waits until the producers have counted jobs on each of `queues`, so the
/// exporter's first discovery finds them in the library's registry.
async fn wait_until_counted(redis: &RedisServer, queues: &[&str]) {
    wait_for("the producer's first jobs", WAIT, || async {
        queues
            .iter()
            .all(|q| enqueued(redis, q) > 0.0)
            .then_some(())
    })
    .await
}

/// Checks /metrics shows `queue` of `preset` once: its counter as the
/// queue's published total (at most what the producers counted), its
/// waiting jobs in one series, and neither its list nor its counter key as
/// a queue of their own.
async fn shown_once(app: &TestApp, redis: &RedisServer, queue: &str, preset: &str, keys: &[&str]) {
    let s = app.scrape().await;
    let labels = [("queue", queue), ("preset", preset)];
    let published = s.value("queue_messages_published_total", &labels);
    let counted = enqueued(redis, queue);
    assert!(
        published.is_some_and(|n| n > 0.0 && n <= counted),
        "{queue}: published {published:?} of {counted}\n{s}"
    );
    assert_eq!(
        s.samples("queue_messages_published_total", &[("queue", queue)])
            .count(),
        1,
        "{s}"
    );
    assert_eq!(
        s.samples("queue_depth", &[("queue", queue), ("state", "waiting")])
            .count(),
        1,
        "{s}"
    );
    let counter = format!("myapp:enqueued:{queue}");
    for key in keys.iter().copied().chain([counter.as_str()]) {
        assert!(!s.shows_queue(key), "{key} reported as a queue\n{s}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidekiq_queues_arrive_by_the_count_a_client_middleware_keeps() {
    let redis = RedisServer::start();
    // Sidekiq's own client, a middleware INCRing each queue's counter: 10
    // jobs a second to `default`, 4 to `low`; no Sidekiq process runs them,
    // so they wait, and Sidekiq's `enqueued_at` gives the oldest one's age.
    let Some(_producer) =
        Library::Sidekiq.spawn("arrivals_sidekiq.rb", &[&redis.url, "default:10", "low:4"])
    else {
        return;
    };
    wait_until_counted(&redis, &["default", "low"]).await;
    let app = TestApp::start(&config(&redis.url, "sidekiq")).await;
    let c = client(&app).await;
    wait_for_arrivals(&app, &c, "default", "sidekiq", (7.0, 13.0)).await;
    wait_for_arrivals(&app, &c, "low", "sidekiq", (2.5, 5.5)).await;
    shown_once(&app, &redis, "default", "sidekiq", &["queue:default"]).await;
    shown_once(&app, &redis, "low", "sidekiq", &["queue:low"]).await;
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rq_queues_arrive_by_the_count_a_queue_class_keeps() {
    let redis = RedisServer::start();
    // RQ's `Queue.enqueue` through a Queue class whose `push_job_id` INCRs
    // the counter in the same pipeline: 10 jobs a second to `high`, 4 to
    // `low`; no worker runs them, and RQ's `enqueued_at` gives the age.
    let Some(_producer) = Library::Rq.spawn("arrivals_rq.py", &[&redis.url, "high:10", "low:4"])
    else {
        return;
    };
    wait_until_counted(&redis, &["high", "low"]).await;
    let app = TestApp::start(&config(&redis.url, "rq")).await;
    let c = client(&app).await;
    wait_for_arrivals(&app, &c, "high", "rq", (7.0, 13.0)).await;
    wait_for_arrivals(&app, &c, "low", "rq", (2.5, 5.5)).await;
    shown_once(&app, &redis, "high", "rq", &["rq:queue:high"]).await;
    shown_once(&app, &redis, "low", "rq", &["rq:queue:low"]).await;
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn celery_queues_arrive_by_the_count_a_publish_signal_keeps() {
    let redis = RedisServer::start();
    // `apply_async` with an `after_task_publish` handler INCRing the
    // counter: 10 tasks a second to `celery`, 4 to `emails`, and a real
    // worker running them as they come.
    let Some(_worker) = Library::Celery.spawn(
        "arrivals_celery.py",
        &[&redis.url, "worker", "celery", "emails"],
    ) else {
        return;
    };
    let Some(_producer) =
        Library::Celery.spawn("arrivals_celery.py", &[&redis.url, "celery:10", "emails:4"])
    else {
        return;
    };
    let app = TestApp::start(&redis_config(
        &redis.url,
        "100ms",
        "- preset: celery\n  queues: [celery, emails]\n  \
         counters: { enqueued: \"myapp:enqueued:{queue}\" }\n",
    ))
    .await;
    let c = client(&app).await;
    wait_for_arrivals(&app, &c, "celery", "celery", (7.0, 13.0)).await;
    wait_for_arrivals(&app, &c, "emails", "celery", (2.5, 5.5)).await;
    shown_once(&app, &redis, "celery", "celery", &[]).await;
    shown_once(&app, &redis, "emails", "celery", &[]).await;
    app.stop().await;
}

/// Celery's messages carry no enqueue time: the recipe's
/// `before_task_publish` handler stamps an `enqueued_at` header, and the
/// preset reads each priority list's tail (its oldest task) for the age.
/// With tasks waiting (no worker), WaitTime answers from the backlog, the
/// age and the arrivals; a queue whose producer lacks the handler has no
/// age: absent on /metrics and `UNAVAILABLE` naming it, never 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn celery_tasks_stamped_by_a_publish_signal_have_an_age_while_they_wait() {
    let redis = RedisServer::start();
    let started = std::time::Instant::now();
    let Some(_stamped) =
        Library::Celery.spawn("arrivals_celery.py", &[&redis.url, "celery:10", "emails:4"])
    else {
        return;
    };
    let Some(_unstamped) =
        Library::Celery.spawn("arrivals_celery.py", &[&redis.url, "unstamped", "bulk:5"])
    else {
        return;
    };
    wait_until_counted(&redis, &["celery", "emails", "bulk"]).await;
    let app = TestApp::start(&redis_config(
        &redis.url,
        "100ms",
        "- preset: celery\n  queues: [celery, emails, bulk]\n  \
         counters: { enqueued: \"myapp:enqueued:{queue}\" }\n",
    ))
    .await;
    let c = client(&app).await;
    let (replicas, _) = wait_for_arrivals(&app, &c, "celery", "celery", (7.0, 13.0)).await;
    wait_for_arrivals(&app, &c, "emails", "celery", (2.5, 5.5)).await;
    let s = app.scrape().await;
    let age = |q: &str| {
        s.value(
            "queue_oldest_message_age_seconds",
            &[("queue", q), ("preset", "celery")],
        )
    };
    // The oldest task was sent after `started` and has waited since.
    let (waited, elapsed) = (age("celery").unwrap(), started.elapsed().as_secs_f64());
    assert!(
        waited > 0.5 && waited <= elapsed,
        "age {waited} of {elapsed} s\n{s}"
    );
    let backlog = depth(&s, "celery", "celery", "waiting").unwrap();
    assert!(backlog > 0.0, "{s}");
    // Jobs of 1 s to start within 30 s: at least the arrivals' load.
    assert!(replicas >= 7.0, "{replicas}");
    // `bulk`'s tasks carry no stamp: its age is unknown, never a number.
    assert_eq!(age("bulk"), None, "{s}");
    assert!(depth(&s, "bulk", "celery", "waiting").is_some_and(|n| n > 0.0));
    let e = metrics(&mut c.clone(), &trigger("bulk", "celery"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
    for needle in ["oldest age", "enqueued_at", "before_task_publish"] {
        assert!(e.message().contains(needle), "{needle}: {}", e.message());
    }
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counter_redis_refuses_is_unknown_and_one_not_written_yet_is_zero() {
    let redis = RedisServer::start();
    // RQ's queues `default` (3 jobs waiting) and `low` (2), by the library;
    // `default`'s counter key holds a list, so its GET is refused
    // (WRONGTYPE); `low`'s was never written.
    let Some(_) = Library::Rq.run("rq_fixture.py", &[&redis.url]) else {
        return;
    };
    rcmd(
        &mut redis.conn(),
        &["RPUSH", "myapp:enqueued:default", "not a count"],
    );
    let app = TestApp::start(&config(&redis.url, "rq")).await;
    let c = client(&app).await;
    // Once polled (before, the answer is UNAVAILABLE for that), the
    // refused counter leaves `default`'s arrival rate unknown.
    let e = wait_for("default's arrival rate unknown", WAIT, || {
        let mut c = c.clone();
        async move {
            let e = metrics(&mut c, &trigger("default", "rq")).await.err()?;
            (e.code() == tonic::Code::Unavailable
                && e.message().contains("its arrival rate is unknown"))
            .then_some(e)
        }
    })
    .await;
    assert!(e.message().contains("\"default\""), "{}", e.message());
    // Nothing counted on `low`: no arrivals, its 2 jobs within 30 s.
    wait_for_arrivals(&app, &c, "low", "rq", (-1.0, 1e-9)).await;
    let s = app.scrape().await;
    let published = |queue| {
        s.value(
            "queue_messages_published_total",
            &[("queue", queue), ("preset", "rq")],
        )
    };
    assert_eq!(published("default"), None, "absent, never 0\n{s}");
    assert_eq!(published("low"), Some(0.0), "{s}");
    app.stop().await;
}
