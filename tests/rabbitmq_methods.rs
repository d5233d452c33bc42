//! The three RabbitMQ methods (management, prometheus, amqp) side by side
//! against the real broker on 127.0.0.1, in vhosts whose names hold `/` and
//! spaces; plus AMQP's own failure modes. Each test makes its own vhosts
//! through the management API and deletes them afterwards.
mod support;

use std::time::Duration;

use lapin::BasicProperties;
use lapin::types::AMQPValue;
use queue_exporter::config::SourceConfig;
use queue_exporter::sources::Source;
use queue_exporter::sources::rabbitmq::RabbitSource;
use support::*;

/// Long enough for management stats (5 s steps) and quorum queue stats.
const SETTLE: Duration = Duration::from_secs(40);

/// The value of `name{labels}` in a fresh scrape.
async fn value(app: &TestApp, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    sample(&app.metrics().await, name, labels)
}

/// Queues of the agreement test and their ready counts.
const QUEUES: [(&str, usize); 4] = [("classic", 5), ("quorum", 3), ("priority", 4), ("empty", 0)];

async fn fill(vh: &RabbitVhost) -> lapin::Connection {
    let conn = vh.connect().await;
    let ch = confirm_channel(&conn).await;
    declare_queue(&ch, "classic", &[]).await;
    declare_queue(
        &ch,
        "quorum",
        &[("x-queue-type", AMQPValue::LongString("quorum".into()))],
    )
    .await;
    declare_queue(
        &ch,
        "priority",
        &[("x-max-priority", AMQPValue::ShortShortUInt(9))],
    )
    .await;
    declare_queue(&ch, "empty", &[]).await;
    for (q, n) in QUEUES {
        publish(&ch, q, n, BasicProperties::default().with_priority(3)).await;
    }
    conn
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_methods_agree_on_ready_counts_in_odd_vhost_names() {
    let pid = std::process::id();
    let a = RabbitVhost::create_named(&format!("qe agree/{pid}")).await;
    let b = RabbitVhost::create_named(&format!("qe/two words {pid}")).await;
    let _ca = fill(&a).await;
    let _cb = fill(&b).await;

    let mut yaml = String::from("sources:\n");
    for (i, vh) in [&a, &b].into_iter().enumerate() {
        let v = &vh.name;
        yaml += &format!(
            "  - name: mgmt{i}\n    type: rabbitmq\n    url: http://guest:guest@127.0.0.1:15672\n    vhosts: [\"{v}\"]\n    poll_interval: 500ms\n\
             \x20 - name: prom{i}\n    type: rabbitmq\n    method: prometheus\n    urls: [\"http://127.0.0.1:15692\"]\n    vhosts: [\"{v}\"]\n    stats: totals\n    poll_interval: 500ms\n\
             \x20 - name: amqp{i}\n    type: rabbitmq\n    method: amqp\n    url: {url}\n    queues: [classic, quorum, priority, empty, missing]\n    poll_interval: 500ms\n",
            url = vh.amqp_url(),
        );
    }
    let owned = TestApp::start(&yaml).await;
    let app = &owned;

    for (i, vh) in [&a, &b].into_iter().enumerate() {
        let v = vh.name.as_str();
        for (queue, ready) in QUEUES {
            let names = [format!("mgmt{i}"), format!("prom{i}"), format!("amqp{i}")];
            let want = Some(ready as f64);
            let got = wait_for(
                &format!("{queue} in {v:?}: every method says {ready}"),
                SETTLE,
                || {
                    let names = &names;
                    async move {
                        let text = app.metrics().await;
                        let got: Vec<_> = names
                            .iter()
                            .map(|s| {
                                sample(
                                    &text,
                                    "queue_messages_ready",
                                    &[("source", s), ("vhost", v), ("queue", queue)],
                                )
                            })
                            .collect();
                        got.iter().all(|g| *g == want).then_some(got)
                    }
                },
            )
            .await;
            assert_eq!(got.len(), 3);
        }
        let text = app.metrics().await;
        let amqp = format!("amqp{i}");
        let labels = |q: &'static str| [("source", amqp.as_str()), ("vhost", v), ("queue", q)];
        // AMQP sees ready messages and consumers, nothing else.
        assert_eq!(
            sample(&text, "queue_consumers", &labels("classic")),
            Some(0.0)
        );
        assert_eq!(sample(&text, "queue_depth", &labels("classic")), None);
        assert_eq!(
            sample(&text, "queue_messages_unacked", &labels("classic")),
            None
        );
        // The missing queue is counted, not shown, and disturbs nothing.
        assert_eq!(
            sample(&text, "queue_messages_ready", &labels("missing")),
            None
        );
        let not_found = sample(
            &text,
            "queue_exporter_poll_errors_total",
            &[("source", amqp.as_str()), ("reason", "not_found")],
        )
        .expect("not_found counted");
        assert!(not_found >= 1.0);
        assert_eq!(
            sample(
                &text,
                "queue_exporter_source_up",
                &[("source", amqp.as_str())]
            ),
            Some(1.0)
        );
        assert_eq!(
            sample(
                &text,
                "queue_exporter_rabbitmq_queues",
                &[("source", amqp.as_str()), ("vhost", v)]
            ),
            Some(4.0)
        );
        // Depth agrees too where both methods see it.
        let prom = format!("prom{i}");
        let mgmt = format!("mgmt{i}");
        for (queue, ready) in QUEUES {
            for s in [&prom, &mgmt] {
                assert_eq!(
                    sample(
                        &text,
                        "queue_depth",
                        &[("source", s.as_str()), ("vhost", v), ("queue", queue)]
                    ),
                    Some(ready as f64),
                    "{s} {queue}"
                );
            }
        }
    }
    // The vhost label is the name exactly as RabbitMQ has it.
    assert!(
        value(
            app,
            "queue_depth",
            &[("vhost", a.name.as_str()), ("queue", "classic")]
        )
        .await
        .is_some()
    );
    owned.stop().await;
}

/// Builds a source from one YAML source entry.
fn rabbit_source(entry: &str) -> RabbitSource {
    let (config, _dir) = load_config(&format!("sources:\n{entry}"));
    match config.sources.into_iter().next() {
        Some(SourceConfig::RabbitMq(c)) => RabbitSource::new(c),
        _ => panic!("not a rabbitmq source"),
    }
}

#[tokio::test]
async fn amqp_failures_have_reasons_and_no_secrets() {
    let vh = RabbitVhost::create("amqp-fail").await;
    let port = free_port();
    let cases = [
        (
            format!("amqp://guest:wrong-s3cret@127.0.0.1:5672/{}", pct(&vh.name)),
            "auth",
            "wrong-s3cret",
        ),
        (
            // No such vhost: NOT_ALLOWED.
            "amqp://guest:guest@127.0.0.1:5672/no-such-vhost-qe".to_string(),
            "auth",
            "guest:guest",
        ),
        (
            format!("amqp://guest:an0ther-s3cret@127.0.0.1:{port}/"),
            "connect",
            "an0ther-s3cret",
        ),
    ];
    for (url, reason, secret) in cases {
        let mut source = rabbit_source(&format!(
            "  - name: r\n    type: rabbitmq\n    method: amqp\n    url: {url}\n    queues: [q]\n    timeout: 2s\n"
        ));
        let e = source.poll().await.expect_err("poll must fail");
        let text = e.to_string();
        assert_eq!(e.reason(), reason, "{text}");
        assert!(!text.contains(secret), "{text}");
        assert!(!format!("{source:?}").contains(secret));
    }
    drop(vh);
}

#[tokio::test]
async fn amqp_connection_is_reused_and_survives_a_missing_queue() {
    let vh = RabbitVhost::create("amqp-reuse").await;
    let conn = vh.connect().await;
    let ch = confirm_channel(&conn).await;
    declare_queue(&ch, "a", &[]).await;
    declare_queue(&ch, "b", &[]).await;
    publish(&ch, "b", 2, BasicProperties::default()).await;
    let mut source = rabbit_source(&format!(
        "  - name: r\n    type: rabbitmq\n    method: amqp\n    url: {}\n    queues: [nope1, a, nope2, b, nope3]\n",
        vh.amqp_url()
    ));
    for _ in 0..3 {
        let out = source.poll().await.expect("poll");
        let got: Vec<_> = out
            .queues
            .iter()
            .map(|q| (q.name.as_str(), q.ready))
            .collect();
        assert_eq!(got, [("a", Some(0)), ("b", Some(2))]);
        assert_eq!(out.partial_errors, ["not_found"; 3]);
    }
    // One connection for all three polls.
    let (_, body) = rabbit_api(
        reqwest::Method::GET,
        "/connections?columns=vhost,client_properties",
        None,
    )
    .await;
    let connections: Vec<serde_json::Value> = serde_json::from_str(&body).unwrap();
    let ours = connections
        .iter()
        .filter(|c| c["vhost"] == vh.name.as_str())
        .filter(|c| c["client_properties"]["connection_name"] == "queue-exporter r")
        .count();
    assert!(ours <= 1, "{ours} exporter connections");
    drop(vh);
}
