//! `queue-exporter ask`: the binary asks a running exporter's scaler over
//! real gRPC and prints what KEDA would hear, or the error KEDA would get.

mod scaler_common;
mod support;

use std::process::Command;
use std::time::Duration;

use queue_exporter::scaler::proto::GetMetricsRequest;
use support::{RedisServer, Scrape, TestApp, http_get, wait_for};

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
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    for (line, call) in lines
        .iter()
        .zip(["IsActive", "GetMetricSpec", "GetMetrics"])
    {
        assert!(
            line.starts_with(&format!("{call}: error InvalidArgument: ")),
            "{out}"
        );
    }
    assert_eq!(
        err.trim(),
        "ask: 3 of the calls answered an error, as KEDA would hear it"
    );
    app.stop().await;
}

/// Issue 40, item 4: KEDA makes all three calls, so `ask` shows all three,
/// each with its own status: here `IsActive` and `GetMetrics` cannot read
/// the oldest age of a list with no `age:` (`UNAVAILABLE`), while
/// `GetMetricSpec`, which needs only the metadata, answers.
#[tokio::test(flavor = "multi_thread")]
async fn ask_shows_all_three_answers_each_with_its_own_status() {
    let redis = RedisServer::start();
    redis.run::<()>(&[b"RPUSH", b"jobs", b"j"]);
    let app = app_with_list(&redis).await;
    let grpc = app.app().grpc_addr.expect("gRPC on").to_string();

    let (code, out, err) = ask(vec![
        "--grpc".into(),
        grpc,
        "queue=jobs".into(),
        "mode=Age".into(),
        "value=60".into(),
    ])
    .await;
    assert_eq!(code, 1, "stdout: {out}\nstderr: {err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(
        lines[0].starts_with("IsActive: error Unavailable: "),
        "{out}"
    );
    assert!(
        lines[1].starts_with("GetMetricSpec: ") && lines[1].ends_with(" target 60"),
        "{out}"
    );
    assert!(
        lines[2].starts_with("GetMetrics: error Unavailable: "),
        "{out}"
    );
    assert_eq!(
        err.trim(),
        "ask: 2 of the calls answered an error, as KEDA would hear it"
    );
    app.stop().await;
}

/// Issue 40, item 3: an `ask` is a dry run. Its calls (answered or
/// refused) appear neither on `/scalers` nor in
/// `queue_exporter_scaler_desired_replicas`, and are not counted in
/// `queue_exporter_grpc_requests_total` (which `QueueExporterScalerErrors`
/// reads); the same calls from a KEDA client without the mark are.
#[tokio::test(flavor = "multi_thread")]
async fn ask_leaves_no_trace_in_the_scalers_state() {
    let redis = RedisServer::start();
    redis.run::<()>(&[b"RPUSH", b"jobs", b"j"]);
    let app = app_with_list(&redis).await;
    let grpc = app.app().grpc_addr.expect("gRPC on");
    for metadata in [
        vec!["queue=jobs", "mode=QueueLength", "value=5"],
        vec!["queue=jobs", "mode=QueueLength", "value=1"],
        vec!["queue=jobs", "mode=Sideways"],
    ] {
        let mut args = vec!["--grpc".to_string(), grpc.to_string()];
        args.extend(metadata.iter().map(|m| m.to_string()));
        ask(args).await;
    }
    // A KEDA client (no mark): one good and one refused GetMetrics.
    let mut c = scaler_common::connect(grpc).await;
    let good = scaler_common::obj(&[("queue", "jobs"), ("mode", "QueueLength"), ("value", "5")]);
    c.get_metrics(GetMetricsRequest {
        scaled_object_ref: Some(good),
        metric_name: String::new(),
    })
    .await
    .unwrap();
    let mut bad = scaler_common::obj(&[("mode", "Sideways")]);
    bad.name = "typo-worker".into();
    c.get_metrics(GetMetricsRequest {
        scaled_object_ref: Some(bad),
        metric_name: String::new(),
    })
    .await
    .unwrap_err();

    let (status, body, _) = http_get(&format!("{}/api/v1/scalers", app.base), &[]).await;
    assert_eq!(status, 200, "{body}");
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    let mut shown: Vec<&str> = json["scalers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["scaledobject"].as_str().unwrap())
        .collect();
    shown.sort();
    assert_eq!(shown, ["typo-worker", "worker"], "{json:#}");
    let scrape = Scrape::parse(&app.metrics().await);
    let desired: Vec<_> = scrape
        .samples("queue_exporter_scaler_desired_replicas", &[])
        .map(|s| s.labels.get("scaledobject").unwrap_or_default().to_string())
        .collect();
    assert_eq!(desired, ["worker"]);
    let requests: f64 = scrape
        .samples("queue_exporter_grpc_requests_total", &[])
        .map(|s| match s.value {
            prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Untyped(v) => v,
            ref other => panic!("{other:?}"),
        })
        .sum();
    assert_eq!(requests, 2.0, "only KEDA's two calls count");
    assert_eq!(
        scrape.value(
            "queue_exporter_grpc_requests_total",
            &[("method", "GetMetrics"), ("code", "INVALID_ARGUMENT")]
        ),
        Some(1.0)
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

/// Hashes and sets have no ready count (docs/metrics.md, the
/// `queue_messages_ready` row; docs/unknown-values.md): `Ready` on them is
/// `UNAVAILABLE`, never their size, while `QueueLength` answers.
#[tokio::test(flavor = "multi_thread")]
async fn ready_on_a_hash_or_a_set_is_unavailable() {
    let redis = RedisServer::start();
    redis.run::<()>(&[b"HSET", b"h", b"a", b"1", b"b", b"2"]);
    redis.run::<()>(&[b"SADD", b"s", b"a", b"b", b"c"]);
    let app = TestApp::start(&format!(
        "sources:\n  - name: main\n    type: redis\n    url: {}\n    poll_interval: 100ms\n    queues:\n      - key: h\n      - key: s\n",
        redis.url
    ))
    .await;
    wait_for("h and s polled", Duration::from_secs(10), || async {
        let s = Scrape::parse(&app.metrics().await);
        (s.depth("h") == Some(2.0) && s.depth("s") == Some(3.0)).then_some(())
    })
    .await;
    let scrape = Scrape::parse(&app.metrics().await);
    for key in ["h", "s"] {
        assert!(
            !scrape.has("queue_messages_ready", &[("queue", key)]),
            "{key}"
        );
    }
    let grpc = app.app().grpc_addr.expect("gRPC on").to_string();
    for (key, depth) in [("h", "2"), ("s", "3")] {
        let ask_mode = |mode: &str| {
            vec![
                "--grpc".to_string(),
                grpc.clone(),
                format!("queue={key}"),
                format!("mode={mode}"),
                "value=1".into(),
            ]
        };
        let (code, out, _) = ask(ask_mode("Ready")).await;
        assert_eq!(code, 1, "{out}");
        let lines: Vec<&str> = out.lines().collect();
        assert!(
            lines[0].starts_with("IsActive: error Unavailable: "),
            "{out}"
        );
        assert!(
            lines[2].starts_with("GetMetrics: error Unavailable: "),
            "{out}"
        );
        let (code, out, err) = ask(ask_mode("QueueLength")).await;
        assert_eq!(code, 0, "{out}{err}");
        assert!(out.ends_with(&format!(" = {depth}\n")), "{out}");
    }
    app.stop().await;
}

/// The words of a shell command line (double quotes grouped and removed;
/// enough for the docs' `ask` lines).
fn shell_words(line: &str) -> Vec<String> {
    let line = line.split(" #").next().unwrap_or(line);
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '"' => quoted = !quoted,
            c if c.is_whitespace() && !quoted => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            c => word.push(c),
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

/// Whether `got` is `want`, where each `…` in `want` stands for any text.
fn matches_sample(want: &str, got: &str) -> bool {
    let parts: Vec<&str> = want.split('…').collect();
    let mut rest = got;
    for (i, part) in parts.iter().enumerate() {
        if i == 0 {
            let Some(r) = rest.strip_prefix(part) else {
                return false;
            };
            rest = r;
        } else if i == parts.len() - 1 {
            return rest.ends_with(part);
        } else {
            let Some(at) = rest.find(part) else {
                return false;
            };
            rest = &rest[at + part.len()..];
        }
    }
    rest.is_empty()
}

/// docs/keda.md's sample output of `ask` is what `ask` prints: the page's
/// `--grpc` command, run against the exporter its text describes (a list
/// `jobs:emails` without `age:` under `pattern: "jobs:*"`), prints the
/// sample's lines, `…` standing for the rest of a message.
#[tokio::test(flavor = "multi_thread")]
async fn the_sample_output_in_keda_md_is_what_ask_prints() {
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/keda.md"))
        .expect("docs/keda.md");
    let section = page
        .split("## How do I try a trigger before applying it?")
        .nth(1)
        .expect("the ask section of docs/keda.md");
    let mut fences = section.split("```");
    let command_block = fences.nth(1).expect("the sh block of ask commands");
    let sample = fences.nth(1).expect("the sample output block");
    assert!(command_block.starts_with("sh\n"), "{command_block}");
    let sample: Vec<&str> = sample.trim_matches('\n').lines().collect();
    let command = command_block
        .lines()
        .find(|l| l.contains("--grpc"))
        .expect("an ask --grpc command");
    assert!(
        section.contains("pattern: \"jobs:*\"") && section.contains("`jobs:emails`"),
        "the page says which exporter the sample comes from"
    );

    let redis = RedisServer::start();
    redis.run::<()>(&[b"RPUSH", b"jobs:emails", b"e1"]);
    let app = TestApp::start(&format!(
        "sources:\n  - name: main\n    type: redis\n    url: {}\n    poll_interval: 100ms\n    queues:\n      - pattern: \"jobs:*\"\n",
        redis.url
    ))
    .await;
    wait_for("jobs:emails polled", Duration::from_secs(10), || async {
        Scrape::parse(&app.metrics().await)
            .depth("jobs:emails")
            .map(|_| ())
    })
    .await;
    let grpc = app.app().grpc_addr.expect("gRPC on").to_string();
    let mut args: Vec<String> = shell_words(command);
    assert_eq!(args[..2], ["queue-exporter", "ask"], "{command}");
    args.drain(..2);
    let at = args.iter().position(|a| a == "--grpc").unwrap();
    args[at + 1] = grpc;
    let (code, out, err) = ask(args).await;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines.len(),
        sample.len(),
        "ask printed:\n{out}\nthe page shows:\n{}",
        sample.join("\n")
    );
    for (want, got) in sample.iter().zip(&lines) {
        assert!(
            matches_sample(want, got),
            "the page shows {want:?}, ask printed {got:?}"
        );
    }
    let errors = sample.iter().filter(|l| l.contains(": error ")).count();
    assert_eq!(code, if errors > 0 { 1 } else { 0 }, "{err}");
    app.stop().await;
}

#[test]
fn a_sample_line_matches_with_ellipses() {
    assert!(matches_sample("a: … b …", "a: x y b z"));
    assert!(matches_sample(
        "GetMetricSpec: age-jobs-max target 60",
        "GetMetricSpec: age-jobs-max target 60"
    ));
    assert!(!matches_sample(
        "GetMetricSpec: s0-queue-exporter-… target 60",
        "GetMetricSpec: age-jobs-max target 60"
    ));
    assert_eq!(
        shell_words(r#"queue-exporter ask --grpc h:1 queue="jobs:*" mode=Age   # c"#),
        [
            "queue-exporter",
            "ask",
            "--grpc",
            "h:1",
            "queue=jobs:*",
            "mode=Age"
        ]
    );
}
