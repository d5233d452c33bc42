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
        // Not UTF-8, and a UTF-8 key spelled like its rendering: one of the
        // two is exported (and counted as dropped), never both.
        b"q:twin\xff".to_vec(),
        b"q:twin\\xff".to_vec(),
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
    wait_for("9 keys tracked", WAIT, || async {
        (sample(
            &app.metrics().await,
            "queue_exporter_tracked_keys",
            &[("source", "main")],
        ) == Some(9.0))
        .then_some(())
    })
    .await;
    app
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
    assert_eq!(body.matches("queue_depth{").count(), 9);
    assert_eq!(
        body.lines()
            .filter(|l| l.starts_with("queue_depth{") && l.contains(r#"queue="q:twin\\xff""#))
            .count(),
        1,
        "one twin only"
    );
    assert_eq!(
        sample(&body, "queue_exporter_dropped_keys", &[("source", "main")]),
        Some(1.0)
    );
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
    // A parser that handles escapes gets every key back exactly.
    let parsed = python_parse(&body, false).unwrap_or_else(|e| panic!("{e}\n{body}"));
    let queues: std::collections::BTreeSet<&str> = parsed
        .iter()
        .filter(|s| s.name == "queue_depth")
        .map(|s| s.labels["queue"].as_str())
        .collect();
    for q in [
        "q:\"quoted\"",
        "q:new\nline",
        "q:back\\slash",
        "q:ünïcødé✓",
        "q:bad\\xff",
        "q:bad\\xfe",
        "q:comma,{brace}=x",
    ] {
        assert!(queues.contains(q), "{q:?} not in {queues:?}");
    }
    assert_eq!(
        sample(
            &body,
            "queue_exporter_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))]
        ),
        Some(1.0)
    );
    // Every family has HELP and TYPE, counters end in _total.
    for line in body.lines().filter(|l| l.starts_with("# TYPE ")) {
        let mut it = line.split(' ').skip(2);
        let (name, kind) = (it.next().unwrap(), it.next().unwrap());
        assert!(
            body.contains(&format!("# HELP {name} ")),
            "no HELP for {name}"
        );
        if kind == "counter" {
            assert!(name.ends_with("_total"), "{line}");
        }
    }
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
assert len(queues) == 9, queues
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

async fn resp_vary(client: &reqwest::Client, base: &str, accept: &str) -> String {
    let resp = client
        .get(format!("{base}/metrics"))
        .header("accept", accept)
        .header("accept-encoding", "gzip")
        .send()
        .await
        .unwrap();
    resp.headers()["vary"].to_str().unwrap().to_string()
}

#[tokio::test]
async fn gzip_when_accepted() {
    let redis = RedisServer::start();
    fill_weird(&redis);
    let app = ready_app(&redis).await;
    let client = reqwest::Client::builder().no_gzip().build().unwrap();
    for accept in ["text/plain", OM] {
        let resp = client
            .get(format!("{}/metrics", app.base))
            .header("accept", accept)
            .header("accept-encoding", "gzip")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.headers()["content-encoding"], "gzip", "{accept}");
        let bytes = resp.bytes().await.unwrap();
        let mut text = String::new();
        flate2::read::GzDecoder::new(&bytes[..])
            .read_to_string(&mut text)
            .unwrap();
        assert!(text.contains("queue_depth{"), "{accept}");
        assert_eq!(text.ends_with("# EOF\n"), accept == OM, "{accept}");
        assert_eq!(
            resp_vary(&client, &app.base, accept).await,
            "accept-encoding"
        );
        // Exactly one gzip member that zlib decodes to the same text, with
        // nothing after it (the cached snapshot part and the live part are
        // one deflate stream under one CRC).
        let mut py = std::process::Command::new("python3")
            .args([
                "-c",
                "import sys,zlib\nd=zlib.decompressobj(31)\nout=d.decompress(sys.stdin.buffer.read())\nassert d.eof and not d.unused_data, 'not one complete member'\nsys.stdout.buffer.write(out)",
            ])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write as _;
        py.stdin.take().unwrap().write_all(&bytes).unwrap();
        let out = py.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8(out.stdout).unwrap(), text, "{accept}");
        // The plain body has the same series (values move between polls).
        let (_, plain, _) = http_get(&format!("{}/metrics", app.base), &[("accept", accept)]).await;
        let series = |body: &str| -> Vec<String> {
            body.lines()
                .map(|l| l.rsplit_once(' ').map_or(l, |(s, _)| s).to_string())
                .collect()
        };
        assert_eq!(series(&plain), series(&text), "{accept}");
    }
    // Refused gzip: plain.
    let resp = client
        .get(format!("{}/metrics", app.base))
        .header("accept-encoding", "gzip;q=0, identity")
        .send()
        .await
        .unwrap();
    assert!(resp.headers().get("content-encoding").is_none());
    // Without Accept-Encoding: plain text.
    let (_, plain, headers) = http_get(&format!("{}/metrics", app.base), &[]).await;
    assert!(headers.get("content-encoding").is_none());
    assert!(plain.contains("queue_depth{"));
    app.stop().await;
}

#[tokio::test]
async fn health_readiness_and_landing_page() {
    // One source answers; the other hangs until the test lets its first poll fail.
    let redis = RedisServer::start();
    let mut hung = SilentServer::start();
    let app = TestApp::start(&format!(
        "listen: {{ grpc: null }}\nsources:\n  - name: live\n    type: redis\n    url: {}\n    poll_interval: 100ms\n    queues: [{{ key: q }}]\n  - name: hung\n    type: redis\n    url: {}\n    poll_interval: 100ms\n    timeout: 60s\n    queues: [{{ key: q }}]\n",
        redis.url,
        hung.redis_url()
    ))
    .await;
    let (s, body, _) = http_get(&format!("{}/healthz", app.base), &[]).await;
    assert_eq!((s, body.as_str()), (200, "ok\n"));
    // Not ready while any source has not finished its first poll.
    let body = wait_for("live up, hung pending", WAIT, || async {
        let (s, body, _) = http_get(&format!("{}/readyz", app.base), &[]).await;
        body.contains("live redis up").then_some((s, body))
    })
    .await;
    assert_eq!(body.0, 503, "{}", body.1);
    assert!(body.1.contains("hung redis pending"), "{}", body.1);
    let (s, landing, _) = http_get(&format!("{}/", app.base), &[]).await;
    assert_eq!(s, 200);
    assert!(landing.contains("href=\"metrics\""), "{landing}");
    assert!(landing.contains("href=\"healthz\"") && landing.contains("href=\"readyz\""));
    assert!(
        landing.contains("<td>hung</td><td>redis</td><td>pending</td>"),
        "{landing}"
    );

    // The first poll fails: ready, even though that source is down.
    hung.close();
    let body = wait_for("readyz 200", WAIT, || async {
        let (s, body, _) = http_get(&format!("{}/readyz", app.base), &[]).await;
        (s == 200).then_some(body)
    })
    .await;
    assert!(body.contains("hung redis down"), "{body}");
    let metrics = app.metrics().await;
    assert_eq!(
        sample(&metrics, "queue_exporter_source_up", &[("source", "hung")]),
        Some(0.0)
    );
    assert_eq!(
        sample(&metrics, "queue_depth", &[("source", "hung")]),
        None,
        "no made-up zeros"
    );
    assert_eq!(
        sample(&metrics, "queue_depth", &[("source", "live")]),
        Some(0.0)
    );
    app.stop().await;
}

/// Result rows of an instant query, once the API answers.
async fn prom_query(api: &str, query: &str) -> Option<Vec<serde_json::Value>> {
    let v: serde_json::Value = reqwest::Client::new()
        .get(format!("{api}/query?query={}", pct(query)))
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    v["data"]["result"].as_array().cloned()
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
    let _prom = KillOnDrop(
        Command::new("prometheus")
            .arg(format!("--config.file={}", cfg.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus (apt-get install prometheus)"),
    );
    let api = format!("http://127.0.0.1:{port}/api/v1");
    let depths = wait_for("9 queue_depth series", Duration::from_secs(60), || async {
        let r = prom_query(&api, "queue_depth").await?;
        (r.len() == 9).then_some(r)
    })
    .await;
    let names: Vec<String> = depths
        .iter()
        .map(|r| r["metric"]["queue"].as_str().unwrap().to_string())
        .collect();
    for want in [
        "q:new\nline",
        "q:\"quoted\"",
        "q:back\\slash",
        "q:ünïcødé✓",
        "q:bad\\xff",
        "q:bad\\xfe",
        "q:comma,{brace}=x",
    ] {
        assert!(
            names.contains(&want.to_string()),
            "{want:?} not in {names:?}"
        );
    }
    // The gauge histogram arrives as bucket series: 7 default bounds and +Inf.
    let buckets = prom_query(
        &api,
        "queue_message_age_seconds_bucket{queue=\"q:delayed\"}",
    )
    .await
    .unwrap();
    assert_eq!(buckets.len(), 8, "{buckets:?}");
    // Let it scrape a few more times, then: healthy, no error, nothing dropped.
    wait_for("a few more scrapes", Duration::from_secs(30), || async {
        let r = prom_query(&api, "count_over_time(up{job=\"qe\"}[1m])").await?;
        let n: f64 = r.first()?["value"][1].as_str()?.parse().ok()?;
        (n >= 3.0).then_some(())
    })
    .await;
    let v: serde_json::Value = reqwest::get(format!("{api}/targets"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let t = &v["data"]["activeTargets"][0];
    assert_eq!(t["health"], "up", "{t}");
    assert_eq!(t["lastError"], "", "{t}");
    // Prometheus' own counters of samples it refused (duplicates would land here).
    let own = http_get(&format!("http://127.0.0.1:{port}/metrics"), &[])
        .await
        .1;
    for counter in [
        "prometheus_target_scrapes_sample_duplicate_timestamp_total",
        "prometheus_target_scrapes_sample_out_of_bounds_total",
        "prometheus_target_scrapes_sample_out_of_order_total",
    ] {
        assert_eq!(sample(&own, counter, &[]), Some(0.0), "{counter}");
    }
    app.stop().await;
}
