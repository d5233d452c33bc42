//! `queue-exporter ask`: asks a running exporter's scaler what KEDA would
//! hear for one trigger's metadata, with the same three calls KEDA makes.
//!
//! For trying a ScaledObject's `metadata:` before deploying it, and for the
//! demo's copy-paste gRPC call: no `grpcurl` or proto file needed. It talks
//! to the exporter's gRPC listener only, never to a backend.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

use tonic::transport::Endpoint;

use super::proto::external_scaler_client::ExternalScalerClient;
use super::proto::{GetMetricsRequest, ScaledObjectRef};

/// How long the whole conversation may take; the scaler answers from memory,
/// so anything slower means it is not there.
const ASK_TIMEOUT: Duration = Duration::from_secs(5);

/// Why `ask` could not print KEDA's view.
#[derive(Debug, thiserror::Error)]
pub enum AskError {
    /// A metadata argument was not `key=value`.
    #[error("metadata argument {0:?} is not key=value")]
    NotKeyValue(String),
    /// The address does not make a gRPC endpoint.
    #[error("invalid scaler address {addr}: {source}")]
    Address {
        /// The address as given.
        addr: String,
        /// Why tonic refused it.
        #[source]
        source: tonic::transport::Error,
    },
    /// Nothing answered at the address.
    #[error("cannot reach the scaler at {addr}: {source}")]
    Connect {
        /// The address as given.
        addr: String,
        /// The transport's reason.
        #[source]
        source: tonic::transport::Error,
    },
    /// The scaler answered one of the calls with an error status: what KEDA
    /// would log (and, with a `fallback`, act on).
    #[error("{call}: {code:?}: {message}")]
    Status {
        /// The RPC that failed.
        call: &'static str,
        /// The gRPC status code.
        code: tonic::Code,
        /// The scaler's message.
        message: String,
    },
}

impl AskError {
    fn status(call: &'static str, status: tonic::Status) -> Self {
        AskError::Status {
            call,
            code: status.code(),
            message: status.message().to_owned(),
        }
    }
}

/// Splits `key=value` arguments into trigger metadata (the first `=` splits,
/// so a value may hold `=`).
pub fn parse_metadata(args: &[String]) -> Result<HashMap<String, String>, AskError> {
    args.iter()
        .map(|arg| {
            arg.split_once('=')
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .ok_or_else(|| AskError::NotKeyValue(arg.clone()))
        })
        .collect()
}

/// Calls `IsActive`, `GetMetricSpec` and `GetMetrics` (for each metric the
/// spec names) at `addr` (`host:port`, plain HTTP/2) with `metadata`, and
/// returns what they answered, one line each.
pub async fn ask(addr: &str, metadata: HashMap<String, String>) -> Result<String, AskError> {
    let endpoint = Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|source| AskError::Address {
            addr: addr.to_owned(),
            source,
        })?
        .connect_timeout(ASK_TIMEOUT)
        .timeout(ASK_TIMEOUT);
    let channel = endpoint
        .connect()
        .await
        .map_err(|source| AskError::Connect {
            addr: addr.to_owned(),
            source,
        })?;
    let mut client = ExternalScalerClient::new(channel);
    let object = ScaledObjectRef {
        name: "ask".to_owned(),
        namespace: "default".to_owned(),
        scaler_metadata: metadata,
    };

    let mut out = String::new();
    let active = client
        .is_active(object.clone())
        .await
        .map_err(|s| AskError::status("IsActive", s))?
        .into_inner();
    // Writing to a String cannot fail.
    let _ = writeln!(out, "IsActive: {}", active.result);
    let spec = client
        .get_metric_spec(object.clone())
        .await
        .map_err(|s| AskError::status("GetMetricSpec", s))?
        .into_inner();
    for metric in &spec.metric_specs {
        let _ = writeln!(
            out,
            "GetMetricSpec: {} target {}",
            metric.metric_name, metric.target_size_float
        );
        let values = client
            .get_metrics(GetMetricsRequest {
                scaled_object_ref: Some(object.clone()),
                metric_name: metric.metric_name.clone(),
            })
            .await
            .map_err(|s| AskError::status("GetMetrics", s))?
            .into_inner();
        for value in &values.metric_values {
            let _ = writeln!(
                out,
                "GetMetrics: {} = {}",
                value.metric_name, value.metric_value_float
            );
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_splits_at_the_first_equals_sign() {
        let m = parse_metadata(&["queue=a=b".to_owned(), "mode=Age".to_owned()]).unwrap();
        assert_eq!(m["queue"], "a=b");
        assert_eq!(m["mode"], "Age");
    }

    #[test]
    fn an_argument_without_equals_is_refused_by_name() {
        let e = parse_metadata(&["queue".to_owned()]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "metadata argument \"queue\" is not key=value"
        );
    }
}
