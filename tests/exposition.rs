//! /metrics as real consumers see it: promtool, a strict OpenMetrics parser,
//! a real Prometheus server, gzip, and the health endpoints.
mod support;

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use support::*;

const WAIT: Duration = Duration::from_secs(20);
const OM: &str = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5";

/// Keys chosen to break naive exposition: quotes, newline, backslash,
/// unicode, invalid UTF-8, and two keys differing only in an invalid byte.
fn fill_weird(redis: &RedisServer) -> Vec<Vec<u8>> {
    let keys: Vec<Vec<u8>> = vec![
        b"q:\"quoted\"".to_vec(),
        b"q:new\nline".to_vec(),
        b"q:back\\slash".to_vec(),
        "q:ünïcødé✓".as_bytes().to_vec(),
        b"q:bad\xff".to_vec(),
        b"q:bad\xfe".to_vec(),
        b"q:comma,{brace}=x".to_vec(),
    ];
    let mut c = redis.conn();
    for k in &keys {
        let _: () = redis::cmd("RPUSH")
            .arg(k.as_slice())
            .arg("x")
            .query(&mut c)
            .unwrap();
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let _: () = redis::cmd("ZADD")
        .arg("q:delayed")
        .arg(now - 30)
        .arg("a")
        .arg(now + 30)
        .arg("b")
        .query(&mut c)
        .unwrap();
    keys
}

fn yaml(url: &str) -> String {
    format!(
        "listen: {{ grpc: null }}\nsources:\n  - name: main\n    type: redis\n    url: {url}\n    poll_interval: 100ms\n    queues:\n      - pattern: \"q:*\"\n      - key: q:delayed\n        score: timestamp\n"
    )
}

async fn ready_app(redis: &RedisServer) -> TestApp {
    let app = TestApp::start(&yaml(&redis.url)).await;
    wait_for("8 keys tracked", WAIT, || async {
        (sample(
            &app.metrics().await,
            "queue_exporter_tracked_keys",
            &[("source", "main")],
        ) == Some(8.0))
        .then_some(())
    })
    .await;
    app
}

fn promtool_check(text: &str) -> (bool, String) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (apt-get install prometheus)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[tokio::test]
async fn classic_text_passes_promtool_and_parses() {
    let redis = RedisServer::start();
    fill_weird(&redis);
    let app = ready_app(&redis).await;
    let (status, body, headers) = http_get(&format!("{}/metrics", app.base), &[]).await;
    assert_eq!(status, 200);
    assert_eq!(
        headers["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    assert!(!body.contains("# EOF"));
    let (ok, out) = promtool_check(&body);
    assert!(ok, "promtool: {out}\n{body}");
    // Escaped, one line per sample, invalid bytes rendered distinctly.
    assert!(body.contains(r#"queue="q:\"quoted\"""#), "{body}");
    assert!(body.contains(r#"queue="q:new\nline""#));
    assert!(body.contains(r#"queue="q:back\\slash""#));
    assert!(body.contains("q:ünïcødé✓"));
    assert!(body.contains(r#"queue="q:bad\\xff""#) && body.contains(r#"queue="q:bad\\xfe""#));
    assert_eq!(body.matches("queue_depth{").count(), 8);
    let scrape = parse_classic(&body);
    assert!(
        scrape
            .samples
            .iter()
            .any(|s| s.metric == "queue_messages_scheduled")
    );
    assert_eq!(
        sample(&body, "queue_messages_ready", &[("queue", "q:delayed")]),
        Some(1.0)
    );
    app.stop().await;
}

#[tokio::test]
async fn openmetrics_parses_strictly_with_a_gauge_histogram() {
    let redis = RedisServer::start();
    fill_weird(&redis);
    let app = ready_app(&redis).await;
    let (status, body, headers) =
        http_get(&format!("{}/metrics", app.base), &[("accept", OM)]).await;
    assert_eq!(status, 200);
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/openmetrics-text; version=1.0.0")
    );
    assert!(body.ends_with("# EOF\n"));
    assert!(body.contains("# TYPE queue_message_age_seconds gaugehistogram"));
    assert!(body.contains("queue_message_age_seconds_bucket{"));
    assert!(
        !body.contains("queue_message_age_seconds_sum")
            && !body.contains("queue_message_age_seconds_count")
    );
    // Python's prometheus_client OpenMetrics parser is strict about the format.
    let script = r#"
import sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
fams = {f.name: f for f in text_string_to_metric_families(sys.stdin.read())}
assert fams["queue_message_age_seconds"].type == "gaugehistogram", fams["queue_message_age_seconds"].type
assert fams["queue_exporter_poll_errors"].type == "counter" if "queue_exporter_poll_errors" in fams else True
assert fams["queue_exporter_poll_duration_seconds"].type == "histogram"
queues = {s.labels["queue"] for s in fams["queue_depth"].samples}
assert len(queues) == 8, queues
assert 'q:new\nline' in queues and 'q:"quoted"' in queues and 'q:back\\slash' in queues, queues
print("ok", len(fams))
"#;
    let mut child = Command::new("python3")
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "python openmetrics parser (pip install prometheus-client): {}\n{body}",
        String::from_utf8_lossy(&out.stderr)
    );
    app.stop().await;
}

#[tokio::test]
async fn gzip_when_accepted() {
    let redis = RedisServer::start();
    fill_weird(&redis);
    let app = ready_app(&redis).await;
    let client = reqwest::Client::builder().no_gzip().build().unwrap();
    let resp = client
        .get(format!("{}/metrics", app.base))
        .header("accept-encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()["content-encoding"], "gzip");
    let bytes = resp.bytes().await.unwrap();
    let mut text = String::new();
    flate2::read::GzDecoder::new(&bytes[..])
        .read_to_string(&mut text)
        .unwrap();
    assert!(text.contains("queue_depth{"));
    let plain = app.metrics().await;
    assert!(plain.contains("queue_depth{"));
    app.stop().await;
}

#[tokio::test]
async fn health_readiness_and_landing_page() {
    let port = free_port(); // nothing listens: the source polls and fails
    let app = TestApp::start(&format!(
        "listen: {{ grpc: null }}\nsources:\n  - name: dead\n    type: redis\n    url: redis://127.0.0.1:{port}\n    poll_interval: 100ms\n    queues: [{{ key: q }}]\n"
    ))
    .await;
    let (s, body, _) = http_get(&format!("{}/healthz", app.base), &[]).await;
    assert_eq!((s, body.as_str()), (200, "ok\n"));
    // Ready once every source polled once, even when it is down.
    let body = wait_for("readyz 200", WAIT, || async {
        let (s, body, _) = http_get(&format!("{}/readyz", app.base), &[]).await;
        (s == 200).then_some(body)
    })
    .await;
    assert!(body.contains("dead redis down"), "{body}");
    let (s, body, _) = http_get(&format!("{}/", app.base), &[]).await;
    assert_eq!(s, 200);
    assert!(body.contains("href=\"metrics\"") && body.contains("dead"));
    let metrics = app.metrics().await;
    assert_eq!(
        sample(&metrics, "queue_exporter_source_up", &[("source", "dead")]),
        Some(0.0)
    );
    assert_eq!(
        sample(&metrics, "queue_depth", &[("queue", "q")]),
        None,
        "no made-up zeros"
    );
    app.stop().await;
}

#[tokio::test]
async fn a_real_prometheus_scrapes_it_without_error() {
    let redis = RedisServer::start();
    fill_weird(&redis);
    let app = ready_app(&redis).await;
    let dir = tempfile::tempdir().unwrap();
    let target = app.base.trim_start_matches("http://").to_string();
    let cfg = write_file(
        &dir,
        "prometheus.yml",
        &format!(
            "global: {{ scrape_interval: 1s, scrape_timeout: 1s }}\nscrape_configs:\n  - job_name: qe\n    static_configs: [{{ targets: ['{target}'] }}]\n"
        ),
    );
    let port = free_port();
    let mut prom = Command::new("prometheus")
        .arg(format!("--config.file={}", cfg.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("prometheus (apt-get install prometheus)");
    let api = format!("http://127.0.0.1:{port}/api/v1");
    let result = async {
        let health = wait_for("target up", Duration::from_secs(60), || async {
            let client = reqwest::Client::new();
            let v: serde_json::Value = client
                .get(format!("{api}/targets"))
                .send()
                .await
                .ok()?
                .json()
                .await
                .ok()?;
            let t = v["data"]["activeTargets"].get(0)?.clone();
            (t["health"] == "up").then_some(t)
        })
        .await;
        assert_eq!(health["lastError"], "", "{health}");
        let depths = wait_for("8 queue_depth series", Duration::from_secs(30), || async {
            let client = reqwest::Client::new();
            let v: serde_json::Value = client
                .get(format!("{api}/query?query=queue_depth"))
                .send()
                .await
                .ok()?
                .json()
                .await
                .ok()?;
            let r = v["data"]["result"].as_array()?.clone();
            (r.len() == 8).then_some(r)
        })
        .await;
        let names: Vec<String> = depths
            .iter()
            .map(|r| r["metric"]["queue"].as_str().unwrap().to_string())
            .collect();
        assert!(names.contains(&"q:new\nline".to_string()), "{names:?}");
        assert!(names.contains(&"q:bad\\xff".to_string()), "{names:?}");
    }
    .await;
    let _ = prom.kill();
    let _ = prom.wait();
    app.stop().await;
    result
}
