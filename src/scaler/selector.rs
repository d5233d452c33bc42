//! The `queue` key of trigger metadata ([`QueueSelector`]): an exact name or
//! a glob, compiled once per metadata map and matched cheaply. Apart from
//! `metadata` because matching has its own measured shortcuts (brace globs
//! as name sets, a literal prefix) and tests.

use globset::Glob;

/// The `queue` key: an exact name, which may also be a glob.
///
/// Matching runs once per trigger map and snapshot over every queue name,
/// so it is made cheap where it can be (measured: with 500 brace globs over
/// 4,000 queues, globset's per-name path handling took most of the
/// scaler's CPU): a glob of literals and `{a,b}` groups only becomes a set
/// of names; other globs run as one regex, after a literal-prefix check.
#[derive(Debug, Clone)]
pub struct QueueSelector {
    /// The text as given (trimmed).
    text: String,
    /// How a name other than `text` itself can match.
    glob: Option<GlobMatch>,
}

/// A compiled glob.
#[derive(Debug, Clone)]
enum GlobMatch {
    /// Literals and brace groups only: every name it matches.
    Names(std::collections::HashSet<String>),
    /// Wildcards: the glob's regex (as globset builds it).
    Regex(regex::bytes::Regex),
}

/// A brace-only glob expands to at most this many names; beyond, it runs
/// as a regex.
const MAX_EXPANDED_NAMES: usize = 1024;

/// Every name a glob of literals and non-nested `{a,b}` groups matches, or
/// `None` for any other glob (wildcards, classes, escapes, nesting).
fn expand_braces(text: &str) -> Option<Vec<String>> {
    if text.contains(['*', '?', '[', ']', '\\']) {
        return None;
    }
    let mut names = vec![String::new()];
    let mut rest = text;
    while !rest.is_empty() {
        let (literal, group) = match rest.find('{') {
            Some(open) => {
                let close = rest[open..].find('}')? + open;
                (&rest[..open], Some(&rest[open + 1..close]))
            }
            None => (rest, None),
        };
        if literal.contains('}') {
            return None;
        }
        for n in &mut names {
            n.push_str(literal);
        }
        let Some(group) = group else { break };
        if group.contains('{') {
            return None;
        }
        let alternatives: Vec<&str> = group.split(',').collect();
        // globset reads an empty alternative its own way: leave it to it.
        if alternatives.contains(&"") || names.len() * alternatives.len() > MAX_EXPANDED_NAMES {
            return None;
        }
        names = names
            .iter()
            .flat_map(|n| alternatives.iter().map(move |a| format!("{n}{a}")))
            .collect();
        rest = &rest[literal.len() + group.len() + 2..];
    }
    Some(names)
}

impl QueueSelector {
    /// Builds a selector; text without glob metacharacters is exact only.
    pub fn new(text: &str) -> QueueSelector {
        let has_meta = text.contains(['*', '?', '[', '{']);
        let glob = if has_meta {
            Glob::new(text)
                .ok()
                .and_then(|g| match expand_braces(text) {
                    Some(names) => Some(GlobMatch::Names(names.into_iter().collect())),
                    None => regex::bytes::Regex::new(g.regex())
                        .ok()
                        .map(GlobMatch::Regex),
                })
        } else {
            None
        };
        QueueSelector {
            text: text.to_string(),
            glob,
        }
    }

    /// The text as given.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// True when the text is used as a glob (it may still match exactly).
    pub fn is_glob(&self) -> bool {
        self.glob.is_some()
    }

    /// Every name the selector matches, when that is a finite set (an
    /// exact name, or a glob of literals and brace groups).
    pub fn names(&self) -> Option<Vec<&str>> {
        match &self.glob {
            None => Some(vec![self.text.as_str()]),
            Some(GlobMatch::Names(names)) => Some(
                std::iter::once(self.text.as_str())
                    .chain(names.iter().map(String::as_str))
                    .collect(),
            ),
            Some(GlobMatch::Regex(_)) => None,
        }
    }

    /// True when `name` equals the text or matches it as a glob.
    pub fn matches(&self, name: &str) -> bool {
        if name == self.text {
            return true;
        }
        match &self.glob {
            None => false,
            Some(GlobMatch::Names(names)) => names.contains(name),
            Some(GlobMatch::Regex(re)) => {
                name.starts_with(self.literal_prefix()) && re.is_match(name.as_bytes())
            }
        }
    }

    /// What every name the selector matches starts with: the text before
    /// its first glob metacharacter, or the whole text when it is exact.
    pub fn literal_prefix(&self) -> &str {
        if !self.is_glob() {
            return &self.text;
        }
        let end = self
            .text
            .find(['*', '?', '[', '{', '\\'])
            .unwrap_or(self.text.len());
        &self.text[..end]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_glob_matching_agrees_with_globset() {
        let globs = [
            "q:{a,b,c}",
            "{x,y}:{1,2}:tail",
            "q:{a,}",
            "jobs:*",
            "jobs:?:x",
            "j[ab]:*",
            "odd\\*name",
            "ü*{é,e}",
            "a}b{c,d}",
            "{a,{b,c}}",
        ];
        let names = [
            "q:a", "q:b", "q:c", "q:d", "q:", "x:1:tail", "y:2:tail", "x:3:tail", "jobs:",
            "jobs:1", "jobs:1:x", "ja:z", "jc:z", "odd*name", "oddXname", "üé", "üxe", "a}bc", "b",
            "c", "a",
        ];
        for glob in globs {
            let Ok(reference) = Glob::new(glob).map(|g| g.compile_matcher()) else {
                continue;
            };
            let ours = QueueSelector::new(glob);
            for name in names {
                assert_eq!(
                    ours.matches(name),
                    name == glob || reference.is_match(name),
                    "glob {glob:?} name {name:?}"
                );
            }
        }
        assert!(expand_braces("q:{a,b}{1,2}").is_some_and(|n| n.len() == 4));
        assert!(expand_braces("q:*{a,b}").is_none());
    }

    #[test]
    fn selector_matches_exactly_or_as_glob() {
        let g = QueueSelector::new("jobs:pending:*");
        assert!(g.matches("jobs:pending:high"));
        assert!(!g.matches("jobs:done:x"));
        let e = QueueSelector::new("work");
        assert!(e.matches("work") && !e.matches("work2"));
        // Not a valid glob: exact only.
        let bad = QueueSelector::new("a[b");
        assert!(!bad.is_glob() && bad.matches("a[b"));
        // A literal name with glob characters still matches itself.
        let lit = QueueSelector::new("odd*name");
        assert!(lit.matches("odd*name") && lit.matches("oddXname"));
    }
}
