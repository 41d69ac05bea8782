//! The coordinator's configuration, layered: defaults, then the TOML file,
//! then `WEFT_*` environment variables, then command-line flags. It is
//! validated once at start; a bad value is refused naming the key.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

mod flow;
mod http;
mod identities;
mod store;
mod tls;
pub use crate::runs::retention::Retention;
pub use http::HttpConfig;
use http::HttpLayer;
use identities::{CertificateEntry, IdentityParts, TokenEntry};
pub use store::StoreConfig;
use store::StoreLayer;
use tls::{TlsLayer, TlsParts};

/// Everything the coordinator needs to start.
#[derive(Debug, Clone, PartialEq)]
pub struct CoordinatorConfig {
    /// Address for clients and workers.
    pub listen: SocketAddr,
    /// Address of the Prometheus endpoint.
    pub metrics_listen: SocketAddr,
    /// Where the embedded store keeps its file.
    pub data_dir: PathBuf,
    /// How often heartbeats flow each way.
    pub heartbeat_interval: Duration,
    /// Silence after which a worker is declared lost.
    pub worker_timeout: Duration,
    /// Time past a task's own timeout after which the coordinator fails the
    /// attempt itself and cancels it on its worker.
    pub task_grace: Duration,
    /// How long a worker-hosted function (`fn:NAME`) may take.
    pub call_timeout: Duration,
    /// How many workers one task may lose (each dying or vanishing while
    /// it ran) before the task fails with `worker_lost`.
    pub max_task_losses: u32,
    /// Largest graph bundle accepted, in bytes.
    pub max_bundle_bytes: usize,
    /// Bytes of knowledge indexes kept for the workers, over every
    /// namespace (the least recently used dropped first); also the largest
    /// one index may be.
    pub max_index_bytes: u64,
    /// Bytes of node cache entries kept (SPEC 20), over every namespace
    /// (the least recently used dropped first).
    pub max_cache_bytes: u64,
    /// The largest one node cache entry may be: a larger answer is not
    /// kept, and its run is told why.
    pub max_cache_entry_bytes: u64,
    /// Largest run input accepted, in bytes.
    pub max_input_bytes: usize,
    /// Largest task result (its JSON) accepted from a worker, in bytes.
    pub max_result_bytes: usize,
    /// Requests served at once on one client or worker connection.
    pub max_concurrent_requests: usize,
    /// Connections each listener takes at once, and from one address.
    pub connections: crate::connections::ConnectionLimits,
    /// The workers that join at start are all there will be (an embedded
    /// cluster): work none of them hosts is refused at submission instead
    /// of waiting forever. Not a file or environment key.
    pub fixed_workers: bool,
    /// What one run may use (fields, items, events, attempts, …).
    pub limits: crate::run_actor::RunLimits,
    /// How many ended runs are kept, and for how long.
    pub retention: Retention,
    /// Where runs are kept: the data directory, or an etcd cluster shared
    /// with other coordinators.
    pub store: StoreConfig,
    /// How many partitions a group's runs are split into (`[cluster]
    /// partitions`; 1: one coordinator leads them all, the others stand
    /// by). Fixed when the group's store is first used.
    pub partitions: u32,
    /// Where traces go (`[telemetry]`); the OpenTelemetry variables
    /// override it when the binary starts.
    pub telemetry: weft_process::TelemetryConfig,
    /// TLS on both listeners (`[tls]`); `None`: plaintext.
    pub tls: Option<crate::tls::TlsFiles>,
    /// Who may call (`[[tokens]]`, `[[certificates]]`); empty: anyone.
    pub identities: crate::auth::Identities,
    /// Serve on a non-loopback address without TLS or identities
    /// (`insecure`, `WEFT_INSECURE`, `--insecure`), with a warning.
    pub insecure: bool,
    /// The run viewer's settings (`[http]`).
    pub http: HttpConfig,
    /// Cluster-wide rate limits on model calls (`[[limits]]`, SPEC 18).
    pub rate_limits: Vec<crate::dispatch::limits::LimitSpec>,
    /// What model calls cost (`[prices."MODEL"]`).
    pub prices: crate::prices::Prices,
    /// Namespaces' shares and caps (`[[namespaces]]`, SPEC 18).
    pub namespaces: Vec<flow::NamespaceSpec>,
}

impl Default for CoordinatorConfig {
    fn default() -> Self {
        Self {
            listen: ([127, 0, 0, 1], 7700).into(),
            metrics_listen: ([127, 0, 0, 1], 9464).into(),
            data_dir: PathBuf::from("weft-data"),
            heartbeat_interval: Duration::from_secs(2),
            worker_timeout: Duration::from_secs(10),
            task_grace: Duration::from_secs(10),
            call_timeout: Duration::from_secs(30),
            max_task_losses: 2,
            max_bundle_bytes: 64 << 20,
            max_index_bytes: 1 << 30,
            max_cache_bytes: 256 << 20,
            max_cache_entry_bytes: 1 << 20,
            max_input_bytes: 16 << 20,
            max_result_bytes: 16 << 20,
            max_concurrent_requests: 256,
            connections: crate::connections::ConnectionLimits::default(),
            fixed_workers: false,
            limits: crate::run_actor::RunLimits::default(),
            retention: Retention::default(),
            store: StoreConfig::default(),
            partitions: 1,
            telemetry: weft_process::TelemetryConfig::default(),
            tls: None,
            identities: crate::auth::Identities::default(),
            insecure: false,
            http: HttpConfig::default(),
            rate_limits: Vec::new(),
            prices: crate::prices::Prices::default(),
            namespaces: Vec::new(),
        }
    }
}

/// `[cluster]`: how a group of coordinators shares its runs.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClusterLayer {
    partitions: Option<u32>,
}

/// `[telemetry]`: where traces are exported (OTLP/gRPC).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TelemetryLayer {
    endpoint: Option<String>,
    service_name: Option<String>,
}

/// A value that can be given in the file, the environment or a flag.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Layer {
    listen: Option<String>,
    metrics_listen: Option<String>,
    data_dir: Option<PathBuf>,
    heartbeat_interval_ms: Option<u64>,
    worker_timeout_ms: Option<u64>,
    task_grace_ms: Option<u64>,
    call_timeout_ms: Option<u64>,
    max_task_losses: Option<u32>,
    max_bundle_bytes: Option<usize>,
    max_index_bytes: Option<u64>,
    max_cache_bytes: Option<u64>,
    max_cache_entry_bytes: Option<u64>,
    max_input_bytes: Option<usize>,
    max_result_bytes: Option<usize>,
    max_concurrent_requests: Option<usize>,
    max_connections: Option<usize>,
    max_connections_per_peer: Option<usize>,
    idle_timeout_ms: Option<u64>,
    max_output_fields: Option<u64>,
    max_state_fields: Option<u64>,
    max_attempts: Option<u64>,
    max_steps: Option<u64>,
    max_loop_iterations: Option<u64>,
    max_map_items: Option<u64>,
    max_events: Option<u64>,
    max_inbox_messages: Option<u64>,
    max_run_eval_steps: Option<u64>,
    max_run_eval_bytes: Option<u64>,
    max_knowledge_bytes: Option<u64>,
    max_message_bytes: Option<u64>,
    retain_finished_runs: Option<u64>,
    retain_finished_hours: Option<u64>,
    store: Option<StoreLayer>,
    cluster: Option<ClusterLayer>,
    telemetry: Option<TelemetryLayer>,
    tls: Option<TlsLayer>,
    http: Option<HttpLayer>,
    insecure: Option<bool>,
    secrets_file: Option<PathBuf>,
    tokens: Option<Vec<TokenEntry>>,
    certificates: Option<Vec<CertificateEntry>>,
    limits: Option<Vec<flow::LimitEntry>>,
    prices: Option<std::collections::BTreeMap<String, crate::prices::Price>>,
    namespaces: Option<Vec<flow::NamespaceEntry>>,
}

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file '{path}': {source}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid TOML for this configuration.
    #[error("config file '{path}': {message}")]
    Parse {
        /// The file.
        path: String,
        /// What is wrong, naming the key.
        message: String,
    },
    /// A value is out of range or malformed.
    #[error("config key '{key}': {reason}")]
    Invalid {
        /// The key.
        key: String,
        /// Why.
        reason: String,
    },
}

/// Flags from the command line, which win over everything else.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    /// `--listen`.
    pub listen: Option<String>,
    /// `--metrics-listen`.
    pub metrics_listen: Option<String>,
    /// `--data-dir`.
    pub data_dir: Option<PathBuf>,
    /// `--insecure`.
    pub insecure: bool,
}

impl CoordinatorConfig {
    /// What is accepted but likely a mistake: `[[limits]]` entries that
    /// can match nothing. `--check-config` prints these; the coordinator
    /// logs them at start.
    pub fn warnings(&self) -> Vec<String> {
        let namespaces = self.identities.namespaces();
        let limits = self.rate_limits.iter().filter_map(|spec| {
            flow::matches_nothing(spec, &namespaces)
                .map(|why| format!("limit '{}' {why}", spec.name))
        });
        let tenants = self
            .namespaces
            .iter()
            .filter(|ns| !namespaces.is_empty() && !namespaces.contains(&ns.name))
            .map(|ns| {
                format!(
                    "namespaces entry '{}' names a namespace no identity may submit to (identities' namespaces: {})",
                    ns.name,
                    namespaces.iter().cloned().collect::<Vec<_>>().join(", ")
                )
            });
        limits.chain(tenants).collect()
    }

    /// The namespaces' weights in the fair share of slots and limits.
    pub fn weights(&self) -> std::collections::HashMap<String, u32> {
        self.namespaces
            .iter()
            .map(|ns| (ns.name.clone(), ns.weight))
            .collect()
    }

    /// What the registry of runs takes from it.
    pub fn runs(&self) -> crate::runs::RunsConfig {
        crate::runs::RunsConfig {
            max_input_bytes: self.max_input_bytes,
            fixed_workers: self.fixed_workers,
            limits: self.limits.clone(),
            retention: self.retention,
            prices: std::sync::Arc::new(self.prices.clone()),
            max_running_runs: self
                .namespaces
                .iter()
                .filter_map(|ns| ns.max_running_runs.map(|max| (ns.name.clone(), max)))
                .collect(),
            day_budgets: self
                .namespaces
                .iter()
                .filter(|ns| ns.day.tokens.is_some() || ns.day.cost.is_some())
                .map(|ns| (ns.name.clone(), ns.day))
                .collect(),
        }
    }

    /// Builds the configuration from a TOML file (optional), environment
    /// variables (`WEFT_LISTEN`, `WEFT_METRICS_LISTEN`, `WEFT_DATA_DIR`,
    /// `WEFT_HEARTBEAT_INTERVAL_MS`, `WEFT_WORKER_TIMEOUT_MS`,
    /// `WEFT_TASK_GRACE_MS`, `WEFT_CALL_TIMEOUT_MS`, `WEFT_MAX_TASK_LOSSES`)
    /// and flags.
    pub fn load(
        file: Option<&std::path::Path>,
        env: impl Fn(&str) -> Option<String>,
        flags: &Overrides,
    ) -> Result<Self, ConfigError> {
        let mut config = Self::default();
        let mut tls = TlsParts::default();
        let mut identities = IdentityParts::default();
        if let Some(path) = file {
            let shown = path.display().to_string();
            let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                path: shown.clone(),
                source,
            })?;
            let mut layer: Layer = toml::from_str(&text).map_err(|error| ConfigError::Parse {
                path: shown,
                message: error.message().to_owned(),
            })?;
            let dir = path.parent().unwrap_or(std::path::Path::new("."));
            if let Some(store) = &mut layer.store
                && let Some(files) = store.tls.take()
            {
                store.tls = Some(files.relative_to(dir));
            }
            if let Some(files) = layer.tls.take() {
                tls.apply(files.relative_to(dir));
            }
            identities = IdentityParts::from_file(
                layer.tokens.take(),
                layer.certificates.take(),
                layer.secrets_file.take(),
                dir,
            );
            if let Some(entries) = layer.limits.take() {
                config.rate_limits = flow::limits(entries)?;
            }
            if let Some(entries) = layer.namespaces.take() {
                config.namespaces = flow::namespaces(entries)?;
            }
            if let Some(tables) = layer.prices.take() {
                config.prices = crate::prices::Prices::new(tables).map_err(|reason| {
                    let (key, reason) = reason.split_once(": ").unwrap_or(("prices", &reason));
                    ConfigError::Invalid {
                        key: key.to_owned(),
                        reason: reason.to_owned(),
                    }
                })?;
            }
            config.apply(layer)?;
        }
        let number = |key: &str| -> Result<Option<u64>, ConfigError> {
            env(key)
                .map(|text| {
                    text.trim()
                        .parse::<u64>()
                        .map_err(|_| ConfigError::Invalid {
                            key: key.to_owned(),
                            reason: format!("'{text}' is not a whole number"),
                        })
                })
                .transpose()
        };
        config.apply(Layer {
            listen: env("WEFT_LISTEN"),
            metrics_listen: env("WEFT_METRICS_LISTEN"),
            data_dir: env("WEFT_DATA_DIR").map(PathBuf::from),
            heartbeat_interval_ms: number("WEFT_HEARTBEAT_INTERVAL_MS")?,
            worker_timeout_ms: number("WEFT_WORKER_TIMEOUT_MS")?,
            task_grace_ms: number("WEFT_TASK_GRACE_MS")?,
            call_timeout_ms: number("WEFT_CALL_TIMEOUT_MS")?,
            max_task_losses: number("WEFT_MAX_TASK_LOSSES")?
                .map(|n| u32::try_from(n).unwrap_or(u32::MAX)),
            max_output_fields: number("WEFT_MAX_OUTPUT_FIELDS")?,
            max_state_fields: number("WEFT_MAX_STATE_FIELDS")?,
            max_attempts: number("WEFT_MAX_ATTEMPTS")?,
            max_steps: number("WEFT_MAX_STEPS")?,
            max_loop_iterations: number("WEFT_MAX_LOOP_ITERATIONS")?,
            max_map_items: number("WEFT_MAX_MAP_ITEMS")?,
            max_events: number("WEFT_MAX_EVENTS")?,
            max_inbox_messages: number("WEFT_MAX_INBOX_MESSAGES")?,
            max_run_eval_steps: number("WEFT_MAX_RUN_EVAL_STEPS")?,
            max_run_eval_bytes: number("WEFT_MAX_RUN_EVAL_BYTES")?,
            max_knowledge_bytes: number("WEFT_MAX_KNOWLEDGE_BYTES")?,
            max_message_bytes: number("WEFT_MAX_MESSAGE_BYTES")?,
            max_index_bytes: number("WEFT_MAX_INDEX_BYTES")?,
            max_cache_bytes: number("WEFT_MAX_CACHE_BYTES")?,
            max_cache_entry_bytes: number("WEFT_MAX_CACHE_ENTRY_BYTES")?,
            max_bundle_bytes: number("WEFT_MAX_BUNDLE_BYTES")?
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
            max_input_bytes: number("WEFT_MAX_INPUT_BYTES")?
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
            max_result_bytes: number("WEFT_MAX_RESULT_BYTES")?
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
            max_concurrent_requests: number("WEFT_MAX_CONCURRENT_REQUESTS")?
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
            max_connections: number("WEFT_MAX_CONNECTIONS")?
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
            max_connections_per_peer: number("WEFT_MAX_CONNECTIONS_PER_PEER")?
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
            idle_timeout_ms: number("WEFT_IDLE_TIMEOUT_MS")?,
            retain_finished_runs: number("WEFT_RETAIN_FINISHED_RUNS")?,
            retain_finished_hours: number("WEFT_RETAIN_FINISHED_HOURS")?,
            telemetry: None, // OTEL_* are read when the binary starts
            tls: None,       // WEFT_TLS_* are read below
            http: env("WEFT_TRACE_URL").map(|trace_url| HttpLayer {
                hosts: None,
                trace_url: Some(trace_url),
            }),
            insecure: env("WEFT_INSECURE")
                .map(|text| parse_bool("WEFT_INSECURE", &text))
                .transpose()?,
            secrets_file: None, // WEFT_SECRETS_FILE is read with the tokens
            tokens: None,
            certificates: None,
            limits: None,
            prices: None,
            namespaces: None,
            cluster: Some(ClusterLayer {
                partitions: number("WEFT_PARTITIONS")?
                    .map(|n| u32::try_from(n).unwrap_or(u32::MAX)),
            }),
            store: Some(StoreLayer {
                etcd: env("WEFT_ETCD").map(|list| {
                    list.split(',')
                        .map(|url| url.trim().to_owned())
                        .filter(|url| !url.is_empty())
                        .collect()
                }),
                advertise: env("WEFT_ADVERTISE"),
                lease_seconds: number("WEFT_LEASE_SECONDS")?,
                flush_interval_ms: number("WEFT_FLUSH_INTERVAL_MS")?,
                tls: store::StoreTlsLayer::from_env(&env),
            }),
        })?;
        config.apply(Layer {
            listen: flags.listen.clone(),
            metrics_listen: flags.metrics_listen.clone(),
            data_dir: flags.data_dir.clone(),
            insecure: flags.insecure.then_some(true),
            ..Layer::default()
        })?;
        if let Some(layer) = TlsLayer::from_env(&env) {
            tls.apply(layer);
        }
        config.check_tls(tls)?;
        let client_ca = config.tls.as_ref().is_some_and(|t| t.client_ca.is_some());
        config.identities = identities.resolve(&env, client_ca)?;
        config.check()?;
        Ok(config)
    }

    fn apply(&mut self, layer: Layer) -> Result<(), ConfigError> {
        self.apply_limits(&layer)?;
        if let Some(telemetry) = &layer.telemetry {
            if let Some(endpoint) = &telemetry.endpoint {
                self.telemetry.endpoint = Some(endpoint.clone());
            }
            if let Some(name) = &telemetry.service_name {
                self.telemetry.service_name = name.clone();
            }
        }
        if let Some(store) = layer.store {
            self.store.apply(store)?;
        }
        if let Some(partitions) = layer.cluster.and_then(|cluster| cluster.partitions) {
            self.partitions = partitions;
        }
        if let Some(http) = layer.http {
            self.http.apply(http)?;
        }
        let address = |key: &str, text: String| -> Result<SocketAddr, ConfigError> {
            parse_address(&text).ok_or_else(|| ConfigError::Invalid {
                key: key.to_owned(),
                reason: format!("'{text}' is not an address like 127.0.0.1:7700"),
            })
        };
        if let Some(text) = layer.listen {
            self.listen = address("listen", text)?;
        }
        if let Some(text) = layer.metrics_listen {
            self.metrics_listen = address("metrics_listen", text)?;
        }
        if let Some(dir) = layer.data_dir {
            self.data_dir = dir;
        }
        if let Some(insecure) = layer.insecure {
            self.insecure = insecure;
        }
        if let Some(ms) = layer.heartbeat_interval_ms {
            self.heartbeat_interval = Duration::from_millis(ms);
        }
        if let Some(ms) = layer.worker_timeout_ms {
            self.worker_timeout = Duration::from_millis(ms);
        }
        if let Some(ms) = layer.task_grace_ms {
            self.task_grace = Duration::from_millis(ms);
        }
        if let Some(ms) = layer.call_timeout_ms {
            self.call_timeout = Duration::from_millis(ms);
        }
        if let Some(count) = layer.max_task_losses {
            self.max_task_losses = count;
        }
        if let Some(bytes) = layer.max_bundle_bytes {
            self.max_bundle_bytes = bytes;
        }
        if let Some(bytes) = layer.max_input_bytes {
            self.max_input_bytes = bytes;
        }
        if let Some(bytes) = layer.max_index_bytes {
            self.max_index_bytes = bytes;
        }
        if let Some(bytes) = layer.max_cache_bytes {
            self.max_cache_bytes = bytes;
        }
        if let Some(bytes) = layer.max_cache_entry_bytes {
            self.max_cache_entry_bytes = bytes;
        }
        if let Some(bytes) = layer.max_result_bytes {
            self.max_result_bytes = bytes;
        }
        if let Some(count) = layer.max_connections {
            self.connections.per_listener = count;
        }
        if let Some(count) = layer.max_connections_per_peer {
            self.connections.per_peer = count;
        }
        if let Some(ms) = layer.idle_timeout_ms {
            self.connections.idle = Duration::from_millis(ms);
        }
        if let Some(count) = layer.max_concurrent_requests {
            self.max_concurrent_requests = count;
        }
        Ok(())
    }

    /// The run limits and retention of a layer; each limit must be at least 1.
    fn apply_limits(&mut self, layer: &Layer) -> Result<(), ConfigError> {
        let small = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
        let size = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
        if let Some(count) = layer.retain_finished_runs {
            self.retention.count = usize::try_from(count).unwrap_or(usize::MAX);
        }
        if let Some(hours) = layer.retain_finished_hours {
            self.retention.age = Duration::from_secs(hours.saturating_mul(3600));
        }
        let limits = &mut self.limits;
        let keys: [(&str, Option<u64>); 12] = [
            ("max_output_fields", layer.max_output_fields),
            ("max_state_fields", layer.max_state_fields),
            ("max_attempts", layer.max_attempts),
            ("max_steps", layer.max_steps),
            ("max_loop_iterations", layer.max_loop_iterations),
            ("max_map_items", layer.max_map_items),
            ("max_events", layer.max_events),
            ("max_inbox_messages", layer.max_inbox_messages),
            ("max_message_bytes", layer.max_message_bytes),
            ("max_run_eval_steps", layer.max_run_eval_steps),
            ("max_run_eval_bytes", layer.max_run_eval_bytes),
            ("max_knowledge_bytes", layer.max_knowledge_bytes),
        ];
        for (key, value) in keys {
            let Some(n) = value else { continue };
            if n == 0 {
                return Err(ConfigError::Invalid {
                    key: key.to_owned(),
                    reason: "must be at least 1".into(),
                });
            }
            match key {
                "max_output_fields" => limits.max_output_fields = size(n),
                "max_state_fields" => limits.max_state_fields = size(n),
                "max_attempts" => limits.max_attempts = small(n),
                "max_steps" => limits.max_steps = small(n),
                "max_loop_iterations" => limits.max_loop_iterations = small(n),
                "max_map_items" => limits.max_map_items = size(n),
                "max_events" => limits.max_events = size(n),
                "max_inbox_messages" => limits.max_inbox_messages = size(n),
                "max_run_eval_steps" => limits.max_run_eval.steps = n,
                "max_run_eval_bytes" => limits.max_run_eval.bytes = n,
                "max_knowledge_bytes" => limits.max_knowledge_bytes = n,
                _ => limits.max_message_bytes = size(n),
            }
        }
        Ok(())
    }

    fn check(&self) -> Result<(), ConfigError> {
        let invalid = |key: &str, reason: &str| ConfigError::Invalid {
            key: key.to_owned(),
            reason: reason.to_owned(),
        };
        if self.heartbeat_interval.is_zero() {
            return Err(invalid("heartbeat_interval_ms", "must be at least 1"));
        }
        if self.worker_timeout <= self.heartbeat_interval {
            return Err(invalid(
                "worker_timeout_ms",
                "must be longer than heartbeat_interval_ms",
            ));
        }
        if self.max_task_losses == 0 {
            return Err(invalid("max_task_losses", "must be at least 1"));
        }
        if self.call_timeout.is_zero() {
            return Err(invalid("call_timeout_ms", "must be at least 1"));
        }
        if self.connections.idle < std::time::Duration::from_secs(1) {
            return Err(invalid("idle_timeout_ms", "must be at least 1000"));
        }
        for (key, value) in [
            ("max_bundle_bytes", self.max_bundle_bytes),
            ("max_input_bytes", self.max_input_bytes),
            ("max_index_bytes", self.max_index_bytes as usize),
            ("max_cache_bytes", self.max_cache_bytes as usize),
            ("max_cache_entry_bytes", self.max_cache_entry_bytes as usize),
            ("max_result_bytes", self.max_result_bytes),
            ("max_concurrent_requests", self.max_concurrent_requests),
            ("max_connections", self.connections.per_listener),
            ("max_connections_per_peer", self.connections.per_peer),
        ] {
            if value == 0 {
                return Err(invalid(key, "must be at least 1"));
            }
        }
        self.check_store()?;
        self.check_exposure()?;
        // A request carries the bundle, the input and framing in one message.
        if self.max_bundle_bytes.saturating_add(self.max_input_bytes)
            > weft_proto::MAX_MESSAGE_BYTES
        {
            return Err(invalid(
                "max_bundle_bytes",
                "with max_input_bytes, must stay within the 256 MiB a message may hold",
            ));
        }
        Ok(())
    }
}

/// An address to listen on: `IP:PORT`, or `HOST:PORT` with a name this
/// machine resolves (`localhost:7700`), its first IPv4 address preferred.
fn parse_address(text: &str) -> Option<SocketAddr> {
    if let Ok(address) = text.parse() {
        return Some(address);
    }
    let (host, port) = text.rsplit_once(':')?;
    if host.is_empty() || port.parse::<u16>().is_err() {
        return None;
    }
    let resolved: Vec<SocketAddr> = std::net::ToSocketAddrs::to_socket_addrs(text)
        .ok()?
        .collect();
    resolved
        .iter()
        .find(|a| a.is_ipv4())
        .or_else(|| resolved.first())
        .copied()
}

/// `true`/`false` (or `1`/`0`) from a variable.
fn parse_bool(key: &str, text: &str) -> Result<bool, ConfigError> {
    match text.trim() {
        "true" | "1" => Ok(true),
        "false" | "0" | "" => Ok(false),
        other => Err(ConfigError::Invalid {
            key: key.to_owned(),
            reason: format!("'{other}' is not true or false"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn layers_apply_in_order() {
        let dir = std::env::temp_dir().join(format!("weft-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("coordinator.toml");
        std::fs::write(
            &file,
            "listen = \"127.0.0.1:8000\"\nworker_timeout_ms = 5000\n",
        )
        .unwrap();
        let env = |key: &str| (key == "WEFT_LISTEN").then(|| "127.0.0.1:8100".to_owned());
        let flags = Overrides {
            data_dir: Some("/tmp/x".into()),
            ..Overrides::default()
        };
        let config = CoordinatorConfig::load(Some(&file), env, &flags).unwrap();
        assert_eq!(config.listen, "127.0.0.1:8100".parse().unwrap());
        assert_eq!(config.worker_timeout, Duration::from_secs(5));
        assert_eq!(config.data_dir, PathBuf::from("/tmp/x"));
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn localhost_is_an_address_to_listen_on() {
        let flags = Overrides {
            listen: Some("localhost:7710".into()),
            ..Overrides::default()
        };
        let config = CoordinatorConfig::load(None, no_env, &flags).unwrap();
        assert_eq!(config.listen, "127.0.0.1:7710".parse().unwrap());
    }

    #[test]
    fn bad_values_are_refused_naming_the_key() {
        let flags = Overrides {
            listen: Some("nowhere".into()),
            ..Overrides::default()
        };
        let error = CoordinatorConfig::load(None, no_env, &flags).unwrap_err();
        assert_eq!(
            error.to_string(),
            "config key 'listen': 'nowhere' is not an address like 127.0.0.1:7700"
        );
        let env = |key: &str| (key == "WEFT_WORKER_TIMEOUT_MS").then(|| "10".to_owned());
        let error = CoordinatorConfig::load(None, env, &Overrides::default()).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("config key 'worker_timeout_ms'"),
            "{error}"
        );
    }

    #[test]
    fn unknown_file_key_is_refused() {
        let dir = std::env::temp_dir().join(format!("weft-config-bad-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("c.toml");
        std::fs::write(&file, "listne = \"127.0.0.1:1\"\n").unwrap();
        let error =
            CoordinatorConfig::load(Some(&file), no_env, &Overrides::default()).unwrap_err();
        assert!(error.to_string().contains("listne"), "{error}");
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn dispatch_limits_are_configurable_and_checked() {
        let env = |key: &str| match key {
            "WEFT_TASK_GRACE_MS" => Some("1500".to_owned()),
            "WEFT_CALL_TIMEOUT_MS" => Some("2500".to_owned()),
            "WEFT_MAX_TASK_LOSSES" => Some("2".to_owned()),
            _ => None,
        };
        let config = CoordinatorConfig::load(None, env, &Overrides::default()).unwrap();
        assert_eq!(config.task_grace, Duration::from_millis(1500));
        assert_eq!(config.call_timeout, Duration::from_millis(2500));
        assert_eq!(config.max_task_losses, 2);
        let none = |key: &str| (key == "WEFT_MAX_TASK_LOSSES").then(|| "0".to_owned());
        let error = CoordinatorConfig::load(None, none, &Overrides::default()).unwrap_err();
        assert_eq!(
            error.to_string(),
            "config key 'max_task_losses': must be at least 1"
        );
    }
}
