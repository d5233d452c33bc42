//! `web:`: TLS and basic auth for the HTTP listener (`/metrics`, `/`,
//! `/healthz`, `/readyz`), in the shape of the Prometheus exporter-toolkit's
//! `web.config` (`tls_server_config`, `basic_auth_users` with bcrypt hashes),
//! so a block written for node_exporter works here unchanged as long as it
//! uses only these fields.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Deserializer};

/// The `web:` block. Empty (the default): plain HTTP, no authentication.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WebConfig {
    /// Serve HTTPS instead of HTTP (and optionally check client certificates).
    pub tls_server_config: Option<WebTlsConfig>,
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
