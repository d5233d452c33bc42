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
use std::sync::Arc;
use std::time::{Duration, Instant};

use queue_exporter::config::{QueueSpec, RedisSourceConfig, ScoreMode, ScoreUnit};
use queue_exporter::exposition::{Exposition, Format, encode_snapshots};
use queue_exporter::hub::HubBuilder;
use queue_exporter::snapshot::SourceKind;
use queue_exporter::sources::redis::RedisSource;
use queue_exporter::sources::{Source, poll_once};
use queue_exporter::telemetry::Telemetry;

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

    // The peer, in the same run on the same data: redis_exporter with
    // -check-keys over the same 4,000 keys (Debian package
    // prometheus-redis-exporter), when installed.
    let mut admin = conn.clone();
    peer(&url, &mut admin).await;
}

/// Times scrapes of redis_exporter `-check-keys` against our server.
async fn peer(url: &str, admin: &mut redis::aio::MultiplexedConnection) {
    let Some(bin) = ["prometheus-redis-exporter", "redis_exporter"]
        .into_iter()
        .find(|b| Command::new(b).arg("-version").output().is_ok())
    else {
        println!(
            "  peer: redis_exporter not installed (apt install prometheus-redis-exporter); skipped"
        );
        return;
    };
    let listen = format!("127.0.0.1:{}", free_port());
    let _peer = Server(
        Command::new(bin)
            .args([
                "-redis.addr",
                url,
                "-web.listen-address",
                &listen,
                "-check-keys",
                "queue:list:*,queue:zset:*",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis_exporter"),
    );
    let http = reqwest::Client::new();
    let metrics = format!("http://{listen}/metrics");
    for _ in 0..100 {
        if http.get(&metrics).send().await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut scrapes = Vec::new();
    let mut series = 0;
    let before = server_usec(admin).await;
    for _ in 0..5 {
        let t = Instant::now();
        let body = http
            .get(&metrics)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        scrapes.push(t.elapsed());
        series = body
            .lines()
            .filter(|l| l.starts_with("redis_key_size{"))
            .count();
    }
    let busy = (server_usec(admin).await - before) / 5.0 / 1000.0;
    println!(
        "  peer: {bin} -check-keys (integer zsets + lists): scrape median {:?} (Redis busy {busy:.1} ms/scrape, {series} key_size series), repeated for every scrape",
        median(scrapes)
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
        age_histogram_interval: queue_exporter::config::default_age_histogram_interval(),
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

    // First poll, discovery included (the `once` path), fresh source each
    // run; also without the histogram, to show what discovery costs.
    let client = redis::Client::open(url).unwrap();
    let mut admin = client.get_multiplexed_async_connection().await.unwrap();
    let first = first_polls(&config, &mut admin).await;
    let mut no_hist = config.clone();
    no_hist.age_buckets.clear();
    let first_no_hist = first_polls(&no_hist, &mut admin).await;

    // Steady polls with the default configuration: polls 1 s apart (the
    // default poll_interval) over one full age_histogram_interval plus one,
    // so every key's histogram is re-measured once, spread over the polls.
    let (steady, steady_server, render) = steady_polls(&config, &mut admin, 16).await;
    // Histogram measured on every poll (age_histogram_interval: 0s). Every
    // variant is paced the same way: back-to-back polls run faster (warm
    // caches) than polls a second apart.
    let mut every = config.clone();
    every.age_histogram_interval = Duration::ZERO;
    let (every, every_server, _) = steady_polls(&every, &mut admin, 16).await;
    // No histogram at all (age_buckets: []).
    let mut no_hist = config.clone();
    no_hist.age_buckets.clear();
    let (no_hist, no_hist_server, _) = steady_polls(&no_hist, &mut admin, 16).await;

    println!("  [{label}]");
    for (what, (first, busy)) in [("", first), (", no histogram", first_no_hist)] {
        println!(
            "    first poll incl. discovery (once{what}): median {:?} (min {:?}, max {:?}; Redis busy {busy:.1} ms)",
            median(first.clone()),
            first.iter().min().unwrap(),
            first.iter().max().unwrap()
        );
    }
    println!(
        "    a scrape: encode {:?} ({} lines, {} bytes) once per snapshot; gzip: first {:?}, then {:?} ({} bytes)",
        render.encode,
        render.lines,
        render.plain_bytes,
        render.gzip_first,
        render.gzip_again,
        render.gzip_bytes
    );
    for (what, polls, server) in [
        ("default (histogram every 15 s)", steady, steady_server),
        ("histogram every poll (0s)     ", every, every_server),
        ("no histogram (age_buckets: [])", no_hist, no_hist_server),
    ] {
        println!(
            "    steady, {what}: median {:?}, max {:?} (Redis busy {:.1} ms/poll)",
            median(polls.clone()),
            polls.iter().max().unwrap(),
            server
        );
    }
}

/// Five first polls (discovery included) of fresh sources, and Redis's mean
/// busy time per first poll in ms.
async fn first_polls(
    config: &RedisSourceConfig,
    admin: &mut redis::aio::MultiplexedConnection,
) -> (Vec<Duration>, f64) {
    let before = server_usec(admin).await;
    let mut first = Vec::new();
    for _ in 0..5 {
        let mut hub = HubBuilder::default();
        let mut source = RedisSource::new(config.clone());
        let publisher = hub.add_source(
            "bench",
            SourceKind::Redis,
            Duration::from_secs(1),
            source.scope(),
        );
        let t = Instant::now();
        let (snap, ok) = poll_once(&mut source, &publisher).await;
        first.push(t.elapsed());
        assert!(
            ok && snap.queues.len() == LISTS + ZSETS,
            "poll failed or wrong count: {}",
            snap.queues.len()
        );
    }
    let busy = (server_usec(admin).await - before) / 5.0 / 1000.0;
    (first, busy)
}

/// Runs `n` steady polls 1 s apart (as the exporter does) after a first one,
/// and returns their durations and Redis's mean busy time per poll in ms.
async fn steady_polls(
    config: &RedisSourceConfig,
    admin: &mut redis::aio::MultiplexedConnection,
    n: usize,
) -> (Vec<Duration>, f64, RenderStats) {
    let mut hub = HubBuilder::default();
    let mut source = RedisSource::new(config.clone());
    let publisher = hub.add_source(
        "bench",
        SourceKind::Redis,
        Duration::from_secs(1),
        source.scope(),
    );
    let (s, _) = poll_once(&mut source, &publisher).await;
    publisher.publish(s);
    let mut polls = Vec::new();
    let server_before = server_usec(admin).await;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await;
    for _ in 0..n {
        tick.tick().await;
        let t = Instant::now();
        let (s, ok) = poll_once(&mut source, &publisher).await;
        polls.push(t.elapsed());
        assert!(ok);
        publisher.publish(s);
    }
    let server = (server_usec(admin).await - server_before) / n as f64 / 1000.0;
    // A reader's cost: encoding the latest snapshot (uncached; repeated
    // scrapes of the same snapshot are served from the cache).
    let hub = hub.build();
    let t = Instant::now();
    let body = encode_snapshots(&hub, Format::Classic).unwrap();
    let encode = t.elapsed();
    assert!(body.contains("queue_depth{"));
    // Gzip scrapes through the exposition: the first of a snapshot
    // compresses the snapshot part, later ones reuse it.
    let exposition = Exposition::new(hub, Arc::new(Telemetry::new()));
    let t = Instant::now();
    let first = exposition.render_gzip(Format::Classic).unwrap().unwrap();
    let gzip_first = t.elapsed();
    let mut again = Vec::new();
    for _ in 0..10 {
        let t = Instant::now();
        let gz = exposition.render_gzip(Format::Classic).unwrap().unwrap();
        again.push(t.elapsed());
        assert_eq!(gz.len(), first.len());
    }
    let stats = RenderStats {
        encode,
        lines: body.lines().count(),
        gzip_first,
        gzip_again: median(again),
        gzip_bytes: first.len(),
        plain_bytes: body.len(),
    };
    (polls, server, stats)
}

/// What a reader pays for one snapshot.
struct RenderStats {
    /// Encoding the snapshot as text (first scrape of a snapshot).
    encode: Duration,
    /// Lines of the body.
    lines: usize,
    /// First gzip scrape of a snapshot (encode + compress).
    gzip_first: Duration,
    /// Later gzip scrapes of the same snapshot.
    gzip_again: Duration,
    /// Sizes.
    gzip_bytes: usize,
    plain_bytes: usize,
}

/// Microseconds Redis has spent executing commands so far (INFO commandstats;
/// the bench's private server, not something the exporter ever asks).
async fn server_usec(conn: &mut redis::aio::MultiplexedConnection) -> f64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap();
    info.lines()
        .filter_map(|l| l.split(",usec=").nth(1))
        .filter_map(|rest| rest.split(',').next()?.parse::<f64>().ok())
        .sum()
}
