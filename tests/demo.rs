//! `scripts/demo`, the README's first command, run as a user runs it. It
//! says first what it will start and where; it serves its sample queues
//! from a `redis-server` and a RabbitMQ vhost of its own; and it changes
//! nothing it did not make: not the Redis on 127.0.0.1:6379 (the keys it
//! fills, in db 0) and not any vhost that existed before (`/`'s `demo.*`
//! queues), and at exit nothing it made is left.
//!
//! The user's data is only read here. A guard (`tests/fixtures/demo_guard`,
//! first on the demo's `PATH`) refuses, and records, any `redis-cli` call at
//! port 6379 and any RabbitMQ management API write that names no vhost or
//! one that existed before, so even a demo that tried would change nothing.
//! The demo runs the test build's exporter (`DEMO_EXPORTER_BIN`) on free
//! ports (`DEMO_LISTEN_HTTP`, `DEMO_LISTEN_GRPC`).
mod support;

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use regex::Regex;
use support::*;

/// The keys scripts/demo fills (and today's main first deleted on 6379).
const DEMO_KEYS: &[&str] = &[
    "demo:work-queue",
    "demo:jobs:pending:high",
    "demo:jobs:pending:normal",
    "demo:jobs:pending:low",
    "demo:jobs:processing",
    "demo:jobs:dead",
    "demo:events",
];

/// The line scripts/demo prints once its exporter answers `/readyz`.
const SERVING: &str = "== queue-exporter is serving";

/// The project's root directory.
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A running `scripts/demo` with its output collected as it comes.
struct Demo {
    /// The demo's bash, leader of its own process group (what a terminal's
    /// Ctrl-C signals); the group is stopped on drop if the test fails first.
    child: Child,
    /// Everything it printed so far, stdout and stderr interleaved.
    output: Arc<Mutex<String>>,
    /// The address its exporter was told to serve /metrics on.
    http: String,
    /// The address its exporter was told to serve gRPC on.
    grpc: String,
    /// The guard's record of what it refused (absent while nothing was).
    guard_log: PathBuf,
    /// Holds the guard log's directory.
    _dir: tempfile::TempDir,
}

/// What the demo's first lines say it will start.
#[derive(Debug)]
struct Announced {
    /// The port of its own redis-server.
    redis_port: u16,
    /// The directory that redis-server works in.
    redis_dir: PathBuf,
    /// Its own vhost.
    vhost: String,
}

impl Demo {
    /// Starts `scripts/demo` behind the guard, on free exporter ports.
    async fn start() -> Demo {
        let dir = tempfile::tempdir().expect("temp dir");
        let guard_log = dir.path().join("guard.log");
        let guard = root().join("tests/fixtures/demo_guard");
        let path = format!(
            "{}:{}",
            guard.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let http = format!("127.0.0.1:{}", free_port());
        let grpc = format!("127.0.0.1:{}", free_port());
        let mut cmd = Command::new(root().join("scripts/demo"));
        cmd.current_dir(root())
            .env("PATH", path)
            .env("DEMO_GUARD_LOG", &guard_log)
            .env("DEMO_GUARD_VHOSTS", existing_vhosts().await.join("\n"))
            .env("DEMO_EXPORTER_BIN", env!("CARGO_BIN_EXE_queue-exporter"))
            .env("DEMO_LISTEN_HTTP", &http)
            .env("DEMO_LISTEN_GRPC", &grpc)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let mut child = cmd.spawn().expect("scripts/demo starts");
        let output = Arc::new(Mutex::new(String::new()));
        collect(child.stdout.take().expect("stdout"), &output);
        collect(child.stderr.take().expect("stderr"), &output);
        Demo {
            child,
            output,
            http,
            grpc,
            guard_log,
            _dir: dir,
        }
    }

    /// What it printed so far.
    fn output(&self) -> String {
        self.output.lock().expect("output lock").clone()
    }

    /// Waits until its exporter serves; panics with the output if the demo
    /// exits first or takes over 5 minutes (it may install packages).
    async fn wait_serving(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(300);
        while !self.output().contains(SERVING) {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                panic!(
                    "scripts/demo exited ({status}) before serving:\n{}",
                    self.output()
                );
            }
            assert!(
                Instant::now() < deadline,
                "scripts/demo not serving after 5 minutes:\n{}",
                self.output()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// What its first lines (before it installs, starts or makes anything)
    /// say it will start.
    fn announced(&self) -> Announced {
        let out = self.output();
        let first: String = out
            .lines()
            .take_while(|l| !l.starts_with("== installing") && !l.starts_with("== starting"))
            .collect::<Vec<_>>()
            .join("\n");
        let redis = Regex::new(r"its own redis-server on 127\.0\.0\.1:(\d+) \(in ([^)]+)\)")
            .expect("regex");
        let vhost = Regex::new(r#"its own RabbitMQ vhost "([^"]+)""#).expect("regex");
        let r = redis
            .captures(&first)
            .unwrap_or_else(|| panic!("no redis-server port in the first lines:\n{first}"));
        let v = vhost
            .captures(&first)
            .unwrap_or_else(|| panic!("no vhost in the first lines:\n{first}"));
        for addr in [&self.http, &self.grpc] {
            assert!(
                first.contains(addr.as_str()),
                "the first lines do not name {addr}:\n{first}"
            );
        }
        Announced {
            redis_port: r[1].parse().expect("port"),
            redis_dir: PathBuf::from(&r[2]),
            vhost: v[1].to_string(),
        }
    }

    /// Ctrl-C: SIGINT to its process group; waits for it to exit.
    async fn interrupt(mut self) -> (ExitStatus, String, Option<String>) {
        assert!(self.signal_group("-INT"), "kill -INT the demo's group");
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("try_wait") {
                break s;
            }
            assert!(
                Instant::now() < deadline,
                "scripts/demo still running 60 s after Ctrl-C:\n{}",
                self.output()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        // The readers see end of file once every process holding the pipes is gone.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let refused = std::fs::read_to_string(&self.guard_log).ok();
        (status, self.output(), refused)
    }
}

impl Demo {
    /// Sends `sig` to the demo's process group; false if it is gone.
    fn signal_group(&self, sig: &str) -> bool {
        Command::new("kill")
            .args([sig, "--", &format!("-{}", self.child.id())])
            .status()
            .is_ok_and(|s| s.success())
    }
}

impl Drop for Demo {
    /// A test that failed midway: SIGTERM lets the demo remove what it
    /// made (its exit trap); what is left after 20 s is killed.
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_some() {
            return;
        }
        self.signal_group("-TERM");
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline && self.child.try_wait().ok().flatten().is_none() {
            std::thread::sleep(Duration::from_millis(100));
        }
        self.signal_group("-KILL");
        let _ = self.child.wait();
    }
}

/// Appends `from`'s lines to `into` on a thread of its own.
fn collect(from: impl Read + Send + 'static, into: &Arc<Mutex<String>>) {
    let into = Arc::clone(into);
    std::thread::spawn(move || {
        for line in BufReader::new(from).lines().map_while(Result::ok) {
            let mut out = into.lock().expect("output lock");
            out.push_str(&line);
            out.push('\n');
        }
    });
}

/// The local RabbitMQ's vhosts, percent-encoded as in API paths.
async fn existing_vhosts() -> Vec<String> {
    let (status, body) = rabbit_api(reqwest::Method::GET, "/vhosts?columns=name", None).await;
    assert_eq!(status, 200, "list vhosts: {body}");
    let list: Vec<serde_json::Value> = serde_json::from_str(&body).expect("vhost list");
    list.iter()
        .filter_map(|v| v["name"].as_str())
        .map(pct)
        .collect()
}

/// Read-only: what the user's Redis on 6379 holds under the demo's key
/// names (each key's `DUMP`), or why it could not be read.
fn user_redis_demo_keys() -> Result<Vec<Option<Vec<u8>>>, String> {
    let client = redis::Client::open("redis://127.0.0.1:6379/0").map_err(|e| e.to_string())?;
    let mut conn = client
        .get_connection_with_timeout(Duration::from_secs(2))
        .map_err(|e| e.to_string())?;
    DEMO_KEYS
        .iter()
        .map(|k| {
            redis::cmd("DUMP")
                .arg(k)
                .query::<Option<Vec<u8>>>(&mut conn)
                .map_err(|e| e.to_string())
        })
        .collect()
}

/// Read-only: the `demo.*` queues of the vhost `/`, with their messages
/// and consumers, sorted by name.
async fn default_vhost_demo_queues() -> Vec<(String, serde_json::Value, serde_json::Value)> {
    let (status, body) = rabbit_api(
        reqwest::Method::GET,
        "/queues/%2F?columns=name,messages,consumers,arguments",
        None,
    )
    .await;
    assert_eq!(status, 200, "list the queues of /: {body}");
    let list: Vec<serde_json::Value> = serde_json::from_str(&body).expect("queue list");
    let mut demo: Vec<_> = list
        .iter()
        .filter_map(|q| {
            let name = q["name"].as_str()?;
            name.starts_with("demo.").then(|| {
                (
                    name.to_string(),
                    q["messages"].clone(),
                    q["consumers"].clone(),
                )
            })
        })
        .collect();
    demo.sort_by(|a, b| a.0.cmp(&b.0));
    demo
}

/// Whether a redis-server answers PING on `port`.
fn redis_answers(port: u16) -> bool {
    redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(1)))
        .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
        .is_ok()
}

/// The vhost's status code on the management API (200: it exists).
async fn vhost_status(name: &str) -> u16 {
    rabbit_api(
        reqwest::Method::GET,
        &format!("/vhosts/{}", pct(name)),
        None,
    )
    .await
    .0
}

#[tokio::test(flavor = "multi_thread")]
async fn demo_says_first_what_it_starts_and_where() {
    let mut demo = Demo::start().await;
    demo.wait_serving().await;
    let said = demo.announced();
    assert_ne!(said.redis_port, 6379, "the demo's Redis is not the user's");
    assert!(
        redis_answers(said.redis_port),
        "a redis-server answers on the announced port {}",
        said.redis_port
    );
    assert!(said.redis_dir.is_dir(), "{:?} exists", said.redis_dir);
    assert_eq!(vhost_status(&said.vhost).await, 200, "{said:?}");
    assert_ne!(said.vhost, "/");
    let (_, out, refused) = demo.interrupt().await;
    assert_eq!(refused, None, "the guard refused something:\n{out}");
}

#[tokio::test(flavor = "multi_thread")]
async fn demo_serves_its_sample_queues_from_its_own_redis_and_vhost() {
    let mut demo = Demo::start().await;
    demo.wait_serving().await;
    let said = demo.announced();
    let url = format!("http://{}/metrics", demo.http);
    let depth = |s: &Scrape, labels: &[(&str, &str)]| s.value("queue_depth", labels);
    let vhost = said.vhost.clone();
    // RabbitMQ's management stats lag by up to 5 s.
    let scrape = wait_for(
        "the demo's queues on /metrics",
        Duration::from_secs(40),
        || {
            let (url, vhost) = (url.clone(), vhost.clone());
            async move {
                let s = Scrape::parse(&http_get(&url, &[]).await.1);
                let ready = depth(&s, &[("source", "main"), ("queue", "demo:work-queue")])
                    .is_some()
                    && depth(&s, &[("vhost", vhost.as_str()), ("queue", "demo.work")])
                        == Some(12.0)
                    // Each queue's stats lag on its own: wait for both.
                    && depth(&s, &[("vhost", vhost.as_str()), ("queue", "demo.emails")])
                        .is_some_and(|d| d > 0.0);
                ready.then_some(s)
            }
        },
    )
    .await;
    assert_eq!(
        depth(&scrape, &[("source", "main"), ("queue", "demo:work-queue")]),
        Some(20.0)
    );
    assert_eq!(
        depth(
            &scrape,
            &[
                ("source", "rabbit"),
                ("vhost", vhost.as_str()),
                ("queue", "demo.emails")
            ]
        ),
        Some(1.0)
    );
    let mut own = redis::Client::open(format!("redis://127.0.0.1:{}", said.redis_port))
        .and_then(|c| c.get_connection())
        .expect("the demo's own Redis");
    let len: u64 = redis::cmd("LLEN")
        .arg("demo:work-queue")
        .query(&mut own)
        .expect("LLEN");
    assert_eq!(len, 20, "the sample list is in the demo's own Redis");
    let (_, out, refused) = demo.interrupt().await;
    assert_eq!(refused, None, "the guard refused something:\n{out}");
}

#[tokio::test(flavor = "multi_thread")]
async fn demo_changes_nothing_it_did_not_make_and_leaves_nothing_it_made() {
    let redis_before = user_redis_demo_keys();
    let rabbit_before = default_vhost_demo_queues().await;
    let mut demo = Demo::start().await;
    demo.wait_serving().await;
    let said = demo.announced();
    let (status, out, refused) = demo.interrupt().await;
    assert_eq!(
        refused, None,
        "the demo tried to change what it did not make:\n{out}"
    );
    assert_eq!(status.code(), Some(130), "Ctrl-C's exit status:\n{out}");
    assert_eq!(user_redis_demo_keys(), redis_before, "6379's demo:* keys");
    assert_eq!(
        default_vhost_demo_queues().await,
        rabbit_before,
        "the demo.* queues of the vhost /"
    );
    assert!(
        !redis_answers(said.redis_port),
        "the demo's redis-server on {} is stopped:\n{out}",
        said.redis_port
    );
    assert!(
        !Path::new(&said.redis_dir).exists(),
        "{:?} is removed",
        said.redis_dir
    );
    assert_eq!(
        vhost_status(&said.vhost).await,
        404,
        "the demo's vhost {} is deleted:\n{out}",
        said.vhost
    );
}
