//! The binary: config errors, `check`, `once`, env/flag overrides, SIGTERM.
mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::*;

const BIN: &str = env!("CARGO_BIN_EXE_queue-exporter");

/// A valid config; `URL` stands for the Redis URL.
const GOOD: &str = r#"listen: { grpc: null }
sources:
  - name: main
    type: redis
    url: URL
    poll_interval: 1s
    queues:
      - key: work-queue
      - pattern: "jobs:*"
"#;

/// [`GOOD`] over `url`.
fn good(url: &str) -> String {
    GOOD.replace("URL", url)
}

/// A Redis URL where nothing listens.
fn dead_url() -> String {
    format!("redis://127.0.0.1:{}", free_port())
}

fn write_config(yaml: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = write_file(&dir, "config.yaml", yaml);
    (dir, path)
}

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN)
        .args(args)
        .env("RUST_LOG", "error")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[test]
fn bad_configs_exit_nonzero_with_one_line_naming_file_field_and_problem() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "poll_interval: 1s",
            "poll_interval: often",
            r#"sources[0].poll_interval: invalid duration "often""#,
        ),
        (
            "poll_interval: 1s",
            "pol_interval: 1s",
            "sources[0].pol_interval: unknown field `pol_interval`",
        ),
        (
            "type: redis",
            "type: memcached",
            r#"sources[0].type: unknown source type "memcached""#,
        ),
        (
            "- key: work-queue",
            r#"- key: work-queue
        pattern: "x*""#,
            "sources[0].queues[0]: set either key or pattern, not both",
        ),
        (
            r#"- pattern: "jobs:*""#,
            r#"- pattern: "jobs:*"
        labels: "(?P<p>[""#,
            "sources[0].queues[1].labels: ",
        ),
        (
            "listen: { grpc: null }",
            "listen: { grpc: null, htp: x }",
            "listen.htp: unknown field `htp`",
        ),
        (
            // The regex crate accepts this name; Prometheus does not.
            r#"- pattern: "jobs:*""#,
            r#"- pattern: "jobs:*"
        labels: "jobs:(?P<prio.rity>.*)""#,
            "sources[0].queues[1].labels: capture name \"prio.rity\" is not a valid label name",
        ),
        (
            r#"- pattern: "jobs:*""#,
            r#"- pattern: "jobs:*"
        labels: "jobs:(?P<queue>.*)""#,
            "sources[0].queues[1].labels: capture name \"queue\" is reserved",
        ),
        (
            "poll_interval: 1s",
            "poll_interval: 1s
    score_unit: seconds",
            "sources[0].score_unit: unknown field `score_unit`",
        ),
        (
            "- key: work-queue",
            "- key: work-queue
        age: { unit: fortnights }",
            "sources[0].queues[0].age.unit: unknown variant `fortnights`",
        ),
        (
            // A score range is built before any score is read: no guessing.
            "- key: work-queue",
            "- key: work-queue
        score_unit: auto",
            "sources[0].queues[0]: score_unit: must be seconds, milliseconds, microseconds or nanoseconds",
        ),
        (
            "listen: { grpc: null }",
            "listen: { grpc: null }
log: { format: xml }",
            "log.format: unknown variant `xml`",
        ),
        (
            // Zero config's alone: this source lists its queues.
            "poll_interval: 1s",
            "poll_interval: 1s
    plain_keys: false",
            "sources[0].plain_keys: only applies to zero config (a source without queues:)",
        ),
        (
            "poll_interval: 1s",
            "poll_interval: 1s
    plain_keys: sometimes",
            "sources[0].plain_keys: ",
        ),
        (
            "- key: work-queue",
            "- key: work-queue
        counters: { enqueued: \"\" }",
            "sources[0].queues[0]: counters: keys must not be empty",
        ),
        (
            // One key for every queue of a preset would count each queue's
            // jobs as every queue's arrivals.
            "- key: work-queue",
            "- preset: rq
        counters: { enqueued: \"myapp:enqueued\" }",
            "sources[0].queues[0]: counters.enqueued: key \"myapp:enqueued\" has no {queue}: \
             preset rq reports several queues",
        ),
        (
            "- key: work-queue",
            "- key: work-queue
        counters: { enqueued: \"myapp:enqueued:{queue}\" }",
            "sources[0].queues[0]: counters: {queue} is replaced on a preset entry only",
        ),
    ];
    for (from, to, want) in cases {
        let (_dir, path) = write_config(&good("redis://127.0.0.1:1").replace(from, to));
        let p = path.to_str().unwrap();
        for args in [
            vec!["check", "--config", p],
            vec!["once", "--config", p],
            vec!["--config", p],
        ] {
            let (code, _, err) = run(&args);
            assert_ne!(code, 0, "{to}");
            assert_eq!(err.lines().count(), 1, "one line expected: {err:?}");
            assert!(
                err.starts_with(&format!("{p}: {want}")),
                "got {err:?}, want {p}: {want}"
            );
        }
    }
}

#[test]
fn a_missing_config_file_is_named_on_one_line() {
    let (code, _, err) = run(&["check", "--config", "/nonexistent/qe.yaml"]);
    assert_ne!(code, 0);
    assert_eq!(err.trim(), "/nonexistent/qe.yaml: file not found");
}

#[test]
fn check_accepts_a_good_config_and_connects_when_asked() {
    let redis = RedisServer::start();
    let (_dir, path) = write_config(&good(&redis.url));
    let p = path.to_str().unwrap();
    let (code, out, _) = run(&["check", "--config", p]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("ok"));
    let (code, out, _) = run(&["check", "--connect", "--config", p]);
    assert_eq!(code, 0, "{out}");
}

#[test]
fn check_connect_names_an_unreachable_source_on_stderr() {
    let (_dir, path) = write_config(&good(&dead_url()));
    let (code, out, err) = run(&["check", "--connect", "--config", path.to_str().unwrap()]);
    assert_ne!(code, 0);
    // Errors go to stderr; stdout holds only a success summary.
    assert!(
        err.contains("sources[0]: cannot poll source main (connect): cannot connect to"),
        "{err}"
    );
    assert_eq!(out, "");
}

/// Runs the binary with `stdin` piped in.
fn run_with_stdin(args: &[&str], stdin: &str) -> (i32, String, String) {
    let mut child = Command::new(BIN)
        .args(args)
        .env("RUST_LOG", "error")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), stdin.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[test]
fn check_reads_the_config_from_a_pipe_as_dash_or_dev_stdin() {
    let yaml = good("redis://127.0.0.1:1");
    for path in ["-", "/dev/stdin"] {
        let (code, out, err) = run_with_stdin(&["check", "--config", path], &yaml);
        assert_eq!(code, 0, "{path}: {err}");
        assert!(out.contains("ok (1 sources)"), "{path}: {out}");
    }
    // Errors name standard input as the file.
    let bad = yaml.replace("poll_interval: 1s", "poll_interval: often");
    let (code, out, err) = run_with_stdin(&["check", "--config", "-"], &bad);
    assert_eq!(code, 2);
    assert_eq!(out, "");
    assert_eq!(
        err.trim(),
        r#"<stdin>: sources[0].poll_interval: invalid duration "often""#
    );
}

#[test]
fn check_writes_tls_file_errors_to_stderr() {
    let (_dir, path) = write_config(
        r#"listen: { grpc: 127.0.0.1:0 }
scaler:
  tls: { cert_file: /nonexistent/c.pem, key_file: /nonexistent/k.pem }
sources: [{ name: main, type: redis }]
"#,
    );
    let (code, out, err) = run(&["check", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert_eq!(out, "", "nothing but a success summary on stdout");
    assert!(err.contains("/nonexistent/c.pem"), "{err}");
}

#[test]
fn logs_carry_no_colour_codes_when_stderr_is_not_a_terminal() {
    let (_dir, path) = write_config(&good(&dead_url()));
    let out = Command::new(BIN)
        .args(["once", "--config", path.to_str().unwrap()])
        .env_remove("RUST_LOG")
        .env_remove("NO_COLOR")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("WARN"), "a warning is logged: {err}");
    assert!(
        !err.contains('\x1b'),
        "no ANSI escapes in piped logs: {err:?}"
    );
}

#[test]
fn logs_are_coloured_on_a_terminal_unless_no_color_is_set() {
    let (_dir, path) = write_config(&good(&dead_url()));
    // `script` runs the command on a pseudo-terminal.
    let on_tty = |no_color: Option<&str>| {
        let cmd = format!("{BIN} once --config {} 2>&1 >/dev/null", path.display());
        let mut c = Command::new("script");
        c.args(["-qec", &cmd, "/dev/null"]).env_remove("RUST_LOG");
        match no_color {
            Some(v) => c.env("NO_COLOR", v),
            None => c.env_remove("NO_COLOR"),
        };
        let out = c
            .output()
            .expect("script (util-linux) runs a command on a pty");
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let coloured = on_tty(None);
    assert!(coloured.contains("WARN"), "{coloured:?}");
    assert!(
        coloured.contains('\x1b'),
        "colour on a terminal: {coloured:?}"
    );
    let plain = on_tty(Some("1"));
    assert!(plain.contains("WARN"), "{plain:?}");
    assert!(!plain.contains('\x1b'), "NO_COLOR=1: {plain:?}");
}

#[test]
fn once_prints_the_exposition_of_one_poll() {
    let redis = RedisServer::start();
    let _: () = redis::cmd("RPUSH")
        .arg("work-queue")
        .arg("a")
        .arg("b")
        .query(&mut redis.conn())
        .unwrap();
    let _: () = redis::cmd("RPUSH")
        .arg("jobs:x")
        .arg("a")
        .query(&mut redis.conn())
        .unwrap();
    let (_dir, path) = write_config(&good(&redis.url));
    let (code, out, err) = run(&["once", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let scrape = Scrape::parse(&out);
    assert_eq!(scrape.depth("work-queue"), Some(2.0));
    assert_eq!(scrape.depth("jobs:x"), Some(1.0));
    assert_eq!(scrape.source_up("main"), Some(1.0));
    let (ok, lint) = promtool_check(&out);
    assert!(ok, "promtool: {lint}\n{out}");
}

#[test]
fn once_measures_age_histograms_only_when_asked() {
    let redis = RedisServer::start();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let _: () = redis::cmd("ZADD")
        .arg("delayed")
        .arg(now - 30.0)
        .arg("a")
        .arg(now - 3000.0)
        .arg("b")
        .query(&mut redis.conn())
        .unwrap();
    let yaml = good(&redis.url) + "      - key: delayed\n        score: timestamp\n";
    let (_dir, path) = write_config(&yaml);
    let p = path.to_str().unwrap();
    let (code, out, err) = run(&["once", "--config", p]);
    assert_eq!(code, 0, "{err}");
    let scrape = Scrape::parse(&out);
    // Depth, ready and age as always; the histogram is absent, not zeros.
    assert_eq!(scrape.depth("delayed"), Some(2.0));
    assert!(scrape.age("delayed").is_some_and(|a| a >= 3000.0), "{out}");
    assert!(!out.contains("queue_message_age_seconds"), "{out}");
    let (code, out, err) = run(&["once", "--histograms", "--config", p]);
    assert_eq!(code, 0, "{err}");
    let scrape = Scrape::parse(&out);
    assert_eq!(scrape.bucket("delayed", "60.0"), Some(1.0), "{out}");
    assert_eq!(scrape.bucket("delayed", "3600.0"), Some(2.0), "{out}");
}

#[test]
fn once_against_a_down_redis_exits_nonzero_and_still_says_so() {
    let (_dir, path) = write_config(&good(&dead_url()));
    let (code, out, err) = run(&["once", "--config", path.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert_eq!(Scrape::parse(&out).source_up("main"), Some(0.0));
    assert!(!out.contains("queue_depth{"), "no made-up zeros: {out}");
    assert!(err.contains("source main: poll failed"), "{err}");
}

#[tokio::test]
async fn env_and_flags_override_listen_and_sigterm_or_sigint_stop_within_five_seconds() {
    let redis = RedisServer::start();
    let (_dir, path) = write_config(&good(&redis.url));
    for use_env in [true, false] {
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        let mut cmd = Command::new(BIN);
        cmd.args(["--config", path.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if use_env {
            cmd.env("QUEUE_EXPORTER__LISTEN__HTTP", &addr);
        } else {
            cmd.args(["--listen-http", &addr, "--log-format", "json"]);
        }
        let mut child = cmd.spawn().unwrap();
        let url = format!("http://{addr}/healthz");
        wait_for("serving", Duration::from_secs(20), || async {
            reqwest::get(&url)
                .await
                .ok()
                .filter(|r| r.status().is_success())
                .map(|_| ())
        })
        .await;
        // SIGTERM (Kubernetes) for the env run, SIGINT (Ctrl-C) for the other.
        let signal = if use_env { "-TERM" } else { "-INT" };
        let exit = signal_and_wait(&mut child, signal, Duration::from_secs(6));
        assert!(exit.success(), "exit {exit:?} after {signal}");
    }
}

/// Sends `signal` (`-TERM`, `-INT`) to `child` and waits for it to exit,
/// failing the test if that takes longer than `limit`.
fn signal_and_wait(
    child: &mut std::process::Child,
    signal: &str,
    limit: Duration,
) -> std::process::ExitStatus {
    let status = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let started = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(
            started.elapsed() < limit,
            "did not stop within {limit:?} of {signal}"
        );
        // How often the exit is checked for, not a synchronisation.
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether process `pid` holds the server side of `client`'s connection:
/// the kernel names the accepted socket's inode in `/proc/net/tcp`, and the
/// process has a descriptor on it (a connection still in the listen backlog
/// has inode 0 there, and no descriptor).
fn accepted(pid: u32, client: &std::net::TcpStream) -> bool {
    let (Ok(local), Ok(peer)) = (client.local_addr(), client.peer_addr()) else {
        return false;
    };
    // Rows: `sl local_address rem_address st ... uid timeout inode`, ports
    // in upper-case hex; the server's row is local = peer, remote = local.
    let row_of = |a: std::net::SocketAddr| format!(":{:04X}", a.port());
    let tcp = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let inode = tcp.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        (f.len() > 9 && f[1].ends_with(&row_of(peer)) && f[2].ends_with(&row_of(local)))
            .then(|| f[9].to_string())
    });
    let Some(inode) = inode.filter(|i| i != "0") else {
        return false;
    };
    let want = format!("socket:[{inode}]");
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy() == want))
}

#[tokio::test]
async fn sigterm_stops_serve_promptly_even_while_a_poll_hangs() {
    // A backend that accepts and never answers: the first poll is still in
    // flight (its timeout is a minute away) when SIGTERM arrives.
    let hung = SilentServer::start();
    let (_dir, path) = write_config(&good(&hung.redis_url()).replace(
        "poll_interval: 1s",
        "poll_interval: 1s
    timeout: 60s",
    ));
    let addr = format!("127.0.0.1:{}", free_port());
    let mut child = Command::new(BIN)
        .args(["--config", path.to_str().unwrap(), "--listen-http", &addr])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let url = format!("http://{addr}/readyz");
    // Serving, and the poll is pending (not ready yet).
    wait_for("serving, poll pending", Duration::from_secs(20), || async {
        let r = reqwest::get(&url).await.ok()?;
        (r.status().as_u16() == 503).then_some(())
    })
    .await;
    let exit = signal_and_wait(&mut child, "-TERM", Duration::from_secs(10));
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(exit.success(), "exit {exit:?}: {err}");
    // The in-flight poll was abandoned, not waited for until the drain deadline.
    assert!(!err.contains("did not stop"), "{err}");
}

#[test]
fn check_connect_names_an_auth_failure() {
    let redis = RedisServer::start();
    redis.acl_user("qe", "right", READ_ONLY_ACL);
    let url = redis.url.replace("redis://", "redis://qe:wrong@");
    let (_dir, path) = write_config(&good(&url));
    let (code, out, err) = run(&["check", "--connect", "--config", path.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(
        err.contains("sources[0]: cannot poll source main (auth)"),
        "{err}"
    );
    // The password never shows up in what it prints.
    assert!(
        !out.contains("wrong") && !err.contains("wrong"),
        "{out}{err}"
    );

    let (_dir, path) = write_config(&good(&redis.url.replace("redis://", "redis://qe:right@")));
    let (code, out, _) = run(&["check", "--connect", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
}

#[test]
fn log_flags_pick_json_lines_and_the_level() {
    let (_dir, path) = write_config(&good(&dead_url()));
    let p = path.to_str().unwrap();
    // Without RUST_LOG (which `run` sets, and which would win over the flags).
    let run = |args: &[&str]| {
        let out = Command::new(BIN)
            .args(args)
            .env_remove("RUST_LOG")
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (code, _, err) = run(&["once", "--config", p, "--log-format", "json"]);
    assert_ne!(code, 0);
    let logs: Vec<serde_json::Value> = err
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(
        logs.iter()
            .any(|l| l["level"] == "WARN" && l["fields"]["reason"] == "connect"),
        "{err}"
    );
    // --log-level error hides the warning.
    let (_, _, err) = run(&["once", "--config", p, "--log-level", "error"]);
    assert!(!err.contains("WARN"), "{err}");
    assert!(err.contains("source main: poll failed"), "{err}");
}

/// Without a config file, `once` watches the local Redis on 6379 (started by
/// `scripts/setup-services`) and discovers list, zset and stream keys, but
/// not hashes or strings. Keys carry a unique prefix, so other users of that
/// Redis do not matter.
#[test]
fn once_without_a_config_discovers_local_lists_zsets_and_streams() {
    let prefix = format!(
        "qe-default-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let client = redis::Client::open("redis://127.0.0.1:6379").unwrap();
    let mut conn = client
        .get_connection()
        .expect("a Redis on 127.0.0.1:6379 (scripts/setup-services starts one)");
    let key = |k: &str| format!("{prefix}:{k}");
    let setup: &[&[&str]] = &[
        &["RPUSH", &key("list"), "a", "b", "c"],
        &["ZADD", &key("zset"), "1", "a", "2", "b"],
        &["XADD", &key("stream"), "*", "k", "v"],
        &["HSET", &key("hash"), "f", "v"],
        &["SET", &key("string"), "v"],
    ];
    for args in setup {
        let mut c = redis::cmd(args[0]);
        for a in &args[1..] {
            c.arg(*a);
        }
        let _: redis::Value = c.query(&mut conn).unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .arg("once")
        .current_dir(dir.path())
        .env("RUST_LOG", "error")
        .output()
        .unwrap();
    let _: redis::Value = redis::cmd("DEL")
        .arg(key("list"))
        .arg(key("zset"))
        .arg(key("stream"))
        .arg(key("hash"))
        .arg(key("string"))
        .query(&mut conn)
        .unwrap();
    let scrape = Scrape::parse(&String::from_utf8_lossy(&out.stdout));
    let depth = |k: &str| scrape.value("queue_depth", &[("source", "redis"), ("queue", &key(k))]);
    assert_eq!(depth("list"), Some(3.0), "{scrape}");
    assert_eq!(depth("zset"), Some(2.0));
    assert_eq!(depth("stream"), Some(1.0));
    assert_eq!(depth("hash"), None, "hashes are not queues by default");
    assert_eq!(depth("string"), None);
    assert_eq!(scrape.source_up("redis"), Some(1.0));
}

#[tokio::test]
async fn sigterm_aborts_a_hung_scrape_after_shutdown_grace_and_process_gauges_are_exported() {
    let redis = RedisServer::start();
    let (_dir, path) = write_config(&format!(
        "shutdown_grace: 1s\n{}",
        GOOD.replace("URL", &redis.url)
    ));
    let addr = format!("127.0.0.1:{}", free_port());
    let mut child = Command::new(BIN)
        .args(["--config", path.to_str().unwrap(), "--listen-http", &addr])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let url = format!("http://{addr}/metrics");
    let body = wait_for("serving", Duration::from_secs(20), || async {
        reqwest::get(&url).await.ok()?.text().await.ok()
    })
    .await;
    // Its own tasks and file descriptors, for leak checks under load.
    assert!(
        sample(&body, "queue_exporter_tasks", &[]).is_some_and(|n| n >= 1.0),
        "{body}"
    );
    assert!(
        sample(&body, "queue_exporter_open_fds", &[]).is_some_and(|n| n >= 3.0),
        "{body}"
    );

    // A client that sends half a request and never the rest keeps the
    // HTTP server's graceful shutdown waiting; the grace period ends it.
    let mut hung = std::net::TcpStream::connect(&addr).unwrap();
    std::io::Write::write_all(&mut hung, b"GET /metrics HTTP/1.1\r\nHost: x\r\n").unwrap();
    // Not in the listen backlog any more: SIGTERM must find the connection
    // accepted, or the server never waits for it.
    let pid = child.id();
    wait_for(
        "the half request's connection accepted",
        Duration::from_secs(10),
        || std::future::ready(accepted(pid, &hung).then_some(())),
    )
    .await;
    let started = Instant::now();
    let exit = signal_and_wait(&mut child, "-TERM", Duration::from_secs(4));
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(exit.success(), "exit {exit:?}: {err}");
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "waited for the hung request up to the grace period: {:?}",
        started.elapsed()
    );
    assert!(err.contains("did not stop within 1s"), "{err}");
}

/// Issue 24, point 4: a duration too large to compute with (`timeout` × 8
/// overflowed `Duration`, exit 101) is refused at load, exit 2, one line,
/// whichever the source type, even through `check --connect`.
#[test]
fn check_connect_refuses_a_huge_timeout_with_exit_2_not_a_panic() {
    let redis = RedisServer::start();
    let rabbit = "listen: { grpc: null }\nsources:\n  - name: q\n    type: rabbitmq\n    poll_interval: 1s\n";
    for yaml in [good(&redis.url), rabbit.to_string()] {
        let yaml = yaml.replace(
            "poll_interval: 1s",
            "poll_interval: 1s\n    timeout: 200000000000y",
        );
        let (_dir, path) = write_config(&yaml);
        let p = path.to_str().unwrap();
        let (code, out, err) = run(&["check", "--connect", "--config", p]);
        assert_eq!(code, 2, "{out}{err}");
        assert_eq!(err.trim(), format!("{p}: sources[0].timeout: at most 1h"));
    }
}

/// Issue 24, point 4: `timeout: 0s` was accepted for Redis and refused for
/// RabbitMQ; it is refused for both, as is a zero `discovery_interval`.
#[test]
fn a_zero_timeout_is_refused_for_every_source_type() {
    let rabbit = "listen: { grpc: null }\nsources:\n  - name: q\n    type: rabbitmq\n    poll_interval: 1s\n";
    for (yaml, field) in [
        (good("redis://127.0.0.1:1"), "timeout"),
        (rabbit.to_string(), "timeout"),
        (good("redis://127.0.0.1:1"), "discovery_interval"),
    ] {
        let yaml = yaml.replace(
            "poll_interval: 1s",
            &format!("poll_interval: 1s\n    {field}: 0s"),
        );
        let (_dir, path) = write_config(&yaml);
        let p = path.to_str().unwrap();
        let (code, _, err) = run(&["check", "--config", p]);
        assert_eq!(code, 2, "{err}");
        assert_eq!(
            err.trim(),
            format!("{p}: sources[0].{field}: must be greater than 0")
        );
    }
}

/// Issue 24, point 5: a config file with no sources (an empty file, or an
/// empty list) is refused at load, not served as an empty exporter.
#[test]
fn a_config_without_sources_is_refused_at_load() {
    for yaml in ["", "listen: { grpc: null }\n", "sources: []\n"] {
        let (_dir, path) = write_config(yaml);
        let p = path.to_str().unwrap();
        let (code, _, err) = run(&["check", "--config", p]);
        assert_eq!(code, 2, "{yaml:?}: {err}");
        assert_eq!(
            err.trim(),
            format!(
                "{p}: sources: no sources configured; list at least one (type: redis or rabbitmq)"
            ),
            "{yaml:?}"
        );
    }
    // Standard input that is empty too.
    let (code, _, err) = run_with_stdin(&["check", "--config", "/dev/stdin"], "");
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("sources: no sources configured"), "{err}");
}

/// Issue 24, point 9: with the shipped Kubernetes config and its
/// password_file missing, `check --connect` says why on the summary line
/// (the cause used to be only in a log line above it), with the field path
/// written `sources[0]` as in every other error.
#[test]
fn check_connect_says_the_cause_on_the_summary_line() {
    let shipped = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/kubernetes/base/config.yaml"
    ))
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("redis-password");
    let yaml = shipped.replace(
        "/run/secrets/queue-exporter/redis-password",
        missing.to_str().unwrap(),
    );
    assert_ne!(
        yaml, shipped,
        "the shipped config has a Redis password_file"
    );
    let path = write_file(&dir, "config.yaml", &yaml);
    let p = path.to_str().unwrap();
    let (code, out, err) = run(&["check", "--connect", "--config", p]);
    assert_eq!(code, 1, "{out}{err}");
    let line = err
        .lines()
        .find(|l| l.starts_with(&format!("{p}: sources[0]: ")))
        .unwrap_or_else(|| panic!("no summary line for sources[0]:\n{err}"));
    assert_eq!(
        line,
        format!(
            "{p}: sources[0]: cannot poll source main (config): configuration problem: cannot read password_file {}: No such file or directory (os error 2)",
            missing.display()
        )
    );
    assert!(!err.contains("sources.main"), "{err}");
}

/// Issue 40, item 5: a busy port, HTTP or gRPC, is exit 1 and one line
/// that says the cause once (it read `Address already in use (os error
/// 98): Address already in use (os error 98)`).
#[test]
fn a_busy_port_exits_1_saying_its_cause_once() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = busy.local_addr().unwrap();
    let free = format!("127.0.0.1:{}", free_port());
    for (http, grpc) in [
        (busy.to_string(), "off".to_string()),
        (free, busy.to_string()),
    ] {
        let (_dir, path) = write_config(&good(&dead_url()).replace(
            "listen: { grpc: null }",
            &format!("listen: {{ http: \"{http}\", grpc: \"{grpc}\" }}"),
        ));
        let (code, stdout, stderr) = run(&["serve", "--config", path.to_str().unwrap()]);
        assert_eq!(code, 1, "{stdout}{stderr}");
        assert_eq!(
            stderr.trim_end(),
            format!("error: cannot listen on {busy}: Address already in use (os error 98)"),
            "http {http}, grpc {grpc}"
        );
    }
}

/// Issue 36: `age_buckets` with more than 64 bounds panicked in debug builds
/// (a shift past a `u64` bit set) and wrapped silently in release, at the
/// first histogram measurement. It is refused at load: exit 2, one line
/// naming file, field and problem, by `check`, `once` and `serve`; 64
/// bounds are accepted.
#[test]
fn more_than_64_age_buckets_are_refused_at_load_with_exit_2() {
    let with = |n: usize| {
        let bounds: Vec<String> = (1..=n).map(|s| format!("{s}s")).collect();
        good("redis://127.0.0.1:1").replace(
            "poll_interval: 1s",
            &format!(
                "poll_interval: 1s\n    age_buckets: [{}]",
                bounds.join(", ")
            ),
        )
    };
    let (_dir, path) = write_config(&with(65));
    let p = path.to_str().unwrap();
    for args in [
        vec!["check", "--config", p],
        vec!["once", "--config", p],
        vec!["--config", p],
    ] {
        let (code, out, err) = run(&args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert_eq!(
            err.trim_end(),
            format!("{p}: sources[0].age_buckets: 65 bounds; at most 64"),
            "{args:?}"
        );
    }
    let (_dir, path) = write_config(&with(64));
    let (code, out, err) = run(&["check", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
}
