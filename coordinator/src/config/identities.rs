//! `[[tokens]]`, `[[certificates]]`, `secrets_file` and `insecure` (SPEC
//! 11): who may call the coordinator, read from the file and checked here.
//!
//! A token's secret is never in the file: `secret = "${NAME}"` names a
//! variable of the coordinator's environment or a line of its secrets file
//! (`secrets_file`, or `WEFT_SECRETS_FILE`), or `sha256 = "HEX"` gives its
//! digest. Only the digest is kept once the configuration is loaded, so
//! nothing printed or logged about it can show a secret.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use sha2::Digest;

use super::ConfigError;
use crate::auth::{Identities, Identity, Role};

/// One `[[tokens]]` entry as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TokenEntry {
    name: Option<String>,
    secret: Option<String>,
    sha256: Option<String>,
    role: Option<String>,
    namespace: Option<String>,
    namespaces: Option<Vec<String>>,
}

/// One `[[certificates]]` entry as written: the role of the client
/// certificates with this subject common name.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CertificateEntry {
    subject: Option<String>,
    role: Option<String>,
    namespace: Option<String>,
    namespaces: Option<Vec<String>>,
}

/// What the file says about identities.
#[derive(Debug, Default)]
pub(super) struct IdentityParts {
    pub(super) tokens: Vec<TokenEntry>,
    pub(super) certificates: Vec<CertificateEntry>,
    /// `secrets_file`, relative to the file's directory.
    pub(super) secrets_file: Option<PathBuf>,
}

fn invalid(key: String, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key,
        reason: reason.into(),
    }
}

/// A namespace name: letters, digits, `-`, `_` and `.`, 1 to 63 of them.
fn check_namespace(key: &str, name: &str) -> Result<(), ConfigError> {
    let fine = !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if fine {
        Ok(())
    } else {
        Err(invalid(
            key.to_owned(),
            format!("'{name}' is not a namespace name (1 to 63 letters, digits, '-', '_' or '.')"),
        ))
    }
}

/// The role, namespace and worker namespaces of an entry at `key`.
fn grant(
    key: &str,
    role: Option<&str>,
    namespace: Option<String>,
    namespaces: Option<Vec<String>>,
) -> Result<(Role, String, Option<Vec<String>>), ConfigError> {
    let role = match role {
        None => {
            return Err(invalid(
                format!("{key}.role"),
                "is required (reader, operator, admin or worker)",
            ));
        }
        Some(text) => Role::parse(text).ok_or_else(|| {
            invalid(
                format!("{key}.role"),
                format!("'{text}' is not a role (reader, operator, admin or worker)"),
            )
        })?,
    };
    let namespace = namespace.unwrap_or_else(|| crate::auth::DEFAULT_NAMESPACE.to_owned());
    check_namespace(&format!("{key}.namespace"), &namespace)?;
    if let Some(list) = &namespaces {
        if role != Role::Worker {
            return Err(invalid(
                format!("{key}.namespaces"),
                "only a worker identity takes namespaces (the namespaces whose tasks it may run); give other roles one `namespace`",
            ));
        }
        if list.is_empty() {
            return Err(invalid(
                format!("{key}.namespaces"),
                "is empty, so the worker could run nothing; leave it out to let it run every namespace's tasks",
            ));
        }
        for (index, name) in list.iter().enumerate() {
            check_namespace(&format!("{key}.namespaces[{index}]"), name)?;
        }
    }
    Ok((role, namespace, namespaces))
}

/// A token entry's SHA-256 digest, from its digest or its secret.
fn digest_of(
    key: &str,
    entry: &TokenEntry,
    secret_of: &dyn Fn(&str) -> Result<Option<String>, ConfigError>,
) -> Result<[u8; 32], ConfigError> {
    match (&entry.secret, &entry.sha256) {
        (Some(_), Some(_)) => Err(invalid(
            format!("{key}.sha256"),
            "give either secret or sha256, not both",
        )),
        (None, None) => Err(invalid(
            format!("{key}.secret"),
            "is required (secret = \"${NAME}\", or sha256 = \"HEX\")",
        )),
        (None, Some(hex)) => {
            let bytes = decode_hex(hex.trim()).ok_or_else(|| {
                invalid(
                    format!("{key}.sha256"),
                    "must be 64 hexadecimal digits (e.g. from `printf %s TOKEN | sha256sum`)",
                )
            })?;
            Ok(bytes)
        }
        (Some(reference), None) => {
            let name = reference
                .trim()
                .strip_prefix("${")
                .and_then(|rest| rest.strip_suffix('}'))
                .filter(|name| weft_process::is_secret_name(name))
                .ok_or_else(|| {
                    // The value is not repeated: it may be the secret itself.
                    invalid(
                        format!("{key}.secret"),
                        "must name a variable like \"${WEFT_TOKEN_CI}\", never hold the secret itself (or give sha256)",
                    )
                })?;
            let value = secret_of(name)?.filter(|v| !v.is_empty()).ok_or_else(|| {
                invalid(
                    format!("{key}.secret"),
                    format!(
                        "${{{name}}} is not set in the coordinator's environment or secrets file"
                    ),
                )
            })?;
            if value.len() < 16 {
                tracing::warn!(
                    token = %key,
                    "the secret of {key} is shorter than 16 characters; use a long random one"
                );
            }
            Ok(sha2::Sha256::digest(value.as_bytes()).into())
        }
    }
}

fn decode_hex(text: &str) -> Option<[u8; 32]> {
    if text.len() != 64 || !text.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (index, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[index * 2..index * 2 + 2], 16).ok()?;
    }
    Some(out)
}

impl IdentityParts {
    /// The entries of one file, relative paths taken from `dir`.
    pub(super) fn from_file(
        tokens: Option<Vec<TokenEntry>>,
        certificates: Option<Vec<CertificateEntry>>,
        secrets_file: Option<PathBuf>,
        dir: &Path,
    ) -> Self {
        Self {
            tokens: tokens.unwrap_or_default(),
            certificates: certificates.unwrap_or_default(),
            secrets_file: secrets_file.map(|path| dir.join(path)),
        }
    }

    /// The identity table: every entry checked, every secret resolved
    /// (from `env`, then the secrets file) and kept only as its digest.
    pub(super) fn resolve(
        self,
        env: &dyn Fn(&str) -> Option<String>,
        client_ca: bool,
    ) -> Result<Identities, ConfigError> {
        let file = self.secrets_file.or_else(|| {
            env("WEFT_SECRETS_FILE")
                .filter(|p| !p.trim().is_empty())
                .map(PathBuf::from)
        });
        // Read only when a secret is not in the environment: a file that
        // is not needed (every secret set in the environment) may be absent.
        let from_file: std::cell::OnceCell<Result<Vec<(String, String)>, String>> =
            std::cell::OnceCell::new();
        let secret_of = |name: &str| -> Result<Option<String>, ConfigError> {
            if let Some(value) = env(name) {
                return Ok(Some(value));
            }
            let Some(path) = &file else {
                return Ok(None);
            };
            let pairs = from_file
                .get_or_init(|| weft_process::read_secrets_file(path).map_err(|e| e.to_string()))
                .as_ref()
                .map_err(|error| invalid("secrets_file".into(), error.clone()))?;
            Ok(pairs
                .iter()
                .rev()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone()))
        };
        let mut identities = Identities::new(client_ca);
        let mut names: Vec<String> = Vec::new();
        let mut claim = |key: &str, name: &str| -> Result<(), ConfigError> {
            if name.trim().is_empty() {
                return Err(invalid(key.to_owned(), "is required and may not be blank"));
            }
            if names.iter().any(|n| n == name) {
                return Err(invalid(
                    key.to_owned(),
                    format!("'{name}' names two identities; each needs its own name"),
                ));
            }
            names.push(name.to_owned());
            Ok(())
        };
        for (index, entry) in self.tokens.iter().enumerate() {
            let key = format!("tokens[{index}]");
            let name = entry.name.clone().unwrap_or_default();
            claim(&format!("{key}.name"), &name)?;
            let digest = digest_of(&key, entry, &secret_of)?;
            let (role, namespace, namespaces) = grant(
                &key,
                entry.role.as_deref(),
                entry.namespace.clone(),
                entry.namespaces.clone(),
            )?;
            let identity = Identity::new(name, role, namespace, namespaces);
            if !identities.add_token(digest, identity) {
                return Err(invalid(
                    format!("{key}.secret"),
                    "is the secret of another token as well; each token needs its own",
                ));
            }
        }
        for (index, entry) in self.certificates.into_iter().enumerate() {
            let key = format!("certificates[{index}]");
            if !client_ca {
                return Err(invalid(
                    key,
                    "needs tls.client_ca: certificates are only presented to a coordinator that asks for them",
                ));
            }
            let subject = entry.subject.unwrap_or_default();
            claim(&format!("{key}.subject"), &subject)?;
            let (role, namespace, namespaces) = grant(
                &key,
                entry.role.as_deref(),
                entry.namespace,
                entry.namespaces,
            )?;
            identities.add_certificate(Identity::new(subject, role, namespace, namespaces));
        }
        Ok(identities)
    }
}

impl super::CoordinatorConfig {
    /// Secure by default (SPEC 11): a listener on a non-loopback address
    /// needs TLS and an identity requirement (the HTTP listener serves the
    /// run viewer's API, which acts on runs, as the gRPC one does), unless
    /// `insecure` says to serve without (the binary then warns).
    pub(super) fn check_exposure(&self) -> Result<(), ConfigError> {
        let exposed = [
            ("listen", self.listen),
            ("metrics_listen", self.metrics_listen),
        ]
        .into_iter()
        .find(|(_, address)| !address.ip().is_loopback());
        let Some((key, address)) = exposed else {
            return Ok(());
        };
        let mut missing = Vec::new();
        if self.tls.is_none() {
            missing.push("TLS ([tls] cert and key)");
        }
        if !self.identities.required() {
            missing.push("identities ([[tokens]] or tls.client_ca)");
        }
        if missing.is_empty() || self.insecure {
            return Ok(());
        }
        Err(invalid(
            key.to_owned(),
            format!(
                "{address} is not a loopback address, and this coordinator has no {}: anyone who reaches it could run commands on every worker; configure them, or set insecure = true (WEFT_INSECURE=true, --insecure) to serve without",
                missing.join(" and no ")
            ),
        ))
    }

    /// Whether this configuration serves beyond loopback without TLS or
    /// identities (allowed by `insecure`): the binary warns at start.
    pub fn exposed_insecurely(&self) -> bool {
        let open = !self.listen.ip().is_loopback() || !self.metrics_listen.ip().is_loopback();
        open && (self.tls.is_none() || !self.identities.required())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(name: &str, secret: Option<&str>, sha: Option<&str>, role: &str) -> TokenEntry {
        TokenEntry {
            name: Some(name.into()),
            secret: secret.map(Into::into),
            sha256: sha.map(Into::into),
            role: Some(role.into()),
            namespace: None,
            namespaces: None,
        }
    }

    fn resolve(tokens: Vec<TokenEntry>) -> Result<Identities, String> {
        let env = |name: &str| (name == "CI_TOKEN").then(|| "a-long-random-token-value".to_owned());
        IdentityParts {
            tokens,
            ..IdentityParts::default()
        }
        .resolve(&env, false)
        .map_err(|e| e.to_string())
    }

    #[test]
    fn secrets_are_references_and_only_their_digests_are_kept() {
        let identities = resolve(vec![token("ci", Some("${CI_TOKEN}"), None, "operator")]).unwrap();
        let shown = format!("{identities:?}");
        assert!(!shown.contains("a-long-random-token-value"), "{shown}");
        assert!(shown.contains("ci"), "{shown}");
        let error = resolve(vec![token(
            "ci",
            Some("a-literal-secret"),
            None,
            "operator",
        )])
        .unwrap_err();
        assert_eq!(
            error,
            "config key 'tokens[0].secret': must name a variable like \"${WEFT_TOKEN_CI}\", never hold the secret itself (or give sha256)"
        );
        let error = resolve(vec![token("ci", Some("${UNSET}"), None, "operator")]).unwrap_err();
        assert!(error.contains("${UNSET} is not set"), "{error}");
    }

    #[test]
    fn entries_are_checked_naming_the_key() {
        let cases = [
            (
                token("a", None, Some("abc"), "operator"),
                "tokens[0].sha256",
            ),
            (token("a", None, None, "operator"), "tokens[0].secret"),
            (
                token("a", Some("${CI_TOKEN}"), None, "boss"),
                "tokens[0].role",
            ),
            (
                token("", Some("${CI_TOKEN}"), None, "reader"),
                "tokens[0].name",
            ),
        ];
        for (entry, key) in cases {
            let error = resolve(vec![entry]).unwrap_err();
            assert!(error.starts_with(&format!("config key '{key}'")), "{error}");
        }
        let mut reader = token("r", Some("${CI_TOKEN}"), None, "reader");
        reader.namespaces = Some(vec!["a".into()]);
        let error = resolve(vec![reader]).unwrap_err();
        assert!(
            error.contains("only a worker identity takes namespaces"),
            "{error}"
        );
        let twice = vec![
            token("a", Some("${CI_TOKEN}"), None, "reader"),
            token("b", Some("${CI_TOKEN}"), None, "reader"),
        ];
        assert!(
            resolve(twice)
                .unwrap_err()
                .contains("secret of another token")
        );
    }
}
