//! `plan --scaledobject FILE`: the user's KEDA ScaledObject, read for what
//! a replay needs: its queue trigger's metadata, `pollingInterval`,
//! `cooldownPeriod`, `minReplicaCount`, `maxReplicaCount`, `fallback` and the HPA's
//! `advanced.horizontalPodAutoscalerConfig.behavior`. What it leaves out
//! takes KEDA's and Kubernetes' defaults ([`Cluster::kubernetes_defaults`]).

use std::collections::HashMap;

use serde::Deserialize;

use crate::plan::cluster::{
    Behavior, Cluster, Fallback, FallbackBehavior, MetricType, Policy, PolicyKind, Rules, Select,
};

/// A ScaledObject that cannot be used: the file, the field and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{file}: {field}: {problem}")]
pub struct ScaledObjectError {
    /// The file.
    pub file: String,
    /// The field, as a path (`spec.triggers[0].type`), or `kind`.
    pub field: String,
    /// What is wrong.
    pub problem: String,
}

/// What a replay takes from a ScaledObject.
#[derive(Debug, Clone, PartialEq)]
pub struct ScaledObject {
    /// `metadata.name`, to name the trigger in the output.
    pub name: String,
    /// The queue trigger's metadata, as the scaler receives it.
    pub trigger: HashMap<String, String>,
    /// The queue trigger's `metricType` (`AverageValue` unless it says `Value`).
    pub metric_type: MetricType,
    /// The cluster with the ScaledObject's settings and the defaults.
    pub cluster: Cluster,
    /// The ScaledObject's other triggers, as `spec.triggers[i] (type)`:
    /// KEDA's HPA scales on the highest of all of them, and the replay
    /// has only the queue trigger.
    pub others: Vec<String>,
}

/// The YAML document, as far as it is read.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Document {
    #[serde(default)]
    metadata: Metadata,
    spec: Spec,
}

#[derive(Deserialize, Default)]
struct Metadata {
    #[serde(default)]
    name: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Spec {
    polling_interval: Option<u32>,
    cooldown_period: Option<u32>,
    min_replica_count: Option<u32>,
    max_replica_count: Option<u32>,
    fallback: Option<FallbackSpec>,
    advanced: Option<Advanced>,
    triggers: Vec<TriggerSpec>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct FallbackSpec {
    failure_threshold: u32,
    replicas: u32,
    behavior: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Advanced {
    horizontal_pod_autoscaler_config: Option<HpaConfig>,
}

#[derive(Deserialize)]
struct HpaConfig {
    behavior: Option<BehaviorSpec>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BehaviorSpec {
    scale_up: Option<RulesSpec>,
    scale_down: Option<RulesSpec>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RulesSpec {
    stabilization_window_seconds: Option<u32>,
    select_policy: Option<String>,
    policies: Option<Vec<PolicySpec>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PolicySpec {
    #[serde(rename = "type")]
    kind: String,
    value: u32,
    period_seconds: u32,
}

#[derive(Deserialize)]
struct TriggerSpec {
    #[serde(rename = "type")]
    kind: String,
    #[serde(rename = "metricType")]
    metric_type: Option<String>,
    #[serde(default)]
    metadata: HashMap<String, serde_norway::Value>,
}

/// Reads the ScaledObject in `path`; `pod_start` completes the cluster.
pub fn read(path: &str, pod_start: f64) -> Result<ScaledObject, ScaledObjectError> {
    let fail = |field: &str, problem: String| ScaledObjectError {
        file: path.to_owned(),
        field: field.to_owned(),
        problem,
    };
    let text =
        std::fs::read_to_string(path).map_err(|e| fail("file", format!("cannot read: {e}")))?;
    parse(path, &text, pod_start)
}

/// Parses a ScaledObject's YAML (the first document of kind
/// ScaledObject); `file` names it in errors.
pub fn parse(file: &str, text: &str, pod_start: f64) -> Result<ScaledObject, ScaledObjectError> {
    let fail = |field: &str, problem: String| ScaledObjectError {
        file: file.to_owned(),
        field: field.to_owned(),
        problem,
    };
    let mut found = None;
    for doc in serde_norway::Deserializer::from_str(text) {
        let value =
            serde_norway::Value::deserialize(doc).map_err(|e| fail("yaml", e.to_string()))?;
        if value.get("kind").and_then(|k| k.as_str()) == Some("ScaledObject") {
            found = Some(value);
            break;
        }
    }
    let value = found.ok_or_else(|| fail("kind", "no document of kind ScaledObject".to_owned()))?;
    let doc: Document = serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        fail(&path, e.into_inner().to_string())
    })?;
    let spec = doc.spec;
    let Some((index, trigger)) = spec
        .triggers
        .iter()
        .enumerate()
        .find(|(_, t)| t.kind == "external" || t.kind == "external-push")
    else {
        return Err(fail(
            "spec.triggers",
            "no trigger of type external or external-push (the exporter's scaler)".to_owned(),
        ));
    };
    let cluster = cluster_of(&spec, pod_start).map_err(|(f, p)| fail(&f, p))?;
    let metadata = trigger
        .metadata
        .iter()
        .map(|(k, v)| Ok((k.clone(), scalar(v).ok_or_else(|| (k.clone(), v))?)))
        .collect::<Result<HashMap<_, _>, (String, _)>>()
        .map_err(|(k, _)| {
            fail(
                &format!("spec.triggers[{index}].metadata.{k}"),
                "not a text, number or boolean".to_owned(),
            )
        })?;
    let metric_type = match trigger.metric_type.as_deref() {
        None => MetricType::default(),
        Some(word) => MetricType::from_word(word).ok_or_else(|| {
            fail(
                &format!("spec.triggers[{index}].metricType"),
                format!(
                    "{word:?}: an external trigger's metricType is AverageValue (the default) or Value (Utilization is for cpu and memory triggers)"
                ),
            )
        })?,
    };
    let others = spec
        .triggers
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != index)
        .map(|(i, t)| format!("spec.triggers[{i}] ({})", t.kind))
        .collect();
    Ok(ScaledObject {
        name: doc.metadata.name,
        trigger: metadata,
        metric_type,
        cluster,
        others,
    })
}

/// The cluster of `spec`: its KEDA settings and HPA behavior over the
/// defaults; an error is (field, problem).
fn cluster_of(spec: &Spec, pod_start: f64) -> Result<Cluster, (String, String)> {
    let mut cluster = Cluster::kubernetes_defaults(pod_start);
    let set = |target: &mut f64, v: Option<u32>| {
        if let Some(v) = v {
            *target = f64::from(v);
        }
    };
    set(&mut cluster.keda_poll, spec.polling_interval);
    set(&mut cluster.cooldown, spec.cooldown_period);
    if let Some(n) = spec.min_replica_count {
        cluster.min_replicas = n as usize;
    }
    if let Some(n) = spec.max_replica_count {
        cluster.max_replicas = n as usize;
    }
    if cluster.min_replicas > cluster.max_replicas {
        return Err((
            "spec.minReplicaCount".to_owned(),
            format!(
                "{} is above maxReplicaCount {}",
                cluster.min_replicas, cluster.max_replicas
            ),
        ));
    }
    if let Some(f) = &spec.fallback {
        cluster.fallback = Some(fallback_of(f)?);
    }
    let behavior = spec
        .advanced
        .as_ref()
        .and_then(|a| a.horizontal_pod_autoscaler_config.as_ref())
        .and_then(|h| h.behavior.as_ref());
    if let Some(b) = behavior {
        let base = "spec.advanced.horizontalPodAutoscalerConfig.behavior";
        let default = Behavior::kubernetes_default(300.0);
        cluster.behavior.up = rules(b.scale_up.as_ref(), default.up, &format!("{base}.scaleUp"))?;
        cluster.behavior.down = rules(
            b.scale_down.as_ref(),
            default.down,
            &format!("{base}.scaleDown"),
        )?;
    }
    Ok(cluster)
}

/// `spec.fallback`, its `behavior` checked (KEDA's names; its
/// `scalingModifiers` behavior needs scaling modifiers, which a replay of
/// one trigger has not).
fn fallback_of(spec: &FallbackSpec) -> Result<Fallback, (String, String)> {
    let behavior = match spec.behavior.as_deref() {
        None | Some("static") => FallbackBehavior::Static,
        Some("currentReplicas") => FallbackBehavior::CurrentReplicas,
        Some("currentReplicasIfHigher") => FallbackBehavior::CurrentReplicasIfHigher,
        Some("currentReplicasIfLower") => FallbackBehavior::CurrentReplicasIfLower,
        Some(other) => {
            return Err((
                "spec.fallback.behavior".to_owned(),
                format!(
                    "{other:?} is not static, currentReplicas, currentReplicasIfHigher or currentReplicasIfLower"
                ),
            ));
        }
    };
    Ok(Fallback {
        failure_threshold: spec.failure_threshold,
        replicas: spec.replicas,
        behavior,
    })
}

/// A YAML scalar as the text KEDA hands the scaler.
fn scalar(v: &serde_norway::Value) -> Option<String> {
    match v {
        serde_norway::Value::String(s) => Some(s.clone()),
        serde_norway::Value::Number(n) => Some(n.to_string()),
        serde_norway::Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// One direction's rules: what the ScaledObject says, Kubernetes' default
/// for the rest.
fn rules(spec: Option<&RulesSpec>, default: Rules, at: &str) -> Result<Rules, (String, String)> {
    let Some(spec) = spec else {
        return Ok(default);
    };
    let select = match spec.select_policy.as_deref() {
        None | Some("Max") => Select::Max,
        Some("Min") => Select::Min,
        Some("Disabled") => Select::Disabled,
        Some(other) => {
            return Err((
                format!("{at}.selectPolicy"),
                format!("{other:?} is not Max, Min or Disabled"),
            ));
        }
    };
    let policies = match &spec.policies {
        None => default.policies,
        Some(list) => list
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let kind = match p.kind.as_str() {
                    "Pods" => PolicyKind::Pods,
                    "Percent" => PolicyKind::Percent,
                    other => {
                        return Err((
                            format!("{at}.policies[{i}].type"),
                            format!("{other:?} is not Pods or Percent"),
                        ));
                    }
                };
                if p.period_seconds == 0 || p.period_seconds > 1800 {
                    return Err((
                        format!("{at}.policies[{i}].periodSeconds"),
                        format!("{} is not from 1 to 1800", p.period_seconds),
                    ));
                }
                Ok(Policy::new(kind, p.value, f64::from(p.period_seconds)))
            })
            .collect::<Result<Vec<_>, _>>()?,
    };
    Ok(Rules {
        stabilization: spec
            .stabilization_window_seconds
            .map_or(default.stabilization, f64::from),
        select,
        policies,
    })
}
