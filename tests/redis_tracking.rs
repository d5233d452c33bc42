//! Reading only what changed (`client_tracking`, on by default): Redis
//! tells the source which keys were written since it read them, and a
//! poll sends nothing for the rest. Checked on private servers with
//! `INFO commandstats`: an idle queue costs no command per poll, yet every
//! write, delete, expiry, flush and restart shows on the next poll, ages
//! keep growing, and scheduled items fall due with no write at all.
mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use support::*;

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Calls per command (lower case) since the last `CONFIG RESETSTAT`.
fn commandstats(redis: &RedisServer) -> HashMap<String, u64> {
    redis
        .commandstats()
        .into_iter()
        .map(|(name, (calls, _))| (name, calls))
        .collect()
}

/// The commands a poll reads keys with.
const KEY_READS: &[&str] = &[
    "llen", "lindex", "zcard", "zrange", "zcount", "hlen", "scard", "type",
];

/// Calls of [`KEY_READS`] commands in `stats`.
fn key_reads(stats: &HashMap<String, u64>) -> u64 {
    KEY_READS
        .iter()
        .map(|c| stats.get(*c).copied().unwrap_or(0))
        .sum()
}

fn run(redis: &RedisServer, args: &[&str]) {
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    let _: redis::Value = redis.run(&args);
}

/// A source over every kind of key the poll keeps while unchanged: a list
/// with an age peek, a timestamp zset, a hash, a set, a plain zset and a
/// configured key that does not exist.
fn config(redis: &RedisServer, extra: &str) -> String {
    format!(
        r#"listen: {{ grpc: null }}
sources:
  - name: main
    type: redis
    url: {}
    poll_interval: 100ms
    age_buckets: []
{extra}
    queues:
      - pattern: "list:*"
        age: {{ end: head, field: t, unit: seconds }}
      - pattern: "due:*"
        score: timestamp
      - pattern: "other:*"
      - key: "absent"
"#,
        redis.url
    )
}

/// Six idle keys, the oldest items `age` seconds old.
fn fill(redis: &RedisServer, age: f64) {
    let t = now() - age;
    run(
        redis,
        &[
            "RPUSH",
            "list:a",
            &format!(r#"{{"t":{t:.3}}}"#),
            r#"{"t":1}"#,
        ],
    );
    run(
        redis,
        &[
            "ZADD",
            "due:a",
            &format!("{t:.3}"),
            "x",
            &format!("{:.3}", t + 1.0),
            "y",
        ],
    );
    run(redis, &["HSET", "other:h", "f1", "1", "f2", "2", "f3", "3"]);
    run(redis, &["SADD", "other:s", "m"]);
    run(redis, &["ZADD", "other:z", "1", "a", "2", "b"]);
}

const KEYS: f64 = 6.0;

#[tokio::test]
async fn an_idle_queue_costs_no_command_per_poll_and_its_age_still_grows() {
    let redis = RedisServer::start();
    fill(&redis, 100.0);
    // Kept keys are read again once per discovery_interval: not in this window.
    let app = TestApp::start(&config(&redis, "    discovery_interval: 1h")).await;
    let first = app
        .until("every key served unchanged", Duration::from_secs(10), |s| {
            s.value("queue_exporter_unchanged_keys", &[("source", "main")]) == Some(KEYS)
        })
        .await;
    assert_eq!(first.depth("list:a"), Some(2.0));
    assert_eq!(first.depth("due:a"), Some(2.0));
    assert_eq!(
        first.value("queue_messages_ready", &[("queue", "due:a")]),
        Some(2.0)
    );
    assert_eq!(
        first.value("queue_messages_scheduled", &[("queue", "due:a")]),
        Some(0.0)
    );
    assert_eq!(first.depth("other:h"), Some(3.0));
    assert_eq!(first.depth("other:s"), Some(1.0));
    assert_eq!(first.depth("other:z"), Some(2.0));
    assert_eq!(first.depth("absent"), Some(0.0));
    let list_age = first.age("list:a").expect("list age");
    let zset_age = first.age("due:a").expect("zset age");
    assert!((100.0..110.0).contains(&list_age), "{list_age}");
    assert!((100.0..110.0).contains(&zset_age), "{zset_age}");

    redis.reset_stats();
    let window = Instant::now();
    // At least 5 whole polls (one `PING` each) over at least 1.5 s: the
    // window in which no key may be read is what is tested, so the sleep
    // only tops it up to its minimum length once the polls are seen.
    app.wait_polls("main", 6, Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_millis(1500).saturating_sub(window.elapsed())).await;
    let stats = commandstats(&redis);
    let later = app.scrape().await;
    assert_eq!(key_reads(&stats), 0, "no key was read again: {stats:?}");
    assert!(
        stats.get("ping").copied().unwrap_or(0) >= 5,
        "each poll still makes one round trip: {stats:?}"
    );
    // Same values, older ages: computed from the kept timestamps.
    assert_eq!(later.depth("list:a"), Some(2.0));
    assert_eq!(later.depth("due:a"), Some(2.0));
    assert_eq!(later.depth("other:h"), Some(3.0));
    let grew = |before: f64, after: Option<f64>| {
        let after = after.expect("age");
        assert!(
            (1.2..3.0).contains(&(after - before)),
            "age grew with time: {before} -> {after}"
        );
    };
    grew(list_age, later.age("list:a"));
    grew(zset_age, later.age("due:a"));
    app.stop().await;
}

#[tokio::test]
async fn every_kind_of_change_shows_on_the_next_poll() {
    let redis = RedisServer::start();
    fill(&redis, 100.0);
    let app = TestApp::start(&config(&redis, "")).await;
    let unchanged = |n: f64| {
        move |s: &Scrape| s.value("queue_exporter_unchanged_keys", &[("source", "main")]) == Some(n)
    };
    app.until("all unchanged", Duration::from_secs(10), unchanged(KEYS))
        .await;
    let wait = Duration::from_secs(5);

    // A push and a pop at the head: new length, new oldest item.
    let t = now() - 5.0;
    run(&redis, &["RPUSH", "list:a", &format!(r#"{{"t":{t:.3}}}"#)]);
    app.wait_value("queue_depth", &[("queue", "list:a")], 3.0, wait)
        .await;
    run(&redis, &["LPOP", "list:a"]);
    let s = app
        .wait_value("queue_depth", &[("queue", "list:a")], 2.0, wait)
        .await;
    assert!(
        s.age("list:a").unwrap() > 1e9,
        "the new head's timestamp is 1"
    );

    // The zset gains a scheduled item: it is counted, and as it falls due
    // (no write) it moves from scheduled to ready.
    let soon = now() + 1.5;
    run(&redis, &["ZADD", "due:a", &format!("{soon:.3}"), "later"]);
    app.wait_value("queue_messages_scheduled", &[("queue", "due:a")], 1.0, wait)
        .await;
    let s = app
        .wait_value("queue_messages_scheduled", &[("queue", "due:a")], 0.0, wait)
        .await;
    assert_eq!(
        s.value("queue_messages_ready", &[("queue", "due:a")]),
        Some(3.0)
    );

    // A field, a member, a removed member.
    run(&redis, &["HSET", "other:h", "f4", "4"]);
    app.wait_value("queue_depth", &[("queue", "other:h")], 4.0, wait)
        .await;
    run(&redis, &["SADD", "other:s", "n"]);
    app.wait_value("queue_depth", &[("queue", "other:s")], 2.0, wait)
        .await;
    run(&redis, &["ZREM", "other:z", "a"]);
    app.wait_value("queue_depth", &[("queue", "other:z")], 1.0, wait)
        .await;

    // The configured key appears, and goes again.
    run(&redis, &["RPUSH", "absent", r#"{"t":1}"#]);
    app.wait_value("queue_depth", &[("queue", "absent")], 1.0, wait)
        .await;
    run(&redis, &["DEL", "absent"]);
    app.wait_value("queue_depth", &[("queue", "absent")], 0.0, wait)
        .await;

    // An expiry (no command touches the key): the drained queue reads 0
    // until discovery drops it, never its old depth.
    run(&redis, &["PEXPIRE", "other:s", "200"]);
    let s = app
        .until("the expired set reads 0 or is gone", wait, |s| {
            s.depth("other:s").is_none_or(|d| d == 0.0)
        })
        .await;
    assert_ne!(s.depth("other:s"), Some(2.0));

    // Everything settles back to served-unchanged (5 keys: the set is gone
    // or missing-but-tracked until discovery).
    app.until("unchanged again", wait, |s| {
        s.value("queue_exporter_unchanged_keys", &[("source", "main")])
            .is_some_and(|n| n >= KEYS - 1.0)
    })
    .await;
    app.stop().await;
}

#[tokio::test]
async fn a_flush_or_a_restart_forgets_what_was_kept() {
    let mut redis = RedisServer::start();
    fill(&redis, 100.0);
    let app = TestApp::start(&config(&redis, "")).await;
    let all_unchanged =
        |s: &Scrape| s.value("queue_exporter_unchanged_keys", &[("source", "main")]) == Some(KEYS);
    let wait = Duration::from_secs(10);
    app.until("all unchanged", wait, all_unchanged).await;

    // FLUSHDB invalidates every tracked key at once.
    run(&redis, &["FLUSHDB"]);
    app.until("the flush is seen", wait, |s| {
        s.depth("list:a").is_none_or(|d| d == 0.0) && s.depth("other:h").is_none_or(|d| d == 0.0)
    })
    .await;

    // A restart loses the data and the tracking session; new data with the
    // same keys and other sizes must be read, not served from before.
    fill(&redis, 100.0);
    app.until("refilled and unchanged", wait, |s| {
        all_unchanged(s) && s.depth("list:a") == Some(2.0)
    })
    .await;
    redis.restart();
    run(&redis, &["RPUSH", "list:a", "1", "2", "3", "4", "5"]);
    run(&redis, &["HSET", "other:h", "only", "1"]);
    let s = app
        .until(
            "the restarted server's values",
            Duration::from_secs(20),
            |s| s.depth("list:a") == Some(5.0) && s.depth("other:h") == Some(1.0),
        )
        .await;
    assert_eq!(s.source_up("main"), Some(1.0));
    app.stop().await;
}

#[tokio::test]
async fn a_server_that_refuses_tracking_is_read_in_full_on_every_poll() {
    let redis = RedisServer::start();
    fill(&redis, 100.0);
    // The least-privilege user of docs/redis.md, minus CLIENT TRACKING.
    let url = redis.acl_user("qe", "pw", &[READ_ONLY_ACL, &["-client|tracking"]].concat());
    let yaml = config(&redis, "").replace(&redis.url, &url);
    let app = TestApp::start(&yaml).await;
    let s = app
        .until("values", Duration::from_secs(10), |s| {
            s.depth("other:z") == Some(2.0)
        })
        .await;
    assert_eq!(s.depth("list:a"), Some(2.0));
    assert_eq!(s.errors("main", "auth"), Some(0.0), "{s}");
    redis.reset_stats();
    // 4 whole polls after the reset (one may have been in flight).
    app.wait_polls("main", 5, Duration::from_secs(10)).await;
    let stats = commandstats(&redis);
    let s = app.scrape().await;
    assert_eq!(
        s.value("queue_exporter_unchanged_keys", &[("source", "main")]),
        Some(0.0)
    );
    assert!(stats.get("llen").copied().unwrap_or(0) >= 4, "{stats:?}");
    assert_eq!(s.source_up("main"), Some(1.0));
    // Writes still show (read every poll).
    run(&redis, &["SADD", "other:s", "n"]);
    app.wait_value(
        "queue_depth",
        &[("queue", "other:s")],
        2.0,
        Duration::from_secs(5),
    )
    .await;
    app.stop().await;
}

#[tokio::test]
async fn client_tracking_false_reads_every_key_on_every_poll() {
    let redis = RedisServer::start();
    fill(&redis, 100.0);
    let app = TestApp::start(&config(&redis, "    client_tracking: false")).await;
    app.until("values", Duration::from_secs(10), |s| {
        s.depth("other:z") == Some(2.0)
    })
    .await;
    redis.reset_stats();
    // 4 whole polls after the reset (one may have been in flight).
    app.wait_polls("main", 5, Duration::from_secs(10)).await;
    let stats = commandstats(&redis);
    assert!(stats.get("llen").copied().unwrap_or(0) >= 4, "{stats:?}");
    assert!(!stats.contains_key("client|tracking"), "{stats:?}");
    let s = app.scrape().await;
    assert_eq!(
        s.value("queue_exporter_unchanged_keys", &[("source", "main")]),
        Some(0.0)
    );
    app.stop().await;
}

#[tokio::test]
async fn a_change_redis_does_not_report_shows_within_a_discovery_interval() {
    let redis = RedisServer::start();
    fill(&redis, 100.0);
    // Database 1 holds another list:a, of 7 items.
    let mut conn = redis.conn();
    let _: () = redis::cmd("SELECT").arg(1).query(&mut conn).unwrap();
    let _: () = redis::cmd("RPUSH")
        .arg("list:a")
        .arg(&["1", "2", "3", "4", "5", "6", "7"])
        .query(&mut conn)
        .unwrap();
    let app = TestApp::start(&config(&redis, "    discovery_interval: 1s")).await;
    app.until("all unchanged", Duration::from_secs(10), |s| {
        s.value("queue_exporter_unchanged_keys", &[("source", "main")]) == Some(KEYS)
    })
    .await;
    // Redis 7.0 sends no invalidation for SWAPDB: the kept values are wrong
    // now, and the next read of each key (within a discovery interval) mends them.
    run(&redis, &["SWAPDB", "0", "1"]);
    app.wait_value(
        "queue_depth",
        &[("queue", "list:a")],
        7.0,
        Duration::from_secs(5),
    )
    .await;
    app.stop().await;
}

/// `tracking_clients` of `INFO clients`: connections with tracking on.
fn tracking_clients(redis: &RedisServer) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("clients")
        .query(&mut redis.conn())
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("tracking_clients:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap()
}

#[tokio::test]
async fn tracking_pauses_where_every_key_changes_between_polls() {
    tracking_pauses_under_writes(None).await;
}

/// Writers that work in bursts: now and then (a gap of 110 ms after about
/// a second of writes) a poll falls between two bursts and finds nothing
/// changed, which used to restart the count of polls "in a row". Tracking
/// still spares less than a tenth of the reads over its polls (one or two
/// of about 22), so it still pauses.
#[tokio::test]
async fn tracking_pauses_where_bursts_of_writes_leave_a_quiet_poll_now_and_then() {
    tracking_pauses_under_writes(Some((100, Duration::from_millis(110)))).await;
}

/// Three lists written between polls of 50 ms (every 10 ms; with
/// `quiet = Some((n, gap))`, every `n`th round waits `gap` instead, longer
/// than two polls): tracking must pause, and the depths stay right.
async fn tracking_pauses_under_writes(quiet: Option<(u32, Duration)>) {
    let redis = RedisServer::start();
    for k in ["busy:1", "busy:2", "busy:3"] {
        run(&redis, &["RPUSH", k, "a", "b"]);
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        let mut conn = redis.conn();
        std::thread::spawn(move || {
            let mut round = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for k in ["busy:1", "busy:2", "busy:3"] {
                    let _: () = redis::pipe()
                        .cmd("RPUSH")
                        .arg(k)
                        .arg("x")
                        .ignore()
                        .cmd("LPOP")
                        .arg(k)
                        .ignore()
                        .query(&mut conn)
                        .unwrap();
                }
                round += 1;
                let gap = match quiet {
                    Some((n, gap)) if round.is_multiple_of(n) => gap,
                    _ => Duration::from_millis(10),
                };
                std::thread::sleep(gap);
            }
        })
    };
    let app = TestApp::start(&format!(
        r#"listen: {{ grpc: null }}
sources:
  - name: main
    type: redis
    url: {}
    poll_interval: 50ms
    queues:
      - pattern: "busy:*"
"#,
        redis.url
    ))
    .await;
    app.until("the lists", Duration::from_secs(10), |s| {
        s.depth("busy:3").is_some()
    })
    .await;
    assert_eq!(tracking_clients(&redis), 1, "tracking starts on");
    // 30 polls of 50 ms that spare (nearly) nothing: tracking pauses.
    wait_for("tracking to pause", Duration::from_secs(10), || async {
        (tracking_clients(&redis) == 0).then_some(())
    })
    .await;
    let s = app.scrape().await;
    assert_eq!(s.source_up("main"), Some(1.0));
    assert!(
        s.depth("busy:1").is_some_and(|d| (1.0..=3.0).contains(&d)),
        "{s}"
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    app.stop().await;
}
