//! The KEDA external scaler's unary RPCs against a real Redis, through a
//! tonic client generated from the same proto: values, KEDA's arithmetic,
//! activation, globs, modes, errors, health, reflection and self-metrics.
mod scaler_common;
mod support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use scaler_common::*;
use support::*;
use tonic::Code;
use tonic_health::pb::health_check_response::ServingStatus;

/// A Redis with list `work-queue` holding `n` items, an app watching it
/// (polled every 100 ms), and a client that has seen the `n` items.
async fn work_queue_with(n: usize) -> (RedisServer, TestApp, Client) {
    let redis = RedisServer::start();
    set_list_len(&mut redis.conn(), "work-queue", n);
    let app = TestApp::start(&redis_config(&redis.url, "100ms", "- key: work-queue")).await;
    let c = client(&app).await;
    wait_value(&c, &[("queue", "work-queue")], n as f64).await;
    (redis, app, c)
}

// Values and KEDA's arithmetic.

#[tokio::test]
async fn twenty_items_with_target_five_scale_to_four_replicas() {
    let (_redis, app, mut c) = work_queue_with(20).await;
    let trigger = [("queue", "work-queue"), ("value", "5")];
    let (name, target_int, target_float) = spec(&mut c, &trigger).await.unwrap();
    assert_eq!(name, "queuelength-work-queue");
    assert_eq!((target_int, target_float), (5, 5.0));

    let (int, float) = metrics(&mut c, &trigger).await.unwrap();
    assert_eq!((int, float), (20, 20.0));
    assert_eq!(keda_replicas(keda_value(int, float), target_float), 4);
    app.stop().await;
}

#[tokio::test]
async fn the_hpa_metric_name_with_its_sn_prefix_is_matched_case_insensitively() {
    let (_redis, app, mut c) = work_queue_with(20).await;
    let trigger = [("queue", "work-queue"), ("value", "5")];
    // KEDA's HPA name is `s{N}-name`.
    assert_eq!(
        metrics_named(&mut c, &trigger, "s0-queuelength-work-queue")
            .await
            .unwrap(),
        (20, 20.0)
    );
    assert_eq!(
        metrics_named(&mut c, &trigger, "S3-QueueLength-Work-Queue")
            .await
            .unwrap(),
        (20, 20.0)
    );
    app.stop().await;
}

#[tokio::test]
async fn a_metric_name_of_another_trigger_is_invalid_argument() {
    let (_redis, app, mut c) = work_queue_with(20).await;
    let trigger = [("queue", "work-queue"), ("value", "5")];
    let wrong = metrics_named(&mut c, &trigger, "s0-queuelength-other")
        .await
        .unwrap_err();
    assert_eq!(wrong.code(), Code::InvalidArgument);
    assert!(
        wrong.message().contains("metricName"),
        "{}",
        wrong.message()
    );
    app.stop().await;
}

#[tokio::test]
async fn a_fractional_target_sets_both_fields_with_the_int_rounded_up() {
    let (_redis, app, mut c) = work_queue_with(20).await;
    let (_, ti, tf) = spec(&mut c, &[("queue", "work-queue"), ("value", "2.5")])
        .await
        .unwrap();
    assert_eq!((ti, tf), (3, 2.5));
    app.stop().await;
}

// Activation.

#[tokio::test]
async fn activation_is_strictly_above_the_activation_value() {
    let (redis, app, mut c) = work_queue_with(19).await;
    let mut conn = redis.conn();
    let trigger = [("queue", "work-queue"), ("activationValue", "20")];
    for (n, expected) in [(19, false), (20, false), (21, true), (20, false)] {
        set_list_len(&mut conn, "work-queue", n);
        wait_value(&c, &trigger, n as f64).await;
        assert_eq!(
            active(&mut c, &trigger).await.unwrap(),
            expected,
            "{n} items"
        );
    }
    app.stop().await;
}

#[tokio::test]
async fn by_default_an_empty_queue_is_inactive_and_one_item_makes_it_active() {
    // The default activationValue is 0.
    let (redis, app, mut c) = work_queue_with(0).await;
    let trigger = [("queue", "work-queue")];
    assert!(!active(&mut c, &trigger).await.unwrap());
    set_list_len(&mut redis.conn(), "work-queue", 1);
    wait_value(&c, &trigger, 1.0).await;
    assert!(active(&mut c, &trigger).await.unwrap());
    app.stop().await;
}

#[tokio::test]
async fn a_known_empty_queue_is_a_real_zero_not_an_error() {
    let (_redis, app, mut c) = work_queue_with(0).await;
    assert_eq!(
        metrics(&mut c, &[("queue", "work-queue")]).await.unwrap(),
        (0, 0.0)
    );
    app.stop().await;
}

// Globs.

/// Lists under `jobs:pending:` holding 6 (high), 3 (normal) and 1 (low)
/// items, and `jobs:done` holding 100, all watched through `jobs:*`.
async fn pending_jobs() -> (RedisServer, TestApp, Client) {
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    set_list_len(&mut conn, "jobs:pending:high", 6);
    set_list_len(&mut conn, "jobs:pending:normal", 3);
    set_list_len(&mut conn, "jobs:pending:low", 1);
    set_list_len(&mut conn, "jobs:done", 100);
    let app = TestApp::start(&redis_config(&redis.url, "100ms", r#"- pattern: "jobs:*""#)).await;
    let c = client(&app).await;
    wait_value(&c, &[("queue", "jobs:pending:*")], 10.0).await;
    (redis, app, c)
}

#[tokio::test]
async fn a_glob_aggregates_with_sum_max_and_avg() {
    let (_redis, app, mut c) = pending_jobs().await;
    assert_eq!(
        metrics(&mut c, &[("queue", "jobs:pending:*"), ("operation", "sum")])
            .await
            .unwrap(),
        (10, 10.0)
    );
    assert_eq!(
        metrics(&mut c, &[("queue", "jobs:pending:*"), ("operation", "max")])
            .await
            .unwrap(),
        (6, 6.0)
    );
    let (int, float) = metrics(&mut c, &[("queue", "jobs:pending:*"), ("operation", "avg")])
        .await
        .unwrap();
    assert!((float - 10.0 / 3.0).abs() < 1e-9, "{float}");
    assert_eq!(int, 4, "the int field is rounded up");
    app.stop().await;
}

#[tokio::test]
async fn brace_and_character_class_globs_and_exact_names_select_queues() {
    let (_redis, app, mut c) = pending_jobs().await;
    for (queue, want) in [
        ("jobs:pending:{high,low}", 7.0),
        ("jobs:pending:[hn]*", 9.0),
        ("jobs:pending:normal", 3.0),
    ] {
        assert_eq!(
            metrics(&mut c, &[("queue", queue)]).await.unwrap().1,
            want,
            "{queue}"
        );
    }
    app.stop().await;
}

#[tokio::test]
async fn metric_names_differ_per_operation_deterministically() {
    let (_redis, app, mut c) = pending_jobs().await;
    let (sum_name, _, _) = spec(&mut c, &[("queue", "jobs:pending:*")]).await.unwrap();
    let (max_name, _, _) = spec(&mut c, &[("queue", "jobs:pending:*"), ("operation", "max")])
        .await
        .unwrap();
    assert_eq!(sum_name, "queuelength-jobs-pending");
    assert_eq!(max_name, "queuelength-jobs-pending-max");
    app.stop().await;
}

// Modes.

fn now_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// `delayed`: a timestamp zset with items due 120 s and 60 s ago and one
/// due in an hour; `emails`: a list whose head item was enqueued 30 s ago;
/// `plain`: a list of 3 without `age:`.
async fn aged_queues() -> (RedisServer, TestApp, Client) {
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    let now = now_secs();
    let _: () = redis::cmd("ZADD")
        .arg("delayed")
        .arg(now - 120.0)
        .arg("a")
        .arg(now - 60.0)
        .arg("b")
        .arg(now + 3600.0)
        .arg("c")
        .query(&mut conn)
        .unwrap();
    let item = format!(r#"{{"id":1,"enqueued_at":{}}}"#, now - 30.0);
    let _: () = redis::cmd("RPUSH")
        .arg("emails")
        .arg(item)
        .query(&mut conn)
        .unwrap();
    set_list_len(&mut conn, "plain", 3);
    let app = TestApp::start(&redis_config(
        &redis.url,
        "100ms",
        r#"
        - key: delayed
          score: timestamp
        - key: emails
          age: { end: head, field: enqueued_at, unit: seconds }
        - key: plain
        "#,
    ))
    .await;
    let c = client(&app).await;
    wait_value(&c, &[("queue", "delayed")], 3.0).await;
    (redis, app, c)
}

#[tokio::test]
async fn age_mode_reports_the_oldest_due_item_of_a_timestamp_zset() {
    let (_redis, app, mut c) = aged_queues().await;
    let trigger = [("queue", "delayed"), ("mode", "Age"), ("value", "60")];
    let (name, _, _) = spec(&mut c, &trigger).await.unwrap();
    assert_eq!(name, "age-delayed");
    let (int, age) = metrics(&mut c, &trigger).await.unwrap();
    assert!(
        (119.0..135.0).contains(&age),
        "oldest due item is ~120 s old, got {age}"
    );
    assert_eq!(int, age.ceil() as i64);
    assert_eq!(keda_replicas(age, 60.0), 3);
    app.stop().await;
}

#[tokio::test]
async fn age_mode_reads_the_head_item_of_a_list() {
    let (_redis, app, mut c) = aged_queues().await;
    let (_, age) = metrics(&mut c, &[("queue", "emails"), ("mode", "Age")])
        .await
        .unwrap();
    assert!(
        (29.0..45.0).contains(&age),
        "peeked item is ~30 s old, got {age}"
    );
    app.stop().await;
}

#[tokio::test]
async fn ready_and_scheduled_modes_split_a_timestamp_zset() {
    let (_redis, app, mut c) = aged_queues().await;
    assert_eq!(
        metrics(&mut c, &[("queue", "delayed"), ("mode", "Ready")])
            .await
            .unwrap()
            .1,
        2.0
    );
    assert_eq!(
        metrics(&mut c, &[("queue", "delayed"), ("mode", "Scheduled")])
            .await
            .unwrap()
            .1,
        1.0
    );
    app.stop().await;
}

#[tokio::test]
async fn age_mode_on_a_list_without_age_is_unavailable_never_zero() {
    let (_redis, app, mut c) = aged_queues().await;
    let e = metrics(&mut c, &[("queue", "plain"), ("mode", "Age")])
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    assert!(e.message().contains("age"), "{}", e.message());
    app.stop().await;
}

#[tokio::test]
async fn age_mode_over_a_glob_takes_the_max() {
    let (_redis, app, mut c) = aged_queues().await;
    let (_, max) = metrics(
        &mut c,
        &[
            ("queue", "{delayed,emails}"),
            ("mode", "Age"),
            ("operation", "max"),
        ],
    )
    .await
    .unwrap();
    assert!(max >= 119.0, "{max}");
    app.stop().await;
}

/// A Redis with stream `events` and its group `workers` (created at the
/// end, so everything added later is lag), watched every 200 ms.
async fn events_stream() -> (RedisServer, TestApp, Client) {
    let redis = RedisServer::start();
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg("events")
        .arg("workers")
        .arg("$")
        .arg("MKSTREAM")
        .query(&mut redis.conn())
        .unwrap();
    let app = TestApp::start(&redis_config(&redis.url, "200ms", "- key: events")).await;
    let c = client(&app).await;
    (redis, app, c)
}

fn xadd(conn: &mut redis::Connection) {
    let _: String = redis::cmd("XADD")
        .arg("events")
        .arg("*")
        .arg("k")
        .arg("v")
        .query(conn)
        .unwrap();
}

#[tokio::test]
async fn publish_rate_follows_a_real_stream_publish_rate() {
    let (redis, app, mut c) = events_stream().await;
    let trigger = [
        ("queue", "events"),
        ("mode", "PublishRate"),
        ("window", "2s"),
        ("value", "10"),
    ];
    let (name, _, _) = spec(&mut c, &trigger).await.unwrap();
    assert_eq!(name, "publishrate-events-2s");

    // ~50 entries per second, 5 every 100 ms, until the rate is read.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = std::thread::spawn({
        let mut conn = redis.conn();
        let stop = stop.clone();
        move || {
            let started = std::time::Instant::now();
            let mut added = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for _ in 0..5 {
                    xadd(&mut conn);
                    added += 1;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            (added, started.elapsed())
        }
    });
    // 12 polls (2.4 s at 200 ms) after writing began: the whole 2 s window
    // lies inside the writing.
    app.wait_polls("main", 12, Duration::from_secs(30)).await;
    let (int, rate) = metrics(&mut c, &trigger).await.unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (added, took) = tokio::task::spawn_blocking(move || writer.join().unwrap())
        .await
        .unwrap();
    let true_rate = added as f64 / took.as_secs_f64();
    assert!(
        rate > true_rate * 0.6 && rate < true_rate * 1.5,
        "publish rate {rate}/s over a 2 s window, writer did {true_rate}/s"
    );
    assert_eq!(int, rate.ceil() as i64);
    assert_eq!(keda_replicas(rate, 10.0), (rate / 10.0).ceil() as u64);

    // With publishing stopped, the rate over the window falls to a real 0.
    wait_value(&c, &trigger, 0.0).await;
    app.stop().await;
}

#[tokio::test]
async fn lag_mode_reads_the_group_lag_and_an_unknown_group_is_not_found() {
    let (redis, app, mut c) = events_stream().await;
    let mut conn = redis.conn();
    for _ in 0..5 {
        xadd(&mut conn);
    }
    // Everything added, nothing read.
    wait_value(&c, &[("queue", "events"), ("mode", "Lag")], 5.0).await;
    let (_, lag) = metrics(&mut c, &[("queue", "events"), ("mode", "Lag")])
        .await
        .unwrap();
    assert!(lag >= 1.0, "{lag}");
    let (_, lag_named) = metrics(
        &mut c,
        &[("queue", "events"), ("mode", "Lag"), ("group", "workers")],
    )
    .await
    .unwrap();
    assert!(lag_named >= lag);
    let e = metrics(
        &mut c,
        &[("queue", "events"), ("mode", "Lag"), ("group", "nobody")],
    )
    .await
    .unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    app.stop().await;
}

// Errors.

#[tokio::test]
async fn a_queue_nothing_matches_is_not_found_and_named() {
    let (_redis, app, mut c) = work_queue_with(2).await;
    let e = metrics(&mut c, &[("queue", "no-such-queue")])
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    assert!(e.message().contains("no-such-queue"));
    let e = active(&mut c, &[("queue", "nothing:*")]).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    app.stop().await;
}

/// Bad metadata, the key the error must name, and the allowed values it must list.
type BadCase<'a> = (&'a [(&'a str, &'a str)], &'a str, &'a str);

#[tokio::test]
async fn bad_metadata_is_invalid_argument_naming_the_key_and_what_is_allowed() {
    let (_redis, app, mut c) = work_queue_with(2).await;
    let cases: [BadCase; 6] = [
        (&[("mode", "QueueLength")], "queue", "required"),
        (&[("queue", "work-queue"), ("value", "-5")], "value", "> 0"),
        (
            &[("queue", "work-queue"), ("mode", "Depth")],
            "mode",
            "QueueLength, Ready, Unacked, Scheduled, Age, PublishRate, DeliverRate, Lag, WaitTime",
        ),
        (
            &[("queue", "work-queue"), ("activationvalue", "3")],
            "activationvalue",
            "accepted keys: queue, source, vhost, mode, value, activationValue, operation, window, group, state, preset, targetWait, processingTime, workersPerReplica",
        ),
        (
            &[("queue", "work-queue"), ("operation", "median")],
            "operation",
            "sum, max, avg",
        ),
        (
            &[("queue", "work-queue"), ("source", "elsewhere")],
            "source",
            "configured sources: main",
        ),
    ];
    for (pairs, key, allowed) in cases {
        for e in [
            spec(&mut c, pairs).await.unwrap_err(),
            metrics_named(&mut c, pairs, "").await.unwrap_err(),
            active(&mut c, pairs).await.unwrap_err(),
            c.stream_is_active(obj(pairs))
                .await
                .map(|_| ())
                .unwrap_err(),
        ] {
            assert_eq!(e.code(), Code::InvalidArgument, "{pairs:?}: {e:?}");
            assert!(e.message().contains(key), "{pairs:?}: {}", e.message());
            assert!(e.message().contains(allowed), "{pairs:?}: {}", e.message());
        }
    }
    app.stop().await;
}

#[tokio::test]
async fn kedas_own_metadata_keys_are_accepted_silently() {
    let (_redis, app, mut c) = work_queue_with(2).await;
    let keda = [
        ("queue", "work-queue"),
        ("scalerAddress", "queue-exporter:9732"),
        ("enableTLS", "false"),
        ("unsafeSsl", "false"),
        ("caCert", "-----BEGIN CERTIFICATE-----"),
        ("tlsClientCert", "x"),
        ("tlsClientKey", "y"),
        ("hostFromEnv", "HOST"),
    ];
    assert_eq!(metrics(&mut c, &keda).await.unwrap(), (2, 2.0));
    app.stop().await;
}

#[tokio::test]
async fn a_backend_gone_past_max_staleness_is_unavailable_never_stale_or_zero() {
    let (mut redis, app, mut c) = work_queue_with(2).await;
    // max_staleness: 3 × 100 ms, at least 2 s.
    redis.stop();
    let e = wait_code(
        &c,
        &[("queue", "work-queue")],
        Code::Unavailable,
        Duration::from_secs(15),
    )
    .await;
    assert!(e.message().contains("main"), "{}", e.message());
    assert_eq!(
        active(&mut c, &[("queue", "work-queue")])
            .await
            .unwrap_err()
            .code(),
        Code::Unavailable
    );
    // A name the stale source could never hold is still a typo: NOT_FOUND.
    assert_eq!(
        metrics(&mut c, &[("queue", "other")])
            .await
            .unwrap_err()
            .code(),
        Code::NotFound
    );
    // The spec does not depend on data: KEDA can still build the HPA.
    assert!(spec(&mut c, &[("queue", "work-queue")]).await.is_ok());

    // Back: values again, from the new (empty) Redis.
    redis.restart();
    wait_value(&c, &[("queue", "work-queue")], 0.0).await;
    app.stop().await;
}

/// An app whose only source never polls successfully: nothing listens on its port.
async fn never_polled() -> (TestApp, Client) {
    let app = TestApp::start(&redis_config(
        &format!("redis://127.0.0.1:{}", free_port()),
        "100ms",
        "- key: work-queue",
    ))
    .await;
    let c = client(&app).await;
    (app, c)
}

#[tokio::test]
async fn a_source_never_polled_successfully_is_unavailable() {
    let (app, mut c) = never_polled().await;
    let e = wait_code(
        &c,
        &[("queue", "work-queue")],
        Code::Unavailable,
        Duration::from_secs(5),
    )
    .await;
    assert!(
        e.message().contains("not polled successfully"),
        "{}",
        e.message()
    );
    assert_eq!(
        active(&mut c, &[("queue", "work-queue")])
            .await
            .unwrap_err()
            .code(),
        Code::Unavailable
    );
    app.stop().await;
}

// Health, reflection and self-metrics.

async fn health(addr: std::net::SocketAddr, service: &str) -> ServingStatus {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut h = tonic_health::pb::health_client::HealthClient::new(channel);
    let r = h
        .check(tonic_health::pb::HealthCheckRequest {
            service: service.to_string(),
        })
        .await
        .unwrap()
        .into_inner();
    ServingStatus::try_from(r.status).unwrap()
}

#[tokio::test]
async fn health_is_not_serving_before_the_first_successful_poll() {
    let (app, c) = never_polled().await;
    wait_code(
        &c,
        &[("queue", "work-queue")],
        Code::Unavailable,
        Duration::from_secs(5),
    )
    .await;
    let addr = app.app().grpc_addr.unwrap();
    assert_eq!(health(addr, "").await, ServingStatus::NotServing);
    assert_eq!(
        health(addr, "externalscaler.ExternalScaler").await,
        ServingStatus::NotServing
    );
    app.stop().await;
}

#[tokio::test]
async fn health_is_serving_after_the_first_poll() {
    let redis = RedisServer::start();
    let app = TestApp::start(&redis_config(&redis.url, "100ms", "- key: work-queue")).await;
    let addr = app.app().grpc_addr.unwrap();
    wait_for("health SERVING", Duration::from_secs(10), || async {
        (health(addr, "").await == ServingStatus::Serving).then_some(())
    })
    .await;
    assert_eq!(
        health(addr, "externalscaler.ExternalScaler").await,
        ServingStatus::Serving
    );
    app.stop().await;
}

#[tokio::test]
async fn reflection_lists_the_scaler_and_health_services() {
    use tokio_stream::StreamExt;
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

    let redis = RedisServer::start();
    let app = TestApp::start(&redis_config(&redis.url, "100ms", "- key: work-queue")).await;
    let addr = app.app().grpc_addr.unwrap();
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut r = ServerReflectionClient::new(channel);
    let req = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut resp = r
        .server_reflection_info(tokio_stream::iter([req]))
        .await
        .unwrap()
        .into_inner();
    let msg = resp.next().await.unwrap().unwrap();
    let Some(MessageResponse::ListServicesResponse(list)) = msg.message_response else {
        panic!("unexpected reflection answer {msg:?}");
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    assert!(
        names.contains(&"externalscaler.ExternalScaler".to_string()),
        "{names:?}"
    );
    assert!(
        names.contains(&"grpc.health.v1.Health".to_string()),
        "{names:?}"
    );
    app.stop().await;
}

#[tokio::test]
async fn a_name_in_two_sources_needs_source() {
    let redis = RedisServer::start();
    set_list_len(&mut redis.conn(), "work-queue", 4);
    let app = TestApp::start(&format!(
        r#"
        sources:
          - name: a
            type: redis
            url: {url}
            poll_interval: 100ms
            queues:
              - key: work-queue
          - name: b
            type: redis
            url: {url}/0
            poll_interval: 100ms
            queues:
              - key: work-queue
        "#,
        url = redis.url
    ))
    .await;
    let mut c = client(&app).await;
    wait_value(&c, &[("queue", "work-queue"), ("source", "b")], 4.0).await;
    let e = wait_code(
        &c,
        &[("queue", "work-queue")],
        Code::InvalidArgument,
        Duration::from_secs(10),
    )
    .await;
    assert!(
        e.message().starts_with("scalerMetadata.source"),
        "{}",
        e.message()
    );
    assert!(e.message().contains("a, b"), "{}", e.message());
    assert_eq!(
        metrics(&mut c, &[("queue", "work-queue"), ("source", "a")])
            .await
            .unwrap(),
        (4, 4.0)
    );
    let (name, _, _) = spec(&mut c, &[("queue", "work-queue"), ("source", "a")])
        .await
        .unwrap();
    assert_eq!(name, "queuelength-a-work-queue");
    app.stop().await;
}

#[tokio::test]
async fn rpcs_are_counted_and_timed_on_metrics() {
    let (_redis, app, mut c) = work_queue_with(1).await;
    let _ = metrics(&mut c, &[("queue", "missing")]).await;
    let _ = active(&mut c, &[("queue", "work-queue")]).await;
    let scrape = app.scrape().await;
    let requests = |method: &str, code: &str| {
        scrape.value(
            "queue_exporter_grpc_requests_total",
            &[("method", method), ("code", code)],
        )
    };
    let ok = requests("GetMetrics", "OK").unwrap();
    assert!(ok >= 1.0, "{ok}");
    assert!(requests("GetMetricSpec", "OK").unwrap() >= 1.0);
    assert_eq!(requests("IsActive", "OK"), Some(1.0));
    assert!(
        scrape
            .text()
            .contains("queue_exporter_grpc_request_duration_seconds_count{method=\"GetMetrics\"}"),
        "{scrape}"
    );
    // GetMetrics for "missing" failed with NOT_FOUND after its spec succeeded.
    assert_eq!(requests("GetMetrics", "NOT_FOUND"), Some(1.0));
    app.stop().await;
}
