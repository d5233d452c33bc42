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

/// An app watching every `q:*` key of `redis` (filled by [`fill_weird`]),
/// once it tracks all 9 of them.
async fn ready_app(redis: &RedisServer) -> TestApp {
    let app = TestApp::start(&format!(
        r#"
        listen: {{ grpc: null }}
        sources:
          - name: main
            type: redis
            url: {url}
            poll_interval: 100ms
            queues:
              - pattern: "q:*"
              - key: q:delayed
                score: timestamp
        "#,
        url = redis.url
    ))
    .await;
    app.wait_value(
        "queue_exporter_tracked_keys",
        &[("source", "main")],
        9.0,
        WAIT,
    )
    .await;
    app
}

/// An app over the weird keys, and its classic `/metrics` body.
async fn weird_classic_body() -> (RedisServer, TestApp, String) {
    let redis = RedisServer::start();
    fill_weird(&redis);
    let app = ready_app(&redis).await;
    let body = app.metrics().await;
    (redis, app, body)
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
    let scrape = Scrape::parse(&body);
    assert!(scrape.has("queue_messages_scheduled", &[]));
    assert_eq!(scrape.queue("queue_messages_ready", "q:delayed"), Some(1.0));
    app.stop().await;
}

#[tokio::test]
async fn label_values_are_escaped_one_line_per_sample_and_invalid_bytes_rendered_distinctly() {
    let (_redis, app, body) = weird_classic_body().await;
    assert!(body.contains(r#"queue="q:\"quoted\"""#), "{body}");
    assert!(body.contains(r#"queue="q:new\nline""#));
    assert!(body.contains(r#"queue="q:back\\slash""#));
    assert!(body.contains("q:ünïcødé✓"));
    assert!(body.contains(r#"queue="q:bad\\xff""#) && body.contains(r#"queue="q:bad\\xfe""#));
    assert_eq!(body.matches("queue_depth{").count(), 9);
    app.stop().await;
}

#[tokio::test]
async fn of_two_keys_with_one_rendering_one_is_exported_and_the_other_counted_as_dropped() {
    let (_redis, app, body) = weird_classic_body().await;
    assert_eq!(
        body.lines()
            .filter(|l| l.starts_with("queue_depth{") && l.contains(r#"queue="q:twin\\xff""#))
            .count(),
        1,
        "one twin only"
    );
    assert_eq!(
        Scrape::parse(&body).value("queue_exporter_dropped_keys", &[("source", "main")]),
        Some(1.0)
    );
    app.stop().await;
}

#[tokio::test]
async fn a_parser_that_handles_escapes_gets_every_key_back_exactly() {
    let (_redis, app, body) = weird_classic_body().await;
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
    app.stop().await;
}

#[tokio::test]
async fn build_info_carries_the_crate_version() {
    let (_redis, app, body) = weird_classic_body().await;
    assert_eq!(
        Scrape::parse(&body).value(
            "queue_exporter_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))]
        ),
        Some(1.0)
    );
    app.stop().await;
}

#[tokio::test]
async fn every_family_has_help_and_type_and_counters_end_in_total() {
    let (_redis, app, body) = weird_classic_body().await;
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
    let parsed = python_parse(&body, true).unwrap_or_else(|e| panic!("{e}\n{body}"));
    let family_type = |family: &str| {
        parsed
            .iter()
            .find(|s| s.family == family)
            .map(|s| s.family_type.as_str())
    };
    assert_eq!(
        family_type("queue_message_age_seconds"),
        Some("gaugehistogram")
    );
    assert!(family_type("queue_exporter_poll_errors").is_none_or(|t| t == "counter"));
    assert_eq!(
        family_type("queue_exporter_poll_duration_seconds"),
        Some("histogram")
    );
    let queues: std::collections::BTreeSet<&str> = parsed
        .iter()
        .filter(|s| s.family == "queue_depth")
        .map(|s| s.labels["queue"].as_str())
        .collect();
    assert_eq!(queues.len(), 9, "{queues:?}");
    for q in ["q:new\nline", "q:\"quoted\"", "q:back\\slash"] {
        assert!(queues.contains(q), "{q:?} not in {queues:?}");
    }
    app.stop().await;
}

/// The `vary` header of a gzip-accepting scrape.
async fn resp_vary(client: &reqwest::Client, base: &str, accept: &str) -> String {
    get_gzip(client, base, accept).await.headers()["vary"]
        .to_str()
        .unwrap()
        .to_string()
}

/// GET `/metrics` with `accept` and `accept-encoding: gzip`.
async fn get_gzip(client: &reqwest::Client, base: &str, accept: &str) -> reqwest::Response {
    client
        .get(format!("{base}/metrics"))
        .header("accept", accept)
        .header("accept-encoding", "gzip")
        .send()
        .await
        .unwrap()
}

fn gunzip(bytes: &[u8]) -> String {
    let mut text = String::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_string(&mut text)
        .unwrap();
    text
}

#[tokio::test]
async fn gzip_is_used_when_accepted_in_both_formats() {
    let redis = RedisServer::start();
    fill_weird(&redis);
    let app = ready_app(&redis).await;
    let client = reqwest::Client::builder().no_gzip().build().unwrap();
    for accept in ["text/plain", OM] {
        let resp = get_gzip(&client, &app.base, accept).await;
        assert_eq!(resp.headers()["content-encoding"], "gzip", "{accept}");
        let text = gunzip(&resp.bytes().await.unwrap());
        assert!(text.contains("queue_depth{"), "{accept}");
        assert_eq!(text.ends_with("# EOF\n"), accept == OM, "{accept}");
        assert_eq!(
            resp_vary(&client, &app.base, accept).await,
            "accept-encoding"
        );
        // The plain body has the same series (values move between polls).
        let (_, plain, _) = http_get(&format!("{}/metrics", app.base), &[("accept", accept)]).await;
        let series = |body: &str| -> Vec<String> {
            body.lines()
                .map(|l| l.rsplit_once(' ').map_or(l, |(s, _)| s).to_string())
                .collect()
        };
        assert_eq!(series(&plain), series(&text), "{accept}");
    }
    app.stop().await;
}

#[tokio::test]
async fn the_gzip_body_is_exactly_one_complete_gzip_member() {
    // The cached snapshot part and the live part are one deflate stream
    // under one CRC.
    let redis = RedisServer::start();
    fill_weird(&redis);
    let app = ready_app(&redis).await;
    let client = reqwest::Client::builder().no_gzip().build().unwrap();
    for accept in ["text/plain", OM] {
        let bytes = get_gzip(&client, &app.base, accept)
            .await
            .bytes()
            .await
            .unwrap();
        let text = gunzip(&bytes);
        // zlib decodes it to the same text, with nothing after it.
        let mut py = Command::new("python3")
            .args([
                "-c",
                r#"
import sys, zlib
d = zlib.decompressobj(31)
out = d.decompress(sys.stdin.buffer.read())
assert d.eof and not d.unused_data, 'not one complete member'
sys.stdout.buffer.write(out)
"#,
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        py.stdin.take().unwrap().write_all(&bytes).unwrap();
        let out = py.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8(out.stdout).unwrap(), text, "{accept}");
    }
    app.stop().await;
}

#[tokio::test]
async fn the_body_is_plain_when_gzip_is_refused_or_not_asked_for() {
    let redis = RedisServer::start();
    fill_weird(&redis);
    let app = ready_app(&redis).await;
    let client = reqwest::Client::builder().no_gzip().build().unwrap();
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

/// Two sources: `live` answers; `hung` hangs until the test closes it,
/// which makes its first poll fail.
async fn start_live_and_hung() -> (RedisServer, SilentServer, TestApp) {
    let redis = RedisServer::start();
    let hung = SilentServer::start();
    let app = TestApp::start(&format!(
        r#"
        listen: {{ grpc: null }}
        sources:
          - name: live
            type: redis
            url: {live}
            poll_interval: 100ms
            queues: [{{ key: q }}]
          - name: hung
            type: redis
            url: {hung}
            poll_interval: 100ms
            timeout: 60s
            queues: [{{ key: q }}]
        "#,
        live = redis.url,
        hung = hung.redis_url()
    ))
    .await;
    (redis, hung, app)
}

/// Polls `/readyz` until `done(status, body)`; returns them.
async fn wait_readyz(app: &TestApp, what: &str, done: impl Fn(u16, &str) -> bool) -> (u16, String) {
    let done = &done;
    wait_for(what, WAIT, || async move {
        let (s, body, _) = http_get(&format!("{}/readyz", app.base), &[]).await;
        done(s, &body).then_some((s, body))
    })
    .await
}

#[tokio::test]
async fn healthz_is_ok_from_the_start() {
    let (_redis, _hung, app) = start_live_and_hung().await;
    let (s, body, _) = http_get(&format!("{}/healthz", app.base), &[]).await;
    assert_eq!((s, body.as_str()), (200, "ok\n"));
    app.stop().await;
}

#[tokio::test]
async fn readyz_is_503_while_any_source_has_not_finished_its_first_poll() {
    let (_redis, _hung, app) = start_live_and_hung().await;
    let (s, body) = wait_readyz(&app, "live up, hung pending", |_, body| {
        body.contains("live redis up")
    })
    .await;
    assert_eq!(s, 503, "{body}");
    assert!(body.contains("hung redis pending"), "{body}");
    app.stop().await;
}

#[tokio::test]
async fn a_failed_first_poll_makes_ready_with_the_source_down_and_no_made_up_zeros() {
    let (_redis, mut hung, app) = start_live_and_hung().await;
    wait_readyz(&app, "live up, hung pending", |_, body| {
        body.contains("live redis up")
    })
    .await;
    hung.close();
    let (_, body) = wait_readyz(&app, "readyz 200", |s, _| s == 200).await;
    assert!(body.contains("hung redis down"), "{body}");
    let scrape = app.scrape().await;
    assert_eq!(scrape.source_up("hung"), Some(0.0));
    assert_eq!(
        scrape.value("queue_depth", &[("source", "hung")]),
        None,
        "no made-up zeros"
    );
    assert_eq!(
        scrape.value("queue_depth", &[("source", "live")]),
        Some(0.0)
    );
    app.stop().await;
}

#[tokio::test]
async fn the_landing_page_links_the_endpoints_and_shows_each_source_state() {
    let (_redis, _hung, app) = start_live_and_hung().await;
    wait_readyz(&app, "live up, hung pending", |_, body| {
        body.contains("live redis up")
    })
    .await;
    let (s, landing, _) = http_get(&format!("{}/", app.base), &[]).await;
    assert_eq!(s, 200);
    assert!(landing.contains("href=\"metrics\""), "{landing}");
    assert!(landing.contains("href=\"healthz\"") && landing.contains("href=\"readyz\""));
    assert!(
        landing.contains("<td>hung</td><td>redis</td><td>pending</td>"),
        "{landing}"
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
            r#"global: {{ scrape_interval: 1s, scrape_timeout: 1s }}
scrape_configs:
  - job_name: qe
    static_configs: [{{ targets: ['{target}'] }}]
"#
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
    let own = Scrape::parse(
        &http_get(&format!("http://127.0.0.1:{port}/metrics"), &[])
            .await
            .1,
    );
    for counter in [
        "prometheus_target_scrapes_sample_duplicate_timestamp_total",
        "prometheus_target_scrapes_sample_out_of_bounds_total",
        "prometheus_target_scrapes_sample_out_of_order_total",
    ] {
        assert_eq!(own.value(counter, &[]), Some(0.0), "{counter}");
    }
    app.stop().await;
}
