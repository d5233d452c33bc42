//! Every example in the docs runs as written (issue 45, item 2), and the
//! counts and names the docs state come from the files they describe:
//!
//! - every YAML block of README.md, `docs/*.md`, `deploy/**/*.md` and
//!   `dashboards/*.md` (and the config the README writes with a heredoc) is
//!   classified: a config or a config fragment (`queues:` alone is put in a
//!   minimal Redis source) goes through the loader and `check`'s file checks
//!   (`app::preflight`), with every `*_file` given a real file of its kind;
//!   a KEDA object or trigger fragment has every external trigger's metadata
//!   parsed by the scaler's own parser; a block the test cannot classify
//!   fails, unless the doc says what it is. A block that is deliberately
//!   wrong says so in a marker on the line before it,
//!   `<!-- docs-test: fails with MESSAGE -->`, and must then fail with that
//!   message; a block that is not queue-exporter's says so with
//!   `<!-- docs-test: not queue-exporter's: WHAT -->`;
//! - every external trigger in `deploy/` parses too;
//! - the number of alerts the docs state is the number in the rule file,
//!   and the alert table lists each of them;
//! - each list of the libraries zero config recognises names exactly
//!   those (`recognised_libraries`), the "every preset" block every preset,
//!   and the per-queue-state table of `docs/keda.md` every preset once;
//! - the `prefix` and `counters` rows of `docs/configuration.md` name the
//!   libraries the loader treats that way.

mod support;
use support::files_under;

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use queue_exporter::config::{Config, LoadOptions};
use queue_exporter::sources::redis::library_names as preset_names;
use regex::Regex;
use serde::Deserialize;
use serde_json::{Value, json};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn rel(path: &Path) -> String {
    path.strip_prefix(root())
        .unwrap_or(path)
        .display()
        .to_string()
}

/// The Markdown files whose examples are checked.
fn doc_files() -> Vec<PathBuf> {
    let r = root();
    let mut files = vec![r.join("README.md")];
    files.extend(files_under(&r.join("docs"), &[".md"]));
    files.extend(files_under(&r.join("deploy"), &[".md"]));
    files.extend(files_under(&r.join("dashboards"), &[".md"]));
    files
}

// ------------------------------------------------------------ blocks

/// One fenced code block of a Markdown file.
struct Block {
    /// `file:line` of its opening fence.
    at: String,
    /// Its info string (`yaml`, `sh`, or empty).
    lang: String,
    /// Its lines, the fence's indentation removed.
    text: String,
    /// The `<!-- docs-test: … -->` marker on the line before it, if any.
    marker: Option<String>,
}

/// The fenced code blocks of `text` (fences may be indented, in lists).
fn blocks(file: &str, text: &str) -> Vec<Block> {
    let marker = Regex::new(r"^\s*<!--\s*docs-test:\s*(.*?)\s*-->\s*$").unwrap();
    let mut out = Vec::new();
    let mut open: Option<(usize, Block)> = None;
    let mut previous = "";
    for (n, line) in text.lines().enumerate() {
        let indent = line.len() - line.trim_start().len();
        let fence = line.trim_start().starts_with("```");
        if fence && let Some((_, block)) = open.take() {
            out.push(block);
            previous = line;
            continue;
        }
        match &mut open {
            Some((fence_indent, block)) => {
                let cut = (*fence_indent).min(line.len() - line.trim_start().len());
                block.text.push_str(&line[cut..]);
                block.text.push('\n');
            }
            None if fence => {
                open = Some((
                    indent,
                    Block {
                        at: format!("{file}:{}", n + 1),
                        lang: line.trim_start()[3..].trim().to_string(),
                        text: String::new(),
                        marker: marker.captures(previous).map(|c| c[1].to_string()),
                    },
                ));
            }
            None => {}
        }
        if !line.trim().is_empty() {
            previous = line;
        }
    }
    out
}

/// Every YAML block of the docs, and every config an `sh` block writes
/// with a heredoc (`cat > qe.yaml <<'EOF'`).
fn yaml_blocks() -> Vec<Block> {
    let heredoc = Regex::new(r"(?s)\.ya?ml <<'?EOF'?\n(.*?)\nEOF\n").unwrap();
    let mut out = Vec::new();
    for path in doc_files() {
        for block in blocks(&rel(&path), &read(&path)) {
            if block.lang == "yaml" || block.lang == "yml" {
                out.push(block);
            } else if block.lang == "sh" {
                for c in heredoc.captures_iter(&block.text) {
                    out.push(Block {
                        at: format!("{} (heredoc)", block.at),
                        lang: "yaml".into(),
                        text: format!("{}\n", &c[1]),
                        marker: block.marker.clone(),
                    });
                }
            }
        }
    }
    out
}

/// Every YAML document of a block, as JSON.
fn documents(text: &str, at: &str) -> Vec<Value> {
    serde_norway::Deserializer::from_str(text)
        .map(|d| Value::deserialize(d).unwrap_or_else(|e| panic!("{at}: not YAML: {e}")))
        .filter(|v| !v.is_null())
        .collect()
}

// ------------------------------------------------------------ configs

/// The files a config's `*_file` fields are pointed at: real ones of the
/// right kind, so `check`'s file checks run as they would for the user.
struct Files {
    _dir: tempfile::TempDir,
    ca: String,
    cert: String,
    key: String,
    password: String,
}

impl Files {
    fn new() -> Files {
        let dir = tempfile::tempdir().unwrap();
        let pki = support::make_pki("docs");
        let write =
            |name: &str, text: &str| support::write_file(&dir, name, text).display().to_string();
        Files {
            ca: write("ca.pem", &pki.ca),
            cert: write("cert.pem", &pki.server.0),
            key: write("key.pem", &pki.server.1),
            password: write("password", "example-password\n"),
            _dir: dir,
        }
    }

    /// The file a field named `field` (`ca_file`, `client_ca_file`,
    /// `cert_file`, `key_file`, `password_file`) is given.
    fn for_field(&self, field: &str) -> &str {
        match field {
            "ca_file" | "client_ca_file" => &self.ca,
            "cert_file" => &self.cert,
            "key_file" => &self.key,
            _ => &self.password,
        }
    }

    /// `v` with every `*_file` field pointing at a real file.
    fn fill(&self, v: &mut Value) {
        match v {
            Value::Object(m) => {
                for (k, x) in m.iter_mut() {
                    if k.ends_with("_file") && x.is_string() {
                        *x = Value::String(self.for_field(k).to_string());
                    } else {
                        self.fill(x);
                    }
                }
            }
            Value::Array(a) => a.iter_mut().for_each(|x| self.fill(x)),
            _ => {}
        }
    }
}

/// The top-level fields of a config, from the loader's own answer to an
/// unknown one.
fn config_fields() -> BTreeSet<String> {
    let err = load_and_check(&json!({"bogus": 1}), &Files::new()).unwrap_err();
    let (_, expected) = err
        .split_once("expected one of ")
        .unwrap_or_else(|| panic!("not an unknown-field error: {err}"));
    let names: BTreeSet<String> = Regex::new(r"`([^`]+)`")
        .unwrap()
        .captures_iter(expected)
        .map(|c| c[1].to_string())
        .collect();
    assert!(names.contains("sources"), "{err}");
    names
}

/// What `queue-exporter check --config FILE` checks, in process: the
/// loader (no environment), then the file checks.
fn load_and_check(config: &Value, files: &Files) -> Result<(), String> {
    let mut config = config.clone();
    files.fill(&mut config);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.yaml");
    std::fs::write(&file, serde_json::to_string_pretty(&config).unwrap()).unwrap();
    let loaded = Config::load_with_env(
        &LoadOptions {
            file: Some(file),
            ..LoadOptions::default()
        },
        Vec::new(),
    )
    .map_err(|e| e.to_string())?;
    queue_exporter::app::preflight(&loaded).map_err(|e| e.to_string())?;
    Ok(())
}

// ------------------------------------------------------------ triggers

/// The external triggers of one document: a ScaledObject or ScaledJob, a
/// `triggers:` list, or one trigger's `metadata:`.
fn triggers(doc: &Value) -> Option<Vec<Value>> {
    let kind = doc["kind"].as_str().unwrap_or_default();
    let list = if matches!(kind, "ScaledObject" | "ScaledJob") {
        doc["spec"]["triggers"].as_array()?.clone()
    } else if let Some(list) = doc
        .get("triggers")
        .filter(|_| doc.as_object().is_some_and(|m| m.len() == 1))
    {
        list.as_array()?.clone()
    } else if doc.as_object().is_some_and(|m| m.len() == 1) && doc["metadata"].is_object() {
        vec![json!({"type": "external", "metadata": doc["metadata"]})]
    } else {
        return None;
    };
    Some(
        list.into_iter()
            .filter(|t| matches!(t["type"].as_str(), Some("external" | "external-push")))
            .collect(),
    )
}

/// The scaler's answer to a trigger's metadata, as KEDA passes it (a map
/// of strings).
fn parse_trigger(trigger: &Value) -> Result<(), String> {
    let meta: HashMap<String, String> = serde_json::from_value(trigger["metadata"].clone())
        .map_err(|e| format!("metadata is not a map of strings (KEDA's CRD wants one): {e}"))?;
    queue_exporter::scaler::metadata::parse_with(
        &meta,
        &queue_exporter::sources::redis::catalogue(),
    )
    .map(|_| ())
    .map_err(|e| format!("{e:?}"))
}

// ------------------------------------------------------------ the test

/// What a block turned out to be.
#[derive(Debug, Default)]
struct Tally {
    configs: usize,
    fragments: usize,
    triggers: usize,
    keda_objects: usize,
    failing_as_marked: usize,
    foreign: usize,
}

/// Checks one YAML document of a block: `Ok(true)` when it is a config
/// (or fragment) that passed, `Err` with what is wrong.
fn check_document(
    doc: &Value,
    fields: &BTreeSet<String>,
    files: &Files,
    tally: &mut Tally,
) -> Result<(), String> {
    let api = doc["apiVersion"].as_str().unwrap_or_default();
    if let Some(list) = triggers(doc) {
        for t in &list {
            parse_trigger(t)?;
            tally.triggers += 1;
        }
        if api.starts_with("keda.sh/") {
            tally.keda_objects += 1;
        }
        return Ok(());
    }
    if api.starts_with("keda.sh/") {
        // A TriggerAuthentication: nothing of the scaler's to parse.
        tally.keda_objects += 1;
        return Ok(());
    }
    if api.starts_with("kustomize.config.k8s.io/") {
        // Built by tests/deploy_manifests.rs (the_overlay_of_your_own_in_kubernetes_md_builds).
        tally.foreign += 1;
        return Ok(());
    }
    let Some(map) = doc.as_object() else {
        return Err("neither a config nor a KEDA object".into());
    };
    if map.len() == 1 && map.contains_key("queues") {
        let config =
            json!({"sources": [{"name": "main", "type": "redis", "queues": doc["queues"]}]});
        load_and_check(&config, files)?;
        tally.fragments += 1;
        return Ok(());
    }
    if !map.is_empty() && map.keys().all(|k| fields.contains(k)) {
        if map.contains_key("sources") {
            load_and_check(doc, files)?;
            tally.configs += 1;
        } else {
            // The top-level sections alone (`listen:`, `scaler:`, `web:`):
            // beside a minimal source, since a config needs one.
            let mut config = doc.clone();
            config["sources"] =
                json!([{"name": "main", "type": "redis", "queues": [{"key": "work"}]}]);
            load_and_check(&config, files)?;
            tally.fragments += 1;
        }
        return Ok(());
    }
    Err(format!(
        "unclassified: top-level keys {:?} are neither a config's nor a KEDA object's \
         (say what it is with <!-- docs-test: not queue-exporter's: … -->)",
        map.keys().collect::<Vec<_>>()
    ))
}

#[test]
fn every_yaml_block_of_the_docs_loads_or_fails_as_its_marker_says() {
    let files = Files::new();
    let fields = config_fields();
    let mut tally = Tally::default();
    let mut wrong = Vec::new();
    for block in yaml_blocks() {
        let marker = block.marker.as_deref().unwrap_or_default();
        if let Some(what) = marker.strip_prefix("not queue-exporter's: ") {
            assert!(!what.trim().is_empty(), "{}: say what it is", block.at);
            tally.foreign += 1;
            continue;
        }
        let expect_failure = marker.strip_prefix("fails with ");
        if !marker.is_empty() && expect_failure.is_none() {
            wrong.push(format!("{}: unknown marker {marker:?}", block.at));
            continue;
        }
        let docs = documents(&block.text, &block.at);
        if docs.is_empty() {
            wrong.push(format!("{}: an empty YAML block", block.at));
        }
        let results: Vec<Result<(), String>> = docs
            .iter()
            .map(|d| check_document(d, &fields, &files, &mut tally))
            .collect();
        match expect_failure {
            None => {
                for r in results {
                    if let Err(e) = r {
                        wrong.push(format!("{}: {e}\n{}", block.at, block.text));
                    }
                }
            }
            Some(want) => {
                let errors: Vec<&String> =
                    results.iter().filter_map(|r| r.as_ref().err()).collect();
                if errors.iter().any(|e| e.contains(want)) {
                    tally.failing_as_marked += 1;
                } else {
                    wrong.push(format!(
                        "{}: marked to fail with {want:?}, but it {}",
                        block.at,
                        match errors.as_slice() {
                            [] => "passed".to_string(),
                            e => format!("failed with {e:?}"),
                        }
                    ));
                }
            }
        }
    }
    eprintln!("what the docs' YAML blocks are: {tally:?}");
    assert!(
        wrong.is_empty(),
        "doc examples that do not run as written:\n\n{}",
        wrong.join("\n\n")
    );
    // The classification saw what the docs hold (so a broken extraction
    // cannot pass by finding nothing).
    assert!(tally.configs >= 8, "{tally:?}");
    assert!(tally.fragments >= 7, "{tally:?}");
    assert!(tally.triggers >= 10, "{tally:?}");
    assert!(tally.keda_objects >= 4, "{tally:?}");
    assert!(tally.failing_as_marked >= 1, "{tally:?}");
}

#[test]
fn a_marked_block_must_fail_and_an_unmarked_one_must_pass() {
    // The extraction reads the marker on the line before the fence, past
    // blank lines, and the fence's indentation.
    let text = "<!-- docs-test: fails with sources[0].queues[0]: preset: unknown preset -->\n\n  ```yaml\n  queues:\n    - preset: nope\n  ```\n```yaml\nqueues: [{ key: work }]\n```\n";
    let found = blocks("t.md", text);
    assert_eq!(found.len(), 2);
    assert_eq!(
        found[0].marker.as_deref(),
        Some("fails with sources[0].queues[0]: preset: unknown preset")
    );
    assert_eq!(found[0].text, "queues:\n  - preset: nope\n");
    assert_eq!(found[1].marker, None);
    let files = Files::new();
    let fields = config_fields();
    let mut tally = Tally::default();
    let bad = &documents(&found[0].text, "t.md")[0];
    let err = check_document(bad, &fields, &files, &mut tally).unwrap_err();
    assert!(
        err.contains("sources[0].queues[0]: preset: unknown preset"),
        "{err}"
    );
    let good = &documents(&found[1].text, "t.md")[0];
    check_document(good, &fields, &files, &mut tally).unwrap();
    // A `*_file` is given a real file: an unreadable TLS file is what
    // `check` refuses, so a placeholder path passes only through `fill`.
    let tls = json!({
        "scaler": {"tls": {"cert_file": "...", "key_file": "..."}},
        "sources": [{"name": "main", "type": "redis", "queues": [{"key": "work"}]}],
    });
    load_and_check(&tls, &files).unwrap();
    let mut unfilled = tls.clone();
    unfilled["scaler"]["tls"]["cert_file"] = json!("/nonexistent/cert.pem");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.yaml");
    std::fs::write(&file, unfilled.to_string()).unwrap();
    let loaded = Config::load_with_env(
        &LoadOptions {
            file: Some(file),
            ..LoadOptions::default()
        },
        Vec::new(),
    )
    .unwrap();
    assert!(queue_exporter::app::preflight(&loaded).is_err());
}

#[test]
fn every_external_trigger_in_deploy_parses() {
    let mut found = 0;
    let mut wrong = Vec::new();
    for file in files_under(&root().join("deploy"), &[".yaml", ".yml"]) {
        for doc in documents(&read(&file), &rel(&file)) {
            for t in triggers(&doc).unwrap_or_default() {
                found += 1;
                if let Err(e) = parse_trigger(&t) {
                    wrong.push(format!("{}: {}: {e}", rel(&file), doc["metadata"]["name"]));
                }
            }
        }
    }
    assert!(found >= 6, "only {found} external triggers under deploy/");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

// ------------------------------------------------------------ counts

/// `one` … `twenty` and digits as a number.
fn number(word: &str) -> Option<usize> {
    const WORDS: [&str; 21] = [
        "zero",
        "one",
        "two",
        "three",
        "four",
        "five",
        "six",
        "seven",
        "eight",
        "nine",
        "ten",
        "eleven",
        "twelve",
        "thirteen",
        "fourteen",
        "fifteen",
        "sixteen",
        "seventeen",
        "eighteen",
        "nineteen",
        "twenty",
    ];
    let w = word.to_lowercase();
    WORDS
        .iter()
        .position(|x| *x == w)
        .or_else(|| w.parse().ok())
}

/// The alert names of the rule file.
fn alert_names() -> Vec<String> {
    let path = root().join("deploy/kubernetes/base/prometheusrule.yaml");
    let mut names = Vec::new();
    for doc in documents(&read(&path), &rel(&path)) {
        for group in doc["spec"]["groups"].as_array().into_iter().flatten() {
            for rule in group["rules"].as_array().into_iter().flatten() {
                if let Some(n) = rule["alert"].as_str() {
                    names.push(n.to_string());
                }
            }
        }
    }
    assert!(names.len() >= 10, "alerts in {}: {names:?}", rel(&path));
    names
}

#[test]
fn the_alert_count_and_table_are_the_rule_files() {
    let names = alert_names();
    let count = Regex::new(r"(?i)\b([a-z]+|\d+) alerts\b").unwrap();
    let mut wrong = Vec::new();
    let mut stated = 0;
    for path in doc_files() {
        for (n, line) in read(&path).lines().enumerate() {
            for c in count.captures_iter(line) {
                if let Some(k) = number(&c[1]) {
                    stated += 1;
                    if k != names.len() {
                        wrong.push(format!(
                            "{}:{}: says {} alerts; the rule file has {}",
                            rel(&path),
                            n + 1,
                            &c[1],
                            names.len()
                        ));
                    }
                }
            }
        }
    }
    assert!(stated >= 1, "no doc states how many alerts there are");
    let page = read(&root().join("docs/dashboards-alerts.md"));
    let rows: BTreeSet<String> = Regex::new(r"(?m)^\| `([A-Za-z]+)` \|")
        .unwrap()
        .captures_iter(&page)
        .map(|c| c[1].to_string())
        .filter(|n| n.starts_with(char::is_uppercase))
        .collect();
    let want: BTreeSet<String> = names.iter().cloned().collect();
    if rows != want {
        wrong.push(format!(
            "docs/dashboards-alerts.md's table lists {rows:?}, the rule file {want:?}"
        ));
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The paragraph (lines up to a blank one) of `text` holding `needle`.
fn paragraph<'a>(text: &'a str, needle: &str) -> &'a str {
    let at = text
        .find(needle)
        .unwrap_or_else(|| panic!("no {needle:?} in the page"));
    let start = text[..at].rfind("\n\n").map_or(0, |i| i + 2);
    let end = text[at..].find("\n\n").map_or(text.len(), |i| at + i);
    &text[start..end]
}

/// Which of `names` `text` mentions (case-insensitively, as words).
fn mentioned<'a>(text: &str, names: &[&'a str]) -> BTreeSet<&'a str> {
    names
        .iter()
        .copied()
        .filter(|n| {
            Regex::new(&format!(
                r"(?i)(^|[^a-z0-9-]){}([^a-z0-9-]|$)",
                regex::escape(n)
            ))
            .unwrap()
            .is_match(text)
        })
        .collect()
}

#[test]
fn the_lists_of_zero_configs_libraries_name_exactly_the_recognised_ones() {
    let recognised = queue_exporter::sources::redis::recognised_libraries();
    // Every library's name as users write it: the recognised ones' titles
    // and the config names of the rest.
    let mut every: Vec<&str> = recognised.clone();
    every.extend(
        preset_names()
            .into_iter()
            .filter(|n| !recognised.iter().any(|t| t.eq_ignore_ascii_case(n))),
    );
    let want: BTreeSet<&str> = recognised.iter().copied().collect();
    let lists = [
        ("docs/configuration.md", "with zero config (the queues of"),
        (
            "README.md",
            "A Redis source with no `queues:` recognises the queues of",
        ),
    ];
    let mut wrong = Vec::new();
    for (file, needle) in lists {
        let text = read(&root().join(file));
        let got = mentioned(paragraph(&text, needle), &every);
        if got != want {
            wrong.push(format!(
                "{file}: the list at {needle:?} names {got:?}; zero config recognises {want:?}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_every_preset_block_and_the_state_table_name_every_preset() {
    let names = preset_names();
    let presets = read(&root().join("docs/presets.md"));
    let block = blocks("docs/presets.md", &presets)
        .into_iter()
        .find(|b| b.lang == "yaml")
        .expect("the first YAML block of docs/presets.md: every preset");
    let written: BTreeSet<String> = Regex::new(r"(?m)^\s*- preset: ([a-z-]+)")
        .unwrap()
        .captures_iter(&block.text)
        .map(|c| c[1].to_string())
        .collect();
    let every: BTreeSet<String> = names.iter().map(|n| n.to_string()).collect();
    assert_eq!(written, every, "{}: the block of every preset", block.at);

    // The lists of every library: presets.md's title, the README's table row.
    let readme = read(&root().join("README.md"));
    let lists = [
        (
            "docs/presets.md",
            presets.lines().next().unwrap_or_default(),
        ),
        (
            "README.md",
            readme
                .lines()
                .find(|l| l.contains("](docs/presets.md)") && l.starts_with("| watch"))
                .expect("the README's row for presets"),
        ),
    ];
    for (file, line) in lists {
        let line = line.replace("priority zsets", "priority-zset");
        let named: BTreeSet<String> = mentioned(&line, &names)
            .into_iter()
            .map(String::from)
            .collect();
        assert_eq!(named, every, "{file}: {line}");
    }

    let keda = read(&root().join("docs/keda.md"));
    let table = paragraph(&keda, "| preset | states per queue");
    let mut seen: HashMap<String, usize> = HashMap::new();
    let code = Regex::new(r"`([a-z-]+)`").unwrap();
    for row in table.lines().skip(2) {
        let first = row
            .trim_start_matches('|')
            .split('|')
            .next()
            .unwrap_or_default();
        for c in code.captures_iter(first) {
            *seen.entry(c[1].to_string()).or_default() += 1;
        }
    }
    let once: BTreeSet<String> = seen
        .iter()
        .filter(|(_, n)| **n == 1)
        .map(|(k, _)| k.clone())
        .collect();
    assert_eq!(
        once, every,
        "docs/keda.md's per-queue-state table lists each preset once: {seen:?}"
    );
}

/// Whether `{preset: name, <extra>}` loads (a `name:` added where the
/// library requires one).
fn preset_loads(name: &str, extra: Value) -> Result<(), String> {
    let files = Files::new();
    let entry = |with_name: bool| {
        let mut e = json!({"preset": name});
        if with_name {
            e["name"] = json!("q");
        }
        for (k, v) in extra.as_object().unwrap() {
            e[k] = v.clone();
        }
        json!({"sources": [{"name": "main", "type": "redis", "queues": [e]}]})
    };
    match load_and_check(&entry(false), &files) {
        Err(e) if e.contains("name: required") => load_and_check(&entry(true), &files),
        other => other,
    }
}

/// The `| \`field\` |` row of the preset options table of configuration.md.
fn preset_row(field: &str) -> String {
    let page = read(&root().join("docs/configuration.md"));
    let start = page
        .find("## Which options does a preset entry take?")
        .expect("the preset options section");
    page[start..]
        .lines()
        .find(|l| l.starts_with(&format!("| `{field}`")))
        .unwrap_or_else(|| panic!("no row {field} in the preset options table"))
        .to_string()
}

#[test]
fn the_prefix_and_counters_rows_name_the_libraries_the_loader_treats_so() {
    let names = preset_names();
    // Libraries whose entry refuses `prefix:`.
    let no_prefix: BTreeSet<&str> = names
        .iter()
        .copied()
        .filter(|n| {
            preset_loads(n, json!({"prefix": "p"}))
                .is_err_and(|e| e.contains("prefix: not an option"))
        })
        .collect();
    let row = preset_row("prefix");
    let said = row
        .split("Not for ")
        .nth(1)
        .unwrap_or_else(|| panic!("the prefix row says which libraries take none: {row}"));
    let said = said.split(['.', '|']).next().unwrap_or_default();
    let said = said.split(", whose").next().unwrap_or(said);
    assert_eq!(mentioned(said, &names), no_prefix, "the prefix row: {row}");

    // Libraries whose entry takes a counter key without `{queue}`.
    let one_queue: BTreeSet<&str> = names
        .iter()
        .copied()
        .filter(|n| preset_loads(n, json!({"counters": {"processed": "done"}})).is_ok())
        .collect();
    assert!(one_queue.contains("rediswq"), "{one_queue:?}");
    let row = preset_row("counters.processed");
    let said = row
        .split("(all but ")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .unwrap_or_else(|| panic!("the counters row says which presets are one queue: {row}"));
    assert_eq!(
        mentioned(said, &names),
        one_queue,
        "the counters row: {row}"
    );
}
