//! The RabbitMQ scenarios of `tests/differential.rs`: queues in two or three
//! throw-away vhosts of the shared RabbitMQ, and a user tagged `monitoring`
//! with access to some of those vhosts only (issue 36's case 5). The
//! reference logs in as guest (access to all of them).

use crate::support::{RabbitVhost, confirm_channel, declare_queue, delete_as_guest, pct, publish};

use super::Rng;

/// A user of the shared RabbitMQ, deleted on drop.
pub struct User {
    /// Its name.
    pub name: String,
}

impl Drop for User {
    fn drop(&mut self) {
        delete_as_guest(format!(
            "{}/users/{}",
            crate::support::RABBIT_API,
            pct(&self.name)
        ));
    }
}

/// One seeded RabbitMQ scenario.
pub struct RabbitScenario {
    /// Its seed.
    pub seed: u64,
    /// The prefix of every queue name (unique to this process and seed, so
    /// an `include` over all vhosts sees no other test's queues).
    pub prefix: String,
    /// The vhosts (deleted on drop).
    pub vhosts: Vec<RabbitVhost>,
    /// Whether the subject's user may read each vhost.
    pub readable: Vec<bool>,
    /// Per vhost: the queues (full names) and their messages.
    pub queues: Vec<Vec<(String, usize)>>,
    /// The subject's user.
    pub user: User,
    /// Its password.
    pub password: String,
}

/// Queue names (after the prefix) a vhost may hold.
const NAMES: &[&str] = &["jobs.a", "jobs.b", "mail.x"];

impl RabbitScenario {
    /// Builds scenario `seed`: vhosts, queues with messages, the user.
    pub async fn build(seed: u64) -> RabbitScenario {
        let mut rng = Rng::new(seed ^ 0xAB);
        let pid = std::process::id();
        let prefix = format!("qd{pid}s{seed}.");
        let n = rng.range(2, 3) as usize;
        let spared = rng.range(0, n as u64 - 1) as usize;
        let readable: Vec<bool> = (0..n).map(|i| i == spared || rng.chance(0.4)).collect();
        let mut vhosts = Vec::new();
        let mut queues = Vec::new();
        for i in 0..n {
            let vhost = RabbitVhost::create_named(&format!("qd-{pid}-{seed}-{i}")).await;
            let conn = vhost.connect().await;
            let ch = confirm_channel(&conn).await;
            let mut names: Vec<&str> = rng.subset(NAMES, 0.6);
            if names.is_empty() {
                names.push(NAMES[0]);
            }
            let mut here = Vec::new();
            for name in names {
                let full = format!("{prefix}{name}");
                let messages = rng.range(1, 9) as usize;
                declare_queue(&ch, &full, &[]).await;
                publish(&ch, &full, messages, lapin::BasicProperties::default()).await;
                here.push((full, messages));
            }
            let _ = conn.close(200, "done".into()).await;
            vhosts.push(vhost);
            queues.push(here);
        }
        let user_name = format!("qd-{pid}-{seed}");
        let password = format!("pw-{seed}");
        let (status, body) = crate::support::rabbit_api(
            reqwest::Method::PUT,
            &format!("/users/{}", pct(&user_name)),
            Some(serde_json::json!({"password": password, "tags": "monitoring"})),
        )
        .await;
        assert!((200..300).contains(&status), "create user: {status} {body}");
        let user = User { name: user_name };
        for (vhost, ok) in vhosts.iter().zip(&readable) {
            if *ok {
                let (status, body) = crate::support::rabbit_api(
                    reqwest::Method::PUT,
                    &format!("/permissions/{}/{}", pct(&vhost.name), pct(&user.name)),
                    Some(serde_json::json!({"configure": "^$", "write": "^$", "read": ".*"})),
                )
                .await;
                assert!((200..300).contains(&status), "permissions: {status} {body}");
            }
        }
        RabbitScenario {
            seed,
            prefix,
            vhosts,
            readable,
            queues,
            user,
            password,
        }
    }

    /// The exporter config: a management source over all vhosts (an
    /// `include` on the prefix), one over the listed vhosts, the
    /// prometheus method, and one AMQP source per vhost; logged in as
    /// `user`/`password`.
    pub fn config(&self, user: &str, password: &str) -> String {
        let include = format!("^{}", self.prefix.replace('.', "\\\\."));
        let listed = self
            .vhosts
            .iter()
            .map(|v| format!("\"{}\"", v.name))
            .collect::<Vec<_>>()
            .join(", ");
        let mut y = format!(
            "listen: {{ grpc: 127.0.0.1:0 }}\nscaler: {{ max_staleness: 1h }}\nsources:\n\
             \x20 - name: mgmt-all\n    type: rabbitmq\n    url: http://127.0.0.1:15672\n    username: {user}\n    password: {password}\n    include: \"{include}\"\n    poll_interval: 500ms\n\
             \x20 - name: mgmt-listed\n    type: rabbitmq\n    url: http://127.0.0.1:15672\n    username: {user}\n    password: {password}\n    vhosts: [{listed}]\n    poll_interval: 500ms\n\
             \x20 - name: prom\n    type: rabbitmq\n    method: prometheus\n    url: http://127.0.0.1:15692\n    username: {user}\n    password: {password}\n    include: \"{include}\"\n    poll_interval: 500ms\n"
        );
        let all: Vec<String> = NAMES
            .iter()
            .map(|n| format!("{}{n}", self.prefix))
            .collect();
        for (i, v) in self.vhosts.iter().enumerate() {
            y.push_str(&format!(
                "  - name: amqp-{i}\n    type: rabbitmq\n    method: amqp\n    url: amqp://{user}:{password}@127.0.0.1:5672/{}\n    queues: [{}]\n    poll_interval: 500ms\n",
                pct(&v.name),
                all.join(", ")
            ));
        }
        y
    }

    /// Whether the subject's user may be refused anything a query of
    /// `source` (over `vhost`, or every vhost) could select.
    pub fn touches(&self, source: &str, vhost: Option<&str>) -> bool {
        let unreadable = |name: &str| {
            self.vhosts
                .iter()
                .zip(&self.readable)
                .any(|(v, ok)| v.name == name && !ok)
        };
        match source {
            // The plugin's endpoint needs no login: nothing restricts it.
            "prom" => false,
            "mgmt-listed" => match vhost {
                Some(v) => unreadable(v),
                None => self.readable.iter().any(|ok| !ok),
            },
            // Over every vhost of the shared node: the user may never read
            // `/` and other tests' vhosts, and any name may be there.
            "mgmt-all" => vhost.is_none_or(unreadable),
            amqp => amqp
                .strip_prefix("amqp-")
                .and_then(|i| i.parse::<usize>().ok())
                .is_some_and(|i| !self.readable[i]),
        }
    }

    /// The scenario in a few lines, for a failure message.
    pub fn describe(&self) -> String {
        let vhosts: Vec<String> = self
            .vhosts
            .iter()
            .zip(&self.readable)
            .zip(&self.queues)
            .map(|((v, ok), q)| {
                format!(
                    "{} ({}): {:?}",
                    v.name,
                    if *ok { "readable" } else { "NOT readable" },
                    q
                )
            })
            .collect();
        format!(
            "rabbitmq seed {}: user {} tagged monitoring; {}",
            self.seed,
            self.user.name,
            vhosts.join("; ")
        )
    }
}
