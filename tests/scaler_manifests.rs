//! The example KEDA manifests under `deploy/kubernetes/examples/` validate against KEDA's CRDs
//! (KEDA v2.20's, copied unmodified into `tests/fixtures/crds/`), and every
//! external trigger's metadata is accepted by the scaler's own parser.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{Map, Value, json};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn crd_dir() -> PathBuf {
    let dir = root().join("tests/fixtures/crds");
    assert!(dir.is_dir(), "KEDA CRDs expected in {}", dir.display());
    dir
}

/// Every YAML document in a file, as JSON values.
fn documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_norway::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .filter(|v| !v.is_null())
        .collect()
}

/// Go regexes put inline flags after `^` (`^(?i)(a|b)$`); move them first, as
/// non-Go validators want.
fn normalise_pattern(p: &str) -> String {
    for flags in ["(?i)", "(?s)", "(?m)", "(?U)"] {
        if let Some(rest) = p.strip_prefix('^').and_then(|r| r.strip_prefix(flags)) {
            return format!("{flags}^{rest}");
        }
    }
    p.to_string()
}

/// Makes a structural CRD schema strict like `kubectl --validate=strict`:
/// objects with `properties` reject unknown fields unless the schema says to
/// preserve them. Also normalises Go regex patterns.
fn strict(schema: &mut Value) {
    let Value::Object(m) = schema else { return };
    if let Some(Value::String(p)) = m.get_mut("pattern") {
        *p = normalise_pattern(p);
    }
    let preserve = m.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    if m.contains_key("properties") && !preserve && !m.contains_key("additionalProperties") {
        m.insert("additionalProperties".into(), Value::Bool(false));
    }
    if let Some(Value::Object(props)) = m.get_mut("properties") {
        props.values_mut().for_each(strict);
    }
    for key in ["items", "additionalProperties", "not"] {
        if let Some(v) = m.get_mut(key) {
            match v {
                Value::Array(a) => a.iter_mut().for_each(strict),
                other => strict(other),
            }
        }
    }
    for key in ["anyOf", "allOf", "oneOf"] {
        if let Some(Value::Array(a)) = m.get_mut(key) {
            a.iter_mut().for_each(strict);
        }
    }
}

/// The strict `spec` schema of `kind` at `version`.
fn spec_schema(kind: &str, version: &str) -> Value {
    let file = match kind {
        "ScaledObject" => "keda.sh_scaledobjects.yaml",
        "ScaledJob" => "keda.sh_scaledjobs.yaml",
        "TriggerAuthentication" => "keda.sh_triggerauthentications.yaml",
        "ClusterTriggerAuthentication" => "keda.sh_clustertriggerauthentications.yaml",
        other => panic!("no CRD for kind {other}"),
    };
    let crd = documents(&crd_dir().join(file)).remove(0);
    let v = crd["spec"]["versions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == version)
        .unwrap_or_else(|| panic!("{kind} has no version {version}"));
    assert_eq!(v["served"], true, "{kind} {version} is served");
    let mut spec = v["schema"]["openAPIV3Schema"]["properties"]["spec"].clone();
    strict(&mut spec);
    spec
}

/// Validation errors of one document (empty when valid).
fn errors(doc: &Value) -> Vec<String> {
    let api = doc["apiVersion"].as_str().unwrap_or_default();
    let Some(version) = api.strip_prefix("keda.sh/") else {
        return vec![format!("apiVersion {api:?} is not keda.sh/*")];
    };
    let kind = doc["kind"].as_str().unwrap_or_default();
    let mut out = Vec::new();
    if doc["metadata"]["name"].as_str().is_none_or(str::is_empty) {
        out.push("metadata.name missing".to_string());
    }
    let schema = spec_schema(kind, version);
    let validator = jsonschema::options()
        .with_draft(jsonschema::Draft::Draft4)
        .build(&schema)
        .expect("CRD schema compiles");
    out.extend(validator.iter_errors(&doc["spec"]).map(|e| {
        format!(
            "{kind} {}: spec{}: {e}",
            doc["metadata"]["name"],
            e.instance_path()
        )
    }));
    out
}

/// Every KEDA object of the example manifests (`deploy/kubernetes/examples/`
/// and its subdirectories: `keda/`, `mtls/`).
fn manifests() -> Vec<(PathBuf, Value)> {
    let mut files = Vec::new();
    let mut todo = vec![root().join("deploy/kubernetes/examples")];
    while let Some(dir) = todo.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else if p.extension().is_some_and(|e| e == "yaml" || e == "yml") {
                files.push(p);
            }
        }
    }
    files.sort();
    let docs: Vec<(PathBuf, Value)> = files
        .into_iter()
        .flat_map(|f| documents(&f).into_iter().map(move |d| (f.clone(), d)))
        .filter(|(_, d)| {
            d["apiVersion"]
                .as_str()
                .is_some_and(|a| a.starts_with("keda.sh/"))
        })
        .collect();
    assert!(
        docs.len() >= 6,
        "expected the example KEDA manifests under deploy/kubernetes/examples: {}",
        docs.len()
    );
    docs
}

#[test]
fn keda_examples_validate_against_the_crds() {
    let docs = manifests();
    let mut kinds: Vec<String> = Vec::new();
    let mut trigger_types: Vec<String> = Vec::new();
    for (file, doc) in &docs {
        let errs = errors(doc);
        assert!(errs.is_empty(), "{}:\n{}", file.display(), errs.join("\n"));
        kinds.push(doc["kind"].as_str().unwrap().to_string());
        for t in doc["spec"]["triggers"].as_array().into_iter().flatten() {
            let ty = t["type"].as_str().unwrap().to_string();
            if ty == "external" || ty == "external-push" {
                // The scaler accepts the metadata KEDA will pass.
                let meta: HashMap<String, String> = serde_json::from_value(t["metadata"].clone())
                    .expect("metadata is a string map");
                if let Err(e) = queue_exporter::scaler::metadata::parse_with(
                    &meta,
                    &queue_exporter::sources::redis::catalogue(),
                ) {
                    panic!(
                        "{}: trigger metadata refused by the scaler: {e}",
                        file.display()
                    );
                }
                assert!(
                    meta["scalerAddress"].ends_with(":9732"),
                    "{}",
                    file.display()
                );
            }
            trigger_types.push(format!("{} {ty}", doc["kind"].as_str().unwrap()));
        }
    }
    for needed in [
        "ScaledObject external",
        "ScaledObject external-push",
        "ScaledJob external",
    ] {
        assert!(
            trigger_types.iter().any(|t| t == needed),
            "an example of {needed}: {trigger_types:?}"
        );
    }
    assert!(
        kinds.iter().any(|k| k == "TriggerAuthentication"),
        "{kinds:?}"
    );
}

#[test]
fn the_validation_is_strict_enough_to_catch_mistakes() {
    let (_, mut doc) = manifests()
        .into_iter()
        .find(|(_, d)| d["kind"] == "ScaledObject")
        .expect("a ScaledObject example");
    assert!(errors(&doc).is_empty());

    // An unknown field (a typo of minReplicaCount).
    let mut typo = doc.clone();
    typo["spec"]
        .as_object_mut()
        .unwrap()
        .insert("minReplicas".into(), json!(1));
    assert!(!errors(&typo).is_empty(), "unknown spec field accepted");

    // A number where KEDA wants a string in trigger metadata.
    let mut number = doc.clone();
    number["spec"]["triggers"][0]["metadata"]["value"] = json!(5);
    assert!(!errors(&number).is_empty(), "non-string metadata accepted");

    // A fallback without replicas.
    let fallback: &mut Map<String, Value> = doc["spec"]["fallback"].as_object_mut().unwrap();
    fallback.remove("replicas");
    assert!(
        !errors(&doc).is_empty(),
        "fallback without replicas accepted"
    );
}

#[test]
fn go_inline_flags_are_normalised() {
    assert_eq!(
        normalise_pattern("^(?i)(abort|warn)?$"),
        "(?i)^(abort|warn)?$"
    );
    assert_eq!(normalise_pattern("^[a-z]+$"), "^[a-z]+$");
}
