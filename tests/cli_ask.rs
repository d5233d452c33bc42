//! `queue-exporter ask`: the binary asks a running exporter's scaler over
//! real gRPC and prints what KEDA would hear, or the error KEDA would get.

mod support;

use std::process::Command;
use std::time::Duration;

use support::{RedisServer, Scrape, TestApp, wait_for};

const BIN: &str = env!("CARGO_BIN_EXE_queue-exporter");

/// Runs `queue-exporter ask` off the async runtime; returns (code, stdout, stderr).
async fn ask(args: Vec<String>) -> (i32, String, String) {
    tokio::task::spawn_blocking(move || {
        let out = Command::new(BIN)
            .arg("ask")
            .args(&args)
            .output()
            .expect("run queue-exporter ask");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    })
    .await
    .expect("ask finished")
}

async fn app_with_list(redis: &RedisServer) -> TestApp {
    let app = TestApp::start(&format!(
        "sources:\n  - name: main\n    type: redis\n    url: {}\n    poll_interval: 100ms\n    queues:\n      - key: jobs\n",
        redis.url
    ))
    .await;
    wait_for("jobs polled", Duration::from_secs(10), || async {
        Scrape::parse(&app.metrics().await)
            .depth("jobs")
            .map(|_| ())
    })
    .await;
    app
}

#[tokio::test(flavor = "multi_thread")]
async fn ask_prints_what_keda_hears_for_a_queue() {
    let redis = RedisServer::start();
    for i in 0..7 {
        redis.run::<()>(&[b"RPUSH", b"jobs", format!("j{i}").as_bytes()]);
    }
    let app = app_with_list(&redis).await;
    let grpc = app.app().grpc_addr.expect("gRPC on").to_string();
    wait_for("depth 7", Duration::from_secs(10), || async {
        (Scrape::parse(&app.metrics().await).depth("jobs") == Some(7.0)).then_some(())
    })
    .await;

    let (code, out, err) = ask(vec![
        "--grpc".into(),
        grpc,
        "queue=jobs".into(),
        "mode=QueueLength".into(),
        "value=5".into(),
    ])
    .await;
    assert_eq!(code, 0, "stderr: {err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "IsActive: true");
    assert!(
        lines[1].starts_with("GetMetricSpec: ") && lines[1].ends_with(" target 5"),
        "{out}"
    );
    assert!(
        lines[2].starts_with("GetMetrics: ") && lines[2].ends_with(" = 7"),
        "{out}"
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn ask_reports_the_scalers_error_and_exits_1() {
    let redis = RedisServer::start();
    let app = app_with_list(&redis).await;
    let grpc = app.app().grpc_addr.expect("gRPC on").to_string();

    let (code, out, err) = ask(vec!["--grpc".into(), grpc, "mode=Sideways".into()]).await;
    assert_eq!(code, 1, "stdout: {out}");
    assert!(out.is_empty(), "{out}");
    assert!(
        err.starts_with("ask: IsActive: InvalidArgument: "),
        "stderr: {err}"
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn ask_names_an_unreachable_scaler() {
    let port = support::free_port();
    let (code, _, err) = ask(vec![
        "--grpc".into(),
        format!("127.0.0.1:{port}"),
        "queue=jobs".into(),
    ])
    .await;
    assert_eq!(code, 1);
    assert!(
        err.starts_with(&format!("ask: cannot reach the scaler at 127.0.0.1:{port}")),
        "stderr: {err}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn ask_refuses_an_argument_that_is_not_key_value() {
    let (code, _, err) = ask(vec!["queue".into()]).await;
    assert_eq!(code, 2);
    assert_eq!(
        err.trim(),
        "ask: metadata argument \"queue\" is not key=value"
    );
}
