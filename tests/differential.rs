//! A randomized differential test of the trust rule (issue 36): what the
//! exporter cannot read is absent on `/metrics` and an error for KEDA,
//! never a number that is not the truth.
//!
//! Each seeded scenario (`differential_support::Scenario`) writes a random
//! keyspace into a private redis-server and runs two in-process exporters
//! over it: a **reference** logged in as the default user with `max_keys`
//! 100,000, and a **subject** logged in as a read-only ACL user that refuses
//! some commands or key patterns, with a random `max_keys`. Both use the
//! same `queues:` (or none: zero config). Once both have polled the static
//! data several times, the test asks both the same KEDA questions
//! (`QueueLength`, `Age`, `WaitTime` with `processingTime`, `IsActive`;
//! exact names, globs over prefixes with and without restrictions, names
//! that do not exist) and compares every `queue_*` series of `/metrics`:
//!
//! - a subject number equals the reference's (counts exactly, ages and
//!   `WaitTime` within a small tolerance, since the two poll at slightly
//!   different times);
//! - a subject error where the reference has a number is accepted only as
//!   `UNAVAILABLE` (the exporter knows it could not read something), and
//!   only where a restriction or a `max_keys` drop can touch the name;
//!   `NOT_FOUND` (the name cannot exist) and `INVALID_ARGUMENT` (the same
//!   metadata was valid for the reference) are wrong answers;
//! - a subject number where the reference has none is a wrong answer;
//! - where nothing restricts a name, the subject answers exactly what the
//!   reference answers (its number, or the same error code): an exporter
//!   that errs everywhere fails;
//! - a `/metrics` series of the subject is the reference's (same labels,
//!   same value within tolerance); a missing one is accepted only where a
//!   restriction can touch its queue.
//!
//! The same Redis scenarios also run on a private 3-primary Redis Cluster.
//! The RabbitMQ half does the same over queues in several throw-away vhosts
//! and a `monitoring` user that may read only some of them, for each method.
//!
//! `QE_DIFF_SEEDS=N` runs Redis seeds 1..=N (default 16; from `QE_DIFF_FROM`
//! if set), `QE_DIFF_SEED=S`
//! seed S alone (`QE_DIFF_RABBIT_SEEDS`, `QE_DIFF_RABBIT_SEED`: RabbitMQ,
//! default 3; `QE_DIFF_CLUSTER_SEEDS`, `QE_DIFF_CLUSTER_SEED`: Cluster,
//! default 2); a failing seed prints its one-line reproduction. See
//! docs/testing.md.
mod differential_support;
mod scaler_common;
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use differential_support::Scenario;
use differential_support::backend::Backend;
use differential_support::rabbit::RabbitScenario;
use scaler_common::{Client, client};
use support::*;

/// The CI seeds: 1..=16.
const CI_SEEDS: u64 = 16;

/// How far two ages read a poll apart may differ: seconds, plus a share.
const AGE_TOLERANCE: (f64, f64) = (5.0, 0.01);

/// The seeds to run, from `QE_DIFF_SEED` or `QE_DIFF_SEEDS`.
fn seeds() -> Vec<u64> {
    if let Ok(s) = std::env::var("QE_DIFF_SEED") {
        return vec![s.trim().parse().expect("QE_DIFF_SEED: a number")];
    }
    let n = std::env::var("QE_DIFF_SEEDS")
        .ok()
        .map(|s| s.trim().parse().expect("QE_DIFF_SEEDS: a number"))
        .unwrap_or(CI_SEEDS);
    // QE_DIFF_FROM: the first seed, so a long run can be split in parts.
    let from = std::env::var("QE_DIFF_FROM")
        .ok()
        .map(|s| s.trim().parse().expect("QE_DIFF_FROM: a number"))
        .unwrap_or(1);
    (from..=n).collect()
}

/// Which names a query selects.
#[derive(Debug, Clone)]
enum Sel {
    /// One name.
    Exact(String),
    /// The glob `<prefix>*`.
    Prefix(String),
    /// The brace glob `{a,b}`.
    Set(Vec<String>),
}

impl Sel {
    fn text(&self) -> String {
        match self {
            Sel::Exact(n) => n.clone(),
            Sel::Prefix(p) => format!("{p}*"),
            Sel::Set(v) => format!("{{{}}}", v.join(",")),
        }
    }

    fn selects(&self, name: &str) -> bool {
        match self {
            Sel::Exact(n) => n == name,
            Sel::Prefix(p) => name.starts_with(p.as_str()),
            Sel::Set(v) => v.iter().any(|n| n == name),
        }
    }

    /// Whether a name of group `g` may be selected. A library's `(all)`
    /// unit may belong to any library's group, and to `u`: Celery's
    /// `(all)` reads kombu's `unacked` and `unacked_index`.
    fn may_select_group(&self, g: char) -> bool {
        let of = |name: &str| match name.chars().next() {
            Some('(') => matches!(g, 'r' | 's' | 'c' | '_' | 'b' | 'u'),
            Some(c) => c == g,
            None => false,
        };
        match self {
            Sel::Exact(n) => of(n),
            Sel::Prefix(p) => p.is_empty() || of(p),
            Sel::Set(v) => v.iter().any(|n| of(n)),
        }
    }
}

/// One question asked of both exporters.
struct Question {
    /// `source` metadata.
    source: String,
    sel: Sel,
    /// `preset` metadata, for a preset queue's exact name.
    preset: Option<String>,
    /// `vhost` metadata (RabbitMQ).
    vhost: Option<String>,
    mode: Mode,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    QueueLength,
    Age,
    WaitTime,
    IsActive,
}

impl Mode {
    fn tolerance(self, reference: f64) -> f64 {
        match self {
            Mode::QueueLength | Mode::IsActive => 1e-9,
            Mode::Age => AGE_TOLERANCE.0 + AGE_TOLERANCE.1 * reference.abs(),
            Mode::WaitTime => 0.05 + 0.05 * reference.abs(),
        }
    }
}

/// An answer: a number (`IsActive` as 0/1), or a gRPC code with its message.
type Answer = Result<f64, (tonic::Code, String)>;

async fn ask(c: &Client, q: &Question) -> Answer {
    let text = q.sel.text();
    let mut pairs: Vec<(&str, &str)> = vec![("source", &q.source), ("queue", &text)];
    if let Some(p) = &q.preset {
        pairs.push(("preset", p));
    }
    if let Some(v) = &q.vhost {
        pairs.push(("vhost", v));
    }
    match q.mode {
        Mode::QueueLength => {}
        Mode::Age => pairs.extend([("mode", "Age"), ("operation", "max")]),
        Mode::WaitTime => pairs.extend([
            ("mode", "WaitTime"),
            ("targetWait", "30s"),
            ("processingTime", "1s"),
        ]),
        Mode::IsActive => {}
    }
    let mut c = c.clone();
    let r = if q.mode == Mode::IsActive {
        scaler_common::active(&mut c, &pairs)
            .await
            .map(|b| if b { 1.0 } else { 0.0 })
    } else {
        scaler_common::metrics(&mut c, &pairs).await.map(|(_, f)| f)
    };
    r.map_err(|s| (s.code(), s.message().to_string()))
}

/// How many wrong answers of each kind (the reason after the last `: `,
/// or the kind of `/metrics` difference).
fn kinds(findings: &[String]) -> String {
    let mut by: BTreeMap<&str, usize> = BTreeMap::new();
    for f in findings {
        let kind = if !f.starts_with("/metrics") {
            f.rsplit(": ").next().unwrap_or_default()
        } else if f.contains("is missing from the subject") {
            "/metrics: a series missing where nothing restricts it"
        } else if f.contains("does not have") {
            "/metrics: a series only the subject shows"
        } else {
            "/metrics: another value"
        };
        *by.entry(kind).or_default() += 1;
    }
    by.iter()
        .map(|(k, n)| format!("{n} × {k}"))
        .collect::<Vec<_>>()
        .join("; ")
}

fn show(a: &Answer) -> String {
    match a {
        Ok(v) => format!("{v}"),
        Err((c, m)) => format!("{c:?} ({m})"),
    }
}

/// What one scenario found, and what it compared.
#[derive(Default)]
struct Tally {
    answers: usize,
    subject_errors: usize,
    reference_errors: usize,
    untouched_numbers: usize,
    series: usize,
    series_absent: usize,
    findings: Vec<String>,
    /// The subject's `source_up` and poll errors, for the report.
    subject_state: String,
}

impl Tally {
    fn add(&mut self, other: &Tally) {
        self.answers += other.answers;
        self.subject_errors += other.subject_errors;
        self.reference_errors += other.reference_errors;
        self.untouched_numbers += other.untouched_numbers;
        self.series += other.series;
        self.series_absent += other.series_absent;
    }
}

/// Judges one pair of answers; a wrong one is pushed to `t.findings`.
fn judge(t: &mut Tally, q: &Question, touched: bool, r: &Answer, s: &Answer) {
    t.answers += 1;
    t.subject_errors += usize::from(s.is_err());
    t.reference_errors += usize::from(r.is_err());
    let what = format!(
        "{:?} source={} queue={}{}{}{}",
        q.mode,
        q.source,
        q.sel.text(),
        q.preset
            .as_ref()
            .map(|p| format!(" preset={p}"))
            .unwrap_or_default(),
        q.vhost
            .as_ref()
            .map(|v| format!(" vhost={v}"))
            .unwrap_or_default(),
        if touched {
            ""
        } else {
            " (nothing restricts it)"
        }
    );
    let wrong = match (r, s) {
        (Ok(rv), Ok(sv)) => {
            if !touched {
                t.untouched_numbers += 1;
            }
            ((rv - sv).abs() > q.mode.tolerance(*rv)).then_some("a different number")
        }
        (Ok(_), Err((tonic::Code::Unavailable, _))) => {
            (!touched).then_some("an error where nothing restricts the name")
        }
        (Ok(_), Err((tonic::Code::NotFound, _))) => {
            Some("NOT_FOUND (the name cannot exist) for a queue that exists")
        }
        (Ok(_), Err(_)) => Some("an error other than UNAVAILABLE"),
        (Err(_), Ok(_)) => Some("a number where the reference has none"),
        (Err((rc, _)), Err((sc, _))) => {
            (!touched && rc != sc).then_some("another error code where nothing restricts the name")
        }
    };
    if let Some(why) = wrong {
        t.findings.push(format!(
            "{what}: subject answers {}, reference {}: {why}",
            show(s),
            show(r)
        ));
    }
}

/// The `queue_*` series of a scrape (not the exporter's own), keyed by
/// name and labels, with their value and labels.
fn queue_series(s: &Scrape) -> BTreeMap<String, (f64, BTreeMap<String, String>)> {
    let mut out = BTreeMap::new();
    for x in parse_classic(s.text()).samples {
        if !x.metric.starts_with("queue_") || x.metric.starts_with("queue_exporter_") {
            continue;
        }
        let labels: BTreeMap<String, String> = x
            .labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let v = match x.value {
            prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Untyped(v) => v,
            _ => f64::NAN,
        };
        out.insert(format!("{}{labels:?}", x.metric), (v, labels));
    }
    out
}

/// Whether a series' value is an age (read a poll apart: tolerance).
fn is_age_value(key: &str) -> bool {
    key.contains("age_seconds") && !key.contains("_bucket") && !key.contains("count")
}

/// Compares the `queue_*` series; `touched` says whether a restriction may
/// touch a series (by its labels).
fn compare_series(
    t: &mut Tally,
    touched: &dyn Fn(&BTreeMap<String, String>) -> bool,
    r: &Scrape,
    s: &Scrape,
) {
    let (r, s) = (queue_series(r), queue_series(s));
    for (key, (sv, _)) in &s {
        t.series += 1;
        match r.get(key) {
            None => t.findings.push(format!(
                "/metrics: the subject shows {key} = {sv}, which the reference does not have"
            )),
            Some((rv, _)) => {
                let tol = if is_age_value(key) {
                    AGE_TOLERANCE.0 + AGE_TOLERANCE.1 * rv.abs()
                } else {
                    1e-9
                };
                if (rv - sv).abs() > tol && !(rv.is_nan() && sv.is_nan()) {
                    t.findings
                        .push(format!("/metrics: {key}: subject {sv}, reference {rv}"));
                }
            }
        }
    }
    for (key, (rv, labels)) in &r {
        if s.contains_key(key) {
            continue;
        }
        t.series_absent += 1;
        if !touched(labels) {
            t.findings.push(format!(
                "/metrics: {key} = {rv} is missing from the subject, and nothing restricts it"
            ));
        }
    }
}

/// The questions for a scenario: every name either exporter reports (with
/// its preset), globs over each group and sub-prefixes, a brace set, the
/// whole source, and names that do not exist.
fn questions(
    sc: &Scenario,
    r: &Scrape,
    s: &Scrape,
    rng: &mut differential_support::Rng,
) -> Vec<Question> {
    let mut names: BTreeSet<(String, Option<String>)> = BTreeSet::new();
    for scrape in [r, s] {
        for x in scrape.samples("queue_depth", &[]) {
            if let Some(q) = x.labels.get("queue") {
                names.insert((q.to_string(), x.labels.get("preset").map(str::to_string)));
            }
        }
    }
    let mut sels: Vec<(Sel, Option<String>)> = names
        .iter()
        .map(|(n, p)| (Sel::Exact(n.clone()), p.clone()))
        .collect();
    let mut prefixes: BTreeSet<String> = BTreeSet::new();
    prefixes.insert(String::new());
    for g in sc.groups() {
        if g != '_' {
            prefixes.insert(g.to_string());
        }
    }
    for (g, _) in differential_support::PLAIN_GROUPS {
        prefixes.insert(format!("{g}:"));
        prefixes.insert(format!("{g}:0"));
        sels.push((Sel::Exact(format!("{g}:zz-missing")), None));
    }
    prefixes.insert("w:".into());
    prefixes.insert("qq".into());
    sels.extend(prefixes.into_iter().map(|p| (Sel::Prefix(p), None)));
    sels.push((Sel::Exact("zzz-missing".into()), None));
    sels.push((Sel::Exact("w:drained".into()), None));
    let plain: Vec<String> = names
        .iter()
        .filter(|(_, p)| p.is_none())
        .map(|(n, _)| n.clone())
        .collect();
    if plain.len() >= 2 {
        let a = rng.pick(&plain).clone();
        let b = rng.pick(&plain).clone();
        if a != b {
            sels.push((Sel::Set(vec![a, b]), None));
        }
    }
    let mut out = Vec::new();
    for (sel, preset) in sels {
        for mode in [Mode::QueueLength, Mode::Age, Mode::WaitTime, Mode::IsActive] {
            out.push(Question {
                source: "main".into(),
                sel: sel.clone(),
                preset: preset.clone(),
                vhost: None,
                mode,
            });
        }
    }
    out
}

fn exporter_config(sc: &Scenario, url: &str, max_keys: usize) -> String {
    let mut y = format!(
        "listen: {{ grpc: 127.0.0.1:0 }}\nscaler: {{ max_staleness: 1h }}\nsources:\n  - name: main\n    type: redis\n    url: {url}\n    poll_interval: 200ms\n    discovery_interval: 400ms\n    age_histogram_interval: 0s\n    client_tracking: {}\n    max_keys: {max_keys}\n",
        sc.client_tracking
    );
    if sc.zero_config {
        y.push_str("    keyspace_scan_interval: 0s\n");
    } else {
        y.push_str("    queues:\n");
        y.push_str(&indent(&sc.queues_yaml, 6));
    }
    y
}

/// Discovery rounds the source finished, over both kinds.
fn rounds(s: &Scrape) -> f64 {
    s.samples(
        "queue_exporter_discovery_rounds_total",
        &[("source", "main")],
    )
    .map(|x| match x.value {
        prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Untyped(v) => v,
        _ => 0.0,
    })
    .sum()
}

/// Waits until the reference has finished two discovery rounds and four
/// polls.
async fn settle(app: &TestApp) -> Scrape {
    app.scrape_until(
        "the reference to discover twice and poll four times",
        Duration::from_secs(60),
        |s| rounds(s) >= 2.0 && polls(s, "main") >= 4,
    )
    .await
}

/// Whether the reference reports a queue named `name` (a library queue's
/// name is no key's).
fn names_reported(s: &Scrape, name: &str) -> bool {
    s.samples("queue_depth", &[("queue", name)])
        .next()
        .is_some()
}

/// Runs one scenario; returns its tally (findings included).
async fn run(seed: u64, cluster: bool) -> (Scenario, Tally) {
    let sc = Scenario::build(seed);
    let backend = Backend::start(cluster);
    backend.write(&sc.writes);
    let admin_url = backend.admin_url();
    let subject_url = backend.subject_url(&sc.acl);
    let reference = TestApp::start(&exporter_config(&sc, &admin_url, 100_000)).await;
    // QE_DIFF_CONTROL: the subject as the reference, to show the comparison
    // itself finds nothing where nothing differs.
    let subject = if std::env::var_os("QE_DIFF_CONTROL").is_some() {
        TestApp::start(&exporter_config(&sc, &admin_url, 100_000)).await
    } else {
        TestApp::start(&exporter_config(&sc, &subject_url, sc.max_keys)).await
    };
    let r0 = settle(&reference).await;
    assert_eq!(
        r0.source_up("main"),
        Some(1.0),
        "seed {seed}: the reference must be up\n{}",
        sc.describe()
    );
    // The subject may never finish a discovery round (that is what some
    // restrictions do): six polls, failed ones included, are as many
    // chances as the reference had. Then one more poll of each, so neither
    // is mid-round.
    subject
        .scrape_until("six polls of the subject", Duration::from_secs(60), |s| {
            polls(s, "main") >= 6
        })
        .await;
    reference
        .wait_polls("main", 2, Duration::from_secs(30))
        .await;
    subject.wait_polls("main", 2, Duration::from_secs(30)).await;

    let (rc, scl) = (client(&reference).await, client(&subject).await);
    let rs = reference.scrape().await;
    let ss = subject.scrape().await;
    if std::env::var_os("QE_DIFF_VERBOSE").is_some() {
        let names: BTreeSet<String> = rs
            .samples("queue_depth", &[])
            .filter_map(|x| {
                let q = x.labels.get("queue")?;
                Some(match x.labels.get("preset") {
                    Some(p) => format!("{q} ({p})"),
                    None => q.to_string(),
                })
            })
            .collect();
        eprintln!("  the reference reports: {names:?}");
    }
    let subject_state = format!(
        "subject source_up {:?}, poll errors {:?}",
        ss.source_up("main"),
        ss.samples("queue_exporter_poll_errors_total", &[("source", "main")])
            .filter_map(|x| match x.value {
                prometheus_parse::Value::Counter(v) if v > 0.0 => {
                    Some(format!(
                        "{}={v}",
                        x.labels.get("reason").unwrap_or_default()
                    ))
                }
                _ => None,
            })
            .collect::<Vec<_>>()
    );
    let mut t = Tally {
        subject_state,
        ..Tally::default()
    };
    let series_touched = |labels: &BTreeMap<String, String>| {
        let sel = Sel::Exact(labels.get("queue").cloned().unwrap_or_default());
        sc.touches(&|n| sel.selects(n), &|g| sel.may_select_group(g), false)
    };
    compare_series(&mut t, &series_touched, &rs, &ss);
    let mut rng = differential_support::Rng::new(seed.wrapping_mul(31));
    for q in questions(&sc, &rs, &ss, &mut rng) {
        let missing = matches!(&q.sel, Sel::Exact(n) if !sc.keys.iter().any(|k| k.name == *n) && !names_reported(&rs, n));
        let touched = sc.touches(
            &|n| q.sel.selects(n),
            &|g| q.sel.may_select_group(g),
            missing,
        );
        let (ra, sa) = (ask(&rc, &q).await, ask(&scl, &q).await);
        judge(&mut t, &q, touched, &ra, &sa);
    }
    reference.stop().await;
    subject.stop().await;
    (sc, t)
}

/// Runs Redis `seeds` (on a cluster when `cluster`) and fails on any wrong
/// answer; `repro` is the command line that runs one seed, before the seed.
async fn run_seeds(seeds: Vec<u64>, cluster: bool, repro: &str) {
    let mut total = Tally::default();
    let mut failed: Vec<(u64, String)> = Vec::new();
    let started = std::time::Instant::now();
    for &seed in &seeds {
        eprintln!("differential: seed {seed}");
        if std::env::var_os("QE_DIFF_VERBOSE").is_some() {
            eprintln!("{}", Scenario::build(seed).describe());
        }
        let (sc, t) = run(seed, cluster).await;
        total.add(&t);
        if std::env::var_os("QE_DIFF_VERBOSE").is_some() {
            eprintln!(
                "{}\n  {} answers, {} subject errors, {} numbers where nothing restricts, {} wrong",
                sc.describe(),
                t.answers,
                t.subject_errors,
                t.untouched_numbers,
                t.findings.len()
            );
        }
        if !t.findings.is_empty() {
            let mut msg = format!(
                "{}\n  {}\n  {} wrong answers ({}):\n",
                sc.describe(),
                t.subject_state,
                t.findings.len(),
                kinds(&t.findings)
            );
            // All of them with QE_DIFF_VERBOSE, else the first 40, KEDA's
            // answers before /metrics series.
            let shown = if std::env::var_os("QE_DIFF_VERBOSE").is_some() {
                usize::MAX
            } else {
                40
            };
            let mut sorted: Vec<&String> = t.findings.iter().collect();
            sorted.sort_by_key(|f| f.starts_with("/metrics"));
            for f in sorted.into_iter().take(shown) {
                msg.push_str(&format!("    - {f}\n"));
            }
            if t.findings.len() > shown {
                msg.push_str(&format!("    … and {} more\n", t.findings.len() - shown));
            }
            msg.push_str(&format!(
                "  reproduce: {repro}{seed} cargo test --test differential {} -- --nocapture\n",
                if cluster { "cluster" } else { "redis" }
            ));
            eprintln!("{msg}");
            failed.push((seed, msg));
        }
    }
    eprintln!(
        "differential: {} scenarios in {:.0?}, {} KEDA answers compared ({} subject errors = {:.1} %, {} reference errors), {} numbers compared where nothing restricts; {} subject series compared, {} reference series absent from the subject; {} seeds with wrong answers: {:?}",
        seeds.len(),
        started.elapsed(),
        total.answers,
        total.subject_errors,
        100.0 * total.subject_errors as f64 / total.answers.max(1) as f64,
        total.reference_errors,
        total.untouched_numbers,
        total.series,
        total.series_absent,
        failed.len(),
        failed.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
    );
    // The other direction has teeth only if names nothing restricts were
    // answered with numbers.
    assert!(
        total.untouched_numbers > 0,
        "no number was compared where nothing restricts the name: the test proves nothing"
    );
    assert!(
        failed.is_empty(),
        "{} of {} seeds found wrong answers:\n{}",
        failed.len(),
        seeds.len(),
        failed
            .iter()
            .map(|(_, m)| m.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restricted_redis_exporter_answers_the_reference_number_or_an_error_never_another_number()
{
    run_seeds(seeds(), false, "QE_DIFF_SEED=").await;
}

/// The same scenarios on a 3-primary Redis Cluster: `QE_DIFF_CLUSTER_SEEDS`
/// (default 2) or `QE_DIFF_CLUSTER_SEED`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restricted_cluster_exporter_answers_the_reference_number_or_an_error() {
    let seeds = match std::env::var("QE_DIFF_CLUSTER_SEED") {
        Ok(s) => vec![s.trim().parse().expect("QE_DIFF_CLUSTER_SEED: a number")],
        Err(_) => {
            let n: u64 = std::env::var("QE_DIFF_CLUSTER_SEEDS")
                .ok()
                .map(|s| s.trim().parse().expect("QE_DIFF_CLUSTER_SEEDS: a number"))
                .unwrap_or(2);
            (1..=n).collect()
        }
    };
    run_seeds(seeds, true, "QE_DIFF_CLUSTER_SEED=").await;
}

/// The RabbitMQ seeds to run, from `QE_DIFF_RABBIT_SEED` or
/// `QE_DIFF_RABBIT_SEEDS` (default 3).
fn rabbit_seeds() -> Vec<u64> {
    if let Ok(s) = std::env::var("QE_DIFF_RABBIT_SEED") {
        return vec![s.trim().parse().expect("QE_DIFF_RABBIT_SEED: a number")];
    }
    let n = std::env::var("QE_DIFF_RABBIT_SEEDS")
        .ok()
        .map(|s| s.trim().parse().expect("QE_DIFF_RABBIT_SEEDS: a number"))
        .unwrap_or(3);
    (1..=n).collect()
}

/// Waits until every queue of `sc` shows its messages in `app`'s
/// management and prometheus sources (their statistics lag the publishes).
async fn rabbit_settle(app: &TestApp, sc: &RabbitScenario) {
    app.scrape_until(
        "every queue's depth in the management and prometheus sources",
        Duration::from_secs(90),
        |s| {
            sc.vhosts.iter().zip(&sc.queues).all(|(v, qs)| {
                qs.iter().all(|(q, n)| {
                    ["mgmt-all", "prom"].iter().all(|src| {
                        s.value(
                            "queue_depth",
                            &[("source", src), ("vhost", &v.name), ("queue", q)],
                        ) == Some(*n as f64)
                    })
                })
            })
        },
    )
    .await;
}

/// Runs one RabbitMQ scenario.
async fn run_rabbit(seed: u64) -> (String, Tally) {
    let sc = RabbitScenario::build(seed).await;
    let reference = TestApp::start(&sc.config("guest", "guest")).await;
    let subject = if std::env::var_os("QE_DIFF_CONTROL").is_some() {
        TestApp::start(&sc.config("guest", "guest")).await
    } else {
        TestApp::start(&sc.config(&sc.user.name, &sc.password)).await
    };
    rabbit_settle(&reference, &sc).await;
    // Three more polls of each after the reference saw every message.
    reference
        .wait_polls("mgmt-all", 3, Duration::from_secs(30))
        .await;
    subject
        .wait_polls("mgmt-all", 3, Duration::from_secs(30))
        .await;
    subject.wait_polls("prom", 2, Duration::from_secs(30)).await;

    let (rc, scl) = (client(&reference).await, client(&subject).await);
    let rs = reference.scrape().await;
    let ss = subject.scrape().await;
    let mut t = Tally {
        subject_state: format!(
            "subject source_up: {:?}",
            ss.samples("queue_exporter_source_up", &[])
                .map(|x| format!(
                    "{}={:?}",
                    x.labels.get("source").unwrap_or_default(),
                    x.value
                ))
                .collect::<Vec<_>>()
        ),
        ..Tally::default()
    };
    let series_touched = |labels: &BTreeMap<String, String>| {
        sc.touches(
            labels.get("source").map_or("", String::as_str),
            labels.get("vhost").map(String::as_str),
        )
    };
    compare_series(&mut t, &series_touched, &rs, &ss);

    let mut sources: Vec<String> = vec!["mgmt-all".into(), "mgmt-listed".into(), "prom".into()];
    sources.extend((0..sc.vhosts.len()).map(|i| format!("amqp-{i}")));
    let mut vhost_choices: Vec<Option<String>> = vec![None];
    vhost_choices.extend(sc.vhosts.iter().map(|v| Some(v.name.clone())));
    for source in &sources {
        let mut sels: BTreeSet<(String, Option<String>)> = BTreeSet::new();
        for scrape in [&rs, &ss] {
            for x in scrape.samples("queue_depth", &[("source", source)]) {
                if let Some(q) = x.labels.get("queue") {
                    let v = x.labels.get("vhost").map(str::to_string);
                    sels.insert((q.to_string(), v));
                    sels.insert((q.to_string(), None));
                }
            }
        }
        let mut questions: Vec<(Sel, Option<String>)> =
            sels.into_iter().map(|(q, v)| (Sel::Exact(q), v)).collect();
        for v in &vhost_choices {
            questions.push((Sel::Prefix(sc.prefix.clone()), v.clone()));
            questions.push((Sel::Prefix(format!("{}jobs.", sc.prefix)), v.clone()));
            questions.push((Sel::Exact(format!("{}nope", sc.prefix)), v.clone()));
        }
        for (sel, vhost) in questions {
            for mode in [Mode::QueueLength, Mode::Age, Mode::IsActive] {
                let q = Question {
                    source: source.clone(),
                    sel: sel.clone(),
                    preset: None,
                    vhost: vhost.clone(),
                    mode,
                };
                let touched = sc.touches(source, vhost.as_deref());
                let (ra, sa) = (ask(&rc, &q).await, ask(&scl, &q).await);
                judge(&mut t, &q, touched, &ra, &sa);
            }
        }
    }
    reference.stop().await;
    subject.stop().await;
    (sc.describe(), t)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rabbitmq_user_refused_some_vhosts_answers_the_reference_number_or_an_error() {
    let seeds = rabbit_seeds();
    let mut total = Tally::default();
    let mut failed: Vec<(u64, String)> = Vec::new();
    for &seed in &seeds {
        eprintln!("differential (rabbitmq): seed {seed}");
        let (describe, t) = run_rabbit(seed).await;
        total.add(&t);
        if std::env::var_os("QE_DIFF_VERBOSE").is_some() || !t.findings.is_empty() {
            let mut msg = format!(
                "{describe}\n  {}\n  {} answers, {} subject errors, {} wrong ({}):\n",
                t.subject_state,
                t.answers,
                t.subject_errors,
                t.findings.len(),
                kinds(&t.findings)
            );
            for f in &t.findings {
                msg.push_str(&format!("    - {f}\n"));
            }
            msg.push_str(&format!(
                "  reproduce: QE_DIFF_RABBIT_SEED={seed} cargo test --test differential rabbitmq -- --nocapture\n"
            ));
            eprintln!("{msg}");
            if !t.findings.is_empty() {
                failed.push((seed, msg));
            }
        }
    }
    eprintln!(
        "differential (rabbitmq): {} scenarios, {} KEDA answers compared ({} subject errors = {:.1} %), {} numbers compared where nothing restricts; {} subject series compared, {} reference series absent from the subject; seeds with wrong answers: {:?}",
        seeds.len(),
        total.answers,
        total.subject_errors,
        100.0 * total.subject_errors as f64 / total.answers.max(1) as f64,
        total.untouched_numbers,
        total.series,
        total.series_absent,
        failed.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
    );
    assert!(
        total.untouched_numbers > 0,
        "no number was compared where nothing restricts the name: the test proves nothing"
    );
    assert!(
        failed.is_empty(),
        "{} of {} RabbitMQ seeds found wrong answers:\n{}",
        failed.len(),
        seeds.len(),
        failed
            .iter()
            .map(|(_, m)| m.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// The judge itself: an exporter that errs everywhere, invents a number,
/// or calls an existing queue a typo is caught; an `UNAVAILABLE` where a
/// restriction may touch the name is not.
#[test]
fn the_judge_fails_an_exporter_that_errs_everywhere_or_invents_a_number() {
    let q = |mode| Question {
        source: "main".into(),
        sel: Sel::Prefix("g:".into()),
        preset: None,
        vhost: None,
        mode,
    };
    let unavailable: Answer = Err((tonic::Code::Unavailable, "unknown".into()));
    let not_found: Answer = Err((tonic::Code::NotFound, "no queue".into()));
    let cases: Vec<(Mode, bool, Answer, Answer, bool)> = vec![
        // (mode, touched, reference, subject, wrong?)
        (
            Mode::QueueLength,
            false,
            Ok(12.0),
            unavailable.clone(),
            true,
        ),
        (
            Mode::QueueLength,
            true,
            Ok(12.0),
            unavailable.clone(),
            false,
        ),
        (Mode::QueueLength, true, Ok(78.0), Ok(15.0), true),
        (Mode::QueueLength, true, Ok(12.0), Ok(12.0), false),
        (Mode::QueueLength, true, Ok(12.0), not_found.clone(), true),
        (Mode::QueueLength, true, unavailable.clone(), Ok(0.0), true),
        (
            Mode::QueueLength,
            false,
            not_found.clone(),
            unavailable.clone(),
            true,
        ),
        (
            Mode::QueueLength,
            true,
            not_found,
            unavailable.clone(),
            false,
        ),
        (Mode::Age, false, Ok(600.0), Ok(603.0), false),
        (Mode::Age, false, Ok(600.0), Ok(540.0), true),
        (Mode::WaitTime, false, Ok(4.0), Ok(4.1), false),
        (Mode::WaitTime, false, Ok(4.0), Ok(5.0), true),
    ];
    for (i, (mode, touched, r, s, wrong)) in cases.into_iter().enumerate() {
        let mut t = Tally::default();
        judge(&mut t, &q(mode), touched, &r, &s);
        assert_eq!(
            t.findings.len(),
            usize::from(wrong),
            "case {i}: {:?}",
            t.findings
        );
    }
}
