//! What `plan` prints: a table of the candidates and the recommendation
//! as trigger YAML to paste, or the same as JSON.

use std::fmt::Write;

use serde_json::{Value, json};

use crate::plan::cluster::MetricType;
use crate::plan::command::{Candidate, Plan};

/// Unix seconds as RFC 3339, for the trace's times.
fn at(plan: &Plan, t: f64) -> String {
    let s = plan.trace.start + t;
    chrono::DateTime::from_timestamp_millis((s * 1000.0).round() as i64).map_or_else(
        || format!("{s}"),
        |d| d.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    )
}

/// A wait in seconds, or `-` when no job was scored.
fn wait(w: Option<f64>) -> String {
    w.map_or_else(|| "-".to_owned(), |w| format!("{w:.1} s"))
}

/// The lines naming what was left out of the scores.
fn left_out_lines(plan: &Plan) -> Vec<String> {
    let mut out = Vec::new();
    for &(a, b) in &plan.trace.gaps {
        out.push(format!(
            "gap: no traffic recorded from {} to {} ({:.0} s): not replayed, and left out of the scores with the {:.0} s after it",
            at(plan, a),
            at(plan, b),
            b - a,
            plan.lead_in
        ));
    }
    let out_s: f64 = plan.left_out.iter().map(|(a, b)| b - a).sum();
    if out_s > 0.0 {
        out.push(format!(
            "left out of the scores: {:.0} s of {:.0} s ({:.1} %)",
            out_s,
            plan.trace.length,
            100.0 * out_s / plan.trace.length
        ));
    }
    out
}

/// The range of a candidate's draws: share on time and worker-hours.
fn spread_of(c: &Candidate) -> String {
    let range = |f: &dyn Fn(&crate::plan::score::Score) -> f64| {
        let lo = c.draws.iter().map(f).fold(f64::INFINITY, f64::min);
        let hi = c.draws.iter().map(f).fold(f64::NEG_INFINITY, f64::max);
        (lo, hi)
    };
    let (w0, w1) = range(&|d| d.within_pct);
    let (h0, h1) = range(&|d| d.worker_s / 3600.0);
    format!("{w0:.2}-{w1:.2}%, {h0:.2}-{h1:.2}")
}

/// The recommendation as the `triggers:` entry of a ScaledObject.
pub fn trigger_yaml(c: &Candidate) -> String {
    let mut keys: Vec<_> = c.meta.iter().collect();
    keys.sort();
    let mut y = String::from("triggers:\n  - type: external\n");
    if c.metric_type != MetricType::AverageValue {
        let _ = writeln!(y, "    metricType: {}", c.metric_type.as_str());
    }
    y.push_str("    metadata:\n");
    for (k, v) in keys {
        let _ = writeln!(y, "      {k}: {}", Value::String(v.clone()));
    }
    y
}

/// The table and the recommendation.
pub fn text(plan: &Plan, price: Option<f64>, percentile: f64) -> String {
    let mut s = preamble(plan);
    table(&mut s, plan, price);
    for c in plan.candidates.iter().filter(|c| c.fallback_syncs > 0) {
        let _ = writeln!(
            s,
            "{}: KEDA's fallback answered for the scaler at {} HPA syncs",
            c.name, c.fallback_syncs
        );
    }
    match plan.recommended.and_then(|i| plan.candidates.get(i)) {
        Some(c) => {
            let _ = write!(
                s,
                "\nrecommended: {} (the cheapest starting at least {percentile} % of jobs within targetWait{})\n{}",
                c.name,
                if plan.draws > 1 { " in every draw" } else { "" },
                trigger_yaml(c)
            );
        }
        None => {
            let _ = writeln!(
                s,
                "\nno candidate starts {percentile} % of jobs within targetWait"
            );
        }
    }
    s
}

/// The lines before the table: what was replayed, what was left out, the
/// notes, and how several draws are shown.
fn preamble(plan: &Plan) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "replayed {} to {}: {} jobs; targetWait {}; scores from {:.0} s in (the replay starts at minReplicaCount)",
        at(plan, 0.0),
        at(plan, plan.trace.length),
        plan.jobs,
        crate::plan::command::seconds(plan.target_wait),
        plan.lead_in
    );
    for line in left_out_lines(plan).iter().chain(&plan.notes) {
        let _ = writeln!(s, "{line}");
    }
    if plan.draws > 1 {
        let _ = writeln!(
            s,
            "{} draws of the trace's jobs (seeds {} to {}): each candidate's share on time and waits are its worst draw's, its worker-hours the mean; the spread column gives each draw's range",
            plan.draws,
            plan.seed,
            plan.seed.wrapping_add(u64::from(plan.draws) - 1)
        );
    }
    s
}

/// One row per candidate under a header, into `s`.
fn table(s: &mut String, plan: &Plan, price: Option<f64>) {
    let spread = plan.draws > 1;
    let column = |on: bool, text: String| if on { text } else { String::new() };
    let _ = writeln!(
        s,
        "\n{:<32} {:>8} {:>9} {:>9} {:>9} {:>12}{} {:>5} {:>7}{}",
        "candidate",
        "on time",
        "p50 wait",
        "p99 wait",
        "max wait",
        "worker-hours",
        column(price.is_some(), format!(" {:>10}", "cost")),
        "peak",
        "scaling",
        column(spread, format!(" {:>27}", "spread: on time, hours"))
    );
    for c in &plan.candidates {
        let hours = c.score.worker_s / 3600.0;
        let cost = price.map_or(String::new(), |p| format!(" {:>10.2}", p * hours));
        let _ = writeln!(
            s,
            "{:<32} {:>7.2}% {:>9} {:>9} {:>9} {:>12.2}{} {:>5} {:>7}{}",
            c.name,
            c.score.within_pct,
            wait(c.score.p50_wait),
            wait(c.score.p99_wait),
            wait(c.score.max_wait),
            hours,
            cost,
            c.peak_replicas,
            c.scale_events,
            column(spread, format!(" {:>27}", spread_of(c)))
        );
    }
}

/// The same as JSON, for scripts.
pub fn json(plan: &Plan, price: Option<f64>) -> Value {
    let gaps: Vec<Value> = plan
        .trace
        .gaps
        .iter()
        .map(|&(a, b)| json!({"from": at(plan, a), "to": at(plan, b), "seconds": b - a}))
        .collect();
    let candidates: Vec<Value> = plan
        .candidates
        .iter()
        .map(|c| {
            let hours = c.score.worker_s / 3600.0;
            json!({
                "name": c.name, "metadata": c.meta, "jobs": c.score.jobs,
                "started": c.score.started, "within_pct": c.score.within_pct,
                "p50_wait": c.score.p50_wait, "p99_wait": c.score.p99_wait,
                "max_wait": c.score.max_wait, "worker_hours": hours,
                "cost": price.map(|p| p * hours), "peak_replicas": c.peak_replicas,
                "scale_events": c.scale_events, "fallback_syncs": c.fallback_syncs, "metric_type": c.metric_type.as_str(),
                "draws": c.draws.iter().enumerate().map(|(k, d)| json!({
                    "seed": plan.seed.wrapping_add(k as u64), "jobs": d.jobs,
                    "within_pct": d.within_pct, "p99_wait": d.p99_wait,
                    "worker_hours": d.worker_s / 3600.0,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    let b = &plan.cluster.behavior;
    json!({
        "from": at(plan, 0.0), "to": at(plan, plan.trace.length), "jobs": plan.jobs,
        "seed": plan.seed, "draws": plan.draws,
        "target_wait": plan.target_wait, "lead_in": plan.lead_in, "gaps": gaps,
        "left_out_seconds": plan.left_out.iter().map(|(a, b)| b - a).sum::<f64>(),
        "notes": plan.notes,
        "cluster": {
            "polling_interval": plan.cluster.keda_poll, "cooldown_period": plan.cluster.cooldown,
            "min_replicas": plan.cluster.min_replicas, "max_replicas": plan.cluster.max_replicas,
            "pod_start": plan.cluster.pod_start, "hpa_sync": plan.cluster.hpa_sync,
            "scale_up_stabilization": b.up.stabilization, "scale_down_stabilization": b.down.stabilization,
            "scale_up_policies": b.up.policies.iter().map(|p| json!([format!("{:?}", p.kind), p.value, p.period])).collect::<Vec<_>>(),
            "scale_down_policies": b.down.policies.iter().map(|p| json!([format!("{:?}", p.kind), p.value, p.period])).collect::<Vec<_>>(),
            "fallback": plan.cluster.fallback.map(|f| json!({
                "failure_threshold": f.failure_threshold, "replicas": f.replicas,
                "behavior": format!("{:?}", f.behavior),
            })),
        },
        "candidates": candidates,
        "recommended": plan.recommended.and_then(|i| plan.candidates.get(i)).map(|c| c.name.clone()),
    })
}
