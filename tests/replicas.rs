//! Two replicas of the exporter behind one headless Service: KEDA
//! round-robins its calls over them, so the HPA hears each replica in turn
//! and acts on any difference beyond its 10 % tolerance. These tests run
//! two real exporters on one Redis under traffic (producers push at now,
//! a worker takes the oldest) and ask both the same question at the same
//! moment, and check what a client balancing over both hears when the one
//! it talks to dies.
mod scaler_common;
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use scaler_common::*;
use support::*;

/// The queue: a zset of jobs scored by their enqueue time, and the
/// producers' `INCR`ed total.
fn config(url: &str) -> String {
    format!(
        "listen: {{ grpc: 127.0.0.1:0 }}\nsources:\n  - name: main\n    type: redis\n    url: {url}\n    poll_interval: 500ms\n    queues:\n      - key: work\n        score: timestamp\n        counters: {{ enqueued: work:enqueued }}\n"
    )
}

/// Runs a producer (Poisson arrivals at a rate moving between 20 and 60
/// jobs/s, with a burst of 40 jobs every 7 s) and a worker taking the
/// oldest job 35 times a second, until `stop`.
fn traffic(url: String, stop: Arc<AtomicBool>) -> Vec<std::thread::JoinHandle<()>> {
    let producer = {
        let (url, stop) = (url.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
            // A fixed-seed LCG: the same traffic every run.
            let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
            let mut uniform = move || {
                seed = seed
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                ((seed >> 11) as f64 + 1.0) / (1u64 << 53) as f64
            };
            let start = Instant::now();
            let mut id = 0u64;
            let mut next_burst = 7.0;
            while !stop.load(Ordering::Relaxed) {
                let t = start.elapsed().as_secs_f64();
                let rate = 40.0 + 20.0 * (t / 5.0).sin();
                let burst = if t >= next_burst {
                    next_burst += 7.0;
                    40
                } else {
                    1
                };
                for _ in 0..burst {
                    id += 1;
                    let _: () = redis::pipe()
                        .zadd("work", id, wall())
                        .incr("work:enqueued", 1)
                        .query(&mut c)
                        .unwrap();
                }
                std::thread::sleep(Duration::from_secs_f64(-uniform().ln() / rate));
            }
        })
    };
    let worker = std::thread::spawn(move || {
        let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
        while !stop.load(Ordering::Relaxed) {
            let _: Vec<String> = redis::cmd("ZPOPMIN").arg("work").query(&mut c).unwrap();
            std::thread::sleep(Duration::from_secs_f64(1.0 / 35.0));
        }
    });
    vec![producer, worker]
}

/// Whether `a` and `b` are within `tolerance` of each other, relative to
/// the larger.
fn agree(a: f64, b: f64, tolerance: f64) -> bool {
    let scale = a.abs().max(b.abs());
    scale == 0.0 || (a - b).abs() <= tolerance * scale
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_started_apart_answer_within_the_hpa_tolerance_of_each_other() {
    let redis = RedisServer::start();
    let stop = Arc::new(AtomicBool::new(false));
    let threads = traffic(redis.url.clone(), stop.clone());
    let a = TestApp::start(&config(&redis.url)).await;
    // Pods start apart.
    tokio::time::sleep(Duration::from_millis(370)).await;
    let b = TestApp::start(&config(&redis.url)).await;
    let (mut ca, mut cb) = (client(&a).await, client(&b).await);
    let modes: [&[(&str, &str)]; 5] = [
        &[("queue", "work")],
        &[("queue", "work"), ("mode", "Age")],
        &[
            ("queue", "work"),
            ("mode", "PublishRate"),
            ("window", "10s"),
        ],
        &[
            ("queue", "work"),
            ("mode", "WaitTime"),
            ("targetWait", "2s"),
            ("processingTime", "100ms"),
            ("window", "10s"),
        ],
        // targetWait above half the reaction time: the queue term, whose
        // answers below 10 replicas may be whole replicas rounded down.
        &[
            ("queue", "work"),
            ("mode", "WaitTime"),
            ("targetWait", "60s"),
            ("processingTime", "400ms"),
            ("window", "10s"),
        ],
    ];
    // Rates need readings spanning their window in both.
    tokio::time::sleep(Duration::from_secs(11)).await;
    let mut asked = [0usize; 5];
    let mut agreed = [0usize; 5];
    let mut whole = 0usize;
    let until = Instant::now() + Duration::from_secs(30);
    while Instant::now() < until {
        for (i, pairs) in modes.iter().enumerate() {
            // As KEDA's round robin would: the same question to each, at once.
            let (ra, rb) = tokio::join!(metrics(&mut ca, pairs), metrics(&mut cb, pairs));
            let (va, vb) = (ra.unwrap().1, rb.unwrap().1);
            asked[i] += 1;
            if i == 4 && va.fract() == 0.0 && va > 0.0 {
                whole += 1;
            }
            if agree(va, vb, 0.10) {
                agreed[i] += 1;
            } else {
                eprintln!("{pairs:?}: {va} vs {vb}");
            }
        }
        tokio::time::sleep(Duration::from_millis(97)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    for (i, pairs) in modes.iter().enumerate() {
        let share = agreed[i] as f64 / asked[i] as f64;
        println!(
            "{:?}: {}/{} simultaneous answers within 10 % ({:.1} %)",
            pairs[1..].first().map_or("QueueLength", |p| p.1),
            agreed[i],
            asked[i],
            share * 100.0
        );
        assert!(share >= 0.99, "{pairs:?}: {share}");
    }
    // The queue term's rounding to whole replicas was exercised, not only
    // its continuous answers.
    println!("queue term: {whole}/{} answers whole replicas", asked[4]);
    assert!(whole * 10 >= asked[4], "{whole} of {}", asked[4]);
    a.stop().await;
    b.stop().await;
}

/// A client that balances over replicas as KEDA's gRPC client does
/// (grpc-go's `round_robin` over the addresses a headless Service's name
/// resolves to, KEDA ≥ 2.13): calls go round robin over the connections
/// that are ready; one whose call failed to reach its replica is in
/// transient failure, reconnected in the background (grpc-go's backoff
/// starts at 1 s) and picked again only once it connects.
struct RoundRobin {
    /// One client per replica, its address, and while it is in transient
    /// failure, when to try connecting again.
    replicas: Vec<(Client, std::net::SocketAddr, Option<Instant>)>,
    /// The next replica to pick.
    next: usize,
}

impl RoundRobin {
    /// Calls `GetMetrics` on the next ready replica; returns which one
    /// answered (or failed) and the answer.
    async fn metrics(&mut self, pairs: &[(&str, &str)]) -> (usize, Result<f64, tonic::Status>) {
        // Background reconnects, as grpc-go's subchannels make them.
        for (_, addr, failed) in &mut self.replicas {
            if failed.is_some_and(|retry| retry <= Instant::now()) {
                *failed = match tokio::net::TcpStream::connect(*addr).await {
                    Ok(_) => None,
                    Err(_) => Some(Instant::now() + Duration::from_secs(1)),
                };
            }
        }
        let n = self.replicas.len();
        let pick = (0..n)
            .map(|k| (self.next + k) % n)
            .find(|&i| self.replicas[i].2.is_none())
            .unwrap_or(self.next % n);
        self.next = pick + 1;
        let answer = metrics(&mut self.replicas[pick].0, pairs)
            .await
            .map(|(_, v)| v);
        // A call that did not reach the replica (connection refused or
        // reset) carries no metadata, unlike an answer of the scaler's.
        if answer.as_ref().is_err_and(|e| e.metadata().is_empty()) {
            self.replicas[pick].2 = Some(Instant::now() + Duration::from_secs(1));
        }
        (pick, answer)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn when_a_replica_dies_the_other_answers_at_once_and_nothing_reads_zero() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    for i in 0..7 {
        rcmd(
            &mut c,
            &["ZADD", "work", &wall().to_string(), &i.to_string()],
        );
    }
    let a = TestApp::start(&config(&redis.url)).await;
    let b = TestApp::start(&config(&redis.url)).await;
    let ask = [("queue", "work")];
    let (ca, cb) = (client(&a).await, client(&b).await);
    wait_value(&ca, &ask, 7.0).await;
    wait_value(&cb, &ask, 7.0).await;
    let addr = |app: &TestApp| app.app().grpc_addr.expect("gRPC enabled");
    let mut rr = RoundRobin {
        replicas: vec![(ca, addr(&a), None), (cb, addr(&b), None)],
        next: 0,
    };
    let mut a = Some(a);
    let mut answers = Vec::new();
    let mut killed_at = None;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(4) {
        if killed_at.is_none() && started.elapsed() > Duration::from_secs(1) {
            if let Some(a) = a.take() {
                a.stop().await;
            }
            killed_at = Some(Instant::now());
        }
        let (replica, answer) = rr.metrics(&ask).await;
        answers.push((Instant::now(), replica, answer));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let killed_at = killed_at.unwrap();
    // Never a number but the truth, before, during or after.
    for (_, _, answer) in &answers {
        if let Ok(v) = answer {
            assert_eq!(*v, 7.0, "{answers:?}");
        }
    }
    // Both replicas answered before; after the kill, at most the one call
    // that found replica 0 gone failed, and every later call was answered
    // by replica 1.
    let before: std::collections::BTreeSet<usize> = answers
        .iter()
        .filter(|(at, _, _)| *at < killed_at)
        .map(|(_, r, _)| *r)
        .collect();
    assert_eq!(before.len(), 2, "{answers:?}");
    let after: Vec<_> = answers
        .iter()
        .filter(|(at, _, _)| *at > killed_at)
        .collect();
    let failed = after.iter().filter(|(_, _, a)| a.is_err()).count();
    assert!(failed <= 1, "{answers:?}");
    let first_failed = after.iter().position(|(_, _, a)| a.is_err());
    assert!(
        after
            .iter()
            .skip(first_failed.map_or(0, |i| i + 1))
            .all(|(_, r, a)| *r == 1 && a.is_ok()),
        "{answers:?}"
    );
    println!(
        "{} calls after the kill: {failed} failed, then all answered by the survivor",
        after.len()
    );
    b.stop().await;
}
