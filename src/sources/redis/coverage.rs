//! What a Redis source's last discovery left unread, as the snapshot's
//! [`Coverage`]: keys found beyond `max_keys` (or colliding with another
//! key's label), preset queues beyond it, and zero config's keys held back
//! because Redis refused reading a library's mark. Built when a round is
//! adopted and handed to every poll until the next (the gaps are shared,
//! so a poll copies no name).

use std::collections::BTreeSet;

use super::discovery::{Discovered, NAMED_BEYOND};
use super::glob;
use super::presets::zero::LeftOut;
use crate::config::RedisSourceConfig;
use crate::snapshot::{Coverage, EveryName, ExactNames, Gap, GapKind, HiddenNames, NameQuery};

/// The gaps of the last round, by what made them.
#[derive(Debug, Default)]
pub struct Unread {
    /// Plain keys beyond `max_keys` or colliding (the last full round's).
    plain: Option<Gap>,
    /// Preset queues beyond what `max_keys` leaves.
    presets: Option<Gap>,
    /// Keys and names an unread library mark may own.
    library: Vec<Gap>,
    /// The last round ran out of time: keys made since the round before
    /// may exist unseen.
    unfinished: Option<Gap>,
}

impl Unread {
    /// The coverage to publish with a poll.
    pub fn coverage(&self) -> Coverage {
        let gaps = self
            .plain
            .iter()
            .chain(&self.presets)
            .chain(&self.library)
            .chain(&self.unfinished)
            .cloned()
            .collect();
        Coverage::with_gaps(gaps)
    }

    /// Records that the last round did not finish within `deadline`.
    pub fn set_unfinished(&mut self, deadline: std::time::Duration) {
        self.unfinished = Some(Gap::new(
            GapKind::RoundUnfinished,
            EveryName,
            format!(
                "the last discovery round did not finish within {}, so keys made since the \
                 round before are not known",
                humantime::format_duration(deadline)
            ),
        ));
    }

    /// Records that a round finished.
    pub fn set_finished(&mut self) {
        self.unfinished = None;
    }

    /// Records the plain keys a round found and did not track.
    pub fn set_plain(&mut self, found: &Discovered, config: &RedisSourceConfig) {
        self.plain = plain_gap(found, config);
    }

    /// Records the preset queues beyond `max_keys` (`names`, their labels).
    pub fn set_presets(&mut self, names: &[String], max_keys: usize) {
        self.presets = (!names.is_empty()).then(|| {
            Gap::new(
                GapKind::MaxKeys,
                ExactNames(names.iter().cloned().collect()),
                format!(
                    "{} preset queues beyond max_keys {max_keys} are not read ({})",
                    names.len(),
                    examples(names.iter())
                ),
            )
        });
    }

    /// Records what a round could not tell for unread library marks
    /// (refused, or not read for a bound).
    pub fn set_library(&mut self, left_out: &LeftOut) {
        self.library.clear();
        let over: Vec<String> = left_out
            .over
            .iter()
            .map(|(mark, bound)| format!("{mark:?} ({bound})"))
            .collect();
        if !left_out.withheld.is_empty() {
            let why = match (left_out.unread.is_empty(), over.is_empty()) {
                (false, true) => "Redis refused reading a queue library's mark".to_string(),
                (true, _) => format!(
                    "a queue library's mark was not read for discovery's bounds ({})",
                    over_examples(&over)
                ),
                (false, false) => format!(
                    "Redis refused reading a queue library's mark and others were not read \
                     for discovery's bounds ({})",
                    over_examples(&over)
                ),
            };
            let kind = match left_out.unread.is_empty() {
                true => GapKind::DiscoveryBounds,
                false => GapKind::Refused,
            };
            self.library.push(Gap::new(
                kind,
                ExactNames(left_out.withheld.iter().cloned().collect()),
                format!(
                    "{why}, so {} keys it may own are held back, neither the library's nor \
                     plain ({})",
                    left_out.withheld.len(),
                    examples(left_out.withheld.iter())
                ),
            ));
        }
        let hides = &left_out.over_hides;
        if hides.any || !hides.names.is_empty() {
            let cause = format!(
                "{} queue library marks were not read for discovery's bounds ({}), so which \
                 queues those libraries hold is unknown",
                over.len(),
                over_examples(&over)
            );
            self.library.push(match hides.any {
                true => Gap::new(GapKind::DiscoveryBounds, EveryName, cause),
                false => Gap::new(
                    GapKind::DiscoveryBounds,
                    ExactNames(hides.names.iter().cloned().collect()),
                    cause,
                ),
            });
        }
        if !left_out.names_unknown.is_empty() {
            // A library's queue that holds a job keeps it in a key under
            // the unread mark's prefix, named after the queue: its name is
            // a run of that key's `:`-separated parts (`rq:queue:high`,
            // `bull:email:wait`, `asynq:{default}:pending`).
            // And the names its library says such a mark hides, where they
            // are no run of parts (a queue named before a `.` suffix), or
            // every name, where its keys found do not tell them.
            let marks = left_out.names_unknown.iter().map(|m| m.as_bytes());
            let hidden = super::presets::zero::hides(marks);
            let names = left_out
                .withheld
                .iter()
                .chain(&left_out.names_unknown)
                .flat_map(|k| name_runs(k))
                .chain(hidden.names)
                .collect();
            let cause = format!(
                "Redis refused reading {} (a queue library's registry or mark), so which \
                 queues that library holds is unknown, and this name may be one of them",
                examples(left_out.names_unknown.iter())
            );
            self.library.push(match hidden.every {
                true => Gap::new(GapKind::Refused, EveryName, cause),
                false => Gap::new(GapKind::Refused, ExactNames(names), cause),
            });
        }
    }
}

/// The gap of a round's untracked plain keys: their names when the round
/// named them all, else the patterns they fell under (every name in zero
/// config, which has none).
fn plain_gap(found: &Discovered, config: &RedisSourceConfig) -> Option<Gap> {
    if found.dropped == 0 {
        return None;
    }
    let over = found.dropped - found.collisions;
    let mut why = Vec::new();
    if over > 0 {
        why.push(format!(
            "{over} keys found beyond max_keys {} are not read",
            config.max_keys
        ));
    }
    if found.collisions > 0 {
        why.push(format!(
            "{} keys whose queue label another key already has are not read",
            found.collisions
        ));
    }
    // The first reason names the kind: beyond max_keys if any key was.
    let kind = match over > 0 {
        true => GapKind::MaxKeys,
        false => GapKind::LabelCollision,
    };
    let cause = format!(
        "{} ({})",
        why.join(", and "),
        examples(found.beyond.iter().map(|(n, _)| n))
    );
    if found.beyond.len() as u64 == found.dropped && found.beyond.len() < NAMED_BEYOND {
        let names = found.beyond.iter().map(|(n, _)| n.clone()).collect();
        return Some(Gap::new(kind, ExactNames(names), cause));
    }
    let specs: BTreeSet<usize> = found.beyond.iter().map(|(_, s)| *s).collect();
    let patterns: Option<Vec<Vec<u8>>> = specs
        .iter()
        .map(|&s| Some(config.queues.get(s)?.pattern()?.as_bytes().to_vec()))
        .collect();
    Some(match patterns {
        Some(p) if !p.is_empty() => Gap::new(kind, UnderPatterns(p), cause),
        _ => Gap::new(kind, EveryName, cause),
    })
}

/// Every run of `key`'s `:`-separated parts, and each part without the
/// braces of a hash tag: the names a library's queue keeping jobs in
/// `key` may have.
fn name_runs(key: &str) -> Vec<String> {
    let parts: Vec<&str> = key.split(':').collect();
    let mut names = Vec::new();
    for i in 0..parts.len() {
        for j in i + 1..=parts.len() {
            names.push(parts[i..j].join(":"));
        }
        if let Some(inner) = parts[i].strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
            names.push(inner.to_string());
        }
    }
    names
}

/// Up to three marks not read with their bound, then "…" if there are more.
fn over_examples(over: &[String]) -> String {
    let mut shown: Vec<&str> = over.iter().take(3).map(String::as_str).collect();
    if over.len() > 3 {
        shown.push("…");
    }
    shown.join(", ")
}

/// Up to three names, quoted, then "…" if there are more.
fn examples<'a>(names: impl Iterator<Item = &'a String>) -> String {
    let mut names = names.peekable();
    let mut shown: Vec<String> = names.by_ref().take(3).map(|n| format!("{n:?}")).collect();
    if names.peek().is_some() {
        shown.push("…".into());
    }
    shown.join(", ")
}

/// Any key a Redis glob of these matches: untracked keys too many to name.
#[derive(Debug)]
struct UnderPatterns(Vec<Vec<u8>>);

impl HiddenNames for UnderPatterns {
    fn may_hide(&self, query: &NameQuery<'_>) -> bool {
        self.0.iter().any(|p| {
            if query.is_glob {
                let a = glob::literal_prefix(p);
                let b = query.literal_prefix.as_bytes();
                a.starts_with(b) || b.starts_with(a)
            } else {
                glob::matches(p, query.text.as_bytes())
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::Reason;

    fn found(beyond: &[&str], dropped: u64) -> Discovered {
        Discovered {
            tracked: Vec::new(),
            dropped,
            collisions: 0,
            refused: Vec::<Reason>::new(),
            beyond: beyond.iter().map(|n| (n.to_string(), 0)).collect(),
        }
    }

    fn query<'a>(text: &'a str, selects: &'a dyn Fn(&str) -> bool) -> NameQuery<'a> {
        NameQuery::of(text, None, selects)
    }

    #[test]
    fn named_untracked_keys_hide_only_their_names() {
        let config = RedisSourceConfig::named("main");
        let gap = plain_gap(&found(&["job:11", "job:12"], 2), &config).unwrap();
        assert!(
            gap.cause.contains("2 keys found beyond max_keys"),
            "{}",
            gap.cause
        );
        let any = |_: &str| true;
        assert!(gap.names.may_hide(&query("job:11", &any)));
        assert!(!gap.names.may_hide(&query("job:1", &any)));
        let mail = |n: &str| n.starts_with("mail:");
        assert!(!gap.names.may_hide(&query("mail:*", &mail)));
    }

    #[test]
    fn untracked_keys_too_many_to_name_hide_what_their_pattern_may_match() {
        let gap = UnderPatterns(vec![b"job:*".to_vec()]);
        let any = |_: &str| true;
        assert!(gap.may_hide(&query("job:7", &any)));
        assert!(gap.may_hide(&query("job:*", &any)));
        assert!(gap.may_hide(&query("jo*", &any)));
        assert!(!gap.may_hide(&query("mail:*", &any)));
        assert!(!gap.may_hide(&query("mail:1", &any)));
    }

    #[test]
    fn an_unfinished_round_hides_every_name_until_a_round_finishes() {
        let mut unread = Unread::default();
        let any = |_: &str| true;
        unread.set_unfinished(std::time::Duration::from_secs(300));
        let gap = unread
            .coverage()
            .vouch(&query("a", &any))
            .unwrap_err()
            .clone();
        assert!(
            gap.cause.contains("did not finish within 5m"),
            "{}",
            gap.cause
        );
        unread.set_finished();
        assert!(unread.coverage().vouch(&query("a", &any)).is_ok());
    }

    #[test]
    fn an_unread_binding_hides_its_lists_and_an_unread_registry_the_names_under_it() {
        let mut unread = Unread::default();
        let any = |_: &str| true;
        unread.set_library(&LeftOut {
            unread: vec![crate::snapshot::Reason::Auth],
            withheld: vec!["celery".into()],
            ..LeftOut::default()
        });
        assert!(unread.coverage().vouch(&query("celery", &any)).is_err());
        assert!(unread.coverage().vouch(&query("other", &any)).is_ok());
        unread.set_library(&LeftOut {
            unread: vec![crate::snapshot::Reason::Auth],
            names_unknown: vec!["rq:queues".into()],
            withheld: vec!["rq:queue:high".into(), "asynq:{low}:pending".into()],
            ..LeftOut::default()
        });
        for name in ["high", "low", "rq:queue:high"] {
            let gap = unread
                .coverage()
                .vouch(&query(name, &any))
                .unwrap_err()
                .clone();
            assert!(gap.cause.contains("Redis refused reading"), "{}", gap.cause);
        }
        let gap = unread
            .coverage()
            .vouch(&query("high", &any))
            .unwrap_err()
            .clone();
        assert!(gap.cause.contains("\"rq:queues\""), "{}", gap.cause);
        // A name no key under the unread mark's prefix has is read.
        assert!(unread.coverage().vouch(&query("other", &any)).is_ok());
    }

    #[test]
    fn no_untracked_key_is_no_gap() {
        let config = RedisSourceConfig::named("main");
        assert!(plain_gap(&found(&[], 0), &config).is_none());
    }
}
