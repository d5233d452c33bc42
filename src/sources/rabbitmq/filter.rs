//! Which queues a RabbitMQ source reports: `vhosts`, `include`, `exclude`
//! and the exact `queues` list, applied locally to whatever the broker sent
//! (a server-side filter is only ever a pre-filter).

use std::collections::HashSet;

use crate::config::RabbitSourceConfig;

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
    /// Compiles the filter. The regexes were compiled once during config
    /// validation, so compiling them again cannot fail; a failure would only
    /// drop that regex.
    pub fn new(config: &RabbitSourceConfig) -> Self {
        let compile = |re: &Option<String>| re.as_deref().and_then(|r| regex::Regex::new(r).ok());
        QueueFilter {
            vhosts: config.vhosts.iter().cloned().collect(),
            include: compile(&config.include),
            exclude: compile(&config.exclude),
            names: config.queues.iter().cloned().collect(),
        }
    }

    /// Whether the queue `name` in `vhost` is reported.
    pub fn keeps(&self, vhost: &str, name: &str) -> bool {
        (self.vhosts.is_empty() || self.vhosts.contains(vhost))
            && (self.names.is_empty() || self.names.contains(name))
            && self.include.as_ref().is_none_or(|re| re.is_match(name))
            && !self.exclude.as_ref().is_some_and(|re| re.is_match(name))
    }

    /// The `include` regex, for a server-side pre-filter.
    pub fn include(&self) -> Option<&str> {
        self.include.as_ref().map(regex::Regex::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: &str) -> RabbitSourceConfig {
        let yaml = format!("name: r\ntype: rabbitmq\n{extra}");
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
}
