//! `queue-exporter plan` through the real binary: a recorded trace and a
//! real ScaledObject in, the candidates' table, the recommendation as
//! trigger YAML, JSON, gaps named and left out, bad input refused with
//! one line and exit 2.

use std::collections::HashMap;
use std::path::Path;

use queue_exporter::scaler::metadata;
use serde_json::Value;

mod support;
use support::write_file;

/// Runs `plan` with `args`: (exit code, stdout, stderr).
fn plan(args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_queue-exporter"))
        .arg("plan")
        .args(args)
        .output()
        .expect("run the exporter");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A trace of `minutes` of 15 s rows from 2026-11-30T00:00:00Z at a rate
/// rising and falling between 0.5 and 3.5 jobs/s, 1.5 s per job; rows
/// whose index is in `holes` are missing.
fn trace(minutes: usize, holes: std::ops::Range<usize>) -> String {
    let mut out = String::from("time,arrivals_per_second,service_seconds\n");
    for i in 0..minutes * 4 {
        if holes.contains(&i) {
            continue;
        }
        let rate = 2.0 + 1.5 * (i as f64 / 20.0).sin();
        out.push_str(&format!("{},{rate:.3},1.5\n", 1_764_460_800 + 15 * i));
    }
    out
}

/// A ScaledObject with a QueueLength trigger of `value`, after another
/// document (a Deployment), as `kubectl get -o yaml` of both would give.
fn scaled_object(value: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: worker\n---\n\
         apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata:\n  name: worker\nspec:\n  \
         scaleTargetRef:\n    name: worker\n  pollingInterval: 15\n  cooldownPeriod: 120\n  \
         minReplicaCount: 1\n  maxReplicaCount: 40\n  advanced:\n    horizontalPodAutoscalerConfig:\n      \
         behavior:\n        scaleDown:\n          stabilizationWindowSeconds: 60\n        scaleUp:\n          \
         policies:\n            - type: Pods\n              value: 2\n              periodSeconds: 30\n  \
         triggers:\n    - type: external\n      metadata:\n        scalerAddress: queue-exporter:9732\n        \
         queue: jobs\n        mode: QueueLength\n        value: \"{value}\"\n"
    )
}

/// The files of a run: a trace and a ScaledObject.
fn files(trace_text: &str, so: &str) -> (tempfile::TempDir, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let t = write_file(&dir, "trace.csv", trace_text);
    let s = write_file(&dir, "so.yaml", so);
    let s = s.to_str().unwrap().to_owned();
    (dir, t.to_str().unwrap().to_owned(), s)
}

fn json_run(trace_text: &str) -> Value {
    json_run_of(trace_text, &scaled_object("10"))
}

/// `plan --json` over `trace_text` and the ScaledObject `so`, at a
/// targetWait of 30 s.
fn json_run_of(trace_text: &str, so: &str) -> Value {
    let (_dir, t, s) = files(trace_text, so);
    let (code, out, err) = plan(&[
        "--trace",
        &t,
        "--scaledobject",
        &s,
        "--target-wait",
        "30s",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).unwrap()
}

/// The metadata of the trigger `plan` recommends, from its YAML.
fn recommended_metadata(out: &str) -> HashMap<String, String> {
    let yaml = out.split("recommended: ").nth(1).expect("a recommendation");
    let yaml = &yaml[yaml.find('\n').unwrap() + 1..];
    let doc: serde_norway::Value = serde_norway::from_str(yaml).unwrap();
    serde_norway::from_value(doc["triggers"][0]["metadata"].clone()).unwrap()
}

#[test]
fn the_table_has_the_scaledobjects_trigger_waittime_and_a_queuelength_sweep_and_recommends_one_as_yaml()
 {
    let (out, err) = table_with(&["--price-per-replica-hour", "0.05"]);
    // The progress bar is drawn only on a terminal: nothing here.
    assert_eq!(err, "");
    assert!(out.contains("worker (QueueLength 10)"), "{out}");
    assert!(out.contains("WaitTime 30s"), "{out}");
    assert!(out.contains("QueueLength 1.25"), "{out}");
    assert!(
        out.contains("worker-hours") && out.contains("cost"),
        "{out}"
    );
    let meta = recommended_metadata(&out);
    // The user's own keys are kept, and the exporter's parser takes it.
    assert_eq!(meta["scalerAddress"], "queue-exporter:9732");
    assert_eq!(meta["queue"], "jobs");
    metadata::parse(&meta).unwrap();
}

#[test]
fn a_library_queues_trigger_is_replayed_and_its_preset_and_state_kept_in_the_recommendation() {
    let so = scaled_object("10").replace(
        "queue: jobs\n",
        "queue: emails\n        preset: bullmq\n        state: waiting\n",
    );
    let (_dir, t, s) = files(&trace(60, 0..0), &so);
    let (code, out, err) = plan(&["--trace", &t, "--scaledobject", &s, "--target-wait", "30s"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("worker (QueueLength 10)"), "{out}");
    let meta = recommended_metadata(&out);
    assert_eq!(meta["preset"], "bullmq");
    assert_eq!(meta["queue"], "emails");
    // What the scaler would be given: its parser, knowing the libraries.
    let libraries = queue_exporter::sources::redis::catalogue();
    metadata::parse_with(&meta, &libraries).unwrap();
    // So would every candidate's, pasted instead.
    let v = json_run_of(&trace(60, 0..0), &so);
    for c in v["candidates"].as_array().unwrap() {
        let meta: HashMap<String, String> = serde_json::from_value(c["metadata"].clone()).unwrap();
        assert_eq!(meta["preset"], "bullmq", "{}", c["name"]);
        if let Err(e) = metadata::parse_with(&meta, &libraries) {
            panic!("{}: {e}", c["name"]);
        }
    }
}

#[test]
fn the_recommendation_is_the_cheapest_candidate_meeting_the_percentile() {
    let v = json_run(&trace(60, 0..0));
    let candidates = v["candidates"].as_array().unwrap();
    let name = v["recommended"].as_str().expect("one meets 99 %");
    let on_time: Vec<&Value> = candidates
        .iter()
        .filter(|c| c["within_pct"].as_f64().unwrap() >= 99.0)
        .collect();
    let cheapest = on_time
        .iter()
        .min_by(|a, b| {
            a["worker_hours"]
                .as_f64()
                .unwrap()
                .total_cmp(&b["worker_hours"].as_f64().unwrap())
        })
        .unwrap();
    assert_eq!(cheapest["name"], name);
    // Every candidate scored the same jobs.
    let jobs: Vec<u64> = candidates
        .iter()
        .map(|c| c["jobs"].as_u64().unwrap())
        .collect();
    assert!(jobs.iter().all(|&j| j == jobs[0] && j > 5_000), "{jobs:?}");
}

#[test]
fn the_scaledobjects_settings_and_behavior_are_the_replayed_clusters_with_kubernetes_defaults_for_the_rest()
 {
    let v = json_run(&trace(30, 0..0));
    let c = &v["cluster"];
    assert_eq!(c["polling_interval"], 15.0);
    assert_eq!(c["cooldown_period"], 120.0);
    assert_eq!(c["min_replicas"], 1);
    assert_eq!(c["max_replicas"], 40);
    assert_eq!(c["scale_down_stabilization"], 60.0);
    assert_eq!(
        c["scale_up_policies"],
        serde_json::json!([["Pods", 2, 30.0]])
    );
    // Not set: Kubernetes' default scale-down policy, KEDA's HPA sync.
    assert_eq!(
        c["scale_down_policies"],
        serde_json::json!([["Percent", 100, 15.0]])
    );
    assert_eq!(c["hpa_sync"], 15.0);
    assert_eq!(c["pod_start"], 30.0);
    let peak = v["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["peak_replicas"].as_u64().unwrap())
        .max();
    assert!(peak <= Some(40), "{peak:?}");
}

#[test]
fn a_ten_minute_gap_is_named_with_its_range_and_left_out_of_the_scores() {
    // Rows 80..120: 00:20:00 to 00:30:00 are missing.
    let whole = json_run(&trace(60, 0..0));
    let holed = json_run(&trace(60, 80..120));
    assert_eq!(
        holed["gaps"],
        serde_json::json!([{"from": "2025-11-30T00:20:00Z", "to": "2025-11-30T00:30:00Z", "seconds": 600.0}])
    );
    assert!(holed["left_out_seconds"].as_f64().unwrap() >= 600.0);
    // The scores count the jobs of the rows outside the lead-in (KEDA's
    // poll 15 s + a sync 15 s + a pod start 30 s: rows 0..4) and outside
    // the gap and the 60 s after it (rows 80..124): none is made up for
    // the gap. Poisson draws: within 5 % of the rows' rates.
    let jobs = |v: &Value| v["candidates"][0]["jobs"].as_f64().unwrap();
    let expected = |left_out: std::ops::Range<usize>| -> f64 {
        (4..240)
            .filter(|i| !left_out.contains(i))
            .map(|i| 15.0 * (2.0 + 1.5 * (i as f64 / 20.0).sin()))
            .sum()
    };
    for (v, out) in [(&whole, 0..0), (&holed, 80..124)] {
        let want = expected(out);
        assert!(
            (jobs(v) - want).abs() < 0.05 * want,
            "{} jobs scored, {want:.0} expected",
            jobs(v)
        );
    }
    let (_dir, t, s) = files(&trace(60, 80..120), &scaled_object("10"));
    let (_, out, _) = plan(&["--trace", &t, "--scaledobject", &s, "--target-wait", "30s"]);
    assert!(
        out.contains(
            "gap: no traffic recorded from 2025-11-30T00:20:00Z to 2025-11-30T00:30:00Z (600 s)"
        ),
        "{out}"
    );
}

/// `plan` refuses with exit 2 and one line on stderr containing `want`.
fn refused(args: &[&str], want: &str) {
    let (code, out, err) = plan(args);
    assert_eq!(code, 2, "{args:?}: {out}{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(want), "{err}");
}

#[test]
fn a_trace_with_a_bad_row_is_refused_naming_the_file_and_the_line() {
    let mut text = trace(5, 0..0);
    text.push_str("1764461200,lots,1.5\n");
    let (_dir, t, s) = files(&text, &scaled_object("10"));
    let line = text.lines().count();
    refused(
        &["--trace", &t, "--scaledobject", &s],
        &format!("{t}: line {line}: arrivals_per_second: \"lots\" is not a number"),
    );
}

#[test]
fn a_file_that_is_not_a_scaledobject_is_refused_naming_it() {
    let (_dir, t, s) = files(&trace(5, 0..0), "apiVersion: apps/v1\nkind: Deployment\n");
    refused(
        &["--trace", &t, "--scaledobject", &s, "--target-wait", "30s"],
        &format!("{s}: kind: no document of kind ScaledObject"),
    );
}

#[test]
fn a_bad_behavior_policy_is_refused_naming_its_field() {
    let so = scaled_object("10").replace("type: Pods", "type: Replicas");
    let (_dir, t, s) = files(&trace(5, 0..0), &so);
    refused(
        &["--trace", &t, "--scaledobject", &s, "--target-wait", "30s"],
        "spec.advanced.horizontalPodAutoscalerConfig.behavior.scaleUp.policies[0].type: \"Replicas\" is not Pods or Percent",
    );
}

#[test]
fn without_a_target_wait_from_the_flag_or_the_trigger_it_is_refused() {
    let (_dir, t, s) = files(&trace(5, 0..0), &scaled_object("10"));
    refused(&["--trace", &t, "--scaledobject", &s], "give --target-wait");
}

#[test]
fn a_missing_trace_file_is_refused_naming_it() {
    let missing = Path::new("/nonexistent/trace.csv").to_str().unwrap();
    refused(
        &["--trace", missing, "--target-wait", "30s"],
        "/nonexistent/trace.csv: cannot read",
    );
}

/// `scaled_object("10")` with KEDA's `fallback` of `replicas` after one
/// failed request, as `behavior` says.
fn with_fallback(replicas: u32, behavior: &str) -> String {
    scaled_object("10").replace(
        "  advanced:\n",
        &format!(
            "  fallback:\n    failureThreshold: 1\n    replicas: {replicas}\n    behavior: {behavior}\n  advanced:\n"
        ),
    )
}

#[test]
fn in_a_gap_the_scaledobjects_fallback_replicas_are_replayed_after_its_failure_threshold() {
    // The exporter publishes nothing for 10 minutes: the scaler answers
    // UNAVAILABLE. At its next poll KEDA's scale executor, hearing an
    // error from its only trigger, sets the workload to fallback.replicas
    // (12, as scale_scaledobjects.go's doFallbackScaling), and after one
    // failed request its metrics adapter tells the HPA 12 replicas' worth,
    // which the HPA's tolerance keeps; so the trigger's own replay peaks
    // at 12, where its QueueLength 10 alone asks for fewer.
    let holed = trace(60, 80..120);
    let fell_back = json_run_of(&holed, &with_fallback(12, "static"));
    let own = &fell_back["candidates"][0];
    assert_eq!(own["name"], "worker (QueueLength 10)");
    assert!(own["fallback_syncs"].as_u64().unwrap() >= 30, "{own}");
    assert_eq!(own["peak_replicas"], 12, "{own}");
    assert_eq!(
        fell_back["cluster"]["fallback"],
        serde_json::json!({"failure_threshold": 1, "replicas": 12, "behavior": "Static"})
    );
    // Without fallback the replicas are held through the gap.
    let held = json_run_of(&holed, &scaled_object("10"));
    let own = &held["candidates"][0];
    assert_eq!(own["fallback_syncs"], 0);
    assert!(own["peak_replicas"].as_u64().unwrap() < 11, "{own}");
    // No gap, no fallback.
    let whole = json_run_of(&trace(60, 0..0), &with_fallback(12, "static"));
    assert_eq!(whole["candidates"][0]["fallback_syncs"], 0);
    // The table says which candidates fell back.
    let (_dir, t, s) = files(&holed, &with_fallback(12, "currentReplicasIfHigher"));
    let (code, out, err) = plan(&["--trace", &t, "--scaledobject", &s, "--target-wait", "30s"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("worker (QueueLength 10): KEDA's fallback answered for the scaler at "),
        "{out}"
    );
}

#[test]
fn a_fallback_behavior_keda_does_not_have_is_refused_naming_its_field() {
    let (_dir, t, s) = files(&trace(5, 0..0), &with_fallback(3, "always"));
    refused(
        &["--trace", &t, "--scaledobject", &s, "--target-wait", "30s"],
        &format!("{s}: spec.fallback.behavior: \"always\" is not static, currentReplicas"),
    );
}

/// `plan --plot NAME` over an hour with a 10-minute gap (minutes 20 to
/// 30) and a QueueLength 10 ScaledObject: the dir holding the plot, its
/// path and plan's stdout.
fn plotted(name: &str) -> (tempfile::TempDir, std::path::PathBuf, String) {
    let (dir, t, s) = files(&trace(60, 80..120), &scaled_object("10"));
    let path = dir.path().join(name);
    let (code, out, err) = plan(&[
        "--trace",
        &t,
        "--scaledobject",
        &s,
        "--target-wait",
        "30s",
        "--plot",
        path.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    (dir, path, out)
}

#[test]
fn plot_draws_the_scaledobjects_trigger_and_the_recommended_one_over_time_into_an_svg() {
    let (_dir, svg, out) = plotted("plan.svg");
    let recommended = out
        .split("recommended: ")
        .nth(1)
        .and_then(|r| r.split(" (the cheapest").next())
        .expect("a recommendation");
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<svg"), "{}", &text[..100]);
    for title in [
        "replicas",
        "jobs waiting",
        "longest wait of the jobs arriving in each HPA sync, seconds",
        "targetWait",
        "worker (QueueLength 10)",
    ] {
        assert!(text.contains(title), "no {title:?} in the plot");
    }
    assert!(
        text.contains(&format!("{recommended} (recommended)")),
        "the recommended {recommended:?} is not in the plot"
    );
    // The gap is shaded in each panel.
    assert_eq!(text.matches("fill=\"#C8C8C8\"").count(), 3, "{text}");
    // Per trigger, a line in each panel (drawn 2 wide; the legend's are 1
    // wide), the wait's broken in two at the gap, where no job arrives and
    // no wait is drawn (never a 0).
    let triggers = if recommended == "worker (QueueLength 10)" {
        1
    } else {
        2
    };
    let lines = text
        .split("<polyline")
        .skip(1)
        .filter(|rest| {
            rest.split('>')
                .next()
                .unwrap_or("")
                .contains("stroke-width=\"2\"")
        })
        .count();
    assert_eq!(lines, 4 * triggers, "{text}");
}

#[test]
fn plot_refuses_a_path_that_is_neither_svg_nor_png_before_replaying() {
    let (_dir, t, s) = files(&trace(5, 0..0), &scaled_object("10"));
    refused(
        &[
            "--trace",
            &t,
            "--scaledobject",
            &s,
            "--target-wait",
            "30s",
            "--plot",
            "/tmp/plan.jpg",
        ],
        "--plot /tmp/plan.jpg: give a path ending in .svg or .png",
    );
}

#[test]
fn plot_draws_a_png_with_its_text_from_the_embedded_font() {
    let (_dir, path, _) = plotted("plan.PNG");
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&path).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut pixels).unwrap();
    assert_eq!((info.width, info.height), (1200, 900));
    assert_eq!(info.color_type, png::ColorType::Rgb);
    let at = |x: usize, y: usize| {
        let i = (y * 1200 + x) * 3;
        (pixels[i], pixels[i + 1], pixels[i + 2])
    };
    // A white page with lines on it.
    let white = (0..900)
        .flat_map(|y| (0..1200).map(move |x| (x, y)))
        .filter(|&(x, y)| at(x, y) == (255, 255, 255))
        .count();
    assert!(white > 1200 * 900 / 2, "{white} white pixels");
    // The first panel's caption ("replicas", 18 px, centred at the top)
    // is drawn: dark, anti-aliased glyph pixels in its band, not a blank.
    let dark_in_caption = (0..40)
        .flat_map(|y| (500..700).map(move |x| (x, y)))
        .filter(|&(x, y)| {
            let (r, g, b) = at(x, y);
            u32::from(r) + u32::from(g) + u32::from(b) < 200
        })
        .count();
    assert!(
        dark_in_caption > 50,
        "{dark_in_caption} dark caption pixels"
    );
    // The gap (minutes 20 to 30 of 60) is shaded grey down all three
    // panels: about a sixth of the plot's columns are mostly that grey.
    let shade = (215, 215, 215);
    let shaded = (0..1200)
        .filter(|&x| (0..900).filter(|&y| at(x, y) == shade).count() > 150)
        .count();
    assert!((150..230).contains(&shaded), "{shaded} shaded columns");
}

/// `scaled_object(value)` whose trigger has `metricType: kind`.
fn with_metric_type(so: &str, kind: &str) -> String {
    so.replace(
        "    - type: external\n",
        &format!("    - type: external\n      metricType: {kind}\n"),
    )
}

#[test]
fn a_value_trigger_is_replayed_with_the_hpas_value_calculator_and_the_others_as_average_value() {
    let traffic = trace(60, 0..0);
    let average = json_run_of(&traffic, &scaled_object("10"));
    let value = json_run_of(&traffic, &with_metric_type(&scaled_object("10"), "Value"));
    let (own_average, own_value) = (&average["candidates"][0], &value["candidates"][0]);
    assert_eq!(own_average["metric_type"], "AverageValue");
    assert_eq!(own_value["metric_type"], "Value");
    // The same metadata, another calculator: the HPA multiplies the ready
    // pods by backlog / 10 instead of setting backlog / 10 pods.
    assert_ne!(
        (&own_value["worker_hours"], &own_value["peak_replicas"]),
        (&own_average["worker_hours"], &own_average["peak_replicas"]),
        "{own_value} {own_average}"
    );
    // Every other candidate is replayed as AverageValue, as before.
    let others = |run: &Value| run["candidates"].as_array().unwrap()[1..].to_vec();
    assert_eq!(others(&value), others(&average));
    assert!(
        others(&value)
            .iter()
            .all(|c| c["metric_type"] == "AverageValue")
    );
    let notes = value["notes"].as_array().unwrap();
    assert!(
        notes.iter().any(|n| n
            .as_str()
            .unwrap()
            .starts_with("worker (QueueLength 10) has metricType Value")),
        "{notes:?}"
    );
}

#[test]
fn kedas_fallback_does_not_apply_to_a_value_trigger() {
    // KEDA's isFallbackEnabled: AverageValue only. In the 10-minute gap the
    // Value trigger's HPA keeps its replicas instead of moving to 12.
    let holed = trace(60, 80..120);
    let so = with_metric_type(&with_fallback(12, "static"), "Value");
    let run = json_run_of(&holed, &so);
    assert_eq!(
        run["candidates"][0]["fallback_syncs"], 0,
        "{}",
        run["candidates"][0]
    );
    // The AverageValue candidates still fall back.
    assert!(
        run["candidates"].as_array().unwrap()[1..]
            .iter()
            .any(|c| c["fallback_syncs"].as_u64().unwrap() > 0)
    );
}

#[test]
fn a_recommendation_of_the_value_trigger_itself_says_metric_type_value() {
    let (_dir, t, s) = files(
        &trace(60, 0..0),
        &with_metric_type(&scaled_object("10"), "Value"),
    );
    let (code, out, err) = plan(&["--trace", &t, "--scaledobject", &s, "--target-wait", "30s"]);
    assert_eq!(code, 0, "{err}");
    let yaml = out.split("recommended: ").nth(1).expect("a recommendation");
    let own = yaml.starts_with("worker (QueueLength 10)");
    // Whichever is recommended, its YAML says metricType only for Value.
    assert_eq!(yaml.contains("metricType: Value"), own, "{yaml}");
}

#[test]
fn a_metric_type_an_external_trigger_cannot_have_is_refused_naming_its_field() {
    let so = with_metric_type(&scaled_object("10"), "Utilization");
    let (_dir, t, s) = files(&trace(5, 0..0), &so);
    refused(
        &["--trace", &t, "--scaledobject", &s, "--target-wait", "30s"],
        &format!(
            "{s}: spec.triggers[0].metricType: \"Utilization\": an external trigger's metricType is AverageValue (the default) or Value"
        ),
    );
}

/// One hour of 15 s rows as recorded in the cluster and as a loop `scale`
/// times faster records it (times `scale` times closer, rates `scale`
/// times higher, jobs `scale` times shorter). Rates are eighths and the job
/// 1.875 s, so that stretching the fast one back gives the same numbers to
/// the bit, and the same jobs are drawn.
fn paired_traces(scale: f64) -> (String, String) {
    let header = "time,arrivals_per_second,service_seconds\n";
    let (mut real, mut fast) = (String::from(header), String::from(header));
    for i in 0..240 {
        let rate = ((2.0 + 1.5 * (i as f64 / 20.0).sin()) * 8.0).round() / 8.0;
        real.push_str(&format!("{},{rate},1.875\n", 1_764_460_800 + 15 * i));
        let t = 1_764_460_800.0 + 15.0 * i as f64 / scale;
        fast.push_str(&format!("{t},{},{}\n", rate * scale, 1.875 / scale));
    }
    (real, fast)
}

#[test]
fn a_time_compressed_recording_replays_as_the_cluster_it_stands_for_with_time_scale() {
    // The same traffic recorded at 1:1 and 15 times faster: with
    // --time-scale 15 the fast one replays as the real one. QueueLength
    // reads no duration, so its candidates are the same to the figure (the
    // exporter's history, thinned by its own seconds, is 15 times shorter
    // there, and QueueLength reads none of it); WaitTime's durations are
    // written in the recording's seconds.
    let (real_text, fast_text) = paired_traces(15.0);
    let (_d1, t1, _) = files(&real_text, &scaled_object("10"));
    let (_d2, t2, _) = files(&fast_text, &scaled_object("10"));
    let run = |t: &str, extra: &[&str]| {
        let mut args = vec!["--trace", t, "--target-wait", "30s", "--json"];
        args.extend(extra);
        let (code, out, err) = plan(&args);
        assert_eq!(code, 0, "{err}");
        serde_json::from_str::<Value>(&out).unwrap()
    };
    let real = run(&t1, &[]);
    let compressed = run(&t2, &["--time-scale", "15"]);
    assert_eq!(real["jobs"], compressed["jobs"]);
    let queue_length = |v: &Value| -> Vec<Value> {
        v["candidates"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["name"].as_str().unwrap().starts_with("QueueLength"))
            .cloned()
            .collect()
    };
    let (a, b) = (queue_length(&real), queue_length(&compressed));
    assert!(a.len() >= 5, "{real}");
    assert_eq!(a, b);
    // WaitTime's targetWait and processingTime are the recording's seconds.
    let wait = &compressed["candidates"][0];
    assert_eq!(wait["name"], "WaitTime 30s", "{wait}");
    assert_eq!(wait["metadata"]["targetWait"], "2s", "{wait}");
    assert_eq!(wait["metadata"]["processingTime"], "125ms", "{wait}");
    assert!(
        compressed["notes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_str().unwrap().contains("--time-scale 15")),
        "{compressed}"
    );
}

#[test]
fn a_time_scale_below_one_is_refused_naming_the_flag() {
    let (_d, t, _) = files(&trace(10, 0..0), &scaled_object("10"));
    refused(
        &["--trace", &t, "--target-wait", "30s", "--time-scale", "0.5"],
        "--time-scale: 0.5 is not from 1 to 1000",
    );
}

#[test]
fn a_waittime_trigger_without_processing_time_measures_the_replayed_queues_own_service_time() {
    // On the user's queue the exporter measures the service time from the
    // finished jobs; so does the replayed queue. With every job taking
    // the same 1.5 s, that is the trace's mean, and the trigger replays as
    // the WaitTime candidate given it as processingTime.
    let so = scaled_object("10").replace(
        "mode: QueueLength\n        value: \"10\"",
        "mode: WaitTime\n        targetWait: 30s",
    );
    assert!(so.contains("targetWait: 30s"), "{so}");
    let v = json_run_of(&trace(60, 0..0), &so);
    let own = &v["candidates"][0];
    let wait = &v["candidates"][1];
    assert_eq!(wait["name"], "WaitTime 30s", "{v}");
    assert!(own["metadata"].get("processingTime").is_none(), "{own}");
    assert_eq!(wait["metadata"]["processingTime"], "1500ms", "{wait}");
    for key in ["within_pct", "p99_wait", "peak_replicas"] {
        assert_eq!(own[key], wait[key], "{key}: {own} {wait}");
    }
    // Measured, the replayed queue is read as a library's queue (its
    // history keeps the jobs' flow as a preset's does), so a scale-down
    // can come a sync apart: worker time within 1 %.
    let hours = |c: &Value| c["worker_hours"].as_f64().unwrap();
    assert!(
        (hours(own) / hours(wait) - 1.0).abs() < 0.01,
        "{own} {wait}"
    );
    assert!(own["within_pct"].as_f64().unwrap() > 95.0, "{own}");
}

/// The ScaledObject of `scaled_object(value)` asking for BullMQ queue
/// `emails` with job states `states`.
fn with_states(value: &str, states: &str) -> String {
    scaled_object(value).replace(
        "queue: jobs\n",
        &format!("queue: emails\n        preset: bullmq\n        state: {states}\n"),
    )
}

#[test]
fn a_trigger_counting_active_jobs_is_replayed_with_the_jobs_the_workers_are_on() {
    let waiting = json_run_of(&trace(60, 0..0), &with_states("2", "waiting"));
    let both = json_run_of(&trace(60, 0..0), &with_states("2", "waiting,active"));
    let (w, b) = (&waiting["candidates"][0], &both["candidates"][0]);
    // Counting the jobs the workers are on too, the HPA keeps the pods
    // running them: waiting alone reads 0 whenever the workers keep up,
    // so pods go, the backlog comes back and jobs wait for new pods to
    // start. Here that sawtooth costs both worker time and waits.
    let number = |c: &Value, k: &str| c[k].as_f64().unwrap();
    assert!(number(b, "p99_wait") < number(w, "p99_wait"), "{w}\n{b}");
    assert!(
        number(b, "within_pct") > number(w, "within_pct"),
        "{w}\n{b}"
    );
    assert!(
        number(b, "worker_hours") < number(w, "worker_hours"),
        "{w}\n{b}"
    );
    // Every threshold of the sweep counts them as the trigger does.
    for c in both["candidates"].as_array().unwrap() {
        if c["metadata"]["mode"] == "QueueLength" {
            assert_eq!(c["metadata"]["state"], "waiting,active", "{c}");
        }
    }
}

#[test]
fn a_trigger_counting_states_the_trace_does_not_hold_is_refused_naming_the_state() {
    let (_dir, t, s) = files(&trace(60, 0..0), &with_states("10", "waiting,delayed"));
    let (code, _, err) = plan(&["--trace", &t, "--scaledobject", &s, "--target-wait", "30s"]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("delayed jobs are not in the recorded traffic"),
        "{err}"
    );
}

#[test]
fn a_trigger_counting_states_without_a_preset_is_refused_asking_for_one() {
    let so = with_states("10", "waiting,active").replace("        preset: bullmq\n", "");
    let (_dir, t, s) = files(&trace(60, 0..0), &so);
    let (code, _, err) = plan(&["--trace", &t, "--scaledobject", &s, "--target-wait", "30s"]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("give --preset"), "{err}");
}

/// `plan` over `trace(60)` and `scaled_object("10")` at a targetWait of
/// 30 s with `extra` flags: its stdout and stderr, exit 0 asserted.
fn table_with(extra: &[&str]) -> (String, String) {
    let (_dir, t, s) = files(&trace(60, 0..0), &scaled_object("10"));
    let mut args = vec!["--trace", &t, "--scaledobject", &s, "--target-wait", "30s"];
    args.extend_from_slice(extra);
    let (code, out, err) = plan(&args);
    assert_eq!(code, 0, "{err}");
    (out, err)
}

/// The same as JSON.
fn json_with(extra: &[&str]) -> Value {
    let mut args = extra.to_vec();
    args.push("--json");
    serde_json::from_str(&table_with(&args).0).unwrap()
}

#[test]
fn several_draws_show_each_candidates_worst_share_on_time_and_mean_worker_time() {
    let v = json_with(&["--seed", "5", "--draws", "3"]);
    assert_eq!(
        (v["seed"].as_u64(), v["draws"].as_u64()),
        (Some(5), Some(3))
    );
    let number = |c: &Value, k: &str| c[k].as_f64().unwrap();
    for c in v["candidates"].as_array().unwrap() {
        let draws = c["draws"].as_array().unwrap();
        let seeds: Vec<u64> = draws.iter().map(|d| d["seed"].as_u64().unwrap()).collect();
        assert_eq!(seeds, [5, 6, 7], "{c}");
        let lowest = draws
            .iter()
            .map(|d| number(d, "within_pct"))
            .fold(100.0, f64::min);
        let mean = draws.iter().map(|d| number(d, "worker_hours")).sum::<f64>() / 3.0;
        assert_eq!(number(c, "within_pct"), lowest, "{c}");
        assert!((number(c, "worker_hours") - mean).abs() < 1e-9, "{c}");
    }
    // Recommended only if every draw is on time.
    let name = v["recommended"].as_str().expect("a recommendation");
    let rec = v["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap();
    for d in rec["draws"].as_array().unwrap() {
        assert!(number(d, "within_pct") >= 99.0, "{rec}");
    }
    // Each draw is the one run with its seed alone.
    let alone = json_with(&["--seed", "6"]);
    let own = |v: &Value| v["candidates"][0].clone();
    assert_eq!(own(&alone)["within_pct"], own(&v)["draws"][1]["within_pct"]);
    assert_eq!(
        own(&alone)["worker_hours"],
        own(&v)["draws"][1]["worker_hours"]
    );
    assert_eq!(alone["draws"], 1);
}

#[test]
fn the_table_of_several_draws_says_how_they_are_shown_and_gives_each_candidates_spread() {
    let (out, _) = table_with(&["--draws", "2"]);
    assert!(
        out.contains("2 draws of the trace's jobs (seeds 47 to 48)"),
        "{out}"
    );
    assert!(out.contains("spread: on time, hours"), "{out}");
    let row = out
        .lines()
        .find(|l| l.starts_with("worker (QueueLength 10)"))
        .unwrap();
    assert!(row.contains("%, "), "{row}");
    assert!(out.contains("within targetWait in every draw"), "{out}");
}

#[test]
fn a_draw_count_out_of_range_is_refused_naming_the_flag() {
    let (_dir, t, s) = files(&trace(60, 0..0), &scaled_object("10"));
    for n in ["0", "51"] {
        let (code, _, err) = plan(&["--trace", &t, "--scaledobject", &s, "--draws", n]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("--draws"), "{err}");
    }
}

#[test]
fn a_scaledobjects_other_triggers_are_named_as_not_replayed() {
    let so = scaled_object("10").replace(
        "  triggers:\n",
        "  triggers:\n    - type: cpu\n      metricType: Utilization\n      metadata:\n        value: \"60\"\n",
    );
    let v = json_run_of(&trace(60, 0..0), &so);
    assert_eq!(v["candidates"][0]["name"], "worker (QueueLength 10)");
    let notes = v["notes"].to_string();
    assert!(
        notes.contains("other triggers (spec.triggers[0] (cpu)) are not replayed"),
        "{notes}"
    );
}
