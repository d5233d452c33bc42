//! Helpers for the issue-14 reliability tests (`faults_*`, `hostile_input`,
//! `least_privilege`, `secrets`, `load`): the exporter binary as a child
//! process observed from outside (`/metrics`, gRPC, `/proc/<pid>`), a
//! private rabbitmq-server that can be stopped, killed and restarted (optionally
//! with TLS listeners), a raw HTTP server that misbehaves on purpose, and a
//! TCP proxy that can be made slow, drop connections or cut responses.
//!
//! Test files include it next to `support`, whose `RedisServer` can be
//! killed, frozen and restarted:
//! `mod support; mod reliability_support;`.
#![allow(dead_code)]

use std::future::Future;
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
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
    /// The HTTP listener's port.
    pub http_port: u16,
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
        let e = Exporter::launch(body, args, env);
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

    /// Like [`Exporter::start`] without waiting for anything: for listeners
    /// a plain-HTTP `/healthz` cannot reach (HTTPS, client certificates).
    pub fn launch(body: &str, args: &[&str], env: &[(&str, &str)]) -> Exporter {
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
        Exporter {
            pid: child.id(),
            child: Some(child),
            http_port: http,
            base: format!("http://127.0.0.1:{http}"),
            grpc: SocketAddr::from(([127, 0, 0, 1], grpc_port)),
            dir,
            config,
            stdout,
            stderr,
        }
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

/// A port for a server that must keep it across restarts: free now, and
/// below the kernel's ephemeral range (`ip_local_port_range`, 32768–60999
/// here), so no outgoing connection and no `bind(0)` of another test on the
/// machine can take it while the server is down. Ports from [`free_port`]
/// are ephemeral ones: another process grabbed one within seconds when a
/// private RabbitMQ released it for a restart.
pub fn stable_free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let seed = std::process::id().wrapping_mul(2_654_435_761)
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
    for _ in 0..1000 {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = 20_000 + (seed.wrapping_add(n.wrapping_mul(7919)) % 12_000) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in 20000..32000");
}

/// TLS for a [`PrivateRabbit`]: an AMQPS listener and an HTTPS management
/// listener with this server certificate, both requiring a client
/// certificate signed by `ca` (`verify_peer`, `fail_if_no_peer_cert`).
#[derive(Debug, Clone)]
pub struct RabbitTls {
    /// The CA file: trusted for client certificates.
    pub ca: PathBuf,
    /// The server certificate (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
}

/// A second, private `rabbitmq-server` (the one on 5672/15672 is shared
/// by every test and is never restarted): its own node name, AMQP,
/// distribution and management ports, Mnesia and log directories, config
/// file, enabled-plugins file and Erlang cookie, all under a temp dir.
/// It can be stopped and started (`rabbitmqctl stop_app`/`start_app`),
/// killed and restarted with its data.
///
/// A start takes 8–11 s on the project's 2-core machine (Erlang boot plus
/// the management plugin; 15–33 s when the machine is at load 13),
/// `stop_app` 2–6 s and `start_app` ~2 s (much of both is the CLI's own
/// Erlang VM starting): keep node starts few. Killed on
/// drop; a watchdog shell also kills it if the test process dies without
/// dropping it (a SIGKILLed test run).
pub struct PrivateRabbit {
    /// The Erlang node name, `qe-<pid>-<n>@localhost`.
    pub node: String,
    /// Plain AMQP, on 127.0.0.1.
    pub amqp_port: u16,
    /// The management API over HTTP, on 127.0.0.1.
    pub mgmt_port: u16,
    /// Erlang distribution (rabbitmqctl talks to the node through it).
    pub dist_port: u16,
    /// AMQPS, when started with TLS.
    pub amqps_port: Option<u16>,
    /// The management API over HTTPS, when started with TLS.
    pub mgmt_tls_port: Option<u16>,
    /// How long each start took, until the management API and AMQP answered.
    pub starts: Vec<Duration>,
    dir: tempfile::TempDir,
    server: Option<Child>,
    watchdog: Option<Child>,
}

/// Where RabbitMQ's own scripts are: Debian's `/usr/sbin` wrappers switch to
/// the `rabbitmq` user when run as root (and then could not read the temp
/// dir), so the real scripts in `/usr/lib/rabbitmq/bin` are used when they
/// exist; any other install has them on `PATH`.
fn rabbit_script(name: &str) -> PathBuf {
    let debian = Path::new("/usr/lib/rabbitmq/bin").join(name);
    if debian.exists() {
        debian
    } else {
        PathBuf::from(name)
    }
}

impl PrivateRabbit {
    /// Starts a node with the management plugin (and TLS listeners if
    /// `tls`), and waits until its management API and AMQP answer.
    pub async fn start(tls: Option<RabbitTls>) -> PrivateRabbit {
        use std::sync::atomic::{AtomicU32, Ordering};
        static COUNT: AtomicU32 = AtomicU32::new(0);
        let dir = tempfile::tempdir().expect("tempdir");
        let node = format!(
            "qe-{}-{}@localhost",
            std::process::id(),
            COUNT.fetch_add(1, Ordering::Relaxed)
        );
        let (amqp_port, mgmt_port, dist_port) =
            (stable_free_port(), stable_free_port(), stable_free_port());
        let mut conf =
            format!("management.tcp.port = {mgmt_port}\nmanagement.tcp.ip = 127.0.0.1\n");
        let (mut amqps_port, mut mgmt_tls_port) = (None, None);
        if let Some(t) = &tls {
            let (a, m) = (stable_free_port(), stable_free_port());
            let (ca, cert, key) = (t.ca.display(), t.cert.display(), t.key.display());
            conf.push_str(&format!(
                "listeners.ssl.local = 127.0.0.1:{a}\n\
                 ssl_options.cacertfile = {ca}\nssl_options.certfile = {cert}\n\
                 ssl_options.keyfile = {key}\nssl_options.verify = verify_peer\n\
                 ssl_options.fail_if_no_peer_cert = true\n\
                 management.ssl.port = {m}\nmanagement.ssl.ip = 127.0.0.1\n\
                 management.ssl.cacertfile = {ca}\nmanagement.ssl.certfile = {cert}\n\
                 management.ssl.keyfile = {key}\nmanagement.ssl.verify = verify_peer\n\
                 management.ssl.fail_if_no_peer_cert = true\n"
            ));
            (amqps_port, mgmt_tls_port) = (Some(a), Some(m));
        }
        let d = dir.path();
        std::fs::create_dir_all(d.join("mnesia")).expect("mnesia dir");
        std::fs::create_dir_all(d.join("log")).expect("log dir");
        std::fs::write(d.join("rabbitmq.conf"), conf).expect("rabbitmq.conf");
        std::fs::write(d.join("enabled_plugins"), "[rabbitmq_management].\n")
            .expect("enabled_plugins");
        // Empty: /etc/rabbitmq/rabbitmq-env.conf names the shared node.
        std::fs::write(d.join("rabbitmq-env.conf"), "").expect("env file");
        let mut r = PrivateRabbit {
            node,
            amqp_port,
            mgmt_port,
            dist_port,
            amqps_port,
            mgmt_tls_port,
            starts: Vec::new(),
            dir,
            server: None,
            watchdog: None,
        };
        r.watchdog = Some(r.spawn_watchdog());
        r.boot().await;
        r
    }

    /// The environment every RabbitMQ script gets for this node.
    fn env(&self) -> Vec<(&'static str, String)> {
        let d = self.dir.path();
        let p = |name: &str| d.join(name).display().to_string();
        vec![
            // The Erlang cookie is created in (and read from) $HOME.
            ("HOME", p("")),
            ("RABBITMQ_NODENAME", self.node.clone()),
            ("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1".into()),
            ("RABBITMQ_NODE_PORT", self.amqp_port.to_string()),
            ("RABBITMQ_DIST_PORT", self.dist_port.to_string()),
            ("RABBITMQ_MNESIA_BASE", p("mnesia")),
            ("RABBITMQ_LOG_BASE", p("log")),
            ("RABBITMQ_CONFIG_FILE", p("rabbitmq.conf")),
            ("RABBITMQ_ADVANCED_CONFIG_FILE", p("advanced.config")),
            ("RABBITMQ_ENABLED_PLUGINS_FILE", p("enabled_plugins")),
            ("RABBITMQ_CONF_ENV_FILE", p("rabbitmq-env.conf")),
            (
                "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS",
                "-kernel inet_dist_use_interface {127,0,0,1}".into(),
            ),
        ]
    }

    /// Kills the node (and removes its files) once this test process is
    /// gone, however it ended.
    fn spawn_watchdog(&self) -> Child {
        let script = format!(
            "while kill -0 {test} 2>/dev/null; do sleep 1; done; \
             kill -9 -$(cat '{group}' 2>/dev/null) 2>/dev/null; rm -rf '{dir}'",
            test = std::process::id(),
            group = self.dir.path().join("server.pgid").display(),
            dir = self.dir.path().display(),
        );
        Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("sh")
    }

    /// Starts the server process and waits until it answers.
    async fn boot(&mut self) {
        let started = Instant::now();
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("server.out"))
            .expect("server.out");
        let err = out.try_clone().expect("server.out");
        let child = Command::new(rabbit_script("rabbitmq-server"))
            // Its own process group, so that one signal reaches the script,
            // the Erlang VM and its helpers.
            .process_group(0)
            .envs(self.env())
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("rabbitmq-server must be installed (scripts/setup-services)");
        std::fs::write(self.dir.path().join("server.pgid"), child.id().to_string())
            .expect("server.pgid");
        self.server = Some(child);
        self.wait_ready(Duration::from_secs(120)).await;
        self.starts.push(started.elapsed());
    }

    /// Waits until the management API answers and AMQP accepts connections.
    async fn wait_ready(&mut self, limit: Duration) {
        let deadline = Instant::now() + limit;
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()
            .expect("client");
        loop {
            let mgmt = client
                .get(format!("{}/api/overview", self.mgmt_url()))
                .basic_auth("guest", Some("guest"))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if mgmt
                && TcpStream::connect(("127.0.0.1", self.amqp_port))
                    .await
                    .is_ok()
            {
                return;
            }
            if let Some(c) = &mut self.server
                && let Ok(Some(status)) = c.try_wait()
            {
                panic!(
                    "rabbitmq-server {} exited ({status}) before answering:\n{}",
                    self.node,
                    self.logs()
                );
            }
            assert!(
                Instant::now() < deadline,
                "rabbitmq-server {} did not answer within {limit:?}:\n{}",
                self.node,
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The server's console output and the end of its log, for failures.
    pub fn logs(&self) -> String {
        let out = read_text(&self.dir.path().join("server.out"));
        let log = read_text(
            &self
                .dir
                .path()
                .join("log")
                .join(format!("{}.log", self.node)),
        );
        let tail: Vec<&str> = log.lines().rev().take(40).collect();
        format!(
            "--- console\n{out}\n--- log (last 40 lines)\n{}",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        )
    }

    /// `http://127.0.0.1:{mgmt_port}`.
    pub fn mgmt_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.mgmt_port)
    }

    /// `amqp://guest:guest@127.0.0.1:{amqp_port}/%2F` (the default vhost).
    pub fn amqp_url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2F", self.amqp_port)
    }

    /// An AMQP connection to the default vhost, for writing test data.
    pub async fn connect(&self) -> lapin::Connection {
        lapin::Connection::connect(&self.amqp_url(), lapin::ConnectionProperties::default())
            .await
            .unwrap_or_else(|e| panic!("AMQP connection to {}: {e}", self.node))
    }

    /// Messages ready in `queue`, by a passive declare of the test's own: the
    /// ground truth to compare the exporter with.
    pub async fn ready(&self, queue: &str) -> u32 {
        let conn = self.connect().await;
        let ch = conn.create_channel().await.expect("channel");
        let q = ch
            .queue_declare(
                queue.into(),
                lapin::options::QueueDeclareOptions {
                    passive: true,
                    ..Default::default()
                },
                lapin::types::FieldTable::default(),
            )
            .await
            .unwrap_or_else(|e| panic!("passive declare {queue}: {e}"));
        let _ = conn.close(200, "done".into()).await;
        q.message_count()
    }

    /// Runs `rabbitmqctl -n <node> <args>`; panics unless it succeeds.
    pub async fn ctl(&self, args: &[&str]) -> String {
        let out = tokio::process::Command::new(rabbit_script("rabbitmqctl"))
            .envs(self.env())
            .arg("-n")
            .arg(&self.node)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .await
            .expect("rabbitmqctl");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success(),
            "rabbitmqctl {args:?} on {}: {text}\n{}",
            self.node,
            self.logs()
        );
        text
    }

    /// `rabbitmqctl stop_app`: the broker and its management API stop (AMQP
    /// connections are closed by the server), the Erlang node keeps running.
    pub async fn stop_app(&self) {
        self.ctl(&["stop_app"]).await;
    }

    /// `rabbitmqctl start_app`, then waits until it answers again.
    pub async fn start_app(&mut self) {
        self.ctl(&["start_app"]).await;
        self.wait_ready(Duration::from_secs(60)).await;
    }

    /// SIGKILL to the server's process group (the start script, the Erlang
    /// VM and its helpers): the broker dies at once, as in a crash or an
    /// OOM kill; clients see their connections reset, with no AMQP close.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.server.take() {
            // The shell's own `kill` takes a process group (no procps needed).
            let _ = Command::new("sh")
                .args(["-c", &format!("kill -9 -{}", c.id())])
                .status();
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts the node again after [`PrivateRabbit::kill`], with the same
    /// name, ports and data (durable queues, persistent messages).
    pub async fn restart(&mut self) {
        self.kill();
        self.boot().await;
    }
}

impl Drop for PrivateRabbit {
    fn drop(&mut self) {
        self.kill();
        if let Some(mut w) = self.watchdog.take() {
            let _ = w.kill();
            let _ = w.wait();
        }
    }
}
