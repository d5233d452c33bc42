//! The scaler over the RabbitMQ source, against the real broker on
//! 127.0.0.1 (AMQP 5672, management API 15672, guest/guest). Each test makes
//! its own vhosts and deletes them afterwards.
mod scaler_common;
mod support;

use std::time::Duration;

use scaler_common::*;
use support::*;
use tonic::Code;

/// Management API base URL.
const API: &str = "http://127.0.0.1:15672/api";

/// Vhosts made for one test, deleted on drop.
struct Vhosts {
    /// Their names.
    names: Vec<String>,
}

impl Drop for Vhosts {
    fn drop(&mut self) {
        for v in &self.names {
            blocking_delete(&format!("{API}/vhosts/{}", enc(v)));
        }
    }
}

/// Percent-encodes a vhost for a URL path.
fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// DELETE with guest credentials, usable from a drop handler: runs on its own
/// thread and runtime, since a test's runtime may be shutting down.
fn blocking_delete(url: &str) {
    let url = url.to_string();
    let _ = std::thread::spawn(move || {
        if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            rt.block_on(async {
                let _ = reqwest::Client::new()
                    .delete(&url)
                    .basic_auth("guest", Some("guest"))
                    .send()
                    .await;
            });
        }
    })
    .join();
}

async fn api(method: reqwest::Method, path: &str, body: Option<serde_json::Value>) {
    let mut req = reqwest::Client::new()
        .request(method.clone(), format!("{API}{path}"))
        .basic_auth("guest", Some("guest"));
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.expect("management API reachable");
    assert!(
        resp.status().is_success(),
        "{method} {path}: {}",
        resp.status()
    );
}

/// Makes fresh vhosts (guest has full permissions) with a durable queue `queue` in each.
async fn setup(tag: &str, count: usize, queue: &str) -> Vhosts {
    let names: Vec<String> = (0..count)
        .map(|i| format!("qe-scaler-{tag}-{}-{i}", std::process::id()))
        .collect();
    for v in &names {
        let _ = reqwest::Client::new()
            .delete(format!("{API}/vhosts/{}", enc(v)))
            .basic_auth("guest", Some("guest"))
            .send()
            .await;
        api(reqwest::Method::PUT, &format!("/vhosts/{}", enc(v)), None).await;
        api(
            reqwest::Method::PUT,
            &format!("/permissions/{}/guest", enc(v)),
            Some(serde_json::json!({"configure": ".*", "write": ".*", "read": ".*"})),
        )
        .await;
        api(
            reqwest::Method::PUT,
            &format!("/queues/{}/{}", enc(v), enc(queue)),
            Some(serde_json::json!({"durable": true, "auto_delete": false})),
        )
        .await;
    }
    Vhosts { names }
}

/// Publishes `n` messages to `queue` through the default exchange.
async fn publish(vhost: &str, queue: &str, n: usize) {
    for i in 0..n {
        api(
            reqwest::Method::POST,
            &format!("/exchanges/{}/amq.default/publish", enc(vhost)),
            Some(serde_json::json!({
                "properties": {},
                "routing_key": queue,
                "payload": format!("job {i}"),
                "payload_encoding": "string"
            })),
        )
        .await;
    }
}

fn rabbit_config(vhosts: &[String], poll: &str) -> String {
    let list = vhosts
        .iter()
        .map(|v| format!("\"{v}\""))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "sources:\n  - name: rabbit\n    type: rabbitmq\n    url: http://127.0.0.1:15672\n    username: guest\n    password: guest\n    vhosts: [{list}]\n    poll_interval: {poll}\n"
    )
}

/// The management API refreshes queue stats every 5 s by default.
const STATS_WAIT: Duration = Duration::from_secs(30);

#[tokio::test]
async fn rabbitmq_queue_length_target_and_vhosts() {
    let vhosts = setup("len", 2, "orders").await;
    let (a, b) = (vhosts.names[0].clone(), vhosts.names[1].clone());
    publish(&a, "orders", 20).await;
    publish(&b, "orders", 7).await;
    let app = TestApp::start(&rabbit_config(&vhosts.names, "500ms")).await;
    let mut c = client(&app).await;

    let in_a = [("queue", "orders"), ("vhost", a.as_str()), ("value", "5")];
    wait_value_for(&c, &in_a, 20.0, STATS_WAIT).await;
    let (name, ti, tf) = spec(&mut c, &in_a).await.unwrap();
    assert!(name.starts_with("queuelength-qe-scaler-len-"), "{name}");
    assert_eq!((ti, tf), (5, 5.0));
    let (int, float) = metrics(&mut c, &in_a).await.unwrap();
    assert_eq!((int, float), (20, 20.0));
    assert_eq!(keda_replicas(keda_value(int, float), tf), 4);
    assert!(active(&mut c, &in_a).await.unwrap());

    wait_value_for(
        &c,
        &[("queue", "orders"), ("vhost", b.as_str())],
        7.0,
        STATS_WAIT,
    )
    .await;
    // The same name in two vhosts needs `vhost`.
    let e = metrics(&mut c, &[("queue", "orders")]).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(
        e.message().starts_with("scalerMetadata.vhost"),
        "{}",
        e.message()
    );
    // Ready and Unacked are real numbers from RabbitMQ (nothing consumed).
    assert_eq!(
        metrics(
            &mut c,
            &[
                ("queue", "orders"),
                ("vhost", a.as_str()),
                ("mode", "Ready")
            ]
        )
        .await
        .unwrap()
        .1,
        20.0
    );
    assert_eq!(
        metrics(
            &mut c,
            &[
                ("queue", "orders"),
                ("vhost", a.as_str()),
                ("mode", "Unacked")
            ]
        )
        .await
        .unwrap()
        .1,
        0.0
    );
    // A glob across vhosts of one source aggregates.
    assert_eq!(
        metrics(&mut c, &[("queue", "ord*"), ("operation", "max")])
            .await
            .unwrap()
            .1,
        20.0
    );
    // Unknown queue: NOT_FOUND.
    assert_eq!(
        metrics(&mut c, &[("queue", "nope"), ("vhost", a.as_str())])
            .await
            .unwrap_err()
            .code(),
        Code::NotFound
    );
    app.stop().await;
    drop(vhosts);
}

#[tokio::test]
async fn rabbitmq_publish_rate_over_a_window() {
    let vhosts = setup("rate", 1, "events").await;
    let v = vhosts.names[0].clone();
    let app = TestApp::start(&rabbit_config(&vhosts.names, "1s")).await;
    let mut c = client(&app).await;
    wait_value_for(&c, &[("queue", "events")], 0.0, STATS_WAIT).await;

    // ~10 messages per second for 16 s.
    let started = std::time::Instant::now();
    let mut sent = 0usize;
    while started.elapsed() < Duration::from_secs(16) {
        publish(&v, "events", 2).await;
        sent += 2;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let true_rate = sent as f64 / started.elapsed().as_secs_f64();
    let trigger = [
        ("queue", "events"),
        ("mode", "PublishRate"),
        ("window", "10s"),
        ("value", "5"),
    ];
    let (_, rate) = metrics(&mut c, &trigger).await.unwrap();
    // Management stats move in 5 s steps, so allow a wide band around the true rate.
    assert!(
        rate > true_rate * 0.3 && rate < true_rate * 2.0,
        "publish rate {rate}/s, sent {true_rate}/s"
    );
    app.stop().await;
    drop(vhosts);
}
