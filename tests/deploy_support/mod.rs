//! The deployment files as a user's steps build them: a copy of `deploy/`
//! in which `overlays/scaler-mtls/make-certs` has made the certificates
//! (as docs/kubernetes.md's steps do first), so every kustomization,
//! the mutual-TLS ones too, builds with `kubectl kustomize`. Shared by the
//! tests of the manifests and of the mTLS steps.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use serde::Deserialize;
use serde_json::Value;

/// The crate's directory.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A directory holding `deploy/` as the steps leave it: copied, then
/// `make-certs` run in the copy (the checkout is never written to). Made
/// once per test binary.
pub fn tree() -> &'static Path {
    static TREE: OnceLock<tempfile::TempDir> = OnceLock::new();
    TREE.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        copy_dir(&root().join("deploy"), &dir.path().join("deploy"));
        let script = dir
            .path()
            .join("deploy/kubernetes/overlays/scaler-mtls/make-certs");
        let out = Command::new(&script)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("{}: {e}", script.display()));
        assert!(
            out.status.success(),
            "make-certs failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        dir
    })
    .path()
}

/// Copies `from` into `to`, recursively, keeping file modes (the scripts
/// stay executable).
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap_or_else(|e| panic!("{}: {e}", to.display()));
    for entry in std::fs::read_dir(from).unwrap_or_else(|e| panic!("{}: {e}", from.display())) {
        let entry = entry.unwrap();
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        if src.is_dir() {
            copy_dir(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
        }
    }
}

/// `kubectl kustomize DIR` (`deploy/kubernetes/…`) in [`tree`], parsed.
pub fn kustomize(dir: &str) -> Vec<Value> {
    let out = Command::new("kubectl")
        .args(["kustomize", dir])
        .current_dir(tree())
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run kubectl ({e}): scripts/setup-services installs it"));
    assert!(
        out.status.success(),
        "kubectl kustomize {dir} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let docs: Vec<Value> = serde_norway::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap_or_else(|e| panic!("{dir}: {e}")))
        .filter(|v| !v.is_null())
        .collect();
    assert!(!docs.is_empty(), "kubectl kustomize {dir} built nothing");
    docs
}

/// An object's `kind`.
pub fn kind(doc: &Value) -> &str {
    doc["kind"].as_str().unwrap_or_default()
}

/// An object's `metadata.name`.
pub fn name(doc: &Value) -> &str {
    doc["metadata"]["name"].as_str().unwrap_or_default()
}

/// The objects of `kind` `k`.
pub fn of_kind<'a>(docs: &'a [Value], k: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| kind(d) == k).collect()
}

/// A Secret's value of `key`, decoded (`data` is base64, `stringData` text).
pub fn secret_value(secret: &Value, key: &str) -> Option<Vec<u8>> {
    if let Some(s) = secret["stringData"][key].as_str() {
        return Some(s.as_bytes().to_vec());
    }
    use base64::Engine as _;
    // kubectl wraps long values across lines.
    let b64: String = secret["data"][key]
        .as_str()?
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    Some(
        base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap_or_else(|e| panic!("Secret {}: {key} is not base64: {e}", name(secret))),
    )
}

/// The headless scaler Service of a build, as KEDA's `scalerAddress`
/// writes it: `<name>.<namespace>.svc.cluster.local:<grpc port>`.
pub fn scaler_address(docs: &[Value]) -> String {
    let service = docs
        .iter()
        .find(|d| kind(d) == "Service" && d["spec"]["clusterIP"] == "None")
        .expect("a headless Service for the scaler");
    let port = service["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "grpc")
        .expect("a grpc port")["port"]
        .as_i64()
        .unwrap();
    format!(
        "{}.{}.svc.cluster.local:{port}",
        name(service),
        service["metadata"]["namespace"].as_str().unwrap()
    )
}
