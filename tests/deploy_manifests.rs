//! The deployment files can be applied as they are:
//!
//! - `kubectl kustomize` builds `deploy/kubernetes/base`, every overlay and
//!   the examples;
//! - every core Kubernetes object passes `kubernetes-validate --strict`;
//! - every KEDA and prometheus-operator object's `spec` validates, strictly,
//!   against its CRD in `tests/fixtures/crds/` (KEDA v2.20 and
//!   prometheus-operator 0.93.0, unmodified; see the README there);
//! - the PrometheusRule passes `promtool check rules` and its unit tests
//!   (`promtool test rules`), every alert is tested firing and not firing and
//!   has a runbook in docs/runbook.md;
//! - the ConfigMap's config passes `queue-exporter check`, and the sidecar's
//!   Redis really admits the exporter's read-only user;
//! - the pieces fit together (ports, probes, mounts, selectors, Secret keys,
//!   the image's user);
//! - the Dockerfile is a multi-stage, non-root, minimal image that hadolint accepts;
//! - every example trigger can connect to the exporter its steps deploy:
//!   the plain ones to the base, the mutual-TLS ones (with the Secrets
//!   `make-certs` makes) to `overlays/scaler-mtls`;
//! - every `scalerAddress`, in the manifests and the docs, is the headless
//!   scaler Service's name.
//!
//! Everything is built from a copy of `deploy/` where `make-certs` has run,
//! as the docs' steps run it (`deploy_support`). The tools come from
//! `scripts/setup-services`; a missing tool fails the test.

mod deploy_support;
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{Value, json};
use support::{KillOnDrop, files_under};

/// The Kubernetes versions core objects are validated against.
const KUBERNETES_VERSIONS: [&str; 2] = ["1.33.0", "1.35.0"];
/// Where the base puts queue-exporter, so where KEDA finds the scaler.
const NAMESPACE: &str = "monitoring";
/// The image's user (`USER` in the Dockerfile, distroless `nonroot`).
const IMAGE_UID: i64 = 65532;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs a tool, failing clearly when it is not installed.
fn run(program: &str, args: &[&str], cwd: &Path) -> Output {
    Command::new(program)
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run {program} ({e}): scripts/setup-services installs it")
        })
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Every YAML document in a string, as JSON values.
fn yaml_documents(text: &str, what: &str) -> Vec<Value> {
    serde_norway::Deserializer::from_str(text)
        .map(|doc| Value::deserialize(doc).unwrap_or_else(|e| panic!("{what}: {e}")))
        .filter(|v| !v.is_null())
        .collect()
}

fn yaml_file(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    yaml_documents(&text, &path.display().to_string())
}

/// The kustomizations: the base, every overlay, and the examples.
fn kustomizations() -> Vec<String> {
    let mut dirs = vec!["deploy/kubernetes/base".to_string()];
    let overlays = root().join("deploy/kubernetes/overlays");
    let mut names: Vec<String> = std::fs::read_dir(&overlays)
        .unwrap_or_else(|e| panic!("{}: {e}", overlays.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert!(
        names.iter().any(|n| n == "sidecar"),
        "overlays/sidecar exists: {names:?}"
    );
    dirs.extend(
        names
            .iter()
            .map(|n| format!("deploy/kubernetes/overlays/{n}")),
    );
    dirs.push("deploy/kubernetes/examples".to_string());
    dirs.push("deploy/kubernetes/examples/mtls".to_string());
    dirs
}

/// `kubectl kustomize DIR`, parsed, in the tree the docs' steps leave.
fn kustomize(dir: &str) -> Vec<Value> {
    deploy_support::kustomize(dir)
}

fn kind(doc: &Value) -> &str {
    doc["kind"].as_str().unwrap_or_default()
}

fn name(doc: &Value) -> &str {
    doc["metadata"]["name"].as_str().unwrap_or_default()
}

fn find<'a>(docs: &'a [Value], k: &str, n: &str) -> &'a Value {
    docs.iter()
        .find(|d| kind(d) == k && name(d) == n)
        .unwrap_or_else(|| panic!("no {k} {n} in {:?}", summary(docs)))
}

fn only<'a>(docs: &'a [Value], k: &str) -> &'a Value {
    let all: Vec<&Value> = docs.iter().filter(|d| kind(d) == k).collect();
    assert_eq!(all.len(), 1, "exactly one {k}: {:?}", summary(docs));
    all[0]
}

fn summary(docs: &[Value]) -> Vec<String> {
    docs.iter()
        .map(|d| format!("{}/{}", kind(d), name(d)))
        .collect()
}

/// Whether an object is a custom resource (validated against a CRD) rather
/// than a core Kubernetes kind.
fn is_custom(doc: &Value) -> bool {
    let api = doc["apiVersion"].as_str().unwrap_or_default();
    api.starts_with("keda.sh/") || api.starts_with("monitoring.coreos.com/")
}

// ---------------------------------------------------------------- kustomize

#[test]
fn kustomize_builds_the_base_every_overlay_and_the_examples() {
    let base = kustomize("deploy/kubernetes/base");
    let services: Vec<&str> = base
        .iter()
        .filter(|d| kind(d) == "Service")
        .map(name)
        .collect();
    assert_eq!(services, ["queue-exporter", "queue-exporter-scaler"]);
    for k in [
        "Deployment",
        "PodDisruptionBudget",
        "ConfigMap",
        "Secret",
        "ServiceMonitor",
        "PrometheusRule",
    ] {
        only(&base, k);
    }
    assert!(
        base.iter().all(|d| d["metadata"]["namespace"] == NAMESPACE),
        "the base lives in {NAMESPACE}"
    );

    let sidecar = kustomize("deploy/kubernetes/overlays/sidecar");
    assert!(
        !sidecar
            .iter()
            .any(|d| kind(d) == "Deployment" || kind(d) == "PodDisruptionBudget"),
        "the sidecar overlay drops the standalone Deployment and its PDB: {:?}",
        summary(&sidecar)
    );
    let sts = only(&sidecar, "StatefulSet");
    let containers: Vec<&str> = sts["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(containers, ["redis", "queue-exporter"]);
    for k in ["ServiceMonitor", "PrometheusRule", "ConfigMap"] {
        only(&sidecar, k);
    }

    let examples = kustomize("deploy/kubernetes/examples");
    let triggers: BTreeSet<String> = examples
        .iter()
        .flat_map(|d| {
            d["spec"]["triggers"]
                .as_array()
                .into_iter()
                .flatten()
                .map(move |t| format!("{} {}", kind(d), t["type"].as_str().unwrap()))
        })
        .collect();
    for needed in [
        "ScaledObject external",
        "ScaledObject external-push",
        "ScaledJob external",
    ] {
        assert!(triggers.contains(needed), "{needed} in {triggers:?}");
    }
    let mtls = kustomize("deploy/kubernetes/examples/mtls");
    assert!(
        mtls.iter().any(|d| kind(d) == "TriggerAuthentication"
            && d["spec"]["secretTargetRef"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r["parameter"] == "caCert")),
        "a TriggerAuthentication carrying caCert"
    );
    // Every overlay directory builds too.
    for dir in kustomizations() {
        kustomize(&dir);
    }
}

// -------------------------------------------------------- core validation

#[test]
fn core_objects_pass_kubernetes_validate_strict() {
    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    let mut expected = 0;
    for (i, k) in kustomizations().iter().enumerate() {
        let core: Vec<Value> = kustomize(k).into_iter().filter(|d| !is_custom(d)).collect();
        assert!(!core.is_empty(), "{k} has core objects");
        expected += core.len();
        let path = dir.path().join(format!("{i}.yaml"));
        let yaml: Vec<String> = core
            .iter()
            .map(|d| serde_json::to_string_pretty(d).unwrap())
            .collect();
        std::fs::write(&path, yaml.join("\n---\n")).unwrap();
        files.push(path.to_string_lossy().into_owned());
    }
    for version in KUBERNETES_VERSIONS {
        let mut args = vec!["--strict", "-k", version];
        args.extend(files.iter().map(String::as_str));
        let out = run("kubernetes-validate", &args, dir.path());
        let report = text(&out);
        assert!(
            out.status.success(),
            "kubernetes-validate --strict -k {version}:\n{report}"
        );
        let passed = report.matches(" passed for resource ").count();
        assert_eq!(
            passed, expected,
            "every core object validated against {version}:\n{report}"
        );
    }
}

#[test]
fn kubernetes_validate_strict_rejects_an_unknown_field() {
    let base = kustomize("deploy/kubernetes/base");
    let mut deployment = only(&base, "Deployment").clone();
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["paht"] =
        json!("/readyz");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.yaml");
    std::fs::write(&path, serde_json::to_string_pretty(&deployment).unwrap()).unwrap();
    let out = run(
        "kubernetes-validate",
        &["--strict", "-k", KUBERNETES_VERSIONS[1], "bad.yaml"],
        dir.path(),
    );
    assert!(!out.status.success(), "a typo passed:\n{}", text(&out));
    assert!(text(&out).contains("paht"), "{}", text(&out));
}

// ---------------------------------------------------------- CRD validation

fn crd_dir() -> PathBuf {
    let dir = root().join("tests/fixtures/crds");
    assert!(dir.is_dir(), "CRDs expected in {}", dir.display());
    dir
}

/// Drops Go's inline flags (`^(?i)…`, `(?i)^…`), which the validator's
/// ECMA-262 regexes do not have: the pattern is then checked case-sensitively,
/// which is stricter than the CRD, never looser.
fn normalise_pattern(p: &str) -> String {
    let mut p = p.to_string();
    for flags in ["(?i)", "(?s)", "(?m)", "(?U)"] {
        p = p.replace(flags, "");
    }
    p
}

/// Makes a structural schema strict like `kubectl --validate=strict`: objects
/// with `properties` reject unknown fields unless told to preserve them.
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

/// The CRD file of a custom kind.
fn crd_file(kind: &str) -> &'static str {
    match kind {
        "ScaledObject" => "keda.sh_scaledobjects.yaml",
        "ScaledJob" => "keda.sh_scaledjobs.yaml",
        "TriggerAuthentication" => "keda.sh_triggerauthentications.yaml",
        "ClusterTriggerAuthentication" => "keda.sh_clustertriggerauthentications.yaml",
        "ServiceMonitor" => "monitoring.coreos.com_servicemonitors.yaml",
        "PodMonitor" => "monitoring.coreos.com_podmonitors.yaml",
        "PrometheusRule" => "monitoring.coreos.com_prometheusrules.yaml",
        other => panic!("no CRD for kind {other}"),
    }
}

/// Validation errors of a custom resource against its CRD (empty when valid).
fn crd_errors(doc: &Value) -> Vec<String> {
    let api = doc["apiVersion"].as_str().unwrap_or_default();
    let (group, version) = api.split_once('/').expect("apiVersion group/version");
    let crd = yaml_file(&crd_dir().join(crd_file(kind(doc)))).remove(0);
    assert_eq!(crd["spec"]["group"], group, "{api}");
    assert_eq!(crd["spec"]["names"]["kind"], kind(doc));
    let Some(v) = crd["spec"]["versions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == version)
    else {
        return vec![format!("{} has no version {version}", kind(doc))];
    };
    let mut out = Vec::new();
    if v["served"] != true {
        out.push(format!("{} {version} is not served", kind(doc)));
    }
    if name(doc).is_empty() {
        out.push("metadata.name missing".into());
    }
    let mut schema = v["schema"]["openAPIV3Schema"]["properties"]["spec"].clone();
    strict(&mut schema);
    let validator = jsonschema::options()
        .with_draft(jsonschema::Draft::Draft4)
        .build(&schema)
        .expect("CRD schema compiles");
    out.extend(validator.iter_errors(&doc["spec"]).map(|e| {
        format!(
            "{} {}: spec{}: {e}",
            kind(doc),
            name(doc),
            e.instance_path()
        )
    }));
    out
}

#[test]
fn keda_and_prometheus_operator_objects_validate_against_their_crds() {
    let mut kinds = BTreeSet::new();
    for dir in kustomizations() {
        for doc in kustomize(&dir).iter().filter(|d| is_custom(d)) {
            let errors = crd_errors(doc);
            assert!(errors.is_empty(), "{dir}:\n{}", errors.join("\n"));
            kinds.insert(kind(doc).to_string());
        }
    }
    for needed in [
        "ScaledObject",
        "ScaledJob",
        "TriggerAuthentication",
        "ServiceMonitor",
        "PrometheusRule",
    ] {
        assert!(kinds.contains(needed), "{needed} validated: {kinds:?}");
    }
}

#[test]
fn crd_validation_is_strict_enough_to_catch_mistakes() {
    let base = kustomize("deploy/kubernetes/base");
    let monitor = only(&base, "ServiceMonitor");
    assert!(crd_errors(monitor).is_empty());
    let mut typo = monitor.clone();
    typo["spec"]["endpoints"][0]["intervall"] = json!("15s");
    assert!(!crd_errors(&typo).is_empty(), "unknown field accepted");

    let rule = only(&base, "PrometheusRule");
    assert!(crd_errors(rule).is_empty());
    let mut bad_for = rule.clone();
    bad_for["spec"]["groups"][0]["rules"][0]["for"] = json!("15 minutes");
    assert!(!crd_errors(&bad_for).is_empty(), "a bad duration accepted");
}

// ------------------------------------------------------------------ alerts

/// The PrometheusRule's groups as a Prometheus rule file, and the unit tests
/// beside the rule, in a temp dir (the tests name `queue-exporter.rules.yaml`).
fn rules_on_disk() -> (tempfile::TempDir, Value) {
    let base = kustomize("deploy/kubernetes/base");
    let spec = only(&base, "PrometheusRule")["spec"].clone();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("queue-exporter.rules.yaml"),
        serde_json::to_string_pretty(&spec).unwrap(),
    )
    .unwrap();
    std::fs::copy(
        root().join("deploy/kubernetes/base/prometheusrule.test.yaml"),
        dir.path().join("prometheusrule.test.yaml"),
    )
    .unwrap();
    (dir, spec)
}

#[test]
fn alert_rules_pass_promtool_check_and_their_unit_tests() {
    let (dir, _) = rules_on_disk();
    let check = run(
        "promtool",
        &["check", "rules", "queue-exporter.rules.yaml"],
        dir.path(),
    );
    assert!(
        check.status.success(),
        "promtool check rules:\n{}",
        text(&check)
    );
    let test = run(
        "promtool",
        &["test", "rules", "prometheusrule.test.yaml"],
        dir.path(),
    );
    assert!(
        test.status.success(),
        "promtool test rules:\n{}",
        text(&test)
    );
    assert!(text(&test).contains("SUCCESS"), "{}", text(&test));
}

#[test]
fn every_alert_is_tested_firing_and_not_firing_and_has_annotations_and_a_runbook() {
    let (_dir, spec) = rules_on_disk();
    let alerts: Vec<&Value> = spec["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .filter(|r| r["alert"].is_string())
        .collect();
    let names: BTreeSet<&str> = alerts
        .iter()
        .map(|a| a["alert"].as_str().unwrap())
        .collect();
    for needed in [
        "QueueBacklogGrowing",
        "QueueOldestItemTooOld",
        "DeadLetterQueueNotEmpty",
        "DeadLetterQueueGrowing",
        "QueueNoConsumers",
        "QueueStalledJobs",
        "QueueExporterSourceDown",
        "QueueExporterDataStale",
        "QueueExporterScalerErrors",
    ] {
        assert!(names.contains(needed), "alert {needed} in {names:?}");
    }

    let tests =
        yaml_file(&root().join("deploy/kubernetes/base/prometheusrule.test.yaml")).remove(0);
    let mut fired: BTreeSet<&str> = BTreeSet::new();
    let mut silent: BTreeSet<&str> = BTreeSet::new();
    for t in tests["tests"].as_array().unwrap() {
        for a in t["alert_rule_test"].as_array().into_iter().flatten() {
            let n = a["alertname"].as_str().unwrap();
            if a["exp_alerts"].as_array().is_some_and(|e| !e.is_empty()) {
                fired.insert(n);
            } else {
                silent.insert(n);
            }
        }
    }
    let runbook = std::fs::read_to_string(root().join("docs/runbook.md")).unwrap();
    for alert in &alerts {
        let n = alert["alert"].as_str().unwrap();
        assert!(fired.contains(n), "{n}: no unit test where it fires");
        assert!(
            silent.contains(n),
            "{n}: no unit test where it stays silent"
        );
        for a in ["summary", "description"] {
            assert!(
                alert["annotations"][a]
                    .as_str()
                    .is_some_and(|s| !s.is_empty()),
                "{n}: annotation {a}"
            );
        }
        assert!(alert["labels"]["severity"].is_string(), "{n}: severity");
        assert!(
            runbook
                .lines()
                .any(|l| l.starts_with("####") && l.contains(&format!("`{n}`"))),
            "{n}: no runbook heading (#### `{n}`) in docs/runbook.md"
        );
    }
}

// ----------------------------------------------------------------- config

/// The `config.yaml` of the (only) ConfigMap of a build.
fn configmap_config(docs: &[Value]) -> (String, String) {
    let cm = only(docs, "ConfigMap");
    let config = cm["data"]["config.yaml"]
        .as_str()
        .expect("ConfigMap has config.yaml")
        .to_string();
    (name(cm).to_string(), config)
}

fn exporter_check(config: &str, extra: &[&str]) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, config).unwrap();
    let mut args = vec!["check", "--config", path.to_str().unwrap()];
    args.extend(extra);
    Command::new(env!("CARGO_BIN_EXE_queue-exporter"))
        .args(&args)
        .env_remove("QUEUE_EXPORTER_CONFIG")
        .output()
        .expect("run queue-exporter check")
}

#[test]
fn the_configmap_config_passes_queue_exporter_check() {
    for dir in [
        "deploy/kubernetes/base",
        "deploy/kubernetes/overlays/sidecar",
    ] {
        let (_, config) = configmap_config(&kustomize(dir));
        let out = exporter_check(&config, &[]);
        assert!(
            out.status.success(),
            "{dir}: queue-exporter check:\n{}",
            text(&out)
        );
        assert!(text(&out).contains(": ok ("), "{}", text(&out));
    }
    // And the check is no rubber stamp: a typo in the same config fails.
    let (_, config) = configmap_config(&kustomize("deploy/kubernetes/base"));
    let out = exporter_check(&config.replace("poll_interval:", "poll_intervall:"), &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}

// ---------------------------------------------------------------- wiring

/// Checks one exporter container in a pod template against the build's
/// ConfigMap, Secret and Service: ports, probes, mounts, hardening.
fn check_exporter_pod(docs: &[Value], pod: &Value, what: &str) {
    let spec = &pod["spec"];
    let c = spec["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "queue-exporter")
        .unwrap_or_else(|| panic!("{what}: a queue-exporter container"));
    let (cm_name, config_text) = configmap_config(docs);
    let config = yaml_documents(&config_text, "config.yaml").remove(0);

    // Hardening.
    assert_eq!(spec["automountServiceAccountToken"], false, "{what}");
    let sc = &c["securityContext"];
    assert_eq!(sc["allowPrivilegeEscalation"], false, "{what}");
    assert_eq!(sc["readOnlyRootFilesystem"], true, "{what}");
    assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]), "{what}");
    let non_root = sc["runAsNonRoot"] == true || spec["securityContext"]["runAsNonRoot"] == true;
    assert!(non_root, "{what}: runAsNonRoot");
    let uid = sc["runAsUser"]
        .as_i64()
        .or(spec["securityContext"]["runAsUser"].as_i64());
    assert_eq!(uid, Some(IMAGE_UID), "{what}: runs as the image's user");
    let seccomp = sc["seccompProfile"]["type"]
        .as_str()
        .or(spec["securityContext"]["seccompProfile"]["type"].as_str());
    assert_eq!(seccomp, Some("RuntimeDefault"), "{what}: seccomp profile");
    for r in ["requests", "limits"] {
        assert!(
            c["resources"][r]["memory"].is_string(),
            "{what}: memory {r}"
        );
    }

    // Ports: the container's named ports are the config's listen ports.
    let port = |n: &str| -> i64 {
        c["ports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == n)
            .unwrap_or_else(|| panic!("{what}: container port {n}"))["containerPort"]
            .as_i64()
            .unwrap()
    };
    for (field, port_name) in [("http", "http-metrics"), ("grpc", "grpc")] {
        let listen = config["listen"][field].as_str().unwrap();
        assert!(
            listen.starts_with("0.0.0.0:"),
            "{what}: listen.{field} must be reachable from outside the pod: {listen}"
        );
        assert_eq!(
            listen.rsplit(':').next().unwrap().parse::<i64>().unwrap(),
            port(port_name),
            "{what}: listen.{field} vs port {port_name}"
        );
    }
    // Probes: liveness on /healthz, readiness on /readyz, on the metrics port.
    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        assert_eq!(c[probe]["httpGet"]["path"], path, "{what}: {probe}");
        assert_eq!(
            c[probe]["httpGet"]["port"], "http-metrics",
            "{what}: {probe}"
        );
    }

    // Mounts: --config names the file the ConfigMap mount provides, and every
    // password_file is a key of the mounted Secret.
    let args: Vec<&str> = c["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let config_path = args[args.iter().position(|a| *a == "--config").unwrap() + 1];
    let volumes = spec["volumes"].as_array().unwrap();
    let mount_of = |volume: &Value| -> String {
        let vname = &volume["name"];
        c["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| &m["name"] == vname)
            .unwrap_or_else(|| panic!("{what}: volume {vname} is mounted"))["mountPath"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let cm_volume = volumes
        .iter()
        .find(|v| v["configMap"]["name"] == cm_name.as_str())
        .unwrap_or_else(|| panic!("{what}: a volume of ConfigMap {cm_name}"));
    assert_eq!(
        format!("{}/config.yaml", mount_of(cm_volume)),
        config_path,
        "{what}"
    );
    let password_files: Vec<&str> = config["sources"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["password_file"].as_str())
        .collect();
    assert!(
        !password_files.is_empty(),
        "{what}: passwords come from files"
    );
    // The Secret volume the password files are in (an overlay may mount
    // others, such as the scaler's TLS files).
    let secret_volume = volumes
        .iter()
        .filter(|v| v["secret"].is_object())
        .find(|v| password_files[0].starts_with(&format!("{}/", mount_of(v))))
        .unwrap_or_else(|| panic!("{what}: a Secret volume holding {}", password_files[0]));
    let secret = find(
        docs,
        "Secret",
        secret_volume["secret"]["secretName"].as_str().unwrap(),
    );
    let secret_dir = mount_of(secret_volume);
    for file in password_files {
        let key = file
            .strip_prefix(&format!("{secret_dir}/"))
            .unwrap_or_else(|| panic!("{what}: {file} is not in the Secret mount {secret_dir}"));
        assert!(
            secret["stringData"][key].is_string() || secret["data"][key].is_string(),
            "{what}: Secret {} has no key {key}",
            name(secret)
        );
    }

    // The Service selects this pod and exposes both ports by name.
    let service = find(docs, "Service", "queue-exporter");
    let labels = pod["metadata"]["labels"].as_object().unwrap();
    for (k, v) in service["spec"]["selector"].as_object().unwrap() {
        assert_eq!(labels.get(k), Some(v), "{what}: Service selector {k}");
    }
    let service_ports: BTreeMap<&str, &Value> = service["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["name"].as_str().unwrap(), &p["targetPort"]))
        .collect();
    assert_eq!(
        service_ports.get("http-metrics"),
        Some(&&json!("http-metrics"))
    );
    assert_eq!(service_ports.get("grpc"), Some(&&json!("grpc")));

    // The scaler's Service selects this pod too, and is headless, so its
    // name resolves to every replica and KEDA's round robin reaches each.
    let scaler = find(docs, "Service", "queue-exporter-scaler");
    for (k, v) in scaler["spec"]["selector"].as_object().unwrap() {
        assert_eq!(
            labels.get(k),
            Some(v),
            "{what}: scaler Service selector {k}"
        );
    }
    assert_eq!(scaler["spec"]["clusterIP"], "None", "{what}: headless");
    assert_eq!(scaler["spec"]["ports"][0]["targetPort"], "grpc");

    // The ServiceMonitor selects the Service and scrapes its metrics port.
    let monitor = only(docs, "ServiceMonitor");
    let service_labels = service["metadata"]["labels"].as_object().unwrap();
    for (k, v) in monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .unwrap()
    {
        assert_eq!(
            service_labels.get(k),
            Some(v),
            "ServiceMonitor selector {k}"
        );
    }
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "http-metrics");
    assert_eq!(monitor["spec"]["endpoints"][0]["path"], "/metrics");
}

#[test]
fn the_base_deployment_is_hardened_and_wired_to_its_configmap_secret_and_service() {
    let docs = kustomize("deploy/kubernetes/base");
    let deployment = only(&docs, "Deployment");
    assert_eq!(
        deployment["spec"]["replicas"], 2,
        "two replicas: KEDA round-robins across scaler replicas"
    );
    let pod = &deployment["spec"]["template"];
    check_exporter_pod(&docs, pod, "base Deployment");

    let pdb = only(&docs, "PodDisruptionBudget");
    let labels = pod["metadata"]["labels"].as_object().unwrap();
    for (k, v) in pdb["spec"]["selector"]["matchLabels"].as_object().unwrap() {
        assert_eq!(labels.get(k), Some(v), "PDB selector {k}");
    }
    assert_eq!(pdb["spec"]["minAvailable"], 1);

    // No RBAC: the exporter never talks to the Kubernetes API.
    for docs in kustomizations().iter().map(|d| kustomize(d)) {
        for d in &docs {
            assert!(
                !matches!(
                    kind(d),
                    "Role"
                        | "ClusterRole"
                        | "RoleBinding"
                        | "ClusterRoleBinding"
                        | "ServiceAccount"
                ),
                "no RBAC needed: {}",
                summary(&docs).join(", ")
            );
        }
    }
}

#[test]
fn the_sidecar_overlay_polls_the_redis_in_its_own_pod() {
    let docs = kustomize("deploy/kubernetes/overlays/sidecar");
    let sts = only(&docs, "StatefulSet");
    let pod = &sts["spec"]["template"];
    check_exporter_pod(&docs, pod, "sidecar");
    let (_, config_text) = configmap_config(&docs);
    let config = yaml_documents(&config_text, "config.yaml").remove(0);
    for s in config["sources"].as_array().unwrap() {
        let url = s["url"].as_str().unwrap();
        assert!(
            url.contains("@127.0.0.1:") || url.contains("@localhost:"),
            "the sidecar polls localhost: {url}"
        );
    }
}

/// Starts the sidecar overlay's Redis with its own arguments (environment
/// references filled from the overlay's Secrets, data dir and port moved to
/// a temp dir and a free port), and checks that the exporter's config, as
/// shipped, connects with the read-only ACL user, which cannot write.
#[test]
fn the_sidecar_redis_admits_the_exporters_read_only_user() {
    let docs = kustomize("deploy/kubernetes/overlays/sidecar");
    let sts = only(&docs, "StatefulSet");
    let redis = &sts["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(redis["name"], "redis");
    let secret_value = |secret: &str, key: &str| -> String {
        find(&docs, "Secret", secret)["stringData"][key]
            .as_str()
            .unwrap()
            .to_string()
    };
    let env: BTreeMap<String, String> = redis["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let r = &e["valueFrom"]["secretKeyRef"];
            (
                e["name"].as_str().unwrap().to_string(),
                secret_value(r["name"].as_str().unwrap(), r["key"].as_str().unwrap()),
            )
        })
        .collect();
    let data = tempfile::tempdir().unwrap();
    let port = support::free_port();
    let mut args: Vec<String> = redis["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            let mut a = a.as_str().unwrap().to_string();
            for (k, v) in &env {
                a = a.replace(&format!("$({k})"), v);
            }
            if a == "/data" {
                a = data.path().to_string_lossy().into_owned();
            }
            a
        })
        .collect();
    args.extend(["--port", &port.to_string(), "--bind", "127.0.0.1"].map(String::from));
    let command = redis["command"][0].as_str().unwrap();
    let _server = KillOnDrop(
        Command::new(command)
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{command}: {e} (apt-get install redis-server)")),
    );

    // The application's user may write; wait until the server answers.
    let admin = format!(
        "redis://default:{}@127.0.0.1:{port}",
        env["REDIS_DEFAULT_PASSWORD"]
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut conn = loop {
        if let Ok(mut c) = redis::Client::open(admin.as_str()).and_then(|c| c.get_connection())
            && redis::cmd("PING").query::<String>(&mut c).is_ok()
        {
            break c;
        }
        assert!(Instant::now() < deadline, "redis-server did not start");
        std::thread::sleep(Duration::from_millis(50));
    };
    let _: () = redis::cmd("RPUSH")
        .arg("work-queue")
        .arg("{\"enqueued_at\": 1}")
        .query(&mut conn)
        .unwrap();

    // The exporter's config as shipped, with the port and the password file
    // moved here: `check --connect` polls every source once.
    let (_, config) = configmap_config(&docs);
    let password = data.path().join("redis-password");
    std::fs::write(&password, format!("{}\n", env["QUEUE_EXPORTER_PASSWORD"])).unwrap();
    let config = config
        .replace("127.0.0.1:6379", &format!("127.0.0.1:{port}"))
        .replace(
            "/run/secrets/queue-exporter/redis-password",
            password.to_str().unwrap(),
        );
    let out = exporter_check(&config, &["--connect"]);
    assert!(
        out.status.success(),
        "queue-exporter check --connect:\n{}",
        text(&out)
    );

    // The exporter's user can read but not write.
    let reader = format!(
        "redis://queue-exporter:{}@127.0.0.1:{port}",
        env["QUEUE_EXPORTER_PASSWORD"]
    );
    let mut ro = redis::Client::open(reader.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let len: i64 = redis::cmd("LLEN").arg("work-queue").query(&mut ro).unwrap();
    assert_eq!(len, 1);
    let write: redis::RedisResult<()> = redis::cmd("LPOP").arg("work-queue").query(&mut ro);
    let err = write.expect_err("the exporter's user must not write");
    assert!(err.to_string().to_uppercase().contains("NOPERM"), "{err}");
}

// ------------------------------------------------------------------ KEDA

#[test]
fn every_scaled_object_targets_an_example_deployment_and_the_base_service() {
    let examples = kustomize("deploy/kubernetes/examples");
    let base = kustomize("deploy/kubernetes/base");
    let service = find(&base, "Service", "queue-exporter-scaler");
    assert_eq!(service["spec"]["clusterIP"], "None");
    let grpc_port = service["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "grpc")
        .unwrap()["port"]
        .as_i64()
        .unwrap();
    let deployments: BTreeSet<&str> = examples
        .iter()
        .filter(|d| kind(d) == "Deployment")
        .map(name)
        .collect();
    let mut priority_queues = BTreeSet::new();
    for d in examples.iter().filter(|d| kind(d) == "ScaledObject") {
        let target = d["spec"]["scaleTargetRef"]["name"].as_str().unwrap();
        assert!(
            deployments.contains(target),
            "ScaledObject {} scales {target}, which the examples do not define: {deployments:?}",
            name(d)
        );
        assert!(
            d["spec"]["fallback"]["replicas"].is_number(),
            "ScaledObject {} has a fallback",
            name(d)
        );
        for t in d["spec"]["triggers"].as_array().unwrap() {
            let address = t["metadata"]["scalerAddress"].as_str().unwrap();
            let host = format!("queue-exporter-scaler.{NAMESPACE}.svc");
            assert!(
                address == format!("{host}:{grpc_port}")
                    || address == format!("{host}.cluster.local:{grpc_port}"),
                "{}: scalerAddress {address} is not the base's headless scaler Service",
                name(d)
            );
            if let Some(q) = t["metadata"]["queue"]
                .as_str()
                .and_then(|q| q.strip_prefix("jobs:pending:"))
            {
                priority_queues.insert(q.to_string());
            }
        }
    }
    assert!(
        ["high", "normal", "low"]
            .iter()
            .all(|p| priority_queues.contains(*p)),
        "the priority example scales jobs:pending:high, :normal and :low: {priority_queues:?}"
    );
}

/// The exporter builds and the example builds applied beside them, as
/// docs/kubernetes.md's steps pair them: (exporter, examples).
const STEPS: [(&str, &str); 2] = [
    ("deploy/kubernetes/base", "deploy/kubernetes/examples"),
    (
        "deploy/kubernetes/overlays/scaler-mtls",
        "deploy/kubernetes/examples/mtls",
    ),
];

/// `scaler.tls` of a build's exporter: from its ConfigMap, or from the
/// container's `QUEUE_EXPORTER__SCALER__TLS__*` environment. Field → path.
fn scaler_tls(docs: &[Value]) -> BTreeMap<String, String> {
    let (_, config) = configmap_config(docs);
    let config = yaml_documents(&config, "config.yaml").remove(0);
    let mut tls: BTreeMap<String, String> = config["scaler"]["tls"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
        .collect();
    let deployment = only(docs, "Deployment");
    for c in deployment["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
    {
        for e in c["env"].as_array().into_iter().flatten() {
            if let Some(field) = e["name"]
                .as_str()
                .and_then(|n| n.strip_prefix("QUEUE_EXPORTER__SCALER__TLS__"))
            {
                tls.insert(
                    field.to_lowercase(),
                    e["value"].as_str().unwrap_or_default().to_string(),
                );
            }
        }
    }
    tls
}

/// The Secret a file path of the exporter's container is in, and its key
/// there (the path under a Secret volume's mount).
fn secret_file<'a>(docs: &'a [Value], path: &str) -> Option<(&'a Value, String)> {
    let pod = &only(docs, "Deployment")["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    for m in c["volumeMounts"].as_array().into_iter().flatten() {
        let dir = m["mountPath"].as_str().unwrap();
        let Some(key) = path.strip_prefix(&format!("{dir}/")) else {
            continue;
        };
        let volume = pod["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == m["name"])?;
        let secret = find(docs, "Secret", volume["secret"]["secretName"].as_str()?);
        return Some((secret, key.to_string()));
    }
    None
}

#[test]
fn every_example_trigger_can_connect_to_the_exporter_its_steps_deploy() {
    let mut checked = 0;
    for (exporter_dir, examples_dir) in STEPS {
        let exporter = kustomize(exporter_dir);
        let examples = kustomize(examples_dir);
        let address = deploy_support::scaler_address(&exporter);
        let tls = scaler_tls(&exporter);
        // Every file scaler.tls names is a key of a Secret the build
        // makes and mounts, holding what the field needs.
        for (field, path) in &tls {
            let (secret, key) = secret_file(&exporter, path).unwrap_or_else(|| {
                panic!("{exporter_dir}: scaler.tls.{field} {path} is in no mounted Secret")
            });
            let value = deploy_support::secret_value(secret, &key)
                .unwrap_or_else(|| panic!("{exporter_dir}: Secret {} has no {key}", name(secret)));
            let text = String::from_utf8_lossy(&value);
            let want = if field == "key_file" {
                "PRIVATE KEY-----"
            } else {
                "BEGIN CERTIFICATE-----"
            };
            assert!(
                text.contains(want),
                "{exporter_dir}: scaler.tls.{field} holds no {want}"
            );
        }
        for d in examples
            .iter()
            .filter(|d| matches!(kind(d), "ScaledObject" | "ScaledJob"))
        {
            let what = format!("{examples_dir}: {} {}", kind(d), name(d));
            let namespace = d["metadata"]["namespace"].as_str().unwrap();
            for t in d["spec"]["triggers"].as_array().unwrap() {
                checked += 1;
                assert_eq!(
                    t["metadata"]["scalerAddress"], address,
                    "{what}: the scaler {exporter_dir} deploys"
                );
                // The TLS parameters KEDA will hand the scaler.
                let mut params = BTreeMap::new();
                if let Some(auth) = t["authenticationRef"]["name"].as_str() {
                    let ta = examples
                        .iter()
                        .find(|x| {
                            kind(x) == "TriggerAuthentication"
                                && name(x) == auth
                                && x["metadata"]["namespace"] == namespace
                        })
                        .unwrap_or_else(|| {
                            panic!("{what}: TriggerAuthentication {auth} is not in the same apply")
                        });
                    for r in ta["spec"]["secretTargetRef"].as_array().unwrap() {
                        let secret_name = r["name"].as_str().unwrap();
                        let secret = examples
                            .iter()
                            .find(|x| {
                                kind(x) == "Secret"
                                    && name(x) == secret_name
                                    && x["metadata"]["namespace"] == namespace
                            })
                            .unwrap_or_else(|| {
                                panic!(
                                    "{what}: Secret {secret_name} (of TriggerAuthentication \
                                     {auth}) is made by nothing the steps apply"
                                )
                            });
                        let key = r["key"].as_str().unwrap();
                        let value = deploy_support::secret_value(secret, key)
                            .unwrap_or_else(|| panic!("{what}: Secret {secret_name} has no {key}"));
                        params.insert(r["parameter"].as_str().unwrap().to_string(), value);
                    }
                }
                // A TLS server needs a client that trusts it, a mutual-TLS
                // one a client certificate; a plain one a plain client.
                let serves_tls = tls.contains_key("cert_file");
                let mutual = tls.contains_key("client_ca_file");
                assert_eq!(
                    params.contains_key("caCert"),
                    serves_tls,
                    "{what}: caCert given where {exporter_dir} serves TLS, and only there"
                );
                assert_eq!(
                    params.contains_key("tlsClientCert") && params.contains_key("tlsClientKey"),
                    mutual,
                    "{what}: a client certificate where {exporter_dir} asks for one"
                );
                if mutual {
                    // KEDA trusts the CA that signed the exporter's
                    // certificate; the exporter the one of KEDA's.
                    let ca_of = |field: &str| {
                        let (secret, key) = secret_file(&exporter, &tls[field]).unwrap();
                        deploy_support::secret_value(secret, &key).unwrap()
                    };
                    assert_eq!(params["caCert"], ca_of("client_ca_file"), "{what}: one CA");
                }
            }
        }
    }
    assert!(checked >= 7, "only {checked} example triggers");
}

#[test]
fn the_mtls_overlay_is_the_base_wired_alike_with_its_scaler_tls_secret_mounted_read_only() {
    let docs = kustomize("deploy/kubernetes/overlays/scaler-mtls");
    let pod = &only(&docs, "Deployment")["spec"]["template"];
    check_exporter_pod(&docs, pod, "scaler-mtls Deployment");
    let tls = scaler_tls(&docs);
    assert_eq!(
        tls.keys().map(String::as_str).collect::<Vec<_>>(),
        ["cert_file", "client_ca_file", "key_file"],
        "mutual TLS"
    );
    let mounts = pod["spec"]["containers"][0]["volumeMounts"]
        .as_array()
        .unwrap();
    for path in tls.values() {
        let (secret, _) = secret_file(&docs, path).unwrap();
        assert!(
            name(secret).starts_with("queue-exporter-scaler-tls"),
            "{path}"
        );
        assert!(
            mounts.iter().any(
                |m| path.starts_with(m["mountPath"].as_str().unwrap()) && m["readOnly"] == true
            ),
            "{path}: mounted read-only"
        );
    }
}

/// docs/kubernetes.md's "overlay of your own", built as the page lays it
/// out: `my-cluster/` beside a checkout `queue-exporter/`, with a
/// `config.yaml` of the user's sources.
#[test]
fn the_overlay_of_your_own_in_kubernetes_md_builds() {
    let page = std::fs::read_to_string(root().join("docs/kubernetes.md")).unwrap();
    let block = page
        .split("```yaml\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap())
        .find(|b| b.starts_with("# my-cluster/kustomization.yaml"))
        .expect("docs/kubernetes.md's my-cluster/kustomization.yaml");
    let dir = tempfile::tempdir().unwrap();
    let mine = dir.path().join("my-cluster");
    std::fs::create_dir(&mine).unwrap();
    std::fs::write(mine.join("kustomization.yaml"), block).unwrap();
    let config = "listen: { http: 0.0.0.0:9731, grpc: 0.0.0.0:9732 }\nsources:\n  - name: mine\n    type: redis\n    url: redis://redis.mine:6379\n";
    std::fs::write(mine.join("config.yaml"), config).unwrap();
    std::os::unix::fs::symlink(deploy_support::tree(), dir.path().join("queue-exporter")).unwrap();
    let out = run("kubectl", &["kustomize", "my-cluster"], dir.path());
    assert!(
        out.status.success(),
        "kubectl kustomize my-cluster:\n{}",
        text(&out)
    );
    let docs = yaml_documents(&String::from_utf8_lossy(&out.stdout), "my-cluster");
    let (_, built) = configmap_config(&docs);
    assert_eq!(built, config, "the ConfigMap holds the user's config");
    let image = only(&docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(image, "my-registry.internal/queue-exporter:0.1.0");
    let out = exporter_check(&built, &[]);
    assert!(out.status.success(), "{}", text(&out));
}

/// Every `scalerAddress`-like address (`host:9732` naming queue-exporter)
/// in `text`.
fn scaler_addresses(text: &str) -> Vec<String> {
    static PATTERNS: std::sync::LazyLock<(regex::Regex, regex::Regex)> =
        std::sync::LazyLock::new(|| {
            (
                regex::Regex::new(r"queue-exporter[A-Za-z0-9.-]*:9732\b").unwrap(),
                regex::Regex::new(r"scalerAddress:\s*([^\s#]+)").unwrap(),
            )
        });
    let (address, field) = &*PATTERNS;
    address
        .find_iter(text)
        .map(|m| m.as_str().to_string())
        .chain(field.captures_iter(text).map(|c| c[1].to_string()))
        .collect()
}

#[test]
fn one_scaler_address_everywhere_the_headless_services() {
    // The headless Service of the base (namespace monitoring) and of the
    // sidecar overlay, which moves it to default.
    let allowed: BTreeSet<String> = [
        "deploy/kubernetes/base",
        "deploy/kubernetes/overlays/sidecar",
        "deploy/kubernetes/overlays/scaler-mtls",
    ]
    .iter()
    .map(|d| deploy_support::scaler_address(&kustomize(d)))
    .collect();
    assert!(
        allowed.contains("queue-exporter-scaler.monitoring.svc.cluster.local:9732"),
        "{allowed:?}"
    );
    let mut files = vec![root().join("README.md")];
    for dir in ["docs", "deploy", "dashboards"] {
        files.extend(files_under(&root().join(dir), &[".md", ".yaml", ".yml"]));
    }
    let mut seen = 0;
    let mut wrong = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            for a in scaler_addresses(line).into_iter().collect::<BTreeSet<_>>() {
                seen += 1;
                if !allowed.contains(&a) {
                    wrong.push(format!(
                        "{}:{}: {a}",
                        file.strip_prefix(root()).unwrap().display(),
                        n + 1
                    ));
                }
            }
        }
    }
    assert!(seen >= 20, "only {seen} scaler addresses found");
    assert!(
        wrong.is_empty(),
        "scaler addresses that are not the headless Service's ({allowed:?}):\n{}",
        wrong.join("\n")
    );
    // The scan sees the spellings the docs had.
    assert_eq!(
        scaler_addresses(
            "scalerAddress: queue-exporter.monitoring:9732 and `queue-exporter-scaler.monitoring:9732`"
        ),
        [
            "queue-exporter.monitoring:9732",
            "queue-exporter-scaler.monitoring:9732",
            "queue-exporter.monitoring:9732"
        ]
    );
}

// ------------------------------------------------------------- Dockerfile

#[test]
fn the_dockerfile_builds_a_minimal_non_root_image_that_hadolint_accepts() {
    let dockerfile = std::fs::read_to_string(root().join("Dockerfile")).unwrap();
    // Instructions, with continuation lines joined and comments dropped.
    let joined = dockerfile
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n")
        .replace("\\\n", " ");
    let instructions: Vec<(String, String)> = joined
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let (op, rest) = l.trim().split_once(' ').unwrap_or((l.trim(), ""));
            (op.to_uppercase(), rest.trim().to_string())
        })
        .collect();
    let of = |op: &str| -> Vec<&str> {
        instructions
            .iter()
            .filter(|(o, _)| o == op)
            .map(|(_, r)| r.as_str())
            .collect()
    };
    let froms = of("FROM");
    assert!(froms.len() >= 2, "multi-stage: {froms:?}");
    assert!(
        of("RUN")
            .iter()
            .any(|r| r.contains("cargo build --release --locked")),
        "a locked release build"
    );
    let runtime = froms.last().unwrap();
    assert!(
        runtime.contains("distroless") || runtime.starts_with("scratch"),
        "a minimal runtime image: {runtime}"
    );
    // The final stage runs as the numeric, non-root user the manifests expect.
    let last_from = instructions.iter().rposition(|(o, _)| o == "FROM").unwrap();
    let user = instructions[last_from..]
        .iter()
        .rfind(|(o, _)| o == "USER")
        .map(|(_, r)| r.clone())
        .expect("USER in the final stage");
    let uid: i64 = user
        .split(':')
        .next()
        .unwrap()
        .parse()
        .expect("numeric USER");
    assert_eq!(uid, IMAGE_UID);
    let exposed: BTreeSet<&str> = of("EXPOSE")
        .iter()
        .flat_map(|r| r.split_whitespace())
        .collect();
    assert_eq!(exposed, BTreeSet::from(["9731", "9732"]));
    let entrypoint: Vec<String> =
        serde_json::from_str(of("ENTRYPOINT").last().expect("ENTRYPOINT")).expect("exec form");
    assert!(entrypoint[0].ends_with("/queue-exporter"), "{entrypoint:?}");

    // What the build stage copies exists and is not excluded from the context.
    // (The `prebuilt` stage copies from a context of its own, made by
    // scripts/container-rootfs: tests/container.rs builds and runs it.)
    let mut stage = "";
    let context_copies: Vec<&str> = instructions
        .iter()
        .filter_map(|(op, rest)| {
            if op == "FROM" {
                stage = rest.rsplit(' ').next().unwrap_or("");
            }
            let from_context = op == "COPY" && !rest.starts_with("--from");
            (from_context && stage != "prebuilt").then_some(rest.as_str())
        })
        .collect();
    let ignored: Vec<String> = std::fs::read_to_string(root().join(".dockerignore"))
        .expect(".dockerignore")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.trim_end_matches('/').to_string())
        .collect();
    assert!(
        ignored.iter().any(|i| i == "target"),
        "target/ stays out of the context"
    );
    for copy in &context_copies {
        let parts: Vec<&str> = copy.split_whitespace().collect();
        for src in &parts[..parts.len() - 1] {
            assert!(root().join(src).exists(), "COPY {src}: missing");
            assert!(
                !ignored.iter().any(|i| i == src),
                "COPY {src}: in .dockerignore"
            );
        }
    }

    // Cargo refuses a manifest whose declared targets are missing, so every
    // explicit target in Cargo.toml must be inside what the build copies.
    let copied: Vec<String> = context_copies
        .iter()
        .flat_map(|c| {
            let parts: Vec<&str> = c.split_whitespace().collect();
            parts[..parts.len() - 1]
                .iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
        })
        .collect();
    for target in cargo_target_paths() {
        let top = target.split('/').next().unwrap();
        assert!(
            copied.iter().any(|c| c == top || c == &target),
            "Cargo.toml declares {target}, which the Dockerfile does not copy: {copied:?}"
        );
    }

    let lint = run("hadolint", &["Dockerfile"], &root());
    assert!(
        lint.status.success(),
        "hadolint Dockerfile:\n{}",
        text(&lint)
    );
}

/// The files of the targets Cargo.toml declares explicitly (`[[bench]]`,
/// `[[bin]]`, `[[example]]`, `[[test]]`), at their `path` or default place.
fn cargo_target_paths() -> Vec<String> {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let mut out = Vec::new();
    let mut section: Option<(&str, Option<String>, Option<String>)> = None;
    let mut flush = |s: Option<(&str, Option<String>, Option<String>)>| {
        if let Some((dir, name, path)) = s {
            let name = name.expect("a declared target has a name");
            out.push(path.unwrap_or_else(|| format!("{dir}/{name}.rs")));
        }
    };
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            flush(section.take());
            section = match line {
                "[[bench]]" => Some(("benches", None, None)),
                "[[bin]]" => Some(("src/bin", None, None)),
                "[[example]]" => Some(("examples", None, None)),
                "[[test]]" => Some(("tests", None, None)),
                _ => None,
            };
        } else if let Some((_, name, path)) = section.as_mut()
            && let Some((key, value)) = line.split_once('=')
        {
            let value = value.trim().trim_matches('"').to_string();
            match key.trim() {
                "name" => *name = Some(value),
                "path" => *path = Some(value),
                _ => {}
            }
        }
    }
    flush(section);
    out
}
