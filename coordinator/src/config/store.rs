//! The `[store]` table: where runs are kept. Without it, a redb file in the
//! data directory; with `etcd = [...]`, an etcd cluster that several
//! coordinators share, one of them leading (see `crate::ha`).

use std::time::Duration;

use serde::Deserialize;

use super::{ConfigError, CoordinatorConfig};

/// The `[store]` table: etcd endpoints for a high-availability group.
#[derive(Debug, Clone, PartialEq)]
pub struct StoreConfig {
    /// etcd's client URLs; empty for the embedded store.
    pub etcd: Vec<String>,
    /// The URL other coordinators and workers reach this one at (default
    /// `http://` and the listen address).
    pub advertise: Option<String>,
    /// The leader's lease: a leader that stops renewing it for this long is
    /// replaced.
    pub lease_ttl: Duration,
    /// When the embedded store's writes reach the disk (`flush_interval_ms`:
    /// 0 for an fsync on every write).
    pub flush: weft_store::Flush,
    /// TLS to `https://` etcd endpoints (`[store.tls]`).
    pub tls: weft_store::EtcdTls,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            etcd: Vec::new(),
            advertise: None,
            lease_ttl: Duration::from_secs(3),
            flush: weft_store::Flush::default(),
            tls: weft_store::EtcdTls::default(),
        }
    }
}

impl CoordinatorConfig {
    /// The URL this coordinator is reached at by the rest of its group.
    pub fn advertised_url(&self) -> String {
        self.store.advertise.clone().unwrap_or_else(|| {
            let scheme = if self.tls.is_some() { "https" } else { "http" };
            format!("{scheme}://{}", self.listen)
        })
    }
}

impl CoordinatorConfig {
    /// `[cluster] partitions`: in range, and on etcd.
    fn check_partitions(&self) -> Result<(), ConfigError> {
        let invalid = |reason: String| ConfigError::Invalid {
            key: "cluster.partitions".to_owned(),
            reason,
        };
        weft_partitions::Partitioning::new(self.partitions)
            .map_err(|error| invalid(error.to_string()))?;
        if self.partitions == 1 {
            return Ok(());
        }
        let n = self.partitions;
        if self.store.etcd.is_empty() {
            return Err(invalid(format!(
                "{n} partitions need a group on etcd ([store] etcd); the embedded store serves one coordinator, which leads one partition"
            )));
        }
        Ok(())
    }
}

/// The `[store]` table of a layer.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct StoreLayer {
    pub(super) etcd: Option<Vec<String>>,
    pub(super) advertise: Option<String>,
    pub(super) lease_seconds: Option<u64>,
    pub(super) flush_interval_ms: Option<u64>,
    pub(super) tls: Option<StoreTlsLayer>,
}

/// `[store.tls]`: the CA of etcd's certificates, and a client certificate
/// with its key (`WEFT_ETCD_CA`, `WEFT_ETCD_CERT`, `WEFT_ETCD_KEY`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct StoreTlsLayer {
    pub(super) ca: Option<std::path::PathBuf>,
    pub(super) cert: Option<std::path::PathBuf>,
    pub(super) key: Option<std::path::PathBuf>,
}

impl StoreTlsLayer {
    /// The variables' layer.
    pub(super) fn from_env(env: &impl Fn(&str) -> Option<String>) -> Option<Self> {
        let path = |name: &str| {
            env(name)
                .filter(|v| !v.trim().is_empty())
                .map(std::path::PathBuf::from)
        };
        let layer = Self {
            ca: path("WEFT_ETCD_CA"),
            cert: path("WEFT_ETCD_CERT"),
            key: path("WEFT_ETCD_KEY"),
        };
        (layer.ca.is_some() || layer.cert.is_some() || layer.key.is_some()).then_some(layer)
    }

    /// The same paths, relative ones taken from `dir`.
    pub(super) fn relative_to(self, dir: &std::path::Path) -> Self {
        let join = |path: Option<std::path::PathBuf>| path.map(|p| dir.join(p));
        Self {
            ca: join(self.ca),
            cert: join(self.cert),
            key: join(self.key),
        }
    }
}

/// A certificate given without its key, or the reverse.
fn pair_error(missing: &str) -> ConfigError {
    ConfigError::Invalid {
        key: missing.to_owned(),
        reason: "store.tls.cert and store.tls.key come together".to_owned(),
    }
}

impl StoreConfig {
    pub(super) fn apply(&mut self, layer: StoreLayer) -> Result<(), ConfigError> {
        if let Some(endpoints) = layer.etcd {
            self.etcd = endpoints;
        }
        if let Some(url) = layer.advertise {
            self.advertise = Some(url);
        }
        if let Some(seconds) = layer.lease_seconds {
            self.lease_ttl = Duration::from_secs(seconds);
        }
        if let Some(tls) = layer.tls {
            if tls.ca.is_some() {
                self.tls.ca = tls.ca;
            }
            match (tls.cert, tls.key) {
                (Some(cert), Some(key)) => self.tls.identity = Some((cert, key)),
                (None, None) => {}
                (Some(_), None) => return Err(pair_error("store.tls.key")),
                (None, Some(_)) => return Err(pair_error("store.tls.cert")),
            }
        }
        if let Some(ms) = layer.flush_interval_ms {
            self.flush = match ms {
                0 => weft_store::Flush::EachWrite,
                ms => weft_store::Flush::Every(Duration::from_millis(ms)),
            };
        }
        Ok(())
    }
}

/// Whether `url` is `http://host:port` with nothing after the authority.
fn plain_http_url(url: &str) -> bool {
    url_with_scheme(url, "http://")
}

/// Whether `url` is `SCHEME host:port` with nothing after the authority.
fn url_with_scheme(url: &str, scheme: &str) -> bool {
    url.strip_prefix(scheme)
        .map(|rest| rest.trim_end_matches('/'))
        .is_some_and(|authority| {
            !authority.is_empty()
                && !authority.contains(['/', '?', '#', ' '])
                && authority.rsplit_once(':').is_some_and(|(host, port)| {
                    !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0)
                })
        })
}

impl CoordinatorConfig {
    pub(super) fn check_store(&self) -> Result<(), ConfigError> {
        let invalid = |key: &str, reason: String| ConfigError::Invalid {
            key: key.to_owned(),
            reason,
        };
        self.check_partitions()?;
        for url in &self.store.etcd {
            if !plain_http_url(url) && !url_with_scheme(url, "https://") {
                return Err(invalid(
                    "store.etcd",
                    format!(
                        "'{url}' is not an endpoint like http://127.0.0.1:2379 or https://etcd-1:2379"
                    ),
                ));
            }
        }
        if !self.store.tls.is_empty() && !self.store.etcd.iter().any(|u| u.starts_with("https://"))
        {
            return Err(invalid(
                "store.tls",
                "is for https:// etcd endpoints; store.etcd names none".to_owned(),
            ));
        }
        // The group and the workers reach this coordinator as it serves:
        // over TLS when it has [tls].
        let scheme = if self.tls.is_some() {
            "https://"
        } else {
            "http://"
        };
        if let Some(url) = &self.store.advertise
            && !url_with_scheme(url, scheme)
        {
            let why = match (self.tls.is_some(), url_with_scheme(url, "http://")) {
                (true, true) => " (this coordinator serves TLS: advertise https://)",
                (false, false) if url_with_scheme(url, "https://") => {
                    " (this coordinator has no [tls]: advertise http://)"
                }
                _ => "",
            };
            return Err(invalid(
                "store.advertise",
                format!("'{url}' is not a URL like {scheme}10.0.0.5:7700{why}"),
            ));
        }
        if let weft_store::Flush::Every(interval) = self.store.flush
            && interval > Duration::from_secs(10)
        {
            return Err(invalid(
                "store.flush_interval_ms",
                "must be at most 10000 (0 flushes every write)".to_owned(),
            ));
        }
        if self.store.etcd.is_empty() {
            return Ok(());
        }
        if self.store.advertise.is_none() && self.listen.ip().is_unspecified() {
            return Err(invalid(
                "store.advertise",
                format!(
                    "must be set when listening on {} (the other coordinators and the \
                     workers need an address that reaches this one)",
                    self.listen
                ),
            ));
        }
        // etcd grants at least about 2 s; a lease over a minute makes a
        // failover wait that long.
        if !(2..=60).contains(&self.store.lease_ttl.as_secs()) {
            return Err(invalid(
                "store.lease_seconds",
                "must be between 2 and 60".to_owned(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::Overrides;
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn the_store_table_names_etcd_and_is_checked() {
        let dir = std::env::temp_dir().join(format!("weft-config-store-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("c.toml");
        let text = "listen = \"127.0.0.1:7701\"\n[store]\n\
                    etcd = [\"http://127.0.0.1:2379\"]\nlease_seconds = 4\nflush_interval_ms = 0\n";
        std::fs::write(&file, text).unwrap();
        let config = CoordinatorConfig::load(Some(&file), no_env, &Overrides::default()).unwrap();
        assert_eq!(config.store.etcd, vec!["http://127.0.0.1:2379".to_owned()]);
        assert_eq!(config.store.lease_ttl, Duration::from_secs(4));
        assert_eq!(config.store.flush, weft_store::Flush::EachWrite);
        assert_eq!(config.advertised_url(), "http://127.0.0.1:7701");
        let env = |key: &str| match key {
            "WEFT_ETCD" => Some("http://a:2379, http://b:2379".to_owned()),
            "WEFT_LISTEN" => Some("0.0.0.0:7700".to_owned()),
            _ => None,
        };
        let error = CoordinatorConfig::load(None, env, &Overrides::default()).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("config key 'store.advertise': must be set"),
            "{error}"
        );
        let env = |key: &str| (key == "WEFT_ETCD").then(|| "etcd:2379".to_owned());
        let error = CoordinatorConfig::load(None, env, &Overrides::default()).unwrap_err();
        assert_eq!(
            error.to_string(),
            "config key 'store.etcd': 'etcd:2379' is not an endpoint like http://127.0.0.1:2379 or https://etcd-1:2379"
        );
        std::fs::write(&file, "[store]\netdc = []\n").unwrap();
        let error =
            CoordinatorConfig::load(Some(&file), no_env, &Overrides::default()).unwrap_err();
        assert!(error.to_string().contains("etdc"), "{error}");
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn partitions_need_etcd() {
        let dir = std::env::temp_dir().join(format!("weft-config-parts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("c.toml");
        let load = |text: &str| {
            std::fs::write(&file, text).unwrap();
            CoordinatorConfig::load(Some(&file), no_env, &Overrides::default())
        };
        let etcd = "[store]\netcd = [\"http://127.0.0.1:2379\"]\n";
        let config = load(&format!("{etcd}[cluster]\npartitions = 16\n")).unwrap();
        assert_eq!(config.partitions, 16);
        assert_eq!(load("").unwrap().partitions, 1, "one partition by default");
        let refused = |text: &str| load(text).unwrap_err().to_string();
        assert_eq!(
            refused(&format!("{etcd}[cluster]\npartitions = 0\n")),
            "config key 'cluster.partitions': [cluster] partitions = 0: a group has 1 to 65536 partitions"
        );
        assert_eq!(
            refused("[cluster]\npartitions = 4\n"),
            "config key 'cluster.partitions': 4 partitions need a group on etcd ([store] etcd); the embedded store serves one coordinator, which leads one partition"
        );
        // The group's limits are held by partition 0's leader.
        let limits = "[[limits]]\nname = \"m\"\nrequests_per_minute = 10\n";
        let config = load(&format!("{etcd}[cluster]\npartitions = 4\n{limits}")).unwrap();
        assert_eq!(config.rate_limits.len(), 1);
        // So are the namespaces' caps and day budgets.
        let capped =
            "[[namespaces]]\nname = \"team\"\nmax_running_runs = 3\ntokens_per_day = 1000\n";
        let config = load(&format!("{etcd}[cluster]\npartitions = 4\n{capped}")).unwrap();
        assert_eq!(config.runs().max_running_runs.get("team"), Some(&3));
        let env = |key: &str| match key {
            "WEFT_ETCD" => Some("http://a:2379, http://b:2379".to_owned()),
            "WEFT_LISTEN" => Some("0.0.0.0:7700".to_owned()),
            _ => None,
        };
        let error = CoordinatorConfig::load(None, env, &Overrides::default()).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("config key 'store.advertise': must be set"),
            "{error}"
        );
        let env = |key: &str| (key == "WEFT_ETCD").then(|| "etcd:2379".to_owned());
        let error = CoordinatorConfig::load(None, env, &Overrides::default()).unwrap_err();
        assert_eq!(
            error.to_string(),
            "config key 'store.etcd': 'etcd:2379' is not an endpoint like http://127.0.0.1:2379 or https://etcd-1:2379"
        );
        std::fs::write(&file, "[store]\netdc = []\n").unwrap();
        let error =
            CoordinatorConfig::load(Some(&file), no_env, &Overrides::default()).unwrap_err();
        assert!(error.to_string().contains("etdc"), "{error}");
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn partitions_are_checked_and_take_every_flow_limit() {
        let dir = std::env::temp_dir().join(format!("weft-config-parts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("c.toml");
        let load = |text: &str| {
            std::fs::write(&file, text).unwrap();
            CoordinatorConfig::load(Some(&file), no_env, &Overrides::default())
        };
        let etcd = "[store]\netcd = [\"http://127.0.0.1:2379\"]\n";
        let config = load(&format!("{etcd}[cluster]\npartitions = 16\n")).unwrap();
        assert_eq!(config.partitions, 16);
        assert_eq!(load("").unwrap().partitions, 1, "one partition by default");
        let refused = |text: &str| load(text).unwrap_err().to_string();
        assert_eq!(
            refused(&format!("{etcd}[cluster]\npartitions = 0\n")),
            "config key 'cluster.partitions': [cluster] partitions = 0: a group has 1 to 65536 partitions"
        );
        assert_eq!(
            refused("[cluster]\npartitions = 4\n"),
            "config key 'cluster.partitions': 4 partitions need a group on etcd ([store] etcd); the embedded store serves one coordinator, which leads one partition"
        );
        // The group's limits are held by partition 0's leader.
        let limits = "[[limits]]\nname = \"m\"\nrequests_per_minute = 10\n";
        let config = load(&format!("{etcd}[cluster]\npartitions = 4\n{limits}")).unwrap();
        assert_eq!(config.rate_limits.len(), 1);
        // So are the namespaces' caps and day budgets.
        let capped =
            "[[namespaces]]\nname = \"team\"\nmax_running_runs = 3\ntokens_per_day = 1000\n";
        let config = load(&format!("{etcd}[cluster]\npartitions = 4\n{capped}")).unwrap();
        assert_eq!(config.runs().max_running_runs.get("team"), Some(&3));
        assert!(config.runs().day_budgets.contains_key("team"));
        let env = |key: &str| match key {
            "WEFT_ETCD" => Some("http://127.0.0.1:2379".to_owned()),
            "WEFT_PARTITIONS" => Some("8".to_owned()),
            _ => None,
        };
        let config = CoordinatorConfig::load(None, env, &Overrides::default()).unwrap();
        assert_eq!(config.partitions, 8);
        std::fs::remove_dir_all(dir).ok();
    }
}
