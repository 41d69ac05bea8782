//! Traces (SPEC 10): `tracing` spans exported as OpenTelemetry over
//! OTLP/gRPC when an endpoint is configured, and nothing exported (at no
//! cost beyond the spans themselves) when not. Configuration follows the
//! OpenTelemetry variables: `OTEL_EXPORTER_OTLP_ENDPOINT`,
//! `OTEL_SERVICE_NAME`, `OTEL_TRACES_SAMPLER` (and `_ARG`),
//! `OTEL_RESOURCE_ATTRIBUTES`; a configuration file's `[telemetry]` keys
//! fill in what the environment leaves unset.
//!
//! A trace crosses processes in W3C `traceparent` form: the coordinator
//! puts its node span's in each task, the worker makes its execution span
//! a child of it ([`traceparent`], [`set_parent`]).

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::OnceLock;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{
    Span as _, SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState, Tracer as _,
    TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, SdkTracerProvider};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// Where traces go, and as which service.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TelemetryConfig {
    /// The OTLP/gRPC endpoint (`http://collector:4317`); none: no export.
    pub endpoint: Option<String>,
    /// The service name spans are reported under.
    pub service_name: String,
}

impl TelemetryConfig {
    /// The environment's settings over `file` (a `[telemetry]` table's),
    /// with `service` as the default service name.
    pub fn resolve(
        file: TelemetryConfig,
        env: impl Fn(&str) -> Option<String>,
        service: &str,
    ) -> Self {
        let set = |name: &str| env(name).filter(|value| !value.trim().is_empty());
        Self {
            endpoint: set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
                .or_else(|| set("OTEL_EXPORTER_OTLP_ENDPOINT"))
                .or(file.endpoint),
            service_name: set("OTEL_SERVICE_NAME")
                .or(Some(file.service_name).filter(|name| !name.is_empty()))
                .unwrap_or_else(|| service.to_owned()),
        }
    }
}

/// Why traces cannot be exported.
#[derive(Debug, thiserror::Error)]
#[error("cannot set up the OTLP trace exporter for {endpoint}: {reason}")]
pub struct TelemetryError {
    endpoint: String,
    reason: String,
}

/// The exporter of a process's traces: flushed and shut down on drop (or
/// by [`Telemetry::shutdown`]), so the last spans are not lost at exit.
#[derive(Debug, Default)]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Exports what is pending and stops.
    pub fn shutdown(&mut self) {
        if let Some(provider) = self.provider.take() {
            let _ = provider.force_flush();
            let _ = provider.shutdown();
        }
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The tracer provider for `config`, when it names an endpoint.
pub(crate) fn provider(
    config: &TelemetryConfig,
) -> Result<Option<SdkTracerProvider>, TelemetryError> {
    let Some(endpoint) = &config.endpoint else {
        return Ok(None);
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint.clone())
        .build()
        .map_err(|error| TelemetryError {
            endpoint: endpoint.clone(),
            reason: error.to_string(),
        })?;
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name(config.service_name.clone())
        .with_attribute(opentelemetry::KeyValue::new(
            "process.pid",
            i64::from(std::process::id()),
        ))
        .build();
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .with_id_generator(RunRootIds::default())
        .build();
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    let _ = PROVIDER.set(provider.clone());
    Ok(Some(provider))
}

/// The process's exporter, for the spans made outside `tracing` (a run's
/// root).
static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

thread_local! {
    /// The ids the next span started on this thread takes: a run's root,
    /// whose ids are made from the run's id.
    static NEXT_IDS: Cell<Option<(TraceId, SpanId)>> = const { Cell::new(None) };
}

/// Random ids, except for a run's root span, whose ids are set beforehand
/// on the thread that starts it.
#[derive(Debug, Default)]
struct RunRootIds(RandomIdGenerator);

impl IdGenerator for RunRootIds {
    fn new_trace_id(&self) -> TraceId {
        NEXT_IDS
            .with(Cell::take)
            .map_or_else(|| self.0.new_trace_id(), |(trace, _)| trace)
    }

    fn new_span_id(&self) -> SpanId {
        NEXT_IDS
            .with(Cell::get)
            .map_or_else(|| self.0.new_span_id(), |(_, span)| span)
    }
}

/// The trace and root span ids of run `run_id` (`run-<32 hex digits>`).
fn run_root(run_id: &str) -> Option<(TraceId, SpanId)> {
    let hex = run_id.strip_prefix("run-").unwrap_or(run_id);
    let trace = u128::from_str_radix(hex, 16).ok()?;
    // The same in every process that continues the run.
    Some((TraceId::from(trace), SpanId::from((trace as u64) | 1)))
}

/// Exports the root span of a new run's trace, `run submitted`: every
/// process's `run` span of that run hangs under it ([`join_run_trace`]),
/// so the trace has its root even when a process that ran the run died
/// before exporting its spans. Call it once, when the run is created.
pub fn export_run_root(run_id: &str, graph: &str) {
    let (Some(provider), Some(ids)) = (PROVIDER.get(), run_root(run_id)) else {
        return;
    };
    let tracer = provider.tracer("weft");
    NEXT_IDS.with(|next| next.set(Some(ids)));
    let mut span = tracer
        .span_builder("run submitted")
        .with_attributes([
            KeyValue::new("run_id", run_id.to_owned()),
            KeyValue::new("graph", graph.to_owned()),
        ])
        .start_with_context(&tracer, &Context::new());
    NEXT_IDS.with(|next| next.set(None));
    span.end();
}

/// The `tracing` layer that turns spans into OpenTelemetry spans.
pub(crate) fn layer<S>(provider: &SdkTracerProvider) -> impl tracing_subscriber::Layer<S>
where
    S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
{
    tracing_opentelemetry::layer().with_tracer(provider.tracer("weft"))
}

pub(crate) fn guard(provider: Option<SdkTracerProvider>) -> Telemetry {
    Telemetry { provider }
}

/// `span`'s W3C `traceparent`, or an empty string when nothing traces.
pub fn traceparent(span: &tracing::Span) -> String {
    let context = span.context();
    if !context.span().span_context().is_valid() {
        return String::new();
    }
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(&context, &mut carrier);
    carrier.remove("traceparent").unwrap_or_default()
}

/// Makes `span` a child of the span a `traceparent` names (from another
/// process); an empty or malformed one leaves `span` as it is.
pub fn set_parent(span: &tracing::Span, traceparent: &str) {
    if traceparent.is_empty() {
        return;
    }
    let carrier = HashMap::from([("traceparent".to_owned(), traceparent.to_owned())]);
    let context = TraceContextPropagator::new().extract(&carrier);
    if context.span().span_context().is_valid() {
        let _ = span.set_parent(context);
    }
}

/// Makes `span` part of the trace a run's id names, under its root: the
/// run's 128-bit id is the trace id, so a run that goes on in another
/// process (after a restart, or on a new leader) stays one trace. `run_id`
/// is `run-<32 hex digits>`; another shape leaves `span` as it is.
pub fn join_run_trace(span: &tracing::Span, run_id: &str) {
    let Some((trace, root)) = run_root(run_id) else {
        return;
    };
    // The trace's root, exported when the run was created
    // ([`export_run_root`]).
    let parent = SpanContext::new(
        trace,
        root,
        TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    );
    let context = opentelemetry::Context::new().with_remote_span_context(parent);
    let _ = span.set_parent(context);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_wins_over_the_file_and_the_service_has_a_default() {
        let file = TelemetryConfig {
            endpoint: Some("http://file:4317".into()),
            service_name: String::new(),
        };
        let none = |_: &str| None;
        let resolved = TelemetryConfig::resolve(file.clone(), none, "weft-worker");
        assert_eq!(resolved.endpoint.as_deref(), Some("http://file:4317"));
        assert_eq!(resolved.service_name, "weft-worker");
        let env = |name: &str| match name {
            "OTEL_EXPORTER_OTLP_ENDPOINT" => Some("http://env:4317".to_owned()),
            "OTEL_SERVICE_NAME" => Some("workers-eu".to_owned()),
            _ => None,
        };
        let resolved = TelemetryConfig::resolve(file, env, "weft-worker");
        assert_eq!(resolved.endpoint.as_deref(), Some("http://env:4317"));
        assert_eq!(resolved.service_name, "workers-eu");
        assert_eq!(
            TelemetryConfig::resolve(TelemetryConfig::default(), none, "x").endpoint,
            None
        );
    }
}
