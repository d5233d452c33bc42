//! Real queue libraries driven by the fixture scripts under
//! `tests/fixtures/presets/` (RQ and Celery from PyPI, BullMQ from npm,
//! Sidekiq from Debian's ruby-sidekiq), shared by the preset and zero-config
//! tests.
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

/// Runs a fixture script. When `probe` shows the library is not installed,
/// the test fails, or (see [`may_skip_missing`]) gets `None` and a loud
/// message. Any other failure fails the test.
pub fn run_fixture(library: &str, probe: &[&str], program: &str, args: &[&str]) -> Option<String> {
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
