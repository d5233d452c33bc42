//! Label sets of the exposition. Fixed sets derive `EncodeLabelSet`; queue
//! labels are built by hand because capture labels are only known at runtime.

use prometheus_client::encoding::{EncodeLabel, EncodeLabelSet, LabelSetEncoder};

use crate::snapshot::{JobState, QueueSample};

/// `{source}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabels {
    /// The source name.
    pub source: String,
}

/// `{source, reason}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// The source name.
    pub source: String,
    /// Why polls failed.
    pub reason: String,
}

/// `{source, cause}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CauseLabels {
    /// The source name.
    pub source: String,
    /// What kind of thing left names unread (`GapKind`).
    pub cause: String,
}

/// `{source, round}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RoundLabels {
    /// The source name.
    pub source: String,
    /// Which kind of discovery round: `full`, `remembered` or `libraries`.
    pub round: String,
}

/// `{source, vhost}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VhostLabels {
    /// The source name.
    pub source: String,
    /// The RabbitMQ vhost.
    pub vhost: String,
}

/// `{source, [vhost], queue, [preset], captures..., [group], [type, state], [state], [le]}`.
#[derive(Debug, Clone)]
pub struct QueueLabels<'a> {
    /// The source name.
    pub source: &'a str,
    /// The queue these labels describe.
    pub queue: &'a QueueSample,
    /// Stream consumer group, for group metrics.
    pub group: Option<&'a str>,
    /// `type` and `state`, for `queue_info`.
    pub info: Option<(&'a str, Option<&'a str>)>,
    /// Histogram bucket bound, for the classic `_bucket` family (`+Inf` included).
    pub le: Option<&'a str>,
    /// A preset queue's job state, for `queue_depth{state}`.
    pub job_state: Option<JobState>,
    /// How a measured value was measured, for `queue_service_time_seconds{from}`.
    pub from: Option<&'a str>,
}

impl<'a> QueueLabels<'a> {
    /// The plain per-queue label set.
    pub fn of(source: &'a str, queue: &'a QueueSample) -> Self {
        QueueLabels {
            source,
            queue,
            group: None,
            info: None,
            le: None,
            job_state: None,
            from: None,
        }
    }
}

impl EncodeLabelSet for QueueLabels<'_> {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        ("source", self.source).encode(encoder.encode_label())?;
        if let Some(vhost) = self.queue.vhost() {
            ("vhost", vhost).encode(encoder.encode_label())?;
        }
        ("queue", self.queue.name.as_str()).encode(encoder.encode_label())?;
        if let Some(facts) = &self.queue.preset {
            // Two libraries' queues of the same name stay distinct series.
            ("preset", facts.preset.as_str()).encode(encoder.encode_label())?;
        }
        for (k, v) in &self.queue.labels {
            (k.as_str(), v.as_str()).encode(encoder.encode_label())?;
        }
        if let Some(group) = self.group {
            ("group", group).encode(encoder.encode_label())?;
        }
        if let Some((queue_type, state)) = self.info {
            ("type", queue_type).encode(encoder.encode_label())?;
            if let Some(state) = state {
                ("state", state).encode(encoder.encode_label())?;
            }
        }
        if let Some(state) = self.job_state {
            ("state", state.as_str()).encode(encoder.encode_label())?;
        }
        if let Some(from) = self.from {
            ("from", from).encode(encoder.encode_label())?;
        }
        if let Some(le) = self.le {
            ("le", le).encode(encoder.encode_label())?;
        }
        Ok(())
    }
}
