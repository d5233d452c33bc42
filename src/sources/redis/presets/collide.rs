//! Two preset entries of one library in one source (zero config finds a
//! Sidekiq at the bare keys and another in a redis-namespace; BullMQ at two
//! prefixes) can name a queue alike: both samples would carry the same
//! `queue` and `preset` labels, a duplicate series that makes the whole
//! exposition invalid. Such names are told apart by the entry's prefix.

use std::collections::{BTreeMap, BTreeSet};

use super::library::default_prefix;
use super::spec::Preset;
use crate::snapshot::PresetKind;

/// The `queue` label of a sample of an entry at a non-default `prefix`
/// whose name another entry of its library also has: `<prefix>:<label>`.
pub fn qualified(prefix: &str, label: &str) -> String {
    format!("{prefix}:{label}")
}

/// One sample as [`labels`] sees it: its entry's index, the entry's
/// preset, its `queue` label and its other labels (priority-zset's
/// `priority`: one entry's samples may share a `queue` label).
pub type Seen<'a> = (usize, &'a Preset, &'a str, &'a [(String, String)]);

/// For each sample, the `queue` label it is published under: unchanged
/// unless another entry of the same library in the source has that label
/// too; then every entry whose prefix is not the library's default is
/// [`qualified`] by its prefix. A series still taken after that (a queue
/// literally named like a qualified one) is `None`: the later sample is
/// left out rather than duplicated.
pub fn labels(samples: &[Seen<'_>]) -> Vec<Option<String>> {
    let mut owners: BTreeMap<(PresetKind, &str), BTreeSet<usize>> = BTreeMap::new();
    for (entry, preset, label, _) in samples {
        owners
            .entry((preset.kind(), label))
            .or_default()
            .insert(*entry);
    }
    // A series: library, `queue` label, other labels.
    type Series<'a> = (PresetKind, String, &'a [(String, String)]);
    let mut taken: BTreeSet<Series<'_>> = BTreeSet::new();
    samples
        .iter()
        .map(|(_, preset, label, extra)| {
            let kind = preset.kind();
            let shared = owners.get(&(kind, *label)).is_some_and(|e| e.len() > 1);
            let prefix = preset.prefix.as_str();
            let name = if shared && prefix != default_prefix(kind) {
                qualified(prefix, label)
            } else {
                (*label).to_string()
            };
            taken.insert((kind, name.clone(), extra)).then_some(name)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bullmq(prefix: &str) -> Preset {
        Preset::new(PresetKind::named("bullmq"), prefix)
    }

    fn sidekiq(prefix: &str) -> Preset {
        Preset::new(PresetKind::named("sidekiq"), prefix)
    }

    #[test]
    fn a_name_two_entries_share_is_qualified_by_the_non_default_prefix() {
        let (bull, eu) = (bullmq("bull"), bullmq("myapp:eu"));
        let (bare, ns) = (sidekiq(""), sidekiq("ns"));
        let got = labels(&[
            (0, &bull, "mail", &[]),
            (0, &bull, "only-here", &[]),
            (1, &eu, "mail", &[]),
            (1, &eu, "reports", &[]),
            (2, &bare, "(all)", &[]),
            (2, &bare, "default", &[]),
            (3, &ns, "(all)", &[]),
            (3, &ns, "default", &[]),
        ]);
        let want = [
            "mail",
            "only-here",
            "myapp:eu:mail",
            "reports",
            "(all)",
            "default",
            "ns:(all)",
            "ns:default",
        ];
        assert_eq!(got, want.map(|s| Some(s.to_string())));
    }

    #[test]
    fn two_non_default_prefixes_are_both_qualified_and_libraries_stay_apart() {
        let (a, b) = (bullmq("a"), bullmq("b"));
        let rq = Preset::new(PresetKind::named("rq"), "rq");
        let got = labels(&[
            (0, &a, "mail", &[]),
            (1, &b, "mail", &[]),
            (2, &rq, "mail", &[]),
        ]);
        assert_eq!(
            got,
            [
                Some("a:mail".into()),
                Some("b:mail".into()),
                Some("mail".into())
            ]
        );
    }

    #[test]
    fn one_entrys_samples_told_apart_by_other_labels_all_stay() {
        let pz = Preset::new(PresetKind::named("priority-zset"), "jobs");
        let high = [("priority".to_string(), "high".to_string())];
        let low = [("priority".to_string(), "low".to_string())];
        let got = labels(&[(0, &pz, "jobs", &high), (0, &pz, "jobs", &low)]);
        assert_eq!(got, [Some("jobs".into()), Some("jobs".into())]);
    }

    #[test]
    fn a_label_still_taken_is_left_out_not_duplicated() {
        let (bull, x) = (bullmq("bull"), bullmq("x"));
        // Entry 0 has a queue literally named `x:mail` (not BullMQ's
        // rule, but a registry can hold anything).
        let got = labels(&[
            (0, &bull, "mail", &[]),
            (0, &bull, "x:mail", &[]),
            (1, &x, "mail", &[]),
        ]);
        assert_eq!(got, [Some("mail".into()), Some("x:mail".into()), None]);
    }
}
