//! Zero config's rounds between keyspace scans (issue 26, "Cost"), against
//! a private redis-server per test: after a scan, a round reads the
//! libraries the scan found by name, as the config `discover` prints
//! would, with no untyped pass; a queue added at a known BullMQ prefix is
//! found at once; any change to a registry or binding, or a library first
//! used since, makes the round a scan; a new plain key waits for the next
//! scan (`keyspace_scan_interval`), or for `rediscover`. The layouts are
//! written by hand as ../shared/reference/queue-layouts.md gives them, and
//! by the real Celery (workers joining) and BullMQ (queues made and
//! obliterated) in the last test.
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use queue_exporter::snapshot::{DiscoveryRounds, JobState, Reason};
use queue_exporter::sources::Source;
use queue_exporter::sources::redis::RedisSource;
use support::*;

/// Time between rounds in these tests.
const ROUND_EVERY: Duration = Duration::from_millis(100);

/// Scans an hour apart: every round after the first is a library round.
const SCAN_HOURLY: &str = "    keyspace_scan_interval: 1h\n";

/// A zero-config source over `url`, a round due every 100 ms unless
/// `extra` settings say otherwise.
fn zero_config_source(url: &str, extra: &str) -> RedisSource {
    let every = match extra.contains("discovery_interval") {
        true => "",
        false => "    discovery_interval: 100ms\n",
    };
    zero_config_redis_source(url, &format!("{every}{extra}"))
}

/// 3,000 strings, two plain queue keys, a Sidekiq queue, an RQ queue and a
/// BullMQ queue at prefix `bull` as BullMQ's `Queue` writes its `meta`.
fn write_keyspace(redis: &RedisServer) {
    let mut c = redis.conn();
    let mut pipe = redis::pipe();
    for i in 0..3000 {
        pipe.cmd("SET").arg(format!("cache:{i}")).arg("v").ignore();
    }
    pipe.cmd("RPUSH").arg("tasks").arg("a").ignore();
    pipe.cmd("ZADD").arg("later").arg(1).arg("x").ignore();
    pipe.cmd("SADD").arg("queues").arg("default").ignore();
    pipe.cmd("LPUSH").arg("queue:default").arg("job").ignore();
    pipe.cmd("SADD")
        .arg("rq:queues")
        .arg("rq:queue:high")
        .ignore();
    pipe.cmd("RPUSH").arg("rq:queue:high").arg("j").ignore();
    pipe.query::<()>(&mut c).expect("write the keyspace");
    bullmq_queue(redis, "mail", 2);
}

/// A BullMQ queue `bull:<name>` with `waiting` jobs.
fn bullmq_queue(redis: &RedisServer, name: &str, waiting: usize) {
    let meta = format!("bull:{name}:meta");
    redis.run::<()>(&[
        b"HSET",
        meta.as_bytes(),
        b"opts.maxLenEvents",
        b"10000",
        b"version",
        b"bullmq:5.0.0",
    ]);
    let wait = format!("bull:{name}:wait");
    for i in 0..waiting {
        redis.run::<()>(&[b"LPUSH", wait.as_bytes(), i.to_string().as_bytes()]);
    }
}

/// Rounds finished so far, of every kind.
fn total(r: &DiscoveryRounds) -> u64 {
    r.full + r.remembered + r.libraries
}

/// What one round cost and found.
struct Round {
    /// The commands Redis saw during the round (MONITOR lines).
    commands: Vec<String>,
    /// The rounds counted after it.
    rounds: DiscoveryRounds,
    /// The queues the poll after it reported, as (name, preset or "").
    queues: BTreeSet<(String, String)>,
    /// The plain keys tracked after it.
    plain: BTreeSet<String>,
    /// What the poll it landed in counted as refused or failed.
    errors: Vec<Reason>,
    /// Each library queue's waiting jobs, by (name, preset).
    waiting: BTreeMap<(String, String), Option<u64>>,
}

impl Round {
    /// Scans counted so far: (full, remembered).
    fn scans_so_far(&self) -> (u64, u64) {
        (self.rounds.full, self.rounds.remembered)
    }
}

/// A source under test, with the rounds it has counted so far.
struct Watched {
    source: RedisSource,
    /// Rounds of every kind counted at the last poll.
    seen: u64,
}

impl Watched {
    /// The source's first poll (its first round, a full scan).
    async fn start(source: RedisSource) -> Watched {
        let mut w = Watched { source, seen: 0 };
        let out = w.source.poll().await.expect("first poll");
        w.seen = total(&out.stats.discovery_rounds.expect("rounds counted"));
        assert_eq!(w.seen, 1);
        w
    }

    /// The plain keys tracked.
    fn plain(&self) -> BTreeSet<String> {
        self.source
            .tracked()
            .iter()
            .map(|k| k.name.clone())
            .collect()
    }

    /// Polls until the next round lands (rounds start at a poll, so MONITOR,
    /// started first, sees all of its commands).
    async fn next_round(&mut self, redis: &RedisServer) -> Round {
        let mut monitor = start_monitor(redis);
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while std::time::Instant::now() < deadline {
            let out = self.source.poll().await.expect("poll");
            let rounds = out.stats.discovery_rounds.expect("rounds counted");
            if total(&rounds) > self.seen {
                self.seen = total(&rounds);
                let queues = out
                    .queues
                    .iter()
                    .map(|q| {
                        let preset = q.preset.as_ref().map(|p| format!("{:?}", p.preset));
                        (q.name.clone(), preset.unwrap_or_default())
                    })
                    .collect();
                let waiting = out
                    .queues
                    .iter()
                    .filter_map(|q| {
                        let p = q.preset.as_ref()?;
                        let w = p.states.get(&JobState::Waiting).copied().flatten();
                        Some(((q.name.clone(), format!("{:?}", p.preset)), w))
                    })
                    .collect();
                return Round {
                    commands: monitored(&mut monitor),
                    rounds,
                    queues,
                    plain: self.plain(),
                    errors: out.partial_errors,
                    waiting,
                };
            }
            tokio::time::sleep(ROUND_EVERY / 5).await;
        }
        panic!("no round landed");
    }
}

/// The command names and arguments of the SCAN calls in `commands`.
fn scans(commands: &[String]) -> Vec<&String> {
    commands.iter().filter(|l| l.contains("\"SCAN\"")).collect()
}

fn names(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// Whether the queues hold `name` as the `preset`'s.
fn has(round: &Round, name: &str, preset: &str) -> bool {
    round
        .queues
        .iter()
        .any(|(n, p)| n == name && p.eq_ignore_ascii_case(preset))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn between_scans_a_round_reads_the_libraries_by_name_with_no_untyped_pass() {
    let redis = RedisServer::start();
    write_keyspace(&redis);
    let mut source = Watched::start(zero_config_source(&redis.url, SCAN_HOURLY)).await;

    let r = source.next_round(&redis).await;
    assert_eq!(
        (r.rounds.full, r.rounds.remembered, r.rounds.libraries),
        (1, 0, 1)
    );
    // The one pass is the `bullmq` preset's, at the prefix the scan found.
    let bull_pass = scans(&r.commands);
    assert!(!bull_pass.is_empty(), "{:?}", r.commands);
    for s in &bull_pass {
        assert!(
            s.contains("\"MATCH\" \"bull:*:meta\"") && s.contains("\"TYPE\" \"hash\""),
            "{s}"
        );
    }
    assert!(
        !r.commands
            .iter()
            .any(|l| l.contains("\"TYPE\" \"") && !l.contains("\"SCAN\"")),
        "no TYPE of names: {:?}",
        r.commands
    );
    // What it reports is what the scan reported.
    assert!(has(&r, "mail", "bullmq"), "{:?}", r.queues);
    assert!(has(&r, "default", "sidekiq"), "{:?}", r.queues);
    assert!(has(&r, "high", "rq"), "{:?}", r.queues);
    assert_eq!(r.plain, names(&["later", "tasks"]));

    // A BullMQ queue at the known prefix is found by the next round,
    // still with no scan.
    bullmq_queue(&redis, "fresh", 3);
    let r = source.next_round(&redis).await;
    assert_eq!(r.rounds.libraries, 2);
    assert!(has(&r, "fresh", "bullmq"), "{:?}", r.queues);

    // A new plain list waits for the next scan; `rediscover` scans now.
    redis.run::<()>(&[b"RPUSH", b"jobs:new", b"a"]);
    let r = source.next_round(&redis).await;
    assert_eq!(r.rounds.libraries, 3);
    assert_eq!(r.plain, names(&["later", "tasks"]));
    source.source.rediscover();
    let r = source.next_round(&redis).await;
    assert_eq!(r.rounds.remembered, 1, "{:?}", r.rounds);
    assert!(
        scans(&r.commands)
            .iter()
            .any(|s| !s.contains("bull:*:meta"))
    );
    assert_eq!(r.plain, names(&["jobs:new", "later", "tasks"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_registry_or_a_library_first_used_since_the_scan_makes_the_round_a_scan() {
    let redis = RedisServer::start();
    write_keyspace(&redis);
    let mut source = Watched::start(zero_config_source(&redis.url, SCAN_HOURLY)).await;
    assert_eq!(source.next_round(&redis).await.rounds.libraries, 1);

    // A queue added to a registry the scan read.
    redis.run::<()>(&[b"SADD", b"queues", b"mail"]);
    redis.run::<()>(&[b"LPUSH", b"queue:mail", b"j"]);
    let r = source.next_round(&redis).await;
    assert_eq!((r.rounds.remembered, r.rounds.libraries), (1, 1));
    assert!(has(&r, "mail", "sidekiq"), "{:?}", r.queues);
    assert_eq!(r.plain, names(&["later", "tasks"]));
    assert_eq!(source.next_round(&redis).await.rounds.libraries, 2);

    // A library the scan did not see, under its fixed registry name.
    redis.run::<()>(&[b"SADD", b"asynq:queues", b"critical"]);
    redis.run::<()>(&[b"LPUSH", b"asynq:{critical}:pending", b"t1"]);
    let r = source.next_round(&redis).await;
    assert_eq!((r.rounds.remembered, r.rounds.libraries), (2, 2));
    assert!(has(&r, "critical", "asynq"), "{:?}", r.queues);
    assert_eq!(r.plain, names(&["later", "tasks"]));

    // A queue removed from a registry.
    redis.run::<()>(&[b"SREM", b"queues", b"mail"]);
    let r = source.next_round(&redis).await;
    assert_eq!(r.rounds.remembered, 3);
    assert!(!has(&r, "mail", "sidekiq"), "{:?}", r.queues);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_key_a_new_bullmq_queue_owns_is_plain_no_more() {
    let redis = RedisServer::start();
    write_keyspace(&redis);
    // A list named like a BullMQ queue's, with no `meta` yet: plain.
    redis.run::<()>(&[b"LPUSH", b"bull:late:wait", b"1"]);
    let mut source = Watched::start(zero_config_source(&redis.url, SCAN_HOURLY)).await;
    assert_eq!(source.plain(), names(&["bull:late:wait", "later", "tasks"]));

    // Its queue's `meta` comes: the queue is BullMQ's, counted once.
    bullmq_queue(&redis, "late", 0);
    let r = source.next_round(&redis).await;
    assert_eq!(r.rounds.libraries, 1);
    assert!(has(&r, "late", "bullmq"), "{:?}", r.queues);
    assert_eq!(r.plain, names(&["later", "tasks"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_keyspace_is_scanned_again_every_keyspace_scan_interval() {
    let redis = RedisServer::start();
    write_keyspace(&redis);
    let config = "    keyspace_scan_interval: 1s\n";
    let mut source = Watched::start(zero_config_source(&redis.url, config)).await;
    redis.run::<()>(&[b"RPUSH", b"jobs:new", b"a"]);
    let r = source.next_round(&redis).await;
    assert_eq!(r.rounds.libraries, 1);
    assert!(!r.plain.contains("jobs:new"));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let r = source.next_round(&redis).await;
    assert_eq!(r.rounds.remembered, 1, "{:?}", r.rounds);
    assert_eq!(r.plain, names(&["jobs:new", "later", "tasks"]));

    // `0s`: every round scans.
    let config = "    keyspace_scan_interval: 0s\n";
    let mut every = Watched::start(zero_config_source(&redis.url, config)).await;
    for _ in 0..2 {
        let r = every.next_round(&redis).await;
        assert_eq!(r.rounds.libraries, 0, "{:?}", r.rounds);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_a_keyspace_that_scans_quickly_is_scanned_every_round() {
    let redis = RedisServer::start();
    redis.run::<()>(&[b"RPUSH", b"tasks", b"a"]);
    bullmq_queue(&redis, "mail", 1);
    // A scan of a few keys takes milliseconds: 100 times that is less than
    // the 5 seconds between rounds.
    let config = "    discovery_interval: 5s\n";
    let mut source = Watched::start(zero_config_source(&redis.url, config)).await;
    redis.run::<()>(&[b"RPUSH", b"jobs:new", b"a"]);
    let r = source.next_round(&redis).await;
    assert_eq!(r.rounds.libraries, 0, "{:?}", r.rounds);
    assert_eq!(r.plain, names(&["jobs:new", "tasks"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mark_redis_refuses_is_counted_at_every_library_round_and_its_keys_stay_out() {
    let redis = RedisServer::start();
    write_keyspace(&redis);
    // A BullMQ-like queue whose `meta` the exporter may not read.
    redis.run::<()>(&[b"HSET", b"secret:jobs:meta", b"version", b"bullmq:5.0.0"]);
    redis.run::<()>(&[b"LPUSH", b"secret:jobs:wait", b"1"]);
    let url = redis.acl_user(
        "qe",
        "pw",
        &[READ_ONLY_ACL, &["-hmget", "(+hmget ~bull:*)"]].concat(),
    );
    let mut source = Watched::start(zero_config_source(&url, SCAN_HOURLY)).await;
    assert_eq!(source.plain(), names(&["later", "tasks"]));
    for libraries in 1..=2 {
        let refused_before = acl_log_count(&redis);
        let r = source.next_round(&redis).await;
        assert_eq!(r.rounds.libraries, libraries, "{:?}", r.rounds);
        assert!(has(&r, "mail", "bullmq"), "{:?}", r.queues);
        assert!(
            !r.queues.iter().any(|(n, _)| n.contains("secret")),
            "{:?}",
            r.queues
        );
        assert_eq!(r.plain, names(&["later", "tasks"]));
        // The refused read was made again (Redis logs each refusal), and
        // counted with the round.
        assert!(acl_log_count(&redis) > refused_before);
        assert!(r.errors.contains(&Reason::Auth), "{:?}", r.errors);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn libraries_only_has_library_rounds_between_scans_too() {
    let redis = RedisServer::start();
    write_keyspace(&redis);
    let config = "    plain_keys: false\n    keyspace_scan_interval: 1h\n";
    let mut source = Watched::start(zero_config_source(&redis.url, config)).await;
    bullmq_queue(&redis, "fresh", 1);
    let r = source.next_round(&redis).await;
    assert_eq!(r.rounds.libraries, 1, "{:?}", r.rounds);
    for q in ["mail", "fresh"] {
        assert!(has(&r, q, "bullmq"), "{:?}", r.queues);
    }
    assert!(has(&r, "default", "sidekiq") && has(&r, "high", "rq"));
    assert!(r.plain.is_empty(), "{:?}", r.plain);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_receiver_binding_changes_nothing_and_a_new_celery_queue_makes_a_scan() {
    let redis = RedisServer::start();
    write_keyspace(&redis);
    let binding: &[u8] = b"_kombu.binding.tasks";
    redis.run::<()>(&[b"SADD", binding, b"celery\x06\x16\x06\x16celery"]);
    redis.run::<()>(&[b"LPUSH", b"celery", b"m"]);
    let mut source = Watched::start(zero_config_source(&redis.url, SCAN_HOURLY)).await;
    assert_eq!(source.next_round(&redis).await.rounds.libraries, 1);

    // A worker's gossip (or Flower's) binds an event queue: no work.
    let gossip: &[u8] = b"worker.#\x06\x16\x06\x16celeryev.6f1c5a2e-1d2b-4c3a-9e8f-7a6b5c4d3e2f";
    redis.run::<()>(&[b"SADD", binding, gossip]);
    let r = source.next_round(&redis).await;
    assert_eq!((r.rounds.remembered, r.rounds.libraries), (0, 2));

    // A new work queue bound: the round scans and reports it.
    redis.run::<()>(&[b"SADD", binding, b"reports\x06\x16\x06\x16reports"]);
    redis.run::<()>(&[b"LPUSH", b"reports", b"m"]);
    let r = source.next_round(&redis).await;
    assert_eq!((r.rounds.remembered, r.rounds.libraries), (1, 2));
    assert!(has(&r, "reports", "celery"), "{:?}", r.queues);
    assert!(has(&r, "celery", "celery"), "{:?}", r.queues);
    assert_eq!(r.plain, names(&["later", "tasks"]));
}

/// The real libraries between scans: a Celery worker joining (its gossip
/// binds a new event queue, its remote control a new pidbox queue) leaves
/// rounds library rounds; a queue BullMQ makes at the known prefix
/// appears, and one it obliterates goes, at the next library round, with
/// the jobs BullMQ wrote; nothing of theirs is ever a plain key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_celery_workers_and_bullmq_queues_come_and_go_between_scans() {
    let redis = RedisServer::start();
    let url = redis.url.as_str();
    let bullmq = |args: &[&str]| Library::Bullmq.run("node/bullmq_prefix_fixture.js", args);
    // Celery tasks on `celery` (with priorities) and `emails`, one real
    // worker on `work`, and BullMQ's `reports` at the prefix `myapp:eu`.
    let (Some(_), Some(_), Some(_first)) = (
        Library::Celery.run("celery_fixture.py", &[url]),
        bullmq(&[url, "add"]),
        Library::Celery.spawn("celery_fixture.py", &[url, "worker"]),
    ) else {
        return;
    };
    only_member(&redis, "_kombu.binding.work");
    let mut source = Watched::start(zero_config_source(url, SCAN_HOURLY)).await;
    let r = source.next_round(&redis).await;
    assert_eq!(
        (r.rounds.full, r.rounds.libraries),
        (1, 1),
        "{:?}",
        r.rounds
    );
    for q in ["celery", "emails", "work"] {
        assert!(has(&r, q, "celery"), "{q}: {:?}", r.queues);
    }
    let reports = ("reports".to_string(), "Bullmq".to_string());
    assert_eq!(r.waiting.get(&reports), Some(&Some(3)), "{:?}", r.waiting);
    assert_eq!(r.plain, BTreeSet::new());

    // A second worker on `work` with its own event exchange: its gossip
    // binds `celeryev.<uuid>` in `_kombu.binding.myev`, and its pidbox
    // binding names it. No queue changed: the rounds stay library rounds.
    let Some(_second) = Library::Celery.spawn("celery_fixture.py", &[url, "worker", "myev"]) else {
        return;
    };
    let gossip = only_member(&redis, "_kombu.binding.myev");
    assert!(gossip.contains("celeryev."), "{gossip:?}");
    // Its remote control starts after its gossip: one pidbox binding per
    // worker, waited for.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while redis.run::<u64>(&[b"SCARD", b"_kombu.binding.celery.pidbox"]) < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "no second pidbox binding"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let before = source.seen;
    let r = source.next_round(&redis).await;
    assert!(source.seen > before);
    assert_eq!(
        r.scans_so_far(),
        (1, 0),
        "a worker joining made a scan: {:?}",
        r.rounds
    );
    assert!(
        !r.queues
            .iter()
            .any(|(q, _)| q.contains("celeryev") || q.contains("pidbox")),
        "{:?}",
        r.queues
    );

    // BullMQ makes `digest` at the known prefix: the next library round
    // reports it with its jobs.
    bullmq(&[url, "add", "myapp:eu", "digest"]).expect("digest added");
    let r = source.next_round(&redis).await;
    assert_eq!(r.scans_so_far(), (1, 0), "{:?}", r.rounds);
    let digest = ("digest".to_string(), "Bullmq".to_string());
    assert_eq!(r.waiting.get(&digest), Some(&Some(3)), "{:?}", r.waiting);

    // BullMQ obliterates `reports`: gone at the next library round, and
    // none of its keys left as plain ones.
    bullmq(&[url, "obliterate"]).expect("reports obliterated");
    let r = source.next_round(&redis).await;
    assert_eq!(r.scans_so_far(), (1, 0), "{:?}", r.rounds);
    assert!(!r.waiting.contains_key(&reports), "{:?}", r.waiting);
    assert_eq!(r.waiting.get(&digest), Some(&Some(3)), "{:?}", r.waiting);
    assert!(has(&r, "work", "celery"), "{:?}", r.queues);
    assert_eq!(r.plain, BTreeSet::new());
    assert!(r.errors.is_empty(), "{:?}", r.errors);
}

/// A set named like a registry that marks no library (an app's own
/// `<p>:queues`, with no queue list, schedule zset or asynq key beside it)
/// is neither read nor compared by library rounds, so its changes make no
/// scan; a Sidekiq namespace's registry (`ns:queues`, its list beside it)
/// still does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_named_like_a_registry_that_marks_no_library_changes_nothing() {
    let redis = RedisServer::start();
    write_keyspace(&redis);
    redis.run::<()>(&[b"SADD", b"app:queues", b"alpha"]);
    redis.run::<()>(&[b"SADD", b"ns:queues", b"mail"]);
    redis.run::<()>(&[b"LPUSH", b"ns:queue:mail", b"j"]);
    let mut source = Watched::start(zero_config_source(&redis.url, SCAN_HOURLY)).await;
    let r = source.next_round(&redis).await;
    assert_eq!(r.rounds.libraries, 1, "{:?}", r.rounds);
    assert!(
        has(&r, "ns:mail", "sidekiq") || has(&r, "mail", "sidekiq"),
        "{:?}",
        r.queues
    );

    // The app's set changes at every round: they stay library rounds,
    // and none reads it.
    for member in ["beta", "gamma", "delta"] {
        redis.run::<()>(&[b"SADD", b"app:queues", member.as_bytes()]);
        let r = source.next_round(&redis).await;
        assert_eq!(r.scans_so_far(), (1, 0), "{:?}", r.rounds);
        assert!(
            !r.commands.iter().any(|l| l.contains("app:queues")),
            "{:?}",
            r.commands
        );
    }

    // The namespace's registry gains a queue: that round is a scan.
    redis.run::<()>(&[b"SADD", b"ns:queues", b"billing"]);
    redis.run::<()>(&[b"LPUSH", b"ns:queue:billing", b"j"]);
    let r = source.next_round(&redis).await;
    assert_eq!(r.rounds.remembered, 1, "{:?}", r.rounds);
    assert!(
        has(&r, "ns:billing", "sidekiq") || has(&r, "billing", "sidekiq"),
        "{:?}",
        r.queues
    );
}
