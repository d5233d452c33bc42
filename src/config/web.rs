//! `web:`: TLS, response headers and basic auth for the HTTP listener
//! (`/metrics`, `/`, `/healthz`, `/readyz`), in the shape of the Prometheus
//! exporter-toolkit's `web.config` (`tls_server_config`, `http_server_config`,
//! `basic_auth_users` with bcrypt hashes), so a block written for
//! node_exporter works here unchanged. Every field is applied or refused at
//! load with one line; none is ignored. What rustls cannot do (TLS 1.0/1.1,
//! CBC or RSA key-exchange cipher suites, P-521) and HTTP/2 are refused.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Deserializer};

/// The `web:` block. Empty (the default): plain HTTP, no authentication.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WebConfig {
    /// Serve HTTPS instead of HTTP (and optionally check client certificates).
    pub tls_server_config: Option<WebTlsConfig>,
    /// HTTP-level settings: response headers, HTTP/2.
    pub http_server_config: HttpServerConfig,
    /// User name → bcrypt hash of the password. When not empty, every path
    /// but `/healthz` and `/readyz` needs HTTP basic auth.
    pub basic_auth_users: BTreeMap<String, BcryptHash>,
}

impl WebConfig {
    /// Checks what serde cannot check field by field.
    pub(super) fn validate(&self) -> Result<(), (String, String)> {
        if let Some(tls) = &self.tls_server_config {
            let at = |f: &str| format!("web.tls_server_config.{f}");
            match (tls.client_auth_type, &tls.client_ca_file) {
                (ClientAuthType::NoClientCert, Some(_)) => {
                    return Err((
                        at("client_ca_file"),
                        "is set but client_auth_type is NoClientCert; set client_auth_type to \
                         RequireAndVerifyClientCert or VerifyClientCertIfGiven"
                            .into(),
                    ));
                }
                (ClientAuthType::NoClientCert, None) => {}
                (_, None) => {
                    return Err((
                        at("client_ca_file"),
                        "is needed to verify client certificates".into(),
                    ));
                }
                (_, Some(_)) => {}
            }
        }
        if let Some(tls) = &self.tls_server_config
            && let (Some(min), Some(max)) = (tls.min_version, tls.max_version)
            && min > max
        {
            return Err((
                "web.tls_server_config.max_version".into(),
                format!(
                    "{} is older than min_version {}",
                    max.as_str(),
                    min.as_str()
                ),
            ));
        }
        if self.http_server_config.http2 == Some(true) {
            return Err((
                "web.http_server_config.http2".into(),
                "true is not supported: the listener speaks HTTP/1.1 only (clients that offer \
                 HTTP/2, as Prometheus does, settle on it); remove the field or set false"
                    .into(),
            ));
        }
        for (name, value) in &self.http_server_config.headers {
            let at = format!("web.http_server_config.headers.{name}");
            if !ALLOWED_HEADERS.iter().any(|h| h.eq_ignore_ascii_case(name)) {
                return Err((
                    at,
                    format!(
                        "is not a header exporter-toolkit allows; allowed: {}",
                        ALLOWED_HEADERS.join(", ")
                    ),
                ));
            }
            // What an HTTP header value may hold (no control characters).
            if value.is_empty()
                || !value
                    .bytes()
                    .all(|b| b == b'\t' || (0x20..0x7f).contains(&b))
            {
                return Err((
                    at,
                    "must be non-empty printable ASCII (no line breaks)".into(),
                ));
            }
        }
        for name in self.basic_auth_users.keys() {
            // Never echo the name's hash: a plain password pasted by mistake
            // would end up in the message.
            if name.is_empty() || name.contains(':') {
                return Err((
                    format!("web.basic_auth_users.{name}"),
                    "a user name must be non-empty and without ':'".into(),
                ));
            }
        }
        Ok(())
    }
}

/// TLS for the HTTP listener.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebTlsConfig {
    /// PEM certificate chain served to clients.
    pub cert_file: PathBuf,
    /// PEM private key of `cert_file`.
    pub key_file: PathBuf,
    /// PEM CA bundle client certificates must chain to.
    #[serde(default)]
    pub client_ca_file: Option<PathBuf>,
    /// Whether clients must present a certificate.
    #[serde(default)]
    pub client_auth_type: ClientAuthType,
    /// Oldest TLS version accepted; default (and oldest rustls has) TLS12.
    #[serde(default, deserialize_with = "de_tls_version")]
    pub min_version: Option<TlsVersion>,
    /// Newest TLS version accepted; default TLS13.
    #[serde(default, deserialize_with = "de_tls_version")]
    pub max_version: Option<TlsVersion>,
    /// The TLS 1.2 cipher suites offered, by their IANA/Go names; empty:
    /// rustls' defaults. As in Go, TLS 1.3 suites are always on (naming
    /// them is accepted). Checked at load against what rustls has.
    #[serde(default, deserialize_with = "de_cipher_suites")]
    pub cipher_suites: Vec<rustls::CipherSuite>,
    /// Prefer the server's cipher suite order over the client's (rustls'
    /// `ignore_client_order`); default: the client's order, rustls' default.
    #[serde(default)]
    pub prefer_server_cipher_suites: bool,
    /// Key exchange groups in order of preference, by Go's names
    /// (`X25519`, `CurveP256`, ...); empty: rustls' defaults.
    #[serde(default, deserialize_with = "de_curves")]
    pub curve_preferences: Vec<rustls::NamedGroup>,
}

/// exporter-toolkit's `http_server_config`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpServerConfig {
    /// exporter-toolkit's switch for HTTP/2 (on there by default). The
    /// listener speaks HTTP/1.1 only, so `false` is what it does and `true`
    /// is refused at load rather than ignored.
    pub http2: Option<bool>,
    /// Headers added to every response, such as `Strict-Transport-Security`.
    /// Only the names exporter-toolkit allows ([`ALLOWED_HEADERS`]).
    pub headers: BTreeMap<String, String>,
}

/// The response headers exporter-toolkit's `http_server_config.headers`
/// accepts (security headers; nothing that changes what a body means).
pub const ALLOWED_HEADERS: [&str; 5] = [
    "Strict-Transport-Security",
    "X-Content-Type-Options",
    "X-Frame-Options",
    "X-XSS-Protection",
    "Content-Security-Policy",
];

/// A TLS version of `min_version`/`max_version`. Ordered oldest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TlsVersion {
    /// TLS 1.2.
    Tls12,
    /// TLS 1.3.
    Tls13,
}

impl TlsVersion {
    /// As exporter-toolkit writes it: `TLS12`, `TLS13`.
    pub fn as_str(self) -> &'static str {
        match self {
            TlsVersion::Tls12 => "TLS12",
            TlsVersion::Tls13 => "TLS13",
        }
    }
}

fn de_tls_version<'de, D: Deserializer<'de>>(d: D) -> Result<Option<TlsVersion>, D::Error> {
    match String::deserialize(d)?.as_str() {
        "TLS12" => Ok(Some(TlsVersion::Tls12)),
        "TLS13" => Ok(Some(TlsVersion::Tls13)),
        v @ ("TLS10" | "TLS11") => Err(serde::de::Error::custom(format!(
            "{v} is not supported (rustls offers only TLS12 and TLS13)"
        ))),
        v => Err(serde::de::Error::custom(format!(
            "unknown TLS version {v:?} (expected TLS12 or TLS13)"
        ))),
    }
}

/// The crypto provider whose suites and groups the names are checked
/// against: the one the process installs (`crate::crypto`).
fn provider() -> rustls::crypto::CryptoProvider {
    rustls::crypto::aws_lc_rs::default_provider()
}

/// The name of a suite as Go writes it: IANA's (`TLS_AES_128_GCM_SHA256`
/// for TLS 1.3, which rustls calls `TLS13_AES_128_GCM_SHA256`).
fn suite_name(suite: rustls::CipherSuite) -> String {
    let name = format!("{suite:?}");
    match name.strip_prefix("TLS13_") {
        Some(rest) => format!("TLS_{rest}"),
        None => name,
    }
}

fn de_cipher_suites<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<rustls::CipherSuite>, D::Error> {
    let offered: Vec<rustls::CipherSuite> =
        provider().cipher_suites.iter().map(|s| s.suite()).collect();
    Vec::<String>::deserialize(d)?
        .into_iter()
        .map(|name| {
            // Go also accepts the ChaCha20 suites without `_SHA256`.
            let full = if name.ends_with("CHACHA20_POLY1305") {
                format!("{name}_SHA256")
            } else {
                name.clone()
            };
            offered
                .iter()
                .copied()
                .find(|s| suite_name(*s) == full)
                .ok_or_else(|| {
                    let names: Vec<String> = offered.iter().map(|s| suite_name(*s)).collect();
                    serde::de::Error::custom(format!(
                        "{name} is not supported (rustls offers only {})",
                        names.join(", ")
                    ))
                })
        })
        .collect()
}

/// Go's curve names and the TLS group each is.
const CURVES: [(&str, rustls::NamedGroup); 5] = [
    ("X25519", rustls::NamedGroup::X25519),
    ("CurveP256", rustls::NamedGroup::secp256r1),
    ("CurveP384", rustls::NamedGroup::secp384r1),
    ("CurveP521", rustls::NamedGroup::secp521r1),
    ("X25519MLKEM768", rustls::NamedGroup::X25519MLKEM768),
];

fn de_curves<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<rustls::NamedGroup>, D::Error> {
    let offered: Vec<rustls::NamedGroup> = provider().kx_groups.iter().map(|g| g.name()).collect();
    let supported: Vec<&str> = CURVES
        .iter()
        .filter(|(_, g)| offered.contains(g))
        .map(|(n, _)| *n)
        .collect();
    Vec::<String>::deserialize(d)?
        .into_iter()
        .map(|name| {
            CURVES
                .iter()
                .find(|(n, g)| *n == name && offered.contains(g))
                .map(|(_, g)| *g)
                .ok_or_else(|| {
                    serde::de::Error::custom(format!(
                        "{name} is not supported (rustls offers only {})",
                        supported.join(", ")
                    ))
                })
        })
        .collect()
}

/// The exporter-toolkit's `client_auth_type` values that verify what they
/// accept. `RequestClientCert` and `RequireAnyClientCert` (a certificate
/// taken without checking it proves nothing) are refused at load.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum ClientAuthType {
    /// No client certificate is asked for (the default).
    #[default]
    NoClientCert,
    /// A client certificate is optional, but checked against
    /// `client_ca_file` when presented.
    VerifyClientCertIfGiven,
    /// Every client must present a certificate `client_ca_file` signed (mTLS).
    RequireAndVerifyClientCert,
}

/// A bcrypt hash (`$2y$`, `$2b$`, `$2a$`), checked at load. Not a secret,
/// but never echoed in errors: a value that is not a hash may be a plain
/// password pasted by mistake.
#[derive(Clone, PartialEq, Eq)]
pub struct BcryptHash(String);

impl BcryptHash {
    /// Checks the format and the cost (4 to 31, what bcrypt accepts).
    pub fn parse(text: &str) -> Result<BcryptHash, String> {
        let parts: bcrypt::HashParts = text.parse().map_err(|_| {
            "is not a bcrypt hash (expected $2y$<cost>$ followed by 53 characters, as \
             `htpasswd -nBC 10 user` prints)"
                .to_string()
        })?;
        if !(4..=31).contains(&parts.get_cost()) {
            return Err("has a bcrypt cost outside 4..=31".into());
        }
        Ok(BcryptHash(text.to_string()))
    }

    /// The hash as written, for `bcrypt::verify`.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for BcryptHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BcryptHash(..)")
    }
}

impl<'de> Deserialize<'de> for BcryptHash {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        BcryptHash::parse(&String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use crate::config::load::tests::{FULL, load_yaml};

    #[test]
    fn web_block_keeps_user_names_as_written_and_checks_hashes() {
        let hash = bcrypt::hash("pw", 4).unwrap();
        let c = load_yaml(&format!(
            "web:\n  basic_auth_users:\n    Prometheus: \"{hash}\"\n{FULL}"
        ))
        .unwrap();
        let names: Vec<_> = c.web.basic_auth_users.keys().cloned().collect();
        assert_eq!(names, ["Prometheus"]);
        assert!(c.web.tls_server_config.is_none());
        let e = load_yaml(&format!(
            "web:\n  basic_auth_users:\n    bob: \"{}\"\n{FULL}",
            hash.replacen("$2b$04$", "$2b$99$", 1)
        ))
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "config.yaml: web.basic_auth_users.bob: has a bcrypt cost outside 4..=31"
        );
    }
}
