//! Redis Sentinel, against a real master, a replica and a sentinel
//! (`redis-server <conf> --sentinel`) each on a free port: the exporter finds
//! the master through the sentinels (skipping one that is down), follows a
//! `SENTINEL FAILOVER` (proved by killing the old master afterwards: the
//! source stays up and right), and follows a real failure (the master
//! killed): down while no master exists, then up on the promoted replica
//! with the right depths. No depth shown is ever one that was not true.
mod scaler_common;
mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::{KillOnDrop, RedisServer, Scrape, TestApp, free_port};

const MASTER: &str = "mymaster";

/// A sentinel process on a free port watching `MASTER`, killed on drop.
struct Sentinel {
    /// Its port.
    port: u16,
    /// The process.
    _child: KillOnDrop,
    /// Holds its config file (a sentinel rewrites it).
    _dir: tempfile::TempDir,
}

impl Sentinel {
    /// Starts a sentinel monitoring the master on `master_port` (quorum 1,
    /// down after 1 s).
    fn start(master_port: u16) -> Sentinel {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = free_port();
        let conf = dir.path().join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {dir}\n\
                 sentinel monitor {MASTER} 127.0.0.1 {master_port} 1\n\
                 sentinel down-after-milliseconds {MASTER} 1000\n\
                 sentinel failover-timeout {MASTER} 5000\n\
                 sentinel parallel-syncs {MASTER} 1\n",
                dir = dir.path().display()
            ),
        )
        .expect("sentinel.conf");
        let child = Command::new("redis-server")
            .arg(&conf)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server --sentinel");
        let s = Sentinel {
            port,
            _child: KillOnDrop(child),
            _dir: dir,
        };
        wait("the sentinel answers", Duration::from_secs(10), || {
            s.master_port().is_some()
        });
        s
    }

    fn conn(&self) -> redis::RedisResult<redis::Connection> {
        redis::Client::open(format!("redis://127.0.0.1:{}", self.port))?.get_connection()
    }

    /// The master's port as this sentinel names it.
    fn master_port(&self) -> Option<u16> {
        let reply: Option<(String, u16)> = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(MASTER)
            .query(&mut self.conn().ok()?)
            .ok()?;
        reply.map(|(_, p)| p)
    }

    /// Whether the sentinel sees the replica on `port` as healthy.
    fn sees_replica(&self, port: u16) -> bool {
        let Ok(mut c) = self.conn() else { return false };
        let replicas: Vec<std::collections::HashMap<String, String>> = redis::cmd("SENTINEL")
            .arg("REPLICAS")
            .arg(MASTER)
            .query(&mut c)
            .unwrap_or_default();
        replicas.iter().any(|r| {
            r.get("port").map(String::as_str) == Some(port.to_string().as_str())
                && r.get("flags")
                    .is_some_and(|f| !f.contains("down") && !f.contains("disconnected"))
                && r.get("master-link-status").map(String::as_str) == Some("ok")
        })
    }
}

/// Spins (blocking) until `check` holds, checking every 100 ms; panics
/// after `timeout`.
fn wait(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `role:master` / `role:slave` with a link up, from INFO replication.
fn role(server: &RedisServer) -> String {
    let Ok(mut c) = redis::Client::open(server.url.as_str()).and_then(|c| c.get_connection())
    else {
        return "down".into();
    };
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut c)
        .unwrap_or_default();
    if info.contains("role:master") {
        "master".into()
    } else if info.contains("master_link_status:up") {
        "replica".into()
    } else {
        "syncing".into()
    }
}

fn rpush(server: &RedisServer, key: &str, n: usize) {
    let items: Vec<String> = (0..n).map(|i| format!("job-{i}")).collect();
    let _: () = redis::cmd("RPUSH")
        .arg(key)
        .arg(items)
        .query(&mut server.conn())
        .expect("RPUSH");
}

fn depth(s: &Scrape) -> Option<f64> {
    s.value("queue_depth", &[("source", "ha"), ("queue", "work")])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_master_is_found_through_sentinels_and_followed_across_failovers() {
    // Each server in its own directory: a replica writes the RDB of a full
    // sync to disk, and a server started later in the same directory would
    // load it.
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let dir = |i: usize| dirs[i].path().to_str().unwrap().to_string();
    let mut first = RedisServer::start_with(&["--dir", &dir(0)]);
    let first_port = first.port.to_string();
    let mut second =
        RedisServer::start_with(&["--dir", &dir(1), "--replicaof", "127.0.0.1", &first_port]);
    wait("replication", Duration::from_secs(20), || {
        role(&second) == "replica"
    });
    let sentinel = Sentinel::start(first.port);
    wait(
        "the sentinel sees the replica",
        Duration::from_secs(30),
        || sentinel.sees_replica(second.port),
    );
    rpush(&first, "work", 4);

    // The first sentinel listed is down: the source asks the next one.
    let dead_sentinel = free_port();
    let yaml = format!(
        r#"
        listen: {{ grpc: 127.0.0.1:0 }}
        sources:
          - name: ha
            type: redis
            url: redis+sentinel://127.0.0.1:{dead_sentinel},127.0.0.1:{port}/{MASTER}
            poll_interval: 200ms
            timeout: 1s
            queues:
              - key: work
        "#,
        port = sentinel.port,
    );
    let app = TestApp::start(&yaml).await;
    app.until("depth 4.0", Duration::from_secs(30), |s| {
        depth(s) == Some(4.0)
    })
    .await;
    let grpc = scaler_common::client(&app).await;
    scaler_common::wait_value(&grpc, &[("queue", "work")], 4.0).await;

    // Every scrape from here on shows a true depth or none (down).
    let watcher = app.watch_scrapes(Duration::from_millis(25));

    // 1. A planned failover: `second` becomes the master.
    let _: () = redis::cmd("SENTINEL")
        .arg("FAILOVER")
        .arg(MASTER)
        .query(&mut sentinel.conn().unwrap())
        .expect("SENTINEL FAILOVER");
    tokio::task::block_in_place(|| {
        wait("the sentinel names second", Duration::from_secs(30), || {
            sentinel.master_port() == Some(second.port) && role(&second) == "master"
        })
    });
    rpush(&second, "work", 1);
    app.until("depth 5.0", Duration::from_secs(30), |s| {
        depth(s) == Some(5.0)
    })
    .await;
    // The old master is now a replica; with it dead the source must still
    // be up and right, so it reads the new master, not the old address.
    first.stop();
    let after_kill = Instant::now();
    rpush(&second, "work", 1);
    app.until("depth 6.0", Duration::from_secs(30), |s| {
        depth(s) == Some(6.0)
    })
    .await;
    // Still up and right 5 polls later: it did not just outlive the dead
    // master's connection for a poll or two.
    let s = app.wait_polls("ha", 5, Duration::from_secs(30)).await;
    assert_eq!(
        s.source_up("ha"),
        Some(1.0),
        "down after the old master died"
    );
    assert_eq!(depth(&s), Some(6.0));
    eprintln!(
        "planned failover followed; 6 seen {:?} after the old master died",
        after_kill.elapsed()
    );

    // 2. A real failure: bring `first` back as a replica of `second`, then
    // kill `second`; the sentinel promotes `first`.
    let phase_2 = Instant::now();
    first.restart();
    let second_port = second.port.to_string();
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(&second_port)
        .query(&mut first.conn())
        .expect("REPLICAOF");
    tokio::task::block_in_place(|| {
        wait("first replicates second", Duration::from_secs(30), || {
            role(&first) == "replica" && sentinel.sees_replica(first.port)
        })
    });
    second.stop();
    let killed = Instant::now();
    tokio::task::block_in_place(|| {
        wait(
            "the sentinel promotes first",
            Duration::from_secs(60),
            || sentinel.master_port() == Some(first.port) && role(&first) == "master",
        )
    });
    let promoted = killed.elapsed();
    rpush(&first, "work", 1);
    let s = app
        .until("depth 7", Duration::from_secs(30), |s| {
            depth(s) == Some(7.0)
        })
        .await;
    assert_eq!(s.source_up("ha"), Some(1.0));
    scaler_common::wait_value(&grpc, &[("queue", "work")], 7.0).await;
    eprintln!(
        "master killed: promoted after {promoted:?}, 7 seen {:?} after the kill",
        killed.elapsed()
    );

    let seen = watcher.finish().await;
    assert!(seen.len() >= 20, "only {} scrapes", seen.len());
    let mut down = 0;
    let mut last = 4.0;
    for (at, s) in &seen {
        match (s.source_up("ha"), depth(s)) {
            (Some(0.0), None) => {
                // The old master's death must not matter: the source reads
                // the new one.
                assert!(
                    *at < after_kill || *at > phase_2,
                    "down {:?} after the old master died",
                    at.duration_since(after_kill)
                );
                down += 1
            }
            (Some(1.0), Some(d)) => {
                // Depths only grow in this test: a smaller one would be a
                // stale or wrong server's answer.
                assert!(
                    [4.0, 5.0, 6.0, 7.0].contains(&d) && d >= last,
                    "depth {d} after {last}"
                );
                last = d;
            }
            other => panic!("inconsistent scrape {other:?}:\n{s}"),
        }
    }
    // The killed master was seen as down (a connect or timeout error) at
    // least until the sentinel promoted the replica.
    let s = app.scrape().await;
    assert!(
        s.errors("ha", "connect").unwrap() + s.errors("ha", "timeout").unwrap() > 0.0,
        "no error counted for the dead master"
    );
    eprintln!("{} scrapes, {down} while down", seen.len());
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_master_name_or_no_reachable_sentinel_is_a_down_source() {
    let master = RedisServer::start();
    let sentinel = Sentinel::start(master.port);
    rpush(&master, "work", 2);
    let dead = free_port();
    let yaml = format!(
        r#"
        sources:
          - name: unknown
            type: redis
            url: redis+sentinel://127.0.0.1:{port}/no-such-master
            poll_interval: 200ms
            timeout: 1s
            queues:
              - key: work
          - name: unreachable
            type: redis
            url: redis+sentinel://127.0.0.1:{dead}/{MASTER}
            poll_interval: 200ms
            timeout: 1s
            queues:
              - key: work
          - name: ha
            type: redis
            url: redis+sentinel://127.0.0.1:{port}/{MASTER}
            poll_interval: 200ms
            queues:
              - key: work
        "#,
        port = sentinel.port,
    );
    let app = TestApp::start(&yaml).await;
    let s = app
        .scrape_until("errors counted", Duration::from_secs(20), |s| {
            s.errors("unknown", "backend").is_some_and(|e| e > 0.0)
                && s.errors("unreachable", "connect").is_some_and(|e| e > 0.0)
                && depth(s) == Some(2.0)
        })
        .await;
    assert_eq!(s.source_up("unknown"), Some(0.0));
    assert_eq!(s.source_up("unreachable"), Some(0.0));
    assert!(!s.text().contains("source=\"unknown\",queue="));
    assert!(!s.text().contains("source=\"unreachable\",queue="));
    app.stop().await;
}
