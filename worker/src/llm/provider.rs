//! Model providers (SPEC 4): OpenAI-compatible endpoints a worker calls
//! for `llm` and `agent` steps.
//!
//! A worker's providers are `[providers.NAME]` tables of its configuration
//! file (`base_url`, `api_key = "${SECRET}"`, `model`, `timeout_seconds`,
//! `max_concurrent`); with none, the default provider comes from
//! `OPENAI_BASE_URL` and `OPENAI_API_KEY` (and `WEFT_MODEL`). A step names
//! one with `provider:`; without, it gets the table named `default`, else
//! the only table, else the environment's. A worker with no provider does
//! not host the kinds at all.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use tokio::sync::Semaphore;

use crate::secrets::{Redactor, SecretError, Secrets};

/// How long one request may take, unless the table says.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
/// Requests in flight per provider, unless the table says.
const DEFAULT_CONCURRENCY: usize = 8;

/// One `[providers.NAME]` table.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    /// The API's base URL, up to and including `/v1`.
    pub base_url: String,
    /// The API key; `${NAME}` is a secret.
    #[serde(default)]
    pub api_key: Option<String>,
    /// The model for steps that name none.
    #[serde(default)]
    pub model: Option<String>,
    /// How long one request may take.
    #[serde(default)]
    pub timeout_seconds: Option<u64>,
    /// Requests in flight at once.
    #[serde(default)]
    pub max_concurrent: Option<usize>,
}

/// Why a step has no provider on this worker.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoProvider {
    /// The step names a provider the worker lacks.
    #[error("this worker has no provider '{name}' (its providers: {known})")]
    Named {
        /// The name.
        name: String,
        /// The worker's providers.
        known: String,
    },
    /// The step names none, and the worker has no default.
    #[error(
        "this worker has no default provider: name one with `provider:`, or configure [providers.default]"
    )]
    Default,
}

/// Why the providers cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// A field names a secret the worker lacks.
    #[error("provider '{provider}': {source}")]
    Secret {
        /// The provider.
        provider: String,
        /// Which secret.
        source: SecretError,
    },
    /// The base URL is not `http(s)://…`.
    #[error("provider '{provider}': base_url '{url}' must start with http:// or https://")]
    BadUrl {
        /// The provider.
        provider: String,
        /// The URL.
        url: String,
    },
    /// A number out of range.
    #[error("provider '{provider}': {field} must be at least 1")]
    Zero {
        /// The provider.
        provider: String,
        /// The field.
        field: &'static str,
    },
    /// The HTTP client cannot be built (TLS roots).
    #[error("provider '{provider}': cannot build its HTTP client: {reason}")]
    Client {
        /// The provider.
        provider: String,
        /// Why.
        reason: String,
    },
}

/// A provider ready for requests.
pub struct Provider {
    /// Its name (`env` for the environment's).
    pub name: String,
    pub(crate) base_url: String,
    pub(crate) api_key: Option<String>,
    pub(crate) model: Option<String>,
    pub(crate) timeout: Duration,
    pub(crate) permits: Semaphore,
    pub(crate) http: reqwest::Client,
    /// Masks the provider's secrets in anything shown.
    pub(crate) redactor: Redactor,
}

impl std::fmt::Debug for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Provider")
            .field("name", &self.name)
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

impl Provider {
    fn new(name: &str, config: ProviderConfig, secrets: &Secrets) -> Result<Self, ProviderError> {
        let mut redactor = Redactor::default();
        let secret = |error| ProviderError::Secret {
            provider: name.to_owned(),
            source: error,
        };
        let base_url = secrets
            .substitute(&config.base_url, &mut redactor)
            .map_err(secret)?;
        if !base_url.starts_with("http://") && !base_url.starts_with("https://") {
            return Err(ProviderError::BadUrl {
                provider: name.to_owned(),
                url: redactor.redact(&base_url),
            });
        }
        let api_key = config
            .api_key
            .map(|key| secrets.substitute(&key, &mut redactor))
            .transpose()
            .map_err(secret)?
            .filter(|key| !key.is_empty());
        if let Some(key) = &api_key {
            // Masked wherever it shows, even when given literally.
            redactor.add(key);
        }
        let zero = |field| ProviderError::Zero {
            provider: name.to_owned(),
            field,
        };
        let timeout = match config.timeout_seconds {
            Some(0) => return Err(zero("timeout_seconds")),
            Some(seconds) => Duration::from_secs(seconds),
            None => DEFAULT_TIMEOUT,
        };
        let concurrency = match config.max_concurrent {
            Some(0) => return Err(zero("max_concurrent")),
            Some(n) => n,
            None => DEFAULT_CONCURRENCY,
        };
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .build()
            .map_err(|error| ProviderError::Client {
                provider: name.to_owned(),
                reason: error.to_string(),
            })?;
        Ok(Self {
            name: name.to_owned(),
            base_url: base_url.trim_end_matches('/').to_owned(),
            api_key,
            model: config.model.filter(|m| !m.is_empty()),
            timeout,
            permits: Semaphore::new(concurrency),
            http,
            redactor,
        })
    }
}

/// A worker's providers.
#[derive(Debug, Default)]
pub struct Providers {
    named: BTreeMap<String, Arc<Provider>>,
    fallback: Option<Arc<Provider>>,
}

impl Providers {
    /// The providers of a configuration file's `[providers.*]` tables,
    /// with the environment's (`env`) as the default when none is named
    /// `default` and there is not exactly one.
    pub fn new(
        tables: BTreeMap<String, ProviderConfig>,
        env: impl Fn(&str) -> Option<String>,
        secrets: &Secrets,
    ) -> Result<Self, ProviderError> {
        let mut named = BTreeMap::new();
        for (name, config) in tables {
            let provider = Provider::new(&name, config, secrets)?;
            named.insert(name, Arc::new(provider));
        }
        let fallback = match named.get("default") {
            Some(provider) => Some(provider.clone()),
            None if named.len() == 1 => named.values().next().cloned(),
            None => Self::from_env(env, secrets)?,
        };
        Ok(Self { named, fallback })
    }

    /// The environment's provider: `OPENAI_BASE_URL`, `OPENAI_API_KEY`,
    /// `WEFT_MODEL`; none without a base URL.
    fn from_env(
        env: impl Fn(&str) -> Option<String>,
        secrets: &Secrets,
    ) -> Result<Option<Arc<Provider>>, ProviderError> {
        let Some(base_url) = env("OPENAI_BASE_URL").filter(|url| !url.is_empty()) else {
            return Ok(None);
        };
        // Literal values: `$` in a key is not a secret reference here.
        let config = ProviderConfig {
            base_url: base_url.replace('$', "$$"),
            api_key: env("OPENAI_API_KEY").map(|key| key.replace('$', "$$")),
            model: env("WEFT_MODEL"),
            ..ProviderConfig::default()
        };
        Provider::new("env", config, secrets).map(|p| Some(Arc::new(p)))
    }

    /// Whether there is any provider.
    pub fn is_empty(&self) -> bool {
        self.named.is_empty() && self.fallback.is_none()
    }

    /// The provider a step names, or the default.
    pub fn get(&self, name: Option<&str>) -> Result<&Arc<Provider>, NoProvider> {
        match name {
            Some(name) => self.named.get(name).ok_or_else(|| {
                let known: Vec<&str> = self.named.keys().map(String::as_str).collect();
                NoProvider::Named {
                    name: name.to_owned(),
                    known: if known.is_empty() {
                        "none named".to_owned()
                    } else {
                        known.join(", ")
                    },
                }
            }),
            None => self.fallback.as_ref().ok_or(NoProvider::Default),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(url: &str, key: Option<&str>) -> ProviderConfig {
        ProviderConfig {
            base_url: url.into(),
            api_key: key.map(str::to_owned),
            ..ProviderConfig::default()
        }
    }

    #[test]
    fn the_default_is_named_default_the_only_one_or_the_environments() {
        let secrets = Secrets::new([("KEY".to_owned(), "sk-secret".to_owned())]);
        let env = |name: &str| match name {
            "OPENAI_BASE_URL" => Some("http://env.example/v1".to_owned()),
            "WEFT_MODEL" => Some("env-model".to_owned()),
            _ => None,
        };
        let one = BTreeMap::from([("local".to_owned(), table("http://a/v1/", Some("${KEY}")))]);
        let providers = Providers::new(one, env, &secrets).unwrap();
        let chosen = providers.get(None).unwrap();
        assert_eq!(
            (chosen.name.as_str(), chosen.base_url.as_str()),
            ("local", "http://a/v1")
        );
        assert_eq!(chosen.api_key.as_deref(), Some("sk-secret"));
        assert_eq!(chosen.redactor.redact("key sk-secret"), "key ***");
        let two = BTreeMap::from([
            ("a".to_owned(), table("http://a/v1", None)),
            ("b".to_owned(), table("http://b/v1", None)),
        ]);
        let providers = Providers::new(two, env, &secrets).unwrap();
        assert_eq!(providers.get(None).unwrap().name, "env");
        assert_eq!(
            providers.get(None).unwrap().model.as_deref(),
            Some("env-model")
        );
        assert_eq!(providers.get(Some("b")).unwrap().base_url, "http://b/v1");
        assert_eq!(
            providers.get(Some("c")).unwrap_err().to_string(),
            "this worker has no provider 'c' (its providers: a, b)"
        );
        let nothing = Providers::new(BTreeMap::new(), |_| None, &secrets).unwrap();
        assert!(nothing.is_empty());
    }

    #[test]
    fn bad_tables_are_refused_naming_the_provider() {
        let secrets = Secrets::default();
        let unset = BTreeMap::from([("p".to_owned(), table("http://a", Some("${NOPE}")))]);
        let error = Providers::new(unset, |_| None, &secrets).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("provider 'p': secret ${NOPE} is not set")
        );
        let ftp = BTreeMap::from([("p".to_owned(), table("ftp://a", None))]);
        let error = Providers::new(ftp, |_| None, &secrets).unwrap_err();
        assert_eq!(
            error.to_string(),
            "provider 'p': base_url 'ftp://a' must start with http:// or https://"
        );
    }
}
