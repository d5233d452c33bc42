//! Least privilege, tested with the binary (`check --connect`, `once` and
//! `serve`) as a child process:
//!
//! - the whole Redis side (discovery with and without `types:`, every key
//!   type, list age peeks, timestamp zsets with their age histogram, stream
//!   groups) runs under the ACL user `-@all +@read +@connection ~*` and
//!   nothing is refused (`ACL LOG` stays empty);
//! - the RabbitMQ management method (`stats: full` and `totals`) works with a
//!   user tagged only `monitoring` whose permissions on the vhost are the
//!   empty regex `^$` for configure, write and read (access, no rights); the
//!   AMQP method works with such a user too (no tag needed).
//!
//! `tests/redis_source.rs` checks, in process, that the commands sent are
//! read-only (MONITOR) and that `SELECT` works under the ACL; this file
//! checks the whole binary under exactly the ACL that docs/redis.md and
//! docs/security.md document.
mod reliability_support;
mod support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reliability_support::*;
use support::*;

const REASONS: [&str; 10] = [
    "connect",
    "auth",
    "timeout",
    "backend",
    "malformed",
    "http_4xx",
    "http_5xx",
    "too_large",
    "not_found",
    "config",
];

/// Lines of counted errors (`queue_exporter_poll_errors_total` above 0).
fn counted_errors(body: &str) -> Vec<String> {
    body.lines()
        .filter(|l| l.starts_with("queue_exporter_poll_errors_total{") && !l.ends_with(" 0"))
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_whole_redis_side_runs_under_minus_all_plus_read_plus_connection() {
    let redis = RedisServer::start();
    redis.acl_user("qe", "ro-pass", READ_ONLY_ACL);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let t = |off: f64| format!("{:.3}", now + off);
    for args in [
        vec!["RPUSH", "work", &t(-42.0), "b", "c"],
        vec!["RPUSH", "jobs:list", "a"],
        vec![
            "ZADD",
            "jobs:delayed",
            &t(-30.0),
            "a",
            &t(-5.0),
            "b",
            &t(60.0),
            "c",
        ],
        vec!["HSET", "jobs:processing", "w1", "j1", "w2", "j2"],
        vec!["SADD", "jobs:set", "m1"],
        vec!["XADD", "events", "*", "k", "v"],
        vec!["XADD", "events", "*", "k", "v"],
        vec!["XGROUP", "CREATE", "events", "workers", "0"],
        vec!["SET", "jobs:not-a-queue", "x"],
    ] {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        redis.run::<redis::Value>(&args);
    }
    // The user really is read-only.
    let mut ro = redis::Client::open(redis.url.replace("redis://", "redis://qe:ro-pass@"))
        .unwrap()
        .get_connection()
        .unwrap();
    let refused = redis::cmd("SET")
        .arg("x")
        .arg("1")
        .query::<()>(&mut ro)
        .unwrap_err();
    assert_eq!(refused.code(), Some("NOPERM"), "{refused}");
    let _: () = redis::cmd("ACL")
        .arg("LOG")
        .arg("RESET")
        .query(&mut redis.conn())
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let pw = write_file(&dir, "pw", "ro-pass\n");
    let body = format!(
        "sources:
  - name: main
    type: redis
    url: {url}
    password_file: {pw}
    poll_interval: 100ms
    discovery_interval: 300ms
    age_histogram_interval: 0s
    queues:
      - key: work
        age: {{ unit: seconds }}
      - key: events
      - key: missing
      - pattern: \"jobs:delay*\"
        score: timestamp
        types: [zset]
      - pattern: \"jobs:*\"
",
        url = redis.url.replace("redis://", "redis://qe@"),
        pw = pw.display()
    );
    let config = write_file(
        &dir,
        "config.yaml",
        &format!("listen: {{ grpc: null }}\n{body}"),
    );
    let c = config.to_str().unwrap();

    // check --connect and once.
    let (code, out, err) = run_bin(&["check", "--connect", "--config", c], &[]);
    assert_eq!(code, 0, "check --connect: {out}{err}");
    let (code, out, err) = run_bin(&["once", "--config", c], &[]);
    assert_eq!(code, 0, "once: {err}");
    assert!(
        counted_errors(&out).is_empty(),
        "{:?}",
        counted_errors(&out)
    );

    // serve, for a dozen polls and a few discovery rounds.
    let exp = Exporter::start(&body, &[], &[]).await;
    let polls = |b: &str| {
        sample(
            b,
            "queue_exporter_poll_duration_seconds_count",
            &[("source", "main")],
        )
        .unwrap_or(0.0)
    };
    let body = poll_until(Duration::from_secs(20), || async {
        let b = exp.metrics().await;
        (polls(&b) >= 12.0).then_some(b)
    })
    .await
    .expect("12 polls");
    assert!(
        counted_errors(&body).is_empty(),
        "{:?}",
        counted_errors(&body)
    );
    let q = |name: &str, queue: &str| sample(&body, name, &[("queue", queue)]);
    assert_eq!(
        sample(&body, "queue_exporter_source_up", &[("source", "main")]),
        Some(1.0)
    );
    assert_eq!(q("queue_depth", "work"), Some(3.0));
    let age = q("queue_oldest_message_age_seconds", "work").unwrap();
    assert!((42.0..70.0).contains(&age), "{age}");
    assert_eq!(q("queue_depth", "jobs:list"), Some(1.0));
    assert_eq!(q("queue_messages_ready", "jobs:delayed"), Some(2.0));
    assert_eq!(q("queue_messages_scheduled", "jobs:delayed"), Some(1.0));
    assert_eq!(
        sample(
            &body,
            "queue_message_age_seconds_bucket",
            &[("queue", "jobs:delayed"), ("le", "10.0")]
        ),
        Some(1.0)
    );
    assert_eq!(q("queue_depth", "jobs:processing"), Some(2.0));
    assert_eq!(q("queue_depth", "jobs:set"), Some(1.0));
    assert_eq!(q("queue_depth", "events"), Some(2.0));
    assert_eq!(
        sample(
            &body,
            "queue_stream_group_pending",
            &[("queue", "events"), ("group", "workers")]
        ),
        Some(0.0)
    );
    assert_eq!(q("queue_depth", "missing"), Some(0.0));
    assert_eq!(q("queue_depth", "jobs:not-a-queue"), None);
    drop(exp);

    // Nothing was refused along the way.
    let log: Vec<redis::Value> = redis::cmd("ACL")
        .arg("LOG")
        .query(&mut redis.conn())
        .unwrap();
    assert!(log.is_empty(), "ACL denials: {log:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_management_works_for_a_user_tagged_only_monitoring() {
    let (vhost, conn, ch) = RabbitVhost::with_queue("lp", "work").await;
    publish(&ch, "work", 3, lapin::BasicProperties::default()).await;
    let user_name = format!("qe-monitor-{}", std::process::id());
    let password = "mon-pass-1";
    // Tagged `monitoring`, and (for now) no permission on any vhost.
    let user = RabbitUser::create(&user_name, password, "monitoring").await;
    // A second user for AMQP: may configure, write and read nothing.
    let amqp_user_name = format!("qe-amqp-{}", std::process::id());
    let amqp_user = RabbitUser::create(&amqp_user_name, password, "").await;
    amqp_user.permit(&vhost.name, "^$", "^$", "^$").await;

    // The monitoring user cannot change anything.
    let resp = reqwest::Client::new()
        .put(format!(
            "{RABBIT_API}/queues/{}/created-by-monitor",
            pct(&vhost.name)
        ))
        .basic_auth(&user_name, Some(password))
        .json(&serde_json::json!({"durable": false}))
        .send()
        .await
        .unwrap();
    assert!(
        [401, 403].contains(&resp.status().as_u16()),
        "a monitoring user could declare a queue: {}",
        resp.status()
    );

    let body = format!(
        "sources:
  - name: full
    type: rabbitmq
    url: http://127.0.0.1:15672
    username: {user_name}
    password: {password}
    vhosts: [\"{vh}\"]
    poll_interval: 500ms
  - name: totals
    type: rabbitmq
    url: http://127.0.0.1:15672
    username: {user_name}
    password: {password}
    vhosts: [\"{vh}\"]
    stats: totals
    poll_interval: 500ms
  - name: all-vhosts
    type: rabbitmq
    url: http://127.0.0.1:15672
    username: {user_name}
    password: {password}
    include: \"^work$\"
    poll_interval: 500ms
  - name: amqp
    type: rabbitmq
    method: amqp
    url: amqp://{amqp_user_name}:{password}@127.0.0.1:5672/{vh_enc}
    queues: [work]
    poll_interval: 500ms
",
        vh = vhost.name,
        vh_enc = pct(&vhost.name),
    );
    let exp = Exporter::start(&body, &[], &[]).await;
    // Without any permission on the vhost, RabbitMQ refuses its listing to
    // a monitoring user (counted as `auth`), and leaves it out of the
    // all-vhosts listing: access to each vhost is needed, even if empty.
    let b = poll_until(Duration::from_secs(20), || async {
        let b = exp.metrics().await;
        let refused = ["full", "totals"].iter().all(|s| {
            sample(
                &b,
                "queue_exporter_poll_errors_total",
                &[("source", s), ("reason", "auth")],
            )
            .is_some_and(|n| n >= 1.0)
        });
        let listed =
            sample(&b, "queue_exporter_source_up", &[("source", "all-vhosts")]) == Some(1.0);
        (refused && listed).then_some(b)
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "auth errors for a user without vhost access; {}",
            exp.stderr()
        )
    });
    assert_eq!(
        sample(
            &b,
            "queue_depth",
            &[("source", "all-vhosts"), ("vhost", &vhost.name)]
        ),
        None
    );
    // Access to the vhost with the empty regex: configure, write and read
    // nothing. Now every method sees the queue.
    user.permit(&vhost.name, "^$", "^$", "^$").await;
    let (status, _) = rabbit_api(
        reqwest::Method::PUT,
        &format!("/queues/{}/created-by-monitor", pct(&vhost.name)),
        None,
    )
    .await;
    assert!(status < 300, "guest may still declare ({status})");
    let resp = reqwest::Client::new()
        .delete(format!(
            "{RABBIT_API}/queues/{}/created-by-monitor",
            pct(&vhost.name)
        ))
        .basic_auth(&user_name, Some(password))
        .send()
        .await
        .unwrap();
    assert!(
        [401, 403].contains(&resp.status().as_u16()),
        "the monitoring user could delete a queue: {}",
        resp.status()
    );
    let errors_before = counted_errors(&exp.metrics().await).len();
    // Management statistics lag up to 5 s.
    let body = poll_until(Duration::from_secs(20), || async {
        let b = exp.metrics().await;
        ["full", "totals", "all-vhosts"]
            .iter()
            .all(|s| {
                sample(
                    &b,
                    "queue_depth",
                    &[("source", s), ("vhost", &vhost.name), ("queue", "work")],
                ) == Some(3.0)
            })
            .then_some(b)
    })
    .await
    .unwrap_or_else(|| panic!("depth 3 for the monitoring user; {}", exp.stderr()));
    assert!(errors_before > 0);
    for s in ["full", "totals", "all-vhosts", "amqp"] {
        assert_eq!(
            sample(&body, "queue_exporter_source_up", &[("source", s)]),
            Some(1.0),
            "{s}"
        );
        for r in REASONS.iter().filter(|r| **r != "auth") {
            assert_eq!(
                sample(
                    &body,
                    "queue_exporter_poll_errors_total",
                    &[("source", s), ("reason", r)]
                ),
                Some(0.0),
                "{s} {r}"
            );
        }
    }
    assert_eq!(
        sample(
            &body,
            "queue_messages_ready",
            &[("source", "amqp"), ("queue", "work")]
        ),
        Some(3.0)
    );
    assert_eq!(
        sample(
            &body,
            "queue_info",
            &[("source", "full"), ("queue", "work"), ("type", "classic")]
        ),
        Some(1.0)
    );
    drop(exp);
    drop(user);
    drop(amqp_user);
    drop(conn);
}
