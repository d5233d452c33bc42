//! The docs stay true to themselves and to the code. No network, no backend:
//!
//! - every relative link and `#anchor` in README.md, ARCHITECTURE.md,
//!   BENCHMARKS.md, `docs/*.md`, `deploy/**/*.md` and `dashboards/*.md`
//!   resolves (anchors by GitHub's slug rules, or an `<a id>`);
//! - every command and flag of `queue-exporter --help` is in the command
//!   table of `docs/configuration.md`;
//! - every config field the loader accepts is in its table of
//!   `docs/configuration.md` (the fields come from the loader's own
//!   `unknown field …, expected …` answer, section by section);
//! - every metric family the exposition encodes is in the table of
//!   `docs/metrics.md` (the families come from encoding a snapshot with every
//!   value known, plus the process registry; a family named in the
//!   exposition's source but missing from that encoding fails too, so the
//!   snapshot cannot fall behind the code);
//! - every KEDA metadata key, mode and operation the scaler knows is in
//!   `docs/keda.md`;
//! - every alert's `runbook_url` points at its heading in `docs/runbook.md`;
//! - the README's configs load and its ScaledObject's metadata parses.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use queue_exporter::config::{Config, LoadOptions};
use queue_exporter::exposition::{Exposition, Format};
use queue_exporter::hub::HubBuilder;
use queue_exporter::scaler::metadata::{ACCEPTED_KEYS, KEDA_KEYS, Mode, Operation};
use queue_exporter::snapshot::{
    AgeHistogram, AnyName, Counters, GroupSample, JobState, JobTotals, PresetFacts, QueueSample,
    QueueType, ServiceSource, ServiceTime, Snapshot, SourceKind,
};
use queue_exporter::telemetry::{GrpcLabels, MethodLabels, Telemetry};
use regex::Regex;
use serde::Deserialize;
use serde_json::Value;

mod support;
use support::files_under;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every Markdown file whose links are checked.
fn markdown_files() -> Vec<PathBuf> {
    let r = root();
    let mut files = vec![
        r.join("README.md"),
        r.join("ARCHITECTURE.md"),
        r.join("BENCHMARKS.md"),
    ];
    for dir in ["docs", "deploy", "dashboards"] {
        files.extend(files_under(&r.join(dir), &[".md"]));
    }
    files
}

// ------------------------------------------------------------ markdown

/// One ATX heading.
struct Heading {
    level: usize,
    slug: String,
    /// Index of its line in [`Doc::lines`].
    line: usize,
}

/// A Markdown file as far as links are concerned.
struct Doc {
    /// Every line, with fenced code blocks blanked out.
    lines: Vec<String>,
    headings: Vec<Heading>,
    /// Heading slugs and explicit `<a id>`/`<a name>` anchors.
    anchors: BTreeSet<String>,
}

/// GitHub's heading anchor: the heading's text (links reduced to their
/// text, HTML tags dropped), lowercased, keeping letters, digits, `-`, `_`
/// and spaces, each space turned into `-`.
fn slug(heading: &str) -> String {
    let link = Regex::new(r"!?\[([^\]]*)\]\([^)]*\)").unwrap();
    let tag = Regex::new(r"<[^>]*>").unwrap();
    let text = link.replace_all(heading, "$1");
    let text = tag.replace_all(&text, "");
    text.trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn parse_doc(text: &str) -> Doc {
    let explicit = Regex::new(r#"<a\s+(?:id|name)="([^"]+)""#).unwrap();
    let mut lines = Vec::new();
    let mut headings = Vec::new();
    let mut anchors = BTreeSet::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut fence: Option<String> = None;
    for line in text.lines() {
        let t = line.trim_start();
        if let Some(f) = &fence {
            if t.starts_with(f.as_str()) {
                fence = None;
            }
            lines.push(String::new());
            continue;
        }
        if t.starts_with("```") || t.starts_with("~~~") {
            fence = Some(t[..3].to_string());
            lines.push(String::new());
            continue;
        }
        let level = line.chars().take_while(|c| *c == '#').count();
        if (1..=6).contains(&level) && line[level..].starts_with(' ') {
            let text = line[level..].trim().trim_end_matches('#').trim();
            let base = slug(text);
            // GitHub numbers repeated slugs: `x`, `x-1`, `x-2`…
            let n = seen.entry(base.clone()).or_insert(0);
            let s = if *n == 0 {
                base.clone()
            } else {
                format!("{base}-{n}")
            };
            *n += 1;
            anchors.insert(s.clone());
            headings.push(Heading {
                level,
                slug: s,
                line: lines.len(),
            });
        }
        for c in explicit.captures_iter(line) {
            anchors.insert(c[1].to_string());
        }
        lines.push(line.to_string());
    }
    Doc {
        lines,
        headings,
        anchors,
    }
}

/// The lines of the section under the heading `slug` (up to the next
/// heading of the same or a higher level).
fn section<'a>(doc: &'a Doc, slug: &str, what: &str) -> &'a [String] {
    let i = doc
        .headings
        .iter()
        .position(|h| h.slug == slug)
        .unwrap_or_else(|| panic!("{what}: no heading with anchor #{slug}"));
    let h = &doc.headings[i];
    let end = doc.headings[i + 1..]
        .iter()
        .find(|n| n.level <= h.level)
        .map_or(doc.lines.len(), |n| n.line);
    &doc.lines[h.line..end]
}

/// The backticked names in the first cell of each table row of `lines`.
fn first_cell_names(lines: &[String]) -> BTreeSet<String> {
    let code = Regex::new(r"`([^`]+)`").unwrap();
    lines
        .iter()
        .filter_map(|l| l.strip_prefix('|'))
        .filter_map(|l| l.split('|').next())
        .flat_map(|cell| {
            code.captures_iter(cell)
                .map(|c| c[1].to_string())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Every link target of a document: Markdown links and images, and HTML
/// `href`/`src`, outside code blocks and code spans.
fn link_targets(doc: &Doc) -> Vec<String> {
    let code_span = Regex::new(r"`[^`]*`").unwrap();
    let md = Regex::new(r#"\]\(\s*<?([^()\s<>]+)>?(?:\s+"[^"]*")?\s*\)"#).unwrap();
    let html = Regex::new(r#"(?:href|src)="([^"]+)""#).unwrap();
    let text: String = doc
        .lines
        .iter()
        .map(|l| code_span.replace_all(l, "code").into_owned() + "\n")
        .collect();
    md.captures_iter(&text)
        .chain(html.captures_iter(&text))
        .map(|c| c[1].to_string())
        .collect()
}

fn is_external(target: &str) -> bool {
    Regex::new(r"^[A-Za-z][A-Za-z0-9+.-]*:")
        .unwrap()
        .is_match(target)
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let r = root();
    let mut docs: HashMap<PathBuf, Doc> = HashMap::new();
    let mut load = |p: &Path| -> BTreeSet<String> {
        docs.entry(p.to_path_buf())
            .or_insert_with(|| parse_doc(&read(p)))
            .anchors
            .clone()
    };
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in markdown_files() {
        let doc = parse_doc(&read(&file));
        let rel = file.strip_prefix(&r).unwrap().display().to_string();
        for target in link_targets(&doc) {
            if is_external(&target) {
                continue;
            }
            checked += 1;
            let (path, anchor) = match target.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (target.as_str(), None),
            };
            let dest = if path.is_empty() {
                file.clone()
            } else {
                file.parent().unwrap().join(path)
            };
            if !dest.exists() {
                broken.push(format!("{rel}: {target}: no such file"));
                continue;
            }
            if let Some(anchor) = anchor {
                if dest.extension().and_then(|e| e.to_str()) != Some("md") {
                    broken.push(format!(
                        "{rel}: {target}: an anchor into a non-Markdown file"
                    ));
                } else if !load(&dest).contains(anchor) {
                    broken.push(format!("{rel}: {target}: no heading or <a id> #{anchor}"));
                }
            }
        }
    }
    assert!(checked > 100, "only {checked} relative links found");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn slugs_follow_githubs_rules() {
    assert_eq!(
        slug("How do I point it at Redis? (`type: redis`)"),
        "how-do-i-point-it-at-redis-type-redis"
    );
    assert_eq!(
        slug("#### `QueueBacklogGrowing`"[5..].trim()),
        "queuebackloggrowing"
    );
    assert_eq!(
        slug("1–2. Steady polls and Redis CPU"),
        "12-steady-polls-and-redis-cpu"
    );
    assert_eq!(
        slug("A drained queue reads 0; a typo is `NOT_FOUND`"),
        "a-drained-queue-reads-0-a-typo-is-not_found"
    );
    assert_eq!(slug("See [the runbook](runbook.md)"), "see-the-runbook");
    let doc = parse_doc("# A\n## A\n```\n# not a heading\n```\n## A\n");
    let anchors: Vec<_> = doc.anchors.iter().cloned().collect();
    assert_eq!(anchors, ["a", "a-1", "a-2"]);
}

// ------------------------------------------------------------ config

/// The fields the loader accepts where `yaml` puts an unknown one, read
/// from its error (`unknown field `bogus`, expected one of `a`, `b`…`).
fn accepted_fields(yaml: &str) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.yaml");
    std::fs::write(&file, yaml).unwrap();
    let err = Config::load(&LoadOptions {
        file: Some(file),
        ..LoadOptions::default()
    })
    .err()
    .unwrap_or_else(|| panic!("{yaml}: loaded, but it has an unknown field"))
    .to_string();
    let (_, expected) = err
        .split_once("unknown field `bogus`, expected ")
        .unwrap_or_else(|| panic!("{yaml}: not an unknown-field error: {err}"));
    let names: Vec<String> = Regex::new(r"`([^`]+)`")
        .unwrap()
        .captures_iter(expected)
        .map(|c| c[1].to_string())
        .collect();
    assert!(!names.is_empty(), "{yaml}: no field list in {err}");
    names
}

#[test]
fn every_config_field_is_in_its_table_of_configuration_md() {
    // (a config with an unknown field in one section, the heading of the
    // page's table for it, the prefix its rows write before the field)
    let sections: &[(&str, &str, &str)] = &[
        ("bogus: 1", "what-goes-at-the-top-of-the-file", ""),
        (
            "listen: {bogus: 1}",
            "what-goes-at-the-top-of-the-file",
            "listen.",
        ),
        (
            "log: {bogus: 1}",
            "what-goes-at-the-top-of-the-file",
            "log.",
        ),
        (
            "scaler: {bogus: 1}",
            "what-goes-at-the-top-of-the-file",
            "scaler.",
        ),
        (
            "scaler: {tls: {bogus: 1}}",
            "what-goes-at-the-top-of-the-file",
            "scaler.tls.",
        ),
        (
            "web: {bogus: 1}",
            "what-goes-at-the-top-of-the-file",
            "web.",
        ),
        (
            "web: {tls_server_config: {bogus: 1}}",
            "what-goes-at-the-top-of-the-file",
            "web.tls_server_config.",
        ),
        (
            "web: {http_server_config: {bogus: 1}}",
            "what-goes-at-the-top-of-the-file",
            "web.http_server_config.",
        ),
        (
            "sources: [{name: a, type: redis, bogus: 1}]",
            "how-do-i-point-it-at-redis-type-redis",
            "",
        ),
        (
            "sources: [{name: a, type: redis, tls: {bogus: 1}}]",
            "how-do-i-point-it-at-redis-type-redis",
            "tls.",
        ),
        (
            "sources: [{name: a, type: redis, queues: [{key: k, bogus: 1}]}]",
            "what-can-a-redis-queues-entry-say",
            "",
        ),
        (
            "sources: [{name: a, type: redis, queues: [{key: k, age: {bogus: 1}}]}]",
            "what-can-a-redis-queues-entry-say",
            "age.",
        ),
        (
            "sources: [{name: a, type: redis, queues: [{key: k, counters: {bogus: 1}}]}]",
            "what-can-a-redis-queues-entry-say",
            "counters.",
        ),
        (
            "sources: [{name: a, type: redis, queues: [{preset: rq, bogus: 1}]}]",
            "which-options-does-a-preset-entry-take",
            "",
        ),
        (
            "sources: [{name: a, type: redis, queues: [{preset: rediswq, name: w, counters: {bogus: 1}}]}]",
            "which-options-does-a-preset-entry-take",
            "counters.",
        ),
        (
            "sources: [{name: a, type: rabbitmq, bogus: 1}]",
            "how-do-i-point-it-at-rabbitmq-type-rabbitmq",
            "",
        ),
        (
            "sources: [{name: a, type: rabbitmq, tls: {bogus: 1}}]",
            "how-do-i-point-it-at-rabbitmq-type-rabbitmq",
            "tls.",
        ),
    ];
    let page = parse_doc(&read(&root().join("docs/configuration.md")));
    let mut missing = Vec::new();
    for (yaml, heading, prefix) in sections {
        let rows = first_cell_names(section(&page, heading, "docs/configuration.md"));
        // A preset entry's words are each library's own (config holds the
        // entry as data): their union, from the libraries.
        let fields = match yaml.contains("{preset: rq, bogus: 1}") {
            true => queue_exporter::sources::redis::preset_words()
                .into_iter()
                .map(str::to_owned)
                .collect(),
            false => accepted_fields(yaml),
        };
        for field in fields {
            let name = format!("{prefix}{field}");
            // A row for the field itself, or for one of its sub-fields.
            let documented = rows
                .iter()
                .any(|r| *r == name || r.starts_with(&format!("{name}.")));
            if !documented {
                missing.push(format!("`{name}` (under #{heading})"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "config fields the loader accepts but docs/configuration.md does not list \
         as the first cell of a table row:\n{}",
        missing.join("\n")
    );
}

/// `queue-exporter <args> --help`.
fn help(args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_queue-exporter"))
        .args(args)
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?} --help: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn every_command_and_flag_is_in_the_command_table_of_configuration_md() {
    let top = help(&[]);
    let commands: Vec<String> = top
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect();
    assert!(
        commands.len() >= 4,
        "commands in --help: {commands:?}\n{top}"
    );
    let page = parse_doc(&read(&root().join("docs/configuration.md")));
    let lines = section(
        &page,
        "which-commands-does-it-have",
        "docs/configuration.md",
    );
    let rows = first_cell_names(lines);
    let text = lines.join("\n");
    let flag = Regex::new(r"^\s*(?:-[a-zA-Z], )?(--[a-z][a-z-]*)").unwrap();
    let mut missing = Vec::new();
    for command in &commands {
        // A row `queue-exporter <command> …` (or `[<command>]`, the default).
        let documented = rows.iter().any(|r| {
            r.split_whitespace()
                .nth(1)
                .is_some_and(|w| w.trim_matches(['[', ']']) == command)
        });
        if !documented {
            missing.push(format!("command `{command}`"));
        }
        for l in help(&[command]).lines() {
            if let Some(c) = flag.captures(l) {
                let f = &c[1];
                if !["--help", "--version"].contains(&f) && !text.contains(f) {
                    missing.push(format!("flag `{f}` of `{command}`"));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "missing from #which-commands-does-it-have in docs/configuration.md:\n{}",
        missing.join("\n")
    );
}

// ------------------------------------------------------------ exit codes

/// Runs the binary with `args`, `stdin` as its input, and at most 20 s;
/// returns (exit code, stderr).
fn run_for_code(args: &[&str], env: &[(&str, &str)], stdin: &str) -> (i32, String) {
    use std::io::Write as _;
    use std::process::{Command, Stdio};
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_queue-exporter"));
    cmd.args(args)
        .env_remove("RUST_LOG")
        .env_remove("QUEUE_EXPORTER_CONFIG")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            panic!("{args:?} still ran after 20 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A port nothing listens on.
fn dead_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One run of the binary for the exit-code table.
struct ExitCase<'a> {
    /// Words of its row in the table.
    cause: &'a str,
    args: Vec<&'a str>,
    env: Vec<(&'a str, &'a str)>,
    stdin: &'a str,
    /// The exit code the row is in.
    code: i32,
}

#[test]
fn every_exit_code_is_in_the_table_of_configuration_md_and_each_cause_printed_once() {
    let page = parse_doc(&read(&root().join("docs/configuration.md")));
    let lines = section(
        &page,
        "what-do-the-exit-codes-mean",
        "docs/configuration.md",
    );
    // `code` → its row's text.
    let rows: HashMap<i32, String> = lines
        .iter()
        .filter_map(|l| {
            let mut cells = l.strip_prefix("| `")?.splitn(2, "` |");
            let code = cells.next()?.parse().ok()?;
            Some((code, cells.next()?.to_string()))
        })
        .collect();
    let codes: BTreeSet<i32> = rows.keys().copied().collect();
    assert_eq!(codes, BTreeSet::from([0, 1, 2]), "{lines:?}");

    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    // `plan`: ten minutes of traffic, and the same with a bad row.
    let header = "time,arrivals_per_second,service_seconds\n";
    let plan_rows: String = (0..40)
        .map(|i| format!("{},2,1\n", 1_764_460_800 + 15 * i))
        .collect();
    let plan_trace = write("trace.csv", &format!("{header}{plan_rows}"));
    let plan_bad_trace = write(
        "bad-trace.csv",
        &format!("{header}{plan_rows}1764461500,2,x\n"),
    );
    let dead = dead_port();
    let good = write(
        "good.yaml",
        &format!(
            "listen: {{ grpc: off }}\nsources:\n  - name: main\n    type: redis\n    url: redis://127.0.0.1:{dead}\n    timeout: 1s\n    queues: [{{ key: work }}]\n"
        ),
    );
    let bad = write(
        "bad.yaml",
        "sources:\n  - name: main\n    type: redis\n    poll_interval: often\n",
    );
    // A listener holds this port while `serve` tries it.
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = busy.local_addr().unwrap().to_string();
    let dead_grpc = format!("127.0.0.1:{dead}");
    let dead_url = format!("redis://127.0.0.1:{dead}");
    // Each: what the row says, the command, its environment, its stdin, the code.
    let cases = [
        ExitCase {
            cause: "`check` found the config valid",
            args: vec!["check", "--config", &good],
            env: vec![],
            stdin: "",
            code: 0,
        },
        ExitCase {
            cause: "`hash-password` printed",
            args: vec!["hash-password", "--cost", "4"],
            env: vec![],
            stdin: "pw\n",
            code: 0,
        },
        ExitCase {
            cause: "`check --connect` or `once` could not poll a source",
            args: vec!["check", "--connect", "--config", &good],
            env: vec![],
            stdin: "",
            code: 1,
        },
        ExitCase {
            cause: "`check --connect` or `once` could not poll a source",
            args: vec!["once", "--config", &good],
            env: vec![],
            stdin: "",
            code: 1,
        },
        ExitCase {
            cause: "could not bind a listener",
            args: vec!["serve", "--config", &good, "--listen-http", &busy],
            env: vec![],
            stdin: "",
            code: 1,
        },
        ExitCase {
            cause: "`discover` could not read Redis",
            args: vec!["discover", "--url", &dead_url],
            env: vec![],
            stdin: "",
            code: 1,
        },
        ExitCase {
            cause: "`ask` could not reach the scaler",
            args: vec!["ask", "--grpc", &dead_grpc, "queue=work"],
            env: vec![],
            stdin: "",
            code: 1,
        },
        ExitCase {
            cause: "a bad config",
            args: vec!["check", "--config", &bad],
            env: vec![],
            stdin: "",
            code: 2,
        },
        ExitCase {
            cause: "environment override",
            args: vec!["check", "--config", &good],
            env: vec![("QUEUE_EXPORTER__LOG__FORMAT", "xml")],
            stdin: "",
            code: 2,
        },
        ExitCase {
            cause: "an unknown command, flag or flag value",
            args: vec!["check", "--bogus"],
            env: vec![],
            stdin: "",
            code: 2,
        },
        ExitCase {
            cause: "`ask` metadata that is not `key=value`",
            args: vec!["ask", "queue"],
            env: vec![],
            stdin: "",
            code: 2,
        },
        ExitCase {
            cause: "`discover` without `--url` or `--source`",
            args: vec!["discover"],
            env: vec![],
            stdin: "",
            code: 2,
        },
        ExitCase {
            cause: "`hash-password` given no password",
            args: vec!["hash-password"],
            env: vec![],
            stdin: "",
            code: 2,
        },
        ExitCase {
            cause: "`plan` printed its table",
            args: vec!["plan", "--trace", &plan_trace, "--target-wait", "30s"],
            env: vec![],
            stdin: "",
            code: 0,
        },
        ExitCase {
            cause: "a trace with a bad row",
            args: vec!["plan", "--trace", &plan_bad_trace, "--target-wait", "30s"],
            env: vec![],
            stdin: "",
            code: 2,
        },
    ];
    let mut wrong = Vec::new();
    for ExitCase {
        cause,
        args,
        env,
        stdin,
        code: want,
    } in &cases
    {
        let (code, stderr) = run_for_code(args, env, stdin);
        if code != *want {
            wrong.push(format!("{args:?} exited {code}, not {want}: {stderr}"));
        }
        if !rows[want].contains(cause) {
            wrong.push(format!("the row of code {want} does not say {cause:?}"));
        }
        // Each cause once: no message repeats its own cause
        // (`…: Address already in use (os error 98): Address already in use (os error 98)`).
        for line in stderr.lines() {
            let parts: Vec<&str> = line.split(": ").collect();
            if parts.windows(2).any(|w| w[0] == w[1])
                || parts.iter().filter(|p| p.contains("(os error")).count() > 1
            {
                wrong.push(format!("{args:?} repeats a cause: {line}"));
            }
        }
        if args[0] == "serve" {
            assert!(stderr.contains("Address already in use"), "{stderr}");
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

// ------------------------------------------------------------ sizes

/// An `N MB` / `N.N MB` figure (not MiB or KB).
fn mb_figure() -> Regex {
    Regex::new(r"\b\d+(?:\.\d+)? MB\b").unwrap()
}

/// The sentences (and table cells) of Markdown `lines`, joined across
/// line breaks.
fn sentences(lines: &[&String]) -> Vec<String> {
    let joined = lines
        .iter()
        .map(|l| l.as_str())
        .collect::<Vec<_>>()
        .join(" ");
    Regex::new(r"[.;!?](?:\s|$)|\|")
        .unwrap()
        .split(&joined)
        .map(str::to_string)
        .collect()
}

#[test]
fn the_binary_and_image_sizes_are_stated_only_in_container_md() {
    let container = root().join("docs/container.md");
    let page = parse_doc(&read(&container));
    let table = section(&page, "how-big-is-it", "docs/container.md");
    let release = table
        .iter()
        .find(|l| l.starts_with("| `release`"))
        .expect("a release row in docs/container.md#how-big-is-it");
    let figure = mb_figure();
    assert_eq!(
        figure.find_iter(release).count(),
        2,
        "binary and image: {release}"
    );
    assert!(
        read(&root().join("scripts/binary-size")).contains("| \\`release\\` (fat LTO"),
        "scripts/binary-size prints the row it measures"
    );

    // Elsewhere, a size in MB within a few words of the binary, the image
    // or the code (in one sentence) states what only that table may.
    let about_size =
        Regex::new(r"(?i)\b(binary|binaries|image|stripped|executable|its code|release build)\b")
            .unwrap();
    let mut elsewhere = Vec::new();
    for path in markdown_files() {
        let doc = parse_doc(&read(&path));
        let own_table: BTreeSet<&String> = if path == container {
            table.iter().collect()
        } else {
            BTreeSet::new()
        };
        let text: Vec<&String> = doc
            .lines
            .iter()
            .filter(|l| !own_table.contains(l))
            .collect();
        for sentence in sentences(&text) {
            // The libraries' sizes in the image are parts of it, not its size.
            if path == container && sentence.contains("glibc") {
                continue;
            }
            let figures: Vec<usize> = figure.find_iter(&sentence).map(|m| m.start()).collect();
            let near = about_size
                .find_iter(&sentence)
                .filter(|w| {
                    !sentence[w.start()..]
                        .to_lowercase()
                        .starts_with("binary search")
                })
                .any(|w| figures.iter().any(|f| f.abs_diff(w.start()) < 80));
            if near {
                elsewhere.push(format!(
                    "{}: {}",
                    path.strip_prefix(root()).unwrap().display(),
                    sentence.trim()
                ));
            }
        }
    }
    assert!(
        elsewhere.is_empty(),
        "the binary's and image's sizes belong in docs/container.md#how-big-is-it only \
         (link there; scripts/binary-size measures them):\n{}",
        elsewhere.join("\n")
    );
}

// ------------------------------------------------------------ metrics

/// A queue sample with every value known, as no single backend has it.
fn full_sample(name: &str) -> QueueSample {
    let mut q = QueueSample::named(name);
    q.queue_type = Some(QueueType::Zset);
    q.depth = Some(3);
    q.ready = Some(2);
    q.scheduled = Some(1);
    q.oldest_age_seconds = Some(4.0);
    q.age_histogram = Some(Arc::new(AgeHistogram {
        buckets: vec![(1.0, 1), (10.0, 2)],
        count: 2,
    }));
    q.groups = vec![GroupSample {
        name: "g".into(),
        lag: Some(1),
        pending: Some(1),
        consumers: Some(1),
    }];
    let b = q.broker_mut();
    b.vhost = "/".into();
    b.state = Some("running".into());
    b.unacked = Some(1);
    b.consumers = Some(1);
    b.consumer_utilisation = Some(0.5);
    q.set_counters(Counters {
        published: Some(1),
        delivered: Some(1),
        acknowledged: Some(1),
        redelivered: Some(1),
    });
    let mut preset = PresetFacts::default();
    preset.states.insert(JobState::Waiting, Some(1));
    preset.paused = Some(false);
    preset.stalled = Some(0);
    preset.overdue = Some(0);
    preset.oldest_active_age_seconds = Some(1.0);
    preset.service_time = Some(ServiceTime {
        mean_seconds: 0.2,
        jobs: 1,
        from: ServiceSource::FinishedJobs,
    });
    q.preset = Some(Box::new(preset));
    q.set_jobs(JobTotals {
        processed: Some(1),
        failed: Some(1),
    });
    q
}

/// `(family, type)` of every family in an OpenMetrics text.
fn families(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .map(|(n, t)| (n.to_string(), t.to_string()))
        .collect()
}

#[test]
fn every_metric_family_is_in_the_table_of_metrics_md() {
    let mut builder = HubBuilder::default();
    let publisher = builder.add_source(
        "main",
        SourceKind::Redis,
        Duration::from_secs(1),
        Arc::new(AnyName),
    );
    let hub = builder.build();
    let mut snap = Snapshot::initial("main", SourceKind::Redis, Duration::from_secs(1));
    snap.up = true;
    snap.polled = true;
    snap.generation = 1;
    snap.last_success = Some(SystemTime::now());
    snap.queues = Arc::new(vec![full_sample("q")]);
    snap.stats.tracked_keys = 1;
    snap.stats.age_histogram_staleness_seconds = Some(12.5);
    snap.stats.discovery_rounds = Some(Default::default());
    snap.stats.queues_per_vhost.insert("/".into(), 1);
    let mut polls = (*snap.polls).clone();
    polls.observe(0.01);
    snap.polls = Arc::new(polls);
    publisher.publish(snap);
    // The scaler's families have series once it has answered.
    let telemetry = Telemetry::new();
    let method = MethodLabels {
        method: "GetMetrics".into(),
    };
    telemetry
        .grpc_requests
        .get_or_create(&GrpcLabels {
            method: "GetMetrics".into(),
            code: "OK".into(),
        })
        .inc();
    telemetry
        .grpc_duration
        .get_or_create(&method)
        .observe(0.001);
    telemetry.scaler_streams.get_or_create(&method).set(1);
    let text = Exposition::new(hub, Arc::new(telemetry))
        .render_text(Format::OpenMetrics)
        .unwrap();
    let encoded = families(&text);

    // Every family the exposition's source names is in that encoding, so
    // the snapshot above covers the code.
    let literal = Regex::new(r#""(queue_[a-z_]+)""#).unwrap();
    let mut sources = files_under(&root().join("src/exposition"), &[".rs"]);
    sources.push(root().join("src/telemetry.rs"));
    let named: BTreeSet<String> = sources
        .iter()
        .flat_map(|p| {
            literal
                .captures_iter(&read(p))
                .map(|c| c[1].to_string())
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        named.len() > 30,
        "only {} family names in the source",
        named.len()
    );
    let unencoded: Vec<_> = named.iter().filter(|n| !encoded.contains_key(*n)).collect();
    assert!(
        unencoded.is_empty(),
        "named in src/exposition or src/telemetry.rs but not encoded from the full \
         snapshot of this test (give the snapshot that value): {unencoded:?}\n{text}"
    );

    let page = parse_doc(&read(&root().join("docs/metrics.md")));
    let rows = first_cell_names(section(
        &page,
        "which-metrics-does-it-export",
        "docs/metrics.md",
    ));
    let missing: Vec<String> = encoded
        .iter()
        .map(|(name, kind)| {
            // Counters are written with their `_total` sample name.
            if kind == "counter" {
                format!("{name}_total")
            } else {
                name.clone()
            }
        })
        .filter(|name| {
            !rows
                .iter()
                .any(|r| r == name || r.starts_with(&format!("{name}{{")))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "metric families missing from the table of docs/metrics.md: {missing:?}"
    );
}

/// ARCHITECTURE.md's list of library files is `LIBRARIES`, in its order
/// (a file is its config name without `-`: `priority_zset.rs` is
/// `priority-zset`, `beequeue.rs` `bee-queue`).
#[test]
fn architecture_md_lists_every_registered_library_in_order() {
    let text = read(&root().join("ARCHITECTURE.md"));
    let row = text
        .lines()
        .find(|l| l.starts_with("**`src/sources/redis/presets/libraries/`**"))
        .expect("ARCHITECTURE.md: the paragraph of src/sources/redis/presets/libraries/");
    let list = row
        .split("one file per library (")
        .nth(1)
        .and_then(|r| r.split(':').next())
        .expect("the row's list: one file per library (`a`, `b`: ...)");
    let listed: Vec<String> = Regex::new(r"`([a-z_]+)`")
        .unwrap()
        .captures_iter(list)
        .map(|c| c[1].replace('_', ""))
        .collect();
    let registered: Vec<String> = queue_exporter::sources::redis::library_names()
        .into_iter()
        .map(|n| n.replace('-', ""))
        .collect();
    assert_eq!(
        listed, registered,
        "ARCHITECTURE.md's library files against LIBRARIES"
    );
}

// ------------------------------------------------------------ KEDA

#[test]
fn every_keda_metadata_key_mode_and_operation_is_in_keda_md() {
    let page = parse_doc(&read(&root().join("docs/keda.md")));
    let params = first_cell_names(section(&page, "parameter-list", "docs/keda.md"));
    let modes = first_cell_names(section(
        &page,
        "what-can-a-trigger-measure-mode",
        "docs/keda.md",
    ));
    let text = page.lines.join("\n");
    let mut missing = Vec::new();
    for key in ACCEPTED_KEYS {
        if !params.contains(key) {
            missing.push(format!("metadata key `{key}` (parameter table)"));
        }
    }
    for key in KEDA_KEYS {
        if !text.contains(&format!("`{key}`")) {
            missing.push(format!("KEDA's own key `{key}`"));
        }
    }
    for mode in Mode::ALL {
        if !modes.contains(mode.as_str()) {
            missing.push(format!("mode `{}` (mode table)", mode.as_str()));
        }
    }
    for op in Operation::ALL {
        if !text.contains(&format!("`{}`", op.as_str())) {
            missing.push(format!("operation `{}`", op.as_str()));
        }
    }
    assert!(
        missing.is_empty(),
        "missing from docs/keda.md:\n{}",
        missing.join("\n")
    );
}

/// docs/keda.md's parameter table is the keys' declaration
/// (`scaler::keys::ALL`): a row per key in its order, each default cell
/// saying the declared default, each meaning cell holding the key's line.
#[test]
fn keda_md_parameter_table_follows_the_key_declarations() {
    use queue_exporter::scaler::keys::{ALL, Default};
    let page = parse_doc(&read(&root().join("docs/keda.md")));
    let rows: Vec<Vec<String>> = section(&page, "parameter-list", "docs/keda.md")
        .iter()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_string())
                .collect()
        })
        .collect();
    let names: Vec<&str> = rows.iter().map(|r| r[0].trim_matches('`')).collect();
    let declared: Vec<&str> = ALL.iter().map(|k| k.name).collect();
    assert_eq!(names, declared, "docs/keda.md's parameter table, in order");
    let mut wrong = Vec::new();
    for (key, row) in ALL.iter().zip(&rows) {
        let (default, meaning) = (&row[1], &row[2]);
        let holds = match key.default {
            Default::Nothing => default.is_empty(),
            Default::Required => default.starts_with("(required"),
            Default::Value(v) => *default == format!("`{v}`"),
            Default::WorkedOut(words) => default.contains(words),
        };
        if !holds {
            wrong.push(format!(
                "{}: default cell {default:?}, declared {:?}",
                key.name, key.default
            ));
        }
        if !meaning.contains(key.doc) {
            wrong.push(format!("{}: meaning cell lacks {:?}", key.name, key.doc));
        }
    }
    assert!(
        wrong.is_empty(),
        "docs/keda.md's parameter table:\n{}",
        wrong.join("\n")
    );
}

// ------------------------------------------------------------ alerts

/// Every alerting rule (an object with an `alert` name) under `v`.
fn alerts<'a>(v: &'a Value, out: &mut Vec<&'a Value>) {
    match v {
        Value::Object(m) => {
            if m.get("alert").is_some_and(Value::is_string) {
                out.push(v);
            }
            m.values().for_each(|x| alerts(x, out));
        }
        Value::Array(a) => a.iter().for_each(|x| alerts(x, out)),
        _ => {}
    }
}

#[test]
fn every_alert_has_a_runbook_url_pointing_at_its_runbook_heading() {
    let runbook = parse_doc(&read(&root().join("docs/runbook.md")));
    let mut found = 0;
    let mut bad = Vec::new();
    for dir in ["deploy", "dashboards"] {
        for file in files_under(&root().join(dir), &[".yaml", ".yml"]) {
            let text = read(&file);
            let rel = file.strip_prefix(root()).unwrap().display().to_string();
            for doc in serde_norway::Deserializer::from_str(&text) {
                let doc = Value::deserialize(doc).unwrap_or_else(|e| panic!("{rel}: {e}"));
                let mut rules = Vec::new();
                alerts(&doc, &mut rules);
                for rule in rules {
                    found += 1;
                    let name = rule["alert"].as_str().unwrap();
                    let Some(url) = rule["annotations"]["runbook_url"].as_str() else {
                        bad.push(format!("{rel}: {name}: no runbook_url annotation"));
                        continue;
                    };
                    let want = slug(&format!("`{name}`"));
                    match url.split_once('#') {
                        Some((page, anchor))
                            if page.ends_with("docs/runbook.md")
                                && anchor == want
                                && runbook.anchors.contains(anchor) => {}
                        _ => bad.push(format!(
                            "{rel}: {name}: runbook_url {url:?} is not docs/runbook.md#{want} \
                             (a heading of docs/runbook.md)"
                        )),
                    }
                }
            }
        }
    }
    assert!(
        found >= 10,
        "only {found} alerts found under deploy/ and dashboards/"
    );
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

// ------------------------------------------------------------ README

/// The fenced code blocks of `text` whose info string is `lang`.
fn code_blocks(text: &str, lang: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        match &mut current {
            Some(block) if line.trim_start().starts_with("```") => {
                out.push(std::mem::take(block));
                current = None;
            }
            Some(block) => {
                block.push_str(line);
                block.push('\n');
            }
            None if line.trim_start() == format!("```{lang}") => current = Some(String::new()),
            None => {}
        }
    }
    out
}

#[test]
fn the_readmes_configs_load_and_its_scaledobject_metadata_parses() {
    let readme = read(&root().join("README.md"));
    let dir = tempfile::tempdir().unwrap();
    // Configs that name secret files: give them files to read.
    let secrets = dir.path().join("secret");
    std::fs::write(&secrets, "pw\n").unwrap();
    let mut configs = 0;
    let mut triggers = 0;
    let mut blocks = code_blocks(&readme, "yaml");
    // The shell block writes its config with a heredoc.
    for sh in code_blocks(&readme, "sh") {
        if let Some((_, rest)) = sh.split_once("<<'EOF'\n") {
            blocks.push(rest.split("EOF\n").next().unwrap().to_string());
        }
    }
    let secret_path = Regex::new(r"/run/secrets/[a-z]+").unwrap();
    for block in blocks {
        let yaml = secret_path.replace_all(&block, secrets.display().to_string());
        if yaml.contains("sources:") {
            let file = dir.path().join("config.yaml");
            std::fs::write(&file, yaml.as_bytes()).unwrap();
            Config::load(&LoadOptions {
                file: Some(file),
                ..LoadOptions::default()
            })
            .unwrap_or_else(|e| panic!("README config does not load: {e}\n{yaml}"));
            configs += 1;
        }
        if yaml.contains("kind: ScaledObject") {
            let doc: Value = serde_norway::from_str(&yaml).unwrap();
            for t in doc["spec"]["triggers"].as_array().unwrap() {
                let meta: HashMap<String, String> = t["metadata"]
                    .as_object()
                    .unwrap()
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                    .collect();
                queue_exporter::scaler::metadata::parse_with(
                    &meta,
                    &queue_exporter::sources::redis::catalogue(),
                )
                .unwrap_or_else(|e| panic!("README trigger refused: {e:?}\n{yaml}"));
                triggers += 1;
            }
        }
    }
    assert!(configs >= 4, "only {configs} configs in the README");
    assert!(triggers >= 1, "no ScaledObject trigger in the README");
}
