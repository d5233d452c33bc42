//! `/scalers` and `/api/v1/scalers` (issue 27): after real gRPC requests
//! against a real redis-server, the JSON lists each ScaledObject trigger KEDA
//! asked about, with its metadata (secrets redacted), its last answers, the
//! WaitTime model's inputs and the history; the page shows the same, and a
//! real headless Chromium (Debian's `chromium`) renders it.
mod reliability_support;
mod scaler_common;
mod support;

use std::time::Duration;

use queue_exporter::scaler::proto::{GetMetricsRequest, ScaledObjectRef};
use scaler_common::*;
use support::*;

/// A PEM-looking value KEDA would pass in `caCert`; never shown.
const CA: &str = "-----BEGIN CERTIFICATE-----MIIBsecretbytes";

/// A ScaledObject `name` in namespace `shop` with `pairs` as metadata.
fn object(name: &str, pairs: &[(&str, &str)]) -> ScaledObjectRef {
    ScaledObjectRef {
        name: name.into(),
        namespace: "shop".into(),
        scaler_metadata: meta(pairs),
    }
}

/// `GetMetrics` for `r` under the name KEDA would use (that of its spec).
async fn get_metrics(c: &mut Client, r: &ScaledObjectRef) -> Result<f64, tonic::Status> {
    let name = match c.get_metric_spec(r.clone()).await {
        Ok(s) => s.into_inner().metric_specs[0].metric_name.clone(),
        Err(_) => String::new(),
    };
    let v = c
        .get_metrics(GetMetricsRequest {
            scaled_object_ref: Some(r.clone()),
            metric_name: name,
        })
        .await?
        .into_inner();
    Ok(v.metric_values[0].metric_value_float)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_and_the_json_show_every_trigger_keda_asked_about() {
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    let at = wall() - 1.0;
    let items: Vec<String> = (0..40)
        .map(|i| format!(r#"{{"id":{i},"enqueued_at":{at}}}"#))
        .collect();
    let _: () = redis::cmd("RPUSH")
        .arg("orders")
        .arg(items)
        .query(&mut conn)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("orders:done")
        .arg(0)
        .query(&mut conn)
        .unwrap();
    let app = TestApp::start(&redis_config(
        &redis.url,
        "100ms",
        r#"
        - key: orders
          age: { end: head, field: enqueued_at, unit: seconds }
          counters: { processed: "orders:done" }
        "#,
    ))
    .await;
    let mut c = client(&app).await;
    let waiting = object(
        "order-worker",
        &[
            ("scalerAddress", "queue-exporter:9732"),
            ("caCert", CA),
            ("queue", "orders"),
            ("mode", "WaitTime"),
            ("targetWait", "20s"),
            ("processingTime", "1s"),
            ("window", "1s"),
        ],
    );
    // 40 jobs of 1 s to start within 20 s: 2 workers, once the window no
    // longer holds the jobs' arrival.
    wait_for("the WaitTime answer", Duration::from_secs(15), || {
        let mut c = c.clone();
        let waiting = waiting.clone();
        async move {
            get_metrics(&mut c, &waiting)
                .await
                .ok()
                .filter(|v| (v - 2.0).abs() < 1e-9)
        }
    })
    .await;
    c.is_active(waiting.clone()).await.unwrap();
    // A typo'd trigger: its refusal is what the page is for.
    let typo = object("typo-worker", &[("queue", "orders"), ("mode", "Lenght")]);
    assert!(get_metrics(&mut c, &typo).await.is_err());

    let (status, body, _) = http_get(&format!("{}/api/v1/scalers", app.base), &[]).await;
    assert_eq!(status, 200, "{body}");
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    let scalers = json["scalers"].as_array().unwrap();
    assert_eq!(scalers.len(), 2, "{json:#}");
    let w = scalers
        .iter()
        .find(|s| s["scaledobject"] == "order-worker")
        .unwrap();
    assert_eq!(
        (&w["namespace"], &w["queue"], &w["mode"]),
        (&"shop".into(), &"orders".into(), &"WaitTime".into())
    );
    assert_eq!(w["metadata"]["caCert"], "(redacted)", "{w:#}");
    assert_eq!(w["metadata"]["targetWait"], "20s");
    let m = &w["get_metrics"];
    assert_eq!(
        (m["value"].as_f64(), m["error"].as_str()),
        (Some(2.0), None)
    );
    assert_eq!(m["desired_replicas"].as_f64(), Some(2.0));
    assert_eq!(m["model"]["backlog"].as_f64(), Some(40.0));
    assert_eq!(m["model"]["bound"], "drain");
    assert_eq!(w["is_active"]["active"], true);
    assert!(!w["history"].as_array().unwrap().is_empty());
    let t = scalers
        .iter()
        .find(|s| s["scaledobject"] == "typo-worker")
        .unwrap();
    let error = t["get_metrics"]["error"].as_str().unwrap();
    assert!(
        error.starts_with("InvalidArgument: scalerMetadata.mode"),
        "{error}"
    );
    assert!(!body.contains("secretbytes"));

    // The page, as a browser renders it: no script, the same facts.
    let url = format!("{}/scalers", app.base);
    let (status, html, _) = http_get(&url, &[]).await;
    assert_eq!(status, 200);
    assert!(!html.contains("<script") && !html.contains("secretbytes"));
    let dom = chromium(&["--dump-dom", &url]);
    let dom = String::from_utf8_lossy(&dom);
    for needle in [
        "shop/order-worker",
        "WaitTime on orders",
        "value 2 → 2 replicas",
        "backlog 40 jobs",
        "(set by: drain)",
        "shop/typo-worker",
        "scalerMetadata.mode",
        "(redacted)",
        "<svg",
    ] {
        assert!(
            dom.contains(needle),
            "{needle:?} not in the rendered page:\n{dom}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let shot = dir.path().join("scalers.png");
    chromium(&[
        &format!("--screenshot={}", shot.display()),
        "--window-size=1000,700",
        &url,
    ]);
    let png = std::fs::read(&shot).expect("chromium wrote the screenshot");
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
    if let Ok(keep) = std::env::var("SCALERS_SCREENSHOT") {
        std::fs::copy(&shot, keep).unwrap();
    }
    app.stop().await;
}

/// Runs headless Chromium with `args`; its standard output.
fn chromium(args: &[&str]) -> Vec<u8> {
    let profile = tempfile::tempdir().unwrap();
    let out = std::process::Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            &format!("--user-data-dir={}", profile.path().display()),
        ])
        .args(args)
        .output()
        .expect("chromium runs (scripts/setup-services installs Debian's chromium)");
    assert!(
        out.status.success(),
        "chromium {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Issue 36, case 6: a refused map was stored whole (200 `IsActive` calls
/// with 1 MB maps took the exporter from 13 MB to 216 MB RSS, and
/// `/api/v1/scalers` returned 200 MB). Now what is kept of a map is
/// bounded per value and per map, the labels (ScaledObject name, `queue`
/// as written) are cut, and the store as a whole is bounded: 40 maps of
/// nearly 4 MB each (the gRPC limit), sent over the real client to the
/// real binary, leave its RSS and the JSON small.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_4_mb_maps_leave_memory_and_the_json_bounded() {
    use reliability_support::Exporter;
    let redis = RedisServer::start();
    let exp = Exporter::start(
        &format!(
            "sources:\n  - name: main\n    type: redis\n    url: {}\n    poll_interval: 1s\n    queues: [{{ key: orders }}]\n",
            redis.url
        ),
        &[],
        &[],
    )
    .await;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", exp.grpc))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut c =
        queue_exporter::scaler::proto::external_scaler_client::ExternalScalerClient::new(channel)
            .max_encoding_message_size(8 << 20)
            .max_decoding_message_size(8 << 20);
    // One small request first, so the baseline includes the gRPC stack.
    let small = object("warm-up", &[("queue", "orders"), ("mode", "Lenght")]);
    assert!(c.is_active(small).await.is_err());
    let before = exp.status().rss_kib;
    const CALLS: usize = 40;
    // 62 values of 64,000 bytes: 3.97 MB with `queue` and `connection`.
    let filler = "v".repeat(64_000);
    for i in 0..CALLS {
        let mut m: std::collections::HashMap<String, String> = (0..62)
            .map(|k| (format!("pad{k:02}"), format!("{i}{filler}")))
            .collect();
        // Half of them: a 1 MB `queue` (a label as written) instead of keys.
        if i % 2 == 0 {
            m.retain(|k, _| k.as_str() < "pad46");
            m.insert("queue".into(), format!("{i}{}", "q".repeat(1 << 20)));
        } else {
            m.insert("queue".into(), "orders".into());
        }
        m.insert("connection".into(), "redis://:hunter2@h".repeat(3000));
        let r = ScaledObjectRef {
            name: format!("so-{i}-{}", "n".repeat(100_000)),
            namespace: "shop".into(),
            scaler_metadata: m,
        };
        let e = c.is_active(r).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    }
    let after = exp.status().rss_kib;
    let (status, body, _) = http_get(&format!("{}/api/v1/scalers", exp.base), &[]).await;
    assert_eq!(status, 200);
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    let scalers = json["scalers"].as_array().unwrap();
    assert_eq!(scalers.len(), CALLS + 1);
    // About 160 MB were sent; a few KiB per trigger are kept.
    assert!(
        body.len() < CALLS * 16 * 1024,
        "/api/v1/scalers is {} bytes",
        body.len()
    );
    for s in scalers {
        assert!(s.to_string().len() < 16 * 1024, "{}", s.to_string().len());
    }
    let grown_mib = after.saturating_sub(before) / 1024;
    eprintln!(
        "{CALLS} refused maps: RSS {before} KiB → {after} KiB, /api/v1/scalers {} bytes",
        body.len()
    );
    assert!(
        grown_mib < 48,
        "RSS grew by {grown_mib} MiB ({before} KiB → {after} KiB)"
    );
    let (_, html, _) = http_get(&format!("{}/scalers", exp.base), &[]).await;
    assert!(
        html.len() < CALLS * 16 * 1024,
        "/scalers is {} bytes",
        html.len()
    );
    assert!(!body.contains("hunter2") && !html.contains("hunter2"));
}
