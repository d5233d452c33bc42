//! Redis Cluster, against a real 3-primary cluster each test starts
//! (`redis-server --cluster-enabled yes` ×3 + `redis-cli --cluster create`):
//!
//! - keys spread over every node (lists, timestamp zsets, a pattern, hash
//!   tagged and untagged keys) read exactly over `/metrics` and gRPC, with
//!   `redis+cluster://` and with `cluster: true`;
//! - a slot migrated under the exporter, by hand, step by step: values only
//!   reachable behind `ASK` (key already on the importing node) and then
//!   behind `MOVED` (stale slot map) are read right, and the source never
//!   goes down;
//! - `redis-cli --cluster reshard` while polling and rediscovering: every
//!   scrape shows every key with its exact depth;
//! - a key that moves between nodes while discovery scans them (so no
//!   node's SCAN returns it) stays tracked and right;
//! - one node killed: the source is down (no zeros), back: up and right;
//! - the ACL `-@all +@read +@connection +cluster|slots ~*` is enough, and
//!   without `+cluster|slots` the source says `auth`.
//! - topology changes, each seen within one `discovery_interval`: a cluster
//!   formed after the exporter started (before: down for `cluster_slots`,
//!   KEDA `UNAVAILABLE`, never 0), a primary added with slots migrated to
//!   it, a failover to a replica.
mod reliability_support;
mod scaler_common;
mod support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use reliability_support::{Proxy, ProxyMode};
use support::{RedisServer, Scrape, TestApp, polls};

/// A 3-primary cluster on free ports, killed on drop.
struct Cluster {
    /// The nodes, in the order given to `redis-cli --cluster create`.
    nodes: Vec<RedisServer>,
    /// Holds each node's `nodes.conf` and data directory.
    _dir: tempfile::TempDir,
}

impl Cluster {
    /// Starts three nodes (with an append-only file, so a killed node comes
    /// back with its keys) and joins them with `redis-cli --cluster create`.
    fn start() -> Cluster {
        let cluster = Cluster::unformed(3);
        cluster.create(0);
        cluster
    }

    /// Starts `n` cluster-enabled nodes that know nothing of each other:
    /// no slot is assigned, so `CLUSTER SLOTS` names no primary.
    fn unformed(n: usize) -> Cluster {
        let dir = tempfile::tempdir().expect("tempdir");
        let nodes = (0..n).map(|i| spawn_node(dir.path(), i)).collect();
        Cluster { nodes, _dir: dir }
    }

    /// Joins every node with `redis-cli --cluster create`, with `replicas`
    /// replicas per primary, and waits until the cluster is ok.
    fn create(&self, replicas: usize) {
        let addrs: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .expect("redis-cli");
        assert!(
            out.status.success(),
            "redis-cli --cluster create: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        self.wait_ok();
    }

    /// Starts one more node and adds it as a primary without slots
    /// (`redis-cli --cluster add-node`); returns its index.
    fn add_primary(&mut self) -> usize {
        let i = self.nodes.len();
        let node = spawn_node(self._dir.path(), i);
        let out = Command::new("redis-cli")
            .args(["--cluster", "add-node"])
            .arg(format!("127.0.0.1:{}", node.port))
            .arg(format!("127.0.0.1:{}", self.nodes[0].port))
            .output()
            .expect("redis-cli");
        assert!(
            out.status.success(),
            "redis-cli --cluster add-node: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        self.nodes.push(node);
        // Until every node knows it and they agree (reshard refuses to
        // start before).
        let known = format!("cluster_known_nodes:{}", self.nodes.len());
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let all_know = (0..self.nodes.len()).all(|n| {
                redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query::<String>(&mut self.node(n))
                    .is_ok_and(|info| info.contains(&known) && info.contains("cluster_state:ok"))
            });
            let agree = all_know
                && Command::new("redis-cli")
                    .args(["--cluster", "check"])
                    .arg(format!("127.0.0.1:{}", self.nodes[0].port))
                    .output()
                    .expect("redis-cli")
                    .status
                    .success();
            if agree {
                break;
            }
            assert!(Instant::now() < deadline, "the nodes never agreed");
            std::thread::sleep(Duration::from_millis(200));
        }
        i
    }

    /// Moves `slots` slots from every other primary to node `to`, with
    /// their keys (`redis-cli --cluster reshard --cluster-from all`).
    fn reshard_to(&self, to: usize, slots: usize) {
        let out = Command::new("redis-cli")
            .args(["--cluster", "reshard"])
            .arg(format!("127.0.0.1:{}", self.nodes[0].port))
            .args(["--cluster-from", "all", "--cluster-to", &self.id(to)])
            .args(["--cluster-slots", &slots.to_string(), "--cluster-yes"])
            .output()
            .expect("redis-cli");
        assert!(
            out.status.success(),
            "redis-cli --cluster reshard: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Waits until every node says `cluster_state:ok` and sees 3 primaries.
    fn wait_ok(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let ok = self.nodes.iter().all(|n| {
                let Ok(mut c) =
                    redis::Client::open(n.url.as_str()).and_then(|c| c.get_connection())
                else {
                    return false;
                };
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query(&mut c)
                    .unwrap_or_default();
                let slots: Vec<redis::Value> = redis::cmd("CLUSTER")
                    .arg("SLOTS")
                    .query(&mut c)
                    .unwrap_or_default();
                info.contains("cluster_state:ok") && slots.len() >= 3
            });
            if ok {
                return;
            }
            assert!(Instant::now() < deadline, "cluster never became ok");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `redis+cluster://` URL through node `i`.
    fn url(&self, i: usize) -> String {
        format!("redis+cluster://127.0.0.1:{}", self.nodes[i].port)
    }

    /// Runs one command on node `i` directly.
    fn run(&self, i: usize, args: &[&str]) {
        let mut cmd = redis::cmd(args[0]);
        for x in &args[1..] {
            cmd.arg(*x);
        }
        let _: redis::Value = cmd.query(&mut self.node(i)).expect("cluster command");
    }

    /// Starts moving `slot` from node `src` to node `dst`: `dst` imports,
    /// `src` migrates (and answers ASK for keys already moved).
    fn begin_migration(&self, slot: u16, src: usize, dst: usize) {
        let slot = slot.to_string();
        self.run(
            dst,
            &["CLUSTER", "SETSLOT", &slot, "IMPORTING", &self.id(src)],
        );
        self.run(
            src,
            &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &self.id(dst)],
        );
    }

    /// Moves one key of a migrating slot from node `src` to node `dst`.
    fn migrate_key(&self, src: usize, dst: usize, key: &str) {
        let port = self.nodes[dst].port.to_string();
        self.run(
            src,
            &["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS", key],
        );
    }

    /// A direct (not cluster-aware) connection to node `i`.
    fn node(&self, i: usize) -> redis::Connection {
        self.nodes[i].conn()
    }

    /// Node `i`'s cluster id.
    fn id(&self, i: usize) -> String {
        redis::cmd("CLUSTER")
            .arg("MYID")
            .query(&mut self.node(i))
            .expect("CLUSTER MYID")
    }

    /// A cluster-aware connection for writing test data.
    fn client(&self) -> redis::cluster::ClusterConnection {
        let urls: Vec<String> = self.nodes.iter().map(|n| n.url.clone()).collect();
        redis::cluster::ClusterClient::new(urls)
            .expect("cluster client")
            .get_connection()
            .expect("cluster connection")
    }

    /// The hash slot of `key`.
    fn slot(&self, key: &str) -> u16 {
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut self.node(0))
            .expect("CLUSTER KEYSLOT")
    }

    /// `(first slot, last slot, primary's port)` per range, as node `i` sees them.
    fn ranges(&self, i: usize) -> Vec<(u16, u16, u16)> {
        let int = |v: &redis::Value| match v {
            redis::Value::Int(i) => *i as u16,
            other => panic!("{other:?}"),
        };
        redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query::<Vec<redis::Value>>(&mut self.node(i))
            .expect("CLUSTER SLOTS")
            .into_iter()
            .map(|r| {
                let redis::Value::Array(items) = r else {
                    panic!("range {r:?}")
                };
                let redis::Value::Array(node) = &items[2] else {
                    panic!("node")
                };
                (int(&items[0]), int(&items[1]), int(&node[1]))
            })
            .collect()
    }

    /// Which node (index) serves `slot`, according to node 0.
    fn owner(&self, slot: u16) -> usize {
        let port = self
            .ranges(0)
            .into_iter()
            .find(|(s, e, _)| (*s..=*e).contains(&slot))
            .map(|(_, _, p)| p)
            .expect("slot served");
        self.nodes
            .iter()
            .position(|n| n.port == port)
            .expect("known node")
    }

    /// Keys held by node `i`.
    fn dbsize(&self, i: usize) -> u64 {
        redis::cmd("DBSIZE")
            .query(&mut self.node(i))
            .expect("DBSIZE")
    }
}

/// Node `i` of a cluster in `dir`: cluster-enabled, with an append-only
/// file fsynced on every write, so a node killed right after the test wrote
/// comes back with its keys.
fn spawn_node(dir: &Path, i: usize) -> RedisServer {
    let data = dir.join(format!("node-{i}"));
    std::fs::create_dir(&data).expect("node dir");
    let conf = dir.join(format!("nodes-{i}.conf"));
    RedisServer::start_with(&[
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        path(&conf),
        "--cluster-node-timeout",
        "1000",
        "--dir",
        path(&data),
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
    ])
}

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

/// Makes list `key` hold exactly `n` items (through the cluster client).
fn set_list(c: &mut redis::cluster::ClusterConnection, key: &str, n: usize) {
    let _: () = redis::cmd("DEL").arg(key).query(c).expect("DEL");
    let items: Vec<String> = (0..n).map(|i| format!("job-{i}")).collect();
    let _: () = redis::cmd("RPUSH")
        .arg(key)
        .arg(items)
        .query(c)
        .expect("RPUSH");
}

/// Runs `args` on node `i` behind `ASKING` (a key of an importing slot).
fn asking(cluster: &Cluster, i: usize, args: &[&str]) {
    let mut c = cluster.node(i);
    let mut p = redis::pipe();
    p.cmd("ASKING");
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    p.add_command(cmd);
    let _: () = p.query(&mut c).expect("ASKING + command");
}

/// `queue_depth{source, queue}`, read from the text: `prometheus-parse`
/// cuts label values at the first `}`, which hash-tagged keys contain.
fn depth(s: &Scrape, source: &str, queue: &str) -> Option<f64> {
    labelled(s, "queue_depth", source, queue)
}

/// The value of `name{source="…",queue="…"}` (keys here need no escaping).
fn labelled(s: &Scrape, name: &str, source: &str, queue: &str) -> Option<f64> {
    let prefix = format!("{name}{{source=\"{source}\",queue=\"{queue}\"}} ");
    s.text()
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
}

/// Every `(queue, depth)` of `source` in `want` is what the scrape shows.
fn all_exact(s: &Scrape, source: &str, want: &[(String, f64)]) -> bool {
    want.iter().all(|(k, d)| depth(s, source, k) == Some(*d))
}

/// The keys of `want` whose depth differs, for messages.
fn wrong(s: &Scrape, source: &str, want: &[(String, f64)]) -> Vec<String> {
    want.iter()
        .filter(|(k, d)| depth(s, source, k) != Some(*d))
        .map(|(k, d)| format!("{k}: want {d}, got {:?}", depth(s, source, k)))
        .collect()
}

fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_on_every_node_read_exactly_over_metrics_and_grpc_with_either_config_form() {
    let cluster = Cluster::start();
    let mut c = cluster.client();
    let mut want: Vec<(String, f64)> = Vec::new();
    for i in 0..40 {
        let key = format!("q:{i}");
        set_list(&mut c, &key, i % 7 + 1);
        want.push((key, (i % 7 + 1) as f64));
    }
    // Hash-tagged: one slot, one node.
    set_list(&mut c, "{grp}:a", 3);
    set_list(&mut c, "{grp}:b", 4);
    want.push(("{grp}:a".into(), 3.0));
    want.push(("{grp}:b".into(), 4.0));
    want.push(("missing:x".into(), 0.0));
    // Timestamp zsets: two due members, one scheduled.
    let t = now();
    for i in 0..6 {
        let key = format!("delayed:{i}");
        let _: () = redis::cmd("ZADD")
            .arg(&key)
            .arg(t - 30.0)
            .arg("a")
            .arg(t - 5.0)
            .arg("b")
            .arg(t + 3600.0)
            .arg("c")
            .query(&mut c)
            .expect("ZADD");
        want.push((key, 3.0));
    }
    // Sidekiq's layout, for the zero-config source `cl3`.
    let _: () = redis::cmd("SADD")
        .arg("queues")
        .arg("mail")
        .query(&mut c)
        .expect("SADD");
    set_list(&mut c, "queue:mail", 2);
    for i in 0..3 {
        assert!(cluster.dbsize(i) > 0, "node {i} holds no key");
    }
    let pattern_sum: usize = (0..40).map(|i| i % 7 + 1).sum();
    // Zero config sees every existing list and zset, on every node.
    let plain: Vec<(String, f64)> = want
        .iter()
        .filter(|(k, _)| k != "missing:x")
        .cloned()
        .collect();

    let yaml = format!(
        r#"
        listen: {{ grpc: 127.0.0.1:0 }}
        sources:
          - name: cl
            type: redis
            url: {url}
            poll_interval: 200ms
            queues:
              - key: "{{grp}}:a"
              - key: "{{grp}}:b"
              - key: "missing:x"
              - pattern: "q:*"
              - pattern: "delayed:*"
                score: timestamp
          - name: cl2
            type: redis
            url: redis://127.0.0.1:{port}
            cluster: true
            poll_interval: 200ms
            queues:
              - pattern: "{{grp}}:*"
          - name: cl3
            type: redis
            url: {url}
            poll_interval: 200ms
        "#,
        url = cluster.url(0),
        port = cluster.nodes[1].port,
    );
    let app = TestApp::start(&yaml).await;
    let s = app
        .until("every key exact", Duration::from_secs(30), |s| {
            all_exact(s, "cl", &want)
                && depth(s, "cl2", "{grp}:a") == Some(3.0)
                && depth(s, "cl2", "{grp}:b") == Some(4.0)
                && all_exact(s, "cl3", &plain)
        })
        .await;
    // Zero config: Sidekiq's queue, once, and the plain keys exactly.
    let mail = [
        ("source", "cl3"),
        ("queue", "mail"),
        ("preset", "sidekiq"),
        ("state", "waiting"),
    ];
    assert_eq!(s.value("queue_depth", &mail), Some(2.0), "{s}");
    assert_eq!(depth(&s, "cl3", "queue:mail"), None, "{s}");
    // Counted in the text: prometheus-parse cuts hash-tagged labels.
    let plain_series = s
        .text()
        .lines()
        .filter(|l| l.starts_with("queue_depth{source=\"cl3\",") && !l.contains("preset="))
        .count();
    assert_eq!(plain_series, plain.len(), "{s}");
    assert_eq!(s.source_up("cl"), Some(1.0));
    assert_eq!(s.source_up("cl2"), Some(1.0));
    assert_eq!(
        s.value("queue_exporter_tracked_keys", &[("source", "cl")]),
        Some(want.len() as f64)
    );
    for i in 0..6 {
        let q = format!("delayed:{i}");
        let l = [("source", "cl"), ("queue", q.as_str())];
        assert_eq!(s.value("queue_messages_ready", &l), Some(2.0), "{q}");
        assert_eq!(s.value("queue_messages_scheduled", &l), Some(1.0), "{q}");
        let age = s.value("queue_oldest_message_age_seconds", &l).unwrap();
        assert!((29.0..120.0).contains(&age), "{q} age {age}");
    }
    assert!(s.errors("cl", "backend") == Some(0.0) && s.errors("cl", "connect") == Some(0.0));

    // gRPC GetMetrics: the same numbers, summed over a glob.
    let grpc = scaler_common::client(&app).await;
    scaler_common::wait_value(
        &grpc,
        &[("queue", "q:*"), ("source", "cl")],
        pattern_sum as f64,
    )
    .await;
    // `{` opens an alternation in trigger globs; a class matches it literally.
    scaler_common::wait_value(&grpc, &[("queue", "[{]grp[}]:*"), ("source", "cl2")], 7.0).await;
    scaler_common::wait_value(&grpc, &[("queue", "{grp}:a"), ("source", "cl2")], 3.0).await;
    scaler_common::wait_value(&grpc, &[("queue", "delayed:3"), ("source", "cl")], 3.0).await;

    // A change on any node shows up.
    set_list(&mut c, "q:5", 11);
    set_list(&mut c, "q:17", 12);
    app.until("new depths", Duration::from_secs(30), |s| {
        depth(s, "cl", "q:5") == Some(11.0) && depth(s, "cl", "q:17") == Some(12.0)
    })
    .await;
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_migrated_by_hand_is_read_behind_ask_then_moved_and_the_source_stays_up() {
    let cluster = Cluster::start();
    let mut c = cluster.client();
    let (a, b) = ("mig:{m}:a", "mig:{m}:b");
    set_list(&mut c, a, 7);
    set_list(&mut c, b, 5);
    set_list(&mut c, "other", 2);
    let slot = cluster.slot(a);
    let src = cluster.owner(slot);
    let dst = (src + 1) % 3;
    let dst_id = cluster.id(dst);

    // A long discovery interval: the exporter's slot map is only re-read
    // because of a MOVED, never on a schedule.
    let yaml = format!(
        r#"
        sources:
          - name: cl
            type: redis
            url: {url}
            poll_interval: 100ms
            discovery_interval: 1h
            queues:
              - key: "{a}"
              - key: "{b}"
              - key: other
        "#,
        url = cluster.url(dst),
    );
    let app = TestApp::start(&yaml).await;
    let expect = |av: f64, bv: f64| {
        vec![
            (a.to_string(), av),
            (b.to_string(), bv),
            ("other".to_string(), 2.0),
        ]
    };
    app.until("initial depths", Duration::from_secs(30), |s| {
        all_exact(s, "cl", &expect(7.0, 5.0))
    })
    .await;

    // Every scrape from here on: up, no error, only real values.
    let watcher = app.watch_scrapes(Duration::from_millis(20));

    // Start migrating the slot and move `a` only: the source node now
    // answers ASK for it.
    cluster.begin_migration(slot, src, dst);
    cluster.migrate_key(src, dst, a);
    // A value only the importing node has, reachable only behind ASKING.
    asking(&cluster, dst, &["RPUSH", a, "new"]);
    app.until("a = 8 through ASK", Duration::from_secs(30), |s| {
        all_exact(s, "cl", &expect(8.0, 5.0))
    })
    .await;
    cluster.migrate_key(src, dst, b);
    asking(&cluster, dst, &["RPUSH", b, "new"]);
    app.until("b = 6 through ASK", Duration::from_secs(30), |s| {
        all_exact(s, "cl", &expect(8.0, 6.0))
    })
    .await;

    // Finish: the slot belongs to dst. The exporter's map still says src,
    // which now answers MOVED.
    for i in [dst, src, (dst + 1) % 3] {
        cluster.run(
            i,
            &["CLUSTER", "SETSLOT", &slot.to_string(), "NODE", &dst_id],
        );
    }
    let _: () = redis::cmd("RPUSH")
        .arg(a)
        .arg("newer")
        .query(&mut cluster.node(dst))
        .expect("RPUSH on the new owner");
    app.until("a = 9 through MOVED", Duration::from_secs(30), |s| {
        all_exact(s, "cl", &expect(9.0, 6.0))
    })
    .await;
    // Watched over a few whole polls more.
    app.wait_polls("cl", 4, Duration::from_secs(30)).await;
    let seen = watcher.finish().await;
    assert!(seen.len() >= 3, "only {} scrapes", seen.len());
    for (_, s) in &seen {
        assert_eq!(s.source_up("cl"), Some(1.0), "down during migration:\n{s}");
        let (av, bv) = (depth(s, "cl", a), depth(s, "cl", b));
        assert!(
            matches!(av, Some(7.0 | 8.0 | 9.0)) && matches!(bv, Some(5.0 | 6.0)),
            "a = {av:?}, b = {bv:?}"
        );
        assert_eq!(depth(s, "cl", "other"), Some(2.0));
        for reason in ["backend", "connect", "timeout"] {
            assert_eq!(s.errors("cl", reason), Some(0.0), "{reason}");
        }
    }
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resharding_while_polling_and_rediscovering_never_shows_a_wrong_or_missing_depth() {
    let cluster = Cluster::start();
    let mut c = cluster.client();
    let mut want: Vec<(String, f64)> = Vec::new();
    for i in 0..300 {
        let key = format!("r:{i}");
        set_list(&mut c, &key, i % 13 + 1);
        want.push((key, (i % 13 + 1) as f64));
    }
    for i in 0..3 {
        let key = format!("{{t}}:{i}");
        set_list(&mut c, &key, i + 1);
        want.push((key, (i + 1) as f64));
    }
    let yaml = format!(
        r#"
        sources:
          - name: cl
            type: redis
            url: {url}
            poll_interval: 100ms
            discovery_interval: 300ms
            scan_count: 50
            queues:
              - pattern: "r:*"
              - pattern: "{{t}}:*"
        "#,
        url = cluster.url(0),
    );
    let app = TestApp::start(&yaml).await;
    app.until("initial depths", Duration::from_secs(30), |s| {
        all_exact(s, "cl", &want)
    })
    .await;

    // Move a third of the slots from node 0 to node 1, then from node 2 to
    // node 0, while scraping.
    let moves = [(0, 1), (2, 0)];
    let ids: Vec<String> = (0..3).map(|i| cluster.id(i)).collect();
    let entry = format!("127.0.0.1:{}", cluster.nodes[0].port);
    let reshard = tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        for (from, to) in moves {
            let out = Command::new("redis-cli")
                .args(["--cluster", "reshard", &entry])
                .args(["--cluster-from", &ids[from], "--cluster-to", &ids[to]])
                .args(["--cluster-slots", "2000", "--cluster-yes"])
                .args(["--cluster-pipeline", "5"])
                .output()
                .expect("redis-cli");
            assert!(
                out.status.success(),
                "reshard: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        started.elapsed()
    });
    let mut scrapes = 0;
    let mut up = 0;
    while !reshard.is_finished() {
        let s = app.scrape().await;
        scrapes += 1;
        if s.source_up("cl") == Some(1.0) {
            up += 1;
            let bad = wrong(&s, "cl", &want);
            assert!(bad.is_empty(), "during resharding: {bad:?}");
        }
        for reason in ["backend", "connect", "timeout"] {
            assert_eq!(s.errors("cl", reason), Some(0.0), "{reason}:\n{s}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = reshard.await.unwrap();
    eprintln!("resharding 4000 slots took {took:?}; {scrapes} scrapes, {up} up");
    assert_eq!(up, scrapes, "the source went down while resharding");
    assert!(scrapes >= 10, "only {scrapes} scrapes during resharding");
    // Slots really moved, and values are still right afterwards.
    assert!(cluster.dbsize(1) > 0 && cluster.dbsize(0) > 0);
    let s = app
        .until("depths after resharding", Duration::from_secs(30), |s| {
            all_exact(s, "cl", &want)
        })
        .await;
    assert_eq!(
        s.value("queue_exporter_tracked_keys", &[("source", "cl")]),
        Some(want.len() as f64)
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_moving_between_nodes_while_discovery_scans_them_stays_tracked_and_right() {
    let cluster = Cluster::start();
    let mut c = cluster.client();
    let key = "mv:1";
    set_list(&mut c, key, 4);
    let mut want = vec![(key.to_string(), 4.0)];
    for i in 2..12 {
        let k = format!("mv:{i}");
        set_list(&mut c, &k, i);
        want.push((k, i as f64));
    }
    drop(c);
    let slot = cluster.slot(key);
    let src = cluster.owner(slot);
    let dst = (src + 1) % 3;

    // The exporter reaches `src` through a proxy that delays each request
    // by a second (`src` announces the proxy's port), so `src` runs its
    // discovery SCAN a second after `dst` has run its own.
    let proxy = Proxy::start(&format!("127.0.0.1:{}", cluster.nodes[src].port)).await;
    proxy.set(ProxyMode::SlowRequests(Duration::from_secs(1)));
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("cluster-announce-port")
        .arg(proxy.port)
        .query(&mut cluster.node(src))
        .expect("CONFIG SET cluster-announce-port");
    tokio::task::block_in_place(|| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !(0..3).all(|i| cluster.ranges(i).iter().any(|r| r.2 == proxy.port)) {
            assert!(Instant::now() < deadline, "the proxy port never spread");
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    let yaml = format!(
        r#"
        sources:
          - name: cl
            type: redis
            url: {url}
            poll_interval: 100ms
            discovery_interval: 4s
            timeout: 10s
            queues:
              - pattern: "mv:*"
        "#,
        url = cluster.url(dst),
    );
    let app = TestApp::start(&yaml).await;
    app.until("initial depths", Duration::from_secs(30), |s| {
        all_exact(s, "cl", &want)
    })
    .await;

    // When the next discovery's SCAN reaches `dst`, move the key from `src`
    // to `dst`: `dst` has already scanned, `src` scans a second later.
    let mut monitor = support::start_monitor(&cluster.nodes[dst]);
    // (A read that times out breaks the connection: wait long instead.)
    monitor
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let scanned = tokio::task::block_in_place(|| {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match monitor.recv_response() {
                Ok(redis::Value::SimpleString(line)) if line.contains("\"SCAN\"") => {
                    return Instant::now();
                }
                Ok(_) => {}
                Err(e) => panic!("MONITOR on dst: {e}"),
            }
            assert!(Instant::now() < deadline, "no discovery SCAN on dst");
        }
    });
    cluster.begin_migration(slot, src, dst);
    cluster.migrate_key(src, dst, key);
    let moved = scanned.elapsed();
    assert!(
        moved < Duration::from_millis(800),
        "moved only {moved:?} after the SCAN"
    );

    // Until just before the discovery after next: every scrape is up and
    // shows the key (the SCANs of that round both missed it).
    let mut scrapes = 0;
    while scanned.elapsed() < Duration::from_secs(7) {
        let s = app.scrape().await;
        assert_eq!(s.source_up("cl"), Some(1.0), "down:\n{s}");
        let bad = wrong(&s, "cl", &want);
        assert!(
            bad.is_empty(),
            "{:?} after the move: {bad:?}",
            scanned.elapsed()
        );
        scrapes += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(scrapes >= 5, "only {scrapes} scrapes");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_node_marks_the_source_down_never_zero_and_it_comes_back_right() {
    let mut cluster = Cluster::start();
    let mut c = cluster.client();
    let mut want: Vec<(String, f64)> = Vec::new();
    for i in 0..30 {
        let key = format!("k:{i}");
        set_list(&mut c, &key, i + 1);
        want.push((key, (i + 1) as f64));
    }
    drop(c);
    let victim = 2;
    let victim_keys = cluster.dbsize(victim);
    assert!(victim_keys > 0, "the victim holds no key");
    let yaml = format!(
        r#"
        sources:
          - name: cl
            type: redis
            url: {url}
            poll_interval: 200ms
            timeout: 1s
            queues:
              - pattern: "k:*"
        "#,
        url = cluster.url(0),
    );
    let app = TestApp::start(&yaml).await;
    app.until("initial depths", Duration::from_secs(30), |s| {
        all_exact(s, "cl", &want)
    })
    .await;

    cluster.nodes[victim].stop();
    let killed = Instant::now();
    let mut down_seen = 0;
    let mut last = None;
    while killed.elapsed() < Duration::from_secs(4) {
        let s = app.scrape().await;
        match s.source_up("cl") {
            Some(0.0) => {
                down_seen += 1;
                assert!(
                    want.iter().all(|(k, _)| depth(&s, "cl", k).is_none()),
                    "a depth shown while down:\n{s}"
                );
            }
            _ => {
                let bad = wrong(&s, "cl", &want);
                assert!(bad.is_empty(), "up with wrong depths: {bad:?}");
            }
        }
        last = Some(s);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let last = last.unwrap();
    assert!(down_seen > 0, "never down with a node dead");
    assert_eq!(last.source_up("cl"), Some(0.0), "up with a node dead");
    assert!(last.errors("cl", "connect").unwrap() + last.errors("cl", "timeout").unwrap() > 0.0);

    // Back with its data (append-only file): up again, every depth right.
    cluster.nodes[victim].restart();
    let back = Instant::now();
    cluster.wait_ok();
    assert_eq!(cluster.dbsize(victim), victim_keys, "the node lost keys");
    let s = app
        .until("up and right again", Duration::from_secs(30), |s| {
            s.source_up("cl") == Some(1.0) && all_exact(s, "cl", &want)
        })
        .await;
    eprintln!(
        "down scrapes {down_seen}; right again {:?} after the node restarted",
        back.elapsed()
    );
    assert_eq!(
        s.value("queue_exporter_tracked_keys", &[("source", "cl")]),
        Some(want.len() as f64)
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_needs_read_connection_and_cluster_slots_and_nothing_more() {
    let cluster = Cluster::start();
    for i in 0..3 {
        let mut n = cluster.node(i);
        for (user, extra) in [("qe", "+cluster|slots"), ("qe_noslots", "+ping")] {
            let _: () = redis::cmd("ACL")
                .arg("SETUSER")
                .arg(user)
                .arg("on")
                .arg(">ro-pass")
                .arg("-@all")
                .arg("+@read")
                .arg("+@connection")
                .arg(extra)
                .arg("~*")
                .query(&mut n)
                .expect("ACL SETUSER");
        }
        let _: () = redis::cmd("ACL")
            .arg("LOG")
            .arg("RESET")
            .query(&mut n)
            .unwrap();
    }
    let mut c = cluster.client();
    let t = now();
    let mut want: Vec<(String, f64)> = Vec::new();
    for i in 0..20 {
        let key = format!("acl:{i}");
        set_list(&mut c, &key, i + 1);
        want.push((key, (i + 1) as f64));
    }
    let _: () = redis::cmd("ZADD")
        .arg("acl-delayed")
        .arg(t - 10.0)
        .arg("a")
        .arg(t + 100.0)
        .arg("b")
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("XADD")
        .arg("acl-stream")
        .arg("*")
        .arg("k")
        .arg("v")
        .query(&mut c)
        .unwrap();
    want.push(("acl-delayed".into(), 2.0));
    want.push(("acl-stream".into(), 1.0));
    let port = cluster.nodes[0].port;
    let yaml = format!(
        r#"
        sources:
          - name: ro
            type: redis
            url: redis+cluster://qe:ro-pass@127.0.0.1:{port}
            poll_interval: 200ms
            queues:
              - pattern: "acl:*"
                types: [list]
              - key: acl-delayed
                score: timestamp
              - pattern: "acl-st*"
          - name: noslots
            type: redis
            url: redis+cluster://qe_noslots:ro-pass@127.0.0.1:{port}
            poll_interval: 200ms
            queues:
              - pattern: "acl:*"
        "#
    );
    let app = TestApp::start(&yaml).await;
    let s = app
        .until("depths as qe", Duration::from_secs(30), |s| {
            all_exact(s, "ro", &want) && s.errors("noslots", "auth").is_some_and(|e| e > 0.0)
        })
        .await;
    assert_eq!(s.source_up("ro"), Some(1.0));
    assert_eq!(s.source_up("noslots"), Some(0.0));
    assert!(!s.text().contains("source=\"noslots\",queue="));
    // Ten polls later, still nothing refused for qe.
    let s = app.wait_polls("ro", 10, Duration::from_secs(30)).await;
    assert!(all_exact(&s, "ro", &want));
    for reason in ["auth", "backend", "connect"] {
        assert_eq!(s.errors("ro", reason), Some(0.0), "{reason}");
    }
    for i in 0..3 {
        let log: Vec<std::collections::HashMap<String, redis::Value>> = redis::cmd("ACL")
            .arg("LOG")
            .query(&mut cluster.node(i))
            .unwrap();
        let refused: Vec<_> = log
            .iter()
            .filter(|e| {
                e.get("username")
                    .and_then(|u| redis::from_redis_value_ref::<String>(u).ok())
                    .as_deref()
                    == Some("qe")
            })
            .collect();
        assert!(refused.is_empty(), "node {i} refused qe: {refused:?}");
    }
    app.stop().await;
}

/// Waits until `GetMetrics` answers `want`; on timeout, panics with the
/// last answer and the scrape's `source_up`, tracked keys and errors.
async fn keda_hears(
    app: &TestApp,
    grpc: &scaler_common::Client,
    pairs: &[(&str, &str)],
    want: f64,
    timeout: Duration,
) {
    let deadline = Instant::now() + timeout;
    loop {
        let answer = scaler_common::metrics(&mut grpc.clone(), pairs).await;
        if matches!(answer, Ok((_, f)) if f == want) {
            return;
        }
        if Instant::now() > deadline {
            let s = app.scrape().await;
            let lines: Vec<&str> = s
                .text()
                .lines()
                .filter(|l| {
                    l.starts_with("queue_exporter_source_up")
                        || l.starts_with("queue_exporter_tracked_keys")
                        || (l.starts_with("queue_exporter_poll_errors_total") && !l.ends_with(" 0"))
                })
                .collect();
            panic!(
                "{pairs:?}: KEDA heard {answer:?}, not {want}, after {timeout:?}\n{}",
                lines.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `GetMetrics` asked `n` times, 100 ms apart: every answer must be an
/// error with `code`, never a number.
async fn never_a_number(
    grpc: &scaler_common::Client,
    pairs: &[(&str, &str)],
    code: tonic::Code,
    n: usize,
) {
    for _ in 0..n {
        match scaler_common::metrics(&mut grpc.clone(), pairs).await {
            Err(s) => assert_eq!(s.code(), code, "{s:?}"),
            Ok(v) => panic!("KEDA heard {v:?} for {pairs:?}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_formed_after_the_exporter_started_is_read_within_one_discovery_interval() {
    // Three cluster nodes that are not joined yet: `CLUSTER SLOTS` names
    // no primary, and no slot is served.
    let cluster = Cluster::unformed(3);
    // `cl` with a pattern, `zc` in zero config: both through node 0.
    let yaml = format!(
        r#"
        listen: {{ grpc: 127.0.0.1:0 }}
        sources:
          - name: cl
            type: redis
            url: {url}
            poll_interval: 200ms
            discovery_interval: 1s
            queues:
              - pattern: "cq:*"
          - name: zc
            type: redis
            url: {url}
            poll_interval: 200ms
            discovery_interval: 1s
        "#,
        url = cluster.url(0),
    );
    let app = TestApp::start(&yaml).await;
    let grpc = scaler_common::client(&app).await;
    let asks = [
        [("queue", "cq:*"), ("source", "cl")],
        [("queue", "cq:7"), ("source", "cl")],
        [("queue", "cq:*"), ("source", "zc")],
    ];
    // Down for `cluster_slots` (and for nothing else), no queue shown, and
    // KEDA hears UNAVAILABLE, never 0.
    let down = |what: &'static str| {
        let app = &app;
        let grpc = &grpc;
        let asks = &asks;
        async move {
            let at = polls(&app.scrape().await, "cl");
            let s = app
                .until(what, Duration::from_secs(30), |s| {
                    ["cl", "zc"].iter().all(|src| {
                        s.source_up(src) == Some(0.0)
                            && s.errors(src, "cluster_slots").is_some_and(|e| e > 0.0)
                    }) && polls(s, "cl") > at + 1
                })
                .await;
            for src in ["cl", "zc"] {
                assert!(
                    !s.text().contains(&format!("source=\"{src}\",queue=")),
                    "{s}"
                );
                assert_eq!(s.errors(src, "backend"), Some(0.0), "{s}");
            }
            for pairs in asks {
                never_a_number(grpc, pairs, tonic::Code::Unavailable, 3).await;
            }
        }
    };
    down("down for cluster_slots before any slot is assigned").await;

    // Each node takes its third of the slots but has met no other: node
    // 0's map names one primary and leaves two thirds without one. Today's
    // main took that map and answered 0 for `cq:*`.
    let thirds = [(0, 5460), (5461, 10922), (10923, 16383)];
    for (i, (first, last)) in thirds.into_iter().enumerate() {
        let (first, last) = (first.to_string(), last.to_string());
        cluster.run(i, &["CLUSTER", "ADDSLOTSRANGE", &first, &last]);
    }
    down("down for cluster_slots with a third of the slots").await;

    // The nodes meet: the cluster is formed. 30 lists holding 1..=30
    // items (465) are written, on every node.
    tokio::task::block_in_place(|| {
        for i in 1..3 {
            let port = cluster.nodes[i].port.to_string();
            cluster.run(0, &["CLUSTER", "MEET", "127.0.0.1", &port]);
        }
        cluster.wait_ok();
    });
    let mut c = cluster.client();
    let mut want: Vec<(String, f64)> = Vec::new();
    for i in 1..=30 {
        let key = format!("cq:{i}");
        set_list(&mut c, &key, i);
        want.push((key, i as f64));
    }
    for i in 0..3 {
        assert!(cluster.dbsize(i) > 0, "node {i} holds no key");
    }
    let written = Instant::now();
    // Within one discovery interval (1 s), plus a poll and slack for a
    // loaded machine.
    keda_hears(&app, &grpc, &asks[0], 465.0, Duration::from_secs(12)).await;
    let took = written.elapsed();
    keda_hears(&app, &grpc, &asks[2], 465.0, Duration::from_secs(12)).await;
    scaler_common::wait_value(&grpc, &asks[1], 7.0).await;
    let s = app
        .until("every key exact", Duration::from_secs(5), |s| {
            all_exact(s, "cl", &want) && all_exact(s, "zc", &want)
        })
        .await;
    eprintln!("keys written after forming read by KEDA {took:?} later");
    assert_eq!(s.source_up("cl"), Some(1.0));
    assert_eq!(
        s.value("queue_exporter_tracked_keys", &[("source", "cl")]),
        Some(30.0)
    );
    app.stop().await;
}

/// Every scrape watched: while up, each key of `want` it shows has its
/// exact depth (`all` also requires each to be shown); while down, none
/// is shown.
fn never_wrong(seen: &[(Instant, Scrape)], want: &[(String, f64)], all: bool) {
    assert!(seen.len() >= 3, "only {} scrapes", seen.len());
    for (_, s) in seen {
        match s.source_up("cl") {
            Some(1.0) => {
                let bad: Vec<String> = wrong(s, "cl", want)
                    .into_iter()
                    .filter(|w| all || !w.ends_with("got None"))
                    .collect();
                assert!(bad.is_empty(), "up with wrong depths: {bad:?}");
            }
            _ => assert!(
                want.iter().all(|(k, _)| depth(s, "cl", k).is_none()),
                "a depth shown while down:\n{s}"
            ),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_added_later_with_slots_migrated_to_it_is_scanned_within_one_discovery_interval()
{
    let mut cluster = Cluster::start();
    let mut c = cluster.client();
    let mut want: Vec<(String, f64)> = Vec::new();
    for i in 0..40 {
        let key = format!("ad:{i}");
        set_list(&mut c, &key, i % 5 + 1);
        want.push((key, (i % 5 + 1) as f64));
    }
    drop(c);
    let yaml = format!(
        r#"
        listen: {{ grpc: 127.0.0.1:0 }}
        sources:
          - name: cl
            type: redis
            url: {url}
            poll_interval: 200ms
            discovery_interval: 1s
            queues:
              - pattern: "ad:*"
        "#,
        url = cluster.url(0),
    );
    let app = TestApp::start(&yaml).await;
    app.until("initial depths", Duration::from_secs(30), |s| {
        all_exact(s, "cl", &want)
    })
    .await;
    let watcher = app.watch_scrapes(Duration::from_millis(50));

    // A fourth primary joins and takes a quarter of the slots, with the
    // keys in them.
    let new = tokio::task::block_in_place(|| {
        let new = cluster.add_primary();
        cluster.reshard_to(new, 4096);
        cluster.wait_ok();
        new
    });
    assert!(cluster.dbsize(new) > 0, "no key moved to the new primary");
    // Keys written since, in slots only the new primary serves.
    let port = cluster.nodes[new].port;
    let its = cluster.ranges(0);
    let fresh: Vec<String> = (0..)
        .map(|j| format!("ad:new:{j}"))
        .filter(|k| {
            let slot = cluster.slot(k);
            its.iter()
                .any(|(s, e, p)| (*s..=*e).contains(&slot) && *p == port)
        })
        .take(10)
        .collect();
    let mut direct = cluster.node(new);
    for (j, key) in fresh.iter().enumerate() {
        set_list_direct(&mut direct, key, j + 1);
        want.push((key.clone(), (j + 1) as f64));
    }
    let written = Instant::now();
    // Within one discovery interval (1 s), plus a poll and slack.
    let s = app
        .until("the new primary's keys", Duration::from_secs(8), |s| {
            all_exact(s, "cl", &want)
        })
        .await;
    eprintln!(
        "keys written on the added primary shown {:?} later",
        written.elapsed()
    );
    assert_eq!(
        s.value("queue_exporter_tracked_keys", &[("source", "cl")]),
        Some(50.0)
    );
    let total: f64 = want.iter().map(|(_, d)| d).sum();
    let grpc = scaler_common::client(&app).await;
    scaler_common::wait_value(&grpc, &[("queue", "ad:*"), ("source", "cl")], total).await;
    never_wrong(&watcher.finish().await, &want, false);
    app.stop().await;
}

/// [`set_list`] on one node's own connection (its slot must be there).
fn set_list_direct(c: &mut redis::Connection, key: &str, n: usize) {
    let items: Vec<String> = (0..n).map(|i| format!("job-{i}")).collect();
    let _: () = redis::cmd("RPUSH")
        .arg(key)
        .arg(items)
        .query(c)
        .expect("RPUSH");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_is_followed_to_the_promoted_replica_and_nothing_wrong_is_shown_meanwhile() {
    // Three primaries, each with a replica.
    let mut cluster = Cluster::unformed(6);
    cluster.create(1);
    let mut c = cluster.client();
    let mut want: Vec<(String, f64)> = Vec::new();
    for i in 0..30 {
        let key = format!("fo:{i}");
        set_list(&mut c, &key, i % 6 + 1);
        want.push((key, (i % 6 + 1) as f64));
    }
    drop(c);
    // The primaries, and every write on their replica before the kill.
    let ports: std::collections::BTreeSet<u16> =
        cluster.ranges(0).into_iter().map(|r| r.2).collect();
    let primaries: Vec<usize> = (0..6)
        .filter(|&i| ports.contains(&cluster.nodes[i].port))
        .collect();
    assert_eq!(primaries.len(), 3);
    tokio::task::block_in_place(|| {
        // Each replica done with its first sync (a replica still loading
        // would not acknowledge in time).
        let deadline = Instant::now() + Duration::from_secs(30);
        while !primaries.iter().all(|&p| {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query(&mut cluster.node(p))
                .expect("INFO replication");
            info.contains("connected_slaves:1") && info.contains("state=online")
        }) {
            assert!(Instant::now() < deadline, "a replica never came online");
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    for &p in &primaries {
        let acked: i64 = redis::cmd("WAIT")
            .arg(1)
            .arg(5000)
            .query(&mut cluster.node(p))
            .expect("WAIT");
        assert_eq!(acked, 1, "node {p}'s replica did not acknowledge");
    }
    let slot = cluster.slot("fo:0");
    let victim = cluster.owner(slot);
    let survivor = *primaries.iter().find(|&&p| p != victim).unwrap();
    // The exporter knows the cluster through the node that will die.
    let yaml = format!(
        r#"
        listen: {{ grpc: 127.0.0.1:0 }}
        sources:
          - name: cl
            type: redis
            url: {url}
            poll_interval: 200ms
            discovery_interval: 1s
            timeout: 1s
            queues:
              - pattern: "fo:*"
        "#,
        url = cluster.url(victim),
    );
    let app = TestApp::start(&yaml).await;
    app.until("initial depths", Duration::from_secs(30), |s| {
        all_exact(s, "cl", &want)
    })
    .await;
    let watcher = app.watch_scrapes(Duration::from_millis(50));

    cluster.nodes[victim].stop();
    let victim_port = cluster.nodes[victim].port;
    // The replica takes over (cluster-node-timeout 1 s): the survivor's map
    // names a new owner for the slot, and the cluster is ok again.
    let promoted = tokio::task::block_in_place(|| {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let map = cluster.ranges(survivor);
            let owner = map.iter().find(|(s, e, _)| (*s..=*e).contains(&slot));
            let info: String = redis::cmd("CLUSTER")
                .arg("INFO")
                .query(&mut cluster.node(survivor))
                .expect("CLUSTER INFO");
            if owner.is_some_and(|o| o.2 != victim_port) && info.contains("cluster_state:ok") {
                return Instant::now();
            }
            assert!(Instant::now() < deadline, "no replica was promoted");
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    // Within one discovery interval (1 s) of the promotion, plus slack.
    app.until(
        "up and exact after the failover",
        Duration::from_secs(8),
        |s| s.source_up("cl") == Some(1.0) && all_exact(s, "cl", &want),
    )
    .await;
    eprintln!(
        "failover followed {:?} after the promotion",
        promoted.elapsed()
    );
    let total: f64 = want.iter().map(|(_, d)| d).sum();
    let grpc = scaler_common::client(&app).await;
    scaler_common::wait_value(&grpc, &[("queue", "fo:*"), ("source", "cl")], total).await;
    never_wrong(&watcher.finish().await, &want, true);
    app.stop().await;
}
