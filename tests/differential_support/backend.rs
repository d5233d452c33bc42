//! Where a Redis scenario runs: one private `redis-server`, or a private
//! 3-primary Redis Cluster (`redis-cli --cluster create`), with the same
//! writes and the same ACL user on every node.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::RedisServer;

/// A standalone server or a cluster, killed on drop.
pub enum Backend {
    /// One server.
    Single(RedisServer),
    /// Three primaries, and the directory of their `nodes.conf` files.
    Cluster(Vec<RedisServer>, tempfile::TempDir),
}

impl Backend {
    /// Starts a standalone server, or a cluster.
    pub fn start(cluster: bool) -> Backend {
        if !cluster {
            return Backend::Single(RedisServer::start());
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let nodes: Vec<RedisServer> = (0..3)
            .map(|i| {
                let conf = dir.path().join(format!("nodes-{i}.conf"));
                RedisServer::start_with(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    conf.to_str().expect("utf-8 temp path"),
                    "--cluster-node-timeout",
                    "1000",
                ])
            })
            .collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("redis-cli");
        assert!(
            out.status.success(),
            "redis-cli --cluster create: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let deadline = Instant::now() + Duration::from_secs(60);
        while !nodes.iter().all(|n| {
            let info: String = redis::cmd("CLUSTER")
                .arg("INFO")
                .query(&mut n.conn())
                .unwrap_or_default();
            info.contains("cluster_state:ok")
        }) {
            assert!(Instant::now() < deadline, "cluster never became ok");
            std::thread::sleep(Duration::from_millis(100));
        }
        Backend::Cluster(nodes, dir)
    }

    /// Runs every write (through a cluster-aware client for a cluster).
    pub fn write(&self, writes: &[Vec<String>]) {
        let run = |c: &mut dyn redis::ConnectionLike, w: &Vec<String>| {
            let mut cmd = redis::cmd(&w[0]);
            for a in &w[1..] {
                cmd.arg(a.as_bytes());
            }
            let _: redis::Value = cmd.query(c).unwrap_or_else(|e| panic!("{w:?}: {e}"));
        };
        match self {
            Backend::Single(s) => {
                let mut c = s.conn();
                writes.iter().for_each(|w| run(&mut c, w));
            }
            Backend::Cluster(nodes, _) => {
                let urls: Vec<String> = nodes.iter().map(|n| n.url.clone()).collect();
                let mut c = redis::cluster::ClusterClient::new(urls)
                    .expect("cluster client")
                    .get_connection()
                    .expect("cluster connection");
                writes.iter().for_each(|w| run(&mut c, w));
            }
        }
    }

    /// The reference's URL (the default user).
    pub fn admin_url(&self) -> String {
        match self {
            Backend::Single(s) => s.url.clone(),
            Backend::Cluster(nodes, _) => format!("redis+cluster://127.0.0.1:{}", nodes[0].port),
        }
    }

    /// Creates the subject's ACL user on every node; returns its URL. A
    /// cluster's user also needs `CLUSTER SLOTS` (docs/redis.md).
    pub fn subject_url(&self, rules: &[String]) -> String {
        let rules: Vec<&str> = rules.iter().map(String::as_str).collect();
        match self {
            Backend::Single(s) => s.acl_user("subject", "pw", &rules),
            Backend::Cluster(nodes, _) => {
                let mut with_slots = rules.clone();
                with_slots.push("+cluster|slots");
                for n in nodes {
                    n.acl_user("subject", "pw", &with_slots);
                }
                format!("redis+cluster://subject:pw@127.0.0.1:{}", nodes[0].port)
            }
        }
    }
}
