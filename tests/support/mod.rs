//! Shared helpers for integration tests: private redis-server instances,
//! an in-process exporter, HTTP fetches, and waiting for conditions.
#![allow(dead_code)]

use std::future::Future;
use std::io::Write;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use queue_exporter::app::App;
use queue_exporter::config::{Config, LoadOptions};

/// A free TCP port on 127.0.0.1 (best effort: the OS may reuse it later).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// A private `redis-server` on a free port, killed on drop.
pub struct RedisServer {
    /// Its port.
    pub port: u16,
    /// `redis://127.0.0.1:{port}`.
    pub url: String,
    child: Option<Child>,
    /// Extra arguments given at start (reused by `restart`).
    args: Vec<String>,
}

impl RedisServer {
    /// Starts a server with nothing persisted.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts a server with extra arguments.
    pub fn start_with(args: &[&str]) -> Self {
        let port = free_port();
        let mut s = RedisServer {
            port,
            url: format!("redis://127.0.0.1:{port}"),
            child: None,
            args: args.iter().map(|a| a.to_string()).collect(),
        };
        s.spawn();
        s
    }

    fn spawn(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (apt-get install redis-server)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(mut c) = self.try_conn()
                && redis::cmd("PING").query::<String>(&mut c).is_ok()
            {
                return;
            }
            assert!(Instant::now() < deadline, "redis-server did not start on {}", self.port);
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn try_conn(&self) -> redis::RedisResult<redis::Connection> {
        redis::Client::open(self.url.as_str())?.get_connection()
    }

    /// A synchronous connection for writing test data (tests may write; the exporter never does).
    pub fn conn(&self) -> redis::Connection {
        self.try_conn().expect("connect to test redis")
    }

    /// Kills the server (data is lost).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts the server again on the same port (empty).
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
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
        TestApp { app: Some(app), base, dir }
    }

    /// The app.
    pub fn app(&self) -> &App {
        self.app.as_ref().expect("running")
    }

    /// GET `/metrics` in the classic format.
    pub async fn metrics(&self) -> String {
        http_get(&format!("{}/metrics", self.base), &[]).await.1
    }

    /// Stops the app.
    pub async fn stop(mut self) {
        if let Some(app) = self.app.take() {
            app.shutdown().await;
        }
    }
}

/// Writes `yaml` (with listen ports replaced by port 0) to a temp file and loads it.
pub fn load_config(yaml: &str) -> (Config, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_file(&dir, "config.yaml", yaml);
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

/// Writes a file into `dir`.
pub fn write_file(dir: &tempfile::TempDir, name: &str, content: &str) -> PathBuf {
    let path = dir.path().join(name);
    std::fs::File::create(&path)
        .and_then(|mut f| f.write_all(content.as_bytes()))
        .expect("write file");
    path
}

/// GET with headers; returns (status, body, headers).
pub async fn http_get(url: &str, headers: &[(&str, &str)]) -> (u16, String, reqwest::header::HeaderMap) {
    let client = reqwest::Client::builder().no_gzip().build().expect("client");
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

/// Polls `check` every 50 ms until it returns `Some`, or panics after `timeout`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Parses classic text with the `prometheus-parse` crate.
pub fn parse_classic(text: &str) -> prometheus_parse::Scrape {
    prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).expect("parse exposition")
}

/// The value of the sample `name` whose labels include all of `labels`.
pub fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let scrape = parse_classic(text);
    scrape
        .samples
        .iter()
        .find(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| match s.value {
            prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Untyped(v) => v,
            _ => f64::NAN,
        })
}
