//! Zero config's log line: which libraries (and prefixes) and how many
//! plain keys a round recognised, written at start and whenever the
//! picture changes.

use std::collections::BTreeMap;

use super::super::tracked::KeyState;
use super::library::default_prefix;
use super::library::rank;
use super::spec::Preset;
use super::zero::LeftOut;
use crate::config::KeyType;
use crate::snapshot::PresetKind;

/// The library's name as its users write it, for the log line.
pub fn library(kind: PresetKind) -> &'static str {
    super::library::of(kind).map_or(kind.as_str(), |l| l.title())
}

/// How many keys of each type `states` holds (the plain keys of the log
/// line); keys of unknown type are left out.
pub fn plain_counts<'a>(states: impl Iterator<Item = &'a KeyState>) -> BTreeMap<KeyType, usize> {
    let mut counts = BTreeMap::new();
    for state in states {
        if let KeyState::Typed(t) = state {
            *counts.entry(*t).or_default() += 1;
        }
    }
    counts
}

/// `n thing`, `n things`.
fn plural(n: usize, thing: &str) -> String {
    format!("{n} {thing}{}", if n == 1 { "" } else { "s" })
}

/// The log line of what zero config sees: "recognised 3 BullMQ queues
/// (prefixes bull, myapp), 2 RQ queues; 1 plain list" (pure). `plain` counts
/// the plain keys by type; `left_out`, what the round could not tell, is
/// said last when there is any.
pub fn picture(
    entries: &[(&Preset, usize)],
    plain: &BTreeMap<KeyType, usize>,
    left_out: &LeftOut,
) -> String {
    // In the list's order of libraries.
    type ByKind<'a> = BTreeMap<(usize, PresetKind), (usize, Vec<&'a str>)>;
    let mut by_kind: ByKind<'_> = BTreeMap::new();
    for (preset, queues) in entries {
        let kind = preset.kind();
        let e = by_kind.entry((rank(kind), kind)).or_default();
        e.0 += queues;
        if super::lib(preset).options().contains(&"prefix") {
            e.1.push(&preset.prefix);
        }
    }
    let libs: Vec<String> = by_kind
        .into_iter()
        .map(|((_, kind), (n, prefixes))| {
            let mut s = plural(n, &format!("{} queue", library(kind)));
            if prefixes.len() > 1 || prefixes.iter().any(|p| *p != default_prefix(kind)) {
                let word = if prefixes.len() > 1 {
                    "prefixes"
                } else {
                    "prefix"
                };
                s.push_str(&format!(" ({word} {})", prefixes.join(", ")));
            }
            s
        })
        .collect();
    let keys: Vec<String> = plain
        .iter()
        .map(|(t, n)| plural(*n, &format!("plain {}", t.as_str())))
        .collect();
    let libs = if libs.is_empty() {
        "no queue library".to_string()
    } else {
        libs.join(", ")
    };
    let keys = if keys.is_empty() {
        "no plain key".to_string()
    } else {
        keys.join(", ")
    };
    let mut line = format!("recognised {libs}; {keys}");
    let over = match left_out.over.as_slice() {
        [] => None,
        [(mark, bound), ..] => Some(format!(
            "{} not read for discovery's bounds ({mark:?}: {bound}{})",
            plural(left_out.over.len(), "library mark"),
            if left_out.over.len() > 1 { ", …" } else { "" }
        )),
    };
    let refused = (!left_out.unread.is_empty()).then(|| {
        format!(
            "Redis refused reading {}",
            plural(left_out.unread.len(), "library mark")
        )
    });
    let why: Vec<String> = refused.into_iter().chain(over).collect();
    if !why.is_empty() {
        line.push_str(&format!(
            "; {} left out: {}",
            plural(left_out.keys, "key"),
            why.join("; ")
        ));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::super::bounded::Bound;
    use super::*;
    use crate::snapshot::Reason;

    #[test]
    fn the_picture_names_libraries_prefixes_and_plain_keys() {
        let bull = |p: &str| Preset::new(PresetKind::named("bullmq"), p);
        let (a, b, rq) = (
            bull("bull"),
            bull("myapp"),
            Preset::new(PresetKind::named("rq"), "rq"),
        );
        let plain = BTreeMap::from([(KeyType::List, 1)]);
        assert_eq!(
            picture(&[(&a, 2), (&b, 1), (&rq, 2)], &plain, &LeftOut::default()),
            "recognised 3 BullMQ queues (prefixes bull, myapp), 2 RQ queues; 1 plain list"
        );
        assert_eq!(
            picture(&[], &BTreeMap::new(), &LeftOut::default()),
            "recognised no queue library; no plain key"
        );
    }

    #[test]
    fn the_picture_says_what_an_unread_mark_left_out() {
        let left_out = LeftOut {
            unread: vec![Reason::Auth; 2],
            keys: 7,
            ..LeftOut::default()
        };
        assert_eq!(
            picture(&[], &BTreeMap::from([(KeyType::Zset, 2)]), &left_out),
            "recognised no queue library; 2 plain zsets; 7 keys left out: \
             Redis refused reading 2 library marks"
        );
        let left_out = LeftOut {
            keys: 3,
            over: vec![
                ("bull:q4:meta".into(), Bound::MaxKeys(3)),
                ("queues".into(), Bound::MaxKeys(3)),
            ],
            ..LeftOut::default()
        };
        assert_eq!(
            picture(&[], &BTreeMap::new(), &left_out),
            "recognised no queue library; no plain key; 3 keys left out: \
             2 library marks not read for discovery's bounds \
             (\"bull:q4:meta\": beyond max_keys 3, …)"
        );
    }
}
