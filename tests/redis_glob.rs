//! The exporter's glob matcher against real Redis: for odd keys and odd
//! patterns, matching the full key list here gives exactly what
//! `SCAN MATCH` returns. Discovery relies on this when several patterns
//! share one SCAN pass.
mod support;

use std::collections::BTreeSet;

use queue_exporter::sources::redis::glob;
use support::*;

fn scan_match(conn: &mut redis::Connection, pattern: &[u8]) -> BTreeSet<Vec<u8>> {
    let mut cursor = 0u64;
    let mut out = BTreeSet::new();
    loop {
        let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000)
            .query(conn)
            .unwrap();
        out.extend(keys);
        if next == 0 {
            return out;
        }
        cursor = next;
    }
}

#[test]
fn the_matcher_agrees_with_scan_match_on_odd_keys_and_patterns() {
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    let keys: Vec<&[u8]> = vec![
        b"",
        b"a",
        b"ab",
        b"abc",
        b"a*",
        b"a?",
        b"a\\",
        b"a\\b",
        b"a]",
        b"a-",
        b"a[",
        b"jobs:pending:high",
        b"jobs:pending:low",
        b"jobs:processing",
        b"jobs::",
        b"queue:list:1",
        b"queue:zset:1",
        b"q\xff",
        b"q\x80",
        b"q\x7f",
        b"q\x01",
        "q\u{e9}".as_bytes(),
        "ünïcødé".as_bytes(),
        b"new\nline",
        b"x*y",
        b"xxxxy",
    ];
    for k in &keys {
        let _: () = redis::cmd("SET").arg(*k).arg("v").query(&mut conn).unwrap();
    }
    let patterns: Vec<&[u8]> = vec![
        b"*",
        b"**",
        b"a*",
        b"a?",
        b"?",
        b"a\\*",
        b"a\\?",
        b"a\\\\*",
        b"a\\",
        b"a[]]",
        b"a[\\]]",
        b"a[-]",
        b"a[a-c]",
        b"a[c-a]",
        b"a[^b]",
        b"a[^]",
        b"a[",
        b"a[b",
        b"a[b-",
        b"jobs:*",
        b"jobs:*:high",
        b"jobs:*:*",
        b"jobs:pending:[hl]*",
        b"queue:*:1",
        b"q[\x01-\xff]",
        b"q[\x80-\xff]",
        b"q[a-\xff]",
        b"q[^\x80]",
        b"q?",
        b"q\xc3?",
        b"*\n*",
        b"*x",
        b"*y",
        b"x*y*",
        b"",
    ];
    let all = scan_match(&mut conn, b"*");
    assert_eq!(all.len(), keys.len());
    for p in &patterns {
        let want = scan_match(&mut conn, p);
        let got: BTreeSet<Vec<u8>> = all
            .iter()
            .filter(|k| glob::matches(p, k))
            .cloned()
            .collect();
        assert_eq!(got, want, "pattern {:?}", String::from_utf8_lossy(p));
    }
}
