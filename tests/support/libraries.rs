//! Real queue libraries driven by the fixture scripts under
//! `tests/fixtures/presets/` (RQ, Celery, Dramatiq, Huey, arq and rediswq
//! from PyPI, BullMQ, Bull, bee-queue and node-resque from npm, Sidekiq from Debian's
//! ruby-sidekiq), shared by the preset, zero-config and drained-queue tests.
//!
//! A library that is not installed fails its test, naming the library and
//! how to install it (`scripts/setup-services` installs them all).
//! `QUEUE_EXPORTER_ALLOW_MISSING_LIBS=1` lets a developer without, say,
//! Ruby skip those tests instead, with a loud message on stderr; CI
//! (`CI` set, as `.ci/run` does) ignores it: there a missing library always
//! fails.

use std::process::Command;

/// The path of a fixture under `tests/fixtures/presets/`.
pub fn fixture(name: &str) -> String {
    format!(
        "{}/tests/fixtures/presets/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// The opt-out that lets a preset test pass without its library (never in CI).
pub const ALLOW_MISSING: &str = "QUEUE_EXPORTER_ALLOW_MISSING_LIBS";

/// Whether a missing library may skip its test: only when asked for with
/// [`ALLOW_MISSING`]`=1`, and never under CI (`CI` set to anything).
pub fn may_skip_missing() -> bool {
    std::env::var_os("CI").is_none() && std::env::var(ALLOW_MISSING).as_deref() == Ok("1")
}

/// Whether `probe` shows `library` installed. When it does not, the test
/// fails, or (see [`may_skip_missing`]) gets `false` and a loud message.
fn installed(library: &str, probe: &[&str]) -> bool {
    let probed = Command::new(probe[0]).args(&probe[1..]).output();
    if !probed.as_ref().is_ok_and(|o| o.status.success()) {
        let why = match probed {
            Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_string(),
            Err(e) => e.to_string(),
        };
        let missing =
            format!("{library} is not installed ({why}); run scripts/setup-services to install it");
        let how = if std::env::var_os("CI").is_some() {
            "CI is set: nothing skips".to_string()
        } else {
            format!("or set {ALLOW_MISSING}=1 to skip this test")
        };
        assert!(may_skip_missing(), "{missing} ({how})");
        eprintln!("\n!!!!!!!! SKIPPED ({ALLOW_MISSING}=1): {missing} !!!!!!!!\n");
        return false;
    }
    true
}

/// Runs a fixture script. When `probe` shows the library is not installed,
/// the test fails, or (see [`may_skip_missing`]) gets `None` and a loud
/// message. Any other failure fails the test.
pub fn run_fixture(library: &str, probe: &[&str], program: &str, args: &[&str]) -> Option<String> {
    if !installed(library, probe) {
        return None;
    }
    let out = Command::new(program)
        .args(args)
        .output()
        .expect("run fixture");
    assert!(
        out.status.success(),
        "{program} {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8_lossy(&out.stdout).to_string())
}

/// A queue library the fixture scripts drive: how to tell it is installed
/// and what runs its scripts, named once for every test that uses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Library {
    /// RQ, from PyPI.
    Rq,
    /// Celery with its Redis transport, from PyPI.
    Celery,
    /// Sidekiq, Debian's ruby-sidekiq.
    Sidekiq,
    /// BullMQ (and the ioredis client its fixtures pass it), from npm.
    Bullmq,
    /// Bull 4.x, BullMQ's predecessor, from npm.
    Bull,
    /// Dramatiq with its Redis broker, from PyPI.
    Dramatiq,
    /// Huey with its Redis storages, from PyPI.
    Huey,
    /// bee-queue 2.x, from npm.
    BeeQueue,
    /// node-resque 9.x (Resque's Node port, Resque's layout), from npm,
    /// with the ioredis client its fixtures pass it.
    Resque,
    /// arq, from PyPI (installed without its redis<6 pin).
    Arq,
    /// rediswq, from PyPI: the work queue of Kubernetes' "fine parallel
    /// processing" example, packaged.
    Rediswq,
    /// redis-py alone, from PyPI: what plays a layout whose own library
    /// does not run here (asynq's Go client, the priority-zset layout)
    /// with that library's commands.
    RedisPy,
}

impl Library {
    /// Its name and how to install it, for the message when it is missing.
    fn name(self) -> &'static str {
        match self {
            Library::Rq => "RQ (pip install rq)",
            Library::Celery => "Celery (pip install celery redis packaging)",
            Library::Sidekiq => "Sidekiq (apt-get install ruby-sidekiq)",
            Library::Bullmq => "BullMQ (npm ci in tests/fixtures/presets/node)",
            Library::Bull => "Bull (npm ci in tests/fixtures/presets/node)",
            Library::Dramatiq => "Dramatiq (pip install 'dramatiq[redis]==2.2.1')",
            Library::Huey => "Huey (pip install huey redis)",
            Library::BeeQueue => "bee-queue (npm ci in tests/fixtures/presets/node)",
            Library::Resque => "node-resque (npm ci in tests/fixtures/presets/node)",
            Library::Arq => "arq (pip install --no-deps arq==0.28.0)",
            Library::Rediswq => "rediswq (pip install rediswq==0.1)",
            Library::RedisPy => "redis-py (pip install redis)",
        }
    }

    /// The program that runs its scripts.
    fn program(self) -> &'static str {
        match self {
            Library::Rq
            | Library::Celery
            | Library::Dramatiq
            | Library::Huey
            | Library::Arq
            | Library::Rediswq
            | Library::RedisPy => "python3",
            Library::Sidekiq => "ruby",
            Library::Bullmq | Library::Bull | Library::BeeQueue | Library::Resque => "node",
        }
    }

    /// The code [`Library::program`] runs to show the library is installed.
    fn probe(self) -> String {
        let node_dir = fixture("node");
        match self {
            Library::Rq => "import rq".to_string(),
            Library::Celery => "import celery, redis, packaging".to_string(),
            Library::Sidekiq => "require 'sidekiq'".to_string(),
            Library::Bullmq => format!(
                "require('{node_dir}/node_modules/bullmq'); require('{node_dir}/node_modules/ioredis')"
            ),
            Library::Bull => format!("require('{node_dir}/node_modules/bull')"),
            Library::Dramatiq => "import dramatiq.brokers.redis".to_string(),
            Library::Huey => "import huey, redis".to_string(),
            Library::BeeQueue => format!("require('{node_dir}/node_modules/bee-queue')"),
            Library::Resque => format!(
                "require('{node_dir}/node_modules/node-resque'); require('{node_dir}/node_modules/ioredis')"
            ),
            Library::Arq => "import arq".to_string(),
            Library::Rediswq => "import rediswq".to_string(),
            Library::RedisPy => "import redis".to_string(),
        }
    }

    /// The probe command line: [`Library::program`] running [`Library::probe`].
    fn probe_cmd(self) -> [String; 3] {
        let flag = if self.program() == "python3" {
            "-c"
        } else {
            "-e"
        };
        [self.program().into(), flag.into(), self.probe()]
    }

    /// Runs `script` (a path under `tests/fixtures/presets/`) with `args`,
    /// as [`run_fixture`] does: `None` only when the library is missing
    /// and [`may_skip_missing`].
    pub fn run(self, script: &str, args: &[&str]) -> Option<String> {
        let script = fixture(script);
        let args: Vec<&str> = std::iter::once(script.as_str())
            .chain(args.iter().copied())
            .collect();
        let probe = self.probe_cmd();
        let probe: Vec<&str> = probe.iter().map(String::as_str).collect();
        run_fixture(self.name(), &probe, self.program(), &args)
    }

    /// Starts `script` with `args` in the background (a worker that runs
    /// until killed), its output discarded; SIGKILLed when the guard
    /// drops. `None` only when the library is missing and
    /// [`may_skip_missing`].
    pub fn spawn(self, script: &str, args: &[&str]) -> Option<super::KillOnDrop> {
        let probe = self.probe_cmd();
        let probe: Vec<&str> = probe.iter().map(String::as_str).collect();
        if !installed(self.name(), &probe) {
            return None;
        }
        let child = Command::new(self.program())
            .arg(fixture(script))
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn fixture");
        Some(super::KillOnDrop(child))
    }

    /// [`Library::run`] on a blocking thread, so that an exporter started
    /// in the same async test keeps polling while the script runs.
    pub async fn run_async(self, script: &str, args: &[&str]) -> Option<String> {
        let script = script.to_string();
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            self.run(&script, &args)
        })
        .await
        .expect("fixture thread")
    }
}

/// `queue_depth{queue, preset, state}` of a preset queue.
pub fn depth(s: &super::Scrape, queue: &str, preset: &str, state: &str) -> Option<f64> {
    s.value(
        "queue_depth",
        &[("queue", queue), ("preset", preset), ("state", state)],
    )
}

/// Runs one Redis command (test setup; panics on error).
pub fn rcmd(conn: &mut redis::Connection, args: &[&str]) {
    let mut c = redis::cmd(args[0]);
    for a in &args[1..] {
        c.arg(*a);
    }
    let _: redis::Value = c.query(conn).expect("redis command");
}
