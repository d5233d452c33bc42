//! The container image as a real container (issue 29). Each test builds the
//! Dockerfile's runtime stage with podman (`--build-arg ROOTFS_FROM=prebuilt`,
//! from the binary Cargo built for the tests, or the one
//! `QUEUE_EXPORTER_CONTAINER_BINARY` names, laid out by
//! `scripts/container-rootfs`), then:
//!
//! - walks the image's files: nothing writable, everything root's, nothing
//!   executable but the binary and its dynamic loader (so no shell);
//! - reads its metadata: the numeric non-root user the manifests expect, the
//!   two ports, the OCI labels;
//! - runs it as `deploy/kubernetes/base/deployment.yaml` says (user, read-only
//!   root filesystem, dropped capabilities, no privilege escalation, the args
//!   and the read-only config mount are all read from that file, so they
//!   cannot drift) on the host network against a private redis-server and the
//!   local RabbitMQ: `/readyz` 200, queue series on `/metrics`, a gRPC
//!   `IsActive`, and the process seen from the host runs as 65532 with no
//!   capabilities on a read-only root;
//! - stops it with `podman stop` (SIGTERM): exit 0 within `shutdown_grace`.
//!
//! podman runs with settings that work in this project's sandboxed machines
//! and on ordinary hosts alike: its own storage in a temporary directory (vfs
//! driver), `--isolation chroot`, `--cgroup-manager cgroupfs`, `--runtime
//! runc`, and no default ulimits. Where podman is not installed the tests say
//! so and pass, except under CI (`CI` set), where that is a failure:
//! `scripts/setup-services` installs it.

mod scaler_common;
mod support;

use std::collections::BTreeSet;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{
    RabbitVhost, RedisServer, Scrape, confirm_channel, declare_queue, free_port, http_get, publish,
    wait_for, write_file,
};

/// The repository root (the Dockerfile, the scripts, the manifests).
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Stdout and stderr of a finished command, for failure messages.
fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs `cmd`; its stdout, trimmed, or a panic with everything it printed.
fn output_of(mut cmd: Command, what: &str) -> String {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what}: {}\n{}",
        out.status,
        text(&out)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

// ------------------------------------------------------------------ podman

/// A podman with a private store, so a run neither sees nor leaves images
/// and containers in the machine's own store.
struct Podman {
    /// Holds the store (`root`), its run state (`run`) and `containers.conf`.
    dir: tempfile::TempDir,
}

impl Podman {
    /// A podman, or `None` (after saying so) where it is not installed and
    /// this is not CI.
    fn new() -> Option<Podman> {
        if let Err(e) = Command::new("podman").arg("--version").output() {
            assert!(
                std::env::var_os("CI").is_none(),
                "podman cannot run ({e}), and CI must run the container tests: scripts/setup-services installs it"
            );
            eprintln!("SKIPPED: podman cannot run ({e}); scripts/setup-services installs it");
            return None;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        // crun (podman's usual runtime) cannot set RLIMIT_NPROC in some
        // sandboxes; with no default ulimits, runc sets none.
        write_file(
            &dir,
            "containers.conf",
            "[containers]\ndefault_ulimits = []\n",
        );
        Some(Podman { dir })
    }

    /// `podman` with this store and the portable settings.
    fn cmd(&self) -> Command {
        let d = self.dir.path();
        let mut cmd = Command::new("podman");
        cmd.env("CONTAINERS_CONF", d.join("containers.conf"))
            .arg("--root")
            .arg(d.join("root"))
            .arg("--runroot")
            .arg(d.join("run"))
            .args([
                "--storage-driver",
                "vfs",
                "--cgroup-manager",
                "cgroupfs",
                "--runtime",
                "runc",
            ]);
        cmd
    }

    /// Runs `podman ARGS`; its stdout, trimmed.
    fn run(&self, args: &[&str]) -> String {
        let mut cmd = self.cmd();
        cmd.args(args);
        output_of(cmd, &format!("podman {}", args.join(" ")))
    }
}

/// The image, built from the Dockerfile's runtime stage, in its own store.
struct Image {
    podman: Podman,
    /// Its tag.
    name: String,
}

impl Image {
    /// Lays out the root filesystem of [`container_binary`]
    /// (`scripts/container-rootfs`) and builds the image; `None` without podman.
    fn build() -> Option<Image> {
        let podman = Podman::new()?;
        let context = tempfile::tempdir().expect("tempdir");
        let scratch = tempfile::tempdir().expect("tempdir");
        output_of(
            {
                let mut c = Command::new(root().join("scripts/container-rootfs"));
                c.arg(container_binary(scratch.path()))
                    .arg(context.path().join("rootfs"));
                c
            },
            "scripts/container-rootfs",
        );
        let name = "localhost/queue-exporter:container-test".to_string();
        let dockerfile = root().join("Dockerfile");
        let context_dir = context.path().to_str().expect("UTF-8 temp path");
        podman.run(&[
            "build",
            "--isolation",
            "chroot",
            "--build-arg",
            "ROOTFS_FROM=prebuilt",
            "-f",
            dockerfile.to_str().expect("UTF-8 path"),
            "-t",
            &name,
            context_dir,
        ]);
        // The rootfs is read-only (0555 directories): give the temporary
        // directory back its write bits so that it can be removed.
        make_removable(context.path());
        Some(Image { podman, name })
    }

    /// `podman image inspect` as JSON.
    fn inspect(&self) -> Value {
        let json = self.podman.run(&["image", "inspect", &self.name]);
        let all: Value = serde_json::from_str(&json).expect("inspect JSON");
        all[0].clone()
    }
}

/// Adds the owner's write bit to every directory under `dir`.
fn make_removable(dir: &Path) {
    for entry in walk(dir) {
        if entry.1.is_dir() {
            let mut perms = entry.1.permissions();
            perms.set_mode(perms.mode() | 0o700);
            std::fs::set_permissions(&entry.0, perms).expect("chmod");
        }
    }
}

/// Every entry under `dir` (itself included), not following symlinks.
fn walk(dir: &Path) -> Vec<(PathBuf, std::fs::Metadata)> {
    let mut out = vec![];
    let mut todo = vec![dir.to_path_buf()];
    while let Some(path) = todo.pop() {
        let meta = std::fs::symlink_metadata(&path).expect("stat");
        if meta.is_dir() {
            for entry in std::fs::read_dir(&path).expect("read_dir") {
                todo.push(entry.expect("dir entry").path());
            }
        }
        out.push((path, meta));
    }
    out
}

/// The binary the image holds: `$QUEUE_EXPORTER_CONTAINER_BINARY` if set
/// (e.g. `target/release/queue-exporter`, to test the image users get),
/// else the one Cargo built for these tests, which CI has already compiled:
/// a release build from a clean clone would add minutes (docs/container.md).
/// Its debug info and symbols are stripped (in a copy under `dir`), as the
/// release profile's are in the Dockerfile.
fn container_binary(dir: &Path) -> PathBuf {
    let built = std::env::var_os("QUEUE_EXPORTER_CONTAINER_BINARY")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_queue-exporter")));
    let stripped = dir.join("queue-exporter");
    output_of(
        {
            let mut c = Command::new("strip");
            c.arg("-o").arg(&stripped).arg(&built);
            c
        },
        &format!("strip {}", built.display()),
    );
    stripped
}

// --------------------------------------------------------------- manifests

/// What `deploy/kubernetes/base/deployment.yaml` asks of the container, as
/// podman can do it.
struct PodSpec {
    /// `runAsUser:runAsGroup` (pod securityContext).
    user: String,
    /// `--read-only` (readOnlyRootFilesystem), `--cap-drop` per dropped
    /// capability, `--security-opt no-new-privileges`
    /// (allowPrivilegeEscalation: false).
    run_flags: Vec<String>,
    /// The container's `args`.
    args: Vec<String>,
    /// Where the config volume is mounted (read-only).
    config_dir: String,
    /// `terminationGracePeriodSeconds`: how long `podman stop` waits before SIGKILL.
    grace_seconds: u64,
}

fn pod_spec() -> PodSpec {
    let yaml = std::fs::read_to_string(root().join("deploy/kubernetes/base/deployment.yaml"))
        .expect("deployment.yaml");
    let deployment: Value = serde_norway::from_str(&yaml).expect("deployment YAML");
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    assert_eq!(container["name"], "queue-exporter");
    let (pod_sc, sc) = (&pod["securityContext"], &container["securityContext"]);
    assert_eq!(pod_sc["runAsNonRoot"], true);
    assert_eq!(sc["runAsNonRoot"], true);
    let uid = pod_sc["runAsUser"].as_u64().expect("runAsUser");
    let gid = pod_sc["runAsGroup"].as_u64().expect("runAsGroup");
    assert_ne!(uid, 0, "runAsNonRoot with runAsUser 0");

    let mut run_flags = vec![];
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    // podman's --read-only adds writable tmpfs on /tmp, /run and /var/tmp;
    // Kubernetes does not.
    run_flags.extend(["--read-only".into(), "--read-only-tmpfs=false".into()]);
    let dropped = sc["capabilities"]["drop"]
        .as_array()
        .expect("capabilities.drop");
    assert!(!dropped.is_empty());
    for cap in dropped {
        run_flags.push(format!("--cap-drop={}", cap.as_str().expect("capability")));
    }
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    run_flags.push("--security-opt=no-new-privileges".into());
    assert_eq!(sc["privileged"], false);

    let volume = container["volumeMounts"]
        .as_array()
        .expect("volumeMounts")
        .iter()
        .find(|m| m["name"] == "config")
        .expect("the config volume");
    assert_eq!(volume["readOnly"], true);
    let args: Vec<String> = container["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("string arg").to_string())
        .collect();
    PodSpec {
        user: format!("{uid}:{gid}"),
        run_flags,
        args,
        config_dir: volume["mountPath"].as_str().expect("mountPath").to_string(),
        grace_seconds: pod["terminationGracePeriodSeconds"]
            .as_u64()
            .expect("terminationGracePeriodSeconds"),
    }
}

// ------------------------------------------------------------ the container

/// A container run from the image as the manifest says, removed on drop.
struct Container<'a> {
    image: &'a Image,
    name: String,
    /// The config file, mounted read-only.
    _config: tempfile::TempDir,
}

impl Drop for Container<'_> {
    fn drop(&mut self) {
        let _ = self
            .image
            .podman
            .cmd()
            .args(["rm", "--force", "--time", "0", &self.name])
            .output();
    }
}

impl<'a> Container<'a> {
    /// `podman run` with the manifest's settings, host network, `config`
    /// mounted read-only where the manifest mounts it.
    fn start(image: &'a Image, spec: &PodSpec, config: &str) -> Container<'a> {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write_file(&dir, "config.yaml", config);
        // The container's user reads it: world-readable, like a ConfigMap.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).expect("chmod");
        let name = format!("queue-exporter-test-{}", free_port());
        let mount = format!(
            "{}:{}/config.yaml:ro",
            path.display(),
            spec.config_dir.trim_end_matches('/')
        );
        let mut run = vec![
            "run",
            "--detach",
            "--name",
            &name,
            "--network",
            "host",
            "--user",
            &spec.user,
            "--volume",
            &mount,
        ];
        run.extend(spec.run_flags.iter().map(String::as_str));
        run.push(&image.name);
        run.extend(spec.args.iter().map(String::as_str));
        image.podman.run(&run);
        Container {
            image,
            name,
            _config: dir,
        }
    }

    /// `podman inspect --format FORMAT` of the container.
    fn inspect(&self, format: &str) -> String {
        self.image
            .podman
            .run(&["inspect", "--format", format, &self.name])
    }

    /// The container's main process, as the host sees it.
    fn pid(&self) -> u32 {
        self.inspect("{{.State.Pid}}").parse().expect("pid")
    }

    /// What it logged, for failure messages.
    fn logs(&self) -> String {
        let out = self
            .image
            .podman
            .cmd()
            .args(["logs", &self.name])
            .output()
            .expect("podman logs");
        text(&out)
    }
}

/// A config for the container: the exporter on loopback ports of the host
/// network, one Redis source (list `work` with 3 items) and one RabbitMQ
/// source (queue `orders` with 2 messages in a throw-away vhost).
struct Backends {
    redis: RedisServer,
    vhost: RabbitVhost,
    http: u16,
    grpc: u16,
}

impl Backends {
    /// `tag` names the RabbitMQ vhost, unique per test.
    async fn start(tag: &str) -> Backends {
        let redis = RedisServer::start();
        let _: i64 = redis::cmd("RPUSH")
            .arg(&["work", "a", "b", "c"])
            .query(&mut redis.conn())
            .expect("RPUSH");
        let vhost = RabbitVhost::create(tag).await;
        let amqp = vhost.connect().await;
        let ch = confirm_channel(&amqp).await;
        declare_queue(&ch, "orders", &[]).await;
        publish(&ch, "orders", 2, Default::default()).await;
        Backends {
            redis,
            vhost,
            http: free_port(),
            grpc: free_port(),
        }
    }

    fn config(&self) -> String {
        format!(
            r#"listen:
  http: 127.0.0.1:{http}
  grpc: 127.0.0.1:{grpc}
shutdown_grace: {SHUTDOWN_GRACE_SECS}s
sources:
  - name: main
    type: redis
    url: {redis}
    poll_interval: 200ms
    queues:
      - key: work
  - name: rabbit
    type: rabbitmq
    url: http://127.0.0.1:15672
    username: guest
    password: guest
    vhosts: ["{vhost}"]
    poll_interval: 500ms
"#,
            http = self.http,
            grpc = self.grpc,
            redis = self.redis.url,
            vhost = self.vhost.name,
        )
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.http)
    }

    /// Waits until `/readyz` answers 200 (every source has polled once).
    async fn wait_ready(&self, container: &Container<'_>) {
        let url = self.url("/readyz");
        let ready = support::poll_until(Duration::from_secs(30), || async {
            let r = reqwest::get(&url).await.ok()?;
            (r.status().as_u16() == 200).then_some(())
        })
        .await;
        assert!(
            ready.is_some(),
            "/readyz never answered 200; the container logged:\n{}",
            container.logs()
        );
    }
}

/// The test config's `shutdown_grace`, which `podman stop` must beat.
const SHUTDOWN_GRACE_SECS: u64 = 5;

// ------------------------------------------------------------------- tests

#[test]
fn the_image_has_nothing_writable_and_nothing_executable_but_the_binary_and_its_loader() {
    let Some(image) = Image::build() else { return };
    let mount = PathBuf::from(image.podman.run(&["image", "mount", &image.name]));
    let files = walk(&mount);
    let relative = |p: &Path| {
        p.strip_prefix(&mount)
            .expect("under the mount")
            .to_path_buf()
    };
    let writable: Vec<_> = files
        .iter()
        .filter(|(_, m)| m.mode() & 0o222 != 0)
        .map(|(p, m)| format!("{} {:o}", relative(p).display(), m.mode()))
        .collect();
    assert!(writable.is_empty(), "writable: {writable:?}");
    let not_roots: Vec<_> = files
        .iter()
        .filter(|(_, m)| m.uid() != 0 || m.gid() != 0)
        .map(|(p, m)| format!("{} {}:{}", relative(p).display(), m.uid(), m.gid()))
        .collect();
    assert!(not_roots.is_empty(), "not owned by root: {not_roots:?}");
    let special: Vec<_> = files
        .iter()
        .filter(|(_, m)| m.mode() & 0o7000 != 0)
        .map(|(p, _)| relative(p))
        .collect();
    assert!(special.is_empty(), "setuid, setgid or sticky: {special:?}");

    // The kernel opens the ELF interpreter with exec permission, so the
    // loader is the one file besides the binary that must be executable.
    let binary = PathBuf::from("usr/local/bin/queue-exporter");
    let headers = output_of(
        {
            let mut c = Command::new("readelf");
            c.args(["--program-headers", "--wide"])
                .arg(mount.join(&binary));
            c
        },
        "readelf",
    );
    let loader = headers
        .split("[Requesting program interpreter: ")
        .nth(1)
        .and_then(|rest| rest.split(']').next())
        .expect("a dynamically linked binary names its loader");
    let executable: BTreeSet<PathBuf> = files
        .iter()
        .filter(|(_, m)| m.is_file() && m.mode() & 0o111 != 0)
        .map(|(p, _)| relative(p))
        .collect();
    assert_eq!(
        executable,
        BTreeSet::from([binary, PathBuf::from(loader.trim_start_matches('/'))]),
        "only the binary and its loader are executable (no shell)"
    );
    let passwd = std::fs::read_to_string(mount.join("etc/passwd")).expect("etc/passwd");
    assert!(passwd.contains(":65532:65532:"), "{passwd}");
    assert!(
        mount.join("etc/ssl/certs/ca-certificates.crt").is_file(),
        "CA certificates for rustls-native-certs"
    );
    image.podman.run(&["image", "unmount", &image.name]);
}

#[test]
fn the_image_runs_as_the_manifests_non_root_user_exposes_both_ports_and_has_oci_labels() {
    let Some(image) = Image::build() else { return };
    let spec = pod_spec();
    let inspect = image.inspect();
    let config = &inspect["Config"];
    // Numeric, so the kubelet can check runAsNonRoot against the image alone.
    assert_eq!(config["User"], spec.user.as_str());
    let ports: BTreeSet<&str> = config["ExposedPorts"]
        .as_object()
        .expect("ExposedPorts")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(ports, BTreeSet::from(["9731/tcp", "9732/tcp"]));
    let labels = &config["Labels"];
    assert_eq!(
        labels["org.opencontainers.image.version"],
        env!("CARGO_PKG_VERSION"),
        "the Dockerfile's VERSION follows Cargo.toml"
    );
    for key in ["source", "licenses"] {
        let key = format!("org.opencontainers.image.{key}");
        assert!(labels.get(&key).is_some(), "label {key}: {labels}");
    }
    assert_eq!(
        config["Entrypoint"],
        serde_json::json!(["/usr/local/bin/queue-exporter"])
    );
    let size = inspect["Size"].as_u64().expect("Size");
    eprintln!("image size: {size} bytes ({:.1} MB)", size as f64 / 1e6);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_container_serves_metrics_readyz_and_grpc_as_65532_with_no_capabilities_on_a_read_only_root()
 {
    let Some(image) = Image::build() else { return };
    let spec = pod_spec();
    let backends = Backends::start("container-run").await;
    let container = Container::start(&image, &spec, &backends.config());
    backends.wait_ready(&container).await;

    // Queue series from both sources.
    let url = backends.url("/metrics");
    let scrape = wait_for(
        "queue_depth of work (3) and orders (2)",
        Duration::from_secs(30),
        || async {
            let (status, body, _) = http_get(&url, &[]).await;
            let s = Scrape::parse(&body);
            let redis = s.value("queue_depth", &[("source", "main"), ("queue", "work")]);
            let rabbit = s.value("queue_depth", &[("source", "rabbit"), ("queue", "orders")]);
            (status == 200 && redis == Some(3.0) && rabbit == Some(2.0)).then_some(s)
        },
    )
    .await;
    assert_eq!(scrape.source_up("main"), Some(1.0), "{scrape}");
    assert_eq!(scrape.source_up("rabbit"), Some(1.0), "{scrape}");

    // KEDA's IsActive over gRPC.
    let grpc = format!("127.0.0.1:{}", backends.grpc)
        .parse()
        .expect("addr");
    let mut client = scaler_common::connect(grpc).await;
    let active = scaler_common::active(&mut client, &[("source", "main"), ("queue", "work")])
        .await
        .expect("IsActive");
    assert!(active, "3 items in work");

    // What `id` would say inside, and what the process may do, seen from
    // the host: the image has no shell to ask.
    let pid = container.pid();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let field = |name: &str| -> Vec<String> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .unwrap_or_else(|| panic!("{name} in /proc/{pid}/status"))
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    assert_eq!(field("Uid"), ["65532"; 4], "real, effective, saved, fs UID");
    assert_eq!(field("Gid"), ["65532"; 4], "real, effective, saved, fs GID");
    assert!(
        field("Groups").iter().all(|g| g == "65532"),
        "no supplementary group but its own: {:?}",
        field("Groups")
    );
    for caps in ["CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert_eq!(field(caps), ["0000000000000000"], "{caps}");
    }
    assert_eq!(field("NoNewPrivs"), ["1"]);
    let mounts = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).expect("mountinfo");
    let options_of = |target: &str| -> Vec<String> {
        mounts
            .lines()
            .map(|l| l.split(' ').collect::<Vec<_>>())
            .filter(|f| f.get(4) == Some(&target))
            .filter_map(|f| f.get(5).map(|o| o.split(',').map(str::to_string).collect()))
            .next_back()
            .unwrap_or_else(|| panic!("{target} in /proc/{pid}/mountinfo:\n{mounts}"))
    };
    assert!(options_of("/").contains(&"ro".into()), "read-only root");
    let config_file = format!("{}/config.yaml", spec.config_dir.trim_end_matches('/'));
    assert!(
        options_of(&config_file).contains(&"ro".into()),
        "read-only config"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn podman_stop_ends_the_container_with_exit_0_within_shutdown_grace() {
    let Some(image) = Image::build() else { return };
    let spec = pod_spec();
    let backends = Backends::start("container-stop").await;
    let container = Container::start(&image, &spec, &backends.config());
    backends.wait_ready(&container).await;

    // SIGTERM, then SIGKILL after the pod's grace period, as the kubelet does.
    let started = Instant::now();
    image.podman.run(&[
        "stop",
        "--time",
        &spec.grace_seconds.to_string(),
        &container.name,
    ]);
    let took = started.elapsed();
    assert_eq!(
        container.inspect("{{.State.ExitCode}}"),
        "0",
        "exit code after SIGTERM; logs:\n{}",
        container.logs()
    );
    assert!(
        took < Duration::from_secs(SHUTDOWN_GRACE_SECS),
        "stopped in {took:?}, over shutdown_grace ({SHUTDOWN_GRACE_SECS}s)"
    );
}
