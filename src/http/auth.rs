//! HTTP basic auth against bcrypt hashes (`web.basic_auth_users`).
//!
//! bcrypt is slow on purpose (~50–250 ms a check at the usual costs), and
//! Prometheus sends the same header on every scrape, so each verdict is
//! cached under a keyed SHA-256 of the presented user and password: a
//! known header costs one hash-map lookup. Misses are checked one at a time
//! (a burst of scrapers with the same new header costs one bcrypt, and no
//! burst of wrong passwords can occupy more than one core), on tasks that
//! outlive a client that hangs up, at most `MAX_QUEUED` waiting. Plain
//! passwords are never stored, logged or echoed.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use sha2::{Digest, Sha256};

use crate::config::BcryptHash;

/// Paths served without credentials, so Kubernetes probes need no password:
/// `/healthz` says only `ok`, `/readyz` each source's name, kind and
/// up/down/pending. Everything else (`/metrics`, `/`, unknown paths) needs them.
pub const OPEN_PATHS: [&str; 2] = ["/healthz", "/readyz"];

/// Verdicts kept at most; past this the cache starts over (a flood of
/// distinct wrong passwords cannot grow memory).
const CACHE_LIMIT: usize = 1024;

/// Cache misses waiting for (or in) a bcrypt check at most; more are refused.
const MAX_QUEUED: usize = 64;

/// The `WWW-Authenticate` challenge of a 401.
const CHALLENGE: &str = "Basic realm=\"queue-exporter\", charset=\"UTF-8\"";

/// The configured users and the verdict cache.
pub struct BasicAuth {
    /// User name → bcrypt hash.
    users: BTreeMap<String, BcryptHash>,
    /// A hash that unknown users are checked against (the first user's), so
    /// a wrong name takes as long as a wrong password.
    decoy: BcryptHash,
    /// Random per process: keys the cache digests, so they say nothing
    /// about passwords outside this process and cannot be aimed at.
    key: [u8; 32],
    /// Digest of (user, password) → accepted.
    cache: Mutex<HashMap<[u8; 32], bool>>,
    /// Held while bcrypt runs: one check at a time.
    checking: tokio::sync::Mutex<()>,
    /// Permits for checks waiting or running ([`MAX_QUEUED`]).
    queued: Arc<tokio::sync::Semaphore>,
    /// How many bcrypt checks ran (cache misses).
    verifications: AtomicU64,
}

impl std::fmt::Debug for BasicAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BasicAuth")
            .field("users", &self.users.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// Why basic auth could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("web.basic_auth_users: no randomness for the credential cache key")]
pub struct NoRandomness;

impl BasicAuth {
    /// Basic auth for `users`; `None` when there are none (auth off).
    pub fn new(users: &BTreeMap<String, BcryptHash>) -> Result<Option<BasicAuth>, NoRandomness> {
        let Some(decoy) = users.values().next().cloned() else {
            return Ok(None);
        };
        let mut key = [0u8; 32];
        rustls::crypto::aws_lc_rs::default_provider()
            .secure_random
            .fill(&mut key)
            .map_err(|_| NoRandomness)?;
        Ok(Some(BasicAuth {
            users: users.clone(),
            decoy,
            key,
            cache: Mutex::new(HashMap::new()),
            checking: tokio::sync::Mutex::new(()),
            queued: Arc::new(tokio::sync::Semaphore::new(MAX_QUEUED)),
            verifications: AtomicU64::new(0),
        }))
    }

    /// Whether an `Authorization` header value names a user whose password
    /// matches. A miss is checked on a task of its own, so a client that
    /// gives up (a scrape timeout shorter than a bcrypt check) still leaves
    /// the verdict in the cache for its next try.
    pub async fn check(self: &Arc<Self>, header: &[u8]) -> bool {
        let Some((user, password)) = parse_basic(header) else {
            return false;
        };
        let digest = self.digest(&user, &password);
        if let Some(ok) = self.cached(&digest) {
            return ok;
        }
        // Bounded: a flood of new wrong passwords from clients that hang up
        // cannot queue bcrypt work without end; past the bound, new headers
        // are refused until the queue drains (cached ones still pass).
        let Ok(queued) = self.queued.clone().try_acquire_owned() else {
            return false;
        };
        let me = Arc::clone(self);
        let checked = tokio::spawn(async move {
            let _queued = queued;
            let _one_at_a_time = me.checking.lock().await;
            // Another request may have checked the same header meanwhile.
            if let Some(ok) = me.cached(&digest) {
                return ok;
            }
            let (hash, known) = match me.users.get(&user) {
                Some(h) => (h.clone(), true),
                None => (me.decoy.clone(), false),
            };
            me.verifications.fetch_add(1, Ordering::Relaxed);
            let verified =
                tokio::task::spawn_blocking(move || bcrypt::verify(&password, hash.as_str()))
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .unwrap_or(false);
            let ok = known && verified;
            let mut cache = me.cache.lock().unwrap_or_else(|p| p.into_inner());
            if cache.len() >= CACHE_LIMIT {
                cache.clear();
            }
            cache.insert(digest, ok);
            ok
        });
        checked.await.unwrap_or(false)
    }

    /// How many bcrypt checks ran so far (each a cache miss).
    pub fn verifications(&self) -> u64 {
        self.verifications.load(Ordering::Relaxed)
    }

    /// The cached verdict for a digest. The map is keyed by a keyed
    /// SHA-256, so where a lookup stops comparing reveals nothing an
    /// attacker can steer; bcrypt's own comparison is constant-time.
    fn cached(&self, digest: &[u8; 32]) -> Option<bool> {
        let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        cache.get(digest).copied()
    }

    /// SHA-256 over the process key, the user's length, the user and the password.
    fn digest(&self, user: &str, password: &[u8]) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(self.key);
        h.update((user.len() as u64).to_le_bytes());
        h.update(user.as_bytes());
        h.update(password);
        h.finalize().into()
    }
}

/// Why `hash-password` could not make a hash.
#[derive(Debug, thiserror::Error)]
pub enum HashPasswordError {
    /// Standard input could not be read.
    #[error("cannot read the password from standard input: {0}")]
    Read(#[from] std::io::Error),
    /// Nothing to hash.
    #[error("the password is empty (give it on standard input)")]
    Empty,
    /// bcrypt reads at most 72 bytes.
    #[error("the password is longer than 72 bytes; bcrypt would ignore the rest")]
    TooLong,
    /// A cost bcrypt does not accept, or no randomness for the salt.
    #[error("{0}")]
    Bcrypt(#[from] bcrypt::BcryptError),
}

/// The bcrypt hash (`$2b$`) of the first line of `input` (without its line
/// ending), for `web.basic_auth_users`.
pub fn hash_password_from(
    mut input: impl std::io::BufRead,
    cost: u32,
) -> Result<String, HashPasswordError> {
    let mut line = Vec::new();
    input.read_until(b'\n', &mut line)?;
    for end in [b'\n', b'\r'] {
        if line.last() == Some(&end) {
            line.pop();
        }
    }
    if line.is_empty() {
        return Err(HashPasswordError::Empty);
    }
    if line.len() > 72 {
        return Err(HashPasswordError::TooLong);
    }
    Ok(bcrypt::hash(&line, cost)?)
}

/// `Basic base64(user:password)` → (user, password). The scheme is
/// case-insensitive; the user must be UTF-8, the password is bytes.
fn parse_basic(header: &[u8]) -> Option<(String, Vec<u8>)> {
    let text = std::str::from_utf8(header).ok()?.trim();
    let (scheme, encoded) = text.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let colon = decoded.iter().position(|b| *b == b':')?;
    let user = String::from_utf8(decoded[..colon].to_vec()).ok()?;
    Some((user, decoded[colon + 1..].to_vec()))
}

/// The middleware: open paths pass; others need valid credentials, or get
/// a 401 with a `WWW-Authenticate` challenge.
pub async fn require(State(auth): State<Arc<BasicAuth>>, req: Request, next: Next) -> Response {
    if OPEN_PATHS.contains(&req.uri().path()) {
        return next.run(req).await;
    }
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .map(HeaderValue::as_bytes);
    match presented {
        Some(h) if auth.check(h).await => next.run(req).await,
        _ => unauthorized(),
    }
}

fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, CHALLENGE)],
        "Unauthorized\n",
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn auth_for(users: &[(&str, &str)]) -> Arc<BasicAuth> {
        let users = users
            .iter()
            .map(|(u, p)| {
                let hash = bcrypt::hash(p, 4).unwrap();
                (u.to_string(), BcryptHash::parse(&hash).unwrap())
            })
            .collect();
        Arc::new(BasicAuth::new(&users).unwrap().unwrap())
    }

    fn basic(user_pass: &str) -> Vec<u8> {
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(user_pass)
        )
        .into_bytes()
    }

    #[tokio::test]
    async fn right_wrong_and_malformed_credentials() {
        let auth = auth_for(&[("prometheus", "s3cret:with:colons"), ("bob", "pw")]);
        assert!(auth.check(&basic("prometheus:s3cret:with:colons")).await);
        assert!(auth.check(&basic("bob:pw")).await);
        // Cached, and still right.
        assert!(auth.check(&basic("bob:pw")).await);
        assert!(!auth.check(&basic("bob:pw ")).await);
        assert!(!auth.check(&basic("bob:s3cret:with:colons")).await);
        // An unknown user is refused even with a configured password.
        assert!(!auth.check(&basic("mallory:pw")).await);
        assert!(!auth.check(&basic("bob")).await);
        assert!(!auth.check(b"Bearer abc").await);
        assert!(!auth.check(b"Basic !!!").await);
        assert!(
            auth.check(
                format!(
                    "basic {}",
                    base64::engine::general_purpose::STANDARD.encode("bob:pw")
                )
                .as_bytes()
            )
            .await
        );
    }

    #[test]
    fn hash_password_hashes_the_first_line() {
        let hash = hash_password_from(&b"s3cret\r\nignored\n"[..], 4).unwrap();
        assert!(BcryptHash::parse(&hash).is_ok());
        assert!(bcrypt::verify("s3cret", &hash).unwrap());
        assert!(matches!(
            hash_password_from(&b"\n"[..], 4),
            Err(HashPasswordError::Empty)
        ));
        assert!(matches!(
            hash_password_from(&[b'x'; 73][..], 4),
            Err(HashPasswordError::TooLong)
        ));
        assert!(hash_password_from(&b"pw"[..], 3).is_err());
    }

    #[test]
    fn no_users_means_no_auth_and_debug_shows_no_hashes() {
        assert!(BasicAuth::new(&BTreeMap::new()).unwrap().is_none());
        let auth = auth_for(&[("bob", "pw")]);
        let shown = format!("{auth:?}");
        assert!(shown.contains("bob") && !shown.contains("$2"), "{shown}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_checks_of_one_header_run_bcrypt_once() {
        let auth = auth_for(&[("bob", "pw")]);
        let tasks: Vec<_> = (0..10)
            .map(|_| {
                let auth = auth.clone();
                tokio::spawn(async move { auth.check(&basic("bob:pw")).await })
            })
            .collect();
        for t in tasks {
            assert!(t.await.unwrap());
        }
        assert_eq!(auth.verifications(), 1);
        // Wrong passwords are cached too: a scraper with a stale password
        // costs one bcrypt, not one per scrape.
        for _ in 0..5 {
            assert!(!auth.check(&basic("bob:stale")).await);
        }
        assert_eq!(auth.verifications(), 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_check_the_client_gave_up_on_still_lands_in_the_cache() {
        let auth = auth_for(&[("bob", "pw")]);
        // Polled once, then dropped: a client that hangs up mid-check. The
        // test holds the one-at-a-time lock meanwhile, so the check cannot
        // finish before it is dropped, however the threads are scheduled
        // (a zero timeout, and later a bare first poll, raced a cost-4
        // bcrypt and failed under CI load).
        let held = auth.checking.lock().await;
        let gave_up = futures_util::FutureExt::now_or_never(auth.check(&basic("bob:pw")));
        assert!(gave_up.is_none(), "the check was still running");
        drop(held);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while auth.cache.lock().unwrap().is_empty() {
            assert!(std::time::Instant::now() < deadline, "never cached");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(auth.check(&basic("bob:pw")).await);
        assert_eq!(auth.verifications(), 1);
    }

    #[tokio::test]
    async fn the_cache_is_bounded() {
        let auth = auth_for(&[("bob", "pw")]);
        for i in 0..CACHE_LIMIT + 10 {
            assert!(!auth.check(&basic(&format!("bob:{i}"))).await);
        }
        assert!(auth.cache.lock().unwrap().len() <= CACHE_LIMIT);
    }
}
