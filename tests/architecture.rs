//! The dependency rules of ARCHITECTURE.md, enforced: every `crate::…`,
//! `super::…` and `self::…` path in `src/` (outside `#[cfg(test)]` code) is
//! resolved to the module file it names, then
//! - no reader (`http`, `exposition`, `scaler`) depends on a source module;
//! - `snapshot` depends on nothing in the crate;
//! - within each folder, the files beside each other (a subfolder counts as
//!   one; the folder's own `mod.rs` is their parent, not a sibling) have no
//!   import cycle, but for one edge: `config` parses a `- preset:` entry by
//!   asking the library it names (`sources::redis::presets::library`);
//! - a queue library's name appears in `src/` code only in its own file and
//!   in the one registration list (`presets/mod.rs`'s `LIBRARIES`);
//! - zero config's round goes one way (`presets/zero/`): gather → classify
//!   → adopt, called in order by the folder's `mod.rs`; a stage imports
//!   neither the orchestrator nor a later stage, and of an earlier stage
//!   only its output types (never a function: no call back); the leaves
//!   (`marks`, `learnt`) import no stage.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use regex::Regex;

/// A module path inside the crate, e.g. `["sources", "redis", "poll"]`.
type ModPath = Vec<String>;

/// Every module file under `src/` (not `main.rs`), by module path.
fn module_files() -> BTreeMap<ModPath, PathBuf> {
    fn walk(dir: &Path, prefix: &ModPath, out: &mut BTreeMap<ModPath, PathBuf>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .expect("read src dir")
            .map(|e| e.expect("dir entry").path())
            .collect();
        entries.sort();
        for path in entries {
            let name = path
                .file_stem()
                .expect("name")
                .to_string_lossy()
                .into_owned();
            if path.is_dir() {
                let mut p = prefix.clone();
                p.push(name);
                walk(&path, &p, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let module = match name.as_str() {
                    "lib" | "mod" => prefix.clone(),
                    "main" => continue,
                    _ => {
                        let mut p = prefix.clone();
                        p.push(name);
                        p
                    }
                };
                out.insert(module, path);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &Vec::new(),
        &mut out,
    );
    out
}

/// The file's code without comments, string contents and its `#[cfg(test)]`
/// items (test modules may reach anywhere).
fn production_code(text: &str) -> String {
    let mut out = String::new();
    let mut skip_depth: Option<usize> = None;
    let mut depth = 0usize;
    let mut pending_test = false;
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        let trimmed = code.trim();
        if skip_depth.is_none() && trimmed.starts_with("#[cfg(test)]") {
            pending_test = true;
            continue;
        }
        let opens = code.matches('{').count();
        let closes = code.matches('}').count();
        if pending_test && skip_depth.is_none() {
            if trimmed.ends_with(';') && opens == 0 {
                // `#[cfg(test)] use …;` or `mod tests;`
                pending_test = false;
                continue;
            }
            if opens > 0 {
                skip_depth = Some(depth);
                pending_test = false;
            }
        }
        depth = (depth + opens).saturating_sub(closes);
        if let Some(d) = skip_depth {
            if depth <= d {
                skip_depth = None;
            }
            continue;
        }
        out.push_str(code);
        out.push('\n');
    }
    out
}

/// The paths the code of module `me` refers to, made absolute (not yet
/// resolved to module files: `scaler::metadata::Key` stays whole).
fn references(code: &str, me: &ModPath) -> BTreeSet<ModPath> {
    static PATH: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"\b(crate|super|self)((?:::\w+)+)").expect("regex"));
    static USE: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"(?s)\buse\s+(crate|super|self)::([^;]*);").expect("regex"));
    let (path_re, use_re) = (&*PATH, &*USE);
    let mut out = BTreeSet::new();
    // `super` is the parent module, for a file module and a `mod.rs` alike
    // (a `mod.rs` *is* its folder's module).
    let base = |root: &str| -> ModPath {
        match root {
            "crate" => Vec::new(),
            "self" => me.clone(),
            _ => {
                let mut p = me.clone();
                p.pop();
                p
            }
        }
    };
    let mut add = |root: &str, rest: &str| {
        let mut p = base(root);
        p.extend(
            rest.split("::")
                .filter(|s| !s.is_empty())
                .map(str::to_owned),
        );
        out.insert(p);
    };
    for c in path_re.captures_iter(code) {
        add(&c[1], &c[2]);
    }
    // Grouped imports: `use super::{a, b::c};` names `a` and `b::c` too.
    for c in use_re.captures_iter(code) {
        let body = &c[2];
        if let Some(open) = body.find('{') {
            let prefix = body[..open].trim_end_matches("::");
            let inner = body[open + 1..].trim_end_matches('}');
            for item in inner.split(',') {
                let item = item.trim().trim_start_matches('{');
                let first = item.split(['{', ' ']).next().unwrap_or("");
                if first.is_empty() || first == "self" {
                    continue;
                }
                add(&c[1], &format!("{prefix}::{first}"));
            }
        }
    }
    out
}

/// Module → the module files it depends on (longest known prefix of each
/// referenced path), itself excluded.
fn dependencies() -> BTreeMap<ModPath, BTreeSet<ModPath>> {
    let files = module_files();
    let mut deps = BTreeMap::new();
    for (module, path) in &files {
        let text = std::fs::read_to_string(path).expect("read source");
        let mut found = BTreeSet::new();
        let code = production_code(&text);
        let refs = references(&code, module);
        for reference in refs {
            let mut p = reference.clone();
            while !p.is_empty() && !files.contains_key(&p) {
                p.pop();
            }
            if !p.is_empty() && &p != module {
                found.insert(p);
            }
        }
        deps.insert(module.clone(), found);
    }
    deps
}

fn show(p: &ModPath) -> String {
    if p.is_empty() {
        "crate".into()
    } else {
        p.join("::")
    }
}

#[test]
fn no_reader_depends_on_a_source() {
    let mut offences = Vec::new();
    for (module, deps) in dependencies() {
        let reader = matches!(
            module.first().map(String::as_str),
            Some("http" | "exposition" | "scaler")
        );
        if !reader {
            continue;
        }
        for d in deps {
            if d.first().map(String::as_str) == Some("sources")
                || d.first().map(String::as_str) == Some("app")
            {
                offences.push(format!("{} -> {}", show(&module), show(&d)));
            }
        }
    }
    assert!(
        offences.is_empty(),
        "readers must only read snapshots: {offences:#?}"
    );
}

#[test]
fn the_snapshot_model_depends_on_nothing_in_the_crate() {
    let deps = dependencies();
    let own: Vec<String> = deps
        .iter()
        .filter(|(m, _)| m.first().map(String::as_str) == Some("snapshot"))
        .flat_map(|(_, d)| {
            d.iter()
                .filter(|p| p.first().map(String::as_str) != Some("snapshot"))
                .map(show)
        })
        .collect();
    assert!(own.is_empty(), "snapshot imports {own:?}");
}

/// The file of `folder` that holds `module`, if any: a child file or a
/// subfolder, by name. The folder's own `mod.rs` is not one of them: it is
/// the folder's face, whose types the files share and which uses them in
/// turn (Rust's usual shape); the rule is about the files beside each other.
fn sibling_of(folder: &ModPath, module: &ModPath) -> Option<String> {
    (module.len() > folder.len() && module[..folder.len()] == folder[..])
        .then(|| module[folder.len()].clone())
}

#[test]
fn no_folder_has_an_import_cycle_among_its_files() {
    let deps = dependencies();
    let folders: BTreeSet<ModPath> = module_files()
        .into_iter()
        .filter(|(_, path)| {
            path.file_name()
                .is_some_and(|n| n == "mod.rs" || n == "lib.rs")
        })
        .map(|(m, _)| m)
        .collect();
    let mut cycles = Vec::new();
    for folder in &folders {
        // Sibling graph: a → b when code in a (a file, or anything in a
        // subfolder) uses b.
        let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (module, ds) in &deps {
            let Some(from) = sibling_of(folder, module) else {
                continue;
            };
            for d in ds {
                if allowed_upward(module, d) {
                    continue;
                }
                if let Some(to) = sibling_of(folder, d)
                    && to != from
                {
                    graph.entry(from.clone()).or_default().insert(to);
                }
            }
        }
        while let Some(cycle) = find_cycle(&graph) {
            // Report every cycle: cut the edge that closed this one.
            let (a, b) = (&cycle[cycle.len() - 2], &cycle[cycle.len() - 1]);
            if let Some(e) = graph.get_mut(a) {
                e.remove(b);
            }
            cycles.push(format!("{}: {}", show(folder), cycle.join(" -> ")));
        }
    }
    assert!(cycles.is_empty(), "import cycles: {cycles:#?}");
}

/// The one dependency against the layers that the cycle rule lets pass:
/// `config/preset.rs` asks the list of libraries how to parse an entry (its
/// options, defaults and checks live in the library's file), so that a
/// library is one file. Nothing else in `config` may use `sources`.
fn allowed_upward(module: &ModPath, dependency: &ModPath) -> bool {
    let is = |p: &ModPath, want: &[&str]| p.iter().map(String::as_str).eq(want.iter().copied());
    is(module, &["config", "preset"]) && is(dependency, &["sources", "redis", "presets", "library"])
}

/// A cycle in `graph`, as the nodes along it (first repeated at the end).
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = stack.iter().position(|n| n == node) {
            let mut cycle = stack[at..].to_vec();
            cycle.push(node.to_owned());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        stack.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, graph, stack, done) {
                return Some(c);
            }
        }
        stack.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|n| visit(n, graph, &mut Vec::new(), &mut done))
}

#[test]
fn the_checker_sees_a_cycle_and_a_reader_import() {
    // The rules above must be able to fail: a two-file cycle is found, and a
    // grouped `use` is followed.
    let mut g = BTreeMap::new();
    g.insert("a".to_owned(), BTreeSet::from(["b".to_owned()]));
    g.insert("b".to_owned(), BTreeSet::from(["a".to_owned()]));
    assert_eq!(
        find_cycle(&g),
        Some(vec!["a".into(), "b".into(), "a".into()])
    );
    let me: ModPath = vec!["scaler".into(), "query".into()];
    let refs = references("use crate::{hub::Hub, sources::redis};\n", &me);
    assert!(
        refs.contains(&vec!["sources".to_owned(), "redis".to_owned()]),
        "{refs:?}"
    );
    let refs = references("use super::{names, metadata::Key};\n", &me);
    assert!(
        refs.contains(&vec!["scaler".into(), "metadata".into(), "Key".into()]),
        "{refs:?}"
    );
    assert!(
        production_code("fn a() {}\n#[cfg(test)]\nmod tests {\n use crate::sources;\n}\n")
            .find("sources")
            .is_none()
    );
}

/// Every queue library the exporter knows: a pattern matching its name in
/// code (case-insensitive, not inside a longer word: `bull` is not
/// `bullmq`), and the files of `src/sources/redis/presets/` that may name
/// it: its own, and a library sharing its layout. A new library adds a line.
const LIBRARY_NAMES: &[(&str, &[&str])] = &[
    ("bullmq", &["bullmq.rs", "bull.rs"]),
    // BullMQ's default prefix is Bull's: `bull`.
    ("bull", &["bull.rs", "bullmq.rs"]),
    ("sidekiq", &["sidekiq.rs"]),
    ("celery|kombu", &["celery.rs"]),
    ("rq", &["rq.rs"]),
    ("asynq", &["asynq.rs"]),
    ("rediswq", &["rediswq.rs"]),
    ("priority[-_]?zset", &["priority_zset.rs"]),
    ("dramatiq", &["dramatiq.rs"]),
    ("huey", &["huey.rs"]),
    ("arq", &["arq.rs"]),
    ("bee[-_]?queue", &["beequeue.rs"]),
];

/// `text` without the registration list (`LIBRARIES` and the `mod` lines
/// of `presets/mod.rs`), the one place every library is named.
fn without_registration(text: &str) -> String {
    let mut out = String::new();
    let mut in_list = false;
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with("pub static LIBRARIES") {
            in_list = true;
        }
        let module_line = (t.starts_with("mod ") || t.starts_with("pub mod ")) && t.ends_with(';');
        if !in_list && !module_line {
            out.push_str(line);
            out.push('\n');
        }
        if in_list && t.ends_with("];") {
            in_list = false;
        }
    }
    out
}

/// Where each library's name appears in `src/` code outside the files
/// allowed to name it, as `file:line: library`.
fn library_names_outside_their_files() -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let presets = root.join("src/sources/redis/presets");
    let mut files: Vec<PathBuf> = module_files().into_values().collect();
    files.push(root.join("src/main.rs"));
    let patterns: Vec<(Regex, &[&str])> = LIBRARY_NAMES
        .iter()
        .map(|(name, own)| {
            let re = format!(r"(?i)(^|[^a-z0-9])({name})([^a-z0-9]|$)");
            (Regex::new(&re).expect("regex"), *own)
        })
        .collect();
    let mut found = Vec::new();
    for path in files {
        let rel = path.strip_prefix(root).expect("under the crate");
        let rel_text = rel.to_string_lossy().replace('\\', "/");
        let text = std::fs::read_to_string(&path).expect("read source");
        let mut code = production_code(&text);
        if path == presets.join("mod.rs") {
            code = without_registration(&code);
        }
        for (re, own) in &patterns {
            let mine = path.parent() == Some(presets.as_path())
                && own
                    .iter()
                    .any(|f| path.file_name().is_some_and(|n| n == *f));
            if mine {
                continue;
            }
            for (n, line) in code.lines().enumerate() {
                if let Some(m) = re.captures(line) {
                    found.push(format!("{rel_text}:{}: {}: {}", n + 1, &m[2], line.trim()));
                }
            }
        }
    }
    found
}

#[test]
fn a_library_is_named_only_in_its_own_file_and_the_registration_list() {
    let found = library_names_outside_their_files();
    assert!(
        found.is_empty(),
        "library names outside their files: {found:#?}"
    );
}

#[test]
fn the_library_name_check_can_fail() {
    let re = Regex::new(r"(?i)(^|[^a-z0-9])(bull)([^a-z0-9]|$)").expect("regex");
    assert!(re.is_match("let ids = bull_candidates(keys);"));
    assert!(re.is_match("Preset::new(bull::KIND, p)"));
    assert!(!re.is_match("bullmq::marks_cmd(m)"));
    let code = without_registration(
        "pub static LIBRARIES: &[&dyn L] = &[\n    &bull::Bull,\n];\nmod bull;\nfn f() { bull::x() }\n",
    );
    assert_eq!(code, "fn f() { bull::x() }\n");
}

/// Zero config's folder and its stages, in the order a round runs them;
/// the leaves every stage may use.
const ZERO: &[&str] = &["sources", "redis", "presets", "zero"];
const ZERO_STAGES: &[&str] = &["gather", "classify", "adopt"];
const ZERO_LEAVES: &[&str] = &["marks", "learnt"];

/// Each module's references (as [`references`] gives them, with chained
/// `super::super::` folded: each one more module up), by module.
fn all_references() -> BTreeMap<ModPath, BTreeSet<ModPath>> {
    let fold = |p: ModPath| -> ModPath {
        let mut out = ModPath::new();
        for seg in p {
            match seg.as_str() {
                "super" => {
                    out.pop();
                }
                "self" => {}
                _ => out.push(seg),
            }
        }
        out
    };
    module_files()
        .into_iter()
        .map(|(module, path)| {
            let text = std::fs::read_to_string(&path).expect("read source");
            let refs = references(&production_code(&text), &module);
            (module, refs.into_iter().map(fold).collect())
        })
        .collect()
}

/// Where zero config's stages and leaves reach against the round's
/// direction, as `from -> reference: why`. `refs`: each module's
/// references; `files`: the module files, which references resolve to.
fn zero_config_against_the_flow(
    refs: &BTreeMap<ModPath, BTreeSet<ModPath>>,
    files: &BTreeSet<ModPath>,
) -> Vec<String> {
    let zero: ModPath = ZERO.iter().map(|s| s.to_string()).collect();
    let child = |p: &ModPath| -> Option<String> {
        (p.len() > zero.len() && p[..zero.len()] == zero[..]).then(|| p[zero.len()].clone())
    };
    let stage = |name: &str| ZERO_STAGES.iter().position(|s| *s == name);
    let mut out = Vec::new();
    for (module, rs) in refs {
        let Some(from) = child(module) else { continue };
        let from_stage = stage(&from);
        if from_stage.is_none() && !ZERO_LEAVES.contains(&from.as_str()) {
            continue;
        }
        for r in rs {
            let mut file = r.clone();
            while !file.is_empty() && !files.contains(&file) {
                file.pop();
            }
            let why = if file == zero {
                Some("the orchestrator")
            } else if let Some(to) = child(&file).filter(|t| *t != from) {
                match (from_stage, stage(&to)) {
                    (None, Some(_)) => Some("a stage, from a leaf"),
                    (Some(a), Some(b)) if b > a => Some("a later stage"),
                    (Some(_), Some(_)) => {
                        // An earlier stage: its output types only.
                        let item = r.get(file.len()).map(String::as_str).unwrap_or("");
                        (!item.starts_with(|c: char| c.is_ascii_uppercase()))
                            .then_some("an earlier stage's function (a call back)")
                    }
                    _ => None,
                }
            } else {
                None
            };
            if let Some(why) = why {
                let rel = |p: &ModPath| match p.strip_prefix(zero.as_slice()) {
                    Some(rest) if !rest.is_empty() => rest.join("::"),
                    _ => show(p),
                };
                out.push(format!("{} -> {}: {why}", rel(module), rel(r)));
            }
        }
    }
    out
}

#[test]
fn zero_config_stages_go_one_way() {
    let files: BTreeSet<ModPath> = module_files().into_keys().collect();
    for name in ZERO_STAGES.iter().chain(ZERO_LEAVES) {
        let mut p: ModPath = ZERO.iter().map(|s| s.to_string()).collect();
        p.push(name.to_string());
        assert!(files.contains(&p), "no module {}", show(&p));
    }
    let found = zero_config_against_the_flow(&all_references(), &files);
    assert!(found.is_empty(), "against the round's flow: {found:#?}");
}

#[test]
fn the_one_way_check_can_fail() {
    let zero = ZERO.join("::");
    let path = |s: &str| -> ModPath { s.split("::").map(str::to_owned).collect() };
    let files: BTreeSet<ModPath> = ["", "::gather", "::classify", "::adopt", "::marks"]
        .iter()
        .map(|s| path(&format!("{zero}{s}")))
        .collect();
    let refs = |from: &str, to: &[&str]| {
        let to = to.iter().map(|t| path(&format!("{zero}{t}"))).collect();
        (path(&format!("{zero}::{from}")), to)
    };
    let all = BTreeMap::from([
        refs("gather", &["::marks::is_mark", "::classify::Recognition"]),
        refs(
            "classify",
            &["::gather::Gathered", "::gather::retype", "::apart"],
        ),
        refs("adopt", &["::classify::Recognition"]),
        refs("marks", &["::adopt::ZeroConfig"]),
    ]);
    let found = zero_config_against_the_flow(&all, &files);
    let want = [
        "classify -> gather::retype: an earlier stage's function (a call back)",
        "classify -> apart: the orchestrator",
        "gather -> classify::Recognition: a later stage",
        "marks -> adopt::ZeroConfig: a stage, from a leaf",
    ];
    let mut found = found;
    found.sort();
    let mut want = want.map(str::to_owned).to_vec();
    want.sort();
    assert_eq!(found, want);
}
