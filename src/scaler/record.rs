//! Hands each `GetMetrics` and `IsActive` answer to the telemetry's
//! decision store ([`crate::telemetry::decisions`]): the gauges per
//! ScaledObject and what the `/scalers` page shows. Here, because only the
//! scaler knows the query, the reading and the model; the store knows none
//! of those types.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use tonic::Status;

use crate::scaler::metadata::{ACCEPTED_KEYS, ScalerQuery};
use crate::scaler::proto::ScaledObjectRef;
use crate::scaler::query::Reading;
use crate::scaler::wait::ServiceFrom;
use crate::telemetry::Telemetry;
use crate::telemetry::decisions::bounds;
use crate::telemetry::decisions::{Answer, DecisionLabels, ModelView};

/// KEDA's own keys whose values are shown besides the scaler's
/// ([`ACCEPTED_KEYS`]): where KEDA reaches the scaler, and its TLS
/// switches. Its TLS material (`caCert`, `tlsClientCert`, `tlsClientKey`)
/// is not among them.
const SHOWN_KEDA_KEYS: [&str; 3] = ["scalerAddress", "enableTLS", "unsafeSsl"];

/// What a redacted value is shown as.
pub const REDACTED: &str = "(redacted)";

/// Records `result`, the answer `method` gave `r` for `query`.
pub fn record(
    telemetry: &Telemetry,
    method: &'static str,
    r: &ScaledObjectRef,
    query: &Arc<ScalerQuery>,
    result: &Result<Reading, Status>,
) {
    let labels = DecisionLabels {
        namespace: r.namespace.clone(),
        scaledobject: r.name.clone(),
        queue: query.queue.text().to_string(),
        mode: query.mode.as_str().to_string(),
    };
    let answer = match result {
        Ok(reading) => Answer {
            at: SystemTime::now(),
            method,
            value: Some(reading.value),
            desired: Some(reading.value / query.target),
            active: Some(reading.is_active(query)),
            error: None,
            model: reading.wait.map(|d| ModelView {
                backlog: d.inputs.backlog,
                oldest_age: d.inputs.oldest_age,
                arrival_rate: d.inputs.arrival_rate,
                service_time: (d.inputs.service_from != ServiceFrom::Unneeded)
                    .then_some(d.inputs.service_time),
                service_from: d.inputs.service_from.as_str(),
                workers: d.workers,
                bound: d.bound.as_str(),
            }),
        },
        Err(status) => failed(method, status),
    };
    // The parsed-query cache hands out one Arc per metadata map, so its
    // address tells whether the map changed since the entry was made.
    let identity = Arc::as_ptr(query) as usize as u64;
    telemetry
        .decisions
        .record(labels, identity, || redacted(&r.scaler_metadata), answer);
}

/// Records a request whose metadata was refused (`INVALID_ARGUMENT`): the
/// most common reason a ScaledObject does not scale, so it is shown too,
/// under the `queue` and `mode` it names (as written).
pub fn record_refused(
    telemetry: &Telemetry,
    method: &'static str,
    r: &ScaledObjectRef,
    status: &Status,
) {
    // Cut before copying: a refused map's values may be megabytes.
    let get = |k: &str| {
        let v = r.scaler_metadata.get(k).map_or("", String::as_str);
        bounds::cut(v, bounds::MAX_QUEUE_BYTES)
    };
    let labels = DecisionLabels {
        namespace: r.namespace.clone(),
        scaledobject: r.name.clone(),
        queue: get("queue"),
        mode: get("mode"),
    };
    let answer = failed(method, status);
    // No parsed query to tell maps apart: the metadata is shown as first seen.
    telemetry
        .decisions
        .record(labels, 0, || redacted(&r.scaler_metadata), answer);
}

/// An answer that was an error status.
fn failed(method: &'static str, status: &Status) -> Answer {
    Answer {
        at: SystemTime::now(),
        method,
        value: None,
        desired: None,
        active: None,
        error: Some(format!("{:?}: {}", status.code(), status.message())),
        model: None,
    }
}

/// Whether `/scalers` shows `key`'s value: only for the keys the scaler
/// reads and [`SHOWN_KEDA_KEYS`]. KEDA resolves a `*FromEnv` key to the
/// variable's value (`hostFromEnv: REDIS_URL` arrives as `redis://:pw@…`)
/// and adds every TriggerAuthentication parameter to the same map, under
/// any name; an allow-list is the only way none of them shows.
fn shown(key: &str) -> bool {
    ACCEPTED_KEYS.contains(&key) || SHOWN_KEDA_KEYS.contains(&key)
}

/// `meta` as `/scalers` shows it: sorted by key, values of keys not
/// `shown` replaced by [`REDACTED`], at most [`bounds::MAX_PAIRS`] pairs
/// (the shown keys first, then the others in key order; a note counts the
/// rest), every key and value cut to its bound before it is copied.
pub fn redacted(meta: &HashMap<String, String>) -> Vec<(String, String)> {
    let mut keys: Vec<&String> = meta.keys().collect();
    keys.sort_unstable_by_key(|k| (!shown(k), k.as_str()));
    let room = if keys.len() > bounds::MAX_PAIRS {
        bounds::MAX_PAIRS - 1
    } else {
        keys.len()
    };
    let mut out: Vec<(String, String)> = keys[..room]
        .iter()
        .map(|k| {
            let value = if shown(k) {
                bounds::cut(&meta[*k], bounds::MAX_VALUE_BYTES)
            } else {
                REDACTED.to_string()
            };
            (bounds::cut(k, bounds::MAX_KEY_BYTES), value)
        })
        .collect();
    out.sort();
    if room < keys.len() {
        out.push((
            bounds::MORE_KEY.to_string(),
            format!("{} not shown", keys.len() - room),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_keys_the_scaler_reads_are_shown() {
        let meta: HashMap<String, String> = [
            ("queue", "work"),
            ("caCert", "-----BEGIN CERTIFICATE-----"),
            ("tlsClientKey", "-----BEGIN PRIVATE KEY-----"),
            ("tlsClientCert", "pem"),
            ("passwordFromEnv", "REDIS_PASSWORD"),
            ("hostFromEnv", "redis://:pw@redis:6379"),
            ("connection", "redis://:pw@redis:6379"),
            ("host", "redis"),
            ("scalerAddress", "queue-exporter:9732"),
            ("mode", "WaitTime"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let shown = redacted(&meta);
        let get = |k: &str| {
            shown
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("queue"), Some("work"));
        assert_eq!(get("mode"), Some("WaitTime"));
        assert_eq!(get("scalerAddress"), Some("queue-exporter:9732"));
        for k in [
            "caCert",
            "tlsClientKey",
            "tlsClientCert",
            "passwordFromEnv",
            "hostFromEnv",
            "connection",
            "host",
        ] {
            assert_eq!(get(k), Some(REDACTED), "{k}");
        }
        assert!(shown.windows(2).all(|w| w[0].0 <= w[1].0));
    }

    #[test]
    fn a_huge_map_keeps_the_shown_keys_and_counts_the_rest() {
        let mut meta: HashMap<String, String> = (0..1000)
            .map(|i| (format!("a{i:04}"), "x".repeat(10_000)))
            .collect();
        meta.insert("queue".into(), "q".repeat(100_000));
        meta.insert("mode".into(), "Age".into());
        let shown = redacted(&meta);
        assert_eq!(shown.len(), bounds::MAX_PAIRS);
        let get = |k: &str| shown.iter().find(|(key, _)| key == k).map(|(_, v)| v);
        assert_eq!(get("mode").map(String::as_str), Some("Age"));
        assert!(get("queue").unwrap().len() <= bounds::MAX_VALUE_BYTES);
        assert_eq!(get("a0000").map(String::as_str), Some(REDACTED));
        assert_eq!(
            shown.last().unwrap(),
            &(bounds::MORE_KEY.to_string(), "971 not shown".to_string())
        );
    }
}
