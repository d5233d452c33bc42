//! `queue-exporter plan --prometheus URL` against a real Prometheus: the
//! exporter's series of one queue (backfilled into Prometheus' TSDB by
//! `promtool tsdb create-blocks-from openmetrics`, with a 10-minute hole)
//! read through `query_range`; the hole named and left out of the scores;
//! an unreachable Prometheus and a query matching nothing refused with one
//! line and exit 2; basic auth (Prometheus' web config) and a bearer token
//! (a proxy in front) read from files, and never shown in an error.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;

mod support;
mod tls_support;
use support::Prometheus;

/// Runs `plan` with `args`: (exit code, stdout, stderr).
fn plan(args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_queue-exporter"))
        .arg("plan")
        .args(args)
        .output()
        .expect("run the exporter");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The exporter's series of queue `jobs` (source `redis`) every 15 s from
/// `start` for `steps` steps, as OpenMetrics with timestamps: 2 jobs/s
/// arriving and processed (depth steady at 5), 1.5 s per job; no sample
/// in steps `hole`.
fn series(start: i64, steps: i64, hole: std::ops::Range<i64>) -> String {
    let labels = r#"source="redis",queue="jobs""#;
    let times: Vec<i64> = (0..steps).filter(|i| !hole.contains(i)).collect();
    let mut out = String::from("# TYPE queue_depth gauge\n");
    for i in &times {
        out.push_str(&format!("queue_depth{{{labels}}} 5 {}\n", start + 15 * i));
    }
    out.push_str("# TYPE queue_jobs_processed counter\n");
    for i in &times {
        out.push_str(&format!(
            "queue_jobs_processed_total{{{labels}}} {} {}\n",
            30 * i,
            start + 15 * i
        ));
    }
    out.push_str("# TYPE queue_service_time_seconds gauge\n");
    for i in &times {
        out.push_str(&format!(
            "queue_service_time_seconds{{{labels},from=\"finished_jobs\"}} 1.5 {}\n",
            start + 15 * i
        ));
    }
    out.push_str("# EOF\n");
    out
}

/// A Prometheus holding 40 minutes of the series up to 2 minutes from
/// now, with no sample for the 10 minutes from 25 to 15 minutes ago;
/// returns it and the hole's (start, end), unix seconds.
async fn prometheus_with_a_hole(dir: &std::path::Path) -> (Prometheus, i64, i64) {
    prometheus_with_a_hole_and_auth(dir, None).await
}

/// [`prometheus_with_a_hole`], its API behind basic auth when given
/// (user, bcrypt hash, password).
async fn prometheus_with_a_hole_and_auth(
    dir: &std::path::Path,
    auth: Option<(&str, &str, &str)>,
) -> (Prometheus, i64, i64) {
    let hole = backfill_with_a_hole(dir);
    let p = Prometheus::start_with_auth(dir, "  []\n", auth).await;
    (p, hole.0, hole.1)
}

/// Writes the TSDB blocks of [`prometheus_with_a_hole`] into `dir/tsdb`;
/// returns the hole's (start, end), unix seconds.
fn backfill_with_a_hole(dir: &std::path::Path) -> (i64, i64) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let start = now - 40 * 60;
    // Steps 60..100: 25 to 15 minutes before now.
    backfill(dir, &series(start, 168, 60..100));
    (start + 15 * 60, start + 15 * 100)
}

/// Writes the OpenMetrics `text` as TSDB blocks into `dir/tsdb`.
fn backfill(dir: &std::path::Path, text: &str) {
    let input = dir.join("series.om");
    std::fs::write(&input, text).unwrap();
    let tsdb = dir.join("tsdb");
    std::fs::create_dir_all(&tsdb).unwrap();
    let out = std::process::Command::new("promtool")
        .args(["tsdb", "create-blocks-from", "openmetrics"])
        .arg(&input)
        .arg(&tsdb)
        .output()
        .expect("promtool (apt-get install prometheus)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn a_ten_minute_hole_in_the_exporters_series_is_named_and_left_out_of_the_scores() {
    let dir = tempfile::tempdir().unwrap();
    let (p, hole_from, hole_to) = prometheus_with_a_hole(dir.path()).await;
    let args = [
        "--prometheus",
        &p.url,
        "--queue",
        "jobs",
        "--since",
        "35m",
        "--target-wait",
        "30s",
        "--json",
    ];
    let (code, out, err) = plan(&args);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let gaps = v["gaps"].as_array().unwrap();
    assert_eq!(gaps.len(), 1, "{gaps:?}");
    let secs = gaps[0]["seconds"].as_f64().unwrap();
    // The hole, to within a step at each end (a step's arrivals need a
    // sample at both its ends).
    assert!((600.0..=630.0).contains(&secs), "{gaps:?}");
    let from = chrono::DateTime::parse_from_rfc3339(gaps[0]["from"].as_str().unwrap())
        .unwrap()
        .timestamp();
    assert!(
        (from - hole_from).abs() <= 15,
        "gap from {from}, hole from {hole_from} to {hole_to}"
    );
    assert!(v["left_out_seconds"].as_f64().unwrap() >= secs);
    // 2 jobs/s over the scored time: none made up for the hole.
    let scored =
        35.0 * 60.0 - v["left_out_seconds"].as_f64().unwrap() - v["lead_in"].as_f64().unwrap();
    let jobs = v["candidates"][0]["jobs"].as_f64().unwrap();
    assert!(
        (jobs - 2.0 * scored).abs() < 0.05 * 2.0 * scored,
        "{jobs} jobs over {scored} s"
    );
    // WaitTime's processingTime is the exporter's measured service time.
    let wait = v["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "WaitTime 30s")
        .unwrap();
    assert_eq!(wait["metadata"]["processingTime"], "1500ms", "{wait}");
    let (_, text, _) = plan(&args[..args.len() - 1]);
    assert!(text.contains("gap: no traffic recorded from"), "{text}");
    // --from/--to: the 9 minutes after the hole only, with no gap.
    let v = json_between(&p.url, hole_to + 60, hole_to + 600, &["--queue", "jobs"]);
    assert_eq!(v["gaps"], serde_json::json!([]), "{v}");
    assert_eq!(v["left_out_seconds"], 0.0);
    let scored = 540.0 - v["lead_in"].as_f64().unwrap();
    let jobs = v["candidates"][0]["jobs"].as_f64().unwrap();
    assert!(
        (jobs - 2.0 * scored).abs() < 0.1 * 2.0 * scored,
        "{jobs} jobs over {scored} s"
    );
}

#[tokio::test]
async fn a_query_matching_nothing_is_refused_naming_the_series() {
    let dir = tempfile::tempdir().unwrap();
    let (p, _, _) = prometheus_with_a_hole(dir.path()).await;
    let (code, _, err) = plan(&[
        "--prometheus",
        &p.url,
        "--queue",
        "other",
        "--since",
        "30m",
        "--target-wait",
        "30s",
    ]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(r#"queue_depth{queue="other"} has no sample"#),
        "{err}"
    );
}

#[test]
fn an_unreachable_prometheus_is_refused_naming_it() {
    let port = support::free_port();
    let url = format!("http://127.0.0.1:{port}");
    let (code, _, err) = plan(&[
        "--prometheus",
        &url,
        "--queue",
        "jobs",
        "--target-wait",
        "30s",
    ]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!("cannot reach Prometheus at {url}")),
        "{err}"
    );
}

/// `plan`'s arguments for the last 10 minutes of queue `jobs` in the
/// Prometheus at `url`, as JSON (the auth tests add their credentials).
fn last_ten_minutes_of_jobs(url: &str) -> [&str; 9] {
    [
        "--prometheus",
        url,
        "--queue",
        "jobs",
        "--since",
        "10m",
        "--target-wait",
        "30s",
        "--json",
    ]
}

#[tokio::test]
async fn basic_auth_from_a_password_file_reads_a_prometheus_behind_it() {
    let dir = tempfile::tempdir().unwrap();
    let hash = bcrypt::hash("s3cret", 4).unwrap();
    let (p, _, _) =
        prometheus_with_a_hole_and_auth(dir.path(), Some(("plan", &hash, "s3cret"))).await;
    let password = dir.path().join("password");
    std::fs::write(&password, "s3cret\n").unwrap();
    let password = password.to_str().unwrap();
    let base = last_ten_minutes_of_jobs(&p.url);
    let with_auth: Vec<&str> = base
        .iter()
        .copied()
        .chain([
            "--basic-auth-user",
            "plan",
            "--basic-auth-password-file",
            password,
        ])
        .collect();
    let (code, out, err) = plan(&with_auth);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert!(v["jobs"].as_u64().unwrap() > 500, "{v}");
    // Without the credentials Prometheus refuses, and plan says so in one line.
    let (code, _, err) = plan(&base);
    assert_eq!(code, 2, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("HTTP 401"), "{err}");
}

/// A proxy in front of `upstream` that forwards a request only when it
/// carries `Authorization: Bearer <token>` (Prometheus' own web config has
/// no bearer tokens; a reverse proxy in front of it is how they are used);
/// returns its URL.
async fn bearer_proxy(upstream: String, token: &'static str) -> String {
    use axum::http::{StatusCode, Uri, header};
    let client = reqwest::Client::new();
    let app = axum::Router::new().fallback(
        move |method: axum::http::Method,
              uri: Uri,
              headers: axum::http::HeaderMap,
              body: axum::body::Bytes| {
            let (client, upstream) = (client.clone(), upstream.clone());
            async move {
                let given = headers
                    .get(header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok());
                if given != Some(&format!("Bearer {token}")) {
                    return (StatusCode::UNAUTHORIZED, String::from("no token")).into_response();
                }
                let path = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
                // Forwarded as asked: plan POSTs query_range as a form.
                let method = reqwest::Method::from_bytes(method.as_str().as_bytes()).unwrap();
                let mut forward = client.request(method, format!("{upstream}{path}"));
                if let Some(t) = headers.get(header::CONTENT_TYPE) {
                    forward = forward.header(reqwest::header::CONTENT_TYPE, t.as_bytes());
                }
                let answer = forward.body(body.to_vec()).send().await.unwrap();
                let status = StatusCode::from_u16(answer.status().as_u16()).unwrap();
                (status, answer.text().await.unwrap()).into_response()
            }
        },
    );
    use axum::response::IntoResponse;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    url
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bearer_token_from_a_file_reads_a_prometheus_behind_a_proxy_and_never_shows_in_errors() {
    let dir = tempfile::tempdir().unwrap();
    let (p, _, _) = prometheus_with_a_hole(dir.path()).await;
    let url = bearer_proxy(p.url.clone(), "t0ken-right").await;
    let right = dir.path().join("right");
    std::fs::write(&right, "t0ken-right\n").unwrap();
    let wrong = dir.path().join("wrong");
    std::fs::write(&wrong, "t0ken-wrong\n").unwrap();
    let run = |file: std::path::PathBuf| {
        let url = url.clone();
        tokio::task::spawn_blocking(move || {
            let file = file.to_str().unwrap().to_string();
            let args: Vec<&str> = last_ten_minutes_of_jobs(&url)
                .into_iter()
                .chain(["--bearer-token-file", &file])
                .collect();
            plan(&args)
        })
    };
    let (code, out, err) = run(right).await.unwrap();
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert!(v["jobs"].as_u64().unwrap() > 500, "{v}");
    // A wrong token is refused by the proxy; plan says so in one line
    // that names neither token.
    let (code, out, err) = run(wrong).await.unwrap();
    assert_eq!(code, 2, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("HTTP 401"), "{err}");
    for text in [&out, &err] {
        assert!(!text.contains("t0ken"), "a token shows: {text}");
    }
}

#[tokio::test]
async fn an_https_prometheus_is_read_trusting_the_ca_of_ca_file_and_refused_without_it() {
    let dir = tempfile::tempdir().unwrap();
    backfill_with_a_hole(dir.path());
    let pki = tls_support::make_pki("prometheus");
    let files = pki.write(&dir, "plan");
    let p = Prometheus::start_with_tls(dir.path(), "  []\n", &pki).await;
    assert!(p.url.starts_with("https://"), "{}", p.url);
    let ca = files.ca.to_str().unwrap().to_owned();
    let mut args = last_ten_minutes_of_jobs(&p.url).to_vec();
    args.extend(["--ca-file", &ca]);
    let (code, out, err) = plan(&args);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert!(v["jobs"].as_u64().unwrap() > 500, "{v}");
    // Without the CA the certificate is not trusted: one line naming
    // Prometheus, exit 2.
    let (code, _, err) = plan(&last_ten_minutes_of_jobs(&p.url));
    assert_eq!(code, 2, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!("cannot reach Prometheus at {}", p.url)),
        "{err}"
    );
    // A CA file that holds no certificate is named.
    let bad = support::write_file(&dir, "not-a-ca.pem", "hello\n");
    let bad = bad.to_str().unwrap().to_owned();
    let mut args = last_ten_minutes_of_jobs(&p.url).to_vec();
    args.extend(["--ca-file", &bad]);
    let (code, _, err) = plan(&args);
    assert_eq!(code, 2, "{err}");
    assert_eq!(
        err.trim(),
        format!("plan: --ca-file {bad}: holds no PEM certificate")
    );
}

#[tokio::test]
async fn a_prometheus_asking_for_a_client_certificate_is_read_with_cert_file_and_key_file() {
    let dir = tempfile::tempdir().unwrap();
    backfill_with_a_hole(dir.path());
    let pki = tls_support::make_pki("prometheus-mtls");
    let files = pki.write(&dir, "plan");
    let p = Prometheus::start_with_mtls(dir.path(), "  []\n", &pki).await;
    let path = |p: &std::path::PathBuf| p.to_str().unwrap().to_owned();
    let (ca, cert, key) = (
        path(&files.ca),
        path(&files.client_cert),
        path(&files.client_key),
    );
    let with = |extra: &[&str]| {
        let mut args = last_ten_minutes_of_jobs(&p.url).to_vec();
        args.extend(["--ca-file", &ca]);
        args.extend(extra);
        plan(&args)
    };
    // With the client certificate and its key: the series are read.
    let (code, out, err) = with(&["--cert-file", &cert, "--key-file", &key]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert!(v["jobs"].as_u64().unwrap() > 500, "{v}");
    // Without it Prometheus ends the handshake: one line naming it, exit 2.
    let (code, _, err) = with(&[]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!("cannot reach Prometheus at {}", p.url)),
        "{err}"
    );
    // A key file that holds no key is named, and nothing of it is shown.
    let (code, _, err) = with(&["--cert-file", &cert, "--key-file", &cert]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(
        err.trim(),
        format!("plan: --key-file {cert}: holds no PEM private key")
    );
    // The key given as the certificate: no certificate in it, named.
    let (code, _, err) = with(&["--cert-file", &key, "--key-file", &key]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(
        err.trim(),
        format!("plan: --cert-file {key}: holds no PEM certificate")
    );
    assert!(!err.contains("PRIVATE KEY"), "{err}");
    // The key without its certificate is refused by the command line.
    let (code, _, err) = with(&["--key-file", &key]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--cert-file"), "{err}");
}

/// Unix seconds 32 minutes ago: where the series these tests write start.
fn half_an_hour_ago() -> i64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    now - 32 * 60
}

/// A private Prometheus whose TSDB holds `text` (OpenMetrics, backfilled
/// by promtool), with the directory it lives in.
async fn holding(text: &str) -> (tempfile::TempDir, Prometheus) {
    let dir = tempfile::tempdir().unwrap();
    backfill(dir.path(), text);
    let p = Prometheus::start(dir.path(), "  []\n").await;
    (dir, p)
}

/// `plan --json` over the Prometheus at `url` from `from` to `to` (unix
/// seconds) at a targetWait of 30 s, with `extra` flags.
fn plan_between(url: &str, from: i64, to: i64, extra: &[&str]) -> (i32, String, String) {
    let (from, to) = (from.to_string(), to.to_string());
    let mut args = vec![
        "--prometheus",
        url,
        "--from",
        &from,
        "--to",
        &to,
        "--target-wait",
        "30s",
        "--json",
    ];
    args.extend_from_slice(extra);
    plan(&args)
}

/// The same, exit 0 asserted: its JSON.
fn json_between(url: &str, from: i64, to: i64, extra: &[&str]) -> Value {
    let (code, out, err) = plan_between(url, from, to, extra);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).unwrap()
}

/// A BullMQ queue `emails` whose exporter counts every job added (BullMQ's
/// `id` counter, queue_messages_published_total) and keeps no processed
/// total; its depth is by state. 3 jobs/s added for 32 minutes up to now,
/// the waiting depth swinging between 0 and 20 (workers keep up on
/// average), 0.8 s per job measured: (the first sample's time, OpenMetrics).
fn bullmq_emails() -> (i64, String) {
    let start = half_an_hour_ago();
    let labels = r#"source="redis",queue="emails",preset="bullmq""#;
    let mut text = String::from("# TYPE queue_depth gauge\n");
    for i in 0..128 {
        let waiting = if i % 2 == 0 { 0 } else { 20 };
        text.push_str(&format!(
            "queue_depth{{{labels},state=\"waiting\"}} {waiting} {}\n",
            start + 15 * i
        ));
    }
    text.push_str("# TYPE queue_messages_published counter\n");
    for i in 0..128 {
        text.push_str(&format!(
            "queue_messages_published_total{{{labels}}} {} {}\n",
            45 * i,
            start + 15 * i
        ));
    }
    text.push_str("# TYPE queue_service_time_seconds gauge\n");
    for i in 0..128 {
        text.push_str(&format!(
            "queue_service_time_seconds{{{labels},from=\"finished_jobs\"}} 0.8 {}\n",
            start + 15 * i
        ));
    }
    text.push_str("# EOF\n");
    (start, text)
}

#[tokio::test]
async fn a_queue_whose_exporter_counts_jobs_added_is_read_from_its_published_total() {
    let (start, text) = bullmq_emails();
    let (_dir, p) = holding(&text).await;
    // The 20 minutes read lie inside the samples written, whatever time
    // the Prometheus took to start: `--since 20m` would end at the time
    // plan runs, a scrape interval or more after the last sample, and
    // that last stretch would rightly be named a gap.
    let v = json_between(&p.url, start + 600, start + 1800, &["--queue", "emails"]);
    // 3 jobs/s over 20 minutes: the published total's
    // rate, not Δprocessed + Δdepth (which would swing with the depth).
    let jobs = v["jobs"].as_f64().unwrap();
    assert!((jobs / 3600.0 - 1.0).abs() < 0.08, "{jobs} jobs: {v}");
    assert_eq!(v["gaps"], serde_json::json!([]), "{v}");
    let wait = &v["candidates"][0];
    assert_eq!(wait["metadata"]["processingTime"], "800ms", "{wait}");
}

/// OpenMetrics of BullMQ queues every 15 s from `start` for `steps`
/// steps, each (name, jobs added per step, steps with no sample): its
/// published total, none waiting, 0.8 s per job. One family at a time, as
/// OpenMetrics wants.
fn library_queues(queues: &[(&str, i64, std::ops::Range<i64>)], start: i64, steps: i64) -> String {
    // Each family: its TYPE line, then every queue's samples, each the
    // series and its value from the queue's labels and the step.
    type Sample = dyn Fn(&str, i64, i64) -> String;
    let families: [(&str, &Sample); 3] = [
        ("# TYPE queue_depth gauge", &|l, _, _| {
            format!("queue_depth{{{l},state=\"waiting\"}} 0")
        }),
        (
            "# TYPE queue_messages_published counter",
            &|l, per_step, i| format!("queue_messages_published_total{{{l}}} {}", per_step * i),
        ),
        ("# TYPE queue_service_time_seconds gauge", &|l, _, _| {
            format!("queue_service_time_seconds{{{l},from=\"finished_jobs\"}} 0.8")
        }),
    ];
    let mut out = String::new();
    for (kind, sample) in families {
        out.push_str(kind);
        out.push('\n');
        for (q, per_step, hole) in queues {
            let l = format!(r#"source="redis",queue="{q}",preset="bullmq""#);
            for i in (0..steps).filter(|i| !hole.contains(i)) {
                let at = start + 15 * i;
                out.push_str(&format!("{} {at}\n", sample(&l, *per_step, i)));
            }
        }
    }
    out.push_str("# EOF\n");
    out
}

#[tokio::test]
async fn a_queue_glob_reads_every_queue_it_matches_as_one_queue_and_names_them() {
    let start = half_an_hour_ago();
    // 1 and 2 jobs/s at the two queues the glob matches; 10 jobs/s at
    // one it does not.
    let text = library_queues(
        &[
            ("emails-eu", 15, 0..0),
            ("emails-us", 30, 0..0),
            ("reports", 150, 0..0),
        ],
        start,
        128,
    );
    let (_dir, p) = holding(&text).await;
    let run = |queue: &str| plan_between(&p.url, start + 600, start + 1800, &["--queue", queue]);
    let (code, out, err) = run("emails-*");
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    // 3 jobs/s over 20 minutes.
    let jobs = v["jobs"].as_f64().unwrap();
    assert!((jobs / 3600.0 - 1.0).abs() < 0.08, "{jobs} jobs: {v}");
    assert_eq!(v["gaps"], serde_json::json!([]), "{v}");
    let notes = v["notes"].to_string();
    assert!(
        notes.contains(r#"matched 2 queue(s) (\"emails-eu\", \"emails-us\")"#),
        "{notes}"
    );
    // A brace glob is the scaler's too; a glob matching nothing is refused.
    let (code, out, err) = run("{emails-eu,reports}");
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let jobs = v["jobs"].as_f64().unwrap();
    assert!((jobs / (11.0 * 1200.0) - 1.0).abs() < 0.05, "{jobs} jobs");
    let (code, _, err) = run("billing-*");
    assert_eq!(code, 2, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(r#"has a queue matching the glob "billing-*""#),
        "{err}"
    );
}

#[tokio::test]
async fn a_hole_in_one_of_the_queues_a_glob_matches_is_a_gap_not_fewer_jobs() {
    let start = half_an_hour_ago();
    // emails-us has no sample for 10 minutes (steps 60..100) while
    // emails-eu goes on: those minutes' arrivals are not known.
    let text = library_queues(
        &[("emails-eu", 15, 0..0), ("emails-us", 30, 60..100)],
        start,
        128,
    );
    let (_dir, p) = holding(&text).await;
    let v = json_between(&p.url, start + 300, start + 1800, &["--queue", "emails-*"]);
    let gaps = v["gaps"].as_array().unwrap();
    assert_eq!(gaps.len(), 1, "{gaps:?}");
    // The hole and the step whose end it takes away.
    let seconds = gaps[0]["seconds"].as_f64().unwrap();
    assert!((600.0..=630.0).contains(&seconds), "{gaps:?}");
    // The 15 minutes outside it hold 3 jobs/s.
    let jobs = v["jobs"].as_f64().unwrap();
    let known = 1500.0 - seconds;
    assert!(
        (jobs / (3.0 * known) - 1.0).abs() < 0.08,
        "{jobs} jobs over {known} s"
    );
}

#[tokio::test]
async fn where_the_exporter_measures_the_service_time_and_fallback_starts_the_pods_waittime_sets_no_processing_time()
 {
    let (start, text) = bullmq_emails();
    let (dir, p) = holding(&text).await;
    let so = dir.path().join("so.yaml");
    std::fs::write(
        &so,
        "apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata:\n  name: mailer\nspec:\n  \
         scaleTargetRef:\n    name: mailer\n  fallback:\n    failureThreshold: 3\n    replicas: 4\n  \
         triggers:\n    - type: external\n      metadata:\n        scalerAddress: queue-exporter:9732\n        \
         queue: emails\n        preset: bullmq\n        mode: QueueLength\n        value: \"5\"\n",
    )
    .unwrap();
    let so = so.to_str().unwrap();
    let v = json_between(&p.url, start + 600, start + 1800, &["--scaledobject", so]);
    let wait = &v["candidates"][1];
    assert_eq!(wait["name"], "WaitTime 30s", "{v}");
    // The queue read is the trigger's (queue and preset from its metadata).
    assert_eq!(wait["metadata"]["preset"], "bullmq", "{wait}");
    assert!(wait["metadata"].get("processingTime").is_none(), "{wait}");
    assert!(
        v["notes"]
            .to_string()
            .contains("WaitTime sets no processingTime"),
        "{v}"
    );
    // Its replayed queue measured the jobs' 0.8 s and kept them on time.
    assert!(wait["within_pct"].as_f64().unwrap() >= 99.0, "{wait}");
    assert_eq!(wait["fallback_syncs"], 0, "{wait}");
}
