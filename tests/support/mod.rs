//! Shared helpers for integration tests: private redis-server instances,
//! an in-process exporter, HTTP fetches, a parsed scrape, configs written as
//! indented raw strings, and waiting for conditions.
#![allow(dead_code)]

use std::future::Future;
use std::io::Write;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub mod libraries;
// Not every test binary drives a library.
#[allow(unused_imports)]
pub use libraries::*;

use queue_exporter::app::App;
use queue_exporter::config::{Config, LoadOptions};

/// A free TCP port on 127.0.0.1 (best effort: the OS may reuse it later).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// A free port whose cluster bus port (the port + 10000) is free too and
/// below 65536.
fn free_cluster_port() -> u16 {
    loop {
        let port = free_port();
        if port < 55_536 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
}

/// Why a redis-server did not come up.
enum Started {
    /// It exited at once, most likely because its port was taken.
    Exited,
    /// It runs but never answered PING.
    NoAnswer,
}

/// The ACL docs/redis.md asks for: every key, read commands only.
pub const READ_ONLY_ACL: &[&str] = &["-@all", "+@read", "+@connection", "~*"];

/// A private `redis-server` on a free port, killed on drop. It can be
/// stopped (SIGKILL), frozen (SIGSTOP) and thawed, and restarted on the same
/// port; data survives a restart only when started [`RedisServer::persistent`].
pub struct RedisServer {
    /// Its port.
    pub port: u16,
    /// `redis://127.0.0.1:{port}`.
    pub url: String,
    child: Option<Child>,
    /// Extra arguments given at start (reused by `restart`).
    args: Vec<String>,
    /// The data directory of a persistent server, removed on drop.
    _dir: Option<tempfile::TempDir>,
}

impl RedisServer {
    /// Starts a server with nothing persisted.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts a server with extra arguments (later ones override the defaults).
    pub fn start_with(args: &[&str]) -> Self {
        Self::spawn_new(args, None)
    }

    /// A server with an append-only file fsynced on every write, so a
    /// SIGKILL loses nothing and a restart comes back with the same data.
    pub fn persistent() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path().display().to_string();
        Self::spawn_new(
            &[
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--dir",
                &d,
            ],
            Some(dir),
        )
    }

    /// Starts on a fresh free port, and on another one when the server exits
    /// at once: between [`free_port`] and redis-server's bind, another test
    /// or an outgoing connection may take the port (or, for a cluster node,
    /// its bus port, the port + 10000).
    fn spawn_new(args: &[&str], dir: Option<tempfile::TempDir>) -> Self {
        let cluster = args.contains(&"--cluster-enabled");
        let mut s = RedisServer {
            port: 0,
            url: String::new(),
            child: None,
            args: args.iter().map(|a| a.to_string()).collect(),
            _dir: dir,
        };
        for _attempt in 0..8 {
            let port = if cluster {
                free_cluster_port()
            } else {
                free_port()
            };
            s.port = port;
            s.url = format!("redis://127.0.0.1:{port}");
            match s.try_spawn() {
                Ok(()) => return s,
                Err(Started::Exited) => continue,
                Err(Started::NoAnswer) => break,
            }
        }
        panic!(
            "redis-server did not start on {} (or on 7 other free ports)",
            s.port
        )
    }

    fn spawn(&mut self) {
        if self.try_spawn().is_err() {
            panic!("redis-server did not start again on {}", self.port);
        }
    }

    /// Starts redis-server on `self.port` and waits until it answers PING.
    fn try_spawn(&mut self) -> Result<(), Started> {
        let child = Command::new("redis-server")
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                // Never load an RDB another test's replica wrote in the
                // working directory (a full sync writes one there).
                "--dir",
                &std::env::temp_dir().to_string_lossy(),
                "--dbfilename",
                &format!("queue-exporter-test-{}.rdb", self.port),
            ])
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (apt-get install redis-server)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(mut c) = self.try_conn()
                && redis::cmd("PING").query::<String>(&mut c).is_ok()
            {
                return Ok(());
            }
            if let Some(c) = self.child.as_mut()
                && matches!(c.try_wait(), Ok(Some(_)))
            {
                self.child = None;
                return Err(Started::Exited);
            }
            if Instant::now() >= deadline {
                return Err(Started::NoAnswer);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// With a connect timeout: a frozen server accepts but never answers.
    fn try_conn(&self) -> redis::RedisResult<redis::Connection> {
        redis::Client::open(self.url.as_str())?.get_connection_with_timeout(Duration::from_secs(2))
    }

    /// A synchronous connection for writing test data (tests may write; the exporter never does).
    pub fn conn(&self) -> redis::Connection {
        self.try_conn().expect("connect to test redis")
    }

    /// Runs one command (arguments as bytes or strings).
    pub fn run<T: redis::FromRedisValue>(&self, args: &[&[u8]]) -> T {
        let mut c = redis::Cmd::new();
        for a in args {
            c.arg(*a);
        }
        c.query(&mut self.conn())
            .unwrap_or_else(|e| panic!("{:?}: {e}", String::from_utf8_lossy(args[0])))
    }

    /// Creates ACL user `user` with `password` and `rules` (e.g.
    /// [`READ_ONLY_ACL`] plus a refusal such as `-type`), and returns the URL
    /// that logs in as it.
    pub fn acl_user(&self, user: &str, password: &str, rules: &[&str]) -> String {
        let pass = format!(">{password}");
        let mut args: Vec<&[u8]> =
            vec![b"ACL", b"SETUSER", user.as_bytes(), b"on", pass.as_bytes()];
        args.extend(rules.iter().map(|r| r.as_bytes()));
        self.run::<()>(&args);
        self.url
            .replace("redis://", &format!("redis://{user}:{password}@"))
    }

    /// Zeroes `INFO commandstats` (`CONFIG RESETSTAT`), so what follows is
    /// counted alone.
    pub fn reset_stats(&self) {
        self.run::<()>(&[b"CONFIG", b"RESETSTAT"]);
    }

    /// `INFO commandstats`: command (lower case, `client|tracking` for a
    /// subcommand) → (calls, microseconds per call).
    pub fn commandstats(&self) -> std::collections::HashMap<String, (u64, f64)> {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut self.conn())
            .unwrap();
        info.lines()
            .filter_map(|l| {
                let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
                let field = |f: &str| {
                    rest.split(',')
                        .find_map(|kv| kv.strip_prefix(&format!("{f}=")))
                        .and_then(|v| v.parse::<f64>().ok())
                };
                Some((
                    name.to_string(),
                    (field("calls")? as u64, field("usec_per_call")?),
                ))
            })
            .collect()
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// SIGKILL: the server dies at once (a non-persistent one loses its data).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts the server again on the same port; returns once it answers PING.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    /// SIGSTOP: the server keeps its connections but answers nothing.
    pub fn freeze(&self) {
        signal(self.pid(), "-STOP");
    }

    /// SIGCONT.
    pub fn thaw(&self) {
        signal(self.pid(), "-CONT");
    }

    /// `INFO stats` field `total_net_output_bytes`: bytes the server sent.
    pub fn net_output_bytes(&self) -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("stats")
            .query(&mut self.conn())
            .expect("INFO");
        info.lines()
            .find_map(|l| l.strip_prefix("total_net_output_bytes:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("total_net_output_bytes")
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // SIGKILL works on a stopped process too; nothing to thaw first.
        self.stop();
    }
}

/// Sends `sig` (as `kill` spells it, e.g. `-STOP`) to a process.
pub fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill {sig} {pid}");
}

/// A running in-process exporter and its config file.
pub struct TestApp {
    /// The app.
    pub app: Option<App>,
    /// Base URL of its HTTP listener.
    pub base: String,
    /// Holds the config file.
    pub dir: tempfile::TempDir,
}

impl TestApp {
    /// Starts an exporter from YAML; `listen` is forced to free ports.
    pub async fn start(yaml: &str) -> TestApp {
        let (config, dir) = load_config(yaml);
        let app = App::start(config).await.expect("app starts");
        let base = format!("http://{}", app.http_addr);
        TestApp {
            app: Some(app),
            base,
            dir,
        }
    }

    /// The app.
    pub fn app(&self) -> &App {
        self.app.as_ref().expect("running")
    }

    /// GET `/metrics` in the classic format.
    pub async fn metrics(&self) -> String {
        http_get(&format!("{}/metrics", self.base), &[]).await.1
    }

    /// GET `/metrics` in the classic format, parsed.
    pub async fn scrape(&self) -> Scrape {
        Scrape::parse(&self.metrics().await)
    }

    /// Starts scraping in the background every `every`, keeping each scrape
    /// with its time, until [`ScrapeWatch::finish`]: for asserting that every
    /// scrape through a failover tells the truth.
    pub fn watch_scrapes(&self, every: Duration) -> ScrapeWatch {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let url = format!("{}/metrics", self.base);
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            let mut seen = Vec::new();
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                let (_, body, _) = http_get(&url, &[]).await;
                seen.push((Instant::now(), Scrape::parse(&body)));
                tokio::time::sleep(every).await;
            }
            seen
        });
        ScrapeWatch { stop, task }
    }

    /// Scrapes until `done` holds, and returns that scrape; panics after `timeout`.
    pub async fn scrape_until(
        &self,
        what: &str,
        timeout: Duration,
        done: impl Fn(&Scrape) -> bool,
    ) -> Scrape {
        let done = &done;
        wait_for(what, timeout, || async move {
            let scrape = self.scrape().await;
            done(&scrape).then_some(scrape)
        })
        .await
    }

    /// Like [`TestApp::scrape_until`], but a timeout shows the last scrape's
    /// depths, `source_up`, tracked keys and non-zero error counters.
    pub async fn until(
        &self,
        what: &str,
        timeout: Duration,
        done: impl Fn(&Scrape) -> bool,
    ) -> Scrape {
        let deadline = Instant::now() + timeout;
        loop {
            let s = self.scrape().await;
            if done(&s) {
                return s;
            }
            if Instant::now() > deadline {
                let lines: Vec<&str> = s
                    .text()
                    .lines()
                    .filter(|l| {
                        l.starts_with("queue_depth")
                            || l.starts_with("queue_exporter_source_up")
                            || l.starts_with("queue_exporter_tracked_keys")
                            || (l.starts_with("queue_exporter_poll_errors_total")
                                && !l.ends_with(" 0"))
                    })
                    .collect();
                panic!(
                    "timed out waiting for {what}; last scrape:\n{}",
                    lines.join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Scrapes until `name{labels}` is `want`, and returns that scrape.
    pub async fn wait_value(
        &self,
        name: &str,
        labels: &[(&str, &str)],
        want: f64,
        timeout: Duration,
    ) -> Scrape {
        self.scrape_until(&format!("{name}{labels:?} == {want}"), timeout, |s| {
            s.value(name, labels) == Some(want)
        })
        .await
    }

    /// Waits until `source` has finished `n` more polls (failed ones
    /// included) than when called, and returns the scrape that shows it;
    /// panics after `timeout`. A poll in flight when called may be one of
    /// the `n`: wait for one more than the whole polls you need.
    pub async fn wait_polls(&self, source: &str, n: u64, timeout: Duration) -> Scrape {
        let start = polls(&self.scrape().await, source);
        self.scrape_until(
            &format!("{n} more polls of {source} (from {start})"),
            timeout,
            |s| polls(s, source) >= start + n,
        )
        .await
    }

    /// Stops the app.
    pub async fn stop(mut self) {
        if let Some(app) = self.app.take() {
            app.shutdown().await;
        }
    }
}

/// Writes `yaml` (with listen ports replaced by port 0) to a temp file and loads it.
/// The YAML is [`dedent`]ed first, so a config can be an indented raw string.
pub fn load_config(yaml: &str) -> (Config, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_file(&dir, "config.yaml", &dedent(yaml));
    let mut config = Config::load_with_env(
        &LoadOptions {
            file: Some(path),
            ..LoadOptions::default()
        },
        Vec::new(),
    )
    .unwrap_or_else(|e| panic!("test config invalid: {e}"));
    config.listen.http = "127.0.0.1:0".parse().expect("addr");
    if config.listen.grpc.is_some() {
        config.listen.grpc = Some("127.0.0.1:0".parse().expect("addr"));
    }
    (config, dir)
}

/// Text written as an indented raw string, flush left: a first line that is
/// empty is dropped, and the indentation every non-blank line shares is
/// removed. Text that is already flush left comes back unchanged (with a
/// final newline). So a YAML config can sit indented in the test body:
///
/// ```ignore
/// TestApp::start(r#"
///     sources:
///       - name: main
/// "#)
/// ```
pub fn dedent(text: &str) -> String {
    let text = text.strip_prefix('\n').unwrap_or(text);
    let margin = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start_matches(' ').len())
        .min()
        .unwrap_or(0);
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        if !line.trim().is_empty() {
            out.push_str(&line[margin..]);
        }
        out.push('\n');
    }
    while out.ends_with("\n\n") {
        out.pop();
    }
    out
}

/// `text` [`dedent`]ed, then every non-blank line indented by `spaces`: a
/// block of YAML to nest under a key.
pub fn indent(text: &str, spaces: usize) -> String {
    let pad = " ".repeat(spaces);
    dedent(text)
        .lines()
        .map(|l| {
            if l.is_empty() {
                "\n".to_string()
            } else {
                format!("{pad}{l}\n")
            }
        })
        .collect()
}

/// Writes a file into `dir`.
pub fn write_file(dir: &tempfile::TempDir, name: &str, content: &str) -> PathBuf {
    let path = dir.path().join(name);
    std::fs::File::create(&path)
        .and_then(|mut f| f.write_all(content.as_bytes()))
        .expect("write file");
    path
}

/// GET with headers; returns (status, body, headers).
pub async fn http_get(
    url: &str,
    headers: &[(&str, &str)],
) -> (u16, String, reqwest::header::HeaderMap) {
    let client = reqwest::Client::builder()
        .no_gzip()
        .build()
        .expect("client");
    let mut req = client.get(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.expect("GET");
    let status = resp.status().as_u16();
    let h = resp.headers().clone();
    let body = resp.text().await.expect("body");
    (status, body, h)
}

/// Polls `check` every 20 ms until it returns `Some`; `None` after `timeout`.
pub async fn poll_until<T, F, Fut>(timeout: Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Like [`poll_until`], but panics naming `what` after `timeout`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    poll_until(timeout, check)
        .await
        .unwrap_or_else(|| panic!("timed out waiting for {what}"))
}

/// Parses classic text with the `prometheus-parse` crate.
pub fn parse_classic(text: &str) -> prometheus_parse::Scrape {
    prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
        .expect("parse exposition")
}

/// The value of the sample `name` whose labels include all of `labels`.
/// Parses `text` on every call: to ask one exposition several things, parse
/// it once into a [`Scrape`].
pub fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    Scrape::parse(text).value(name, labels)
}

/// How many polls `source` has finished, failed ones included (the count
/// of `queue_exporter_poll_duration_seconds`; 0 before the first): the
/// clock tests wait on instead of sleeping.
pub fn polls(scrape: &Scrape, source: &str) -> u64 {
    scrape
        .value(
            "queue_exporter_poll_duration_seconds_count",
            &[("source", source)],
        )
        .map_or(0, |n| n as u64)
}

/// One classic-text exposition, parsed once (with `prometheus-parse`), with
/// the questions tests ask of it. `Display` prints the text, for assertion
/// messages.
pub struct Scrape {
    text: String,
    samples: Vec<prometheus_parse::Sample>,
}

impl Scrape {
    /// Parses classic text.
    pub fn parse(text: &str) -> Scrape {
        Scrape {
            text: text.to_string(),
            samples: parse_classic(text).samples,
        }
    }

    /// The text as served.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Every sample `name` whose labels include all of `labels`.
    pub fn samples<'a>(
        &'a self,
        name: &'a str,
        labels: &'a [(&'a str, &'a str)],
    ) -> impl Iterator<Item = &'a prometheus_parse::Sample> + 'a {
        self.samples.iter().filter(move |s| {
            s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v))
        })
    }

    /// The value of the first sample `name` whose labels include all of
    /// `labels` (NaN for a histogram or summary value).
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.samples(name, labels).next().map(|s| match s.value {
            prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Untyped(v) => v,
            _ => f64::NAN,
        })
    }

    /// Whether a sample `name` with these labels is exported.
    pub fn has(&self, name: &str, labels: &[(&str, &str)]) -> bool {
        self.samples(name, labels).next().is_some()
    }

    /// `name{queue}`: a per-queue series.
    pub fn queue(&self, name: &str, queue: &str) -> Option<f64> {
        self.value(name, &[("queue", queue)])
    }

    /// `queue_depth{queue}`.
    pub fn depth(&self, queue: &str) -> Option<f64> {
        self.queue("queue_depth", queue)
    }

    /// `queue_oldest_message_age_seconds{queue}`.
    pub fn age(&self, queue: &str) -> Option<f64> {
        self.queue("queue_oldest_message_age_seconds", queue)
    }

    /// `queue_message_age_seconds_bucket{queue, le}`.
    pub fn bucket(&self, queue: &str, le: &str) -> Option<f64> {
        self.value(
            "queue_message_age_seconds_bucket",
            &[("queue", queue), ("le", le)],
        )
    }

    /// `queue_info{queue, type} == 1`: the key is reported with this type.
    pub fn has_type(&self, queue: &str, kind: &str) -> bool {
        self.value("queue_info", &[("queue", queue), ("type", kind)]) == Some(1.0)
    }

    /// `queue_exporter_source_up{source}`.
    pub fn source_up(&self, source: &str) -> Option<f64> {
        self.value("queue_exporter_source_up", &[("source", source)])
    }

    /// `queue_exporter_poll_errors_total{source, reason}`.
    pub fn errors(&self, source: &str, reason: &str) -> Option<f64> {
        self.value(
            "queue_exporter_poll_errors_total",
            &[("source", source), ("reason", reason)],
        )
    }

    /// Whether any line of the text carries the label `queue="{queue}"`
    /// (for names that need no escaping).
    pub fn shows_queue(&self, queue: &str) -> bool {
        self.text.contains(&format!("queue=\"{queue}\""))
    }
}

impl std::fmt::Display for Scrape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// A TCP server that accepts connections and never answers: a backend that
/// hangs. [`SilentServer::close`] (or drop) closes every accepted connection
/// and stops listening, so clients waiting on it fail at once.
pub struct SilentServer {
    /// Its port on 127.0.0.1.
    pub port: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SilentServer {
    /// Starts listening on a free port.
    pub fn start() -> Self {
        use std::sync::atomic::Ordering;
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        listener.set_nonblocking(true).expect("nonblocking");
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut held = Vec::new();
            while !flag.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((conn, _)) => held.push(conn),
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
            for c in &held {
                let _ = c.shutdown(std::net::Shutdown::Both);
            }
        });
        SilentServer {
            port,
            stop,
            thread: Some(thread),
        }
    }

    /// `redis://127.0.0.1:{port}`.
    pub fn redis_url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Closes every connection and the listener.
    pub fn close(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for SilentServer {
    fn drop(&mut self) {
        self.close();
    }
}

/// A child process killed (and reaped) on drop, even when a test panics.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Background scrapes started by [`TestApp::watch_scrapes`].
pub struct ScrapeWatch {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<Vec<(Instant, Scrape)>>,
}

impl ScrapeWatch {
    /// Stops scraping and returns every scrape with the time it was taken.
    pub async fn finish(self) -> Vec<(Instant, Scrape)> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.task.await.expect("scrape watcher")
    }
}

/// A private Prometheus server on a free port, scraping every second, with
/// its data under the caller's directory; killed on drop.
pub struct Prometheus {
    /// `http://127.0.0.1:{port}`.
    pub url: String,
    _process: KillOnDrop,
}

impl Prometheus {
    /// Writes `prometheus.yml` into `dir` with `scrape_configs` (YAML list
    /// items, already indented by two spaces) and returns once `/-/ready`.
    pub async fn start(dir: &std::path::Path, scrape_configs: &str) -> Prometheus {
        Prometheus::start_with_auth(dir, scrape_configs, None).await
    }

    /// [`Prometheus::start`] with its own API behind HTTP basic auth when
    /// `basic_auth` is given: (user, bcrypt hash of the password, the
    /// password, for the readiness check).
    pub async fn start_with_auth(
        dir: &std::path::Path,
        scrape_configs: &str,
        basic_auth: Option<(&str, &str, &str)>,
    ) -> Prometheus {
        let web =
            basic_auth.map(|(user, hash, _)| format!("basic_auth_users:\n  {user}: '{hash}'\n"));
        let auth = basic_auth.map(|(u, _, p)| (u.to_owned(), p.to_owned()));
        Prometheus::spawn(
            dir,
            scrape_configs,
            web,
            "http",
            reqwest::Client::new(),
            auth,
        )
        .await
    }

    /// [`Prometheus::start`] serving only `https://` with the server
    /// certificate and key of `pki` (files in `dir`); its readiness is
    /// checked trusting `pki`'s CA.
    pub async fn start_with_tls(
        dir: &std::path::Path,
        scrape_configs: &str,
        pki: &Pki,
    ) -> Prometheus {
        Prometheus::start_https(dir, scrape_configs, pki, false).await
    }

    /// [`Prometheus::start_with_tls`] that also asks every client for a
    /// certificate signed by `pki`'s CA (`client_auth_type:
    /// RequireAndVerifyClientCert`); its readiness is checked with `pki`'s
    /// client certificate.
    pub async fn start_with_mtls(
        dir: &std::path::Path,
        scrape_configs: &str,
        pki: &Pki,
    ) -> Prometheus {
        Prometheus::start_https(dir, scrape_configs, pki, true).await
    }

    /// `https://` only, with `pki`'s server certificate; asking clients
    /// for one of `pki`'s client certificates if `client_certs`.
    async fn start_https(
        dir: &std::path::Path,
        scrape_configs: &str,
        pki: &Pki,
        client_certs: bool,
    ) -> Prometheus {
        let cert = dir.join("prometheus-server.pem");
        let key = dir.join("prometheus-server.key");
        std::fs::write(&cert, &pki.server.0).expect("write the server certificate");
        std::fs::write(&key, &pki.server.1).expect("write the server key");
        let mut web = format!(
            "tls_server_config:\n  cert_file: {}\n  key_file: {}\n",
            cert.display(),
            key.display()
        );
        let ca = reqwest::Certificate::from_pem(pki.ca.as_bytes()).expect("the test CA");
        let mut ready = reqwest::Client::builder().add_root_certificate(ca);
        if client_certs {
            let client_ca = dir.join("prometheus-client-ca.pem");
            std::fs::write(&client_ca, &pki.ca).expect("write the client CA");
            web.push_str(&format!(
                "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {}\n",
                client_ca.display()
            ));
            let pem = format!("{}\n{}", pki.client.1, pki.client.0);
            let identity =
                reqwest::Identity::from_pem(pem.as_bytes()).expect("the test client certificate");
            ready = ready.identity(identity);
        }
        let ready = ready.build().expect("an HTTPS client");
        Prometheus::spawn(dir, scrape_configs, Some(web), "https", ready, None).await
    }

    /// Starts `prometheus` with `web` as its `--web.config.file` if given,
    /// and returns once `ready` (authenticated by `auth`) gets `/-/ready`.
    async fn spawn(
        dir: &std::path::Path,
        scrape_configs: &str,
        web: Option<String>,
        scheme: &str,
        ready: reqwest::Client,
        auth: Option<(String, String)>,
    ) -> Prometheus {
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n{scrape_configs}"
            ),
        )
        .expect("write prometheus.yml");
        let port = free_port();
        let mut args = vec![
            format!("--config.file={}", config.display()),
            format!("--storage.tsdb.path={}", dir.join("tsdb").display()),
            format!("--web.listen-address=127.0.0.1:{port}"),
            "--storage.tsdb.retention.time=1h".to_owned(),
        ];
        if let Some(web) = web {
            let path = dir.join("web.yml");
            std::fs::write(&path, web).expect("write web.yml");
            args.push(format!("--web.config.file={}", path.display()));
        }
        let process = KillOnDrop(
            Command::new("prometheus")
                .args(&args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect(
                    "prometheus must be installed (scripts/setup-services: apt-get install prometheus)",
                ),
        );
        let url = format!("{scheme}://127.0.0.1:{port}");
        let ready_url = format!("{url}/-/ready");
        wait_for("Prometheus /-/ready", Duration::from_secs(30), || {
            let (ready_url, ready, auth) = (ready_url.clone(), ready.clone(), auth.clone());
            async move {
                let mut request = ready.get(&ready_url);
                if let Some((u, p)) = auth {
                    request = request.basic_auth(u, Some(p));
                }
                let r = request.send().await.ok()?;
                r.status().is_success().then_some(())
            }
        })
        .await;
        Prometheus {
            url,
            _process: process,
        }
    }
}

/// One sample as read back by Python's `prometheus_client` parsers.
#[derive(Debug, Clone)]
pub struct PySample {
    /// The family the sample belongs to.
    pub family: String,
    /// The family's type as the parser understood it (`gauge`, `gaugehistogram`…).
    pub family_type: String,
    /// The sample name (`queue_depth`, `queue_message_age_seconds_bucket`…).
    pub name: String,
    /// Labels, unescaped.
    pub labels: std::collections::BTreeMap<String, String>,
    /// The value.
    pub value: f64,
}

/// Parses an exposition with Python's `prometheus_client`: the strict
/// OpenMetrics parser when `openmetrics`, else the classic text parser.
/// Label values come back unescaped, so odd key names can be compared exactly.
/// Needs `python3 -m pip install prometheus-client`.
pub fn python_parse(text: &str, openmetrics: bool) -> Result<Vec<PySample>, String> {
    const SCRIPT: &str = r#"
import json, sys
if sys.argv[1] == "om":
    from prometheus_client.openmetrics.parser import text_string_to_metric_families
else:
    from prometheus_client.parser import text_string_to_metric_families
out = []
for fam in text_string_to_metric_families(sys.stdin.read()):
    for s in fam.samples:
        out.append({"family": fam.name, "type": fam.type, "name": s.name,
                    "labels": s.labels, "value": repr(float(s.value))})
print(json.dumps(out))
"#;
    let mut child = Command::new("python3")
        .args(["-c", SCRIPT, if openmetrics { "om" } else { "classic" }])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("python3: {e}"))?;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .map_err(|e| format!("write to python3: {e}"))?;
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "python prometheus_client parser rejected it (pip install prometheus-client): {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let rows: Vec<serde_json::Value> =
        serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())?;
    Ok(rows
        .into_iter()
        .map(|r| PySample {
            family: r["family"].as_str().unwrap_or_default().to_string(),
            family_type: r["type"].as_str().unwrap_or_default().to_string(),
            name: r["name"].as_str().unwrap_or_default().to_string(),
            labels: serde_json::from_value(r["labels"].clone()).unwrap_or_default(),
            value: r["value"]
                .as_str()
                .and_then(|v| v.parse().ok())
                .unwrap_or(f64::NAN),
        })
        .collect())
}

/// Runs `promtool check metrics` on `text`; returns (passed, output).
pub fn promtool_check(text: &str) -> (bool, String) {
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
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write to promtool");
    let out = child.wait_with_output().expect("promtool runs");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// Management API of the local test RabbitMQ (guest/guest).
pub const RABBIT_API: &str = "http://127.0.0.1:15672/api";
/// AMQP address of the local test RabbitMQ, without a vhost.
pub const RABBIT_AMQP: &str = "amqp://guest:guest@127.0.0.1:5672";

/// Bytes kept as they are in a path segment: letters, digits, `-`, `_`, `.`.
const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.');

/// Percent-encodes a string for one URL path segment (a vhost or queue name).
pub fn pct(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, SEGMENT).to_string()
}

/// A request to the RabbitMQ management API as guest; returns (status, body).
pub async fn rabbit_api(
    method: reqwest::Method,
    path: &str,
    body: Option<serde_json::Value>,
) -> (u16, String) {
    let mut req = reqwest::Client::new()
        .request(method, format!("{RABBIT_API}{path}"))
        .basic_auth("guest", Some("guest"));
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req
        .send()
        .await
        .expect("RabbitMQ management API reachable on 15672");
    let status = resp.status().as_u16();
    (status, resp.text().await.unwrap_or_default())
}

/// A throw-away vhost on the local RabbitMQ where guest may do anything,
/// made through the management API and deleted (with its queues) on drop.
pub struct RabbitVhost {
    /// The vhost's name.
    pub name: String,
}

impl RabbitVhost {
    /// Creates `qe-{tag}-{pid}` (deleting a leftover of the same name first).
    pub async fn create(tag: &str) -> RabbitVhost {
        Self::create_named(&format!("qe-{tag}-{}", std::process::id())).await
    }

    /// Creates a vhost with exactly this name.
    pub async fn create_named(name: &str) -> RabbitVhost {
        let path = format!("/vhosts/{}", pct(name));
        let _ = rabbit_api(reqwest::Method::DELETE, &path, None).await;
        let (status, body) = rabbit_api(reqwest::Method::PUT, &path, None).await;
        assert!(
            (200..300).contains(&status),
            "create vhost {name:?}: {status} {body}"
        );
        let (status, body) = rabbit_api(
            reqwest::Method::PUT,
            &format!("/permissions/{}/guest", pct(name)),
            Some(serde_json::json!({"configure": ".*", "write": ".*", "read": ".*"})),
        )
        .await;
        assert!(
            (200..300).contains(&status),
            "grant guest on {name:?}: {status} {body}"
        );
        RabbitVhost {
            name: name.to_string(),
        }
    }

    /// Creates the vhost as [`RabbitVhost::create`] does and declares
    /// `queue` in it: the start most RabbitMQ tests share. Returns the
    /// vhost, an AMQP connection to it and a [`confirm_channel`] on that.
    pub async fn with_queue(
        tag: &str,
        queue: &str,
    ) -> (RabbitVhost, lapin::Connection, lapin::Channel) {
        let vhost = Self::create(tag).await;
        let conn = vhost.connect().await;
        let ch = confirm_channel(&conn).await;
        declare_queue(&ch, queue, &[]).await;
        (vhost, conn, ch)
    }

    /// `amqp://guest:guest@127.0.0.1:5672/{vhost}` with the vhost percent-encoded.
    pub fn amqp_url(&self) -> String {
        format!("{RABBIT_AMQP}/{}", pct(&self.name))
    }

    /// An AMQP connection to this vhost, for writing test data.
    pub async fn connect(&self) -> lapin::Connection {
        lapin::Connection::connect(&self.amqp_url(), lapin::ConnectionProperties::default())
            .await
            .expect("AMQP connection to the test RabbitMQ")
    }
}

impl Drop for RabbitVhost {
    fn drop(&mut self) {
        delete_as_guest(format!("{RABBIT_API}/vhosts/{}", pct(&self.name)));
    }
}

/// Declares a durable queue with x-arguments (tests write; the exporter never does).
pub async fn declare_queue(
    ch: &lapin::Channel,
    name: &str,
    args: &[(&str, lapin::types::AMQPValue)],
) {
    let mut table = lapin::types::FieldTable::default();
    for (k, v) in args {
        table.insert((*k).into(), v.clone());
    }
    ch.queue_declare(
        name.into(),
        lapin::options::QueueDeclareOptions::durable(),
        table,
    )
    .await
    .unwrap_or_else(|e| panic!("declare {name}: {e}"));
}

/// A channel in confirm mode, so that published messages are enqueued when
/// [`publish`] returns.
pub async fn confirm_channel(conn: &lapin::Connection) -> lapin::Channel {
    let ch = conn.create_channel().await.expect("channel");
    ch.confirm_select(lapin::options::ConfirmSelectOptions::default())
        .await
        .expect("confirm.select");
    ch
}

/// Publishes `n` messages to `queue` through the default exchange and waits for the confirms.
pub async fn publish(ch: &lapin::Channel, queue: &str, n: usize, props: lapin::BasicProperties) {
    let mut confirms = Vec::with_capacity(n);
    for i in 0..n {
        let confirm = ch
            .basic_publish(
                "".into(),
                queue.into(),
                lapin::options::BasicPublishOptions::default(),
                format!("job {i}").as_bytes(),
                props.clone(),
            )
            .await
            .expect("publish");
        confirms.push(confirm);
    }
    for c in confirms {
        c.await.expect("confirm");
    }
}

/// A connection in MONITOR mode on `redis`, read with [`monitored`].
pub fn start_monitor(redis: &RedisServer) -> redis::Connection {
    let client = redis::Client::open(redis.url.as_str()).unwrap();
    let mut monitor = client.get_connection().unwrap();
    redis::cmd("MONITOR").exec(&mut monitor).unwrap();
    monitor
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    monitor
}

/// Every command line MONITOR reported so far (until it goes quiet).
pub fn monitored(monitor: &mut redis::Connection) -> Vec<String> {
    let mut seen = Vec::new();
    while let Ok(v) = monitor.recv_response() {
        if let redis::Value::SimpleString(line) = v {
            seen.push(line);
        }
    }
    seen
}

/// DELETEs a management API object as guest, on its own thread and runtime
/// (for `Drop`: the test's runtime may be gone). Errors are ignored.
pub fn delete_as_guest(url: String) {
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

/// A test CA and what it signed, as PEM, made by `rcgen` at test time (no
/// key is ever committed).
pub struct Pki {
    /// The CA certificate.
    pub ca: String,
    /// Server certificate for `localhost` and 127.0.0.1, and its key.
    pub server: (String, String),
    /// Client certificate, and its key.
    pub client: (String, String),
}

/// A CA named after `name`, a server certificate for `localhost` and
/// 127.0.0.1 (ECDSA P-256 keys, PKCS#8) and a client certificate, all signed by it.
pub fn make_pki(name: &str) -> Pki {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    };
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params
        .distinguished_name
        .push(DnType::CommonName, format!("{name} test CA"));
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);

    let leaf = |sans: Vec<String>, usage: ExtendedKeyUsagePurpose| {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(sans).unwrap();
        params.extended_key_usages = vec![usage];
        let cert = params.signed_by(&key, &issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    };
    let server = leaf(
        vec!["localhost".into(), "127.0.0.1".into()],
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    let client = leaf(
        vec!["keda-operator".into()],
        ExtendedKeyUsagePurpose::ClientAuth,
    );
    Pki {
        ca: ca_cert.pem(),
        server,
        client,
    }
}

/// Runs the exporter binary with `args` to its end: whether it succeeded,
/// its stdout and its stderr.
pub fn run_exporter(args: &[&str]) -> (bool, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_queue-exporter"))
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .expect("run the exporter");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Entries in `ACL LOG` (one per refused command kind and user, counted).
pub fn acl_log_count(redis: &RedisServer) -> u64 {
    let log: Vec<redis::Value> = redis.run(&[b"ACL", b"LOG"]);
    log.iter()
        .map(|entry| match entry {
            redis::Value::Map(fields) => fields
                .iter()
                .find(|(k, _)| matches!(k, redis::Value::BulkString(b) if b == b"count"))
                .and_then(|(_, v)| match v {
                    redis::Value::Int(n) => Some(*n as u64),
                    _ => None,
                })
                .unwrap_or(1),
            redis::Value::Array(fields) => fields
                .chunks(2)
                .find(|kv| matches!(&kv[0], redis::Value::BulkString(b) if b == b"count"))
                .and_then(|kv| match &kv[1] {
                    redis::Value::Int(n) => Some(*n as u64),
                    _ => None,
                })
                .unwrap_or(1),
            _ => 1,
        })
        .sum()
}

/// A zero-config Redis source named `main` over `url`, scanning 100 keys
/// per call, without client tracking, with `extra` YAML lines (indented as
/// source fields).
pub fn zero_config_redis_source(
    url: &str,
    extra: &str,
) -> queue_exporter::sources::redis::RedisSource {
    let (config, _dir) = load_config(&format!(
        "sources:\n  - name: main\n    type: redis\n    url: {url}\n    scan_count: 100\n    client_tracking: false\n{extra}"
    ));
    let Some(queue_exporter::config::SourceConfig::Redis(config)) =
        config.sources.into_iter().next()
    else {
        panic!("one redis source");
    };
    queue_exporter::sources::redis::RedisSource::new(config)
}

/// The one member of the set `set` on `redis`, once a real worker has
/// written it (a Celery worker binds its queues and gossip a few seconds
/// after start): waits up to 60 s; more than one member fails the test.
pub fn only_member(redis: &RedisServer, set: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let members: Vec<String> = redis.run(&[b"SMEMBERS", set.as_bytes()]);
        if let [m] = members.as_slice() {
            return m.clone();
        }
        assert!(
            members.is_empty() && Instant::now() < deadline,
            "{set}: {members:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Files under `dir` (recursively) whose name ends with one of `exts`,
/// sorted: the docs and deployment tests read every file of a kind.
pub fn files_under(dir: &std::path::Path, exts: &[&str]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            if p.is_dir() {
                todo.push(p);
            } else if exts.iter().any(|x| name.ends_with(x)) {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}
