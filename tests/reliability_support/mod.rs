//! Helpers for the issue-14 reliability tests (`faults_*`, `hostile_input`,
//! `least_privilege`, `secrets`, `load`): the exporter binary as a child
//! process observed from outside (`/metrics`, gRPC, `/proc/<pid>`), a
//! private redis-server that can be killed, frozen and restarted, a raw
//! HTTP server that misbehaves on purpose, and a TCP proxy that can be made
//! slow, drop connections or cut responses.
//!
//! Test files include it next to `support`:
//! `mod support; mod reliability_support;`.
#![allow(dead_code)]

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::support::{free_port, sample};

/// The exporter binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_queue-exporter");

/// Figures read from `/proc/<pid>/status`, in KiB (threads: a count).
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcStatus {
    /// `VmRSS`: resident memory now.
    pub rss_kib: u64,
    /// `VmHWM`: the peak resident memory so far.
    pub hwm_kib: u64,
    /// `Threads`.
    pub threads: u64,
}

/// Reads `/proc/<pid>/status`.
pub fn proc_status(pid: u32) -> ProcStatus {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    ProcStatus {
        rss_kib: field("VmRSS:"),
        hwm_kib: field("VmHWM:"),
        threads: field("Threads:"),
    }
}

/// Open file descriptors of `pid` (entries of `/proc/<pid>/fd`).
pub fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// The exporter binary running `serve` with a generated config, as a child
/// process: stdout and stderr go to files (read them any time), the HTTP
/// and gRPC listeners are on free ports. Killed on drop.
pub struct Exporter {
    child: Option<Child>,
    /// Its process id.
    pub pid: u32,
    /// `http://127.0.0.1:{port}`.
    pub base: String,
    /// The gRPC scaler's address.
    pub grpc: SocketAddr,
    /// Holds the config and the output files.
    pub dir: tempfile::TempDir,
    /// The config file.
    pub config: PathBuf,
    stdout: PathBuf,
    stderr: PathBuf,
}

impl Exporter {
    /// Starts `serve` with `body` (YAML without `listen:`) and waits until
    /// `/healthz` answers. `args` are extra command-line arguments, `env`
    /// extra environment variables (RUST_LOG is removed unless given).
    pub async fn start(body: &str, args: &[&str], env: &[(&str, &str)]) -> Exporter {
        let dir = tempfile::tempdir().expect("tempdir");
        let http = free_port();
        let grpc_port = free_port();
        let yaml =
            format!("listen: {{ http: 127.0.0.1:{http}, grpc: 127.0.0.1:{grpc_port} }}\n{body}");
        let config = dir.path().join("config.yaml");
        std::fs::write(&config, yaml).expect("write config");
        let stdout = dir.path().join("stdout");
        let stderr = dir.path().join("stderr");
        let mut cmd = Command::new(BIN);
        cmd.arg("--config")
            .arg(&config)
            .args(args)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&stdout).expect("stdout file"))
            .stderr(std::fs::File::create(&stderr).expect("stderr file"));
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("start the exporter binary");
        let e = Exporter {
            pid: child.id(),
            child: Some(child),
            base: format!("http://127.0.0.1:{http}"),
            grpc: SocketAddr::from(([127, 0, 0, 1], grpc_port)),
            dir,
            config,
            stdout,
            stderr,
        };
        let url = format!("{}/healthz", e.base);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(r) = reqwest::get(&url).await
                && r.status().is_success()
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "exporter did not serve /healthz within 20 s; stderr:\n{}",
                e.stderr()
            );
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
        e
    }

    /// GET `/metrics` (classic text); panics if it does not answer 200.
    pub async fn metrics(&self) -> String {
        let resp = reqwest::get(format!("{}/metrics", self.base))
            .await
            .unwrap_or_else(|e| panic!("/metrics: {e}; stderr:\n{}", self.stderr()));
        assert_eq!(resp.status().as_u16(), 200, "/metrics status");
        resp.text().await.expect("/metrics body")
    }

    /// A sample of the current `/metrics`.
    pub async fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        sample(&self.metrics().await, name, labels)
    }

    /// Everything the process wrote to stderr so far.
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.stderr).unwrap_or_default()).into_owned()
    }

    /// Everything the process wrote to stdout so far.
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.stdout).unwrap_or_default()).into_owned()
    }

    /// `/proc/<pid>/status` figures.
    pub fn status(&self) -> ProcStatus {
        proc_status(self.pid)
    }

    /// Open file descriptors.
    pub fn fds(&self) -> usize {
        fd_count(self.pid)
    }

    /// True while the process has not exited.
    pub fn running(&mut self) -> bool {
        match &mut self.child {
            Some(c) => c.try_wait().expect("try_wait").is_none(),
            None => false,
        }
    }

    /// SIGTERM, then waits (at most 10 s) for the exit status.
    pub fn terminate(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("still running");
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(s) = child.try_wait().expect("try_wait") {
                return s;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("exporter did not exit within 10 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Runs the binary to completion with `args` (and RUST_LOG removed unless
/// in `env`); returns (exit code, stdout, stderr).
pub fn run_bin(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut cmd = Command::new(BIN);
    cmd.args(args).env_remove("RUST_LOG").stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run the exporter binary");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Like [`run_bin`], but kills the process if it still runs after `limit`
/// (for `serve`, which runs until stopped); exit code -1 then.
pub fn run_bin_for(args: &[&str], env: &[(&str, &str)], limit: Duration) -> (i32, String, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (out, err) = (dir.path().join("out"), dir.path().join("err"));
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).expect("out"))
        .stderr(std::fs::File::create(&err).expect("err"));
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("run the exporter binary");
    let deadline = Instant::now() + limit;
    let code = loop {
        if let Some(s) = child.try_wait().expect("try_wait") {
            break s.code().unwrap_or(-1);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break -1;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (code, read_text(&out), read_text(&err))
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

/// A private redis-server on a free port whose process can be killed,
/// frozen (SIGSTOP) and thawed, and restarted on the same port. Data
/// survives a restart when started with [`PrivateRedis::persistent`].
pub struct PrivateRedis {
    /// Its port.
    pub port: u16,
    /// `redis://127.0.0.1:{port}`.
    pub url: String,
    child: Option<Child>,
    args: Vec<String>,
    _dir: Option<tempfile::TempDir>,
}

impl PrivateRedis {
    /// A server keeping nothing on disk, with extra arguments.
    pub fn start(extra: &[&str]) -> PrivateRedis {
        Self::spawn_new(extra, None)
    }

    /// A server with an append-only file fsynced on every write, so a
    /// SIGKILL loses nothing and a restart comes back with the same data.
    pub fn persistent() -> PrivateRedis {
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

    fn spawn_new(extra: &[&str], dir: Option<tempfile::TempDir>) -> PrivateRedis {
        let port = free_port();
        let mut r = PrivateRedis {
            port,
            url: format!("redis://127.0.0.1:{port}"),
            child: None,
            args: extra.iter().map(|s| s.to_string()).collect(),
            _dir: dir,
        };
        r.spawn();
        r
    }

    fn spawn(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server installed");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(mut c) = self.try_conn()
                && redis::cmd("PING").query::<String>(&mut c).is_ok()
            {
                return;
            }
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn try_conn(&self) -> redis::RedisResult<redis::Connection> {
        redis::Client::open(self.url.as_str())?.get_connection_with_timeout(Duration::from_secs(2))
    }

    /// A connection for writing test data.
    pub fn conn(&self) -> redis::Connection {
        self.try_conn().expect("connect to the private redis")
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

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// SIGKILL: the server dies at once.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same port; returns once it answers PING.
    pub fn restart(&mut self) {
        self.kill();
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

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        // SIGKILL works on a stopped process too; nothing to thaw first.
        self.kill();
    }
}

fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill {sig} {pid}");
}

/// What a raw HTTP handler gets: the request path and the connection, with
/// the request head already read.
pub type Handler =
    Arc<dyn Fn(String, TcpStream) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// A raw HTTP/1.1 server on a free port: reads each request's head and
/// hands the path and the socket to `handler`, which writes whatever it
/// likes (truncated, endless, invalid). Returns `http://127.0.0.1:{port}`.
/// Runs on the current tokio runtime until the runtime ends.
pub async fn raw_http_server(handler: Handler) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let handler = handler.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match sock.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                    if head.len() > 64 * 1024 {
                        return;
                    }
                }
                let text = String::from_utf8_lossy(&head);
                let path = text.split_whitespace().nth(1).unwrap_or("/").to_string();
                handler(path, sock).await;
            });
        }
    });
    format!("http://127.0.0.1:{port}")
}

/// Writes `data` and ignores errors (the client may hang up first).
pub async fn write_all(sock: &mut TcpStream, data: &[u8]) -> bool {
    sock.write_all(data).await.is_ok()
}

/// How the [`Proxy`] treats connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyMode {
    /// Forwards both ways.
    Pass,
    /// Forwards, but holds each chunk from the server back this long.
    Slow(Duration),
    /// Forwards, but holds each chunk from the client back this long, so
    /// the server runs each request that much later.
    SlowRequests(Duration),
    /// Accepts and closes at once.
    Drop,
    /// Forwards the request, then only this many bytes of the answer, then
    /// closes both sides: a response cut in the middle.
    Cut(usize),
    /// Accepts and reads, never answers.
    BlackHole,
}

/// A TCP proxy to `upstream` whose behaviour can be changed at any time.
/// Changing the mode closes every connection it holds, so pooled client
/// connections see the new behaviour at once.
pub struct Proxy {
    /// Its port on 127.0.0.1.
    pub port: u16,
    mode: Arc<Mutex<ProxyMode>>,
    conns: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
    accepted: Arc<std::sync::atomic::AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Starts forwarding to `upstream` (`host:port`) in mode `Pass`.
    pub async fn start(upstream: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let mode = Arc::new(Mutex::new(ProxyMode::Pass));
        let conns: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let upstream = upstream.to_string();
        let (m, c, a) = (mode.clone(), conns.clone(), accepted.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                a.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let mode = *m.lock().unwrap();
                let upstream = upstream.clone();
                let h = tokio::spawn(proxy_conn(client, upstream, mode));
                let mut list = c.lock().unwrap();
                list.retain(|h| !h.is_finished());
                list.push(h.abort_handle());
            }
        });
        Proxy {
            port,
            mode,
            conns,
            accepted,
            task,
        }
    }

    /// Changes the mode and closes every open connection.
    pub fn set(&self, mode: ProxyMode) {
        *self.mode.lock().unwrap() = mode;
        for h in self.conns.lock().unwrap().drain(..) {
            h.abort();
        }
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
        for h in self.conns.lock().unwrap().drain(..) {
            h.abort();
        }
    }
}

async fn proxy_conn(mut client: TcpStream, upstream: String, mode: ProxyMode) {
    match mode {
        ProxyMode::Drop => {}
        ProxyMode::BlackHole => {
            let mut buf = [0u8; 4096];
            while let Ok(n) = client.read(&mut buf).await {
                if n == 0 {
                    break;
                }
            }
        }
        ProxyMode::Pass | ProxyMode::Slow(_) | ProxyMode::SlowRequests(_) | ProxyMode::Cut(_) => {
            let Ok(server) = TcpStream::connect(&upstream).await else {
                return;
            };
            let (mut cr, mut cw) = client.into_split();
            let (mut sr, mut sw) = server.into_split();
            let up = async {
                if let ProxyMode::SlowRequests(d) = mode {
                    let mut buf = vec![0u8; 16 * 1024];
                    while let Ok(n @ 1..) = cr.read(&mut buf).await {
                        tokio::time::sleep(d).await;
                        if sw.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                } else {
                    let _ = tokio::io::copy(&mut cr, &mut sw).await;
                }
                let _ = sw.shutdown().await;
            };
            let down = async {
                let mut left = match mode {
                    ProxyMode::Cut(n) => n,
                    _ => usize::MAX,
                };
                let mut buf = vec![0u8; 16 * 1024];
                loop {
                    let n = match sr.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    if let ProxyMode::Slow(d) = mode {
                        tokio::time::sleep(d).await;
                    }
                    let n = n.min(left);
                    if cw.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                    left -= n;
                    if left == 0 {
                        break;
                    }
                }
                let _ = cw.shutdown().await;
            };
            // The connection lives as long as the server-to-client half: a
            // client that stops sending still gets its answer, and a cut
            // ends everything at once.
            tokio::select! {
                _ = async { up.await; std::future::pending::<()>().await } => {}
                _ = down => {}
            }
        }
    }
}

/// Reads a whole file as text, empty when missing.
pub fn read_text(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// A distinctive secret for a test: it must never show up anywhere.
pub fn secret(tag: &str) -> String {
    format!(
        "S3cr3t-{tag}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("time")
            .subsec_nanos()
    )
}

/// A RabbitMQ user made through the management API, deleted on drop.
pub struct RabbitUser {
    /// The user name.
    pub name: String,
}

impl RabbitUser {
    /// Creates (or replaces) the user with these tags (comma-separated).
    pub async fn create(name: &str, password: &str, tags: &str) -> RabbitUser {
        let path = format!("/users/{}", crate::support::pct(name));
        let (status, body) = crate::support::rabbit_api(
            reqwest::Method::PUT,
            &path,
            Some(serde_json::json!({"password": password, "tags": tags})),
        )
        .await;
        assert!((200..300).contains(&status), "create user: {status} {body}");
        RabbitUser {
            name: name.to_string(),
        }
    }

    /// Sets the user's permissions on `vhost` (three regexes).
    pub async fn permit(&self, vhost: &str, configure: &str, write: &str, read: &str) {
        let (status, body) = crate::support::rabbit_api(
            reqwest::Method::PUT,
            &format!(
                "/permissions/{}/{}",
                crate::support::pct(vhost),
                crate::support::pct(&self.name)
            ),
            Some(serde_json::json!({"configure": configure, "write": write, "read": read})),
        )
        .await;
        assert!((200..300).contains(&status), "permissions: {status} {body}");
    }
}

impl Drop for RabbitUser {
    fn drop(&mut self) {
        crate::support::delete_as_guest(format!(
            "{}/users/{}",
            crate::support::RABBIT_API,
            crate::support::pct(&self.name)
        ));
    }
}
