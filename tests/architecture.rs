//! The dependency rules of ARCHITECTURE.md, enforced: every `crate::…`,
//! `super::…` and `self::…` path in `src/` (outside `#[cfg(test)]` code,
//! comments and literals) is resolved by one resolver ([`resolve`], which
//! folds chained `super::super::` and `self::`) to the module file it
//! names, then
//! - no file of `src/` is in an import cycle with another (a child's use
//!   of its own folder's `mod.rs`, the parent/child idiom, aside), and
//!   within each folder the files beside each other (a subfolder counts as
//!   one) import in no cycle either;
//! - `config` is plain data: it imports nothing from `sources`, `scaler`,
//!   `http`, `exposition` (nor `app`, `hub`);
//! - no reader (`http`, `exposition`, `scaler`) reaches a source module or
//!   `app`, directly or through another module: the library registry
//!   (`sources::redis::presets`) included, so readers learn the libraries'
//!   names and facts from snapshots;
//! - no reader infers a backend's capabilities from the snapshot's shape:
//!   outside `#[cfg(test)]` code, a reader's file names no `SourceKind`
//!   (what a queue's source could read and measure is the sample's
//!   `measures`, set by the source), tests no `vhost()` for presence (a
//!   vhost is a label or a user's filter, never a sign of RabbitMQ), and
//!   names no item of the library registry (`presets::library`,
//!   `LIBRARIES`, `catalogue`): the libraries' names and facts come with
//!   the snapshot (`Snapshot::libraries`);
//! - `snapshot` depends on nothing in the crate;
//! - a queue library's name appears in `src/` code only in its own file and
//!   in the one registration list (`presets/mod.rs`'s `LIBRARIES`, and the
//!   `mod` lines of `presets/libraries/mod.rs`);
//! - a library's file imports only the library API (`presets/library.rs`),
//!   beside a library whose layout it shares (never `Conn`, the commands
//!   or the engine);
//! - zero config's round goes one way (`presets/zero/`): gather → classify
//!   → adopt, called in order by the folder's `mod.rs`; a stage imports
//!   neither the orchestrator nor a later stage, and of an earlier stage
//!   only its output types (never a function: no call back); the leaves
//!   (`marks`, `learnt`) import no stage;
//! - no function outside tests is over 80 lines, but for an allow-list of
//!   at most three, each saying why.

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

/// `text` with its comments blanked out, and with the contents of its
/// string and character literals blanked too unless `keep_strings`; every
/// line break kept, so line numbers stay those of the file.
fn blank_comments(text: &str, keep_strings: bool) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        let ident_at = |j: usize| chars[j].is_alphanumeric() || chars[j] == '_';
        let prev_ident = i > 0 && ident_at(i - 1);
        // `b'x'`, `b"x"`, `br"x"`: a lone `b` before a literal is its prefix.
        let byte_prefix = i > 0 && chars[i - 1] == 'b' && !(i > 1 && ident_at(i - 2));
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
        } else if c == 'r' && (!prev_ident || byte_prefix) && matches!(next, Some('"' | '#')) {
            // A raw string: r"…", r#"…"#.
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            let open = j + 1;
            let mut k = open;
            let close = loop {
                if k >= chars.len() {
                    break chars.len();
                }
                if chars[k] == '"' && (0..hashes).all(|h| chars.get(k + 1 + h) == Some(&'#')) {
                    break k;
                }
                k += 1;
            };
            out.extend(&chars[i..open]);
            for &ch in &chars[open..close] {
                out.push(if keep_strings { ch } else { blank(ch) });
            }
            let end = (close + 1 + hashes).min(chars.len());
            out.extend(&chars[close.min(chars.len())..end]);
            i = end;
        } else if c == '"' {
            out.push('"');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                let n = if chars[i] == '\\' { 2 } else { 1 };
                for &ch in chars.iter().skip(i).take(n) {
                    out.push(if keep_strings { ch } else { blank(ch) });
                }
                i += n;
            }
            if i < chars.len() {
                out.push('"');
                i += 1;
            }
        } else if c == '\'' && (!prev_ident || byte_prefix) {
            // A character literal ('x', '\n', '{'), not a lifetime ('a).
            let end = match next {
                Some('\\') => chars[i + 2..]
                    .iter()
                    .position(|&ch| ch == '\'')
                    .map(|p| i + 2 + p),
                Some(_) if chars.get(i + 2) == Some(&'\'') => Some(i + 2),
                _ => None,
            };
            match end {
                Some(end) => {
                    out.push('\'');
                    for &ch in &chars[i + 1..end] {
                        out.push(if keep_strings { ch } else { ' ' });
                    }
                    out.push('\'');
                    i = end + 1;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// `code` with its `#[cfg(test)]` items blanked out (test modules may
/// reach anywhere), line breaks kept. `code` has no comments.
fn without_tests(code: &str) -> String {
    let mut out = String::new();
    let mut skip_depth: Option<usize> = None;
    let mut depth = 0usize;
    let mut pending_test = false;
    for line in code.lines() {
        let trimmed = line.trim();
        if skip_depth.is_none() && trimmed.starts_with("#[cfg(test)]") {
            pending_test = true;
            out.push('\n');
            continue;
        }
        let opens = line.matches('{').count();
        let closes = line.matches('}').count();
        if pending_test && skip_depth.is_none() {
            if trimmed.ends_with(';') && opens == 0 {
                // `#[cfg(test)] use …;` or `mod tests;`
                pending_test = false;
                out.push('\n');
                continue;
            }
            if opens > 0 {
                skip_depth = Some(depth);
                pending_test = false;
            } else {
                // The item's signature, before its body opens.
                out.push('\n');
                continue;
            }
        }
        depth = (depth + opens).saturating_sub(closes);
        if let Some(d) = skip_depth {
            if depth <= d {
                skip_depth = None;
            }
            out.push('\n');
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The file's code without comments and its `#[cfg(test)]` items, string
/// literals kept (a library's name in a string counts); line numbers
/// those of the file.
fn production_code(text: &str) -> String {
    without_tests(&blank_comments(text, true))
}

/// The file's code without comments, literals' contents and its
/// `#[cfg(test)]` items: what brace counting and path matching read.
fn production_tokens(text: &str) -> String {
    without_tests(&blank_comments(text, false))
}

/// The one path resolver: `root::rest` written in module `me` as an
/// absolute module path, every `super` (one module up: for a file module
/// and a `mod.rs` alike, since a `mod.rs` *is* its folder's module) and
/// `self` folded, however chained (`super::super::discovery`,
/// `self::super::x`, `crate::a::self`).
fn resolve(root: &str, rest: &str, me: &ModPath) -> ModPath {
    let mut out = match root {
        "crate" => ModPath::new(),
        _ => me.clone(),
    };
    let segments = std::iter::once(root).chain(rest.split("::").filter(|s| !s.is_empty()));
    for seg in segments {
        match seg {
            "crate" | "self" => {}
            "super" => {
                out.pop();
            }
            _ => out.push(seg.to_owned()),
        }
    }
    out
}

/// The paths the code of module `me` refers to, made absolute by
/// [`resolve`] (not yet resolved to module files: `scaler::metadata::Key`
/// stays whole): those starting at `crate`, `super` or `self`, and those
/// starting at one of `children`, the names of `me`'s own submodules
/// (`pub use adopt::ZeroConfig;` in a `mod.rs`: a name in scope shadows a
/// crate of the same name, as Rust resolves it).
fn references(code: &str, me: &ModPath, children: &BTreeSet<String>) -> BTreeSet<ModPath> {
    static PATH: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"\b(crate|super|self)((?:::\w+)+)").expect("regex"));
    static USE: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"(?s)\buse\s+(crate|super|self|\w+)::([^;]*);").expect("regex")
    });
    static RELATIVE: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"(^|[^:\w])(\w+)((?:::\w+)+)").expect("regex"));
    let (path_re, use_re) = (&*PATH, &*USE);
    let rooted = |root: &str| matches!(root, "crate" | "super" | "self") || children.contains(root);
    let mut out = BTreeSet::new();
    for c in path_re.captures_iter(code) {
        out.insert(resolve(&c[1], &c[2], me));
    }
    for c in RELATIVE.captures_iter(code) {
        if children.contains(&c[2]) {
            out.insert(resolve("self", &format!("{}{}", &c[2], &c[3]), me));
        }
    }
    // Grouped imports: `use super::{a, b::c};` names `a` and `b::c` too.
    for c in use_re.captures_iter(code) {
        if !rooted(&c[1]) {
            continue;
        }
        let (root, body) = match &c[1] {
            r @ ("crate" | "super" | "self") => (r.to_owned(), c[2].to_owned()),
            child => ("self".to_owned(), format!("{child}::{}", &c[2])),
        };
        if let Some(open) = body.find('{') {
            let prefix = body[..open].trim_end_matches("::");
            let inner = body[open + 1..].trim_end_matches('}');
            for item in inner.split(',') {
                let item = item.trim().trim_start_matches('{');
                let first = item.split(['{', ' ']).next().unwrap_or("");
                if first.is_empty() || first == "self" {
                    continue;
                }
                out.insert(resolve(&root, &format!("{prefix}::{first}"), me));
            }
        }
    }
    out
}

/// The names of `me`'s own submodules among `files`.
fn children_of(me: &ModPath, files: &BTreeSet<ModPath>) -> BTreeSet<String> {
    files
        .iter()
        .filter(|f| f.len() == me.len() + 1 && f.starts_with(me))
        .map(|f| f[me.len()].clone())
        .collect()
}

/// The module file holding `path`: its longest prefix that is one
/// (`None`: the crate root, or outside the crate).
fn file_of(path: &ModPath, files: &BTreeSet<ModPath>) -> Option<ModPath> {
    let mut p = path.clone();
    while !p.is_empty() && !files.contains(&p) {
        p.pop();
    }
    (!p.is_empty()).then_some(p)
}

/// Each module's references ([`references`] of its production code), by
/// module.
fn module_references() -> BTreeMap<ModPath, BTreeSet<ModPath>> {
    let files = module_files();
    let names: BTreeSet<ModPath> = files.keys().cloned().collect();
    files
        .into_iter()
        .map(|(module, path)| {
            let text = std::fs::read_to_string(&path).expect("read source");
            let children = children_of(&module, &names);
            let refs = references(&production_tokens(&text), &module, &children);
            (module, refs)
        })
        .collect()
}

/// Module → the module files it depends on (the file holding each
/// referenced path), itself and the crate root excluded.
fn dependencies() -> BTreeMap<ModPath, BTreeSet<ModPath>> {
    let files: BTreeSet<ModPath> = module_files().into_keys().collect();
    module_references()
        .into_iter()
        .map(|(module, refs)| {
            let found = refs
                .iter()
                .filter_map(|r| file_of(r, &files))
                .filter(|f| *f != module)
                .collect();
            (module, found)
        })
        .collect()
}

fn show(p: &ModPath) -> String {
    if p.is_empty() {
        "crate".into()
    } else {
        p.join("::")
    }
}

/// The readers: they read snapshots, never a backend.
const READERS: &[&str] = &["http", "exposition", "scaler"];

/// The modules `from` reaches through `deps`, each with the chain of
/// modules that leads to it from `from` (shortest first found).
fn reachable(
    from: &ModPath,
    deps: &BTreeMap<ModPath, BTreeSet<ModPath>>,
) -> BTreeMap<ModPath, Vec<ModPath>> {
    let mut seen: BTreeMap<ModPath, Vec<ModPath>> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([vec![from.clone()]]);
    while let Some(chain) = queue.pop_front() {
        let last = chain.last().expect("a chain is never empty").clone();
        for next in deps.get(&last).into_iter().flatten() {
            if *next == *from || seen.contains_key(next) {
                continue;
            }
            let mut longer = chain.clone();
            longer.push(next.clone());
            seen.insert(next.clone(), longer.clone());
            queue.push_back(longer);
        }
    }
    seen
}

/// Where a reader reaches a source, `app`, or the library registry
/// (`sources::redis::presets`), directly or through any other module
/// (`config` once re-exported the registry's lookups): as the chain of
/// modules that leads there.
fn readers_reaching_sources(deps: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Vec<String> {
    let mut offences = Vec::new();
    for module in deps.keys() {
        if !READERS.contains(&module.first().map_or("", String::as_str)) {
            continue;
        }
        let outside =
            |m: &ModPath| matches!(m.first().map_or("", String::as_str), "sources" | "app");
        for (to, chain) in reachable(module, deps) {
            // The first module outside the readers' reach along the chain.
            if outside(&to) && !chain[..chain.len() - 1].iter().any(outside) {
                offences.push(chain.iter().map(show).collect::<Vec<_>>().join(" -> "));
            }
        }
    }
    offences
}

#[test]
fn no_reader_reaches_a_source_or_the_library_registry() {
    let offences = readers_reaching_sources(&dependencies());
    assert!(
        offences.is_empty(),
        "readers must only read snapshots (the libraries' names and facts included): \
         {offences:#?}"
    );
}

/// What a reader's production code may not say, each with why: what would
/// infer a backend's capabilities from the snapshot's shape, or learn the
/// libraries from the registry instead of the snapshot.
const READER_INFERENCES: &[(&str, &str)] = &[
    (
        r"\bSourceKind\b",
        "names SourceKind (read what the source set: QueueSample::measures, the scope)",
    ),
    (
        r"\bvhost\(\)\s*\.\s*is_(some|none)",
        "tests a vhost's presence (a vhost is a label or a filter, not a backend)",
    ),
    (
        r"\bpresets\s*::\s*library\b|\bLIBRARIES\b|\bcatalogue\b",
        "names the library registry (the libraries come with the snapshot)",
    ),
];

/// Where reader files among `files` (production code: no comments,
/// literals or `#[cfg(test)]` items) say one of [`READER_INFERENCES`], as
/// `file:line: why`.
fn reader_inferences(files: &BTreeMap<ModPath, PathBuf>) -> Vec<String> {
    let rules: Vec<(Regex, &str)> = READER_INFERENCES
        .iter()
        .map(|(re, why)| (Regex::new(re).expect("regex"), *why))
        .collect();
    let mut offences = Vec::new();
    for (module, path) in files {
        if !READERS.contains(&module.first().map_or("", String::as_str)) {
            continue;
        }
        let text = std::fs::read_to_string(path).expect("read source");
        offences.extend(
            inferences_in(&production_tokens(&text), &rules)
                .into_iter()
                .map(|(line, why)| format!("{}:{line}: {why}", path.display())),
        );
    }
    offences
}

/// `(line, why)` of each line of `code` matching one of `rules`.
fn inferences_in<'a>(code: &str, rules: &[(Regex, &'a str)]) -> Vec<(usize, &'a str)> {
    code.lines()
        .enumerate()
        .flat_map(|(i, line)| {
            rules
                .iter()
                .filter(move |(re, _)| re.is_match(line))
                .map(move |(_, why)| (i + 1, *why))
        })
        .collect()
}

#[test]
fn no_reader_infers_a_backend_from_the_snapshots_shape() {
    let offences = reader_inferences(&module_files());
    assert!(
        offences.is_empty(),
        "readers must ask the snapshot (QueueSample::measures, the scope, \
         Snapshot::libraries), not infer from its shape: {offences:#?}"
    );
}

#[test]
fn the_reader_inference_check_can_fail() {
    let rules: Vec<(Regex, &str)> = READER_INFERENCES
        .iter()
        .map(|(re, why)| (Regex::new(re).expect("regex"), *why))
        .collect();
    // The lines main had (issue 46), each caught; the same in a test, in a
    // comment or in a string, and a vhost used as a label, are not.
    let code = production_tokens(
        "fn unread(s: &Snapshot, q: &QueueSample) -> bool {\n\
         \x20   s.kind == SourceKind::Redis && q.queue_type.is_none()\n\
         }\n\
         fn why(q: &QueueSample) -> &str {\n\
         \x20   match q.vhost().is_some() { _ => \"x\" }\n\
         }\n\
         fn libs() { crate::sources::redis::presets::library::catalogue(); }\n\
         fn label(q: &QueueSample) -> Option<&str> { q.vhost() } // SourceKind\n\
         fn text() -> &'static str { \"SourceKind\" }\n\
         #[cfg(test)]\n\
         mod tests {\n\
         \x20   use crate::snapshot::SourceKind;\n\
         }\n",
    );
    let found: Vec<usize> = inferences_in(&code, &rules)
        .into_iter()
        .map(|(line, _)| line)
        .collect();
    assert_eq!(found, [2, 5, 7], "{code}");
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

/// What `config` must not use: the layers above it. Config is plain data
/// (a `- preset:` entry is a library's name, its options and their path);
/// `sources` resolves it against the libraries.
const ABOVE_CONFIG: &[&str] = &["sources", "scaler", "http", "exposition", "app", "hub"];

#[test]
fn config_imports_nothing_above_it() {
    let offences: Vec<String> = dependencies()
        .iter()
        .filter(|(m, _)| m.first().map(String::as_str) == Some("config"))
        .flat_map(|(m, ds)| {
            ds.iter()
                .filter(|d| ABOVE_CONFIG.contains(&d.first().map_or("", String::as_str)))
                .map(move |d| format!("{} -> {}", show(m), show(d)))
        })
        .collect();
    assert!(offences.is_empty(), "config imports {offences:#?}");
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
                if let Some(to) = sibling_of(folder, d)
                    && to != from
                {
                    graph.entry(from.clone()).or_default().insert(to);
                }
            }
        }
        cycles.extend(
            every_cycle(graph)
                .into_iter()
                .map(|c| format!("{}: {}", show(folder), c.join(" -> "))),
        );
    }
    assert!(cycles.is_empty(), "import cycles: {cycles:#?}");
}

/// The file graph: module file → the module files it uses, but for a
/// module's use of its own parent (the folder's `mod.rs`, whose types its
/// children share: the parent/child idiom).
fn file_graph(deps: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> BTreeMap<String, BTreeSet<String>> {
    deps.iter()
        .map(|(module, ds)| {
            let parent = &module[..module.len().saturating_sub(1)];
            let to = ds
                .iter()
                .filter(|d| d.as_slice() != parent)
                .map(show)
                .collect();
            (show(module), to)
        })
        .collect()
}

/// The groups of files of `graph` that import each other in a cycle (its
/// strongly connected components of more than one file), each sorted.
fn cyclic_groups(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let reach = |from: &str| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.to_owned()];
        while let Some(n) = todo.pop() {
            for m in graph.get(&n).into_iter().flatten() {
                if seen.insert(m.clone()) {
                    todo.push(m.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&String, BTreeSet<String>> =
        graph.keys().map(|n| (n, reach(n))).collect();
    let mut groups: Vec<Vec<String>> = Vec::new();
    let mut placed = BTreeSet::new();
    for (n, from_n) in &reaches {
        if placed.contains(*n) || !from_n.contains(*n) {
            continue;
        }
        let group: Vec<String> = from_n
            .iter()
            .filter(|m| reaches.get(m).is_some_and(|r| r.contains(*n)))
            .cloned()
            .collect();
        placed.extend(group.iter().cloned());
        groups.push(group);
    }
    groups
}

#[test]
fn no_import_cycle_between_files_of_src() {
    let graph = file_graph(&dependencies());
    let groups: Vec<String> = cyclic_groups(&graph)
        .into_iter()
        .map(|g| {
            let shortest = every_cycle(
                graph
                    .iter()
                    .filter(|(n, _)| g.contains(n))
                    .map(|(n, to)| {
                        (
                            n.clone(),
                            to.iter().filter(|t| g.contains(t)).cloned().collect(),
                        )
                    })
                    .collect(),
            );
            let edges: Vec<String> = g
                .iter()
                .flat_map(|n| {
                    graph[n]
                        .iter()
                        .filter(|t| g.contains(t))
                        .map(move |t| format!("{n} -> {t}"))
                })
                .collect();
            format!(
                "{} files: {}; e.g. {}; its imports: {}",
                g.len(),
                g.join(", "),
                shortest.first().map_or(String::new(), |c| c.join(" -> ")),
                edges.join(", ")
            )
        })
        .collect();
    assert!(
        groups.is_empty(),
        "import cycles between files: {groups:#?}"
    );
}

/// Every cycle of `graph` found by cutting, one at a time, the edge that
/// closed the last one found.
fn every_cycle(mut graph: BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let mut cycles = Vec::new();
    while let Some(cycle) = find_cycle(&graph) {
        let (a, b) = (&cycle[cycle.len() - 2], &cycle[cycle.len() - 1]);
        if let Some(e) = graph.get_mut(a) {
            e.remove(b);
        }
        cycles.push(cycle);
    }
    cycles
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
    let refs = references(
        "use crate::{hub::Hub, sources::redis};\n",
        &me,
        &BTreeSet::new(),
    );
    assert!(
        refs.contains(&vec!["sources".to_owned(), "redis".to_owned()]),
        "{refs:?}"
    );
    let refs = references(
        "use super::{names, metadata::Key};\n",
        &me,
        &BTreeSet::new(),
    );
    assert!(
        refs.contains(&vec!["scaler".into(), "metadata".into(), "Key".into()]),
        "{refs:?}"
    );
    assert!(
        production_code("fn a() {}\n#[cfg(test)]\nmod tests {\n use crate::sources;\n}\n")
            .find("sources")
            .is_none()
    );
    // A test helper's signature, before its body opens, is test code too.
    let code = production_code(
        "#[cfg(test)]\nfn helper(\n    l: &dyn crate::sources::L,\n) {\n}\nfn b() {}\n",
    );
    assert!(!code.contains("sources"), "{code}");
    assert_eq!(code.lines().count(), 6);
}

#[test]
fn the_resolver_folds_chained_super_and_self() {
    let path = |s: &str| -> ModPath { s.split("::").map(str::to_owned).collect() };
    let me = path("sources::redis::presets::library");
    let refs = references(
        "use super::super::discovery::Candidate;\n\
         use self::super::bounded::Bound;\n\
         use super::{super::tracked::KeyState, Stage};\n\
         use crate::config::self::Given;\n",
        &me,
        &BTreeSet::new(),
    );
    for want in [
        "sources::redis::discovery::Candidate",
        "sources::redis::presets::bounded::Bound",
        "sources::redis::tracked::KeyState",
        "sources::redis::presets::Stage",
        "config::Given",
    ] {
        assert!(refs.contains(&path(want)), "{want}: {refs:?}");
    }
    // A path inside a string or a comment is no reference.
    let refs = references(
        &production_tokens("let s = \"crate::sources::x\"; // crate::app\n"),
        &me,
        &BTreeSet::new(),
    );
    assert!(refs.is_empty(), "{refs:?}");
    // A `mod.rs` re-exporting its child's item depends on that child.
    let zero = path("sources::redis::presets::zero");
    let refs = references(
        "pub use adopt::{LibraryRound, ZeroConfig};\nlet r = gather::gather(x);\nredis::cmd(\"GET\");\n",
        &zero,
        &BTreeSet::from(["adopt".to_owned(), "gather".to_owned()]),
    );
    assert_eq!(
        refs,
        BTreeSet::from([
            path("sources::redis::presets::zero::adopt::LibraryRound"),
            path("sources::redis::presets::zero::adopt::ZeroConfig"),
            path("sources::redis::presets::zero::gather::gather"),
        ])
    );
}

#[test]
fn the_cycle_and_reader_rules_can_fail() {
    let path = |s: &str| -> ModPath { s.split("::").map(str::to_owned).collect() };
    let deps = BTreeMap::from([
        (path("scaler::metadata"), BTreeSet::from([path("config")])),
        (path("config"), BTreeSet::from([path("config::preset")])),
        (
            path("config::preset"),
            BTreeSet::from([path("config"), path("sources::redis::presets::library")]),
        ),
        (
            path("sources::redis::presets::library"),
            BTreeSet::from([path("config"), path("sources::redis::presets")]),
        ),
        (
            path("sources::redis::presets"),
            BTreeSet::from([path("sources::redis::presets::library")]),
        ),
    ]);
    // config::preset -> config is the child's use of its parent: no cycle
    // by itself; through the library it is one.
    let groups = cyclic_groups(&file_graph(&deps));
    assert_eq!(
        groups,
        [vec![
            "config".to_owned(),
            "config::preset".into(),
            "sources::redis::presets::library".into(),
        ]]
    );
    let offences: BTreeSet<String> = readers_reaching_sources(&deps).into_iter().collect();
    let chain = "scaler::metadata -> config -> config::preset -> sources::redis::presets::library";
    // Reported where the chain first leaves the readers' reach.
    assert_eq!(offences, BTreeSet::from([chain.to_owned()]));
}

/// The longest a function outside tests may be, in lines from its `fn`
/// to its closing brace (tokio-rs/mini-redis, the style this follows,
/// has none longer).
const MAX_FUNCTION_LINES: usize = 80;

/// The functions allowed to be longer, at most three, each with why:
/// `(file, function, reason)`.
const LONG_FUNCTIONS: &[(&str, &str, &str)] = &[];

/// Every function with a body in `code` (comments, literals and tests
/// already blanked), as `(name, first line, lines)`.
fn functions(code: &str) -> Vec<(String, usize, usize)> {
    static FN: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\bfn\s+(\w+)").expect("regex"));
    let bytes = code.as_bytes();
    let line_at = |at: usize| code[..at].matches('\n').count() + 1;
    let mut out = Vec::new();
    for c in FN.captures_iter(code) {
        let start = c.get(0).expect("the whole match").start();
        // The body's `{`, unless a `;` at the signature's top level comes
        // first (a declaration without a body).
        let mut nesting = 0i32;
        let mut open = None;
        for (i, &b) in bytes.iter().enumerate().skip(start) {
            match b {
                b'(' | b'[' | b'<' => nesting += 1,
                b')' | b']' => nesting -= 1,
                b'>' if i > 0 && bytes[i - 1] != b'-' && bytes[i - 1] != b'=' => nesting -= 1,
                b';' if nesting <= 0 => break,
                b'{' => {
                    open = Some(i);
                    break;
                }
                _ => {}
            }
        }
        let Some(open) = open else { continue };
        let mut depth = 0usize;
        let mut close = None;
        for (i, &b) in bytes.iter().enumerate().skip(open) {
            match b {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        close = Some(i);
                        break;
                    }
                }
                _ => {}
            }
        }
        let Some(close) = close else { continue };
        let first = line_at(start);
        out.push((c[1].to_owned(), first, line_at(close) - first + 1));
    }
    out
}

/// The functions of `src/` outside tests over [`MAX_FUNCTION_LINES`],
/// longest first, as `(lines, "file:line: name")`.
fn long_functions() -> Vec<(usize, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files: Vec<PathBuf> = module_files().into_values().collect();
    files.push(root.join("src/main.rs"));
    let mut out = Vec::new();
    for path in files {
        let rel = path.strip_prefix(root).expect("under the crate");
        let rel = rel.to_string_lossy().replace('\\', "/");
        let text = std::fs::read_to_string(&path).expect("read source");
        for (name, line, lines) in functions(&production_tokens(&text)) {
            if lines > MAX_FUNCTION_LINES {
                out.push((lines, format!("{rel}:{line}: {name}")));
            }
        }
    }
    out.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    out
}

#[test]
fn no_function_outside_tests_is_over_80_lines() {
    assert!(LONG_FUNCTIONS.len() <= 3, "at most three allowed");
    let allowed = |at: &str| {
        LONG_FUNCTIONS.iter().any(|(file, name, why)| {
            !why.is_empty()
                && at.starts_with(&format!("{file}:"))
                && at.ends_with(&format!(": {name}"))
        })
    };
    let long: Vec<String> = long_functions()
        .into_iter()
        .filter(|(_, at)| !allowed(at))
        .map(|(n, at)| format!("{n} lines: {at}"))
        .collect();
    assert!(
        long.is_empty(),
        "{} functions over {MAX_FUNCTION_LINES} lines: {long:#?}",
        long.len()
    );
}

#[test]
fn the_function_length_check_can_fail() {
    let body = "    let x = 1;\n".repeat(81);
    let code = format!(
        "fn short(a: [u8; 2]) -> Vec<u8> {{\n    a.to_vec()\n}}\n\
         fn long() {{\n{body}}}\n\
         trait T {{\n    fn declared(&self) -> u8;\n}}\n"
    );
    let found = functions(&code);
    assert_eq!(
        found,
        [("short".to_owned(), 1, 3), ("long".to_owned(), 4, 83)]
    );
    // Braces inside literals and comments do not count.
    let code = production_tokens(
        "fn f() {\n    let s = \"}}\"; // }\n    let c = '}';\n    let b = b'{';\n}\n",
    );
    assert_eq!(functions(&code), [("f".to_owned(), 1, 5)]);
}

/// Every queue library the exporter knows: a pattern matching its name in
/// code (case-insensitive, not inside a longer word: `bull` is not
/// `bullmq`), and the files of `src/sources/redis/presets/libraries/` that may name
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
    ("resque", &["resque.rs"]),
];

/// `text` without the registration list (`LIBRARIES` and the `mod` lines
/// of `presets/mod.rs` and `presets/libraries/mod.rs`), the one place
/// every library is named.
fn without_registration(text: &str) -> String {
    let mut out = String::new();
    let mut in_list = false;
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with("pub static LIBRARIES") {
            in_list = true;
        }
        let module_line = (t.starts_with("mod ")
            || t.starts_with("pub mod ")
            || t.starts_with("pub(super) mod "))
            && t.ends_with(';');
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
    let libraries = presets.join("libraries");
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
        if path == presets.join("mod.rs") || path == libraries.join("mod.rs") {
            code = without_registration(&code);
        }
        for (re, own) in &patterns {
            let mine = path.parent() == Some(libraries.as_path())
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

/// The library API: the one module of the crate a library's file
/// (`presets/libraries/`) may
/// import from (it re-exports what a library needs of the engine), beside
/// its own file and a library whose layout it shares.
const LIBRARY_API: &[&str] = &["sources", "redis", "presets", "library"];

/// The module files a library's file `me` refers to (`refs`) beyond the
/// library API, itself and the libraries `allowed` (a library sharing its
/// layout); a path of no module file (the crate root) counts too.
fn beyond_the_library_api(
    me: &ModPath,
    refs: &BTreeSet<ModPath>,
    files: &BTreeSet<ModPath>,
    allowed: &BTreeSet<ModPath>,
) -> Vec<String> {
    refs.iter()
        .filter(|r| match file_of(r, files) {
            Some(f) => f != *me && f.as_slice() != LIBRARY_API && !allowed.contains(&f),
            None => true,
        })
        .map(show)
        .collect()
}

/// Each library file's imports (production code) beyond the library API,
/// as `file: path`. A library's file is the first of its row in
/// [`LIBRARY_NAMES`]; it may use the libraries whose rows list it.
fn library_imports_beyond_the_api() -> Vec<String> {
    let files: BTreeSet<ModPath> = module_files().into_keys().collect();
    let refs = module_references();
    let presets = &LIBRARY_API[..LIBRARY_API.len() - 1];
    let module = |file: &str| -> ModPath {
        let stem = file.trim_end_matches(".rs");
        presets
            .iter()
            .copied()
            .chain(["libraries", stem])
            .map(str::to_owned)
            .collect()
    };
    let mut found = Vec::new();
    for (_, own) in LIBRARY_NAMES {
        let me = module(own[0]);
        let allowed: BTreeSet<ModPath> = LIBRARY_NAMES
            .iter()
            .filter(|(_, o)| o.contains(&own[0]))
            .map(|(_, o)| module(o[0]))
            .collect();
        let mine = refs.get(&me).expect("a library file");
        for r in beyond_the_library_api(&me, mine, &files, &allowed) {
            found.push(format!("{}: {r}", own[0]));
        }
    }
    found
}

#[test]
fn a_library_file_imports_only_the_library_api() {
    let found = library_imports_beyond_the_api();
    assert!(
        found.is_empty(),
        "library files importing beyond presets/library.rs: {found:#?}"
    );
}

#[test]
fn the_library_api_check_can_fail() {
    let path = |s: &str| -> ModPath { s.split("::").map(str::to_owned).collect() };
    let me = path("sources::redis::presets::libraries::bull");
    let files: BTreeSet<ModPath> = [
        "sources::redis::commands",
        "sources::redis::presets::library",
        "sources::redis::presets::libraries::bull",
        "sources::redis::presets::libraries::bullmq",
        "sources::redis::presets::poll",
    ]
    .into_iter()
    .map(path)
    .collect();
    let code = "use super::super::library::{Library, key};\n\
                use super::bullmq::marks_cmd;\n\
                use super::super::super::commands::Conn;\n\
                fn f() { super::super::poll::poll(); super::bull::g(); }\n";
    let refs = references(code, &me, &BTreeSet::new());
    let allowed = BTreeSet::from([path("sources::redis::presets::libraries::bullmq")]);
    assert_eq!(
        beyond_the_library_api(&me, &refs, &files, &allowed),
        vec![
            "sources::redis::commands::Conn".to_owned(),
            "sources::redis::presets::poll::poll".to_owned(),
        ]
    );
}

/// Zero config's folder and its stages, in the order a round runs them;
/// the leaves every stage may use.
const ZERO: &[&str] = &["sources", "redis", "presets", "zero"];
const ZERO_STAGES: &[&str] = &["gather", "classify", "adopt"];
const ZERO_LEAVES: &[&str] = &["marks", "learnt"];

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
    let found = zero_config_against_the_flow(&module_references(), &files);
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
