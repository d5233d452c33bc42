//! What the exporter cannot read is absent on `/metrics` and `UNAVAILABLE`
//! for KEDA, naming what is unknown: never a 0 (issue 24, points 1 and 6).
//! Each test runs a private `redis-server` (or the shared RabbitMQ, in a
//! throw-away vhost), an ACL user refused exactly the keys or commands the
//! case needs, the exporter in process and the real gRPC client.
//! `docs/unknown-values.md` lists each case with its test.
mod scaler_common;
mod support;

use std::time::Duration;

use scaler_common::*;
use support::*;
use tonic::Code;

/// How long a poll may take to show what a test waits for.
const WAIT: Duration = Duration::from_secs(15);

/// A source `main` over `url` polling every 100 ms with `queues` (flush left).
fn config(url: &str, queues: &str) -> String {
    format!(
        "listen: {{ grpc: 127.0.0.1:0 }}\nsources:\n  - name: main\n    type: redis\n    url: {url}\n    poll_interval: 100ms\n    discovery_interval: 200ms\n    queues:\n{}",
        indent(queues, 6)
    )
}

/// Runs one command as the admin.
fn run(redis: &RedisServer, args: &[&str]) {
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    redis.run::<redis::Value>(&args);
}

/// Asserts `e` is `UNAVAILABLE` and its message contains every one of `words`.
fn assert_unavailable(e: &tonic::Status, words: &[&str]) {
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    for w in words {
        assert!(e.message().contains(w), "{w:?} not in {:?}", e.message());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bullmq_queue_whose_prioritized_key_is_refused_is_unavailable_not_zero() {
    let redis = RedisServer::start();
    // BullMQ's keys for queue `email`, written as BullMQ 5.x lays them out.
    let ms = (scaler_common::wall() * 1e3) as u64;
    run(
        &redis,
        &["HSET", "bull:email:meta", "opts.maxLenEvents", "10000"],
    );
    run(&redis, &["LPUSH", "bull:email:wait", "1", "2"]);
    for id in ["1", "2", "3"] {
        let k = format!("bull:email:{id}");
        run(
            &redis,
            &["HSET", &k, "timestamp", &(ms - 60_000).to_string()],
        );
    }
    run(&redis, &["ZADD", "bull:email:prioritized", "1", "3"]);
    run(&redis, &["ZADD", "bull:email:delayed", "1", "4"]);
    // Read-only, every `bull:email:` key but those starting with `p`, and
    // `paused` given back: `prioritized` alone is refused.
    let url = redis.acl_user(
        "qe",
        "pw",
        &[
            "-@all",
            "+@read",
            "+@connection",
            "~bull:email:[^p]*",
            "~bull:email:paused",
        ],
    );
    let app = TestApp::start(&config(&url, "- preset: bullmq\n")).await;
    let labels = |state| [("queue", "email"), ("preset", "bullmq"), ("state", state)];
    let s = app
        .until("bullmq email read", WAIT, |s| {
            s.value("queue_depth", &labels("delayed")).is_some()
        })
        .await;
    // /metrics: the refused state is absent, the others are there, and the
    // refusal is counted.
    assert_eq!(
        s.value("queue_depth", &labels("waiting")),
        None,
        "{}",
        s.text()
    );
    assert_eq!(s.value("queue_depth", &labels("delayed")), Some(1.0));
    assert_eq!(
        s.value("queue_oldest_message_age_seconds", &[("queue", "email")]),
        None
    );
    assert!(
        s.errors("main", "auth").is_some_and(|n| n > 0.0),
        "{}",
        s.text()
    );

    // KEDA: waiting (the default state) and the age are unknown, and say why.
    let mut c = client(&app).await;
    let email = [("queue", "email"), ("preset", "bullmq")];
    let e = metrics(&mut c, &email).await.unwrap_err();
    assert_unavailable(&e, &["\"email\"", "waiting", "bullmq"]);
    let e = active(&mut c, &email).await.unwrap_err();
    assert_unavailable(&e, &["\"email\"", "waiting"]);
    let e = metrics(
        &mut c,
        &[("queue", "email"), ("preset", "bullmq"), ("mode", "Age")],
    )
    .await
    .unwrap_err();
    assert_unavailable(&e, &["Age", "\"email\""]);
    // A state that was read still answers.
    let delayed = [
        ("queue", "email"),
        ("preset", "bullmq"),
        ("state", "delayed"),
    ];
    assert_eq!(metrics(&mut c, &delayed).await.unwrap().1, 1.0);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sum_max_and_avg_over_a_glob_with_one_refused_key_are_unavailable_naming_it() {
    let redis = RedisServer::start();
    for (k, n) in [("jobs:a", 2), ("jobs:b", 5), ("jobs:c", 7)] {
        set_list_len(&mut redis.conn(), k, n);
    }
    // `jobs:b` may be typed (so it is tracked as a list) but not measured.
    let url = redis.acl_user(
        "qe",
        "pw",
        &[
            "-@all",
            "+@read",
            "+@connection",
            "~jobs:a",
            "~jobs:c",
            "(+type ~jobs:b)",
        ],
    );
    let queues = "- key: jobs:a\n- key: jobs:b\n- key: jobs:c\n";
    let app = TestApp::start(&config(&url, queues)).await;
    let s = app
        .until("jobs:a and the refusal", WAIT, |s| {
            s.depth("jobs:a").is_some() && s.errors("main", "auth").is_some_and(|n| n > 0.0)
        })
        .await;
    assert_eq!(s.depth("jobs:b"), None, "{}", s.text());
    assert_eq!(s.depth("jobs:c"), Some(7.0));
    let mut c = client(&app).await;
    for op in ["sum", "max", "avg"] {
        let e = metrics(&mut c, &[("queue", "jobs:*"), ("operation", op)])
            .await
            .unwrap_err();
        assert_unavailable(&e, &[op, "\"jobs:*\"", "\"jobs:b\"", "could not read"]);
    }
    let e = active(&mut c, &[("queue", "jobs:*")]).await.unwrap_err();
    assert_unavailable(&e, &["\"jobs:b\""]);
    // The readable keys alone still answer.
    assert_eq!(
        metrics(&mut c, &[("queue", "jobs:{a,c}")]).await.unwrap().1,
        9.0
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_whose_groups_are_refused_has_no_lag_pending_or_depth() {
    let redis = RedisServer::start();
    run(&redis, &["XADD", "events", "*", "k", "v"]);
    run(&redis, &["XGROUP", "CREATE", "events", "workers", "0"]);
    let url = redis.acl_user(
        "qe",
        "pw",
        &["-@all", "+@read", "+@connection", "-xinfo|groups", "~*"],
    );
    let app = TestApp::start(&config(&url, "- key: events\n")).await;
    let s = app
        .until("the refusal counted", WAIT, |s| {
            s.errors("main", "auth").is_some_and(|n| n > 0.0)
        })
        .await;
    assert_eq!(s.depth("events"), None, "{}", s.text());
    assert!(!s.has("queue_stream_group_pending", &[("queue", "events")]));
    assert!(!s.has("queue_stream_group_consumers", &[("queue", "events")]));
    let mut c = client(&app).await;
    for pairs in [
        &[("queue", "events"), ("mode", "Lag"), ("group", "workers")][..],
        &[("queue", "events"), ("mode", "QueueLength")][..],
        &[("queue", "events"), ("mode", "Ready")][..],
    ] {
        let e = metrics(&mut c, pairs).await.unwrap_err();
        assert_unavailable(&e, &["\"events\"", "could not read"]);
    }
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_amqp_depth_is_unavailable_and_ready_is_read() {
    let vh = RabbitVhost::create("unknowns-amqp").await;
    let conn = vh.connect().await;
    let ch = conn.create_channel().await.expect("channel");
    declare_queue(&ch, "orders", &[]).await;
    publish(&ch, "orders", 3, lapin::BasicProperties::default()).await;
    let yaml = format!(
        "listen: {{ grpc: 127.0.0.1:0 }}\nsources:\n  - name: rabbit\n    type: rabbitmq\n    method: amqp\n    url: {}\n    queues: [orders]\n    poll_interval: 200ms\n",
        vh.amqp_url()
    );
    let app = TestApp::start(&yaml).await;
    let c = client(&app).await;
    wait_value(&c, &[("queue", "orders"), ("mode", "Ready")], 3.0).await;
    let s = app.scrape().await;
    assert_eq!(s.depth("orders"), None, "{}", s.text());
    // A passive declare reports ready messages only: depth and unacked are
    // unknown, not 0.
    for mode in ["QueueLength", "Unacked"] {
        let e = metrics(&mut c.clone(), &[("queue", "orders"), ("mode", mode)])
            .await
            .unwrap_err();
        assert_unavailable(&e, &[mode, "\"orders\""]);
    }
    app.stop().await;
    drop(conn);
}

/// Issue 36: a zset score of `-inf` made the oldest age infinite, and KEDA
/// received it (turned into int64 milli-units, it wraps). Every value KEDA
/// receives is finite and at most 1e12: `Age` (and `IsActive`, and
/// `WaitTime`'s oldest age) of such a zset is `UNAVAILABLE` naming the
/// queue and the input, and so is an aggregate over it. A score of `+inf`
/// is a member due never (Redis orders it last, and `ZRANGEBYSCORE -inf
/// now`, which every library's scheduler moves due jobs by, never returns
/// it): it counts as scheduled, and the answers stay finite and true.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zset_scores_of_minus_and_plus_infinity_never_reach_keda_as_huge_numbers() {
    let redis = RedisServer::start();
    let ten_ago = format!("{}", wall() - 10.0);
    run(
        &redis,
        &["ZADD", "ts:neg", "-inf", "corrupt", &ten_ago, "ok"],
    );
    run(&redis, &["ZADD", "ts:pos", "+inf", "never", &ten_ago, "ok"]);
    run(
        &redis,
        &["ZADD", "ts:far", "-1e300", "corrupt", &ten_ago, "ok"],
    );
    let zset = |k: &str| format!("- key: {k}\n  score: timestamp\n  score_unit: seconds\n");
    let all = zset("ts:neg") + &zset("ts:pos") + &zset("ts:far");
    let app = TestApp::start(&config(&redis.url, &all)).await;
    let mut c = client(&app).await;
    for q in ["ts:neg", "ts:pos", "ts:far"] {
        app.wait_value("queue_depth", &[("queue", q)], 2.0, WAIT)
            .await;
    }
    let age = |q: &'static str| vec![("queue", q), ("mode", "Age")];
    let not_finite = "Age of queue \"ts:neg\" in source main is inf, not a finite number";
    let e = metrics(&mut c, &age("ts:neg")).await.unwrap_err();
    assert_unavailable(&e, &[not_finite, "-inf"]);
    let e = active(&mut c, &age("ts:neg")).await.unwrap_err();
    assert_unavailable(&e, &[not_finite]);
    let e = metrics(
        &mut c,
        &[("queue", "ts:*"), ("mode", "Age"), ("operation", "max")],
    )
    .await
    .unwrap_err();
    assert_unavailable(&e, &["max over the 3 queues matching \"ts:*\"", not_finite]);
    // A finite but absurd stamp: an age of 1e300 s is beyond the cap.
    let e = metrics(&mut c, &age("ts:far")).await.unwrap_err();
    assert_unavailable(
        &e,
        &["Age of queue \"ts:far\" in source main is 1e300, beyond the cap of 1e12"],
    );
    let wait_time = |q: &'static str| {
        vec![
            ("queue", q),
            ("mode", "WaitTime"),
            ("targetWait", "10s"),
            ("processingTime", "1s"),
            ("window", "1s"),
        ]
    };
    let e = metrics(&mut c, &wait_time("ts:neg")).await.unwrap_err();
    assert_unavailable(
        &e,
        &["WaitTime of queue \"ts:neg\" in source main: its oldest age (seconds) is inf"],
    );
    // /metrics: the depths are known, the infinite age is absent (unknown),
    // never `+Inf`; the finite ones are shown.
    let s = app.scrape().await;
    let age_of = |q: &str| s.value("queue_oldest_message_age_seconds", &[("queue", q)]);
    assert_eq!(age_of("ts:neg"), None, "{s}");
    assert!(age_of("ts:far").is_some_and(|a| a >= 1e299), "{s}");
    assert!(
        age_of("ts:pos").is_some_and(|a| (9.0..60.0).contains(&a)),
        "{s}"
    );
    // +inf: due never, so scheduled; the other member is 10 s old.
    let (_, age_pos) = metrics(&mut c, &age("ts:pos")).await.unwrap();
    assert!((9.0..60.0).contains(&age_pos), "{age_pos}");
    let (_, scheduled) = metrics(&mut c, &[("queue", "ts:pos"), ("mode", "Scheduled")])
        .await
        .unwrap();
    assert_eq!(scheduled, 1.0);
    app.stop().await;
}

/// Issue 36: corrupt BullMQ stamps (`finishedOn` 1e300 ms) made the
/// measured service time 1e297 s, and a `WaitTime` trigger without
/// `processingTime` asked KEDA for that many replicas. The scaler refuses
/// any input beyond 1e12 before it computes: `UNAVAILABLE` naming the
/// queue and its service time, never a number.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bullmq_stamps_of_1e300_never_reach_keda_as_huge_numbers() {
    let redis = RedisServer::start();
    let ms = (wall() * 1e3) as u64;
    run(
        &redis,
        &["HSET", "bull:email:meta", "opts.maxLenEvents", "10000"],
    );
    run(&redis, &["SET", "bull:email:id", "8"]);
    for id in ["1", "2", "3"] {
        run(&redis, &["LPUSH", "bull:email:wait", id]);
        let k = format!("bull:email:{id}");
        run(
            &redis,
            &["HSET", &k, "timestamp", &(ms - 5_000).to_string()],
        );
    }
    for id in ["6", "7", "8"] {
        let k = format!("bull:email:{id}");
        let started = (ms - 1_000).to_string();
        run(
            &redis,
            &["HSET", &k, "processedOn", &started, "finishedOn", "1e300"],
        );
        run(
            &redis,
            &["ZADD", "bull:email:completed", &ms.to_string(), id],
        );
    }
    // Jobs keep arriving (BullMQ's `id` counter rises), so the service
    // time matters: with 1e297 s per job, the steady term is astronomic.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let adder = {
        let stop = stop.clone();
        let mut conn = redis.conn();
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _: i64 = redis::cmd("INCR")
                    .arg("bull:email:id")
                    .query(&mut conn)
                    .unwrap();
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let app = TestApp::start(&config(&redis.url, "- preset: bullmq\n")).await;
    let mut c = client(&app).await;
    let trigger = [
        ("queue", "email"),
        ("mode", "WaitTime"),
        ("targetWait", "10s"),
        ("window", "1s"),
    ];
    // Once two polls give the arrival rate, the service time decides.
    let answer = wait_for(
        "a WaitTime answer that reads the service time",
        WAIT,
        || {
            let mut c = c.clone();
            async move {
                match metrics(&mut c, &trigger).await {
                    Ok(v) => Some(Ok(v)),
                    Err(e) if e.message().contains("service time") => Some(Err(e)),
                    Err(_) => None,
                }
            }
        },
    )
    .await;
    let e = answer.expect_err("a number from a 1e300 ms stamp");
    assert_unavailable(
        &e,
        &["WaitTime of queue \"email\" in source main", "service time"],
    );
    let e = active(&mut c, &trigger).await.unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    adder.join().unwrap();
    app.stop().await;
}
