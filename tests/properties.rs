//! Property tests (proptest) over the public library API and the running
//! exporter:
//!
//! - `scaler::metadata::parse_with` never panics, whatever the map (keys, values,
//!   sizes), and what it accepts is sane;
//! - over gRPC, any trigger metadata gets a gRPC answer with a meaningful
//!   code (never `UNKNOWN` or `INTERNAL`, never a dropped connection);
//! - `config::parse_duration` never panics and reads back what it is given;
//!   a whole config file of arbitrary text never panics the loader, and a
//!   bad `poll_interval` is an error naming that field;
//! - user globs (`queue` in trigger metadata) cannot blow up;
//! - the exposition with arbitrary (binary) key names is re-parsed by Python's
//!   classic and strict OpenMetrics parsers into exactly the expected names.
mod scaler_common;
mod support;

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use queue_exporter::config::{Config, LoadOptions, SourceConfig, parse_duration};
use queue_exporter::scaler::metadata::{QueueSelector, parse_with};
use queue_exporter::sources::Source;
use queue_exporter::sources::rabbitmq::RabbitSource;
use queue_exporter::sources::redis::RedisSource;
use support::*;

/// Keys the scaler knows, KEDA's own, and near misses.
fn meta_key() -> impl Strategy<Value = String> {
    prop_oneof![
        9 => prop::sample::select(vec![
            "queue",
            "source",
            "vhost",
            "mode",
            "value",
            "activationValue",
            "operation",
            "window",
            "group",
            "scalerAddress",
            "hostFromEnv",
            "unsafeSsl",
            "Queue",
            "activationvalue",
            "",
        ])
        .prop_map(String::from),
        1 => any::<String>(),
    ]
}

/// Values: words the scaler knows, numbers of every shape, arbitrary text,
/// and now and then something big.
fn meta_value() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(vec![
            "work", "work*", "*", "jobs:[", "{a,b}", "QueueLength", "ready", "AGE", "Lag",
            "PublishRate", "sum", "MAX", "avg", "0", "-1", "1e309", "NaN", "inf", " 5 ", "0.0001",
            "30s", "0s", "1h30m", "forever", "main", "/", "",
        ])
        .prop_map(String::from),
        3 => any::<String>(),
        1 => (1usize..300_000, any::<char>()).prop_map(|(n, c)| c.to_string().repeat(n)),
    ]
}

fn meta_map() -> impl Strategy<Value = HashMap<String, String>> {
    prop::collection::hash_map(meta_key(), meta_value(), 0..8)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None,
        ..ProptestConfig::default() })]

    #[test]
    fn metadata_parsing_never_panics_and_accepts_only_sane_queries(meta in meta_map()) {
        match parse_with(&meta, &queue_exporter::sources::redis::catalogue()) {
            Ok(q) => {
                prop_assert!(q.target.is_finite() && q.target > 0.0, "{q:?}");
                prop_assert!(q.activation.is_finite() && q.activation >= 0.0, "{q:?}");
                prop_assert!(!q.queue.text().is_empty());
            }
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }

    #[test]
    fn duration_parsing_never_panics(s in any::<String>()) {
        let _ = parse_duration(&s);
    }

    #[test]
    fn durations_read_back_what_they_say(
        h in 0u64..48, m in 0u64..60, sec in 0u64..60, ms in 0u64..1000,
    ) {
        let want = Duration::from_millis(((h * 60 + m) * 60 + sec) * 1000 + ms);
        let mut text = String::new();
        for (n, unit) in [(h, "h"), (m, "m"), (sec, "s"), (ms, "ms")] {
            if n > 0 {
                text.push_str(&format!("{n}{unit}"));
            }
        }
        if text.is_empty() {
            text = "0s".into();
        }
        prop_assert_eq!(parse_duration(&text), Ok(want), "{}", text);
    }
}

/// Every duration field, as `sources.redis.timeout` (the Redis source,
/// `sources[0]`), `sources.rabbitmq.timeout` (`sources[1]`), or top-level.
const DURATION_FIELDS: &[&str] = &[
    "sources.redis.poll_interval",
    "sources.redis.timeout",
    "sources.redis.discovery_interval",
    "sources.redis.age_histogram_interval",
    "sources.rabbitmq.poll_interval",
    "sources.rabbitmq.timeout",
    "shutdown_grace",
    "scaler.max_staleness",
];

/// A config with a Redis and a RabbitMQ source and `field` set to `value`.
fn duration_config(field: &str, value: &str) -> String {
    let set = |name: &str| {
        if field == name {
            format!("{}: \"{value}\"", name.rsplit('.').next().unwrap_or(name))
        } else {
            String::new()
        }
    };
    let mut yaml = String::from("listen: { grpc: null }\n");
    if field == "shutdown_grace" {
        yaml.push_str(&format!("shutdown_grace: \"{value}\"\n"));
    }
    if field == "scaler.max_staleness" {
        yaml.push_str(&format!("scaler: {{ max_staleness: \"{value}\" }}\n"));
    }
    yaml.push_str("sources:\n  - name: r\n    type: redis\n");
    for f in DURATION_FIELDS
        .iter()
        .filter(|f| f.starts_with("sources.redis."))
    {
        let line = set(f);
        if !line.is_empty() {
            yaml.push_str(&format!("    {line}\n"));
        }
    }
    yaml.push_str("  - name: q\n    type: rabbitmq\n");
    for f in DURATION_FIELDS
        .iter()
        .filter(|f| f.starts_with("sources.rabbitmq."))
    {
        let line = set(f);
        if !line.is_empty() {
            yaml.push_str(&format!("    {line}\n"));
        }
    }
    yaml
}

/// Loads `yaml` as a config file.
fn load(yaml: &str) -> Result<Config, String> {
    let dir = tempfile::tempdir().unwrap();
    let path = write_file(&dir, "config.yaml", yaml);
    Config::load_with_env(
        &LoadOptions {
            file: Some(path),
            ..LoadOptions::default()
        },
        Vec::new(),
    )
    .map_err(|e| e.to_string())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, failure_persistence: None,
        ..ProptestConfig::default() })]

    #[test]
    fn a_config_file_of_arbitrary_text_never_panics_the_loader(text in any::<String>()) {
        if let Err(e) = load(&text) {
            prop_assert!(!e.is_empty());
            prop_assert!(!e.contains('\n'), "one line expected: {e:?}");
        }
    }

    #[test]
    fn a_bad_poll_interval_is_an_error_naming_the_field(s in "[^\"\\\\\\p{C}]{0,20}") {
        let yaml = format!(
            "sources:\n  - name: main\n    type: redis\n    poll_interval: \"{s}\"\n"
        );
        match (parse_duration(&s), load(&yaml)) {
            (Ok(d), Ok(c)) if !d.is_zero() => {
                prop_assert_eq!(c.sources[0].poll_interval(), d);
            }
            (_, Err(e)) => prop_assert!(e.contains("sources[0].poll_interval"), "{e}"),
            (parsed, Ok(_)) => prop_assert!(false, "{s:?} ({parsed:?}) accepted"),
        }
    }

    #[test]
    fn any_duration_in_any_duration_field_loads_or_is_one_line_naming_it(
        (field, number, unit) in (
            prop::sample::select(DURATION_FIELDS.to_vec()),
            prop_oneof![0u64..100, 0u64..100_000, any::<u64>()],
            prop::sample::select(vec!["ns", "us", "ms", "s", "m", "h", "d", "w", "M", "y"]),
        )
    ) {
        let value = format!("{number}{unit}");
        let yaml = duration_config(field, &value);
        match load(&yaml) {
            Ok(c) => {
                // What the exporter computes from durations cannot overflow.
                for source in &c.sources {
                    let timeout = match source {
                        SourceConfig::Redis(r) => RedisSource::new(r.clone()).poll_timeout(),
                        SourceConfig::RabbitMq(r) => RabbitSource::new(r.clone()).poll_timeout(),
                    };
                    prop_assert!(timeout <= Duration::from_secs(8 * 3600), "{field}: {value}");
                    let staleness = c.scaler.max_staleness_for(source.poll_interval());
                    prop_assert!(staleness <= Duration::from_secs(86_400), "{field}: {value}");
                }
            }
            Err(e) => {
                let at = field.replace(".redis.", "[0].").replace(".rabbitmq.", "[1].");
                prop_assert!(e.contains(&format!("config.yaml: {at}: ")), "{field}: {value}: {e}");
                prop_assert!(!e.contains('\n'), "{e}");
            }
        }
    }

    #[test]
    fn user_globs_match_quickly_whatever_their_shape(
        glob in "[a*?\\[\\]{},!\\\\-]{0,64}",
        name in "[ab*]{0,2000}",
    ) {
        let t = Instant::now();
        let sel = QueueSelector::new(&glob);
        let _ = sel.matches(&name);
        prop_assert!(t.elapsed() < Duration::from_secs(2), "{glob:?} took {:?}", t.elapsed());
    }
}

#[test]
fn a_pathological_glob_does_not_blow_up() {
    // Backtracking matchers take exponential time on these.
    let glob = "*a".repeat(200) + "b";
    let name = "a".repeat(10_000);
    let t = Instant::now();
    let sel = QueueSelector::new(&glob);
    assert!(!sel.matches(&name));
    let alternation = format!(
        "{{{}}}",
        (0..5000)
            .map(|i| format!("q{i}"))
            .collect::<Vec<_>>()
            .join(",")
    );
    let sel = QueueSelector::new(&alternation);
    let _ = sel.matches("q4999");
    eprintln!("pathological globs: {:?}", t.elapsed());
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
}

/// Codes a scaler may answer with for a request it cannot serve.
const MEANINGFUL: [tonic::Code; 5] = [
    tonic::Code::InvalidArgument,
    tonic::Code::NotFound,
    tonic::Code::Unavailable,
    tonic::Code::FailedPrecondition,
    tonic::Code::ResourceExhausted,
];

#[test]
fn any_trigger_metadata_gets_a_meaningful_grpc_answer() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let redis = RedisServer::start();
    set_len(&redis, "work", 3);
    let app = rt.block_on(TestApp::start(&scaler_common::redis_config(
        &redis.url,
        "200ms",
        "      - key: work\n",
    )));
    let c = rt.block_on(scaler_common::client(&app));
    rt.block_on(scaler_common::wait_value(&c, &[("queue", "work")], 3.0));
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 200,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let codes: std::sync::Mutex<HashMap<String, usize>> = Default::default();
    let result = runner.run(&meta_map(), |meta| {
        let pairs: Vec<(&str, &str)> = meta.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let mut c = c.clone();
        let answers = rt.block_on(async {
            vec![
                scaler_common::spec(&mut c, &pairs).await.map(|_| ()),
                scaler_common::metrics_named(&mut c, &pairs, "s0-x")
                    .await
                    .map(|_| ()),
                scaler_common::active(&mut c, &pairs).await.map(|_| ()),
            ]
        });
        for a in answers {
            if let Err(s) = a {
                *codes
                    .lock()
                    .unwrap()
                    .entry(format!("{:?}", s.code()))
                    .or_default() += 1;
                prop_assert!(
                    MEANINGFUL.contains(&s.code()),
                    "{:?}: {}",
                    s.code(),
                    s.message().chars().take(300).collect::<String>()
                );
            } else {
                *codes.lock().unwrap().entry("Ok".into()).or_default() += 1;
            }
        }
        Ok(())
    });
    eprintln!("answers: {:?}", codes.lock().unwrap());
    rt.block_on(app.stop());
    if let Err(e) = result {
        panic!("{e}");
    }
}

fn set_len(redis: &RedisServer, key: &str, n: usize) {
    scaler_common::set_list_len(&mut redis.conn(), key, n);
}

/// A key name as the exporter renders it in the `queue` label: valid UTF-8
/// as is; otherwise each invalid byte as `\xNN` and each backslash doubled.
fn rendered(key: &[u8]) -> String {
    if let Ok(s) = std::str::from_utf8(key) {
        return s.to_string();
    }
    let mut out = String::new();
    for chunk in key.utf8_chunks() {
        out.push_str(&chunk.valid().replace('\\', "\\\\"));
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// Key names: bytes (often not UTF-8) or unicode text, under a `p:` prefix.
fn key_names() -> impl Strategy<Value = Vec<Vec<u8>>> {
    let name = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..24),
        any::<String>().prop_map(String::into_bytes),
        prop::collection::vec(
            prop::sample::select(vec![
                b'"', b'\\', b'\n', b'{', b'}', b'=', b',', b'#', b' ', 0u8, 0xff, b'x', b'a'
            ]),
            0..16
        ),
    ];
    prop::collection::btree_set(name, 1..12).prop_map(|set| {
        set.into_iter()
            .map(|n| [b"p:".as_slice(), &n].concat())
            .collect()
    })
}

#[test]
fn arbitrary_key_names_are_reparsed_into_the_same_names() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let redis = RedisServer::start();
    let app = rt.block_on(TestApp::start(&format!(
        "listen: {{ grpc: null }}\nsources:\n  - name: main\n    type: redis\n    url: {}\n    poll_interval: 50ms\n    discovery_interval: 100ms\n    queues:\n      - pattern: \"p:*\"\n",
        redis.url
    )));
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 16,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let result = runner.run(&key_names(), |keys| {
        let expected: BTreeSet<String> = keys.iter().map(|k| rendered(k)).collect();
        // Two keys with one rendering (a valid key spelled like another's
        // `\xNN`) are a documented collision: not this property.
        prop_assume!(expected.len() == keys.len());
        let mut c = redis.conn();
        let _: () = redis::cmd("FLUSHALL").query(&mut c).unwrap();
        for k in &keys {
            let _: () = redis::cmd("RPUSH")
                .arg(k.as_slice())
                .arg("job")
                .query(&mut c)
                .unwrap();
        }
        let (classic, om) = rt.block_on(async {
            let deadline = Instant::now() + Duration::from_secs(15);
            loop {
                let body = app.metrics().await;
                // The cheap check first; Python only once the count is right.
                if sample(&body, "queue_exporter_tracked_keys", &[("source", "main")])
                    != Some(keys.len() as f64)
                {
                    assert!(
                        Instant::now() < deadline,
                        "never {} keys tracked",
                        keys.len()
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
                let parsed = python_parse(&body, false).expect("classic text parses");
                let last: BTreeSet<String> = parsed
                    .iter()
                    .filter(|s| s.name == "queue_depth")
                    .filter_map(|s| s.labels.get("queue").cloned())
                    .collect();
                if last == expected {
                    let (_, om, _) = http_get(
                        &format!("{}/metrics", app.base),
                        &[("accept", "application/openmetrics-text;version=1.0.0")],
                    )
                    .await;
                    return (body, om);
                }
                assert!(
                    Instant::now() < deadline,
                    "queue labels {last:?}, expected {expected:?}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        // Prometheus's own parser (promtool) accepts the classic text.
        // (The `prometheus-parse` crate is not used here: it drops a
        // sample whose label value holds a `}`, such as the key `p:}`.)
        let (ok, lint) = promtool_check(&classic);
        prop_assert!(ok, "promtool: {}", lint);
        // The strict OpenMetrics parser gives back exactly the same names.
        let parsed = python_parse(&om, true).map_err(TestCaseError::fail)?;
        let names: BTreeSet<String> = parsed
            .iter()
            .filter(|s| s.name == "queue_depth")
            .filter_map(|s| s.labels.get("queue").cloned())
            .collect();
        prop_assert_eq!(names, expected);
        Ok(())
    });
    rt.block_on(app.stop());
    if let Err(e) = result {
        panic!("{e}");
    }
}
