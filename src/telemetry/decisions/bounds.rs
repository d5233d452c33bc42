//! How much the decision store keeps of what a gRPC client sent.
//!
//! Anyone who reaches the gRPC port chooses the ScaledObject's name and
//! namespace and a metadata map of up to 4 MiB (the gRPC limit), and a
//! refused map is recorded too. So every string the store keeps is cut
//! here, a map keeps at most [`MAX_PAIRS`] pairs, and the store as a whole
//! keeps at most [`MAX_BYTES`] of them (the oldest-asked entries go first):
//! 200 refused 1 MB maps once took the exporter from 13 MB to 216 MB.

use crate::telemetry::decisions::DecisionLabels;

/// Longest namespace or ScaledObject name kept, in bytes: Kubernetes' own
/// limit for object names (a DNS subdomain), so a real name is never cut.
pub const MAX_NAME_BYTES: usize = 253;

/// Longest `queue` label kept, in bytes: the scaler accepts queue names
/// and globs up to 4 KiB, so an accepted trigger's is never cut (two cut
/// ones could otherwise share a gauge series).
pub const MAX_QUEUE_BYTES: usize = 4 * 1024;

/// Longest `mode` label kept, in bytes (the longest mode has 11).
pub const MAX_MODE_BYTES: usize = 32;

/// Longest metadata key kept, in bytes.
pub const MAX_KEY_BYTES: usize = 64;

/// Longest metadata value kept, in bytes (a redacted value is shorter).
pub const MAX_VALUE_BYTES: usize = 256;

/// Most metadata pairs kept per map: the scaler reads 15 keys and KEDA
/// adds a few of its own. The last pair kept may be [`MORE_KEY`]'s note.
pub const MAX_PAIRS: usize = 32;

/// Longest error message kept, in bytes (the scaler sends at most 1 KiB).
pub const MAX_ERROR_BYTES: usize = 1200;

/// What an entry costs beyond its labels and metadata, counted at its
/// largest: two answers with their errors, 61 history points, the map
/// slot and the per-pair overheads.
pub const ENTRY_OVERHEAD_BYTES: usize = 2 * (256 + MAX_ERROR_BYTES) + 61 * 32 + 512;

/// Most bytes all entries keep together, counted by [`weight`]. With
/// everything cut as above one entry weighs at most about 26 KiB, so this
/// holds some 600 worst-case entries, and the entry cap (2,000)
/// binds first for real ones (under 7 KiB each, so counted).
pub const MAX_BYTES: usize = 16 << 20;

/// The key of the note that stands for the pairs beyond [`MAX_PAIRS`].
pub const MORE_KEY: &str = "(more keys)";

/// `text` cut to at most `max` bytes (an ellipsis included) on a char
/// boundary; unchanged when it fits.
pub fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    const MORE: char = '…';
    let mut end = max.saturating_sub(MORE.len_utf8());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut out = String::with_capacity(end + MORE.len_utf8());
    out.push_str(&text[..end]);
    out.push(MORE);
    out
}

/// `text` cut in place to at most `max` bytes (see [`cut`]).
fn cut_in_place(text: &mut String, max: usize) {
    if text.len() > max {
        *text = cut(text, max);
    }
}

/// `labels` with each field cut to its bound.
pub fn labels(mut labels: DecisionLabels) -> DecisionLabels {
    cut_in_place(&mut labels.namespace, MAX_NAME_BYTES);
    cut_in_place(&mut labels.scaledobject, MAX_NAME_BYTES);
    cut_in_place(&mut labels.queue, MAX_QUEUE_BYTES);
    cut_in_place(&mut labels.mode, MAX_MODE_BYTES);
    labels
}

/// `pairs` with keys and values cut and at most [`MAX_PAIRS`] of them
/// (the first ones; a note says how many more there were).
pub fn metadata(mut pairs: Vec<(String, String)>) -> Vec<(String, String)> {
    if pairs.len() > MAX_PAIRS {
        let more = pairs.len() - (MAX_PAIRS - 1);
        pairs.truncate(MAX_PAIRS - 1);
        pairs.push((MORE_KEY.into(), format!("{more} not shown")));
    }
    for (k, v) in &mut pairs {
        cut_in_place(k, MAX_KEY_BYTES);
        cut_in_place(v, MAX_VALUE_BYTES);
    }
    pairs.shrink_to_fit();
    pairs
}

/// An error message cut to [`MAX_ERROR_BYTES`].
pub fn error(message: Option<String>) -> Option<String> {
    message.map(|mut m| {
        cut_in_place(&mut m, MAX_ERROR_BYTES);
        m
    })
}

/// The bytes an entry with `labels` and `metadata` is counted as, its
/// answers and history at their largest included.
pub fn weight(labels: &DecisionLabels, metadata: &[(String, String)]) -> usize {
    // Labels are kept twice: as the map's key and in the entry.
    let labels = 2
        * (labels.namespace.len()
            + labels.scaledobject.len()
            + labels.queue.len()
            + labels.mode.len());
    let pairs: usize = metadata
        .iter()
        .map(|(k, v)| k.len() + v.len() + 2 * std::mem::size_of::<String>())
        .sum();
    labels + pairs + ENTRY_OVERHEAD_BYTES
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_keeps_what_fits_and_marks_what_it_cuts_on_a_char_boundary() {
        assert_eq!(cut("orders", 6), "orders");
        let long = "é".repeat(100);
        let c = cut(&long, 11);
        assert!(c.len() <= 11 && c.ends_with('…'), "{c}");
        assert_eq!(cut(&c, 11), c, "cutting twice changes nothing");
    }

    #[test]
    fn a_huge_map_and_huge_labels_are_kept_small() {
        let big = "x".repeat(64 * 1024);
        let pairs: Vec<(String, String)> = (0..100)
            .map(|i| (format!("{i}{big}"), big.clone()))
            .collect();
        let kept = metadata(pairs);
        assert_eq!(kept.len(), MAX_PAIRS);
        assert_eq!(
            kept[MAX_PAIRS - 1],
            (MORE_KEY.into(), "69 not shown".into())
        );
        let l = labels(DecisionLabels {
            namespace: big.clone(),
            scaledobject: big.clone(),
            queue: big.clone(),
            mode: big.clone(),
        });
        let w = weight(&l, &kept);
        assert!(w < 27 * 1024, "{w}");
        // A worst-case entry leaves room for hundreds in the store.
        assert!(MAX_BYTES / w > 600, "{}", MAX_BYTES / w);
    }
}
