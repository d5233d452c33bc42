//! TLS to RabbitMQ, against a private `rabbitmq-server` ([`PrivateRabbit`])
//! whose AMQPS and HTTPS management listeners use certificates made by
//! `rcgen` at test time and require a client certificate
//! (`verify_peer`, `fail_if_no_peer_cert`). The exporter binary reads the
//! node over `https://` and `amqps://` with `tls.ca_file`, `tls.cert_file`
//! and `tls.key_file`; a wrong CA or a missing client certificate is the
//! source down with `reason="connect"` and a log line that says why.
mod reliability_support;
mod support;

use std::time::{Duration, Instant};

use reliability_support::*;
use support::*;

/// One source of the test: its name, method, URL and `tls:` block.
fn source(name: &str, method: &str, url: &str, tls: &str) -> String {
    let queues = if method == "amqp" {
        "    queues: [work]\n"
    } else {
        "    username: guest\n    password: guest\n"
    };
    format!(
        "  - name: {name}\n    type: rabbitmq\n    method: {method}\n    url: {url}\n{queues}    poll_interval: 300ms\n    timeout: 2s\n    tls: {tls}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_management_and_amqps_work_with_the_ca_and_a_client_certificate_and_fail_clearly_without()
 {
    let pki = make_pki("rabbit");
    let other = make_pki("other");
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, text: &str| write_file(&dir, name, text).display().to_string();
    let ca = file("ca.pem", &pki.ca);
    let client = (
        file("client.pem", &pki.client.0),
        file("client.key", &pki.client.1),
    );
    let other_ca = file("other-ca.pem", &other.ca);
    let rogue = (
        file("rogue.pem", &other.client.0),
        file("rogue.key", &other.client.1),
    );
    let t = Instant::now();
    let node = PrivateRabbit::start(Some(RabbitTls {
        ca: ca.clone().into(),
        cert: write_file(&dir, "server.pem", &pki.server.0),
        key: write_file(&dir, "server.key", &pki.server.1),
    }))
    .await;
    eprintln!("TLS node up in {:?}", t.elapsed());
    {
        let conn = node.connect().await;
        let ch = confirm_channel(&conn).await;
        declare_queue(&ch, "work", &[]).await;
        publish(&ch, "work", 4, lapin::BasicProperties::default()).await;
        let _ = conn.close(200, "done".into()).await;
    }
    let https = format!("https://localhost:{}", node.mgmt_tls_port.unwrap());
    let amqps = format!(
        "amqps://guest:guest@127.0.0.1:{}/%2F",
        node.amqps_port.unwrap()
    );
    let full = |ca: &str, (cert, key): &(String, String)| {
        format!("{{ ca_file: {ca}, cert_file: {cert}, key_file: {key} }}")
    };
    let ca_only = format!("{{ ca_file: {ca} }}");
    let yaml = [
        "sources:\n".to_string(),
        source("https", "management", &https, &full(&ca, &client)),
        source("amqps", "amqp", &amqps, &full(&ca, &client)),
        // Trusts another CA: the server's certificate is refused.
        source(
            "https-wrong-ca",
            "management",
            &https,
            &full(&other_ca, &client),
        ),
        source("amqps-wrong-ca", "amqp", &amqps, &full(&other_ca, &client)),
        // No client certificate: the server refuses the handshake.
        source("https-no-cert", "management", &https, &ca_only),
        source("amqps-no-cert", "amqp", &amqps, &ca_only),
        // A client certificate from a CA the server does not trust.
        source("amqps-rogue-cert", "amqp", &amqps, &full(&ca, &rogue)),
    ]
    .concat();
    let exp = Exporter::start(&yaml, &[], &[]).await;

    // Both good sources read the queue (management statistics lag up to 5 s).
    let body = poll_until(Duration::from_secs(30), || async {
        let body = exp.metrics().await;
        let s = Scrape::parse(&body);
        (s.value("queue_depth", &[("source", "https"), ("queue", "work")]) == Some(4.0)
            && s.value(
                "queue_messages_ready",
                &[("source", "amqps"), ("queue", "work")],
            ) == Some(4.0))
        .then_some(s)
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "no depth 4 over https and amqps; stderr:\n{}\n{}",
            exp.stderr(),
            node.logs()
        )
    });
    assert_eq!(body.source_up("https"), Some(1.0));
    assert_eq!(body.source_up("amqps"), Some(1.0));

    // Every failing source is down with `connect` errors, shows no queue,
    // and its log line says why.
    let failing = [
        ("https-wrong-ca", "UnknownIssuer"),
        ("amqps-wrong-ca", "UnknownIssuer"),
        // For https too: the alert, or (when the server closes the
        // connection before the client reads it) the hint.
        ("https-no-cert", "CertificateRequired|client certificate"),
        // For amqps: the alert, or (when RabbitMQ's reset wins the race to
        // the client) the hint naming the client certificate.
        ("amqps-no-cert", "CertificateRequired|client certificate"),
        ("amqps-rogue-cert", "alert|client certificate"),
    ];
    let s = poll_until(Duration::from_secs(20), || async {
        let s = exp_scrape(&exp).await;
        failing
            .iter()
            .all(|(src, _)| s.errors(src, "connect").unwrap_or(0.0) >= 2.0)
            .then_some(s)
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "not every failing source counted connect errors:\n{}",
            exp.stderr()
        )
    });
    let stderr = exp.stderr();
    for (src, why) in failing {
        assert_eq!(s.source_up(src), Some(0.0), "{src}");
        assert!(
            !s.samples("queue_depth", &[("source", src)]).any(|_| true)
                && !s
                    .samples("queue_messages_ready", &[("source", src)])
                    .any(|_| true),
            "{src} shows a queue"
        );
        let line = stderr
            .lines()
            .find(|l| l.contains("poll failed") && l.contains(&format!("source={src} ")))
            .unwrap_or_else(|| panic!("no log line for {src}:\n{stderr}"));
        eprintln!("{line}");
        assert!(line.contains("reason=connect"), "{line}");
        assert!(
            why.split('|').any(|w| line.contains(w)),
            "{src}: {why} not in {line}"
        );
        assert!(!line.contains("guest:guest"), "{line}");
    }
    // Said once per source, not at every failed poll, and no library
    // repeats it at ERROR on each attempt.
    for (src, _) in failing {
        let n = stderr
            .lines()
            .filter(|l| l.contains(&format!("source={src} ")))
            .count();
        assert_eq!(n, 1, "{src} logged {n} times:\n{stderr}");
    }
    assert!(!stderr.contains(" ERROR "), "{stderr}");
    // The good sources never failed.
    for src in ["https", "amqps"] {
        for r in ["connect", "timeout", "auth", "backend"] {
            assert_eq!(s.errors(src, r), Some(0.0), "{src} {r}:\n{stderr}");
        }
    }
}

/// A parsed `/metrics` of the exporter.
async fn exp_scrape(exp: &Exporter) -> Scrape {
    Scrape::parse(&exp.metrics().await)
}

/// docs/security.md: `check` and `serve` read every TLS file first and exit
/// 2 with one line naming the config file, the field and the file. Held
/// for RabbitMQ as for Redis, for every method and each of the three files
/// (missing, or not what the field needs); no broker is needed, since
/// nothing may connect before the files are read.
#[test]
fn unreadable_tls_files_fail_check_and_serve_with_one_line() {
    let pki = make_pki("rabbit-files");
    let dir = tempfile::tempdir().unwrap();
    let ca = write_file(&dir, "ca.pem", &pki.ca).display().to_string();
    let cert = write_file(&dir, "client.pem", &pki.client.0)
        .display()
        .to_string();
    let key = write_file(&dir, "client.key", &pki.client.1)
        .display()
        .to_string();
    let not_pem = write_file(&dir, "not-pem.txt", "just text, not PEM\n")
        .display()
        .to_string();
    let tls = |ca: &str, cert: &str, key: &str| {
        format!("{{ ca_file: \"{ca}\", cert_file: \"{cert}\", key_file: \"{key}\" }}")
    };
    let cases = [
        (
            tls("/nonexistent/ca.pem", &cert, &key),
            "sources[0].tls.ca_file: cannot read /nonexistent/ca.pem: No such file or directory"
                .to_string(),
        ),
        (
            tls(&ca, "/nonexistent/client.pem", &key),
            "sources[0].tls.cert_file: cannot read /nonexistent/client.pem".to_string(),
        ),
        (
            tls(&ca, &cert, "/nonexistent/client.key"),
            "sources[0].tls.key_file: cannot read /nonexistent/client.key".to_string(),
        ),
        (
            tls(&not_pem, &cert, &key),
            format!("sources[0].tls.ca_file: {not_pem}: holds no PEM certificate"),
        ),
        (
            tls(&ca, &cert, &not_pem),
            format!("sources[0].tls.key_file: {not_pem}: holds no PEM private key"),
        ),
    ];
    let methods = [
        ("management", "https://127.0.0.1:1"),
        ("prometheus", "https://127.0.0.1:1"),
        ("amqp", "amqps://guest:guest@127.0.0.1:1/%2F"),
    ];
    for (method, url) in methods {
        for (tls, want) in &cases {
            let config = write_file(
                &dir,
                "config.yaml",
                &format!(
                    "listen: {{ http: 127.0.0.1:0, grpc: null }}\nsources:\n{}",
                    source("r", method, url, tls)
                ),
            );
            let path = config.to_str().unwrap();
            let (code, out, err) = run_bin(&["check", "--config", path], &[]);
            assert_eq!(code, 2, "{method} check: {out}{err}");
            assert_eq!(err.lines().count(), 1, "{method} check, one line: {err}");
            assert!(
                err.starts_with(&format!("{path}: {want}")),
                "{method} check names the config file, the field and the TLS file: {err}"
            );
            let (code, _, err) = run_bin_for(&["--config", path], &[], Duration::from_secs(20));
            assert_eq!(code, 2, "{method} serve: {err}");
            assert_eq!(err.lines().count(), 1, "{method} serve, one line: {err}");
            assert!(
                err.starts_with(&format!("{path}: {want}")),
                "{method} serve: {err}"
            );
        }
        // And the same files, readable, pass `check`.
        let config = write_file(
            &dir,
            "config.yaml",
            &format!(
                "listen: {{ http: 127.0.0.1:0, grpc: null }}\nsources:\n{}",
                source("r", method, url, &tls(&ca, &cert, &key))
            ),
        );
        let (code, out, err) = run_bin(&["check", "--config", config.to_str().unwrap()], &[]);
        assert_eq!(code, 0, "{method}: {out}{err}");
    }
}
