//! The scaler's push streams (`external-push`) against a real Redis:
//! `StreamIsActive` transitions, `StreamMetricSpec`, 1,000 concurrent
//! streams without leaks, and streams ending on shutdown.
mod scaler_common;
mod support;

use std::time::Duration;

use queue_exporter::scaler::proto::IsActiveResponse;
use scaler_common::*;
use support::*;

/// Poll interval of these tests; "within one poll" waits use generous timeouts.
const POLL: &str = "200ms";

/// Waits for the next stream message; `None` if none came within `timeout`.
async fn next_within(
    s: &mut tonic::Streaming<IsActiveResponse>,
    timeout: Duration,
) -> Option<Result<Option<IsActiveResponse>, tonic::Status>> {
    tokio::time::timeout(timeout, s.message()).await.ok()
}

#[tokio::test]
async fn stream_sends_true_after_the_first_push_and_not_again_while_active() {
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    let app = TestApp::start(&redis_config(&redis.url, POLL, "- key: work-queue")).await;
    let mut c = client(&app).await;
    let trigger = [("queue", "work-queue")];
    wait_value(&c, &trigger, 0.0).await;

    let mut stream = c
        .stream_is_active(obj(&trigger))
        .await
        .unwrap()
        .into_inner();
    // Empty queue: nothing is sent.
    assert!(
        next_within(&mut stream, Duration::from_secs(1))
            .await
            .is_none(),
        "no message while empty"
    );

    // The first RPUSH: `true` within one poll (generous timeout).
    let _: () = redis::cmd("RPUSH")
        .arg("work-queue")
        .arg("a")
        .query(&mut conn)
        .unwrap();
    let msg = next_within(&mut stream, Duration::from_secs(5))
        .await
        .expect("true after the first RPUSH");
    assert!(msg.unwrap().unwrap().result);

    // More items, several polls: still active, so no repeated `true`.
    let _: () = redis::cmd("RPUSH")
        .arg("work-queue")
        .arg("b")
        .arg("c")
        .query(&mut conn)
        .unwrap();
    wait_value(&c, &trigger, 3.0).await;
    assert!(
        next_within(&mut stream, Duration::from_secs(2))
            .await
            .is_none(),
        "no second true while non-empty"
    );

    // Drained, then a new item: a new inactive→active transition.
    set_list_len(&mut conn, "work-queue", 0);
    wait_value(&c, &trigger, 0.0).await;
    // Two whole polls more of the empty queue: a message sent for them
    // would be waiting in the stream by now.
    app.wait_polls("main", 3, Duration::from_secs(10)).await;
    assert!(
        next_within(&mut stream, Duration::from_millis(100))
            .await
            .is_none(),
        "nothing sent on becoming inactive"
    );
    let _: () = redis::cmd("RPUSH")
        .arg("work-queue")
        .arg("d")
        .query(&mut conn)
        .unwrap();
    let msg = next_within(&mut stream, Duration::from_secs(5))
        .await
        .expect("true after refilling");
    assert!(msg.unwrap().unwrap().result);

    let streams = self_metric(
        &app,
        "queue_exporter_scaler_streams",
        &[("method", "StreamIsActive")],
    )
    .await;
    assert_eq!(streams, Some(1.0));
    drop(stream);
    wait_for("stream gauge back to 0", Duration::from_secs(5), || async {
        (self_metric(
            &app,
            "queue_exporter_scaler_streams",
            &[("method", "StreamIsActive")],
        )
        .await
            == Some(0.0))
        .then_some(())
    })
    .await;
    app.stop().await;
}

#[tokio::test]
async fn stream_on_an_active_queue_sends_true_at_once_and_respects_activation() {
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    set_list_len(&mut conn, "work-queue", 5);
    let app = TestApp::start(&redis_config(&redis.url, POLL, "- key: work-queue")).await;
    let mut c = client(&app).await;
    wait_value(&c, &[("queue", "work-queue")], 5.0).await;

    let mut active_stream = c
        .stream_is_active(obj(&[("queue", "work-queue")]))
        .await
        .unwrap()
        .into_inner();
    let msg = next_within(&mut active_stream, Duration::from_secs(5))
        .await
        .expect("true on open");
    assert!(msg.unwrap().unwrap().result);

    // activationValue 10: 5 items are not enough; 11 are.
    let trigger = [("queue", "work-queue"), ("activationValue", "10")];
    let mut gated = c
        .stream_is_active(obj(&trigger))
        .await
        .unwrap()
        .into_inner();
    assert!(
        next_within(&mut gated, Duration::from_secs(1))
            .await
            .is_none()
    );
    set_list_len(&mut conn, "work-queue", 11);
    let msg = next_within(&mut gated, Duration::from_secs(5))
        .await
        .expect("true above activationValue");
    assert!(msg.unwrap().unwrap().result);
    // The first stream stayed active throughout: nothing more on it.
    assert!(
        next_within(&mut active_stream, Duration::from_millis(500))
            .await
            .is_none()
    );
    app.stop().await;
}

#[tokio::test]
async fn stream_metric_spec_sends_the_spec_on_open() {
    let redis = RedisServer::start();
    let app = TestApp::start(&redis_config(&redis.url, POLL, "- key: work-queue")).await;
    let mut c = client(&app).await;
    let trigger = [("queue", "work-queue"), ("value", "7.5")];
    let expected = c.get_metric_spec(obj(&trigger)).await.unwrap().into_inner();
    let mut stream = c
        .stream_metric_spec(obj(&trigger))
        .await
        .unwrap()
        .into_inner();
    let first = tokio::time::timeout(Duration::from_secs(5), stream.message())
        .await
        .expect("spec on open")
        .unwrap()
        .unwrap();
    assert_eq!(first, expected);
    assert_eq!(first.metric_specs.len(), 1);
    assert_eq!(first.metric_specs[0].target_size, 8);
    assert_eq!(first.metric_specs[0].target_size_float, 7.5);
    // Polls keep landing; the spec does not change, so nothing more is sent.
    let more = tokio::time::timeout(Duration::from_secs(1), stream.message()).await;
    assert!(more.is_err(), "unchanged spec is not re-sent: {more:?}");
    assert_eq!(
        self_metric(
            &app,
            "queue_exporter_scaler_streams",
            &[("method", "StreamMetricSpec")]
        )
        .await,
        Some(1.0)
    );
    // Bad metadata is refused when the stream is opened.
    let e = c
        .stream_metric_spec(obj(&[("queue", "w"), ("value", "0")]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_streams_open_and_close_without_leaks() {
    const N: usize = 1000;
    let redis = RedisServer::start();
    set_list_len(&mut redis.conn(), "work-queue", 3);
    let app = TestApp::start(&redis_config(&redis.url, POLL, "- key: work-queue")).await;
    let c = client(&app).await;
    wait_value(&c, &[("queue", "work-queue")], 3.0).await;
    let runtime = tokio::runtime::Handle::current().metrics();
    // The baseline once the first client calls' transient tasks are gone:
    // the count is the same on 10 checks in a row (20 ms apart).
    let last = std::cell::Cell::new((usize::MAX, 0));
    let baseline = wait_for("the task count to settle", Duration::from_secs(10), || {
        let alive = runtime.num_alive_tasks();
        let (prev, same) = last.get();
        let same = if alive == prev { same + 1 } else { 0 };
        last.set((alive, same));
        async move { (same >= 10).then_some(alive) }
    })
    .await;

    let opens = (0..N).map(|i| {
        let mut c = c.clone();
        async move {
            let mut r = obj(&[("queue", "work-queue")]);
            r.name = format!("worker-{i}");
            let mut s = c
                .stream_is_active(r)
                .await
                .expect("open stream")
                .into_inner();
            // Each stream is live: the queue is active, so `true` comes at once.
            let first = tokio::time::timeout(Duration::from_secs(20), s.message())
                .await
                .expect("first message in time")
                .expect("stream ok")
                .expect("a message");
            assert!(first.result);
            s
        }
    });
    let streams = futures_util::future::join_all(opens).await;
    assert_eq!(streams.len(), N);
    wait_for(
        "gauge shows 1000 streams",
        Duration::from_secs(10),
        || async {
            (self_metric(
                &app,
                "queue_exporter_scaler_streams",
                &[("method", "StreamIsActive")],
            )
            .await
                == Some(N as f64))
            .then_some(())
        },
    )
    .await;
    // Snapshots keep being published to 1,000 open streams; unary calls still answer.
    let mut c2 = c.clone();
    assert_eq!(
        metrics(&mut c2, &[("queue", "work-queue")]).await.unwrap(),
        (3, 3.0)
    );

    drop(streams);
    wait_for("every stream closed", Duration::from_secs(10), || async {
        (self_metric(
            &app,
            "queue_exporter_scaler_streams",
            &[("method", "StreamIsActive")],
        )
        .await
            == Some(0.0))
        .then_some(())
    })
    .await;
    // No task per stream outlives its stream.
    wait_for(
        "tasks back to the baseline",
        Duration::from_secs(10),
        || async {
            let alive = runtime.num_alive_tasks();
            (alive <= baseline + 5).then_some(())
        },
    )
    .await;
    let requests = self_metric(
        &app,
        "queue_exporter_grpc_requests_total",
        &[("method", "StreamIsActive"), ("code", "OK")],
    )
    .await;
    assert_eq!(requests, Some(N as f64));
    app.stop().await;
}

#[tokio::test]
async fn open_streams_end_on_shutdown() {
    let redis = RedisServer::start();
    let app = TestApp::start(&redis_config(&redis.url, POLL, "- key: work-queue")).await;
    let mut c = client(&app).await;
    let mut active = c
        .stream_is_active(obj(&[("queue", "work-queue")]))
        .await
        .unwrap()
        .into_inner();
    let mut spec = c
        .stream_metric_spec(obj(&[("queue", "work-queue")]))
        .await
        .unwrap()
        .into_inner();
    let _first_spec = spec.message().await.unwrap().unwrap();
    tokio::time::timeout(Duration::from_secs(10), app.stop())
        .await
        .expect("app stops");
    let end = tokio::time::timeout(Duration::from_secs(5), active.message())
        .await
        .expect("stream ends");
    assert!(
        !matches!(end, Ok(Some(_))),
        "no message, just the end: {end:?}"
    );
    let end = tokio::time::timeout(Duration::from_secs(5), spec.message())
        .await
        .expect("stream ends");
    assert!(!matches!(end, Ok(Some(_))), "{end:?}");
}
