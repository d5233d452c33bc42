//! SIGHUP reloads the config of the real binary without dropping listeners:
//! a new queue appears while the HTTP port, an open keep-alive connection
//! and an open `StreamIsActive` stream stay up; an unchanged source keeps
//! running; an invalid config keeps the old one (values still served,
//! `queue_exporter_config_reload_success 0`, one log line naming file,
//! field and problem); a fixed one applies (gauge 1); a changed listen
//! address is logged as needing a restart; a config from standard input
//! (`-`, `/dev/stdin`) or a FIFO is not re-read and its queue stays; the
//! reload line's lists are JSON arrays in JSON logs. In process: readers switch only after the new sources'
//! first poll, waiting at most 5 s for a hung one. Each test runs its own
//! redis-server.
mod reliability_support;
mod scaler_common;
mod support;

use std::time::Duration;

use queue_exporter::scaler::proto::IsActiveResponse;
use reliability_support::*;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Generous bound for anything that should take a few polls.
const WAIT: Duration = Duration::from_secs(20);

/// A Redis source `name` on `url` polling `key:` entries for `keys`.
fn source(name: &str, url: &str, keys: &[&str]) -> String {
    let queues: String = keys.iter().map(|k| format!("      - key: {k}\n")).collect();
    format!(
        "  - name: {name}\n    type: redis\n    url: {url}\n    poll_interval: 100ms\n    queues:\n{queues}"
    )
}

/// Log lines that end a reload, either way.
fn reload_outcomes(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .filter(|l| l.contains("config reloaded from") || l.contains("config reload failed"))
        .map(str::to_string)
        .collect()
}

/// The `listen:` line the exporter was started with (ports kept on rewrite,
/// unless a test changes them on purpose).
fn listen_line(exp: &Exporter) -> String {
    let http = exp.base.strip_prefix("http://").expect("base URL");
    format!("listen: {{ http: {http}, grpc: {} }}\n", exp.grpc)
}

/// Rewrites the config file as `yaml` (whole file), sends SIGHUP, and waits
/// for the reload's outcome; returns that log line.
async fn reload(exp: &Exporter, yaml: &str) -> String {
    let before = reload_outcomes(&exp.stderr()).len();
    std::fs::write(&exp.config, yaml).expect("rewrite the config");
    let status = std::process::Command::new("kill")
        .args(["-HUP", &exp.pid.to_string()])
        .status()
        .expect("kill -HUP");
    assert!(status.success());
    poll_until(WAIT, || async {
        reload_outcomes(&exp.stderr()).get(before).cloned()
    })
    .await
    .unwrap_or_else(|| panic!("no reload outcome logged; stderr:\n{}", exp.stderr()))
}

/// `GET /metrics` on an already open HTTP/1.1 connection (keep-alive).
async fn scrape_on(conn: &mut tokio::net::TcpStream) -> String {
    conn.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding: identity\r\n\r\n")
        .await
        .expect("write on the open connection");
    let mut buf = Vec::new();
    let mut chunk = [0u8; 65536];
    // Read until the whole (Content-Length or chunked) body is in.
    loop {
        let n = tokio::time::timeout(WAIT, conn.read(&mut chunk))
            .await
            .expect("response in time")
            .expect("read");
        assert!(n > 0, "connection closed");
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf);
        if let Some(head_end) = text.find("\r\n\r\n") {
            let head = text[..head_end].to_ascii_lowercase();
            if let Some(len) = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
            {
                if buf.len() >= head_end + 4 + len {
                    return text[head_end + 4..].to_string();
                }
            } else if text.ends_with("\r\n0\r\n\r\n") {
                return text[head_end + 4..].to_string();
            }
        }
    }
}

/// Samples of `name{labels}` in `text`.
fn value(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    sample(text, name, labels)
}

/// Waits until the exporter serves `queue_depth{source,queue}` = `want`.
async fn wait_depth(exp: &Exporter, source: &str, queue: &str, want: f64) {
    let ok = poll_until(WAIT, || async {
        (exp.value("queue_depth", &[("source", source), ("queue", queue)])
            .await
            == Some(want))
        .then_some(())
    })
    .await;
    assert!(
        ok.is_some(),
        "queue_depth{{source={source},queue={queue}}} never {want}; stderr:\n{}",
        exp.stderr()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_adds_a_queue_and_keeps_listeners_streams_and_unchanged_sources() {
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    scaler_common::set_list_len(&mut conn, "work", 3);
    scaler_common::set_list_len(&mut conn, "extra", 2);
    let first = format!(
        "sources:\n{}{}",
        source("main", &redis.url, &["work"]),
        source("other", &redis.url, &["work"])
    );
    let mut exp = Exporter::start(&first, &[], &[]).await;
    wait_depth(&exp, "main", "work", 3.0).await;
    wait_depth(&exp, "other", "work", 3.0).await;
    let text = exp.metrics().await;
    assert_eq!(
        value(&text, "queue_exporter_config_reload_success", &[]),
        Some(1.0)
    );
    let started_at = value(
        &text,
        "queue_exporter_config_last_reload_success_timestamp_seconds",
        &[],
    )
    .expect("reload timestamp at startup");
    assert!(started_at > 1.6e9, "{started_at}");
    assert!(!text.contains("queue=\"extra\""), "extra before the reload");

    // Open before the reload: a keep-alive HTTP connection and a push
    // stream waiting for `extra`, which no source reports yet.
    let http_addr = exp.base.strip_prefix("http://").unwrap().to_string();
    let mut keep_alive = tokio::net::TcpStream::connect(&http_addr).await.unwrap();
    assert!(scrape_on(&mut keep_alive).await.contains("queue_depth"));
    let mut client = scaler_common::connect(exp.grpc).await;
    let mut stream: tonic::Streaming<IsActiveResponse> = client
        .stream_is_active(scaler_common::obj(&[
            ("queue", "extra"),
            ("source", "main"),
        ]))
        .await
        .expect("stream opens")
        .into_inner();
    assert!(
        tokio::time::timeout(Duration::from_millis(500), stream.message())
            .await
            .is_err(),
        "nothing to say about `extra` before the reload"
    );
    let other_polls = value(
        &exp.metrics().await,
        "queue_exporter_poll_duration_seconds_count",
        &[("source", "other")],
    )
    .expect("other's poll count");

    // Add a key to `main`; `other` is unchanged.
    let second = format!(
        "{}sources:\n{}{}",
        listen_line(&exp),
        source("main", &redis.url, &["work", "extra"]),
        source("other", &redis.url, &["work"])
    );
    let outcome = reload(&exp, &second).await;
    assert!(outcome.contains("config reloaded from"), "{outcome}");
    assert!(
        outcome.contains(r#"kept=["other"]"#)
            && outcome.contains(r#"started=["main"]"#)
            && outcome.contains(r#"stopped=["main"]"#),
        "{outcome}"
    );

    // The new queue is served on the same port, on the connection opened
    // before the reload, and pushed to the stream opened before it.
    let body = scrape_on(&mut keep_alive).await;
    assert_eq!(
        value(
            &body,
            "queue_depth",
            &[("source", "main"), ("queue", "extra")]
        ),
        Some(2.0),
        "readers switch once the restarted source has polled:\n{body}"
    );
    assert_eq!(
        value(
            &body,
            "queue_depth",
            &[("source", "main"), ("queue", "work")]
        ),
        Some(3.0)
    );
    let msg = tokio::time::timeout(WAIT, stream.message())
        .await
        .expect("the stream opened before the reload pushes `true`")
        .expect("stream still open")
        .expect("a message");
    assert!(msg.result);
    assert_eq!(
        scaler_common::metrics(&mut client, &[("queue", "extra")])
            .await
            .expect("GetMetrics on the same channel")
            .1,
        2.0
    );
    // The unchanged source kept running: its poll count never restarted.
    let text = exp.metrics().await;
    let after = value(
        &text,
        "queue_exporter_poll_duration_seconds_count",
        &[("source", "other")],
    )
    .unwrap();
    assert!(
        after >= other_polls,
        "other restarted: {after} < {other_polls}"
    );
    assert_eq!(
        value(&text, "queue_exporter_config_reload_success", &[]),
        Some(1.0)
    );
    // The stream opened before the reload is still the one open stream.
    assert_eq!(
        value(
            &text,
            "queue_exporter_scaler_streams",
            &[("method", "StreamIsActive")]
        ),
        Some(1.0)
    );
    assert!(exp.running());
    assert!(exp.terminate().success(), "{}", exp.stderr());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_config_keeps_the_old_one_and_a_fixed_one_applies() {
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    scaler_common::set_list_len(&mut conn, "work", 3);
    scaler_common::set_list_len(&mut conn, "extra", 2);
    let mut exp = Exporter::start(
        &format!("sources:\n{}", source("main", &redis.url, &["work"])),
        &[],
        &[],
    )
    .await;
    wait_depth(&exp, "main", "work", 3.0).await;
    let client = scaler_common::connect(exp.grpc).await;
    let listen = listen_line(&exp);
    let config_path = exp.config.display().to_string();

    // Invalid: the running config stays, one line says where and why.
    let bad = format!(
        "{listen}sources:\n{}",
        source("main", &redis.url, &["work", "extra"]).replace("100ms", "often")
    );
    let outcome = reload(&exp, &bad).await;
    assert!(outcome.contains("config reload failed"), "{outcome}");
    assert!(
        outcome.contains(&format!(
            r#"{config_path}: sources[0].poll_interval: invalid duration "often""#
        )),
        "{outcome}"
    );
    assert_eq!(reload_outcomes(&exp.stderr()).len(), 1);
    assert_eq!(
        exp.stderr()
            .lines()
            .filter(|l| l.contains("invalid duration"))
            .count(),
        1,
        "one line:\n{}",
        exp.stderr()
    );
    let text = exp.metrics().await;
    assert_eq!(
        value(&text, "queue_exporter_config_reload_success", &[]),
        Some(0.0)
    );
    // Old values are still served and still fresh.
    scaler_common::set_list_len(&mut conn, "work", 4);
    wait_depth(&exp, "main", "work", 4.0).await;
    scaler_common::wait_value(&client, &[("queue", "work")], 4.0).await;
    assert!(!exp.metrics().await.contains("queue=\"extra\""));

    // A config that cannot start (a missing TLS file) is refused the same way.
    let tls = format!(
        "{listen}scaler:\n  tls: {{ cert_file: /nonexistent/cert.pem, key_file: /nonexistent/key.pem }}\nsources:\n{}",
        source("main", &redis.url, &["work"])
    );
    let outcome = reload(&exp, &tls).await;
    assert!(
        outcome.contains("config reload failed")
            && outcome.contains(&format!("{config_path}: scaler.tls.cert_file: cannot read")),
        "{outcome}"
    );

    // Fixed: applied, gauge back to 1, timestamp moved on.
    let before = value(
        &exp.metrics().await,
        "queue_exporter_config_last_reload_success_timestamp_seconds",
        &[],
    )
    .unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let good = format!(
        "{listen}sources:\n{}",
        source("main", &redis.url, &["work", "extra"])
    );
    let outcome = reload(&exp, &good).await;
    assert!(outcome.contains("config reloaded from"), "{outcome}");
    let text = exp.metrics().await;
    assert_eq!(
        value(&text, "queue_exporter_config_reload_success", &[]),
        Some(1.0)
    );
    let after = value(
        &text,
        "queue_exporter_config_last_reload_success_timestamp_seconds",
        &[],
    )
    .unwrap();
    assert!(after > before, "{after} <= {before}");
    assert_eq!(
        value(
            &text,
            "queue_depth",
            &[("source", "main"), ("queue", "extra")]
        ),
        Some(2.0)
    );
    scaler_common::wait_value(&client, &[("queue", "extra")], 2.0).await;

    // A new listen address needs a restart: said so, the rest applies, the
    // old port keeps serving.
    let moved = free_port();
    let changed = format!(
        "listen: {{ http: 127.0.0.1:{moved}, grpc: {} }}\nsources:\n{}",
        exp.grpc,
        source("main", &redis.url, &["extra"])
    );
    let outcome = reload(&exp, &changed).await;
    assert!(outcome.contains("config reloaded from"), "{outcome}");
    assert!(
        exp.stderr().lines().any(
            |l| l.contains("listen.http changed") && l.contains("applies only after a restart")
        ),
        "{}",
        exp.stderr()
    );
    let text = exp.metrics().await;
    assert_eq!(
        value(&text, "queue_exporter_config_reload_success", &[]),
        Some(1.0)
    );
    // The queue's own series are gone; the scaler's record of its last
    // answer to KEDA (queue_exporter_scaler_*) stays until it expires.
    assert!(
        !text
            .lines()
            .any(|l| l.contains("queue=\"work\"") && !l.starts_with("queue_exporter_scaler_")),
        "work was removed:\n{text}"
    );
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", moved)).is_err(),
        "nothing listens on the new address before a restart"
    );
    // Still not applied, so the next reload says so again.
    let warned = |stderr: &str| {
        stderr
            .lines()
            .filter(|l| l.contains("listen.http changed"))
            .count()
    };
    assert_eq!(warned(&exp.stderr()), 1);
    let outcome = reload(&exp, &changed).await;
    assert!(outcome.contains(r#"kept=["main"]"#), "{outcome}");
    assert_eq!(warned(&exp.stderr()), 2, "{}", exp.stderr());
    assert!(exp.terminate().success(), "{}", exp.stderr());
}

/// In process, where the moment of the swap is observable: when
/// `App::reload` returns, readers already see the new sources' first poll
/// (make before break); a new source whose backend hangs delays the swap by
/// at most `RELOAD_FIRST_POLL_WAIT`, then is shown unpolled, while the
/// others keep serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_switch_after_the_new_sources_first_poll_and_a_hung_one_waits_at_most_five_seconds()
{
    use queue_exporter::app::{RELOAD_FIRST_POLL_WAIT, ReloadSummary};
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    scaler_common::set_list_len(&mut conn, "work", 3);
    scaler_common::set_list_len(&mut conn, "extra", 2);
    let one = format!(
        "listen: {{ grpc: null }}\nsources:\n{}",
        source("main", &redis.url, &["work"])
    );
    let mut app = TestApp::start(&one).await;
    app.wait_value(
        "queue_depth",
        &[("source", "main"), ("queue", "work")],
        3.0,
        WAIT,
    )
    .await;

    let (two, _dir) = load_config(&format!(
        "{one}{}",
        source("second", &redis.url, &["extra"])
    ));
    let summary = app.app.as_mut().unwrap().reload(two).await.expect("reload");
    assert_eq!(
        summary,
        ReloadSummary {
            kept: vec!["main".into()],
            started: vec!["second".into()],
            stopped: vec![],
            need_restart: vec![],
        }
    );
    // No scrape in between: the swap happened after `second` polled.
    let snapshots = app.app().hub.snapshots();
    let second = snapshots
        .iter()
        .find(|s| &*s.source == "second")
        .expect("second is served");
    assert!(second.polled && second.last_success.is_some(), "{second:?}");

    let silent = SilentServer::start();
    let (three, _dir) = load_config(&format!(
        "{one}{}",
        source("hung", &silent.redis_url(), &["work"])
    ));
    let started = std::time::Instant::now();
    let summary = app
        .app
        .as_mut()
        .unwrap()
        .reload(three)
        .await
        .expect("reload");
    let took = started.elapsed();
    assert_eq!(summary.started, ["hung"]);
    assert_eq!(summary.stopped, ["second"]);
    assert!(
        took >= RELOAD_FIRST_POLL_WAIT && took < RELOAD_FIRST_POLL_WAIT + Duration::from_secs(5),
        "{took:?}"
    );
    let scrape = app.scrape().await;
    assert_eq!(
        scrape.value("queue_depth", &[("source", "main"), ("queue", "work")]),
        Some(3.0)
    );
    assert!(!scrape.shows_queue("extra"), "second was stopped");
    assert!(
        !app.app()
            .hub
            .snapshots()
            .iter()
            .any(|s| &*s.source == "second"),
        "second is gone"
    );
    app.stop().await;
}

/// How a config that can be read only once reaches the process.
#[derive(Debug, Clone, Copy)]
enum ReadOnce {
    /// `--config -`, from a pipe.
    Dash,
    /// `--config /dev/stdin`, from a pipe (the README says it works like `-`).
    DevStdin,
    /// `--config <a FIFO>` (`mkfifo`), written once.
    Fifo,
}

/// Serves a config that can be read only once (`how`), sends SIGHUP and
/// checks that the reload is refused on one line naming the origin, the
/// gauge says so, the queue is still served and the process runs on.
async fn a_read_once_config_is_kept_on_sighup(how: ReadOnce) {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let redis = RedisServer::start();
    scaler_common::set_list_len(&mut redis.conn(), "work", 3);
    let port = free_port();
    let yaml = format!(
        "listen: {{ http: 127.0.0.1:{port}, grpc: null }}\nsources:\n{}",
        source("main", &redis.url, &["work"])
    );
    let dir = tempfile::tempdir().unwrap();
    let err_path = dir.path().join("stderr");
    let fifo = dir.path().join("config.fifo");
    let (arg, origin) = match how {
        ReadOnce::Dash => ("-".to_string(), "<stdin>".to_string()),
        ReadOnce::DevStdin => ("/dev/stdin".to_string(), "/dev/stdin".to_string()),
        ReadOnce::Fifo => {
            let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
            assert!(made.success(), "mkfifo");
            let name = fifo.display().to_string();
            (name.clone(), name)
        }
    };
    let mut child = KillOnDrop(
        Command::new(BIN)
            .args(["--config", &arg])
            .env_remove("RUST_LOG")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&err_path).unwrap())
            .spawn()
            .unwrap(),
    );
    let mut stdin = child.0.stdin.take().unwrap();
    match how {
        ReadOnce::Dash | ReadOnce::DevStdin => stdin.write_all(yaml.as_bytes()).unwrap(),
        // Opening a FIFO to write waits for its reader, the exporter: on a
        // thread, so an exporter that never opens it fails the wait below.
        ReadOnce::Fifo => {
            let (fifo, yaml) = (fifo.clone(), yaml.clone());
            std::thread::spawn(move || std::fs::write(fifo, yaml));
        }
    }
    drop(stdin);
    let base = format!("http://127.0.0.1:{port}");
    let metrics = || async {
        let resp = reqwest::get(format!("{base}/metrics")).await.ok()?;
        if !resp.status().is_success() {
            return None;
        }
        resp.text().await.ok()
    };
    poll_until(WAIT, || async {
        metrics().await.filter(|b| {
            value(b, "queue_depth", &[("source", "main"), ("queue", "work")]) == Some(3.0)
        })
    })
    .await
    .unwrap_or_else(|| panic!("{how:?}: not serving; stderr:\n{}", read_text(&err_path)));
    let status = Command::new("kill")
        .args(["-HUP", &child.0.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let line = poll_until(WAIT, || async {
        reload_outcomes(&read_text(&err_path)).into_iter().next()
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "{how:?}: no reload outcome; stderr:\n{}",
            read_text(&err_path)
        )
    });
    assert!(
        line.contains(&format!("config reload failed, keeping the running configuration: {origin}: the configuration was read from standard input or another file that is not a regular file")),
        "{how:?}: {line}"
    );
    let body = metrics().await.expect("still serving");
    assert_eq!(
        value(&body, "queue_exporter_config_reload_success", &[]),
        Some(0.0),
        "{how:?}"
    );
    assert_eq!(
        value(
            &body,
            "queue_depth",
            &[("source", "main"), ("queue", "work")]
        ),
        Some(3.0),
        "{how:?}: the queue is still served"
    );
    assert!(
        child.0.try_wait().unwrap().is_none(),
        "{how:?}: still running"
    );
}

/// A config read from standard input cannot be read again: SIGHUP says so
/// on one line, sets the gauge to 0, and the process keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_from_standard_input_is_not_reloaded_and_says_why() {
    a_read_once_config_is_kept_on_sighup(ReadOnce::Dash).await;
}

/// Issue 24, point 5: `/dev/stdin` fed by a pipe was re-read on SIGHUP,
/// found empty, and the empty config emptied `/metrics`. It is refused like `-`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_from_dev_stdin_is_not_reloaded_and_the_queue_stays() {
    a_read_once_config_is_kept_on_sighup(ReadOnce::DevStdin).await;
}

/// Issue 24, point 5: a FIFO is not a regular file either; re-opening it on
/// SIGHUP would wait for a writer forever. It is refused like `-`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_from_a_fifo_is_not_reloaded_and_the_queue_stays() {
    a_read_once_config_is_kept_on_sighup(ReadOnce::Fifo).await;
}

/// Issue 24, point 9: with `--log-format json`, the reload line's `kept`,
/// `started` and `stopped` are JSON arrays, not strings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_logs_its_lists_as_json_arrays() {
    let redis = RedisServer::start();
    scaler_common::set_list_len(&mut redis.conn(), "work", 3);
    let mut exp = Exporter::start(
        &format!("sources:\n{}", source("main", &redis.url, &["work"])),
        &["--log-format", "json"],
        &[],
    )
    .await;
    wait_depth(&exp, "main", "work", 3.0).await;
    let listen = listen_line(&exp);
    let outcome = reload(
        &exp,
        &format!(
            "{listen}sources:\n{}{}",
            source("main", &redis.url, &["work"]),
            source("other", &redis.url, &["work"])
        ),
    )
    .await;
    let line: serde_json::Value =
        serde_json::from_str(&outcome).unwrap_or_else(|e| panic!("{e}: {outcome}"));
    assert_eq!(
        line["fields"]["kept"],
        serde_json::json!(["main"]),
        "{outcome}"
    );
    assert_eq!(
        line["fields"]["started"],
        serde_json::json!(["other"]),
        "{outcome}"
    );
    assert_eq!(
        line["fields"]["stopped"],
        serde_json::json!([]),
        "{outcome}"
    );
    assert!(exp.terminate().success(), "{}", exp.stderr());
}
