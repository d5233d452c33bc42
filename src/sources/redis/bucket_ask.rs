//! Which command counts one age bucket of a timestamp zset, chosen from
//! the end that costs Redis least for the count expected there.
//!
//! A bucket's value is the number of due items at most `b` old: the items
//! at the zset's newest (tail) end. Three commands can count it, each exact
//! or saying that it could not:
//!
//! - **head**: `ZCOUNT k -inf (now-b` counts the *older* items; Redis walks
//!   a small (listpack) zset from its head and parses every score it passes,
//!   so this costs the items older than `b`. Always exact.
//! - **tail**: `ZRANGE k now now-b BYSCORE REV LIMIT 0 m` walks from the
//!   tail and returns the bucket's members, so it costs the items younger
//!   than `b` (a member returned costs more than a score parsed). Exact when
//!   fewer than `m` come back.
//! - **window**: the same with `LIMIT o m` around the expected count `c`
//!   (`o = c-w-1`, `m = 2w+2`): Redis skips `o` members without parsing
//!   them, then reads at most `m`. Exact when the count lies inside.
//!
//! [`choose`] prices each with [`Cost`], a model measured on Redis 7.0 with
//! 100-item listpacks of 17-digit scores (`INFO commandstats`, 2,000 keys
//! per command, best of five; see BENCHMARKS.md, scenario 10): about 0.9 µs
//! a command, 0.09 µs a score parsed, 0.14 µs a member returned and 0.012 µs
//! a member skipped. Large zsets (skiplists) always use ZCOUNT, which is
//! O(log n) there while a window's offset is a walk.
//!
//! Under real work (producers add at *now*, workers take the oldest) the
//! young buckets hold a few items and the old ones nearly all, so both ends
//! are cheap and only the buckets in between need a window. A window that
//! misses costs a second round trip; the count the caller expects and the
//! slack `w` are its business (see `histogram`).

/// How one bucket is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ask {
    /// `ZCOUNT k -inf (bound`: the items older than the bucket. Exact.
    Head,
    /// `ZRANGE k now bound BYSCORE REV LIMIT offset limit`: the bucket's
    /// members from the newest, skipping `offset`; see [`window_count`].
    Window {
        /// Members skipped from the newest end, unread.
        offset: u64,
        /// Members read at most.
        limit: u64,
    },
}

/// Zsets expected to hold at most this many due items are counted from
/// either end; larger ones are skiplists (Redis turns a zset into one past
/// 128 members by default), where ZCOUNT is O(log n) but an offset is a walk.
pub const SMALL_ZSET: u64 = 256;

/// A tail read that must be exact whatever the count (after a miss, or
/// with no count to expect): more than a small zset holds.
const TAIL_ALL: u64 = 2 * SMALL_ZSET;

/// The offset and limit of a tail read that cannot miss (see [`TAIL_ALL`]).
pub const EXACT_TAIL: (u64, u64) = (0, TAIL_ALL);

/// Redis CPU of one command, in nanoseconds (see the module comment).
#[derive(Debug, Clone, Copy)]
pub struct Cost;

impl Cost {
    /// A command's own cost: parsing it, finding the key, replying.
    const COMMAND: u64 = 900;
    /// One score parsed (`strtod` on a listpack entry).
    const PARSED: u64 = 90;
    /// One member returned (its score parsed and its bulk reply).
    const RETURNED: u64 = 140;
    /// One member skipped by an offset.
    const SKIPPED: u64 = 12;

    /// `ZCOUNT` from the head past `older` items.
    pub fn head(older: u64) -> u64 {
        Self::COMMAND + Self::PARSED * older
    }

    /// A window skipping `offset` members and returning `returned`.
    pub fn window(offset: u64, returned: u64) -> u64 {
        Self::COMMAND + Self::SKIPPED * offset + Self::RETURNED * returned
    }
}

/// The window around an expected count `c` with `w` members of slack on
/// each side.
pub fn centred(c: u64, w: u64) -> (u64, u64) {
    let offset = c.saturating_sub(w + 1);
    (offset, c - offset + w + 1)
}

/// The exact count a window's reply of `len` members gives, or `None` when
/// the count lies outside it.
pub fn window_count(offset: u64, limit: u64, len: u64) -> Option<u64> {
    (len < limit && (offset == 0 || len > 0)).then_some(offset + len)
}

/// The cheapest way to count a bucket expected to hold `c` of `n` due
/// items, give or take `w`. With `exact`, only asks that cannot miss (a
/// head count, or a tail read of every member): after a miss, or when `c`
/// is a guess rather than a past count.
pub fn choose(c: u64, n: u64, w: u64, exact: bool) -> (Ask, u64) {
    if n > SMALL_ZSET {
        return (Ask::Head, Cost::head(0));
    }
    let c = c.min(n);
    let head = (Ask::Head, Cost::head(n - c));
    let tail_limit = if exact { TAIL_ALL } else { c + w + 1 };
    let tail = (
        Ask::Window {
            offset: 0,
            limit: tail_limit,
        },
        Cost::window(0, c),
    );
    let mut best = if tail.1 < head.1 { tail } else { head };
    if !exact {
        let (offset, limit) = centred(c, w);
        let window = (Ask::Window { offset, limit }, Cost::window(offset, w + 1));
        if window.1 < best.1 {
            best = window;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(c: u64, n: u64, exact: bool) -> Ask {
        choose(c, n, 3, exact).0
    }

    #[test]
    fn young_buckets_are_read_from_the_tail_and_old_ones_counted_from_the_head() {
        // A few young items: read them from the newest end, w+1 spare.
        assert_eq!(
            ask(1, 100, false),
            Ask::Window {
                offset: 0,
                limit: 5
            }
        );
        // Nearly all: count the few older ones.
        assert_eq!(ask(95, 100, false), Ask::Head);
        // In between: a window around the expected count.
        assert_eq!(
            ask(50, 100, false),
            Ask::Window {
                offset: 46,
                limit: 8
            }
        );
    }

    #[test]
    fn exact_asks_never_miss_and_large_zsets_always_use_zcount() {
        assert_eq!(
            ask(1, 100, true),
            Ask::Window {
                offset: 0,
                limit: TAIL_ALL
            }
        );
        assert_eq!(ask(50, 100, true), Ask::Head);
        assert_eq!(ask(5, SMALL_ZSET + 1, false), Ask::Head);
        // A tail read of every member is exact for any small zset.
        assert_eq!(window_count(0, TAIL_ALL, SMALL_ZSET), Some(SMALL_ZSET));
    }

    #[test]
    fn a_window_is_exact_inside_and_says_so_outside() {
        let (o, m) = centred(20, 3);
        assert_eq!((o, m), (16, 8));
        for len in 1..m {
            assert_eq!(window_count(o, m, len), Some(o + len));
        }
        // Full: "at least o+m"; empty with an offset: "at most o".
        assert_eq!(window_count(o, m, m), None);
        assert_eq!(window_count(o, m, 0), None);
        // From the newest end, an empty reply is a count of 0.
        assert_eq!(window_count(0, 4, 0), Some(0));
        // Counts near 0 start at offset 0.
        assert_eq!(centred(2, 3), (0, 6));
    }

    #[test]
    fn the_choice_is_the_cheapest_priced() {
        for n in [1, 10, 100, SMALL_ZSET] {
            for c in 0..=n {
                for exact in [false, true] {
                    let (_, cost) = choose(c, n, 3, exact);
                    assert!(cost <= Cost::head(n - c), "c={c} n={n}");
                    assert!(cost <= Cost::window(0, c), "c={c} n={n}");
                }
            }
        }
    }
}
