//! What readers know of the queue libraries ([`Libraries`]): each one's
//! config name (what a trigger's `preset` may say), its name as its users
//! write it, and where its queues' arrivals come from. Sources fill it
//! from their list of libraries and it travels with every snapshot, so a
//! reader learns the libraries from the snapshot, never from the
//! sources' registry nor through the config.

use super::PresetKind;

/// Where a library's queues' arrivals come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrivals {
    /// Nowhere the exporter reads: a queue's arrival rate is unknown
    /// without `counters:`.
    Unknown,
    /// A job id counter every added job increments, read as the queue's
    /// `published` counter.
    IdCounter,
    /// A processed total per queue beside its depth: arrivals are
    /// Δ(waiting + active) + Δprocessed.
    ProcessedTotal,
}

/// One library, as readers need it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LibraryFacts {
    /// Its config name (`preset: rq`), also the `preset` label.
    pub kind: PresetKind,
    /// Its name as its users write it (`RQ`), for messages.
    pub title: &'static str,
    /// Where its queues' arrivals come from.
    pub arrivals: Arrivals,
}

/// Every library the exporter knows, in the list's order (that of
/// messages).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Libraries(Vec<LibraryFacts>);

impl Libraries {
    /// The libraries `facts` tells of, in that order.
    pub fn new(facts: Vec<LibraryFacts>) -> Self {
        Libraries(facts)
    }

    /// The library whose config name is `name`, if one is.
    pub fn named(&self, name: &str) -> Option<PresetKind> {
        self.0
            .iter()
            .find(|l| l.kind.as_str() == name)
            .map(|l| l.kind)
    }

    /// Every library's config name (for messages).
    pub fn names(&self) -> Vec<&'static str> {
        self.0.iter().map(|l| l.kind.as_str()).collect()
    }

    /// The names users write of the libraries whose arrivals come from
    /// `from` (for messages saying what a queue without them lacks).
    pub fn arriving_from(&self, from: Arrivals) -> Vec<&'static str> {
        self.0
            .iter()
            .filter(|l| l.arrivals == from)
            .map(|l| l.title)
            .collect()
    }
}
