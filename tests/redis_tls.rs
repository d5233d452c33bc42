//! `rediss://` with a CA and a client certificate, against a private
//! `redis-server --port 0 --tls-port … --tls-auth-clients yes` with
//! certificates made at test time, polled by the real exporter binary:
//!
//! - the right CA and client certificate: `/metrics` shows the right depth;
//! - a wrong CA, or no client certificate: the source is down, the reason
//!   is `connect` with the TLS cause in the log, and no queue value (no
//!   made-up zero) is shown;
//! - a TLS file that cannot be read fails `check` and startup with one line
//!   naming the field and the file.
mod reliability_support;
mod support;
mod tls_support;

use std::time::Duration;

use reliability_support::{Exporter, run_bin, run_bin_for};
use support::{Scrape, wait_for, write_file};
use tls_support::{TlsRedis, make_pki};

/// A Redis source block for `url` with `tls_lines` (already indented by 4).
fn source(name: &str, url: &str, tls_lines: &str) -> String {
    format!(
        "  - name: {name}\n    type: redis\n    url: {url}\n    poll_interval: 100ms\n    timeout: 2s\n{tls_lines}    queues:\n      - key: work-queue\n"
    )
}

fn tls_block(
    ca: Option<&std::path::Path>,
    client: Option<(&std::path::Path, &std::path::Path)>,
) -> String {
    let mut s = "    tls:\n".to_string();
    if let Some(ca) = ca {
        s += &format!("      ca_file: {}\n", ca.display());
    }
    if let Some((cert, key)) = client {
        s += &format!(
            "      cert_file: {}\n      key_file: {}\n",
            cert.display(),
            key.display()
        );
    }
    if ca.is_none() && client.is_none() {
        s = "    tls: {}\n".into();
    }
    s
}

fn push(redis: &TlsRedis, n: usize) {
    let mut c = redis.conn();
    for i in 0..n {
        redis::cmd("RPUSH")
            .arg("work-queue")
            .arg(format!("job {i}"))
            .exec(&mut c)
            .unwrap();
    }
}

async fn scrape(e: &Exporter) -> Scrape {
    Scrape::parse(&e.metrics().await)
}

#[tokio::test]
async fn rediss_with_a_ca_and_a_client_certificate_shows_the_right_depth() {
    let pki = make_pki("redis");
    let redis = TlsRedis::start(&pki);
    push(&redis, 7);
    let f = &redis.files;
    let body = format!(
        "sources:\n{}",
        source(
            "secure",
            &redis.url(),
            &tls_block(Some(&f.ca), Some((&f.client_cert, &f.client_key)))
        )
    );
    let e = Exporter::start(&body, &[], &[]).await;
    let s = wait_for(
        "depth 7 over rediss://",
        Duration::from_secs(20),
        || async {
            let s = scrape(&e).await;
            (s.depth("work-queue") == Some(7.0)).then_some(s)
        },
    )
    .await;
    assert_eq!(s.source_up("secure"), Some(1.0), "{s}");
    // The value follows the server.
    push(&redis, 2);
    wait_for(
        "depth 9 over rediss://",
        Duration::from_secs(20),
        || async { (scrape(&e).await.depth("work-queue") == Some(9.0)).then_some(()) },
    )
    .await;
    // `check --connect` polls it too.
    let (code, out, err) = run_bin(
        &["--config", e.config.to_str().unwrap(), "check", "--connect"],
        &[],
    );
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}");
}

#[tokio::test]
async fn a_wrong_ca_or_a_missing_client_certificate_marks_the_source_down() {
    let pki = make_pki("redis");
    let redis = TlsRedis::start(&pki);
    push(&redis, 5);
    let f = &redis.files;
    let other = make_pki("other");
    let dir = tempfile::tempdir().unwrap();
    let other_ca = write_file(&dir, "other-ca.pem", &other.ca);
    let body = format!(
        "log: {{ level: debug }}\nsources:\n{}{}{}",
        source(
            "good",
            &redis.url(),
            &tls_block(Some(&f.ca), Some((&f.client_cert, &f.client_key)))
        ),
        source(
            "wrong-ca",
            &redis.url(),
            &tls_block(Some(&other_ca), Some((&f.client_cert, &f.client_key)))
        ),
        source("no-cert", &redis.url(), &tls_block(Some(&f.ca), None)),
    );
    let e = Exporter::start(&body, &[], &[]).await;
    let s = wait_for(
        "both misconfigured sources to fail a poll",
        Duration::from_secs(30),
        || async {
            let s = scrape(&e).await;
            let failed = |src| s.errors(src, "connect").is_some_and(|v| v >= 2.0);
            (failed("wrong-ca") && failed("no-cert") && s.source_up("good") == Some(1.0))
                .then_some(s)
        },
    )
    .await;
    for src in ["wrong-ca", "no-cert"] {
        assert_eq!(s.source_up(src), Some(0.0), "{src}: {s}");
        // No made-up zero: no queue series at all for a source that never
        // answered.
        assert!(
            s.samples("queue_depth", &[("source", src)])
                .next()
                .is_none(),
            "{src} shows a depth: {s}"
        );
    }
    assert_eq!(
        s.value(
            "queue_depth",
            &[("source", "good"), ("queue", "work-queue")]
        ),
        Some(5.0),
        "{s}"
    );
    // The log says why, in words.
    let log = e.stderr();
    let line = |src: &str| {
        log.lines()
            .find(|l| l.contains(src) && l.contains("cannot connect"))
            .unwrap_or_else(|| panic!("no connect error logged for {src}:\n{log}"))
            .to_string()
    };
    let wrong_ca = line("wrong-ca");
    assert!(
        wrong_ca.contains("UnknownIssuer") || wrong_ca.contains("invalid peer certificate"),
        "{wrong_ca}"
    );
    let no_cert = line("no-cert");
    eprintln!("wrong CA: {wrong_ca}\nno client certificate: {no_cert}");
    assert!(
        no_cert.to_lowercase().contains("certificate")
            || no_cert.contains("reset")
            || no_cert.contains("closed"),
        "{no_cert}"
    );
    // Never the key's contents.
    let key = std::fs::read_to_string(&f.client_key).unwrap();
    let key_body = key.lines().nth(1).unwrap();
    assert!(
        !log.contains(key_body),
        "the client key leaked into the log"
    );
    // `check --connect` fails, naming the sources.
    let (code, _, err) = run_bin(
        &["--config", e.config.to_str().unwrap(), "check", "--connect"],
        &[],
    );
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("cannot poll source wrong-ca (connect)"),
        "{err}"
    );
    assert!(
        err.contains("cannot poll source no-cert (connect)"),
        "{err}"
    );
}

#[tokio::test]
async fn unreadable_tls_files_fail_check_and_startup_with_one_line() {
    let pki = make_pki("redis");
    let dir = tempfile::tempdir().unwrap();
    let files = pki.write(&dir, "p");
    let not_pem = write_file(&dir, "not-a-key.pem", "just text, not PEM\n");
    let cases = [
        (
            tls_block(
                Some(&files.ca),
                Some((
                    std::path::Path::new("/nonexistent/client.pem"),
                    &files.client_key,
                )),
            ),
            "sources[0].tls.cert_file: cannot read /nonexistent/client.pem: No such file or directory",
        ),
        (
            tls_block(Some(std::path::Path::new("/nonexistent/ca.pem")), None),
            "sources[0].tls.ca_file: cannot read /nonexistent/ca.pem",
        ),
        (
            tls_block(Some(&files.ca), Some((&files.client_cert, &not_pem))),
            "sources[0].tls.key_file: ",
        ),
    ];
    for (tls, want) in cases {
        let config = write_file(
            &dir,
            "config.yaml",
            &format!(
                "listen: {{ http: 127.0.0.1:0, grpc: null }}\nsources:\n{}",
                source("s", "rediss://127.0.0.1:1", &tls)
            ),
        );
        let path = config.to_str().unwrap();
        let (code, out, err) = run_bin(&["--config", path, "check"], &[]);
        assert_eq!(code, 2, "check: {out}{err}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(
            err.starts_with(&format!("{path}: {want}")),
            "check names the config file, the field and the TLS file: {err}"
        );
        let (code, _, err) = run_bin_for(&["--config", path], &[], Duration::from_secs(20));
        assert_eq!(code, 2, "serve: {err}");
        assert!(err.starts_with(&format!("{path}: {want}")), "serve: {err}");
        assert_eq!(err.lines().count(), 1, "serve, one line: {err}");
    }
    // Cross-field problems are config errors, named by field.
    let config = |extra: &str, url: &str| {
        write_file(
            &dir,
            "config.yaml",
            &format!("sources:\n{}", source("s", url, extra)),
        )
    };
    for (extra, url, want) in [
        (
            tls_block(Some(&files.ca), None),
            "redis://127.0.0.1:1",
            "sources[0].tls: is only used with a rediss:// url",
        ),
        (
            format!(
                "    tls:\n      cert_file: {}\n",
                files.client_cert.display()
            ),
            "rediss://127.0.0.1:1",
            "sources[0].tls.key_file: is needed with tls.cert_file",
        ),
        (
            String::new(),
            "rediss://127.0.0.1:1/#insecure",
            "sources[0].url: #insecure (no certificate check) is not supported",
        ),
    ] {
        let path = config(&extra, url);
        let (code, _, err) = run_bin(&["--config", path.to_str().unwrap(), "check"], &[]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains(want), "{want}: {err}");
    }
}
