//! `/scalers` (HTML) and `/api/v1/scalers` (JSON): every ScaledObject
//! trigger KEDA asked about, its metadata (secrets redacted), the last
//! answers (value, active, error, when), WaitTime's model inputs and output,
//! and the desired replicas over the last 15 minutes. It answers "why
//! didn't my ScaledObject scale?" from what the scaler recorded
//! ([`crate::telemetry::decisions`]); it reaches no backend. The page is
//! plain HTML with an inline SVG sparkline: no script at all.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::extract::State;
use axum::response::Html;
use serde_json::{Value, json};

use crate::http::{HttpState, html_escape};
use crate::telemetry::decisions::{Answer, Decisions, Entry, ModelView};

/// Unix seconds of `t`, for JSON.
fn unix(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

/// One answer as JSON; absent parts are `null`.
fn answer_json(a: &Answer) -> Value {
    json!({
        "at": unix(a.at),
        "method": a.method,
        "value": a.value,
        "desired_replicas": a.desired,
        "active": a.active,
        "error": a.error,
        "model": a.model.map(|m| json!({
            "backlog": m.backlog,
            "oldest_age_seconds": m.oldest_age,
            "arrival_rate": m.arrival_rate,
            "service_time_seconds": m.service_time,
            "service_time_from": m.service_from,
            "workers": m.workers,
            "bound": m.bound,
        })),
    })
}

/// One entry as JSON.
fn entry_json(e: &Entry) -> Value {
    let metadata: serde_json::Map<String, Value> = e
        .metadata
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    json!({
        "namespace": e.labels.namespace,
        "scaledobject": e.labels.scaledobject,
        "queue": e.labels.queue,
        "mode": e.labels.mode,
        "metadata": metadata,
        "last_asked": unix(e.last_asked),
        "get_metrics": e.metrics.as_ref().map(answer_json),
        "is_active": e.activity.as_ref().map(answer_json),
        "history": e.history.iter().map(|(t, v)| json!([unix(*t), v])).collect::<Vec<_>>(),
    })
}

/// `GET /api/v1/scalers`.
pub async fn api(State(state): State<HttpState>) -> Json<Value> {
    let entries = state.telemetry.decisions.entries(SystemTime::now());
    Json(json!({
        "expire_seconds": Decisions::EXPIRE.as_secs(),
        "history_seconds": Decisions::HISTORY.as_secs(),
        "scalers": entries.iter().map(entry_json).collect::<Vec<_>>(),
    }))
}

/// "12 s ago".
fn ago(now: SystemTime, t: SystemTime) -> String {
    let s = now.duration_since(t).unwrap_or_default().as_secs();
    humantime::format_duration(Duration::from_secs(s)).to_string() + " ago"
}

/// A number for people: at most 3 decimals, no trailing zeros.
fn num(v: f64) -> String {
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// The history as an inline SVG polyline over the last 15 minutes; gaps
/// (errors) break the line.
fn sparkline(e: &Entry, now: SystemTime) -> String {
    const W: f64 = 240.0;
    const H: f64 = 40.0;
    let span = Decisions::HISTORY.as_secs_f64();
    let max = e
        .history
        .iter()
        .filter_map(|(_, v)| *v)
        .fold(1.0_f64, f64::max);
    let mut lines: Vec<Vec<(f64, f64)>> = vec![Vec::new()];
    for (t, v) in &e.history {
        let age = now.duration_since(*t).unwrap_or_default().as_secs_f64();
        match v {
            Some(v) => {
                // 4 px inside the box, so a dot at an end shows whole.
                let x = 4.0 + (W - 8.0) * (1.0 - (age / span).min(1.0));
                let y = H - 4.0 - (H - 8.0) * (v / max);
                if let Some(line) = lines.last_mut() {
                    line.push((x, y));
                }
            }
            None => lines.push(Vec::new()),
        }
    }
    let mut svg = format!(
        "<svg class=\"spark\" width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\" role=\"img\" \
         aria-label=\"desired replicas, last 15 minutes, up to {}\">",
        num(max)
    );
    for line in lines.iter().filter(|l| !l.is_empty()) {
        let points: Vec<String> = line.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
        let _ = write!(
            svg,
            "<polyline fill=\"none\" stroke=\"#2a6fdb\" stroke-width=\"1.5\" points=\"{}\"/>",
            points.join(" ")
        );
        if let [(x, y)] = line.as_slice() {
            let _ = write!(
                svg,
                "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"2.5\" fill=\"#2a6fdb\"/>"
            );
        }
    }
    svg.push_str("</svg>");
    svg
}

/// The service time the model used and where it comes from, for people.
fn service_text(m: &ModelView) -> String {
    match (m.service_time, m.service_from) {
        (Some(t), "processingTime") => format!("{} s (processingTime)", num(t)),
        (Some(t), from) => format!("{} s (measured: {from})", num(t)),
        (None, _) => "unknown, not needed (nothing waits or arrives)".into(),
    }
}

/// One answer as table cells: value and replicas, active, error, when.
fn answer_cells(a: Option<&Answer>, now: SystemTime) -> String {
    let Some(a) = a else {
        return "<td colspan=\"2\">not asked</td>".into();
    };
    let what = match (&a.error, a.value, a.active) {
        (Some(e), _, _) => format!("<span class=\"error\">{}</span>", html_escape(e)),
        (None, Some(v), _) if a.method == "GetMetrics" => format!(
            "value {} → {} replicas",
            num(v),
            a.desired.map_or("?".into(), num)
        ),
        (None, _, Some(active)) => format!("active: {active}"),
        _ => String::new(),
    };
    format!("<td>{what}</td><td>{}</td>", ago(now, a.at))
}

/// `GET /scalers`.
pub async fn page(State(state): State<HttpState>) -> Html<String> {
    let now = SystemTime::now();
    let entries = state.telemetry.decisions.entries(now);
    let mut body = String::new();
    if entries.is_empty() {
        body.push_str(
            "<p id=\"none\">KEDA has not asked about any ScaledObject in the last 5 minutes.</p>",
        );
    }
    for e in &entries {
        let l = &e.labels;
        let _ = write!(
            body,
            "<section class=\"scaler\"><h2>{}/{} <small>{} on {}</small></h2>{}",
            html_escape(&l.namespace),
            html_escape(&l.scaledobject),
            html_escape(&l.mode),
            html_escape(&l.queue),
            sparkline(e, now)
        );
        body.push_str("<table><tr><th>GetMetrics</th>");
        body.push_str(&answer_cells(e.metrics.as_ref(), now));
        body.push_str("</tr><tr><th>IsActive</th>");
        body.push_str(&answer_cells(e.activity.as_ref(), now));
        body.push_str("</tr>");
        if let Some(m) = e.metrics.as_ref().and_then(|a| a.model) {
            let _ = write!(
                body,
                "<tr><th>model</th><td colspan=\"2\">backlog {} jobs, oldest {} s, arrivals {}/s, \
                 service time {} → {} workers (set by: {})</td></tr>",
                num(m.backlog),
                num(m.oldest_age),
                num(m.arrival_rate),
                service_text(&m),
                num(m.workers),
                m.bound
            );
        }
        body.push_str("</table><details><summary>metadata</summary><table class=\"meta\">");
        for (k, v) in &e.metadata {
            let _ = write!(
                body,
                "<tr><td>{}</td><td>{}</td></tr>",
                html_escape(k),
                html_escape(v)
            );
        }
        body.push_str("</table></details></section>");
    }
    Html(format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>queue-exporter scalers</title>\
         <style>body{{font-family:sans-serif;margin:1.5em}}section{{border:1px solid #ccc;\
         padding:.5em 1em;margin:.8em 0}}h2{{font-size:1.1em}}small{{color:#555;font-weight:normal}}\
         td,th{{text-align:left;padding:.15em .6em}}.error{{color:#b00020}}\
         .spark{{background:#f4f7fb;border:1px solid #dde3ee}}</style></head><body>\
         <h1>ScaledObjects KEDA asked about</h1><p>Last answers of the KEDA scaler, newest \
         first per trigger; the line is the desired replicas over the last 15 minutes. \
         JSON: <a href=\"api/v1/scalers\">/api/v1/scalers</a>.</p>{body}</body></html>"
    ))
}
