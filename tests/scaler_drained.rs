//! The scaler's rule for queues that do not exist right now, driven through
//! a real gRPC client as KEDA drives it, against a real Redis:
//!
//! - a name or glob the configuration can produce (a configured `pattern`
//!   covers it) reads as an empty queue when no key exists: Redis deletes a
//!   drained key, and KEDA must still be able to scale to zero;
//! - a name nothing configured can produce is `NOT_FOUND`, whatever other,
//!   unrelated sources are doing;
//! - `UNAVAILABLE` only when a source that could hold the queue is stale,
//!   and the message names it.
mod scaler_common;
mod support;

use std::time::Duration;

use scaler_common::*;
use support::*;
use tonic::Code;

/// One Redis source `main` over `url` polling every 100 ms and rediscovering
/// every 200 ms, watching `queues` (a YAML list, flush left or indented),
/// plus `extra_sources` (source entries, indented as under `sources:`).
fn config(url: &str, queues: &str, extra_sources: &str) -> String {
    format!(
        r#"listen: {{ grpc: 127.0.0.1:0 }}
sources:
  - name: main
    type: redis
    url: {url}
    poll_interval: 100ms
    discovery_interval: 200ms
    queues:
{queues}{extra_sources}"#,
        queues = indent(queues, 6),
    )
}

/// A second Redis source `down` that never answers, watching `queues`.
fn dead_redis(queues: &str) -> String {
    format!(
        r#"  - name: down
    type: redis
    url: redis://127.0.0.1:{port}
    poll_interval: 100ms
    queues:
{queues}"#,
        port = free_port(),
        queues = indent(queues, 6),
    )
}

fn zadd_now(conn: &mut redis::Connection, key: &str, member: &str) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let _: () = redis::cmd("ZADD")
        .arg(key)
        .arg(now - 5.0)
        .arg(member)
        .query(conn)
        .unwrap();
}

fn del(conn: &mut redis::Connection, key: &str) {
    let _: () = redis::cmd("DEL").arg(key).query(conn).unwrap();
}

/// Asserts that for ~1.5 s (several discovery rounds) every mode of
/// `queue` reads 0 and the trigger is inactive, with no error at all.
async fn reads_empty_across_rediscovery(c: &mut Client, queue: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(1500);
    while tokio::time::Instant::now() < deadline {
        for mode in ["QueueLength", "Ready", "Scheduled", "Age"] {
            let trigger = [("queue", queue), ("mode", mode)];
            let value = metrics(c, &trigger).await;
            assert_eq!(
                value
                    .as_ref()
                    .map_err(|s| (s.code(), s.message().to_string())),
                Ok(&(0, 0.0)),
                "{queue} {mode}"
            );
        }
        for op in ["sum", "max", "avg"] {
            let trigger = [("queue", queue), ("operation", op)];
            assert_eq!(metrics(c, &trigger).await.unwrap(), (0, 0.0), "{op}");
        }
        assert!(!active(c, &[("queue", queue)]).await.unwrap());
        // Sampling rate over the window under test, not synchronisation.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_drained_pattern_queue_reads_zero_across_discovery_rounds() {
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    zadd_now(&mut conn, "jp:1", "job");
    let app = TestApp::start(&config(
        &redis.url,
        r#"
        - pattern: "jp:*"
          score: timestamp
        "#,
        "",
    ))
    .await;
    let mut c = client(&app).await;
    let trigger = [("queue", "jp:*")];
    wait_value(&c, &trigger, 1.0).await;
    assert!(active(&mut c, &trigger).await.unwrap());

    // The worker takes the last item; Redis deletes the key.
    let _: () = redis::cmd("ZREM")
        .arg("jp:1")
        .arg("job")
        .query(&mut conn)
        .unwrap();
    wait_value(&c, &trigger, 0.0).await;
    reads_empty_across_rediscovery(&mut c, "jp:*").await;

    // The tracked key is gone from the data, yet the answer stays 0.
    assert!(!app.scrape().await.shows_queue("jp:1"));

    // And back up: a new item is seen again.
    zadd_now(&mut conn, "jp:2", "job");
    wait_value(&c, &trigger, 1.0).await;
    app.stop().await;
}

#[tokio::test]
async fn an_exact_name_under_a_pattern_reads_zero_once_drained() {
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    set_list_len(&mut conn, "jobs:pending:high", 3);
    let app = TestApp::start(&config(&redis.url, r#"- pattern: "jobs:pending:*""#, "")).await;
    let mut c = client(&app).await;
    let trigger = [("queue", "jobs:pending:high")];
    wait_value(&c, &trigger, 3.0).await;

    del(&mut conn, "jobs:pending:high");
    wait_value(&c, &trigger, 0.0).await;
    let deadline = tokio::time::Instant::now() + Duration::from_millis(1500);
    while tokio::time::Instant::now() < deadline {
        assert_eq!(metrics(&mut c, &trigger).await.unwrap(), (0, 0.0));
        assert!(!active(&mut c, &trigger).await.unwrap());
        // Sampling rate over the 1.5 s under test, not synchronisation.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A glob inside the pattern (never had a key) reads 0 as well.
    assert_eq!(
        metrics(&mut c, &[("queue", "jobs:pending:l*")])
            .await
            .unwrap(),
        (0, 0.0)
    );
    app.stop().await;
}

#[tokio::test]
async fn rates_of_a_drained_queue_are_zero_once_the_window_has_data() {
    let redis = RedisServer::start();
    let app = TestApp::start(&config(&redis.url, r#"- pattern: "ev:*""#, "")).await;
    let mut c = client(&app).await;
    let trigger = [("queue", "ev:*"), ("mode", "PublishRate"), ("window", "1s")];
    // Two polls inside a 1 s window arrive within a few hundred ms.
    wait_value(&c, &trigger, 0.0).await;
    assert!(!active(&mut c, &trigger).await.unwrap());
    app.stop().await;
}

#[tokio::test]
async fn a_typo_is_not_found_and_says_nothing_can_produce_it() {
    let redis = RedisServer::start();
    let app = TestApp::start(&config(&redis.url, r#"- pattern: "jobs:pending:*""#, "")).await;
    let mut c = client(&app).await;
    wait_value(&c, &[("queue", "jobs:pending:*")], 0.0).await;
    for typo in ["jbos:pending:*", "jobs:pendng:high", "jobs:*"] {
        let e = metrics(&mut c, &[("queue", typo)]).await.unwrap_err();
        assert_eq!(e.code(), Code::NotFound, "{typo}: {e:?}");
        assert!(e.message().contains(typo), "{}", e.message());
        let e = active(&mut c, &[("queue", typo)]).await.unwrap_err();
        assert_eq!(e.code(), Code::NotFound, "{typo}: {e:?}");
    }
    let e = metrics(&mut c, &[("queue", "jbos:pending:*")])
        .await
        .unwrap_err();
    assert!(
        e.message()
            .contains("no configured key, pattern or queue filter can produce"),
        "{}",
        e.message()
    );
    app.stop().await;
}

#[tokio::test]
async fn a_down_source_that_could_not_hold_the_typo_leaves_it_not_found() {
    let redis = RedisServer::start();
    let app = TestApp::start(&config(
        &redis.url,
        r#"- pattern: "jobs:pending:*""#,
        &dead_redis(
            r#"
            - pattern: "other:*"
            - key: elsewhere
            "#,
        ),
    ))
    .await;
    let mut c = client(&app).await;
    wait_value(&c, &[("queue", "jobs:pending:*")], 0.0).await;
    // The dead source has no data at all, but it could never hold these names.
    for typo in ["jbos:pending:*", "jobs:pendng:high"] {
        let e = metrics(&mut c, &[("queue", typo)]).await.unwrap_err();
        assert_eq!(e.code(), Code::NotFound, "{typo}: {e:?}");
    }
    app.stop().await;
}

#[tokio::test]
async fn a_down_source_that_could_hold_the_queue_makes_it_unavailable_and_is_named() {
    let redis = RedisServer::start();
    let app = TestApp::start(&config(
        &redis.url,
        r#"- pattern: "jobs:pending:*""#,
        &dead_redis(r#"- pattern: "other:*""#),
    ))
    .await;
    let mut c = client(&app).await;
    wait_value(&c, &[("queue", "jobs:pending:*")], 0.0).await;

    // Covered by the dead source's pattern: it cannot say the queue is empty.
    for queue in ["other:*", "other:x", "oth*"] {
        let e = metrics(&mut c, &[("queue", queue)]).await.unwrap_err();
        assert_eq!(e.code(), Code::Unavailable, "{queue}: {e:?}");
        assert!(e.message().contains("source down"), "{}", e.message());
        let e = active(&mut c, &[("queue", queue)]).await.unwrap_err();
        assert_eq!(e.code(), Code::Unavailable, "{queue}: {e:?}");
    }
    // The healthy source's own queues are unaffected.
    assert_eq!(
        metrics(&mut c, &[("queue", "jobs:pending:x")])
            .await
            .unwrap(),
        (0, 0.0)
    );
    app.stop().await;
}

#[tokio::test]
async fn a_stale_covering_source_is_unavailable_never_zero() {
    let mut redis = RedisServer::start();
    let app = TestApp::start(&config(&redis.url, r#"- pattern: "jp:*""#, "")).await;
    let c = client(&app).await;
    wait_value(&c, &[("queue", "jp:*")], 0.0).await;
    redis.stop();
    let e = wait_code(
        &c,
        &[("queue", "jp:*")],
        Code::Unavailable,
        Duration::from_secs(15),
    )
    .await;
    assert!(e.message().contains("main"), "{}", e.message());
    app.stop().await;
}

#[tokio::test]
async fn a_down_rabbitmq_source_counts_only_for_names_its_filters_keep() {
    let redis = RedisServer::start();
    let rabbit = format!(
        r#"  - name: rabbit
    type: rabbitmq
    url: http://127.0.0.1:{port}
    vhosts: [orders]
    include: '^work\.'
    poll_interval: 100ms
    timeout: 200ms
"#,
        port = free_port()
    );
    let app = TestApp::start(&config(&redis.url, r#"- pattern: "jobs:*""#, &rabbit)).await;
    let mut c = client(&app).await;
    wait_value(&c, &[("queue", "jobs:*")], 0.0).await;

    // Names the broken broker's filters would drop are still typos.
    for trigger in [
        vec![("queue", "jbos:x")],
        vec![("queue", "other.x")],
        vec![("queue", "work.x"), ("vhost", "billing")],
    ] {
        let e = metrics(&mut c, &trigger).await.unwrap_err();
        assert_eq!(e.code(), Code::NotFound, "{trigger:?}: {e:?}");
    }
    // A name it would report: it cannot tell, so UNAVAILABLE, naming it.
    for trigger in [
        vec![("queue", "work.x")],
        vec![("queue", "work.x"), ("vhost", "orders")],
    ] {
        let e = metrics(&mut c, &trigger).await.unwrap_err();
        assert_eq!(e.code(), Code::Unavailable, "{trigger:?}: {e:?}");
        assert!(e.message().contains("source rabbit"), "{}", e.message());
    }
    app.stop().await;
}
