//! `[http]`: what the run viewer on the HTTP listener links to, and the
//! names it answers to. `trace_url`: a URL pattern with `{trace_id}` in it
//! (a Jaeger or Tempo page, say), so a run's page links its trace
//! (`WEFT_TRACE_URL` sets it too); `hosts`: the names besides addresses and
//! `localhost` (see `http::origin`).

use serde::Deserialize;

use super::ConfigError;

/// The viewer's settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HttpConfig {
    /// Where a run's trace is shown: `{trace_id}` is replaced by its id.
    pub trace_url: Option<String>,
    /// The names the HTTP listener answers to besides addresses and
    /// `localhost` (`[http] hosts`); see `http::origin`.
    pub hosts: Vec<String>,
}

/// `[http]` as one layer gives it.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct HttpLayer {
    pub(super) trace_url: Option<String>,
    pub(super) hosts: Option<Vec<String>>,
}

impl HttpConfig {
    /// Takes what `layer` sets; a pattern must be an http(s) URL with
    /// `{trace_id}` in it.
    pub(super) fn apply(&mut self, layer: HttpLayer) -> Result<(), ConfigError> {
        if let Some(hosts) = layer.hosts {
            if let Some(bad) = hosts
                .iter()
                .find(|h| h.is_empty() || h.contains([':', '/', ' ']))
            {
                return Err(ConfigError::Invalid {
                    key: "http.hosts".into(),
                    reason: format!(
                        "'{bad}' is not a host name (write names without scheme or port)"
                    ),
                });
            }
            self.hosts = hosts;
        }
        let Some(pattern) = layer.trace_url else {
            return Ok(());
        };
        let invalid = |reason: &str| ConfigError::Invalid {
            key: "http.trace_url".into(),
            reason: format!("'{pattern}' {reason}"),
        };
        if !(pattern.starts_with("http://") || pattern.starts_with("https://")) {
            return Err(invalid("is not an http:// or https:// URL"));
        }
        if !pattern.contains("{trace_id}") {
            return Err(invalid(
                "does not say where the trace id goes: put {trace_id} in it",
            ));
        }
        self.trace_url = Some(pattern);
        Ok(())
    }

    /// The link to the trace `trace_id`, when a pattern is set.
    pub fn trace_link(&self, trace_id: &str) -> Option<String> {
        let pattern = self.trace_url.as_ref()?;
        (!trace_id.is_empty()).then(|| pattern.replace("{trace_id}", trace_id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn applied(pattern: &str) -> Result<HttpConfig, String> {
        let mut config = HttpConfig::default();
        let layer = HttpLayer {
            hosts: None,
            trace_url: Some(pattern.into()),
        };
        config
            .apply(layer)
            .map(|()| config)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_trace_url_names_where_the_id_goes() {
        let config = applied("http://jaeger:16686/trace/{trace_id}").unwrap();
        assert_eq!(
            config
                .trace_link("4bf92f3577b34da6a3ce929d0e0e4736")
                .as_deref(),
            Some("http://jaeger:16686/trace/4bf92f3577b34da6a3ce929d0e0e4736")
        );
        assert_eq!(config.trace_link(""), None);
        assert_eq!(HttpConfig::default().trace_link("abc"), None);
    }

    #[test]
    fn a_pattern_without_the_id_or_not_http_is_refused() {
        let error = applied("http://jaeger:16686/search").unwrap_err();
        assert!(
            error.contains("http.trace_url") && error.contains("{trace_id}"),
            "{error}"
        );
        let error = applied("jaeger/{trace_id}").unwrap_err();
        assert!(error.contains("not an http:// or https:// URL"), "{error}");
    }
}
