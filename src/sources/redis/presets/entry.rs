//! Resolving a `- preset:` entry as the config holds it (plain data:
//! `config::PresetEntry`) against the library it names: the options it
//! wrote are the library's to read as its own struct, default and check
//! ([`Library::configure`]). Done when the config is checked
//! (`app::preflight`, so `check` and start-up refuse a bad entry with one
//! line naming file, field and problem) and when a source is built.

use super::library::{self, Library, OptionError, Written};
use super::spec::{Preset, PresetSpec};
use crate::config::{CounterKeys, PresetEntry, QUEUE_PLACEHOLDER, check_counters};

/// A problem with an entry: the path it names (the entry's own, or one of
/// its fields) and the problem, as config errors write them.
pub type EntryError = (String, String);

/// The entry `entry` resolved against its library.
pub fn resolve(entry: &PresetEntry) -> Result<PresetSpec, EntryError> {
    let at = || entry.at.clone();
    let Some(lib) = library::named(&entry.library) else {
        return Err((
            at(),
            format!(
                "preset: unknown preset {:?} (expected one of {})",
                entry.library,
                library::names().join(", ")
            ),
        ));
    };
    let written = Written {
        library: lib.kind(),
        options: &entry.options,
        at: &entry.at,
    };
    let preset = lib.configure(&written).map_err(|e| match e {
        OptionError::Typed { path, problem } => (path, problem),
        OptionError::Refused(problem) => (at(), problem),
    })?;
    let counters = match &entry.counters {
        Some(c) => Some(preset_counters(lib, &preset, c.clone()).map_err(|m| (at(), m))?),
        None => None,
    };
    Ok(PresetSpec { preset, counters })
}

/// Every preset entry of a source resolved, in config order; the first
/// problem otherwise.
pub fn resolve_all(entries: &[PresetEntry]) -> Result<Vec<PresetSpec>, EntryError> {
    entries.iter().map(resolve).collect()
}

/// Checks a preset entry's `counters:`. An entry that reports one logical
/// queue known at load (its fixed name: rediswq's `name`, priority-zset's
/// prefix), may name its keys outright; a [`QUEUE_PLACEHOLDER`] is
/// replaced by that name now. Elsewhere the entry reports as many queues
/// as its library has, so every key must be a template: one key for all
/// of them would count each queue's jobs as every queue's arrivals.
fn preset_counters(
    lib: &dyn Library,
    preset: &Preset,
    c: CounterKeys,
) -> Result<CounterKeys, String> {
    check_counters(&c)?;
    if let (true, [name]) = (lib.takes_counters(), lib.fixed_names(preset).as_slice()) {
        return Ok(c.for_the_queue(name));
    }
    if let Some((field, key)) = c.named().find(|(_, k)| !k.contains(QUEUE_PLACEHOLDER)) {
        return Err(format!(
            "counters.{field}: key {key:?} has no {QUEUE_PLACEHOLDER}: preset {} reports \
             several queues, each needs its own key (for example \"{key}:{QUEUE_PLACEHOLDER}\")",
            preset.kind()
        ));
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::super::spec::DEFAULT_STALLED_CHECK_LIMIT;
    use crate::snapshot::PresetKind;
    use std::time::Duration;

    /// The entry `yaml` resolved; `Err` the problem (the path left out:
    /// every entry here is at `q`).
    fn parse(yaml: serde_json::Value) -> Result<PresetSpec, String> {
        let serde_json::Value::Object(mut options) = yaml else {
            panic!("an entry is a map");
        };
        let library = options
            .remove("preset")
            .unwrap()
            .as_str()
            .unwrap()
            .to_owned();
        let counters = options
            .remove("counters")
            .map(|c| serde_json::from_value(c).map_err(|e| e.to_string()))
            .transpose()?;
        let entry = PresetEntry {
            library,
            options,
            counters,
            at: "q".into(),
        };
        resolve(&entry).map_err(|(_, m)| m)
    }

    #[test]
    fn defaults_follow_the_libraries() {
        let c = parse(serde_json::json!({"preset": "celery"})).unwrap();
        assert_eq!(
            c.preset,
            Preset {
                queues: vec!["celery".into()],
                priority_steps: vec![0, 3, 6, 9],
                sep: "\x06\x16".into(),
                visibility_timeout: Duration::from_secs(3600),
                ..Preset::new(PresetKind::named("celery"), "")
            }
        );
        let b = parse(serde_json::json!({"preset": "bullmq"})).unwrap();
        assert_eq!(b.preset, Preset::new(PresetKind::named("bullmq"), "bull"));
        assert_eq!(b.preset.stalled_check_limit, DEFAULT_STALLED_CHECK_LIMIT);
        let r = parse(serde_json::json!({"preset": "rq", "prefix": "myrq"})).unwrap();
        assert_eq!(r.preset, Preset::new(PresetKind::named("rq"), "myrq"));
    }

    #[test]
    fn bad_entries_name_the_field() {
        let cases = [
            (
                serde_json::json!({"preset": "bull3"}),
                "preset: unknown preset",
            ),
            (
                serde_json::json!({"preset": "rq", "sep": ":"}),
                "sep: not an option of preset rq",
            ),
            (serde_json::json!({"preset": "rediswq"}), "name: required"),
            (
                serde_json::json!({"preset": "celery", "priority_steps": [3, 6]}),
                "priority_steps: must start at 0",
            ),
            (
                serde_json::json!({"preset": "celery", "visibility_timeout": "soon"}),
                "visibility_timeout: ",
            ),
            (
                serde_json::json!({"preset": "bull", "queues": ["a"]}),
                "queues: not an option of preset bull (its options: prefix, stalled_check_limit)",
            ),
            (
                serde_json::json!({"preset": "bullmq", "stalled_check_limit": 0}),
                "stalled_check_limit: must be greater than 0",
            ),
            (
                serde_json::json!({"preset": "rq", "counters": {"processed": "p"}}),
                "counters.processed: key \"p\" has no {queue}: preset rq reports several queues",
            ),
            (
                serde_json::json!({"preset": "celery", "queues": ["one"],
                                   "counters": {"enqueued": "e:{queue}", "failed": "f"}}),
                "counters.failed: key \"f\" has no {queue}: preset celery reports several queues",
            ),
            (
                serde_json::json!({"preset": "rediswq", "name": "q", "counters": {}}),
                "counters: name processed, failed and/or enqueued keys",
            ),
        ];
        for (yaml, want) in cases {
            let got = parse(yaml.clone()).unwrap_err();
            assert!(got.starts_with(want), "{yaml}: {got}");
        }
    }

    #[test]
    fn counters_on_a_single_queue_preset() {
        let p = parse(serde_json::json!({
            "preset": "priority-zset",
            "counters": {"processed": "stats:processed", "failed": "stats:failed"}
        }))
        .unwrap();
        assert_eq!(
            p.counters,
            Some(CounterKeys {
                processed: Some("stats:processed".into()),
                failed: Some("stats:failed".into()),
                enqueued: None,
            })
        );
        let p = parse(serde_json::json!({
            "preset": "rediswq", "name": "q", "counters": {"enqueued": "q:added"}
        }))
        .unwrap();
        assert_eq!(
            p.counters.and_then(|c| c.enqueued).as_deref(),
            Some("q:added")
        );
        let e = parse(serde_json::json!({
            "preset": "rediswq", "name": "q", "counters": {"enqueued": ""}
        }))
        .unwrap_err();
        assert_eq!(e, "counters: keys must not be empty");
    }

    #[test]
    fn a_template_names_each_queues_own_counter() {
        let p = parse(serde_json::json!({
            "preset": "sidekiq",
            "counters": {"enqueued": "myapp:{queue}:in:{queue}", "processed": "done:{queue}"}
        }))
        .unwrap();
        let c = p.counters.unwrap();
        assert!(c.per_queue());
        let keys: Vec<Vec<u8>> = c.keys_for(b"hi\xff").collect();
        assert_eq!(
            keys,
            [b"done:hi\xff".to_vec(), b"myapp:hi\xff:in:hi\xff".to_vec()]
        );
    }

    #[test]
    fn a_single_queue_entry_fills_its_template_at_load() {
        let p = parse(serde_json::json!({
            "preset": "rediswq", "name": "job2", "counters": {"enqueued": "added:{queue}"}
        }))
        .unwrap();
        let c = p.counters.unwrap();
        assert!(!c.per_queue());
        assert_eq!(c.enqueued.as_deref(), Some("added:job2"));
        let p = parse(serde_json::json!({
            "preset": "priority-zset", "counters": {"processed": "{queue}:done"}
        }))
        .unwrap();
        assert_eq!(p.counters.unwrap().processed.as_deref(), Some("jobs:done"));
    }
}
