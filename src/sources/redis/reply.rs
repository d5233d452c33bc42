//! Small readers for `redis::Value` replies in RESP2 or RESP3 shape.

use redis::Value;

use crate::snapshot::Reason;

/// An integer reply (or a numeric string).
pub fn as_u64(v: &Value) -> Option<u64> {
    match v {
        Value::Int(i) => u64::try_from(*i).ok(),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        Value::Double(d) if *d >= 0.0 => Some(*d as u64),
        _ => None,
    }
}

/// A float reply (or a numeric string).
pub fn as_f64(v: &Value) -> Option<f64> {
    match v {
        Value::Int(i) => Some(*i as f64),
        Value::Double(d) => Some(*d),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        _ => None,
    }
}

/// A string reply.
pub fn as_str(v: &Value) -> Option<&str> {
    match v {
        Value::BulkString(b) => std::str::from_utf8(b).ok(),
        Value::SimpleString(s) => Some(s),
        Value::VerbatimString { text, .. } => Some(text),
        Value::Okay => Some("OK"),
        _ => None,
    }
}

/// A string reply's raw bytes (binary-safe, unlike [`as_str`]).
pub fn as_bytes(v: &Value) -> Option<&[u8]> {
    match v {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.as_bytes()),
        Value::VerbatimString { text, .. } => Some(text.as_bytes()),
        _ => None,
    }
}

/// A field/value reply (RESP2 flat array or RESP3 map) as pairs.
pub fn as_pairs(v: &Value) -> Option<Vec<(&str, &Value)>> {
    match v {
        Value::Array(items) => items
            .chunks(2)
            .map(|c| match c {
                [k, v] => Some((as_str(k)?, v)),
                _ => None,
            })
            .collect(),
        Value::Map(items) => items.iter().map(|(k, v)| Some((as_str(k)?, v))).collect(),
        _ => None,
    }
}

/// The value of `field` in a field/value reply.
pub fn field<'a>(pairs: &[(&str, &'a Value)], field: &str) -> Option<&'a Value> {
    pairs.iter().find(|(k, _)| *k == field).map(|(_, v)| *v)
}

/// A list reply's items.
pub fn as_array(v: &Value) -> Option<&[Value]> {
    match v {
        Value::Array(items) | Value::Set(items) => Some(items),
        _ => None,
    }
}

/// The score of the first member of a `ZRANGE .. WITHSCORES` reply.
/// `Some(None)` means the zset is empty.
pub fn first_score(v: &Value) -> Option<Option<f64>> {
    let items = as_array(v)?;
    match items {
        [] => Some(None),
        // RESP3: [[member, score]]
        [Value::Array(pair), ..] => Some(Some(as_f64(pair.get(1)?)?)),
        // RESP2: [member, score]
        [_, score, ..] => Some(Some(as_f64(score)?)),
        _ => None,
    }
}

/// The byte length of the first member of a `ZRANGE .. WITHSCORES` reply.
pub fn first_member_len(v: &Value) -> Option<usize> {
    match as_array(v)? {
        [Value::Array(pair), ..] => as_bytes(pair.first()?).map(<[u8]>::len),
        [member, ..] => as_bytes(member).map(<[u8]>::len),
        [] => None,
    }
}

/// True for a `WRONGTYPE` error reply.
pub fn is_wrongtype(v: &Value) -> bool {
    matches!(v, Value::ServerError(e) if e.code() == "WRONGTYPE")
}

/// Why a read got no answer, for an error reply other than `WRONGTYPE`
/// (which does answer: the key has another type): `NOPERM` and the other
/// permission errors are [`Reason::Auth`], any other error
/// [`Reason::Backend`]. `None` for a reply that is not an error.
pub fn refusal(v: &Value) -> Option<Reason> {
    match v {
        Value::ServerError(e) if e.code() == "WRONGTYPE" => None,
        Value::ServerError(e) if is_auth_error_code(e.code()) => Some(Reason::Auth),
        Value::ServerError(_) => Some(Reason::Backend),
        _ => None,
    }
}

/// The error reply's text, if this is one.
pub fn server_error(v: &Value) -> Option<String> {
    match v {
        Value::ServerError(e) => Some(format!("{} {}", e.code(), e.details().unwrap_or(""))),
        _ => None,
    }
}
/// Whether a Redis error code means our credentials or permissions were
/// refused: the one place these codes are classified.
pub(crate) fn is_auth_error_code(code: &str) -> bool {
    matches!(code, "NOAUTH" | "WRONGPASS" | "NOPERM")
}
