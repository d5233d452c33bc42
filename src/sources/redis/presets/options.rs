//! The options of a `- preset:` entry, as a library reads them: each
//! library declares its own once, as a `#[derive(Deserialize)]
//! #[serde(deny_unknown_fields)]` struct in its file, and reads it with
//! [`Written::read`], which refuses a word the struct does not have,
//! naming the library and the words it takes ([`options_of`]), and a
//! value of the wrong type, naming its path. The checks every library
//! taking an option means the same by are here ([`prefix_or`],
//! [`stalled_check_limit`], [`timeout`]).

use std::time::Duration;

use serde::de::{self, DeserializeOwned, Visitor};

use super::spec::DEFAULT_STALLED_CHECK_LIMIT;
use crate::config::{Bounds, parse_duration, typed};
use crate::snapshot::PresetKind;

/// Why an entry's options were refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OptionError {
    /// A value of the wrong type (a list for a name...): the field's path
    /// (`sources[0].queues[1].name`) and serde's problem.
    Typed {
        /// The field's path.
        path: String,
        /// What is wrong with it.
        problem: String,
    },
    /// A word the library does not take, or a value it refuses:
    /// `field: problem`, said of the entry.
    Refused(String),
}

impl From<String> for OptionError {
    fn from(problem: String) -> Self {
        OptionError::Refused(problem)
    }
}

impl From<&str> for OptionError {
    fn from(problem: &str) -> Self {
        OptionError::Refused(problem.to_owned())
    }
}

/// The options an entry wrote beside `preset:` (and `counters:`), as
/// data, for the library it names to read.
#[derive(Debug, Clone, Copy)]
pub struct Written<'a> {
    /// The library named: the messages say whose options these are.
    pub(super) library: PresetKind,
    /// The options, by word.
    pub(super) options: &'a serde_json::Map<String, serde_json::Value>,
    /// Where the entry is (`sources[0].queues[1]`).
    pub(super) at: &'a str,
}

impl Written<'_> {
    /// The options read as the library's struct `T`: a word `T` has no
    /// field for is refused naming the library and the words it takes,
    /// in `T`'s order; a value of the wrong type, naming its path.
    pub fn read<T: DeserializeOwned>(&self) -> Result<T, OptionError> {
        let takes = options_of::<T>();
        if let Some(bad) = self.options.keys().find(|k| !takes.contains(&k.as_str())) {
            return Err(OptionError::Refused(format!(
                "{bad}: not an option of preset {} (its options: {})",
                self.library,
                takes.join(", ")
            )));
        }
        typed(serde_json::Value::Object(self.options.clone()), self.at)
            .map_err(|(path, problem)| OptionError::Typed { path, problem })
    }
}

/// The words of the options struct `T`: its fields, in its order, as
/// serde asks for them (`T` is a struct deriving `Deserialize`; any
/// other type takes no word).
pub fn options_of<T: DeserializeOwned>() -> &'static [&'static str] {
    let mut asked = FieldsAsked(None);
    // The deserializer never deserializes: it keeps the field list serde
    // hands it and stops, so the outcome is always this error.
    let _ = T::deserialize(&mut asked);
    asked.0.unwrap_or(&[])
}

/// A deserializer that only records the field list a struct asks for.
struct FieldsAsked(Option<&'static [&'static str]>);

/// The stop [`FieldsAsked`] answers with.
#[derive(Debug)]
struct Stop;

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("field list recorded")
    }
}

impl std::error::Error for Stop {}

impl de::Error for Stop {
    fn custom<M: std::fmt::Display>(_: M) -> Self {
        Stop
    }
}

impl<'de> de::Deserializer<'de> for &mut FieldsAsked {
    type Error = Stop;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
        Err(Stop)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Stop> {
        self.0 = Some(fields);
        Err(Stop)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map enum identifier ignored_any
    }
}

/// `prefix:` as written, or the library's own `default`: an empty one is
/// refused where the library has a prefix of its own (an empty prefix
/// would name other keys).
pub fn prefix_or(written: Option<String>, default: &str) -> Result<String, String> {
    match written {
        Some(p) if p.is_empty() && !default.is_empty() => Err("prefix: must not be empty".into()),
        Some(p) => Ok(p),
        None => Ok(default.to_owned()),
    }
}

/// `stalled_check_limit:` as written (more than 0), or the default.
pub fn stalled_check_limit(written: Option<usize>) -> Result<usize, String> {
    match written {
        Some(0) => Err("stalled_check_limit: must be greater than 0".into()),
        Some(n) => Ok(n),
        None => Ok(DEFAULT_STALLED_CHECK_LIMIT),
    }
}

/// The timeout option `word` as a duration, if written (a duration with
/// a unit, at most a year).
pub fn timeout(word: &str, written: Option<&str>) -> Result<Option<Duration>, String> {
    let Some(t) = written else {
        return Ok(None);
    };
    let d = parse_duration(t).map_err(|e| format!("{word}: {e}"))?;
    Bounds::YEAR.check(d).map_err(|e| format!("{word}: {e}"))?;
    Ok(Some(d))
}

/// `lib`'s preset from the options `options` (a JSON map), its refusal
/// as the message: for the libraries' own tests.
#[cfg(test)]
pub(super) fn configured(
    lib: &dyn super::library::Library,
    options: serde_json::Value,
) -> Result<super::spec::Preset, String> {
    let map = options.as_object().cloned().unwrap_or_default();
    let written = Written {
        library: lib.kind(),
        options: &map,
        at: "q",
    };
    lib.configure(&written).map_err(|e| match e {
        OptionError::Typed { path, problem } => format!("{path}: {problem}"),
        OptionError::Refused(problem) => problem,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Some library's options.
    #[derive(Debug, serde::Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Options {
        #[serde(default)]
        name: Option<String>,
        #[serde(default)]
        stalled_check_limit: Option<usize>,
    }

    fn written(options: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
        options.as_object().unwrap().clone()
    }

    #[test]
    fn a_struct_declares_its_words_in_its_order() {
        assert_eq!(options_of::<Options>(), ["name", "stalled_check_limit"]);
        assert!(options_of::<u8>().is_empty());
    }

    #[test]
    fn an_unknown_word_is_refused_naming_the_library_and_its_words() {
        let map = written(serde_json::json!({"name": "q", "sep": ":"}));
        let w = Written {
            library: PresetKind::named("rediswq"),
            options: &map,
            at: "sources[0].queues[0]",
        };
        assert_eq!(
            w.read::<Options>(),
            Err(OptionError::Refused(
                "sep: not an option of preset rediswq (its options: name, stalled_check_limit)"
                    .into()
            ))
        );
    }

    #[test]
    fn a_value_of_the_wrong_type_names_its_path() {
        let map = written(serde_json::json!({"name": ["q"]}));
        let w = Written {
            library: PresetKind::named("rediswq"),
            options: &map,
            at: "sources[0].queues[0]",
        };
        match w.read::<Options>() {
            Err(OptionError::Typed { path, .. }) => assert_eq!(path, "sources[0].queues[0].name"),
            other => panic!("{other:?}"),
        }
        let map = written(serde_json::json!({"stalled_check_limit": 3}));
        let w = Written { options: &map, ..w };
        assert_eq!(
            w.read::<Options>(),
            Ok(Options {
                name: None,
                stalled_check_limit: Some(3)
            })
        );
    }

    #[test]
    fn the_shared_checks() {
        assert_eq!(prefix_or(None, "bull"), Ok("bull".into()));
        assert_eq!(prefix_or(Some(String::new()), ""), Ok(String::new()));
        assert_eq!(
            prefix_or(Some(String::new()), "bull"),
            Err("prefix: must not be empty".into())
        );
        assert_eq!(stalled_check_limit(None), Ok(DEFAULT_STALLED_CHECK_LIMIT));
        assert!(stalled_check_limit(Some(0)).is_err());
        assert_eq!(
            timeout("heartbeat_timeout", Some("90s")),
            Ok(Some(Duration::from_secs(90)))
        );
        assert!(
            timeout("heartbeat_timeout", Some("soon"))
                .unwrap_err()
                .starts_with("heartbeat_timeout: ")
        );
    }
}
