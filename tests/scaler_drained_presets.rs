//! Every library's drained queue under `- preset:` reads as an empty queue
//! for KEDA, as under zero config and as a drained key under a pattern
//! (`tests/scaler_drained.rs`): the rule of docs/keda.md, "A drained queue
//! reads 0; a typo is `NOT_FOUND`", played by each library's own producer
//! and worker against a private Redis, through a real gRPC client:
//!
//! fill → 2 and active → a real worker drains it → 0 and inactive → the
//! library's own removal of what still lists it, where it keeps any → no
//! key of the queue left → 0 and inactive across discovery rounds, and on
//! a freshly started exporter → one new job → 1 and active.
//!
//! [`DRAINS`] lists one case per library the exporter knows, and the test
//! fails while a library is missing from it: a library added later is
//! covered by adding its line. asynq's Go client does not run on these
//! machines and priority-zset is a layout, not a library: their cases play
//! the library's own commands with redis-py (`drain_fixture.py`).
mod scaler_common;
mod support;

use std::time::Duration;

use scaler_common::*;
use support::*;

/// The drained queue's name in every case.
const QUEUE: &str = "drained";

/// One library's drained-queue case.
struct Drain {
    /// The `preset` word (config and trigger metadata).
    preset: &'static str,
    /// The entry's other options (each line indented by two), naming
    /// [`QUEUE`] where the library's entry names its queues.
    options: &'static str,
    /// What runs the library.
    library: Library,
    /// The fixture script under `tests/fixtures/presets/`.
    script: &'static str,
    /// Whether the script takes the library's name first (one script
    /// serves several libraries).
    named: bool,
    /// Whether the library keeps listing a drained queue (a registry entry,
    /// a `meta` hash, an `id` counter) until its own removal (`forget`).
    forget: bool,
    /// Keys naming the queue that the library keeps once it is drained and
    /// forgotten, holding no job (Redis globs, `{q}` for the queue).
    leftovers: &'static [&'static str],
}

/// One case per library: BullMQ, Bull, Sidekiq, Celery, RQ, asynq,
/// rediswq, priority-zset, Dramatiq, Huey, arq, bee-queue, Resque.
const DRAINS: &[Drain] = &[
    Drain {
        preset: "bullmq",
        options: "",
        library: Library::Bullmq,
        script: "node/drain_fixture.js",
        named: true,
        forget: true,
        leftovers: &[],
    },
    Drain {
        preset: "bull",
        options: "",
        library: Library::Bull,
        script: "node/drain_fixture.js",
        named: true,
        forget: true,
        leftovers: &[],
    },
    Drain {
        preset: "sidekiq",
        options: "",
        library: Library::Sidekiq,
        script: "drain_fixture.rb",
        named: false,
        forget: true,
        leftovers: &[],
    },
    Drain {
        preset: "celery",
        options: "  queues: [drained]\n",
        library: Library::Celery,
        script: "drain_fixture.py",
        named: true,
        forget: false,
        // kombu's binding table: which exchange routes to the queue.
        leftovers: &["_kombu.binding.{q}", "_kombu.binding_permanent.{q}"],
    },
    Drain {
        preset: "rq",
        options: "",
        library: Library::Rq,
        script: "drain_fixture.py",
        named: true,
        forget: true,
        leftovers: &[],
    },
    Drain {
        preset: "asynq",
        options: "",
        library: Library::RedisPy,
        script: "drain_fixture.py",
        named: true,
        forget: true,
        leftovers: &[],
    },
    Drain {
        preset: "rediswq",
        options: "  name: drained\n",
        library: Library::Rediswq,
        script: "drain_fixture.py",
        named: true,
        forget: false,
        leftovers: &[],
    },
    Drain {
        preset: "priority-zset",
        options: "  prefix: drained\n",
        library: Library::RedisPy,
        script: "drain_fixture.py",
        named: true,
        forget: false,
        leftovers: &[],
    },
    Drain {
        preset: "dramatiq",
        options: "",
        library: Library::Dramatiq,
        script: "drain_fixture.py",
        named: true,
        forget: false,
        leftovers: &[],
    },
    Drain {
        preset: "huey",
        options: "  name: drained\n",
        library: Library::Huey,
        script: "drain_fixture.py",
        named: true,
        forget: false,
        leftovers: &[],
    },
    Drain {
        preset: "arq",
        options: "  queues: [drained]\n",
        library: Library::Arq,
        script: "drain_fixture.py",
        named: true,
        forget: false,
        leftovers: &[],
    },
    Drain {
        preset: "bee-queue",
        options: "",
        library: Library::BeeQueue,
        script: "node/drain_fixture.js",
        named: true,
        forget: false,
        // removeOnSuccess: the job counter and the stall check's marker.
        leftovers: &["bq:{q}:id", "bq:{q}:stallBlock"],
    },
    Drain {
        preset: "resque",
        options: "",
        library: Library::Resque,
        script: "node/drain_fixture.js",
        named: true,
        forget: true,
        leftovers: &[],
    },
];

impl Drain {
    /// The exporter's config: one Redis source `main` over `url` with this
    /// entry alone, polling every 100 ms, rediscovering every 200 ms.
    fn config(&self, url: &str) -> String {
        let entry = format!("- preset: {}\n{}", self.preset, self.options);
        format!(
            "listen: {{ grpc: 127.0.0.1:0 }}\nsources:\n  - name: main\n    type: redis\n    url: {url}\n    poll_interval: 100ms\n    discovery_interval: 200ms\n    queues:\n{}",
            indent(&entry, 6)
        )
    }

    /// Runs the fixture's `mode` (with `args`) against `url`: `false` only
    /// when the library is missing and a skip is allowed.
    async fn run(&self, url: &str, mode: &str, args: &[&str]) -> bool {
        let mut all: Vec<&str> = Vec::new();
        if self.named {
            all.push(self.preset);
        }
        all.extend([url, QUEUE, mode]);
        all.extend(args.iter().copied());
        self.library.run_async(self.script, &all).await.is_some()
    }
}

/// The KEDA trigger of the drained queue.
fn trigger(d: &Drain) -> [(&'static str, &'static str); 2] {
    [("queue", QUEUE), ("preset", d.preset)]
}

/// Waits up to 20 s until `GetMetrics` answers `expected` and `IsActive`
/// agrees; `Err` says what it answered last.
async fn until_reads(c: &Client, d: &Drain, expected: f64) -> Result<(), String> {
    let mut c = c.clone();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let value = metrics(&mut c, &trigger(d)).await;
        let is_active = active(&mut c, &trigger(d)).await;
        let wanted = matches!(&value, Ok((_, v)) if (v - expected).abs() < 1e-9)
            && matches!(is_active, Ok(a) if a == (expected > 0.0));
        if wanted {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            return Err(format!(
                "expected {expected}; GetMetrics answered {:?}, IsActive {:?}",
                value.map_err(|s| (s.code(), s.message().to_string())),
                is_active.map_err(|s| (s.code(), s.message().to_string()))
            ));
        }
        // Sampling rate while polls come in, not synchronisation.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Asserts for ~1 s (five discovery rounds) that the queue reads 0 and is
/// inactive on every answer, with no error in between.
async fn holds_empty(c: &Client, d: &Drain) -> Result<(), String> {
    let mut c = c.clone();
    let deadline = tokio::time::Instant::now() + Duration::from_millis(1000);
    while tokio::time::Instant::now() < deadline {
        let value = metrics(&mut c, &trigger(d)).await;
        let is_active = active(&mut c, &trigger(d)).await;
        if !matches!(value, Ok((_, v)) if v == 0.0) || !matches!(is_active, Ok(false)) {
            return Err(format!(
                "a drained queue answered GetMetrics {:?}, IsActive {:?}",
                value.map_err(|s| (s.code(), s.message().to_string())),
                is_active.map_err(|s| (s.code(), s.message().to_string()))
            ));
        }
        // Sampling rate over the window under test, not synchronisation.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// The libraries whose queues' service time the exporter measures from the
/// finished jobs they keep (docs/presets.md): a `WaitTime` trigger without
/// `processingTime` reads their drained queue as 0, where any other
/// library's needs `processingTime` as its live queue does.
const MEASURED: &[&str] = &["bullmq", "bull", "rq"];

/// The libraries whose queues have no arrival count without `counters:`
/// (docs/keda.md): `WaitTime` of their queues, live or drained, is
/// `UNAVAILABLE` naming the arrival rate, never a number, as long as the
/// library keeps reporting the drained queue. One whose drained queue is forgotten (`forget: true`: Sidekiq,
/// RQ, Resque) has no sample left for it, so its `WaitTime` is a covered
/// empty queue's, 0, whatever its arrivals.
const NO_ARRIVALS: &[&str] = &["celery", "rediswq", "huey", "arq"];

/// A `WaitTime` trigger of the drained queue: `targetWait` 30 s over a
/// window of 1 s, with `processing_time` if given.
fn wait_trigger<'a>(d: &'a Drain, processing_time: Option<&'a str>) -> Vec<(&'a str, &'a str)> {
    let mut t = vec![
        ("queue", QUEUE),
        ("preset", d.preset),
        ("mode", "WaitTime"),
        ("targetWait", "30s"),
        ("window", "1s"),
    ];
    t.extend(processing_time.map(|p| ("processingTime", p)));
    t
}

/// `WaitTime` of a drained queue with no key left: 0 replicas and inactive
/// with `processingTime` (`UNAVAILABLE` naming the arrival rate for the
/// libraries that count no arrivals, as for their live queues); without it the same for a library whose service
/// time is measured, and `INVALID_ARGUMENT` naming `processingTime` for
/// the others (their live queues answer so too), never `NOT_FOUND`.
async fn wait_time_reads_empty(c: &Client, d: &Drain) -> Result<(), String> {
    let mut c = c.clone();
    let set = wait_trigger(d, Some("1s"));
    let measured = wait_trigger(d, None);
    let answered = |v: Result<(i64, f64), tonic::Status>, a: Result<bool, tonic::Status>| {
        format!(
            "GetMetrics {:?}, IsActive {:?}",
            v.map_err(|s| (s.code(), s.message().to_string())),
            a.map_err(|s| (s.code(), s.message().to_string()))
        )
    };
    let (v, a) = (metrics(&mut c, &set).await, active(&mut c, &set).await);
    let held = if NO_ARRIVALS.contains(&d.preset) {
        let unknown = |s: &tonic::Status| {
            s.code() == tonic::Code::Unavailable && s.message().contains("arrival rate is unknown")
        };
        matches!(&v, Err(s) if unknown(s)) && matches!(&a, Err(s) if unknown(s))
    } else {
        matches!(v, Ok((_, x)) if x == 0.0) && matches!(a, Ok(false))
    };
    if !held {
        return Err(format!("WaitTime, processingTime 1s: {}", answered(v, a)));
    }
    let (v, a) = (
        metrics(&mut c, &measured).await,
        active(&mut c, &measured).await,
    );
    let held = if MEASURED.contains(&d.preset) {
        matches!(v, Ok((_, x)) if x == 0.0) && matches!(a, Ok(false))
    } else {
        matches!(&v, Err(s) if s.code() == tonic::Code::InvalidArgument
            && s.message().contains("processingTime"))
    };
    if !held {
        return Err(format!("WaitTime, measured: {}", answered(v, a)));
    }
    Ok(())
}

/// The keys naming the queue that hold more than the library's leftovers,
/// and the sets still listing it (a registry).
fn keys_left(conn: &mut redis::Connection, d: &Drain) -> Vec<String> {
    let leftovers: Vec<String> = d
        .leftovers
        .iter()
        .map(|g| g.replace("{q}", QUEUE))
        .collect();
    let keys: Vec<String> = redis::Commands::scan(conn)
        .expect("SCAN")
        .collect::<Result<_, _>>()
        .expect("SCAN");
    let mut left = Vec::new();
    for key in keys {
        if leftovers.contains(&key) {
            continue;
        }
        if key.contains(QUEUE) {
            left.push(key);
            continue;
        }
        let kind: String = redis::cmd("TYPE").arg(&key).query(conn).expect("TYPE");
        if kind == "set" {
            let members: Vec<String> = redis::cmd("SMEMBERS")
                .arg(&key)
                .query(conn)
                .expect("SMEMBERS");
            if members.iter().any(|m| m.contains(QUEUE)) {
                left.push(format!("{key} (a set listing it: {members:?})"));
            }
        }
    }
    left
}

/// One library's case, start to end; `Ok(false)` when its library is
/// missing and a skip is allowed.
async fn drained_reads_empty(d: &Drain) -> Result<bool, String> {
    let redis = RedisServer::start();
    let app = TestApp::start(&d.config(&redis.url)).await;
    let c = client(&app).await;
    if !d.run(&redis.url, "add", &["2"]).await {
        return Ok(false);
    }
    until_reads(&c, d, 2.0)
        .await
        .map_err(|e| format!("filled: {e}"))?;
    d.run(&redis.url, "drain", &[]).await;
    until_reads(&c, d, 0.0)
        .await
        .map_err(|e| format!("drained: {e}"))?;
    if d.forget {
        d.run(&redis.url, "forget", &[]).await;
    }
    let left = keys_left(&mut redis.conn(), d);
    if !left.is_empty() {
        return Err(format!("keys of the queue left after the drain: {left:?}"));
    }
    until_reads(&c, d, 0.0)
        .await
        .map_err(|e| format!("no key left: {e}"))?;
    holds_empty(&c, d)
        .await
        .map_err(|e| format!("no key left, across discovery rounds: {e}"))?;
    wait_time_reads_empty(&c, d)
        .await
        .map_err(|e| format!("no key left: {e}"))?;
    // An exporter started on the drained keyspace (a restart, a new pod)
    // has never seen the queue: the same answer.
    let fresh = TestApp::start(&d.config(&redis.url)).await;
    let fresh_client = client(&fresh).await;
    until_reads(&fresh_client, d, 0.0)
        .await
        .map_err(|e| format!("a fresh exporter, no key left: {e}"))?;
    holds_empty(&fresh_client, d)
        .await
        .map_err(|e| format!("a fresh exporter, no key left: {e}"))?;
    fresh.stop().await;
    d.run(&redis.url, "add", &["1"]).await;
    until_reads(&c, d, 1.0)
        .await
        .map_err(|e| format!("a new job: {e}"))?;
    app.stop().await;
    Ok(true)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_librarys_drained_queue_reads_zero_and_inactive_then_active_on_a_new_job() {
    let mut listed: Vec<&str> = DRAINS.iter().map(|d| d.preset).collect();
    listed.sort_unstable();
    let mut known = queue_exporter::sources::redis::library_names();
    known.sort_unstable();
    assert_eq!(listed, known, "DRAINS must hold one case per library");

    let mut failures = Vec::new();
    for d in DRAINS {
        let started = std::time::Instant::now();
        match drained_reads_empty(d).await {
            Ok(true) => eprintln!("{}: ok in {:.1?}", d.preset, started.elapsed()),
            Ok(false) => {}
            Err(e) => failures.push(format!("{}: {e}", d.preset)),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} libraries:\n{}",
        failures.len(),
        DRAINS.len(),
        failures.join("\n")
    );
}

/// The other half of the rule: under a preset that covers every name, only
/// a name the last round read in full is 0. A queue found beyond
/// `max_keys` is `UNAVAILABLE` (its jobs were not read), and so is every
/// name once the source is down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preset_name_a_round_could_not_read_is_unavailable_never_zero() {
    let mut redis = RedisServer::start();
    for queue in ["a", "b"] {
        let args = ["dramatiq", redis.url.as_str(), queue, "add", "1"];
        if Library::Dramatiq
            .run_async("drain_fixture.py", &args)
            .await
            .is_none()
        {
            return;
        }
    }
    let dramatiq = DRAINS.iter().find(|d| d.preset == "dramatiq").unwrap();
    let yaml = dramatiq
        .config(&redis.url)
        .replace("    queues:\n", "    max_keys: 1\n    queues:\n");
    let app = TestApp::start(&yaml).await;
    let c = client(&app).await;
    let never = [("queue", "never"), ("preset", "dramatiq")];
    wait_value(&c, &never, 0.0).await;
    let mut answers = Vec::new();
    for queue in ["a", "b"] {
        let mut c = c.clone();
        answers.push(metrics(&mut c, &[("queue", queue), ("preset", "dramatiq")]).await);
    }
    // One queue fits the budget and reads its job; the other is unknown.
    let read: Vec<f64> = answers
        .iter()
        .filter_map(|a| a.as_ref().ok())
        .map(|a| a.1)
        .collect();
    assert_eq!(read, [1.0], "{answers:?}");
    let unknown = answers.iter().find_map(|a| a.as_ref().err()).unwrap();
    assert_eq!(unknown.code(), tonic::Code::Unavailable, "{unknown:?}");
    assert!(
        unknown.message().contains("max_keys"),
        "{}",
        unknown.message()
    );

    redis.stop();
    let e = wait_code(
        &c,
        &never,
        tonic::Code::Unavailable,
        Duration::from_secs(15),
    )
    .await;
    assert!(e.message().contains("main"), "{}", e.message());
    let mut c = c.clone();
    let e = active(&mut c, &never).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
    app.stop().await;
}
