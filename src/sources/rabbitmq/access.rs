//! What a RabbitMQ user may not read, as coverage gaps ([`Gap`]): a vhost
//! the user can see listed but whose queues RabbitMQ keeps from it, and a
//! queue a passive declare was refused. The queues behind such a gap are
//! not in the poll's data, so a glob over them would sum only the readable
//! ones: the scaler answers `UNAVAILABLE` naming the gap instead.
//!
//! How each method learns it (docs/rabbitmq.md, "Vhosts the user may not
//! read"):
//!
//! - `management`, `vhosts` configured: a vhost whose listing is refused
//!   (401/403) while another configured vhost answers;
//! - `management`, every vhost: `/api/vhosts` names every vhost to a user
//!   tagged `monitoring` (only those it may read to a `management` user),
//!   while `/api/queues` lists the queues of the vhosts it may read. A vhost
//!   no listed queue came from is looked up in the vhosts whose
//!   `amq.direct` exchange `/api/exchanges` lists: every vhost has that
//!   exchange, and RabbitMQ lists it only in vhosts the user may read, as it
//!   does queues ([`unproven`], [`vhost_gaps`]);
//! - `prometheus`: the plugin's endpoint reports every vhost whoever asks,
//!   so nothing is hidden from it;
//! - `amqp`: one vhost per source, which it cannot open is a failed poll;
//!   a queue whose passive declare is refused (RabbitMQ 4.2.6+ wants some
//!   permission on the queue) is a gap of that queue alone ([`refused_queue`]).

use std::collections::{BTreeSet, HashSet};

use super::credentials::Credentials;
use crate::snapshot::{EveryName, ExactNames, Gap, GapKind, HiddenNames, NameQuery, VhostNames};

/// The user as gap causes name it: `user "mon"`.
pub fn who(creds: Option<&Credentials>) -> String {
    match creds {
        Some(c) if !c.username.is_empty() => format!("user {:?}", c.username),
        _ => "the exporter's user".to_string(),
    }
}

/// The gap of a vhost that `who` may not read.
pub fn unreadable_vhost(who: &str, vhost: &str) -> Gap {
    Gap::new(
        GapKind::Refused,
        VhostNames(vhost.to_string()),
        format!("{who} may not read vhost {vhost:?} (no permission), so its queues are unknown"),
    )
}

/// The vhosts among `visible` (what `/api/vhosts` listed) that no listed
/// queue came from: each may be one the user may not read, or one it may
/// read that holds no queue the listing kept. Sorted, without repeats.
pub fn unproven<'a>(visible: &'a [String], listed: &HashSet<&str>) -> Vec<&'a str> {
    let set: BTreeSet<&str> = visible
        .iter()
        .map(String::as_str)
        .filter(|v| !listed.contains(v))
        .collect();
    set.into_iter().collect()
}

/// The gaps of the `unproven` vhosts: each one that `readable` (the vhosts
/// the user may read) leaves out; every one of them when that set could
/// not be read (`Err` says why).
pub fn vhost_gaps(
    who: &str,
    unproven: &[&str],
    readable: Result<&HashSet<String>, &str>,
) -> Vec<Gap> {
    match readable {
        Ok(readable) => unproven
            .iter()
            .filter(|v| !readable.contains(**v))
            .map(|v| unreadable_vhost(who, v))
            .collect(),
        Err(why) => unproven
            .iter()
            .map(|v| {
                Gap::new(
                    GapKind::CheckFailed,
                    VhostNames(v.to_string()),
                    format!(
                        "the exporter could not tell whether {who} may read vhost {v:?} \
                         (listing the vhosts it may read failed: {why}), so its queues are unknown"
                    ),
                )
            })
            .collect(),
    }
}

/// The gap when `/api/vhosts` could not be read: any vhost may be one the
/// user may not read.
pub fn vhosts_unlisted(who: &str, why: &str) -> Gap {
    Gap::new(
        GapKind::CheckFailed,
        EveryName,
        format!(
            "the exporter could not list the vhosts ({why}), so it cannot tell whether {who} \
             may read every vhost; the queues of one it may not read would be missing"
        ),
    )
}

/// Exactly these queue names of one vhost: a queue the AMQP method was
/// refused. A query in another vhost is not hidden by it.
#[derive(Debug, Clone)]
pub struct VhostQueues {
    /// The vhost.
    pub vhost: String,
    /// The queue names in it.
    pub names: ExactNames,
}

impl HiddenNames for VhostQueues {
    fn may_hide(&self, query: &NameQuery<'_>) -> bool {
        query.vhost.is_none_or(|v| v == self.vhost) && self.names.may_hide(query)
    }
}

/// The gap of a queue whose passive declare RabbitMQ refused to `who`.
pub fn refused_queue(who: &str, vhost: &str, queue: &str) -> Gap {
    Gap::new(
        GapKind::Refused,
        VhostQueues {
            vhost: vhost.to_string(),
            names: ExactNames([queue.to_string()].into()),
        },
        format!(
            "{who} may not read queue {queue:?} in vhost {vhost:?} (RabbitMQ refused its \
             passive declare), so it is unknown"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::Coverage;

    #[test]
    fn a_listed_vhost_without_queues_is_a_gap_only_if_the_user_may_not_read_it() {
        let visible: Vec<String> = ["pub", "priv", "empty", "priv"].map(String::from).into();
        let listed: HashSet<&str> = ["pub"].into();
        let unproven = unproven(&visible, &listed);
        assert_eq!(unproven, ["empty", "priv"]);

        let readable: HashSet<String> = ["pub".to_string(), "empty".to_string()].into();
        let gaps = vhost_gaps("user \"mon\"", &unproven, Ok(&readable));
        let causes: Vec<&str> = gaps.iter().map(|g| g.cause.as_str()).collect();
        assert_eq!(
            causes,
            ["user \"mon\" may not read vhost \"priv\" (no permission), so its queues are unknown"]
        );

        let c = Coverage::with_gaps(gaps);
        let jobs = |n: &str| n.starts_with("jobs.");
        assert!(c.vouch(&NameQuery::of("jobs.*", None, &jobs)).is_err());
        assert!(
            c.vouch(&NameQuery::of("jobs.*", Some("priv"), &jobs))
                .is_err()
        );
        assert!(
            c.vouch(&NameQuery::of("jobs.*", Some("pub"), &jobs))
                .is_ok()
        );
        assert!(
            c.vouch(&NameQuery::of("jobs.*", Some("empty"), &jobs))
                .is_ok()
        );

        // Not knowing which vhosts the user may read: each unproven one is a gap.
        let gaps = vhost_gaps("user \"mon\"", &unproven, Err("timeout"));
        assert_eq!(gaps.len(), 2);
        assert!(
            gaps[0]
                .cause
                .contains("could not tell whether user \"mon\" may read vhost \"empty\"")
        );
        let c = Coverage::with_gaps(gaps);
        assert!(
            c.vouch(&NameQuery::of("jobs.*", Some("pub"), &jobs))
                .is_ok()
        );
        assert!(
            c.vouch(&NameQuery::of("jobs.*", Some("empty"), &jobs))
                .is_err()
        );

        // No vhost list: every name may be hidden.
        let c = Coverage::with_gaps(vec![vhosts_unlisted("user \"mon\"", "401")]);
        assert!(
            c.vouch(&NameQuery::of("jobs.*", Some("pub"), &jobs))
                .is_err()
        );
    }

    #[test]
    fn a_refused_queue_hides_itself_in_its_vhost_and_globs_selecting_it() {
        let c = Coverage::with_gaps(vec![refused_queue("user \"u\"", "v", "jobs.x")]);
        let exact = |n: &str| n == "jobs.x";
        assert!(c.vouch(&NameQuery::of("jobs.x", None, &exact)).is_err());
        assert!(
            c.vouch(&NameQuery::of("jobs.x", Some("v"), &exact))
                .is_err()
        );
        assert!(c.vouch(&NameQuery::of("jobs.x", Some("w"), &exact)).is_ok());
        let jobs = |n: &str| n.starts_with("jobs.");
        assert!(c.vouch(&NameQuery::of("jobs.*", None, &jobs)).is_err());
        let mail = |n: &str| n.starts_with("mail.");
        assert!(c.vouch(&NameQuery::of("mail.*", None, &mail)).is_ok());
        assert!(
            c.vouch(&NameQuery::of("jobs.y", None, &|n: &str| n == "jobs.y"))
                .is_ok()
        );
    }

    #[test]
    fn the_user_is_named_when_there_is_one() {
        let c = Credentials {
            username: "mon".into(),
            password: "secret".into(),
        };
        assert_eq!(who(Some(&c)), "user \"mon\"");
        assert_eq!(who(None), "the exporter's user");
    }
}
