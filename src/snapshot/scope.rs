//! What queue names a source's configuration can ever report ([`QueueScope`]),
//! and the query readers ask it with ([`NameQuery`]). Separate from the
//! samples: it answers for names no poll has seen, which is how the scaler
//! tells a drained queue (0) from a typo (`NOT_FOUND`).

use std::fmt;

use super::{PresetKind, ServiceMeasure};

/// A queue name or glob a reader asks about, in the terms a [`QueueScope`]
/// needs. Readers build it; sources' scopes answer it.
#[derive(Clone, Copy)]
pub struct NameQuery<'a> {
    /// The text as given: an exact name, or a glob.
    pub text: &'a str,
    /// Whether `text` is a glob (else it names one queue exactly).
    pub is_glob: bool,
    /// What every name the glob matches starts with (the whole text when exact).
    pub literal_prefix: &'a str,
    /// Whether the query selects this queue name.
    pub selects: &'a dyn Fn(&str) -> bool,
    /// The RabbitMQ vhost the query is restricted to, if any.
    pub vhost: Option<&'a str>,
    /// The library the query is restricted to (`preset`), if any: only
    /// that library's queues can be what it names.
    pub preset: Option<PresetKind>,
}

#[cfg(test)]
impl<'a> NameQuery<'a> {
    /// A query for `text` (a glob when it holds `*`) in `vhost`, selecting
    /// what `selects` says: the one builder unit tests share.
    pub fn of(
        text: &'a str,
        vhost: Option<&'a str>,
        selects: &'a dyn Fn(&str) -> bool,
    ) -> NameQuery<'a> {
        NameQuery {
            text,
            is_glob: text.contains('*'),
            literal_prefix: &text[..text.find('*').unwrap_or(text.len())],
            selects,
            vhost,
            preset: None,
        }
    }
}

impl fmt::Debug for NameQuery<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NameQuery")
            .field("text", &self.text)
            .field("is_glob", &self.is_glob)
            .field("vhost", &self.vhost)
            .field("preset", &self.preset)
            .finish()
    }
}

/// How far a source's configuration reaches over the names a query selects,
/// from nowhere to everywhere (ordered so: a source with several entries
/// reaches as far as its widest).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reach {
    /// No name the query selects can ever be reported by this source: a
    /// typo, as far as this source is concerned.
    Never,
    /// Some selected names might be reported (or the scope cannot tell).
    Some,
    /// Every name the query selects would be reported if it existed, so a
    /// name that does not exist right now is an empty queue (Redis deletes
    /// a key when it empties).
    All,
}

/// What queue names a source's *configuration* can produce, independent of
/// what exists right now. Implemented by each source kind from its config.
pub trait QueueScope: fmt::Debug + Send + Sync {
    /// How far this source reaches over the names `query` selects.
    fn reach(&self, query: &NameQuery<'_>) -> Reach;

    /// How a queue this source would report under the query's names, were
    /// one there, would have its service time measured (a library that
    /// keeps finished jobs, a broker's ack counter) or why not (a plain
    /// key, a library that keeps none), so a `WaitTime` trigger without
    /// `processingTime` may read a drained one as 0, or is told why it
    /// needs `processingTime`. Unmeasured ([`ServiceMeasure::Unsaid`])
    /// unless the scope knows.
    fn absent_service(&self, query: &NameQuery<'_>) -> ServiceMeasure {
        let _ = query;
        ServiceMeasure::Unsaid
    }
}

/// The scope of a source that says nothing about its names: it might hold
/// anything and covers nothing (the scope of
/// [`Snapshot::initial`](super::Snapshot::initial)).
#[derive(Debug, Clone, Copy)]
pub struct AnyName;

impl QueueScope for AnyName {
    fn reach(&self, _query: &NameQuery<'_>) -> Reach {
        Reach::Some
    }
}
