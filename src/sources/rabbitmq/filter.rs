//! Which queues a RabbitMQ source reports: `vhosts`, `include`, `exclude`
//! and the exact `queues` list, applied locally to whatever the broker sent
//! (a server-side filter is only ever a pre-filter).

use std::collections::HashSet;

use crate::config::{NameRegex, RabbitSourceConfig};
use crate::snapshot::{NameQuery, QueueScope, Reach, ServiceMeasure};

/// The compiled queue filter of one source.
#[derive(Debug, Clone, Default)]
pub struct QueueFilter {
    /// Vhosts to keep; empty keeps all.
    vhosts: HashSet<String>,
    /// A queue name must match this, when set.
    include: Option<regex::Regex>,
    /// A queue name must not match this, when set.
    exclude: Option<regex::Regex>,
    /// Exact names to keep; empty keeps all.
    names: HashSet<String>,
}

impl QueueFilter {
    /// The filter of a source's configuration (its regexes are compiled at load).
    pub fn new(config: &RabbitSourceConfig) -> Self {
        let regex = |re: &Option<NameRegex>| re.as_ref().map(|r| r.regex().clone());
        QueueFilter {
            vhosts: config.vhosts.iter().cloned().collect(),
            include: regex(&config.include),
            exclude: regex(&config.exclude),
            names: config.queues.iter().cloned().collect(),
        }
    }

    /// Whether the queue `name` in `vhost` is reported.
    pub fn keeps(&self, vhost: &str, name: &str) -> bool {
        (self.vhosts.is_empty() || self.vhosts.contains(vhost)) && self.keeps_name(name)
    }

    /// Whether a queue named `name` passes the name filters (not vhosts).
    fn keeps_name(&self, name: &str) -> bool {
        (self.names.is_empty() || self.names.contains(name))
            && self.include.as_ref().is_none_or(|re| re.is_match(name))
            && !self.exclude.as_ref().is_some_and(|re| re.is_match(name))
    }

    /// The `include` regex, for a server-side pre-filter.
    pub fn include(&self) -> Option<&str> {
        self.include.as_ref().map(regex::Regex::as_str)
    }
}

/// A RabbitMQ source may report a queue only if its filters keep it. It
/// never covers a name it has not seen: RabbitMQ keeps a drained queue, so
/// a queue that is not there was deleted or misspelled (`NOT_FOUND`).
impl QueueScope for QueueFilter {
    /// A queue of the broker has its service time measured from the ack
    /// counter (`sources/rabbitmq/service.rs`), drained or not.
    fn absent_service(&self, _query: &NameQuery<'_>) -> ServiceMeasure {
        ServiceMeasure::AckRate
    }

    fn reach(&self, query: &NameQuery<'_>) -> Reach {
        // A library preset's queue lives in Redis, never in a broker.
        if query.preset.is_some() {
            return Reach::Never;
        }
        if let Some(v) = query.vhost
            && !self.vhosts.is_empty()
            && !self.vhosts.contains(v)
        {
            return Reach::Never;
        }
        let possible = if !query.is_glob {
            self.keeps_name(query.text)
        } else if !self.names.is_empty() {
            self.names
                .iter()
                .any(|n| (query.selects)(n) && self.keeps_name(n))
        } else {
            // A glob against include/exclude regexes: cannot tell, so maybe.
            true
        };
        if possible { Reach::Some } else { Reach::Never }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: &str) -> RabbitSourceConfig {
        let yaml = format!("name: r\n{extra}");
        let v: serde_json::Value = serde_norway::from_str(&yaml).unwrap();
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn include_exclude_vhosts_and_names_combine() {
        let f = QueueFilter::new(&config(
            "vhosts: [a, \"/\"]\ninclude: '^work\\.'\nexclude: '\\.tmp$'\n",
        ));
        assert!(f.keeps("a", "work.1"));
        assert!(f.keeps("/", "work.1"));
        assert!(!f.keeps("b", "work.1"));
        assert!(!f.keeps("a", "work.1.tmp"));
        assert!(!f.keeps("a", "other"));
        assert_eq!(f.include(), Some("^work\\."));

        let f = QueueFilter::new(&config("queues: [x, y]\n"));
        assert!(f.keeps("any", "x") && !f.keeps("any", "z"));
        assert!(QueueFilter::new(&config("")).keeps("v", "anything"));
    }

    fn reach(f: &QueueFilter, text: &str, vhost: Option<&str>) -> Reach {
        let is_glob = text.contains('*');
        let prefix = text.split('*').next().unwrap_or_default();
        let selects = |n: &str| {
            if is_glob {
                n.starts_with(prefix)
            } else {
                n == text
            }
        };
        f.reach(&NameQuery {
            text,
            is_glob,
            literal_prefix: prefix,
            selects: &selects,
            vhost,
            preset: None,
        })
    }

    #[test]
    fn the_scope_is_what_the_filters_keep_and_never_covers_a_missing_queue() {
        let f = QueueFilter::new(&config("vhosts: [a]\ninclude: '^work\\.'\n"));
        assert_eq!(reach(&f, "work.1", None), Reach::Some);
        assert_eq!(reach(&f, "work.1", Some("a")), Reach::Some);
        assert_eq!(reach(&f, "work.1", Some("b")), Reach::Never);
        assert_eq!(reach(&f, "other", None), Reach::Never);
        assert_eq!(reach(&f, "anything*", None), Reach::Some);

        let f = QueueFilter::new(&config("queues: [x.1, y]\n"));
        assert_eq!(reach(&f, "x.*", None), Reach::Some);
        assert_eq!(reach(&f, "z.*", None), Reach::Never);
        assert_eq!(reach(&f, "z", None), Reach::Never);
    }
}
