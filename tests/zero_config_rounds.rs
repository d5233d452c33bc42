//! Zero config's discovery rounds (issue 26, "Cost"), against a private
//! redis-server per test: the first (full) round makes one untyped SCAN
//! pass and asks `TYPE` of every name; a later round makes the pass alone
//! and asks `TYPE` only of the names it has not seen and of the queue
//! keys; what it finds is what a full round finds, as keys come, go and
//! change type; and where Redis refuses `TYPE`, every round is a full one
//! by typed passes, which need only SCAN.
mod reliability_support;
mod support;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

use queue_exporter::sources::Source;
use queue_exporter::sources::redis::RedisSource;
use reliability_support::*;
use support::*;

/// A zero-config source over `url` that scans 100 keys per call.
fn zero_config_source(url: &str) -> RedisSource {
    zero_config_redis_source(url, "")
}

/// The keyspace: 3,000 strings and a hash (no queue), three plain queue
/// keys, and a Sidekiq queue (its `queues` registry and its list).
fn write_keyspace(redis: &RedisServer) {
    let mut c = redis.conn();
    let mut pipe = redis::pipe();
    for i in 0..3000 {
        pipe.cmd("SET").arg(format!("cache:{i}")).arg("v").ignore();
    }
    pipe.cmd("HSET").arg("user:1").arg("name").arg("x").ignore();
    pipe.cmd("RPUSH").arg("tasks").arg("a").ignore();
    pipe.cmd("ZADD").arg("later").arg(1).arg("x").ignore();
    pipe.cmd("XADD")
        .arg("events")
        .arg("*")
        .arg("f")
        .arg("1")
        .ignore();
    pipe.cmd("SADD").arg("queues").arg("default").ignore();
    pipe.cmd("LPUSH").arg("queue:default").arg("job").ignore();
    pipe.query::<()>(&mut c).expect("write the keyspace");
}

/// SCAN calls one untyped pass over the keyspace makes at COUNT 100.
fn scan_calls_of_one_pass(redis: &RedisServer) -> u64 {
    let mut c = redis.conn();
    let (mut cursor, mut calls) = (0u64, 0);
    loop {
        let (next, _): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("COUNT")
            .arg(100)
            .query(&mut c)
            .expect("SCAN");
        calls += 1;
        if next == 0 {
            return calls;
        }
        cursor = next;
    }
}

/// Whether `scans` SCAN calls make one pass over the keyspace as it is
/// now. A pass's call count moves by a call or two as keys come and go
/// (and while Redis rehashes its table), so one pass is counted within two
/// calls of a pass measured now; two passes or more are 20 calls more.
fn is_one_pass(redis: &RedisServer, scans: u64) -> bool {
    scans.abs_diff(scan_calls_of_one_pass(redis)) <= 2
}

/// What one forced discovery round and its poll cost Redis: SCAN and TYPE
/// calls.
struct Round {
    scans: u64,
    types: u64,
}

async fn round(redis: &RedisServer, source: &mut RedisSource) -> Round {
    redis.reset_stats();
    source.rediscover();
    source.poll().await.expect("poll");
    let stats = redis.commandstats();
    let calls = |c: &str| stats.get(c).map_or(0, |s| s.0);
    Round {
        scans: calls("scan"),
        types: calls("type"),
    }
}

/// The plain keys tracked.
fn plain(source: &RedisSource) -> BTreeSet<String> {
    source.tracked().iter().map(|k| k.name.clone()).collect()
}

/// The plain keys and the library queues a fresh source's first (full)
/// round finds, as (name, preset) pairs, with their depths.
async fn full_round_finds(url: &str) -> Found {
    let mut fresh = zero_config_source(url);
    let out = fresh.poll().await.expect("first poll");
    samples(&out.queues)
}

/// Each queue as (name, preset, depth or the preset's states).
type Found = BTreeSet<(String, String, String)>;

fn samples(queues: &[queue_exporter::snapshot::QueueSample]) -> Found {
    queues
        .iter()
        .map(|q| match &q.preset {
            Some(p) => (
                q.name.clone(),
                format!("{:?}", p.preset),
                format!("{:?}", p.states),
            ),
            None => (q.name.clone(), String::new(), format!("{:?}", q.depth)),
        })
        .collect()
}

fn names(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_first_round_a_round_is_one_scan_pass_and_type_of_the_queue_keys() {
    let redis = RedisServer::start();
    write_keyspace(&redis);
    let pass = scan_calls_of_one_pass(&redis);
    assert!(pass >= 20, "{pass} SCAN calls a pass");
    let mut source = zero_config_source(&redis.url);

    // The first round is a full one: one pass, and TYPE of every name
    // (3,000 strings, a hash, the registry, four queue keys).
    redis.reset_stats();
    let out = source.poll().await.expect("first poll");
    let first = redis.commandstats();
    let calls = |c: &str| first.get(c).map_or(0, |s| s.0);
    assert!(is_one_pass(&redis, calls("scan")), "{first:?}");
    assert_eq!(calls("type"), 3006, "{first:?}");
    assert_eq!(plain(&source), names(&["events", "later", "tasks"]));
    let found = samples(&out.queues);

    // The next: one pass, and TYPE of the four queue keys alone (not of
    // the 3,001 strings and hashes it remembers, nor of the registry).
    let r = round(&redis, &mut source).await;
    assert!(is_one_pass(&redis, r.scans), "{} SCAN calls", r.scans);
    assert_eq!(r.types, 4);
    assert_eq!(plain(&source), names(&["events", "later", "tasks"]));
    let out = source.poll().await.expect("poll");
    assert_eq!(samples(&out.queues), found, "what a full round finds");
    // Counted by kind (`queue_exporter_discovery_rounds_total`).
    let rounds = out
        .stats
        .discovery_rounds
        .expect("a Redis source counts rounds");
    assert_eq!((rounds.full, rounds.remembered), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_that_come_go_and_change_type_are_found_as_a_full_round_finds_them() {
    let redis = RedisServer::start();
    write_keyspace(&redis);
    let mut source = zero_config_source(&redis.url);
    source.poll().await.expect("first poll");

    // New names: one TYPE each.
    redis.run::<()>(&[b"RPUSH", b"fresh", b"a", b"b"]);
    redis.run::<()>(&[b"SET", b"cache:new", b"v"]);
    let r = round(&redis, &mut source).await;
    assert!(is_one_pass(&redis, r.scans), "{} SCAN calls", r.scans);
    assert_eq!(r.types, 4 + 2);
    assert_eq!(
        plain(&source),
        names(&["events", "fresh", "later", "tasks"])
    );

    // A queue key that becomes a string is no longer a queue.
    redis.run::<()>(&[b"DEL", b"tasks"]);
    redis.run::<()>(&[b"SET", b"tasks", b"v"]);
    round(&redis, &mut source).await;
    assert_eq!(plain(&source), names(&["events", "fresh", "later"]));

    // A string that is gone at a round, then comes back as a list.
    redis.run::<()>(&[b"DEL", b"cache:5"]);
    round(&redis, &mut source).await;
    redis.run::<()>(&[b"RPUSH", b"cache:5", b"a"]);
    let r = round(&redis, &mut source).await;
    assert!(is_one_pass(&redis, r.scans), "{} SCAN calls", r.scans);
    assert_eq!(
        plain(&source),
        names(&["cache:5", "events", "fresh", "later"])
    );

    // A list named like a library's mark is a plain list, round after
    // round.
    redis.run::<()>(&[b"RPUSH", b"_kombu.binding.fake", b"x"]);
    for _ in 0..2 {
        round(&redis, &mut source).await;
        assert!(plain(&source).contains("_kombu.binding.fake"));
    }
    redis.run::<()>(&[b"DEL", b"_kombu.binding.fake"]);

    // A library queue that appears: its list is the library's, not plain.
    redis.run::<()>(&[b"SADD", b"queues", b"mail"]);
    redis.run::<()>(&[b"LPUSH", b"queue:mail", b"j1", b"j2"]);
    round(&redis, &mut source).await;
    let out = source.poll().await.expect("poll");
    assert_eq!(
        plain(&source),
        names(&["cache:5", "events", "fresh", "later"])
    );
    assert_eq!(samples(&out.queues), full_round_finds(&redis.url).await);
    let mail = out.queues.iter().find(|q| q.name == "mail").expect("mail");
    let facts = mail.preset.as_ref().expect("a Sidekiq queue");
    assert_eq!(facts.states.values().flatten().sum::<u64>(), 2, "{facts:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn where_redis_refuses_type_every_round_is_a_full_one_and_finds_the_same() {
    let redis = RedisServer::start();
    write_keyspace(&redis);
    let pass = scan_calls_of_one_pass(&redis);
    let url = redis.acl_user(
        "scanner",
        "pw",
        &["-@all", "+@read", "+@connection", "-type", "~*"],
    );
    let mut source = zero_config_source(&url);

    // The first round makes its pass, is refused TYPE, and makes the typed
    // passes instead; what it reports is right, and no error is counted.
    redis.reset_stats();
    let out = source.poll().await.expect("first poll");
    assert!(out.partial_errors.is_empty(), "{:?}", out.partial_errors);
    let scans = redis.commandstats().get("scan").map_or(0, |s| s.0);
    assert!(scans + 10 >= 5 * pass, "{scans} SCAN calls, a pass {pass}");
    assert_eq!(plain(&source), names(&["events", "later", "tasks"]));
    assert!(acl_log_count(&redis) > 0, "TYPE was asked and refused");

    // From then on, typed passes only: nothing more is asked of TYPE, and
    // a new key is found.
    redis.run::<()>(&[b"RPUSH", b"fresh", b"a"]);
    let pass = scan_calls_of_one_pass(&redis);
    let refused_before = acl_log_count(&redis);
    let r = round(&redis, &mut source).await;
    assert!(
        r.scans + 8 >= 4 * pass && r.scans <= 4 * pass + 8,
        "{} SCAN calls, a pass {pass}",
        r.scans
    );
    assert_eq!(acl_log_count(&redis), refused_before, "TYPE asked again");
    assert_eq!(
        plain(&source),
        names(&["events", "fresh", "later", "tasks"])
    );
}

/// BullMQ's `obliterate` (or any library removing a queue) may delete a
/// queue's keys after a scan typed them and before it read the queue's
/// `meta`: the round then sees a list and a stream no mark claims. The
/// round types those keys of the queues it polled again, so what was
/// deleted is dropped, never tracked as an empty plain queue until the
/// next scan. Made certain here: the source reads Redis through a proxy
/// that holds each request 300 ms, and the queue is deleted the moment
/// MONITOR shows the round's `TYPE` of its list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_library_queue_deleted_while_a_scan_runs_leaves_no_plain_key_behind() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    let mut pipe = redis::pipe();
    pipe.cmd("HSET")
        .arg("bull:gone:meta")
        .arg("version")
        .arg("bullmq:5.0.0")
        .ignore();
    pipe.cmd("LPUSH").arg("bull:gone:wait").arg("1").ignore();
    pipe.cmd("XADD")
        .arg("bull:gone:events")
        .arg("*")
        .arg("event")
        .arg("added")
        .ignore();
    pipe.cmd("RPUSH").arg("tasks").arg("a").ignore();
    pipe.query::<()>(&mut c).expect("write the keyspace");
    let proxy = Proxy::start(&format!("127.0.0.1:{}", redis.port)).await;
    let mut source = zero_config_redis_source(
        &format!("redis://127.0.0.1:{}", proxy.port),
        "    discovery_interval: 10ms\n    keyspace_scan_interval: 0s\n    timeout: 10s\n",
    );
    source.poll().await.expect("first poll");
    let recognised = |out: &queue_exporter::sources::PollOutput| {
        out.queues
            .iter()
            .any(|q| q.name == "gone" && q.preset.is_some())
    };
    assert_eq!(plain(&source), names(&["tasks"]));

    // From now on each request reaches Redis 300 ms late: a round's marks
    // are read 300 ms after its `TYPE`s.
    // MONITOR read raw: a read that times out loses nothing.
    let mut monitor = std::net::TcpStream::connect(("127.0.0.1", redis.port)).expect("connect");
    monitor.write_all(b"MONITOR\r\n").expect("MONITOR");
    monitor
        .set_read_timeout(Some(Duration::from_millis(100)))
        .expect("timeout");
    proxy.set(ProxyMode::SlowRequests(Duration::from_millis(300)));
    let deleter = std::thread::spawn(move || {
        let typed = br#""TYPE" "bull:gone:wait""#;
        let (mut seen, mut buf) = (Vec::new(), [0u8; 4096]);
        let waiting = Instant::now();
        while !seen.windows(typed.len()).any(|w| w == typed) {
            assert!(
                waiting.elapsed() < Duration::from_secs(60),
                "no round typed bull:gone:wait in 60 s"
            );
            if let Ok(n) = monitor.read(&mut buf) {
                seen.extend_from_slice(&buf[..n]);
            }
        }
        redis::cmd("DEL")
            .arg("bull:gone:wait")
            .arg("bull:gone:events")
            .arg("bull:gone:meta")
            .query::<u64>(&mut c)
            .expect("DEL");
    });
    let rounds = |out: &queue_exporter::sources::PollOutput| {
        out.stats
            .discovery_rounds
            .as_ref()
            .map_or(0, |r| r.full + r.remembered + r.libraries)
    };
    let mut phantoms = BTreeSet::new();
    let mut poll = async |phantoms: &mut BTreeSet<String>| {
        let out = source.poll().await;
        phantoms.extend(plain(&source).into_iter().filter(|k| k != "tasks"));
        out
    };
    let deadline = Instant::now() + Duration::from_secs(90);
    while !deleter.is_finished() {
        assert!(Instant::now() < deadline, "the queue never deleted");
        let _ = poll(&mut phantoms).await;
    }
    deleter.join().expect("the queue deleted");
    // Until two rounds more have landed, so one began after the deletion.
    let mut after = None;
    let out = loop {
        assert!(Instant::now() < deadline, "no round after the deletion");
        let Ok(out) = poll(&mut phantoms).await else {
            continue;
        };
        let done = rounds(&out);
        if done >= *after.get_or_insert(done) + 2 {
            break out;
        }
    };
    assert!(!recognised(&out), "the queue still reported");
    assert!(
        phantoms.is_empty(),
        "deleted keys tracked as plain: {phantoms:?}"
    );
    assert_eq!(plain(&source), names(&["tasks"]));
}
