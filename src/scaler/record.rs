//! Hands each `GetMetrics` and `IsActive` answer to the telemetry's
//! decision store ([`crate::telemetry::decisions`]): the gauges per
//! ScaledObject and what the `/scalers` page shows. Here, because only the
//! scaler knows the query, the reading and the model; the store knows none
//! of those types.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use tonic::Status;

use crate::scaler::metadata::ScalerQuery;
use crate::scaler::proto::ScaledObjectRef;
use crate::scaler::query::Reading;
use crate::scaler::wait::ServiceFrom;
use crate::telemetry::Telemetry;
use crate::telemetry::decisions::{Answer, DecisionLabels, ModelView};

/// Words in a metadata key whose value is never shown: KEDA's TLS material
/// (`caCert`, `tlsClientCert`, `tlsClientKey`) and anything named like a
/// credential.
const SECRET_WORDS: [&str; 6] = ["key", "cert", "pass", "secret", "token", "auth"];

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
    let get = |k: &str| r.scaler_metadata.get(k).cloned().unwrap_or_default();
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

/// `meta` sorted by key, with secret values replaced by [`REDACTED`].
pub fn redacted(meta: &HashMap<String, String>) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = meta
        .iter()
        .map(|(k, v)| {
            let lower = k.to_ascii_lowercase();
            let secret = SECRET_WORDS.iter().any(|w| lower.contains(w));
            let shown = if secret { REDACTED } else { v.as_str() };
            (k.clone(), shown.to_string())
        })
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_material_and_credentials_are_redacted_and_the_rest_shown() {
        let meta: HashMap<String, String> = [
            ("queue", "work"),
            ("caCert", "-----BEGIN CERTIFICATE-----"),
            ("tlsClientKey", "-----BEGIN PRIVATE KEY-----"),
            ("tlsClientCert", "pem"),
            ("passwordFromEnv", "REDIS_PASSWORD"),
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
        for k in ["caCert", "tlsClientKey", "tlsClientCert", "passwordFromEnv"] {
            assert_eq!(get(k), Some(REDACTED), "{k}");
        }
        assert!(shown.windows(2).all(|w| w[0].0 <= w[1].0));
    }
}
