//! Reading an enqueue time out of a peeked list item.

use crate::config::AgeSpec;
use crate::time::TimeUnit;

/// The item's timestamp in unix seconds, or `None` if it cannot be read.
pub fn item_timestamp(item: &[u8], spec: &AgeSpec) -> Option<f64> {
    match &spec.field {
        Some(field) => json_timestamp(item, field.pointer(), spec.unit),
        None => spec.unit.text_to_seconds(std::str::from_utf8(item).ok()?),
    }
}

/// The timestamp at the JSON pointer `pointer` of the JSON document `item`
/// (a number or text in `unit`), in unix seconds; `None` if `item` is no
/// JSON or holds no such stamp.
pub fn json_timestamp(item: &[u8], pointer: &str, unit: TimeUnit) -> Option<f64> {
    let json: serde_json::Value = serde_json::from_slice(item).ok()?;
    match json.pointer(pointer)? {
        serde_json::Value::Number(n) => unit.number_to_seconds(n.as_f64()?),
        serde_json::Value::String(s) => unit.text_to_seconds(s),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ListEnd;
    use crate::time::TimeUnit;

    fn spec(field: Option<&str>, unit: TimeUnit) -> AgeSpec {
        AgeSpec {
            end: ListEnd::Head,
            field: field.map(|f| crate::config::JsonField::new(f).unwrap()),
            unit,
        }
    }

    #[test]
    fn json_field_in_every_unit() {
        let s = spec(Some("enqueued_at"), TimeUnit::Auto);
        assert_eq!(
            item_timestamp(br#"{"enqueued_at":1700000000}"#, &s),
            Some(1.7e9)
        );
        assert_eq!(
            item_timestamp(br#"{"enqueued_at":1700000000000}"#, &s),
            Some(1.7e9)
        );
        assert_eq!(
            item_timestamp(br#"{"enqueued_at":1700000000000000}"#, &s),
            Some(1.7e9)
        );
        assert_eq!(
            item_timestamp(br#"{"enqueued_at":1700000000000000000}"#, &s),
            Some(1.7e9)
        );
        assert_eq!(
            item_timestamp(br#"{"enqueued_at":"2023-11-14T22:13:20Z"}"#, &s),
            Some(1.7e9)
        );
        let ms = spec(Some("enqueued_at"), TimeUnit::Milliseconds);
        assert_eq!(
            item_timestamp(br#"{"enqueued_at":"1700000000000"}"#, &ms),
            Some(1.7e9)
        );
    }

    #[test]
    fn dotted_paths_and_whole_items() {
        let s = spec(Some("meta.times.0"), TimeUnit::Seconds);
        assert_eq!(
            item_timestamp(br#"{"meta":{"times":[12.5]}}"#, &s),
            Some(12.5)
        );
        let whole = spec(None, TimeUnit::Auto);
        assert_eq!(item_timestamp(b"1700000000", &whole), Some(1.7e9));
        assert_eq!(
            item_timestamp(b"2023-11-14T23:13:20+01:00", &whole),
            Some(1.7e9)
        );
    }

    #[test]
    fn garbage_is_unknown_not_zero() {
        let s = spec(Some("enqueued_at"), TimeUnit::Auto);
        assert_eq!(item_timestamp(b"not json", &s), None);
        assert_eq!(item_timestamp(br#"{"other":1}"#, &s), None);
        assert_eq!(item_timestamp(br#"{"enqueued_at":true}"#, &s), None);
        assert_eq!(
            item_timestamp(b"\xff\xfe", &spec(None, TimeUnit::Auto)),
            None
        );
        assert_eq!(
            item_timestamp(b"yesterday", &spec(None, TimeUnit::Rfc3339)),
            None
        );
    }
}
