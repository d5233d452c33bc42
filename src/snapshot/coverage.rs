//! What a source's last poll can vouch for ([`Coverage`]): the names it may
//! have left unread, and why. A reader answers a number for a name or glob
//! only through [`Coverage::vouch`], which refuses when some name the query
//! selects may hide behind a [`Gap`]: a key beyond `max_keys`, one held
//! back because a library's mark could not be read, a vhost the user may
//! not read. The scope ([`QueueScope`](super::QueueScope)) says which names
//! the configuration can produce; coverage says which of them the last
//! poll could not see, so "absent" means "empty" only where both agree.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use super::NameQuery;

/// The names one gap may hide. Implemented here for the shapes every
/// source uses, and by a source for shapes only it can test (Redis globs).
pub trait HiddenNames: fmt::Debug + Send + Sync {
    /// Whether some name `query` selects may be one of the hidden names.
    fn may_hide(&self, query: &NameQuery<'_>) -> bool;
}

/// Every name: the poll cannot tell which names it missed (a library's
/// registry it could not read names its queues).
#[derive(Debug, Clone, Copy)]
pub struct EveryName;

impl HiddenNames for EveryName {
    fn may_hide(&self, _query: &NameQuery<'_>) -> bool {
        true
    }
}

/// Exactly these names (as the `queue` label shows them), and no other.
#[derive(Debug, Clone, Default)]
pub struct ExactNames(pub BTreeSet<String>);

impl HiddenNames for ExactNames {
    fn may_hide(&self, query: &NameQuery<'_>) -> bool {
        if !query.is_glob {
            return self.0.contains(query.text);
        }
        // Only names starting with the glob's literal prefix can match it.
        self.0
            .range::<str, _>((
                std::ops::Bound::Included(query.literal_prefix),
                std::ops::Bound::Unbounded,
            ))
            .take_while(|n| n.starts_with(query.literal_prefix))
            .any(|n| (query.selects)(n))
    }
}

/// Every queue of one RabbitMQ vhost.
#[derive(Debug, Clone)]
pub struct VhostNames(pub String);

impl HiddenNames for VhostNames {
    fn may_hide(&self, query: &NameQuery<'_>) -> bool {
        query.vhost.is_none_or(|v| v == self.0)
    }
}

/// What kind of thing left names unread: the `cause` label of
/// `queue_exporter_coverage_gaps`, so an alert says what to fix (raise
/// `max_keys`, grant a read, give discovery more time) without parsing
/// KEDA's error text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum GapKind {
    /// Keys or preset queues found beyond `max_keys`.
    MaxKeys,
    /// Keys whose `queue` label another key already has.
    LabelCollision,
    /// The backend refused a read: a library's mark or registry (Redis
    /// ACL), a vhost or a queue (RabbitMQ permissions).
    Refused,
    /// A check of what could be read failed (RabbitMQ's vhost listing).
    CheckFailed,
    /// Discovery's own bounds: a library's mark beyond `max_keys`, a
    /// registry set larger than its cap.
    DiscoveryBounds,
    /// The last discovery round ran out of time.
    RoundUnfinished,
}

impl GapKind {
    /// Every kind, in label order: the metric shows each, at 0 when none.
    pub const ALL: [GapKind; 6] = [
        GapKind::MaxKeys,
        GapKind::LabelCollision,
        GapKind::Refused,
        GapKind::CheckFailed,
        GapKind::DiscoveryBounds,
        GapKind::RoundUnfinished,
    ];

    /// The `cause` label.
    pub fn as_str(self) -> &'static str {
        match self {
            GapKind::MaxKeys => "max_keys",
            GapKind::LabelCollision => "label_collision",
            GapKind::Refused => "refused",
            GapKind::CheckFailed => "check_failed",
            GapKind::DiscoveryBounds => "discovery_bounds",
            GapKind::RoundUnfinished => "round_unfinished",
        }
    }
}

/// Names a poll could not vouch for, and why.
#[derive(Debug, Clone)]
pub struct Gap {
    /// What kind of cause, for the metric.
    pub kind: GapKind,
    /// Which names it may hide.
    pub names: Arc<dyn HiddenNames>,
    /// Why, for KEDA's error message: what is unknown, such as "7 keys
    /// beyond max_keys 5 under pattern \"job:*\" were not read".
    pub cause: String,
}

impl Gap {
    /// A gap of `kind` hiding `names` because of `cause`.
    pub fn new(kind: GapKind, names: impl HiddenNames + 'static, cause: impl Into<String>) -> Self {
        Gap {
            kind,
            names: Arc::new(names),
            cause: cause.into(),
        }
    }
}

/// What the last successful poll of a source left unread. Built by the
/// source with each poll; no `Default`, so no source vouches for
/// everything by leaving a field out.
#[derive(Debug, Clone)]
pub struct Coverage {
    /// Each reason some names were not read.
    gaps: Vec<Gap>,
}

/// Proof that a query's names were all read by the poll behind the answer.
/// Only [`Coverage::vouch`] makes one, and a scaler reading carries it, so
/// no reading can be built without asking coverage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Vouched(());

impl Coverage {
    /// A poll that read every name it could report.
    pub fn complete() -> Self {
        Coverage { gaps: Vec::new() }
    }

    /// A poll that missed what `gaps` say.
    pub fn with_gaps(gaps: Vec<Gap>) -> Self {
        Coverage { gaps }
    }

    /// The gaps, for pages and logs.
    pub fn gaps(&self) -> &[Gap] {
        &self.gaps
    }

    /// How many gaps of `kind` the poll left.
    pub fn count(&self, kind: GapKind) -> usize {
        self.gaps.iter().filter(|g| g.kind == kind).count()
    }

    /// Vouches for `query` when no gap may hide a name it selects;
    /// otherwise the first such gap.
    pub fn vouch(&self, query: &NameQuery<'_>) -> Result<Vouched, &Gap> {
        match self.gaps.iter().find(|g| g.names.may_hide(query)) {
            Some(gap) => Err(gap),
            None => Ok(Vouched(())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query<'a>(text: &'a str, selects: &'a dyn Fn(&str) -> bool) -> NameQuery<'a> {
        NameQuery::of(text, None, selects)
    }

    #[test]
    fn exact_names_hide_only_themselves_and_globs_selecting_them() {
        let gap = Gap::new(
            GapKind::MaxKeys,
            ExactNames(["job:11".to_string(), "job:12".to_string()].into()),
            "beyond max_keys",
        );
        let c = Coverage::with_gaps(vec![gap]);
        let exact = |n: &str| -> bool { n == "x" };
        assert!(c.vouch(&query("job:11", &exact)).is_err());
        assert!(c.vouch(&query("job:1", &exact)).is_ok());
        let job = |n: &str| n.starts_with("job:");
        assert!(c.vouch(&query("job:*", &job)).is_err());
        let mail = |n: &str| n.starts_with("mail:");
        assert!(c.vouch(&query("mail:*", &mail)).is_ok());
        // A glob whose prefix reaches the names but whose pattern does not.
        let none = |_: &str| false;
        assert!(c.vouch(&query("job:*x", &none)).is_ok());
    }

    #[test]
    fn complete_coverage_vouches_for_everything_and_every_name_for_nothing() {
        let any = |_: &str| true;
        assert!(Coverage::complete().vouch(&query("a*", &any)).is_ok());
        let c = Coverage::with_gaps(vec![Gap::new(
            GapKind::Refused,
            EveryName,
            "registry unread",
        )]);
        assert_eq!(
            c.vouch(&query("a", &any)).map_err(|g| g.cause.clone()),
            Err("registry unread".to_string())
        );
    }

    #[test]
    fn a_vhost_gap_hides_its_vhost_and_queries_without_one() {
        let c = Coverage::with_gaps(vec![Gap::new(
            GapKind::Refused,
            VhostNames("priv".into()),
            "not readable",
        )]);
        let any = |_: &str| true;
        let mut q = query("jobs.*", &any);
        assert!(c.vouch(&q).is_err());
        q.vhost = Some("pub");
        assert!(c.vouch(&q).is_ok());
        q.vhost = Some("priv");
        assert!(c.vouch(&q).is_err());
    }
}
