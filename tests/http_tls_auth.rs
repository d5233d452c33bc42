//! TLS, mutual TLS and basic auth (bcrypt) on the HTTP listener (`web:`),
//! with certificates made at test time, against the real exporter binary:
//!
//! - HTTPS only for clients that trust the CA; plaintext is refused;
//! - `RequireAndVerifyClientCert` refuses clients without a certificate
//!   from `client_ca_file`; `VerifyClientCertIfGiven` lets them in but
//!   still refuses a certificate from another CA;
//! - basic auth: 401 with a `WWW-Authenticate` challenge for missing, wrong
//!   or unknown credentials on every path but `/healthz` and `/readyz`;
//!   `$2b$` and htpasswd's `$2y$` hashes; verdicts cached, so 10 concurrent
//!   scrapers cost about one bcrypt, not one per scrape; the password never
//!   appears in the output;
//! - a real Prometheus scrapes over HTTPS with basic auth and a client
//!   certificate (`up == 1`), and a job with the wrong password gets `up == 0`;
//! - exporter-toolkit's other fields load and apply: `min_version` and
//!   `max_version` refuse clients outside them, `cipher_suites` and
//!   `curve_preferences` refuse TLS 1.2 handshakes offering only others,
//!   `http_server_config.headers` are on every response; what rustls lacks
//!   is refused at load on one line.
mod reliability_support;
mod support;
mod tls_support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use reliability_support::{Exporter, run_bin, run_bin_for, secret};
use support::{RedisServer, Scrape, pct, poll_until, wait_for, write_file};
use tls_support::{Pki, PkiFiles, make_pki};

/// A Redis source over a private plain Redis with `work-queue` at `depth`.
fn redis_with(depth: usize) -> (RedisServer, String) {
    let redis = RedisServer::start();
    let items: Vec<String> = (0..depth).map(|i| format!("job {i}")).collect();
    redis::cmd("RPUSH")
        .arg("work-queue")
        .arg(&items)
        .exec(&mut redis.conn())
        .unwrap();
    let sources = format!(
        "sources:\n  - name: main\n    type: redis\n    url: {}\n    poll_interval: 100ms\n    queues:\n      - key: work-queue\n",
        redis.url
    );
    (redis, sources)
}

/// The `tls_server_config:` block (indented under `web:`).
fn tls_server_config(f: &PkiFiles, client_auth: Option<&str>) -> String {
    let mut s = format!(
        "  tls_server_config:\n    cert_file: {}\n    key_file: {}\n",
        f.server_cert.display(),
        f.server_key.display()
    );
    if let Some(kind) = client_auth {
        s += &format!(
            "    client_ca_file: {}\n    client_auth_type: {kind}\n",
            f.ca.display()
        );
    }
    s
}

/// An HTTPS client trusting only `ca`, presenting `identity` if given.
fn client(ca: &str, identity: Option<&(String, String)>) -> reqwest::Client {
    let mut b = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(ca.as_bytes()).unwrap()])
        .timeout(Duration::from_secs(10))
        .no_gzip();
    if let Some((cert, key)) = identity {
        b = b.identity(reqwest::Identity::from_pem(format!("{cert}{key}").as_bytes()).unwrap());
    }
    b.build().unwrap()
}

/// One GET; `Err` for a refused connection or handshake.
async fn get(
    c: &reqwest::Client,
    url: &str,
    auth: Option<(&str, &str)>,
) -> Result<(u16, reqwest::header::HeaderMap, String), String> {
    let mut req = c.get(url);
    if let Some((u, p)) = auth {
        req = req.basic_auth(u, Some(p));
    }
    let resp = req.send().await.map_err(|e| format!("{e:?}"))?;
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.text().await.map_err(|e| format!("{e:?}"))?;
    Ok((status, headers, body))
}

/// `https://127.0.0.1:{port}` (the server certificate names the IP).
fn https(e: &Exporter) -> String {
    format!("https://127.0.0.1:{}", e.http_port)
}

/// Waits until `/healthz` answers 200 to `c` over HTTPS.
async fn wait_healthy(e: &Exporter, c: &reqwest::Client) {
    let url = format!("{}/healthz", https(e));
    poll_until(Duration::from_secs(20), || async {
        matches!(get(c, &url, None).await, Ok((200, _, _))).then_some(())
    })
    .await
    .unwrap_or_else(|| panic!("no /healthz over HTTPS in 20 s; stderr:\n{}", e.stderr()));
}

/// A plaintext HTTP GET; `Err` when the server gives no HTTP answer.
async fn plain_get(url: &str) -> Result<u16, String> {
    let r = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
        .get(url)
        .send()
        .await
        .map_err(|e| format!("{e:?}"))?;
    Ok(r.status().as_u16())
}

/// Scrapes `/metrics` until `work-queue` has `depth`.
async fn wait_depth(c: &reqwest::Client, url: &str, auth: Option<(&str, &str)>, depth: f64) {
    wait_for(
        &format!("depth {depth} at {url}"),
        Duration::from_secs(20),
        || async {
            let (status, _, body) = get(c, url, auth).await.ok()?;
            (status == 200 && Scrape::parse(&body).depth("work-queue") == Some(depth)).then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn https_serves_only_clients_that_trust_the_ca() {
    let (_redis, sources) = redis_with(4);
    let pki = make_pki("web");
    let dir = tempfile::tempdir().unwrap();
    let f = pki.write(&dir, "web");
    let body = format!("web:\n{}{sources}", tls_server_config(&f, None));
    let e = Exporter::launch(&body, &[], &[]);
    let trusted = client(&pki.ca, None);
    wait_healthy(&e, &trusted).await;
    let metrics = format!("{}/metrics", https(&e));
    wait_depth(&trusted, &metrics, None, 4.0).await;

    // A client certificate is not asked for, but does no harm.
    let (status, _, _) = get(&client(&pki.ca, Some(&pki.client)), &metrics, None)
        .await
        .unwrap();
    assert_eq!(status, 200);
    // A client that does not trust the CA refuses the server.
    let other = make_pki("other");
    let refused = get(&client(&other.ca, None), &metrics, None).await;
    assert!(refused.is_err(), "{refused:?}");
    // Plaintext HTTP gets no answer.
    let plain = plain_get(&format!("{}/metrics", e.base)).await;
    assert!(plain.is_err(), "plaintext answered: {plain:?}");
    // The server keeps serving after the failed handshakes.
    wait_depth(&trusted, &metrics, None, 4.0).await;
    // SIGTERM ends the HTTPS listener like the plain one.
    let mut e = e;
    assert!(e.terminate().success(), "{}", e.stderr());
}

#[tokio::test]
async fn mutual_tls_refuses_clients_without_a_certificate_from_the_ca() {
    let (_redis, sources) = redis_with(2);
    let pki = make_pki("web");
    let rogue = make_pki("rogue");
    let dir = tempfile::tempdir().unwrap();
    let f = pki.write(&dir, "web");

    // Required.
    let body = format!(
        "web:\n{}{sources}",
        tls_server_config(&f, Some("RequireAndVerifyClientCert"))
    );
    let e = Exporter::launch(&body, &[], &[]);
    let with_cert = client(&pki.ca, Some(&pki.client));
    wait_healthy(&e, &with_cert).await;
    let metrics = format!("{}/metrics", https(&e));
    wait_depth(&with_cert, &metrics, None, 2.0).await;
    let none = get(&client(&pki.ca, None), &metrics, None).await;
    assert!(none.is_err(), "no client certificate: {none:?}");
    let wrong = get(&client(&pki.ca, Some(&rogue.client)), &metrics, None).await;
    assert!(wrong.is_err(), "a certificate from another CA: {wrong:?}");
    // Health endpoints are behind mTLS too: TLS is below HTTP.
    let health = get(
        &client(&pki.ca, None),
        &format!("{}/healthz", https(&e)),
        None,
    )
    .await;
    assert!(health.is_err(), "{health:?}");
    wait_depth(&with_cert, &metrics, None, 2.0).await;
    drop(e);

    // Optional, but checked when given.
    let body = format!(
        "web:\n{}{sources}",
        tls_server_config(&f, Some("VerifyClientCertIfGiven"))
    );
    let e = Exporter::launch(&body, &[], &[]);
    let without = client(&pki.ca, None);
    wait_healthy(&e, &without).await;
    let metrics = format!("{}/metrics", https(&e));
    wait_depth(&without, &metrics, None, 2.0).await;
    wait_depth(&with_cert, &metrics, None, 2.0).await;
    let wrong = get(&client(&pki.ca, Some(&rogue.client)), &metrics, None).await;
    assert!(wrong.is_err(), "a certificate from another CA: {wrong:?}");
}

/// Seconds of CPU (user + system) the process used so far.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name, which is in parentheses.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap();
    ticks / 100.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_auth_with_bcrypt_hashes_over_https() {
    let (_redis, sources) = redis_with(3);
    let pki = make_pki("web");
    let dir = tempfile::tempdir().unwrap();
    let f = pki.write(&dir, "web");
    let password = secret("web");
    let other_password = secret("alice");
    // Cost 11: ~0.1-0.2 s per check, so uncached scrapes would show.
    let hash = bcrypt::hash(&password, 11).unwrap();
    // htpasswd -B writes $2y$; same algorithm.
    let alice = bcrypt::hash(&other_password, 4)
        .unwrap()
        .replacen("$2b$", "$2y$", 1);
    let body = format!(
        "log: {{ level: debug }}\nweb:\n{}  basic_auth_users:\n    prometheus: \"{hash}\"\n    alice: \"{alice}\"\n{sources}",
        tls_server_config(&f, None)
    );
    let e = Exporter::launch(&body, &[], &[]);
    let c = client(&pki.ca, None);
    wait_healthy(&e, &c).await;
    let base = https(&e);
    let metrics = format!("{base}/metrics");
    let right = Some(("prometheus", password.as_str()));
    wait_depth(&c, &metrics, right, 3.0).await;
    wait_depth(&c, &metrics, Some(("alice", &other_password)), 3.0).await;

    // Refusals: 401 with a Basic challenge, and nothing of the exposition.
    let refusals = [
        ("/metrics", None),
        ("/metrics", Some(("prometheus", "wrong"))),
        ("/metrics", Some(("prometheus", other_password.as_str()))),
        ("/metrics", Some(("mallory", password.as_str()))),
        ("/", None),
        ("/no-such-page", None),
    ];
    for (path, auth) in refusals {
        let (status, headers, body) = get(&c, &format!("{base}{path}"), auth).await.unwrap();
        assert_eq!(status, 401, "{path} {auth:?}: {body}");
        let challenge = headers
            .get("www-authenticate")
            .unwrap_or_else(|| panic!("{path}: no WWW-Authenticate"))
            .to_str()
            .unwrap();
        assert!(challenge.starts_with("Basic realm="), "{challenge}");
        assert!(!body.contains("queue_depth"), "{body}");
    }
    let (status, _, body) = get(&c, &format!("{base}/"), right).await.unwrap();
    assert_eq!(status, 200, "{body}");
    // Probes need no password.
    for path in ["/healthz", "/readyz"] {
        let (status, _, body) = get(&c, &format!("{base}{path}"), None).await.unwrap();
        assert_eq!(status, 200, "{path}: {body}");
    }

    // 10 concurrent scrapers, 10 scrapes each, with the right password:
    // all answered, at about the CPU cost of one bcrypt check.
    let one_check = {
        let start = Instant::now();
        assert!(bcrypt::verify(&password, &hash).unwrap());
        start.elapsed().as_secs_f64()
    };
    let cpu_before = cpu_seconds(e.pid);
    let start = Instant::now();
    let scrapers: Vec<_> = (0..10)
        .map(|_| {
            let (c, url, pw) = (c.clone(), metrics.clone(), password.clone());
            tokio::spawn(async move {
                for _ in 0..10 {
                    let (status, _, _) = get(&c, &url, Some(("prometheus", &pw))).await.unwrap();
                    assert_eq!(status, 200);
                }
            })
        })
        .collect();
    for s in scrapers {
        s.await.unwrap();
    }
    let wall = start.elapsed().as_secs_f64();
    let cpu = cpu_seconds(e.pid) - cpu_before;
    eprintln!(
        "100 authenticated scrapes by 10 concurrent clients: {wall:.2} s wall, {cpu:.2} s exporter CPU; one bcrypt check (cost 11) here: {one_check:.3} s"
    );
    assert!(
        cpu < 20.0 * one_check,
        "100 scrapes cost {cpu:.2} s of CPU: verdicts are not cached (one check: {one_check:.3} s)"
    );

    // The passwords never show in the output, even at debug level.
    let out = format!("{}{}", e.stdout(), e.stderr());
    assert!(!out.contains(&password) && !out.contains(&other_password));
    assert!(!out.contains(&hash), "the hash is not logged either");
}

#[test]
fn bad_web_config_fails_check_with_one_line_naming_the_field() {
    let pki = make_pki("web");
    let dir = tempfile::tempdir().unwrap();
    let f = pki.write(&dir, "web");
    let plain_password = secret("pasted");
    let cases = [
        (
            "  tls_server_config:\n    cert_file: /nonexistent/server.pem\n    key_file: /nonexistent/server.key\n".to_string(),
            "web.tls_server_config.cert_file: cannot read /nonexistent/server.pem",
        ),
        (
            format!(
                "  tls_server_config:\n    cert_file: {}\n    key_file: {}\n",
                f.server_cert.display(),
                f.client_key.display()
            ),
            "web.tls_server_config.key_file: ",
        ),
        (
            format!(
                "{}    client_ca_file: {}\n",
                tls_server_config(&f, None),
                f.ca.display()
            ),
            "web.tls_server_config.client_ca_file: is set but client_auth_type is NoClientCert",
        ),
        (
            format!(
                "{}    client_auth_type: RequireAndVerifyClientCert\n",
                tls_server_config(&f, None)
            ),
            "web.tls_server_config.client_ca_file: is needed",
        ),
        (
            format!(
                "{}    client_ca_file: {}\n    client_auth_type: RequireAnyClientCert\n",
                tls_server_config(&f, None),
                f.ca.display()
            ),
            "web.tls_server_config.client_auth_type: unknown variant `RequireAnyClientCert`",
        ),
        (
            format!("  basic_auth_users:\n    prometheus: {plain_password}\n"),
            "web.basic_auth_users.prometheus: is not a bcrypt hash",
        ),
        // exporter-toolkit fields rustls cannot honour: refused, never ignored.
        (
            format!(
                "{}    cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, TLS_RSA_WITH_AES_128_CBC_SHA]\n",
                tls_server_config(&f, None)
            ),
            "web.tls_server_config.cipher_suites: TLS_RSA_WITH_AES_128_CBC_SHA is not supported (rustls offers only ",
        ),
        (
            format!("{}    min_version: TLS10\n", tls_server_config(&f, None)),
            "web.tls_server_config.min_version: TLS10 is not supported (rustls offers only TLS12 and TLS13)",
        ),
        (
            format!(
                "{}    min_version: TLS13\n    max_version: TLS12\n",
                tls_server_config(&f, None)
            ),
            "web.tls_server_config.max_version: TLS12 is older than min_version TLS13",
        ),
        (
            format!("{}    curve_preferences: [CurveP521]\n", tls_server_config(&f, None)),
            "web.tls_server_config.curve_preferences: CurveP521 is not supported (rustls offers only ",
        ),
        (
            "  http_server_config:\n    http2: true\n".to_string(),
            "web.http_server_config.http2: true is not supported",
        ),
        (
            "  http_server_config:\n    headers: { Content-Type: text/plain }\n".to_string(),
            "web.http_server_config.headers.Content-Type: is not a header exporter-toolkit allows",
        ),
    ];
    for (web, want) in cases {
        let config = write_file(
            &dir,
            "config.yaml",
            &format!("listen: {{ http: 127.0.0.1:0, grpc: null }}\nweb:\n{web}{SOURCE}"),
        );
        let path = config.to_str().unwrap();
        let (code, out, err) = run_bin(&["--config", path, "check"], &[]);
        assert_eq!(code, 2, "{want}: {out}{err}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(err.starts_with(&format!("{path}: {want}")), "{want}: {err}");
        assert!(
            !err.contains(&plain_password),
            "a pasted password is echoed: {err}"
        );
        let (code, _, err) = run_bin_for(&["--config", path], &[], Duration::from_secs(20));
        assert_eq!(code, 2, "serve: {err}");
        assert!(err.starts_with(&format!("{path}: {want}")), "serve: {err}");
        assert_eq!(err.lines().count(), 1, "serve, one line: {err}");
    }
}

/// A source for configs whose point is elsewhere (`check` does not connect).
const SOURCE: &str = "sources: [{ name: main, type: redis }]\n";

/// `printf '%s' PASSWORD | queue-exporter hash-password`.
fn hash_password(password: &str) -> String {
    use std::io::Write;
    let mut child = Command::new(reliability_support::BIN)
        .arg("hash-password")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(password.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let hash = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert!(hash.starts_with("$2b$10$") && hash.len() == 60, "{hash}");
    assert!(bcrypt::verify(password, &hash).unwrap());
    hash
}

/// Asks Prometheus for the value of an instant query with exactly one series.
async fn prom_value(prom: &str, query: &str) -> Option<f64> {
    let url = format!("{prom}/api/v1/query?query={}", pct(query));
    let body: serde_json::Value = reqwest::get(&url).await.ok()?.json().await.ok()?;
    let result = body["data"]["result"].as_array()?;
    if result.len() != 1 {
        return None;
    }
    result[0]["value"][1].as_str()?.parse().ok()
}

#[tokio::test]
async fn prometheus_scrapes_over_https_with_basic_auth_and_a_client_certificate() {
    let (_redis, sources) = redis_with(3);
    let pki: Pki = make_pki("web");
    let dir = tempfile::tempdir().unwrap();
    let f = pki.write(&dir, "web");
    let password = secret("prom");
    // Hashed by the binary's own `hash-password`, as docs/security.md says.
    let hash = hash_password(&password);
    let body = format!(
        "web:\n{}  basic_auth_users:\n    prometheus: \"{hash}\"\n{sources}",
        tls_server_config(&f, Some("RequireAndVerifyClientCert"))
    );
    let e = Exporter::launch(&body, &[], &[]);
    wait_healthy(&e, &client(&pki.ca, Some(&pki.client))).await;

    let password_file = write_file(&dir, "prometheus-password", &password);
    let wrong_file = write_file(&dir, "wrong-password", "not-the-password");
    let job = |name: &str, pw: &std::path::Path| {
        format!(
            r#"  - job_name: {name}
    scheme: https
    basic_auth:
      username: prometheus
      password_file: {pw}
    tls_config:
      ca_file: {ca}
      cert_file: {cert}
      key_file: {key}
      server_name: localhost
    static_configs:
      - targets: ["127.0.0.1:{port}"]
"#,
            pw = pw.display(),
            ca = f.ca.display(),
            cert = f.client_cert.display(),
            key = f.client_key.display(),
            port = e.http_port,
        )
    };
    let prometheus = support::Prometheus::start(
        dir.path(),
        &format!(
            "{}{}",
            job("qe", &password_file),
            job("qe-wrong-password", &wrong_file)
        ),
    )
    .await;
    let prom = prometheus.url.clone();
    let expectations = [
        (r#"up{job="qe"}"#, 1.0, 90),
        (r#"queue_depth{job="qe",queue="work-queue"}"#, 3.0, 30),
        (r#"up{job="qe-wrong-password"}"#, 0.0, 30),
    ];
    for (query, want, secs) in expectations {
        let seen = poll_until(Duration::from_secs(secs), || async {
            (prom_value(&prom, query).await == Some(want)).then_some(())
        })
        .await;
        if seen.is_none() {
            let targets = match reqwest::get(format!("{prom}/api/v1/targets")).await {
                Ok(r) => r.text().await.unwrap_or_default(),
                Err(e) => e.to_string(),
            };
            panic!(
                "Prometheus never saw {query} == {want} in {secs} s; its targets: {targets}\nexporter stderr:\n{}",
                e.stderr()
            );
        }
    }
    // The wrong job got nothing else.
    assert_eq!(
        prom_value(&prom, r#"queue_depth{job="qe-wrong-password"}"#).await,
        None
    );
}

/// A `web:` block in exporter-toolkit's full shape: what rustls supports
/// (`min_version`, `max_version`, `cipher_suites`, `curve_preferences`,
/// `prefer_server_cipher_suites`) and `http_server_config` (`http2: false`,
/// `headers`) loads.
#[test]
fn an_exporter_toolkit_web_config_loads() {
    let pki = make_pki("web");
    let dir = tempfile::tempdir().unwrap();
    let f = pki.write(&dir, "web");
    let web = format!(
        "web:\n{}    min_version: TLS12\n    max_version: TLS13\n    cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305, TLS_AES_128_GCM_SHA256]\n    prefer_server_cipher_suites: true\n    curve_preferences: [X25519, CurveP256, CurveP384]\n  http_server_config:\n    http2: false\n    headers:\n      Strict-Transport-Security: max-age=31536000\n      X-Frame-Options: deny\n",
        tls_server_config(&f, None)
    );
    let config = write_file(&dir, "config.yaml", &format!("{web}{SOURCE}"));
    let (code, out, err) = run_bin(&["--config", config.to_str().unwrap(), "check"], &[]);
    assert_eq!(code, 0, "{out}{err}");
}

/// `min_version: TLS13` refuses a client that speaks at most TLS 1.2, and
/// `max_version: TLS12` one that speaks only TLS 1.3.
#[tokio::test]
async fn min_and_max_version_bound_the_tls_versions_served() {
    let (_redis, sources) = redis_with(1);
    let pki = make_pki("web");
    let dir = tempfile::tempdir().unwrap();
    let f = pki.write(&dir, "web");
    for (bound, refused, refused_client) in [
        (
            "min_version: TLS13",
            "a TLS 1.2-only client",
            reqwest::Client::builder().tls_version_max(reqwest::tls::Version::TLS_1_2),
        ),
        (
            "max_version: TLS12",
            "a TLS 1.3-only client",
            reqwest::Client::builder().tls_version_min(reqwest::tls::Version::TLS_1_3),
        ),
    ] {
        let body = format!(
            "web:\n{}    {bound}\n{sources}",
            tls_server_config(&f, None)
        );
        let e = Exporter::launch(&body, &[], &[]);
        let any = client(&pki.ca, None);
        wait_healthy(&e, &any).await;
        let metrics = format!("{}/metrics", https(&e));
        wait_depth(&any, &metrics, None, 1.0).await;
        let refused_client = refused_client
            .tls_certs_only([reqwest::Certificate::from_pem(pki.ca.as_bytes()).unwrap()])
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap();
        let answer = get(&refused_client, &metrics, None).await;
        assert!(answer.is_err(), "{bound}: {refused} got {answer:?}");
    }
}

/// A TLS 1.2 handshake with the exporter on `port` whose client offers only
/// `suite` and the key exchange groups `groups`; `Ok` if the server accepts.
async fn tls12_handshake(
    ca: &str,
    port: u16,
    suite: rustls::CipherSuite,
    groups: &[rustls::NamedGroup],
) -> Result<(), String> {
    use rustls::pki_types::pem::PemObject;
    let mut provider = rustls::crypto::aws_lc_rs::default_provider();
    provider.cipher_suites.retain(|s| s.suite() == suite);
    provider.kx_groups.retain(|g| groups.contains(&g.name()));
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(ca.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(provider))
        .with_protocol_versions(&[&rustls::version::TLS12])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| e.to_string())?;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
        .connect(name, tcp)
        .await
        .map(drop)
        .map_err(|e| e.to_string())
}

/// `cipher_suites` and `curve_preferences` are applied: a TLS 1.2 client
/// offering only a suite (or a group) the config leaves out is refused,
/// one offering a listed one gets in.
#[tokio::test]
async fn cipher_suites_and_curve_preferences_are_applied() {
    use rustls::{CipherSuite, NamedGroup};
    let (_redis, sources) = redis_with(1);
    let pki = make_pki("web");
    let dir = tempfile::tempdir().unwrap();
    let f = pki.write(&dir, "web");
    let body = format!(
        "web:\n{}    cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256]\n    curve_preferences: [CurveP384]\n{sources}",
        tls_server_config(&f, None)
    );
    let e = Exporter::launch(&body, &[], &[]);
    wait_healthy(&e, &client(&pki.ca, None)).await;
    let listed = CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256;
    let other = CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384;
    let ok = tls12_handshake(&pki.ca, e.http_port, listed, &[NamedGroup::secp384r1]).await;
    assert!(ok.is_ok(), "{ok:?}");
    let suite = tls12_handshake(&pki.ca, e.http_port, other, &[NamedGroup::secp384r1]).await;
    assert!(suite.is_err(), "a suite not listed got in");
    let group = tls12_handshake(&pki.ca, e.http_port, listed, &[NamedGroup::X25519]).await;
    assert!(group.is_err(), "a group not listed got in");
}

/// `http_server_config.headers` are on every response: `/metrics`, and a
/// 401 of basic auth.
#[tokio::test]
async fn http_server_config_headers_are_on_every_response() {
    let (_redis, sources) = redis_with(2);
    let body = format!(
        "web:\n  http_server_config:\n    headers:\n      X-Frame-Options: deny\n      Strict-Transport-Security: max-age=31536000\n  basic_auth_users:\n    prometheus: \"{}\"\n{sources}",
        hash_password("secret-pw")
    );
    let e = Exporter::launch(&body, &[], &[]);
    let c = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .no_gzip()
        .build()
        .unwrap();
    let metrics = format!("http://127.0.0.1:{}/metrics", e.http_port);
    wait_depth(&c, &metrics, Some(("prometheus", "secret-pw")), 2.0).await;
    let (status, headers, _) = get(&c, &metrics, Some(("prometheus", "secret-pw")))
        .await
        .unwrap();
    assert_eq!(status, 200);
    assert_eq!(headers["x-frame-options"], "deny");
    assert_eq!(headers["strict-transport-security"], "max-age=31536000");
    let (status, headers, _) = get(&c, &metrics, None).await.unwrap();
    assert_eq!(status, 401);
    assert_eq!(headers["x-frame-options"], "deny");
}
