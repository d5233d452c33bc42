//! The scenarios of `tests/differential.rs`: a seeded keyspace (plain
//! lists, timestamp zsets, streams with groups, hashes, sets, the layouts of
//! RQ, Sidekiq, Celery and BullMQ written with plain Redis commands, and
//! unrelated keys), a read-only ACL user that refuses some commands or some
//! key patterns, a `max_keys`, and zero config or configured entries; and,
//! from those, which queue names a restriction may touch.
//!
//! Every key's name starts with the letter of its **group**; a restriction
//! is put on whole groups (`~[^gh]*` leaves groups `g` and `h` out, a
//! selector `(+lindex ~[^g]*)` beside `-lindex` refuses `LINDEX` in group
//! `g` only). Queue names (labels) start with the same letter, so the
//! scenario knows, for any name or glob, whether a restriction or a
//! `max_keys` drop could touch it. That knowledge is deliberately
//! conservative (a superset): a name it calls unrestricted must get the
//! reference's answer.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::fmt::Write as _;

pub mod backend;
pub mod rabbit;

/// A small deterministic PRNG (SplitMix64): the same seed builds the same
/// scenario on every machine, with no crate.
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5DEE_CE66_D1CE_4E5B)
    }

    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        ((self.next() >> 11) as f64 / (1u64 << 53) as f64) < p
    }

    /// One element.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.range(0, items.len() as u64 - 1) as usize]
    }

    /// A random subset, each element kept with probability `p`.
    pub fn subset<T: Clone>(&mut self, items: &[T], p: f64) -> Vec<T> {
        items.iter().filter(|_| self.chance(p)).cloned().collect()
    }
}

/// Ages (seconds) whose items stay far from every bucket bound of
/// `queue_message_age_seconds` (1 s, 10 s, 1 m, 5 m, 15 m, 1 h, 1 d) while
/// the test runs, so bucket counts are static: (centre, spread).
const AGE_BANDS: &[(f64, f64)] = &[
    (30.0, 5.0),
    (150.0, 10.0),
    (600.0, 20.0),
    (2000.0, 100.0),
    (7000.0, 500.0),
    (40000.0, 2000.0),
];

/// What a key is to Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A list.
    List,
    /// A sorted set.
    Zset,
    /// A stream.
    Stream,
    /// A hash.
    Hash,
    /// A set.
    Set,
    /// A string.
    Str,
}

/// Which library a key belongs to (none: a plain or unrelated key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Lib {
    /// RQ at prefix `rq` (group `r`).
    Rq,
    /// Sidekiq in the redis-namespace `sq` (group `s`).
    Sidekiq,
    /// Celery: bindings under `_` , queue lists under `c`.
    Celery,
    /// BullMQ at prefix `bull` (group `b`).
    Bullmq,
    /// arq: queue zsets `arq:a…` and per-job keys under `arq:` (group `a`).
    Arq,
    /// Dramatiq in its default namespace `dramatiq`, queues `d…` (group `d`).
    Dramatiq,
}

impl Lib {
    /// The group letters holding its keys.
    pub fn groups(self) -> &'static [char] {
        match self {
            Lib::Rq => &['r'],
            Lib::Sidekiq => &['s'],
            Lib::Celery => &['_', 'c'],
            Lib::Bullmq => &['b'],
            Lib::Arq => &['a'],
            Lib::Dramatiq => &['d'],
        }
    }
}

/// One key the scenario writes.
#[derive(Debug, Clone)]
pub struct Key {
    /// Its name.
    pub name: String,
    /// Its type.
    pub kind: Kind,
    /// Its library, if any.
    pub lib: Option<Lib>,
}

impl Key {
    /// Its group: the first character of its name.
    pub fn group(&self) -> char {
        self.name.chars().next().unwrap_or('?')
    }

    /// A plain queue key of zero config (a list, zset or stream no library owns).
    pub fn is_plain_queue(&self) -> bool {
        self.lib.is_none() && matches!(self.kind, Kind::List | Kind::Zset | Kind::Stream)
    }
}

/// The plain groups: letter, type, and whether configured entries give it
/// timestamps (`age:` or `score: timestamp`).
pub const PLAIN_GROUPS: &[(char, Kind)] = &[
    ('e', Kind::List), // exact `key:` entries with `age:` and `counters: enqueued`
    ('g', Kind::List), // lists of JSON items with `enqueued_at`
    ('h', Kind::Zset), // zsets scored by enqueue/due time
    ('j', Kind::Stream),
    ('k', Kind::Hash),
    ('m', Kind::Set),
    ('n', Kind::List), // lists of opaque items
];

/// Commands a scenario's ACL may refuse, in a group or everywhere.
pub const REFUSABLE: &[&str] = &[
    "type",
    "lindex",
    "lrange",
    "llen",
    "zcard",
    "zcount",
    "zrange",
    "xlen",
    "xinfo|groups",
    "hget",
    "hmget",
    "hlen",
    "scard",
    "smembers",
    "sscan",
    "get",
    "exists",
];

/// One seeded scenario.
#[derive(Debug)]
pub struct Scenario {
    /// Its seed.
    pub seed: u64,
    /// No `queues:` (zero config) or configured entries.
    pub zero_config: bool,
    /// `client_tracking` of both exporters.
    pub client_tracking: bool,
    /// The subject's `max_keys`.
    pub max_keys: usize,
    /// Commands that write the keyspace.
    pub writes: Vec<Vec<String>>,
    /// Every key written.
    pub keys: Vec<Key>,
    /// The libraries present, with their queue names.
    pub libs: Vec<(Lib, Vec<String>)>,
    /// The subject's ACL rules.
    pub acl: Vec<String>,
    /// A short account of the restrictions, for failure messages.
    pub story: Vec<String>,
    /// Groups a restriction touches.
    pub restricted: BTreeSet<char>,
    /// A restriction touches every name.
    pub global: bool,
    /// Names `max_keys` may drop (a superset).
    pub dropped: BTreeSet<String>,
    /// Names a restricted library may hide: every run of `:`-separated
    /// parts of its keys (a Sidekiq namespace's queue `sdefault` is labelled
    /// by its bare name, so an unread registry may hide any such name).
    pub hidden_names: BTreeSet<String>,
    /// The `queues:` entries (empty for zero config).
    pub queues_yaml: String,
}

fn cmd(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| s.to_string()).collect()
}

fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default()
}

/// RFC 3339 UTC text of a unix time (RQ's `enqueued_at`), without a crate.
fn iso(t: f64) -> String {
    let secs = t.floor() as i64;
    let micros = ((t - t.floor()) * 1e6) as i64;
    let days = secs.div_euclid(86400);
    let rem = secs.rem_euclid(86400);
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{micros:06}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

impl Scenario {
    /// Builds scenario `seed`.
    pub fn build(seed: u64) -> Scenario {
        let mut rng = Rng::new(seed);
        let t0 = now();
        let mut s = Scenario {
            seed,
            zero_config: rng.chance(0.5) || seed.is_multiple_of(8),
            client_tracking: rng.chance(0.5),
            max_keys: 0,
            writes: Vec::new(),
            keys: Vec::new(),
            libs: Vec::new(),
            acl: Vec::new(),
            story: Vec::new(),
            restricted: BTreeSet::new(),
            global: false,
            dropped: BTreeSet::new(),
            hidden_names: BTreeSet::new(),
            queues_yaml: String::new(),
        };
        let age = |rng: &mut Rng| {
            let (c, w) = *rng.pick(AGE_BANDS);
            c - w + (rng.range(0, 1000) as f64 / 1000.0) * 2.0 * w
        };

        // Plain groups: each present with probability 0.75, 1..=8 keys.
        let mut groups: Vec<(char, Kind)> = rng.subset(PLAIN_GROUPS, 0.75);
        if !groups.iter().any(|(g, _)| *g == 'g' || *g == 'h') {
            groups.push(('g', Kind::List));
            groups.sort_by_key(|(g, _)| *g);
        }
        for &(g, kind) in &groups {
            let n = rng.range(1, 8);
            for i in 0..n {
                let name = format!("{g}:{i:02}");
                let len = rng.range(1, 12);
                let a = age(&mut rng);
                match (g, kind) {
                    ('e' | 'g', _) => {
                        for k in 0..len {
                            let item = format!(
                                "{{\"id\":{k},\"enqueued_at\":{:.3}}}",
                                t0 - a + k as f64 * 0.1
                            );
                            s.writes.push(cmd(&["RPUSH", &name, &item]));
                        }
                        if g == 'e' {
                            let counter = format!("e:cnt:{i:02}");
                            let v = rng.range(0, 500).to_string();
                            s.writes.push(cmd(&["SET", &counter, &v]));
                            s.keys.push(Key {
                                name: counter,
                                kind: Kind::Str,
                                lib: None,
                            });
                        }
                    }
                    ('n', _) => {
                        for k in 0..len {
                            s.writes.push(cmd(&["RPUSH", &name, &format!("job-{k}")]));
                        }
                    }
                    ('h', _) => {
                        for k in 0..len {
                            // One in four scheduled an hour or more ahead.
                            let score = if rng.chance(0.25) {
                                t0 + 3600.0 + rng.range(0, 3600) as f64
                            } else {
                                t0 - a + k as f64 * 0.1
                            };
                            s.writes.push(cmd(&[
                                "ZADD",
                                &name,
                                &format!("{score:.3}"),
                                &format!("m{k}"),
                            ]));
                        }
                    }
                    ('j', _) => {
                        for k in 0..len {
                            s.writes
                                .push(cmd(&["XADD", &name, "*", "job", &k.to_string()]));
                        }
                        for grp in 0..rng.range(0, 2) {
                            let gname = format!("grp{grp}");
                            s.writes
                                .push(cmd(&["XGROUP", "CREATE", &name, &gname, "0"]));
                            let read = rng.range(0, len).to_string();
                            if read != "0" {
                                s.writes.push(cmd(&[
                                    "XREADGROUP",
                                    "GROUP",
                                    &gname,
                                    "c1",
                                    "COUNT",
                                    &read,
                                    "STREAMS",
                                    &name,
                                    ">",
                                ]));
                            }
                        }
                    }
                    ('k', _) => {
                        for k in 0..len {
                            s.writes.push(cmd(&["HSET", &name, &format!("f{k}"), "v"]));
                        }
                    }
                    ('m', _) => {
                        for k in 0..len {
                            s.writes.push(cmd(&["SADD", &name, &format!("m{k}")]));
                        }
                    }
                    _ => unreachable!("plain group {g}"),
                }
                s.keys.push(Key {
                    name,
                    kind,
                    lib: None,
                });
            }
        }

        // Unrelated keys: strings and a hash no library or pattern reads.
        for i in 0..rng.range(1, 4) {
            let name = format!("u:cfg:{i}");
            s.writes.push(cmd(&["SET", &name, "x"]));
            s.keys.push(Key {
                name,
                kind: Kind::Str,
                lib: None,
            });
        }
        s.writes.push(cmd(&["HSET", "u:settings", "a", "1"]));
        s.keys.push(Key {
            name: "u:settings".into(),
            kind: Kind::Hash,
            lib: None,
        });

        // Libraries, each present with probability 0.6.
        let libraries = [
            Lib::Rq,
            Lib::Sidekiq,
            Lib::Celery,
            Lib::Bullmq,
            Lib::Arq,
            Lib::Dramatiq,
        ];
        for lib in libraries {
            // Seeds 8, 16, … always have Celery (issue 36's case 2).
            let forced = lib == Lib::Celery && seed.is_multiple_of(8);
            if !forced && !rng.chance(0.6) {
                continue;
            }
            let names: &[&str] = match lib {
                Lib::Rq => &["rhigh", "rlow", "rdefault"],
                Lib::Sidekiq => &["sdefault", "scritical"],
                Lib::Celery => &["cmail", "cwork"],
                Lib::Bullmq => &["bemail", "bimport"],
                Lib::Arq => &["arq:aone", "arq:atwo"],
                Lib::Dramatiq => &["ddefault", "dmail"],
            };
            let mut queues: Vec<String> = rng
                .subset(names, 0.7)
                .into_iter()
                .map(String::from)
                .collect();
            if queues.is_empty() {
                queues.push(names[0].to_string());
            }
            for q in &queues {
                let n = rng.range(1, 6);
                let a = age(&mut rng);
                s.write_lib_queue(lib, q, n, t0 - a, &mut rng);
            }
            s.write_lib_shared(lib, &queues, t0);
            s.libs.push((lib, queues));
        }

        s.restrict(&mut rng);
        s.queues_yaml = if s.zero_config {
            String::new()
        } else {
            s.configured()
        };
        s.limit(&mut rng);
        // Zero config: Dramatiq's queue names are not derivable from a mark
        // Redis refused (its unread mark hides every name, `Hidden::Every`),
        // so a restriction on its keys may touch any name.
        let dramatiq = s.libs.iter().any(|(l, _)| *l == Lib::Dramatiq);
        if s.zero_config && dramatiq && s.restricted.contains(&'d') {
            s.global = true;
            s.story
                .push("Dramatiq's keys restricted: any name may be one of its queues".into());
        }
        for k in &s.keys {
            if k.lib.is_some() && s.restricted.contains(&k.group()) {
                let parts: Vec<&str> = k.name.split(':').collect();
                for i in 0..parts.len() {
                    for j in i + 1..=parts.len() {
                        s.hidden_names.insert(parts[i..j].join(":"));
                    }
                }
            }
        }
        s
    }

    fn key(&mut self, name: &str, kind: Kind, lib: Lib) {
        if !self.keys.iter().any(|k| k.name == name) {
            self.keys.push(Key {
                name: name.to_string(),
                kind,
                lib: Some(lib),
            });
        }
    }

    /// One library queue of `n` jobs, the oldest enqueued at `t`.
    fn write_lib_queue(&mut self, lib: Lib, q: &str, n: u64, t: f64, rng: &mut Rng) {
        match lib {
            Lib::Rq => {
                let list = format!("rq:queue:{q}");
                self.writes.push(cmd(&["SADD", "rq:queues", &list]));
                self.key("rq:queues", Kind::Set, lib);
                for i in 0..n {
                    let id = format!("{q}-j{i}");
                    let job = format!("rq:job:{id}");
                    let at = iso(t + i as f64 * 0.1);
                    self.writes.push(cmd(&[
                        "HSET",
                        &job,
                        "status",
                        "queued",
                        "origin",
                        q,
                        "created_at",
                        &at,
                        "enqueued_at",
                        &at,
                    ]));
                    self.key(&job, Kind::Hash, lib);
                    self.writes.push(cmd(&["RPUSH", &list, &id]));
                }
                self.key(&list, Kind::List, lib);
                if rng.chance(0.5) {
                    let reg = format!("rq:scheduled:{q}");
                    let due = format!("{}", (t + 100_000.0) as u64);
                    self.writes
                        .push(cmd(&["ZADD", &reg, &due, &format!("{q}-later")]));
                    self.key(&reg, Kind::Zset, lib);
                }
            }
            Lib::Sidekiq => {
                self.writes.push(cmd(&["SADD", "sq:queues", q]));
                self.key("sq:queues", Kind::Set, lib);
                let list = format!("sq:queue:{q}");
                for i in 0..n {
                    let job = format!(
                        "{{\"class\":\"W\",\"jid\":\"{q}{i}\",\"queue\":\"{q}\",\"created_at\":{t:.3},\"enqueued_at\":{:.3}}}",
                        t + i as f64 * 0.1
                    );
                    self.writes.push(cmd(&["LPUSH", &list, &job]));
                }
                self.key(&list, Kind::List, lib);
            }
            Lib::Celery => {
                let member = format!("{q}\x06\x16\x06\x16{q}");
                self.writes
                    .push(cmd(&["SADD", "_kombu.binding.celery", &member]));
                self.key("_kombu.binding.celery", Kind::Set, lib);
                // Most producers stamp `enqueued_at` (docs/keda.md's
                // recipe); some do not, and the age is then unknown.
                let stamped = rng.chance(0.7);
                let headers = |at: f64| {
                    if stamped {
                        format!("{{\"task\":\"t\",\"enqueued_at\":{at:.3}}}")
                    } else {
                        "{\"task\":\"t\"}".to_string()
                    }
                };
                for i in 0..n {
                    let h = headers(t + i as f64 * 0.1);
                    let msg = format!("{{\"body\":\"{i}\",\"headers\":{h}}}");
                    self.writes.push(cmd(&["LPUSH", q, &msg]));
                }
                self.key(q, Kind::List, lib);
                if rng.chance(0.5) {
                    let pri = format!("{q}\x06\x163");
                    let msg = format!("{{\"body\":\"p\",\"headers\":{}}}", headers(t + 1.0));
                    self.writes.push(cmd(&["LPUSH", &pri, &msg]));
                    self.key(&pri, Kind::List, lib);
                }
            }
            Lib::Arq => {
                // The queue zset scores job ids by due time (ms); a job's
                // own key is pickled; `in-progress` marks a running job,
                // `retry` one run before.
                let short = q.trim_start_matches("arq:");
                let ids: Vec<String> = (0..n).map(|i| format!("{short}{i}")).collect();
                for (i, id) in ids.iter().enumerate() {
                    let due = format!("{}", ((t + i as f64 * 0.1) * 1000.0) as u64);
                    self.writes.push(cmd(&["ZADD", q, &due, id]));
                    let job = format!("arq:job:{id}");
                    self.writes.push(cmd(&["SET", &job, "\u{80}\u{4}pickled"]));
                    self.key(&job, Kind::Str, lib);
                }
                self.key(q, Kind::Zset, lib);
                if rng.chance(0.5) {
                    let later = format!("{}", ((t + 100_000.0) * 1000.0) as u64);
                    self.writes
                        .push(cmd(&["ZADD", q, &later, &format!("{short}-later")]));
                }
                if rng.chance(0.3) {
                    let running = format!("arq:in-progress:{}", ids[0]);
                    self.writes.push(cmd(&["SET", &running, "1"]));
                    self.key(&running, Kind::Str, lib);
                }
                if rng.chance(0.3) {
                    let tried = format!("arq:retry:{}", ids[ids.len() - 1]);
                    self.writes.push(cmd(&["SET", &tried, "1"]));
                    self.key(&tried, Kind::Str, lib);
                }
            }
            Lib::Dramatiq => {
                // A list of message ids beside the hash of id → message
                // JSON (`message_timestamp` in ms); maybe a dead letter.
                let list = format!("dramatiq:{q}");
                let msgs = format!("dramatiq:{q}.msgs");
                for i in 0..n {
                    let id = format!("{q}-m{i}");
                    let ms = ((t + i as f64 * 0.1) * 1000.0) as u64;
                    let msg = format!(
                        "{{\"queue_name\":\"{q}\",\"actor_name\":\"a\",\"args\":[],\"kwargs\":{{}},\"options\":{{}},\"message_id\":\"{id}\",\"message_timestamp\":{ms}}}"
                    );
                    self.writes.push(cmd(&["HSET", &msgs, &id, &msg]));
                    self.writes.push(cmd(&["RPUSH", &list, &id]));
                }
                self.key(&list, Kind::List, lib);
                self.key(&msgs, Kind::Hash, lib);
                if rng.chance(0.4) {
                    let dead = format!("dramatiq:{q}.XQ");
                    let ms = format!("{}", (t * 1000.0) as u64);
                    self.writes
                        .push(cmd(&["ZADD", &dead, &ms, &format!("{q}-dead")]));
                    self.key(&dead, Kind::Zset, lib);
                    let dead_msgs = format!("dramatiq:{q}.XQ.msgs");
                    self.writes
                        .push(cmd(&["HSET", &dead_msgs, &format!("{q}-dead"), "{}"]));
                    self.key(&dead_msgs, Kind::Hash, lib);
                }
            }
            Lib::Bullmq => {
                let k = |part: &str| format!("bull:{q}:{part}");
                self.writes.push(cmd(&[
                    "HSET",
                    &k("meta"),
                    "version",
                    "bullmq:5.34.0",
                    "opts.maxLenEvents",
                    "10000",
                ]));
                self.key(&k("meta"), Kind::Hash, lib);
                for i in 1..=n {
                    let ts = format!("{}", ((t + i as f64 * 0.1) * 1000.0) as u64);
                    self.writes.push(cmd(&[
                        "HSET",
                        &k(&i.to_string()),
                        "name",
                        "job",
                        "data",
                        "{}",
                        "timestamp",
                        &ts,
                    ]));
                    self.key(&k(&i.to_string()), Kind::Hash, lib);
                    self.writes
                        .push(cmd(&["LPUSH", &k("wait"), &i.to_string()]));
                }
                self.key(&k("wait"), Kind::List, lib);
                self.writes.push(cmd(&["SET", &k("id"), &n.to_string()]));
                self.key(&k("id"), Kind::Str, lib);
                if rng.chance(0.5) {
                    let due = (t + 200_000.0) * 1000.0 * 4096.0;
                    self.writes
                        .push(cmd(&["ZADD", &k("delayed"), &format!("{due:.0}"), "99"]));
                    self.key(&k("delayed"), Kind::Zset, lib);
                }
                self.writes
                    .push(cmd(&["XADD", &k("events"), "*", "event", "added"]));
                self.key(&k("events"), Kind::Stream, lib);
            }
        }
    }

    /// A library's source-wide keys.
    fn write_lib_shared(&mut self, lib: Lib, _queues: &[String], t0: f64) {
        if lib == Lib::Dramatiq {
            // A worker's heartbeat: the mark zero config knows Dramatiq by.
            let ms = format!("{}", (t0 * 1000.0) as u64);
            self.writes
                .push(cmd(&["ZADD", "dramatiq:__heartbeats__", &ms, "w1"]));
            self.key("dramatiq:__heartbeats__", Kind::Zset, lib);
        }
        if lib == Lib::Sidekiq {
            let later = format!("{:.3}", t0 + 50_000.0);
            self.writes
                .push(cmd(&["ZADD", "sq:schedule", &later, "{\"jid\":\"x\"}"]));
            self.key("sq:schedule", Kind::Zset, lib);
            self.writes
                .push(cmd(&["ZADD", "sq:retry", &later, "{\"jid\":\"y\"}"]));
            self.key("sq:retry", Kind::Zset, lib);
            self.writes.push(cmd(&["SET", "sq:stat:processed", "10"]));
            self.key("sq:stat:processed", Kind::Str, lib);
        }
    }

    /// The group letters of the keys written.
    pub fn groups(&self) -> BTreeSet<char> {
        self.keys.iter().map(Key::group).collect()
    }

    /// The ACL: key patterns left out, and commands refused in some groups
    /// or everywhere. At least one group holding plain queues stays
    /// untouched unless the scenario restricts everything.
    fn restrict(&mut self, rng: &mut Rng) {
        let all: Vec<char> = self.groups().into_iter().collect();
        let plain: Vec<char> = all
            .iter()
            .copied()
            .filter(|g| PLAIN_GROUPS.iter().any(|(p, _)| p == g))
            .collect();
        // The group kept free of every restriction.
        let spared = *rng.pick(&plain);
        let candidates: Vec<char> = all.iter().copied().filter(|g| *g != spared).collect();
        let pick_groups = |rng: &mut Rng| -> Vec<char> {
            let mut v: Vec<char> = rng.subset(&candidates, 0.25);
            if v.is_empty() && !candidates.is_empty() {
                v.push(*rng.pick(&candidates));
            }
            v
        };
        let mut hidden: Vec<char> = Vec::new();
        if rng.chance(0.4) {
            hidden = pick_groups(rng);
        }
        let class = |groups: &[char]| -> String {
            if groups.is_empty() {
                "~*".to_string()
            } else {
                format!("~[^{}]*", groups.iter().collect::<String>())
            }
        };
        self.acl = vec!["-@all".into(), "+@read".into(), "+@connection".into()];
        self.acl.push(class(&hidden));
        if !hidden.is_empty() {
            self.story
                .push(format!("keys of groups {hidden:?} left out of the ACL"));
        }
        self.restricted.extend(hidden.iter().copied());
        let mut refused: Vec<&str> = Vec::new();
        if self.seed.is_multiple_of(8) {
            // Issue 36's case 2: zero config under an ACL that refuses
            // reading the kombu bindings (and RQ's registry): discovery
            // reads sets with SCARD and SSCAN.
            let mut out = vec!['_', 'r'];
            out.extend(hidden.iter().copied());
            out.sort();
            out.dedup();
            for command in ["scard", "sscan", "smembers"] {
                refused.push(command);
                self.acl.push(format!("-{command}"));
                self.acl.push(format!("(+{command} {})", class(&out)));
            }
            self.story
                .push("set reads refused in groups ['_', 'r'] (case 2)".into());
            self.restricted.extend(['_', 'r']);
        }
        for _ in 0..rng.range(0, 3) {
            let command = *rng.pick(REFUSABLE);
            if refused.contains(&command) {
                continue;
            }
            refused.push(command);
            if rng.chance(0.12) {
                self.acl.push(format!("-{command}"));
                self.story.push(format!("{command} refused everywhere"));
                self.global = true;
            } else {
                let groups = pick_groups(rng);
                let mut out: Vec<char> = groups.clone();
                out.extend(hidden.iter().copied());
                out.sort();
                out.dedup();
                self.acl.push(format!("-{command}"));
                self.acl.push(format!("(+{command} {})", class(&out)));
                self.story
                    .push(format!("{command} refused in groups {groups:?}"));
                self.restricted.extend(groups);
            }
        }
        // Celery's bindings unreadable: its lists are not told apart, and
        // in zero config any list may be one of its queues (zsets and
        // streams may not).
        if self.restricted.contains(&'_') {
            self.restricted.insert('c');
            if self.zero_config {
                self.restricted.extend(['e', 'g', 'n', 'r', 's', 'b', 'd']);
            }
        }
    }

    /// Library queues (one per logical queue, and one `(all)` unit per
    /// library: an over-count, which only makes the drop set larger), and
    /// the marks that count against `max_keys` beside them: Dramatiq's are
    /// many (its heartbeats zset and every `.msgs` hash, a dead letters'
    /// too), so it counts three per queue and two more.
    fn library_units(&self) -> usize {
        self.libs
            .iter()
            .map(|(lib, q)| match lib {
                Lib::Dramatiq => 3 * q.len() + 2,
                _ => q.len() + 1,
            })
            .sum()
    }

    /// The subject's `max_keys`, and the names it may drop.
    fn limit(&mut self, rng: &mut Rng) {
        let units = self.library_units();
        // What the budget is spent on, in order: (names counted first,
        // keys counted in key order after them).
        let (first, ordered): (usize, Vec<String>) = if self.zero_config {
            // Library queues first, then plain keys in key order. Keys of
            // restricted groups may be counted whatever their type or
            // library (an unrecognised library's lists are plain keys).
            let mut v: Vec<String> = self
                .keys
                .iter()
                .filter(|k| k.is_plain_queue() || self.restricted.contains(&k.group()))
                .map(|k| k.name.clone())
                .collect();
            v.sort();
            (units, v)
        } else {
            // `key:` entries, then pattern keys in key order (patterns are
            // written in group order, so both orders agree), then presets.
            let exact = self.exact_keys().len();
            let mut v: Vec<String> = self
                .keys
                .iter()
                .filter(|k| k.lib.is_none() && self.pattern_group(k.group()))
                .map(|k| k.name.clone())
                .collect();
            v.sort();
            (exact, v)
        };
        let total = first + ordered.len() + if self.zero_config { 0 } else { units };
        self.max_keys = if self.seed % 8 == 1 && total > first + 1 {
            // Issue 36's case 1: keys beyond `max_keys`.
            rng.range(first as u64 + 1, total as u64 - 1) as usize
        } else if rng.chance(0.4) {
            100_000
        } else {
            rng.range(1, total.max(2) as u64) as usize
        };
        if self.max_keys >= total {
            return;
        }
        self.story.push(format!(
            "max_keys {} of about {total} keys and queues",
            self.max_keys
        ));
        if self.max_keys < first {
            self.story
                .push("max_keys below the names counted first: everything may drop".into());
            self.global = true;
            return;
        }
        let room = self.max_keys - first;
        for name in ordered.iter().skip(room) {
            self.dropped.insert(name.clone());
        }
        if !self.zero_config && room < ordered.len() + units {
            for (lib, _) in &self.libs {
                self.restricted.extend(lib.groups().iter().copied());
            }
        }
    }

    /// Configured mode: groups read through a `pattern:`.
    fn pattern_group(&self, g: char) -> bool {
        matches!(g, 'g' | 'h' | 'j' | 'k' | 'm' | 'n')
    }

    /// Configured mode: the exact `key:` entries (`e:NN`, and `e:missing`,
    /// which never exists).
    pub fn exact_keys(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .keys
            .iter()
            .filter(|k| k.group() == 'e' && k.kind == Kind::List)
            .map(|k| k.name.clone())
            .collect();
        v.push("e:missing".into());
        v
    }

    /// The `queues:` entries of configured mode.
    fn configured(&self) -> String {
        let mut y = String::new();
        for name in self.exact_keys() {
            let counter = name.replacen("e:", "e:cnt:", 1);
            let _ = write!(
                y,
                "- key: \"{name}\"\n  age: {{ end: head, field: enqueued_at, unit: seconds }}\n"
            );
            if name != "e:missing" {
                let _ = writeln!(y, "  counters: {{ enqueued: \"{counter}\" }}");
            }
        }
        let present = self.groups();
        for (g, _) in PLAIN_GROUPS {
            if !self.pattern_group(*g) || !present.contains(g) {
                continue;
            }
            let _ = writeln!(y, "- pattern: \"{g}:*\"");
            match g {
                'g' => y.push_str("  age: { end: head, field: enqueued_at, unit: seconds }\n"),
                'h' => y.push_str("  score: timestamp\n"),
                _ => {}
            }
        }
        // A pattern over a group with no key: names under it are drained queues.
        y.push_str("- pattern: \"w:*\"\n");
        for (lib, queues) in &self.libs {
            match lib {
                Lib::Rq => y.push_str("- preset: rq\n"),
                Lib::Sidekiq => y.push_str("- preset: sidekiq\n  prefix: sq\n"),
                Lib::Celery => {
                    let _ = writeln!(y, "- preset: celery\n  queues: [{}]", queues.join(", "));
                }
                Lib::Bullmq => y.push_str("- preset: bullmq\n"),
                Lib::Arq => {
                    let _ = writeln!(y, "- preset: arq\n  queues: [{}]", queues.join(", "));
                }
                Lib::Dramatiq => y.push_str("- preset: dramatiq\n"),
            }
        }
        y
    }

    /// Whether a restriction or a drop may touch a name a query selects.
    /// `missing`: the query is an exact name no key has. A drop touches the
    /// names it selects, and also a missing name in its group: an exporter
    /// may record drops by prefix (`n:`) rather than by name, and then
    /// cannot vouch that `n:zz-missing` was not among them.
    pub fn touches(
        &self,
        selects: &dyn Fn(&str) -> bool,
        may_select_group: &dyn Fn(char) -> bool,
        missing: bool,
    ) -> bool {
        self.global
            || self.restricted.iter().any(|g| may_select_group(*g))
            || self.dropped.iter().any(|n| selects(n))
            || self.hidden_names.iter().any(|n| selects(n))
            || (missing
                && self
                    .dropped
                    .iter()
                    .filter_map(|n| n.chars().next())
                    .any(may_select_group))
    }

    /// The scenario in a few lines, for a failure message.
    pub fn describe(&self) -> String {
        format!(
            "seed {}: {}, client_tracking {}, {} keys, libraries {:?}\n  ACL: {}\n  restrictions: {}\n  restricted groups {:?}{}; dropped (at most) {:?}",
            self.seed,
            if self.zero_config {
                "zero config"
            } else {
                "configured"
            },
            self.client_tracking,
            self.keys.len(),
            self.libs,
            self.acl.join(" "),
            if self.story.is_empty() {
                "none".to_string()
            } else {
                self.story.join("; ")
            },
            self.restricted,
            if self.global { ", global" } else { "" },
            self.dropped,
        )
    }
}
