//! Mode `WaitTime` (issue 27) through a real gRPC client: the replicas that
//! start jobs within `targetWait`, from a real redis-server's list (its
//! length, its oldest item's age, and a `counters: processed` key for
//! arrivals) and a real RabbitMQ queue (ready messages, the head message's
//! timestamp, the publish counter). The model itself is unit-tested in
//! `src/scaler/wait.rs`; here every input comes from a poll.
mod scaler_common;
mod support;

use std::time::Duration;

use lapin::BasicProperties;
use scaler_common::*;
use support::*;
use tonic::Code;

/// How long a poll may take to show what a test waits for.
const WAIT: Duration = Duration::from_secs(15);

/// `work` (a list whose items carry `enqueued_at` in seconds, oldest at the
/// head, jobs done counted in `work:done`), `aged` (the age, no counter) and
/// `plain` (neither).
fn config(url: &str) -> String {
    redis_config(
        url,
        "100ms",
        r#"
        - key: work
          age: { end: head, field: enqueued_at, unit: seconds }
          counters: { processed: "work:done" }
        - key: aged
          age: { end: head, field: enqueued_at, unit: seconds }
        - key: plain
        "#,
    )
}

/// The trigger over `queue`: jobs should start within 10 s, each takes 1 s,
/// arrivals averaged over 2 s.
fn trigger(queue: &str) -> Vec<(&str, &str)> {
    vec![
        ("queue", queue),
        ("mode", "WaitTime"),
        ("targetWait", "10s"),
        ("processingTime", "1s"),
        ("window", "2s"),
    ]
}

/// Makes `key` hold exactly `n` jobs enqueued `age` seconds ago, at once
/// (no poll sees it in between, which would read as arrivals).
fn fill(conn: &mut redis::Connection, key: &str, n: usize, age: f64) {
    let at = wall() - age;
    let items: Vec<String> = (0..n)
        .map(|i| format!(r#"{{"id":{i},"enqueued_at":{at}}}"#))
        .collect();
    let mut pipe = redis::pipe();
    pipe.atomic().cmd("DEL").arg(key).ignore();
    if n > 0 {
        pipe.cmd("RPUSH").arg(key).arg(items).ignore();
    }
    let _: () = pipe.query(conn).expect("DEL + RPUSH");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_scales_to_drain_its_backlog_late_or_not_and_follow_arrivals() {
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    let _: () = redis::cmd("SET")
        .arg("work:done")
        .arg(0)
        .query(&mut conn)
        .unwrap();
    let app = TestApp::start(&config(&redis.url)).await;
    let c = client(&app).await;
    let work = trigger("work");

    // The target is fixed at 1: the value is replicas.
    let (name, int, float) = spec(&mut c.clone(), &work).await.unwrap();
    assert_eq!(name, "waittime-work-10s-2s");
    assert_eq!((int, float), (1, 1.0));

    // Empty, and nothing arrived over the window: 0, inactive.
    wait_value(&c, &work, 0.0).await;
    assert!(!active(&mut c.clone(), &work).await.unwrap());

    // 50 jobs just enqueued, nothing arriving once the window has passed
    // them: 50 jobs of 1 s to start within 10 s need 5 workers.
    fill(&mut conn, "work", 50, 0.5);
    wait_value(&c, &work, 5.0).await;
    assert!(active(&mut c.clone(), &work).await.unwrap());
    // The decision and the model's inputs are on /metrics, per ScaledObject.
    let scrape = app.scrape().await;
    let so = [
        ("namespace", "default"),
        ("scaledobject", "worker"),
        ("queue", "work"),
        ("mode", "WaitTime"),
    ];
    let gauge = |name: &str| scrape.value(name, &so);
    assert_eq!(
        gauge("queue_exporter_scaler_desired_replicas"),
        Some(5.0),
        "{}",
        scrape.text()
    );
    assert_eq!(gauge("queue_exporter_scaler_backlog"), Some(50.0));
    assert_eq!(gauge("queue_exporter_scaler_arrival_rate"), Some(0.0));
    assert_eq!(
        gauge("queue_exporter_scaler_service_time_seconds"),
        Some(1.0)
    );
    assert!(gauge("queue_exporter_scaler_oldest_age_seconds").is_some_and(|a| a > 0.0 && a < 10.0));

    // With 4 jobs per replica, 5 workers are 1.25 replicas.
    let mut per4 = work.clone();
    per4.push(("workersPerReplica", "4"));
    wait_value(&c, &per4, 1.25).await;
    // A percentile shapes the steady-state term only: the backlog is
    // still drained within targetWait.
    let mut p90 = work.clone();
    p90.push(("targetWaitPercentile", "90"));
    wait_value(&c, &p90, 5.0).await;

    // The oldest job has waited twice targetWait and more: late jobs are
    // drained like the rest, B·S/W = 5 workers (issue 38: a worker per
    // late job came a pod start too late to help them, and was then held).
    fill(&mut conn, "work", 50, 20.0);
    wait_for("the late backlog's age read", WAIT, || {
        let app = &app;
        let mut c = c.clone();
        let work = work.clone();
        async move {
            // The gauges are the last GetMetrics answer's.
            metrics(&mut c, &work).await.ok()?;
            let s = app.scrape().await;
            let so = [
                ("namespace", "default"),
                ("scaledobject", "worker"),
                ("queue", "work"),
                ("mode", "WaitTime"),
            ];
            s.value("queue_exporter_scaler_oldest_age_seconds", &so)
                .filter(|a| *a > 10.0)
        }
    })
    .await;
    wait_value(&c, &work, 5.0).await;

    // Jobs arriving and done at once (the list stays empty, the processed
    // total grows): arrivals alone keep it active, with workers for them.
    let _: () = redis::cmd("DEL").arg("work").query(&mut conn).unwrap();
    // About 10 jobs a second, until the answer is seen (at most 30 s).
    let url = redis.url.clone();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopped = stop.clone();
    let producer = tokio::task::spawn_blocking(move || {
        let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
        for _ in 0..300 {
            if stopped.load(std::sync::atomic::Ordering::Relaxed) {
                break;
            }
            let _: () = redis::cmd("INCR")
                .arg("work:done")
                .query(&mut conn)
                .unwrap();
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    let (_, busy) = wait_for("workers for the arrivals alone", WAIT, || {
        let mut c = c.clone();
        let work = work.clone();
        async move {
            metrics(&mut c, &work)
                .await
                .ok()
                .filter(|(_, f)| *f > 5.0 && *f < 20.0)
        }
    })
    .await;
    assert!(active(&mut c.clone(), &work).await.unwrap(), "{busy}");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    producer.await.unwrap();
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_inputs_are_unavailable_and_bad_metadata_names_the_key() {
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    fill(&mut conn, "plain", 3, 1.0);
    let app = TestApp::start(&config(&redis.url)).await;
    let mut c = client(&app).await;
    wait_value(&c, &[("queue", "plain")], 3.0).await;

    // A list without `age:` has no oldest age while jobs wait.
    let e = metrics(&mut c, &trigger("plain")).await.unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    assert!(
        e.message().contains("\"plain\"") && e.message().contains("its oldest age is unknown"),
        "{}",
        e.message()
    );
    let e = active(&mut c, &trigger("plain")).await.unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    // An unknown answer has no series on /metrics: absent, never 0. The
    // QueueLength trigger asked above has one: 3 items over a target of 5.
    let scrape = app.scrape().await;
    let desired = |mode| {
        scrape.value(
            "queue_exporter_scaler_desired_replicas",
            &[("queue", "plain"), ("mode", mode)],
        )
    };
    assert_eq!(desired("WaitTime"), None, "{}", scrape.text());
    assert_eq!(desired("QueueLength"), Some(0.6), "{}", scrape.text());
    // With its age read, a list without a processed counter has no arrival rate.
    fill(&mut conn, "aged", 3, 1.0);
    wait_value(&c, &[("queue", "aged")], 3.0).await;
    let e = metrics(&mut c, &trigger("aged")).await.unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    for needle in [
        "\"aged\"",
        "its arrival rate is unknown",
        "counters: enqueued",
        "counters: processed",
        "asynq",
    ] {
        assert!(e.message().contains(needle), "{needle}: {}", e.message());
    }

    // A plain list keeps no record of how long its jobs took: without
    // processingTime the trigger is refused, naming the key and why, while
    // jobs wait and while the list is gone (Redis deletes an empty list).
    let unset: Vec<(&str, &str)> = trigger("work")
        .into_iter()
        .filter(|(k, _)| *k != "processingTime")
        .collect();
    fill(&mut conn, "work", 2, 1.0);
    wait_value(&c, &[("queue", "work")], 2.0).await;
    for round in ["2 waiting", "gone"] {
        let e = metrics(&mut c, &unset).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{round}: {e:?}");
        for needle in [
            "scalerMetadata.processingTime: required for queue \"work\"",
            "a plain Redis key",
        ] {
            assert!(e.message().contains(needle), "{round}: {}", e.message());
        }
        let e = active(&mut c, &unset).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{round}: {e:?}");
        fill(&mut conn, "work", 0, 0.0);
        wait_value(&c, &[("queue", "work")], 0.0).await;
    }

    // Metadata errors name the key.
    for (change, key) in [
        (("targetWait", "0s"), "targetWait"),
        (("value", "5"), "value"),
        (("workersPerReplica", "-1"), "workersPerReplica"),
        (("targetWaitPercentile", "0.99"), "targetWaitPercentile"),
        (("reactionTime", "soon"), "reactionTime"),
    ] {
        let mut pairs: Vec<(&str, &str)> = trigger("work")
            .into_iter()
            .filter(|(k, _)| *k != change.0)
            .collect();
        if !change.1.is_empty() {
            pairs.push(change);
        }
        let e = spec(&mut c, &pairs).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
        assert!(
            e.message().starts_with(&format!("scalerMetadata.{key}: ")),
            "{}",
            e.message()
        );
    }
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rabbitmq_queue_reads_ready_messages_their_age_and_publishes() {
    let (vh, _conn, ch) = RabbitVhost::with_queue("waittime", "orders").await;
    let sent = (wall() - 90.0) as u64;
    publish(
        &ch,
        "orders",
        20,
        BasicProperties::default().with_timestamp(sent),
    )
    .await;
    let app = TestApp::start(&rabbit_config(std::slice::from_ref(&vh), "500ms")).await;
    let c = client(&app).await;
    let orders = [
        ("queue", "orders"),
        ("mode", "WaitTime"),
        ("targetWait", "100s"),
        ("processingTime", "5s"),
        ("window", "3s"),
    ];
    // 20 ready messages of 5 s each, stamped 90 s ago, to start within
    // 100 s, above half the default reactionTime: the queue term. Nothing
    // arrives within the window, and the exporter's history saw no publish
    // (they came before it started), so the newest message is taken as old
    // as the oldest, 90 s: half of it off 0.63 W is below the least time,
    // 0.2 W, read from the messages' age. 20 · 5 / 20 s = 5 workers.
    let want = 20.0 * 5.0 / (queue_exporter::scaler::wait::QUEUE_MIN_SHARE * 100.0);
    wait_value_for(&c, &orders, want, Duration::from_secs(40)).await;
    assert!(active(&mut c.clone(), &orders).await.unwrap());
    app.stop().await;
    drop(vh);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bullmq_queue_arrives_by_its_id_counter() {
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    // BullMQ's keys for queue `email` as the library lays them out: 30 jobs
    // waiting (LPUSHed, the oldest at the tail), added 2 s ago, and its
    // `id` counter at 30.
    let ms = ((wall() - 2.0) * 1e3) as u64;
    let run = |conn: &mut redis::Connection, args: &[&str]| {
        let mut c = redis::cmd(args[0]);
        for a in &args[1..] {
            c.arg(*a);
        }
        let _: redis::Value = c.query(conn).unwrap();
    };
    run(
        &mut conn,
        &["HSET", "bull:email:meta", "opts.maxLenEvents", "10000"],
    );
    for id in 1..=30 {
        let id = id.to_string();
        run(
            &mut conn,
            &[
                "HSET",
                &format!("bull:email:{id}"),
                "timestamp",
                &ms.to_string(),
            ],
        );
        run(&mut conn, &["LPUSH", "bull:email:wait", &id]);
    }
    run(&mut conn, &["SET", "bull:email:id", "30"]);
    let app = TestApp::start(&redis_config(&redis.url, "100ms", "- preset: bullmq\n")).await;
    let c = client(&app).await;
    let email = [
        ("queue", "email"),
        ("preset", "bullmq"),
        ("mode", "WaitTime"),
        ("targetWait", "30s"),
        ("processingTime", "2s"),
        ("window", "1s"),
    ];
    // Nothing added over the window: 30 jobs of 2 s to start within 30 s.
    wait_value(&c, &email, 2.0).await;
    // The counter is on /metrics as jobs published.
    let scrape = app.scrape().await;
    assert_eq!(
        scrape.value(
            "queue_messages_published_total",
            &[("queue", "email"), ("preset", "bullmq")]
        ),
        Some(30.0),
        "{}",
        scrape.text()
    );
    app.stop().await;
}

/// Runs `step(conn, i)` for i = 0, 1, 2... every 50 ms on a connection of
/// its own, until the returned flag is set; join the handle after.
fn traffic(
    url: &str,
    mut step: impl FnMut(&mut redis::Connection, u64) + Send + 'static,
) -> (
    std::sync::Arc<std::sync::atomic::AtomicBool>,
    tokio::task::JoinHandle<()>,
) {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopped = stop.clone();
    let url = url.to_string();
    let handle = tokio::task::spawn_blocking(move || {
        let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
        // At most a minute, whatever the test does.
        for i in 0..1200 {
            if stopped.load(std::sync::atomic::Ordering::Relaxed) {
                break;
            }
            step(&mut conn, i);
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    (stop, handle)
}

/// Waits until `trigger` answers between `low` and `high` replicas while
/// the scaler's arrival-rate gauge for it reads between `rate.0` and
/// `rate.1` jobs a second; returns (replicas, rate).
async fn wait_for_arrivals(
    app: &TestApp,
    c: &Client,
    trigger: &[(&str, &str)],
    queue: &str,
    (low, high): (f64, f64),
    rate: (f64, f64),
) -> (f64, f64) {
    let so = [
        ("namespace", "default"),
        ("scaledobject", "worker"),
        ("queue", queue),
        ("mode", "WaitTime"),
    ];
    wait_for("replicas for the arrivals", WAIT, || {
        let mut c = c.clone();
        let trigger: Vec<(String, String)> = trigger
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        async move {
            let pairs: Vec<(&str, &str)> = trigger.iter().map(|(k, v)| (&**k, &**v)).collect();
            let (_, f) = metrics(&mut c, &pairs).await.ok()?;
            let r = app
                .scrape()
                .await
                .value("queue_exporter_scaler_arrival_rate", &so)?;
            (f > low && f < high && r > rate.0 && r < rate.1).then_some((f, r))
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_with_an_enqueued_counter_arrives_by_it() {
    let redis = RedisServer::start();
    let config = redis_config(
        &redis.url,
        "100ms",
        r#"
        - key: fed
          age: { end: head, field: enqueued_at, unit: seconds }
          counters: { enqueued: "fed:added" }
        "#,
    );
    let app = TestApp::start(&config).await;
    let c = client(&app).await;
    // A producer INCRs `fed:added` as it pushes each job; a worker pops
    // them as they come: about 10 jobs a second, the list about empty.
    let (stop, producer) = traffic(&redis.url, |conn, i| {
        let mut pipe = redis::pipe();
        if i % 2 == 0 {
            let job = format!(r#"{{"id":{i},"enqueued_at":{}}}"#, wall());
            pipe.atomic()
                .cmd("INCR")
                .arg("fed:added")
                .ignore()
                .cmd("RPUSH")
                .arg("fed")
                .arg(job)
                .ignore();
        } else {
            pipe.cmd("LPOP").arg("fed").ignore();
        }
        let _: () = pipe.query(conn).unwrap();
    });
    // 10 jobs/s of 1 s each, to start within 10 s: about 10 workers.
    let (replicas, rate) =
        wait_for_arrivals(&app, &c, &trigger("fed"), "fed", (5.0, 20.0), (7.0, 13.0)).await;
    assert!(active(&mut c.clone(), &trigger("fed")).await.unwrap());
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    producer.await.unwrap();
    // The counter is the queue's published total on /metrics.
    let added: f64 = redis::cmd("GET")
        .arg("fed:added")
        .query(&mut redis.conn())
        .unwrap();
    let scrape = app.scrape().await;
    let published = scrape.value("queue_messages_published_total", &[("queue", "fed")]);
    assert!(
        published.is_some_and(|n| n > 0.0 && n <= added),
        "{replicas} {rate} {added} {}",
        scrape.text()
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_asynq_queue_arrives_by_its_waiting_and_active_jobs_and_processed_total() {
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    // asynq's layout (hibiken/asynq v0.26.0 `internal/base/base.go` and
    // `internal/rdb/rdb.go`): `asynq:queues`; enqueue = HSET the task hash
    // (`pending_since` in ns) + LPUSH `pending`; a finished task leaves
    // `active` and INCRs `processed`, the queue's lifetime total. 100 tasks
    // scheduled for later sit in `scheduled`: not arrivals until due.
    rcmd(&mut conn, &["SADD", "asynq:queues", "critical"]);
    let later = format!("{}", (wall() + 3600.0) as u64);
    for i in 0..100 {
        let id = format!("s{i}");
        rcmd(
            &mut conn,
            &["ZADD", "asynq:{critical}:scheduled", &later, &id],
        );
    }
    let app = TestApp::start(&redis_config(&redis.url, "100ms", "- preset: asynq\n")).await;
    let c = client(&app).await;
    let (stop, producer) = traffic(&redis.url, |conn, i| {
        if i % 2 == 0 {
            let id = format!("t{i}");
            let ns = format!("{}", (wall() * 1e9) as u128);
            let _: () = redis::pipe()
                .atomic()
                .cmd("HSET")
                .arg(format!("asynq:{{critical}}:t:{id}"))
                .arg("pending_since")
                .arg(ns)
                .ignore()
                .cmd("LPUSH")
                .arg("asynq:{critical}:pending")
                .arg(&id)
                .ignore()
                .query(conn)
                .unwrap();
        } else {
            // A worker: dequeue to `active`, then done.
            let id: Option<String> = redis::cmd("RPOPLPUSH")
                .arg("asynq:{critical}:pending")
                .arg("asynq:{critical}:active")
                .query(conn)
                .unwrap();
            if let Some(id) = id {
                let _: () = redis::pipe()
                    .atomic()
                    .cmd("LREM")
                    .arg("asynq:{critical}:active")
                    .arg(0)
                    .arg(&id)
                    .ignore()
                    .cmd("DEL")
                    .arg(format!("asynq:{{critical}}:t:{id}"))
                    .ignore()
                    .cmd("INCR")
                    .arg("asynq:{critical}:processed")
                    .ignore()
                    .query(conn)
                    .unwrap();
            }
        }
    });
    let mut critical = trigger("critical");
    critical.push(("preset", "asynq"));
    let (replicas, _) =
        wait_for_arrivals(&app, &c, &critical, "critical", (5.0, 20.0), (7.0, 13.0)).await;
    assert!(
        active(&mut c.clone(), &critical).await.unwrap(),
        "{replicas}"
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    producer.await.unwrap();
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_backlogs_ask_stops_at_the_replicas_the_hpa_holds_from_earlier_answers() {
    // 100 ms jobs, 4 s to start, a reaction time of 20 s: W at most R/2
    // (the drain term), above R/10 (the held step applies).
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    let _: () = redis::cmd("SET")
        .arg("work:done")
        .arg(0)
        .query(&mut conn)
        .unwrap();
    let app = TestApp::start(&config(&redis.url)).await;
    let c = client(&app).await;
    let work = vec![
        ("queue", "work"),
        ("mode", "WaitTime"),
        ("targetWait", "4s"),
        ("processingTime", "100ms"),
        ("reactionTime", "20s"),
        ("window", "1s"),
    ];
    let mut given = Vec::new();
    // Nothing waits: 0, the answer the HPA had a reaction time ago.
    wait_value(&c, &work, 0.0).await;
    given.push(0.0);
    tokio::time::sleep(Duration::from_secs(20)).await;
    // 2,000 late jobs (20 s old), past the window's arrivals: 2,000 · 0.1 / 4
    // = 50 workers, asked now.
    fill(&mut conn, "work", 2000, 20.0);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (_, first) = metrics(&mut c.clone(), &work).await.unwrap();
    assert!((first - 50.0).abs() < 1e-6, "{first}");
    given.push(first);
    // More late jobs while the 50 start, and workers taking 10 a second
    // (each LPOP with its INCR, so nothing reads as an arrival).
    fill(&mut conn, "work", 2100, 20.0);
    let url = redis.url.clone();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopped = stop.clone();
    let workers = tokio::task::spawn_blocking(move || {
        let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
        while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
            let _: () = redis::pipe()
                .atomic()
                .cmd("LPOP")
                .arg("work")
                .ignore()
                .cmd("INCR")
                .arg("work:done")
                .ignore()
                .query(&mut conn)
                .unwrap();
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // A ScaledObject never answered before gets the drain term: over 50.
    let mut fresh = obj(&work);
    fresh.name = "fresh".into();
    let (_, free) = metrics_for(&mut c.clone(), fresh).await.unwrap();
    assert!(free > 51.0 && free < 54.0, "{free}");
    // The one answered 50 a moment ago: the 50 the HPA holds, once
    // running, start the whole backlog before more pods could (20 s), so
    // it is asked for no more.
    let (_, held) = metrics(&mut c.clone(), &work).await.unwrap();
    let most = given.iter().copied().fold(0.0, f64::max);
    assert_eq!(held, most, "{held} after {given:?}; fresh {free}");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    workers.await.unwrap();
    app.stop().await;
}
