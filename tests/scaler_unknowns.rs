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
