//! Redis poll benchmark: 2,000 lists + 2,000 timestamp zsets (100 items each)
//! among 100,000 other keys, in a private redis-server.
//!
//! Reports the first poll (discovery included, what `queue-exporter once`
//! does) and steady polls, plus the same 4,000 size commands pipelined by a
//! bare client as the floor. Two zset shapes are measured: integer unix
//! seconds, and Sidekiq-style fractional seconds (17 significant digits),
//! which make Redis's own score parsing much slower for small (listpack)
//! zsets. Oldest items are an hour old, so most age buckets need a ZCOUNT.
//! Run: `cargo bench --bench redis_poll`.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use queue_exporter::config::{QueueSpec, RedisSourceConfig, ScoreMode, ScoreUnit};
use queue_exporter::hub::HubBuilder;
use queue_exporter::snapshot::SourceKind;
use queue_exporter::sources::poll_once;
use queue_exporter::sources::redis::RedisSource;

const LISTS: usize = 2000;
const ZSETS: usize = 2000;
const ITEMS: usize = 100;
const OTHER: usize = 100_000;

struct Server(Child);
impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[tokio::main]
async fn main() {
    let port = free_port();
    let _server = Server(
        Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server"),
    );
    let url = format!("redis://127.0.0.1:{port}");
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut conn = loop {
        if let Ok(c) = client.get_multiplexed_async_connection().await {
            break c;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    eprintln!("filling {OTHER} other keys, {LISTS} lists, {ZSETS} zsets x {ITEMS} items...");
    for chunk in (0..OTHER).collect::<Vec<_>>().chunks(5000) {
        let mut p = redis::pipe();
        for i in chunk {
            p.cmd("SET").arg(format!("cache:{i}")).arg("v").ignore();
        }
        let _: () = p.query_async(&mut conn).await.unwrap();
    }
    for i in 0..LISTS {
        let items: Vec<String> = (0..ITEMS).map(|j| format!("{{\"id\":{j}}}")).collect();
        let _: () = redis::cmd("RPUSH")
            .arg(format!("queue:list:{i}"))
            .arg(items)
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    for (prefix, fractional) in [("queue:zset:", false), ("frac:zset:", true)] {
        for i in 0..ZSETS {
            let mut c = redis::cmd("ZADD");
            c.arg(format!("{prefix}{i}"));
            for j in 0..ITEMS {
                // Half due (past), half scheduled (future).
                let score = now - 3600.0 + (j as f64) * 72.0;
                if fractional {
                    c.arg(score + 0.123_456_7);
                } else {
                    c.arg(score.floor() as i64);
                }
                c.arg(format!("m{j}"));
            }
            let _: () = c.query_async(&mut conn).await.unwrap();
        }
    }

    println!(
        "redis_poll: {LISTS} lists + {ZSETS} timestamp zsets x {ITEMS} items among {OTHER} other keys"
    );
    for (label, zset_pattern) in [
        ("integer-second scores", "queue:zset:*"),
        ("fractional-second scores", "frac:zset:*"),
    ] {
        measure(&url, label, zset_pattern).await;
    }
    // Floor: the same 4,000 size commands, pipelined by a bare client.
    let mut floor = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        for chunk in (0..LISTS + ZSETS).collect::<Vec<_>>().chunks(1000) {
            let mut p = redis::pipe();
            for i in chunk {
                if *i < LISTS {
                    p.cmd("LLEN").arg(format!("queue:list:{i}"));
                } else {
                    p.cmd("ZCARD").arg(format!("queue:zset:{}", i - LISTS));
                }
            }
            let _: Vec<u64> = p.query_async(&mut conn).await.unwrap();
        }
        floor.push(t.elapsed());
    }

    println!(
        "  floor: 4,000 LLEN/ZCARD pipelined by a bare client: median {:?}",
        median(floor)
    );
}

async fn measure(url: &str, label: &str, zset_pattern: &str) {
    let config = RedisSourceConfig {
        name: "bench".into(),
        kind: "redis".into(),
        url: url.to_string(),
        password_file: None,
        poll_interval: Duration::from_secs(1),
        discovery_interval: Duration::from_secs(3600),
        timeout: Duration::from_secs(10),
        max_keys: 10_000,
        scan_count: 1000,
        age_buckets: queue_exporter::config::default_age_buckets(),
        queues: vec![
            QueueSpec {
                key: None,
                pattern: Some("queue:list:*".into()),
                labels: None,
                types: None,
                score: ScoreMode::Plain,
                score_unit: ScoreUnit::Seconds,
                age: None,
            },
            QueueSpec {
                key: None,
                pattern: Some(zset_pattern.into()),
                labels: None,
                types: None,
                score: ScoreMode::Timestamp,
                score_unit: ScoreUnit::Seconds,
                age: None,
            },
        ],
    };

    // First poll, discovery included (the `once` path), fresh source each run.
    let mut first = Vec::new();
    for _ in 0..5 {
        let mut hub = HubBuilder::default();
        let publisher = hub.add_source("bench", SourceKind::Redis, Duration::from_secs(1));
        let mut source = RedisSource::new(config.clone());
        let t = Instant::now();
        let (snap, ok) = poll_once(&mut source, &publisher).await;
        first.push(t.elapsed());
        assert!(
            ok && snap.queues.len() == LISTS + ZSETS,
            "poll failed or wrong count: {}",
            snap.queues.len()
        );
    }

    // Steady polls.
    let mut hub = HubBuilder::default();
    let publisher = hub.add_source("bench", SourceKind::Redis, Duration::from_secs(1));
    let mut source = RedisSource::new(config.clone());
    let (s, _) = poll_once(&mut source, &publisher).await;
    publisher.publish(s);
    let mut steady = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        let (s, ok) = poll_once(&mut source, &publisher).await;
        steady.push(t.elapsed());
        assert!(ok);
        publisher.publish(s);
    }

    // Steady polls without the age histogram (age_buckets: []).
    let mut no_hist = config.clone();
    no_hist.age_buckets.clear();
    let mut source = RedisSource::new(no_hist);
    let (s, _) = poll_once(&mut source, &publisher).await;
    publisher.publish(s);
    let mut steady_nohist = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        let (s, _) = poll_once(&mut source, &publisher).await;
        steady_nohist.push(t.elapsed());
        publisher.publish(s);
    }

    println!("  [{label}]");
    println!(
        "    first poll incl. discovery (once): median {:?} (min {:?}, max {:?})",
        median(first.clone()),
        first.iter().min().unwrap(),
        first.iter().max().unwrap()
    );
    println!(
        "    steady poll (7 age buckets):       median {:?}",
        median(steady)
    );
    println!(
        "    steady poll (no age histogram):    median {:?}",
        median(steady_nohist)
    );
}
