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
use super::service::ASK_HEADER;

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
}

/// What the scaler answered the three calls, one line each, and how many
/// of them were an error status (what KEDA would log and, with a
/// `fallback`, act on).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answers {
    /// `IsActive: …`, `GetMetricSpec: …`, `GetMetrics: …`, each an answer
    /// or its status.
    pub text: String,
    /// How many calls answered an error status.
    pub failed: usize,
}

impl Answers {
    /// Adds `call`'s line: its answer, or the status it got.
    fn line(&mut self, call: &str, result: Result<String, tonic::Status>) {
        // Writing to a String cannot fail.
        let _ = match result {
            Ok(answer) => writeln!(self.text, "{call}: {answer}"),
            Err(status) => {
                self.failed += 1;
                writeln!(
                    self.text,
                    "{call}: error {:?}: {}",
                    status.code(),
                    status.message()
                )
            }
        };
    }
}

/// A request marked as `ask`'s ([`ASK_HEADER`]), so the scaler keeps it out
/// of production state.
fn marked<T>(message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request
        .metadata_mut()
        .insert(ASK_HEADER, tonic::metadata::MetadataValue::from_static("1"));
    request
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

/// Calls `IsActive`, `GetMetricSpec` and `GetMetrics` at `addr`
/// (`host:port`, plain HTTP/2) with `metadata`, as KEDA does, and returns
/// what each answered, one line each: a failed call does not stop the
/// others (KEDA makes all three). `GetMetrics` asks for the metric the spec
/// named, or, when the spec failed, for none in particular (the scaler
/// then answers for the metadata alone). Each request is marked as an ask
/// ([`ASK_HEADER`]): the scaler records none of them.
pub async fn ask(addr: &str, metadata: HashMap<String, String>) -> Result<Answers, AskError> {
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

    let mut answers = Answers {
        text: String::new(),
        failed: 0,
    };
    let active = client.is_active(marked(object.clone())).await;
    answers.line(
        "IsActive",
        active.map(|r| r.into_inner().result.to_string()),
    );
    let spec = client
        .get_metric_spec(marked(object.clone()))
        .await
        .map(tonic::Response::into_inner);
    let names: Vec<String> = match &spec {
        Ok(spec) => spec
            .metric_specs
            .iter()
            .map(|m| m.metric_name.clone())
            .collect(),
        Err(_) => vec![String::new()],
    };
    answers.line(
        "GetMetricSpec",
        spec.map(|spec| {
            spec.metric_specs
                .iter()
                .map(|m| format!("{} target {}", m.metric_name, m.target_size_float))
                .collect::<Vec<_>>()
                .join(", ")
        }),
    );
    for metric_name in names {
        let values = client
            .get_metrics(marked(GetMetricsRequest {
                scaled_object_ref: Some(object.clone()),
                metric_name,
            }))
            .await;
        answers.line(
            "GetMetrics",
            values.map(|v| {
                v.into_inner()
                    .metric_values
                    .iter()
                    .map(|v| format!("{} = {}", v.metric_name, v.metric_value_float))
                    .collect::<Vec<_>>()
                    .join(", ")
            }),
        );
    }
    Ok(answers)
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
