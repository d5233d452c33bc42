//! Load generator and probes for `scripts/bench` (issue 11's harness).
//!
//! `scripts/bench` drives the release binary as a user would and calls this
//! program for what a shell or Python client cannot do fast enough: many
//! concurrent `/metrics` scrapers, many concurrent gRPC clients, the push
//! latency of `StreamIsActive`, and AMQP (seeding RabbitMQ, and the bare
//! passive declares the `amqp` method is compared with). Each subcommand
//! prints one JSON object on stdout. It uses no internal module of the crate
//! except the generated gRPC client.
//!
//! Built by `scripts/bench` (`cargo build --release --bench loadgen`) and run
//! directly; `cargo bench` alone only prints where to look.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use futures_util::future::join_all;
use queue_exporter::scaler::proto::external_scaler_client::ExternalScalerClient;
use queue_exporter::scaler::proto::{GetMetricsRequest, ScaledObjectRef};
use serde_json::json;
use tonic::transport::{Channel, Endpoint};

#[derive(Parser)]
#[command(about = "Load generator for scripts/bench")]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
}

#[derive(Subcommand)]
enum Cmd {
    /// Concurrent scrapers of one URL; latency of whole responses.
    Http {
        #[arg(long)]
        url: String,
        #[arg(long, default_value_t = 10)]
        concurrency: usize,
        #[arg(long, default_value_t = 10.0)]
        seconds: f64,
        /// Send `Accept-Encoding: gzip` (the body is read, not decompressed).
        #[arg(long)]
        gzip: bool,
    },
    /// `GetMetrics` from many concurrent clients over distinct trigger maps.
    Grpc {
        /// host:port of the scaler.
        #[arg(long)]
        addr: String,
        /// Queue names of the exporter's lists: `{list_prefix}0` ..
        #[arg(long, default_value = "queue:list:")]
        list_prefix: String,
        #[arg(long)]
        lists: usize,
        /// Queue names of the exporter's timestamp zsets.
        #[arg(long, default_value = "queue:zset:")]
        zset_prefix: String,
        #[arg(long)]
        zsets: usize,
        /// Distinct ScaledObject metadata maps.
        #[arg(long, default_value_t = 1000)]
        maps: usize,
        /// HTTP/2 connections.
        #[arg(long, default_value_t = 16)]
        connections: usize,
        /// Requests in flight (spread over the connections).
        #[arg(long, default_value_t = 16)]
        concurrency: usize,
        #[arg(long, default_value_t = 10.0)]
        seconds: f64,
        /// Unmeasured warm-up before the measured period.
        #[arg(long, default_value_t = 1.0)]
        warmup: f64,
    },
    /// RPUSH into an empty list → `StreamIsActive` true, per trial.
    Push {
        #[arg(long)]
        addr: String,
        #[arg(long)]
        redis: String,
        #[arg(long, default_value = "push:q")]
        key: String,
        #[arg(long, default_value_t = 50)]
        trials: usize,
        /// The exporter's poll_interval in ms (to randomise the push phase).
        #[arg(long, default_value_t = 250)]
        poll_ms: u64,
    },
    /// The floor of a poll: one LLEN per list and one ZCARD per zset,
    /// pipelined by a bare client in chunks of 1,000, `runs` times. With
    /// `--needed`, each zset also gets the two reads a timestamp zset's
    /// values need (its oldest item, and the count of scheduled items).
    Floor {
        #[arg(long)]
        redis: String,
        #[arg(long, default_value = "queue:list:")]
        list_prefix: String,
        #[arg(long)]
        lists: usize,
        #[arg(long, default_value = "queue:zset:")]
        zset_prefix: String,
        #[arg(long)]
        zsets: usize,
        #[arg(long, default_value_t = 20)]
        runs: usize,
        /// Also read each zset's oldest item and scheduled count.
        #[arg(long)]
        needed: bool,
        /// Pause between rounds, in ms (1000: the exporter's poll cadence,
        /// where Redis's caches are cold for each round as for each poll).
        #[arg(long, default_value_t = 0)]
        gap_ms: u64,
    },
    /// Declares `count` classic queues `{prefix}{i}` and publishes
    /// `messages` persistent messages (with a timestamp) to each.
    RabbitSeed {
        /// amqp://user:pass@host:port/vhost (vhost percent-encoded).
        #[arg(long)]
        amqp: String,
        #[arg(long)]
        prefix: String,
        #[arg(long)]
        count: usize,
        #[arg(long, default_value_t = 1)]
        messages: usize,
    },
    /// Bare client: passive `queue.declare` of `{prefix}0..count` on 8
    /// channels of one open connection, `runs` times.
    AmqpDeclare {
        #[arg(long)]
        amqp: String,
        #[arg(long)]
        prefix: String,
        #[arg(long)]
        count: usize,
        #[arg(long, default_value_t = 8)]
        channels: usize,
        #[arg(long, default_value_t = 5)]
        runs: usize,
        /// Pause before each run, in ms (the exporter's poll interval, so
        /// RabbitMQ is as warm as it is for the exporter's polls).
        #[arg(long, default_value_t = 0)]
        gap_ms: u64,
    },
}

fn main() {
    // `cargo bench` passes `--bench`; this program is driven by scripts/bench.
    let args: Vec<String> = std::env::args().filter(|a| a != "--bench").collect();
    let cli = Cli::parse_from(args);
    let Some(cmd) = cli.cmd else {
        println!(
            "loadgen: the benchmark harness is `scripts/bench` (see BENCHMARKS.md); this program is its load generator"
        );
        return;
    };
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let out = rt.block_on(async move {
        match cmd {
            Cmd::Http {
                url,
                concurrency,
                seconds,
                gzip,
            } => http(&url, concurrency, secs(seconds), gzip).await,
            Cmd::Grpc {
                addr,
                list_prefix,
                lists,
                zset_prefix,
                zsets,
                maps,
                connections,
                concurrency,
                seconds,
                warmup,
            } => {
                let maps = trigger_maps(&list_prefix, lists, &zset_prefix, zsets, maps);
                grpc(
                    &addr,
                    maps,
                    connections,
                    concurrency,
                    secs(warmup),
                    secs(seconds),
                )
                .await
            }
            Cmd::Push {
                addr,
                redis,
                key,
                trials,
                poll_ms,
            } => push(&addr, &redis, &key, trials, poll_ms).await,
            Cmd::Floor {
                redis,
                list_prefix,
                lists,
                zset_prefix,
                zsets,
                runs,
                needed,
                gap_ms,
            } => {
                let keys = FloorKeys {
                    list_prefix: &list_prefix,
                    lists,
                    zset_prefix: &zset_prefix,
                    zsets,
                };
                floor(&redis, keys, runs, needed, Duration::from_millis(gap_ms)).await
            }
            Cmd::RabbitSeed {
                amqp,
                prefix,
                count,
                messages,
            } => rabbit_seed(&amqp, &prefix, count, messages).await,
            Cmd::AmqpDeclare {
                amqp,
                prefix,
                count,
                channels,
                runs,
                gap_ms,
            } => amqp_declare(&amqp, &prefix, count, channels, runs, gap_ms).await,
        }
    });
    println!("{out}");
}

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Percentiles (nearest rank) of latencies in microseconds, as ms.
fn summary(mut us: Vec<u64>) -> serde_json::Value {
    us.sort_unstable();
    let pick = |p: f64| -> f64 {
        if us.is_empty() {
            return f64::NAN;
        }
        let rank = ((p / 100.0) * us.len() as f64).ceil() as usize;
        us[rank.clamp(1, us.len()) - 1] as f64 / 1000.0
    };
    json!({
        "n": us.len(),
        "p50_ms": pick(50.0),
        "p90_ms": pick(90.0),
        "p99_ms": pick(99.0),
        "max_ms": pick(100.0),
        "min_ms": us.first().map(|v| *v as f64 / 1000.0),
    })
}

async fn http(url: &str, concurrency: usize, duration: Duration, gzip: bool) -> serde_json::Value {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(concurrency)
        .timeout(Duration::from_secs(30))
        .build()
        .expect("http client");
    let encoding = if gzip { "gzip" } else { "identity" };
    let started = Instant::now();
    let deadline = started + duration;
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| {
            let client = client.clone();
            let url = url.to_string();
            tokio::spawn(async move {
                let mut lat = Vec::new();
                let (mut errors, mut bytes, mut gzipped) = (0u64, 0usize, 0u64);
                while Instant::now() < deadline {
                    let t = Instant::now();
                    let resp = client
                        .get(&url)
                        .header("accept-encoding", encoding)
                        .send()
                        .await;
                    let ok = match resp {
                        Ok(mut r) if r.status().is_success() => {
                            let gz = r
                                .headers()
                                .get("content-encoding")
                                .is_some_and(|v| v == "gzip");
                            // Every byte is received, counted and dropped, as
                            // it arrives: gathering a 2.5 MB body into one
                            // buffer (`bytes()`) cost this client more CPU
                            // than the server spent sending it, on the same
                            // two cores.
                            let mut received = 0usize;
                            let complete = loop {
                                match r.chunk().await {
                                    Ok(Some(chunk)) => received += chunk.len(),
                                    Ok(None) => break true,
                                    Err(_) => break false,
                                }
                            };
                            if complete {
                                bytes = received;
                                gzipped += u64::from(gz);
                            }
                            complete
                        }
                        _ => false,
                    };
                    if ok {
                        lat.push(t.elapsed().as_micros() as u64);
                    } else {
                        errors += 1;
                    }
                }
                (lat, errors, bytes, gzipped)
            })
        })
        .collect();
    let mut all = Vec::new();
    let (mut errors, mut bytes, mut gzipped) = (0, 0, 0);
    for t in tasks {
        let (lat, e, b, g) = t.await.expect("scraper task");
        all.extend(lat);
        errors += e;
        bytes = bytes.max(b);
        gzipped += g;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let n = all.len();
    json!({
        "requests": n,
        "errors": errors,
        "seconds": elapsed,
        "rps": n as f64 / elapsed,
        "body_bytes": bytes,
        "gzip_responses": gzipped,
        "latency": summary(all),
    })
}

/// Distinct trigger metadata maps over the exporter's queues. Even maps
/// name one queue exactly; odd maps use a brace glob over a group of queues
/// (`{a,b,c,d}`), so that together they cover every queue. Modes and
/// operations vary; when there are more maps than queues, `value` keeps
/// them distinct.
fn trigger_maps(
    list_prefix: &str,
    lists: usize,
    zset_prefix: &str,
    zsets: usize,
    maps: usize,
) -> Vec<HashMap<String, String>> {
    let names: Vec<(String, bool)> = (0..lists)
        .map(|i| (format!("{list_prefix}{i}"), false))
        .chain((0..zsets).map(|i| (format!("{zset_prefix}{i}"), true)))
        .collect();
    assert!(!names.is_empty(), "no queues");
    (0..maps)
        .map(|m| {
            let group: Vec<&(String, bool)> = if names.len() >= maps {
                names.iter().skip(m).step_by(maps).collect()
            } else {
                vec![&names[m % names.len()]]
            };
            let mut meta = HashMap::new();
            let (first, is_zset) = group[0];
            if m % 2 == 0 || group.len() == 1 {
                let modes: &[&str] = if *is_zset {
                    &["QueueLength", "Ready", "Scheduled", "Age"]
                } else {
                    &["QueueLength", "Ready"]
                };
                meta.insert("queue".into(), first.clone());
                meta.insert("mode".into(), modes[(m / 2) % modes.len()].into());
            } else {
                let alts: Vec<&str> = group.iter().map(|(n, _)| n.as_str()).collect();
                meta.insert("queue".into(), format!("{{{}}}", alts.join(",")));
                meta.insert(
                    "mode".into(),
                    ["QueueLength", "Ready"][(m / 2) % 2].to_string(),
                );
                meta.insert("operation".into(), ["sum", "max", "avg"][m % 3].to_string());
            }
            let value = if names.len() >= maps { 5 } else { 5 + m };
            meta.insert("value".into(), value.to_string());
            meta.insert("scalerAddress".into(), "queue-exporter.bench:9732".into());
            meta
        })
        .collect()
}

async fn connect(addr: &str) -> ExternalScalerClient<Channel> {
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .expect("endpoint")
        .connect_timeout(Duration::from_secs(5))
        .tcp_nodelay(true)
        .connect()
        .await
        .expect("connect to the scaler");
    ExternalScalerClient::new(channel)
}

fn object(i: usize, meta: &HashMap<String, String>) -> ScaledObjectRef {
    ScaledObjectRef {
        name: format!("worker-{i}"),
        namespace: "bench".into(),
        scaler_metadata: meta.clone(),
    }
}

async fn grpc(
    addr: &str,
    maps: Vec<HashMap<String, String>>,
    connections: usize,
    concurrency: usize,
    warmup: Duration,
    duration: Duration,
) -> serde_json::Value {
    let mut clients = Vec::new();
    for _ in 0..connections.max(1) {
        clients.push(connect(addr).await);
    }
    // KEDA asks GetMetricSpec once per ScaledObject, then GetMetrics with
    // that name.
    let mut requests = Vec::with_capacity(maps.len());
    let mut spec_errors = BTreeMap::<String, u64>::new();
    for (i, meta) in maps.iter().enumerate() {
        match clients[0].get_metric_spec(object(i, meta)).await {
            Ok(r) => {
                let name = r
                    .into_inner()
                    .metric_specs
                    .first()
                    .map(|s| s.metric_name.clone())
                    .unwrap_or_default();
                requests.push(GetMetricsRequest {
                    scaled_object_ref: Some(object(i, meta)),
                    metric_name: name,
                });
            }
            Err(s) => {
                *spec_errors.entry(format!("{:?}", s.code())).or_default() += 1;
                if spec_errors.values().sum::<u64>() == 1 {
                    eprintln!("GetMetricSpec {meta:?}: {s}");
                }
            }
        }
    }
    assert!(!requests.is_empty(), "every GetMetricSpec failed");
    let requests = Arc::new(requests);
    let start = Instant::now() + warmup;
    let deadline = start + duration;
    let tasks: Vec<_> = (0..concurrency.max(1))
        .map(|t| {
            let mut client = clients[t % clients.len()].clone();
            let requests = requests.clone();
            tokio::spawn(async move {
                let mut lat = Vec::new();
                let mut errors = BTreeMap::<String, u64>::new();
                let mut warm = 0u64;
                let mut n = t * 7919;
                loop {
                    let now = Instant::now();
                    if now >= deadline {
                        break;
                    }
                    let req = requests[n % requests.len()].clone();
                    n += 1;
                    let r = client.get_metrics(req).await;
                    if now < start {
                        warm += 1;
                        continue;
                    }
                    match r {
                        Ok(resp) if !resp.get_ref().metric_values.is_empty() => {
                            lat.push(now.elapsed().as_micros() as u64)
                        }
                        Ok(_) => *errors.entry("EMPTY".into()).or_default() += 1,
                        Err(s) => *errors.entry(format!("{:?}", s.code())).or_default() += 1,
                    }
                }
                (lat, errors, warm)
            })
        })
        .collect();
    let mut all = Vec::new();
    let mut errors = BTreeMap::<String, u64>::new();
    let mut warmup_requests = 0;
    for t in tasks {
        let (lat, e, w) = t.await.expect("client task");
        all.extend(lat);
        warmup_requests += w;
        for (k, v) in e {
            *errors.entry(k).or_default() += v;
        }
    }
    let n = all.len();
    json!({
        "maps": maps.len(),
        "spec_errors": spec_errors,
        "connections": clients.len(),
        "concurrency": concurrency,
        "requests": n,
        "warmup_requests": warmup_requests,
        "errors": errors,
        "seconds": duration.as_secs_f64(),
        "rps": n as f64 / duration.as_secs_f64(),
        "latency": summary(all),
    })
}

/// Small deterministic pseudo-random numbers (xorshift).
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

async fn push(
    addr: &str,
    redis_url: &str,
    key: &str,
    trials: usize,
    poll_ms: u64,
) -> serde_json::Value {
    let redis = redis::Client::open(redis_url).expect("redis url");
    let mut conn = redis
        .get_multiplexed_async_connection()
        .await
        .expect("redis connection");
    let mut client = connect(addr).await;
    let mut meta = HashMap::new();
    meta.insert("queue".to_string(), key.to_string());
    meta.insert("mode".to_string(), "QueueLength".to_string());
    let obj = object(0, &meta);
    let _: () = redis::cmd("DEL")
        .arg(key)
        .query_async(&mut conn)
        .await
        .expect("DEL");
    wait_inactive(&mut client, &obj).await;
    let mut stream = client
        .stream_is_active(obj.clone())
        .await
        .expect("StreamIsActive")
        .into_inner();
    let poll = Duration::from_millis(poll_ms);
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut lat = Vec::new();
    let mut timeouts = 0;
    for _ in 0..trials {
        let _: () = redis::cmd("DEL")
            .arg(key)
            .query_async(&mut conn)
            .await
            .expect("DEL");
        wait_inactive(&mut client, &obj).await;
        // One more poll so the stream has seen the queue inactive, then a
        // random phase against the poll ticks.
        tokio::time::sleep(poll + Duration::from_millis(rng.below(poll_ms))).await;
        let t = Instant::now();
        let _: () = redis::cmd("RPUSH")
            .arg(key)
            .arg("job")
            .query_async(&mut conn)
            .await
            .expect("RPUSH");
        match tokio::time::timeout(Duration::from_secs(5), stream.message()).await {
            Ok(Ok(Some(m))) if m.result => lat.push(t.elapsed().as_micros() as u64),
            Ok(Ok(Some(_))) => timeouts += 1,
            Ok(other) => panic!("StreamIsActive ended: {other:?}"),
            Err(_) => timeouts += 1,
        }
    }
    let _: () = redis::cmd("DEL")
        .arg(key)
        .query_async(&mut conn)
        .await
        .expect("DEL");
    let samples: Vec<f64> = lat.iter().map(|u| *u as f64 / 1000.0).collect();
    json!({
        "trials": trials,
        "missed": timeouts,
        "poll_ms": poll_ms,
        "samples_ms": samples,
        "latency": summary(lat),
    })
}

async fn wait_inactive(client: &mut ExternalScalerClient<Channel>, obj: &ScaledObjectRef) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(r) = client.is_active(obj.clone()).await
            && !r.into_inner().result
        {
            return;
        }
        assert!(Instant::now() < deadline, "queue never read inactive");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The keys a floor round reads: `{list_prefix}{i}` and `{zset_prefix}{i}`.
struct FloorKeys<'a> {
    list_prefix: &'a str,
    lists: usize,
    zset_prefix: &'a str,
    zsets: usize,
}

async fn floor(
    url: &str,
    FloorKeys {
        list_prefix,
        lists,
        zset_prefix,
        zsets,
    }: FloorKeys<'_>,
    runs: usize,
    needed: bool,
    gap: Duration,
) -> serde_json::Value {
    let client = redis::Client::open(url).expect("redis url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("redis connection");
    let keys: Vec<(String, bool)> = (0..lists)
        .map(|i| (format!("{list_prefix}{i}"), false))
        .chain((0..zsets).map(|i| (format!("{zset_prefix}{i}"), true)))
        .collect();
    let mut times = Vec::new();
    let mut items = 0;
    let mut commands = 0;
    for run in 0..runs {
        if run > 0 {
            tokio::time::sleep(gap).await;
        }
        let t = Instant::now();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_secs_f64();
        items = 0;
        commands = 0;
        for chunk in keys.chunks(1000) {
            let mut p = redis::pipe();
            for (k, zset) in chunk {
                p.cmd(if *zset { "ZCARD" } else { "LLEN" }).arg(k);
                if *zset && needed {
                    p.cmd("ZRANGE")
                        .arg(k)
                        .arg(0)
                        .arg(0)
                        .arg("WITHSCORES")
                        .ignore();
                    p.cmd("ZCOUNT")
                        .arg(k)
                        .arg(format!("({now:.3}"))
                        .arg("+inf")
                        .ignore();
                    commands += 2;
                }
                commands += 1;
            }
            let sizes: Vec<u64> = p.query_async(&mut conn).await.expect("pipeline");
            items += sizes.iter().sum::<u64>();
        }
        times.push(ms(t.elapsed()));
    }
    json!({"keys": keys.len(), "items": items, "commands": commands, "runs_ms": times})
}

async fn amqp_connect(url: &str) -> lapin::Connection {
    lapin::Connection::connect(url, lapin::ConnectionProperties::default())
        .await
        .expect("AMQP connection")
}

async fn rabbit_seed(url: &str, prefix: &str, count: usize, messages: usize) -> serde_json::Value {
    let started = Instant::now();
    let conn = amqp_connect(url).await;
    let next = AtomicUsize::new(0);
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    let worker = || async {
        let ch = conn.create_channel().await.expect("channel");
        ch.confirm_select(lapin::options::ConfirmSelectOptions::default())
            .await
            .expect("confirm.select");
        let mut confirms = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= count {
                break;
            }
            let name = format!("{prefix}{i}");
            ch.queue_declare(
                name.as_str().into(),
                lapin::options::QueueDeclareOptions::durable(),
                lapin::types::FieldTable::default(),
            )
            .await
            .expect("queue.declare");
            for j in 0..messages {
                let props = lapin::BasicProperties::default()
                    .with_delivery_mode(2)
                    .with_timestamp(stamp);
                confirms.push(
                    ch.basic_publish(
                        "".into(),
                        name.as_str().into(),
                        lapin::options::BasicPublishOptions::default(),
                        format!("{{\"job\":{j}}}").as_bytes(),
                        props,
                    )
                    .await
                    .expect("publish"),
                );
            }
        }
        for c in confirms {
            c.await.expect("confirm");
        }
    };
    join_all((0..8).map(|_| worker())).await;
    let _ = conn.close(200, "seeded".into()).await;
    json!({"queues": count, "messages": count * messages, "seconds": started.elapsed().as_secs_f64()})
}

async fn amqp_declare(
    url: &str,
    prefix: &str,
    count: usize,
    channels: usize,
    runs: usize,
    gap_ms: u64,
) -> serde_json::Value {
    let conn = amqp_connect(url).await;
    let mut chans = Vec::new();
    for _ in 0..channels.max(1) {
        chans.push(conn.create_channel().await.expect("channel"));
    }
    let names: Vec<String> = (0..count).map(|i| format!("{prefix}{i}")).collect();
    let mut times = Vec::new();
    let mut ready_total = 0u64;
    for _ in 0..runs {
        tokio::time::sleep(Duration::from_millis(gap_ms)).await;
        let next = AtomicUsize::new(0);
        let t = Instant::now();
        let counts = join_all(chans.iter().map(|ch| {
            let names = &names;
            let next = &next;
            async move {
                let mut ready = 0u64;
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(name) = names.get(i) else {
                        break ready;
                    };
                    let q = ch
                        .queue_declare(
                            name.as_str().into(),
                            lapin::options::QueueDeclareOptions {
                                passive: true,
                                ..Default::default()
                            },
                            lapin::types::FieldTable::default(),
                        )
                        .await
                        .expect("passive queue.declare");
                    ready += u64::from(q.message_count());
                }
            }
        }))
        .await;
        times.push(ms(t.elapsed()));
        ready_total = counts.iter().sum();
    }
    let _ = conn.close(200, "done".into()).await;
    json!({"queues": count, "ready": ready_total, "runs_ms": times})
}
