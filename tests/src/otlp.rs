//! An OTLP trace receiver for tests: the OpenTelemetry collector's trace
//! service over gRPC on a free loopback port, keeping every span it is
//! sent, so a test can check one run's trace across real processes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use anyhow::Result;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, any_value};
use tokio_util::sync::CancellationToken;

/// One span as received.
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    /// `service.name` of the process that sent it.
    pub service: String,
    /// `process.pid` of the process that sent it.
    pub pid: String,
    /// The span's name.
    pub name: String,
    /// Hex.
    pub trace_id: String,
    /// Hex.
    pub span_id: String,
    /// Hex; empty for a root.
    pub parent_span_id: String,
    /// Attributes, as text.
    pub attributes: HashMap<String, String>,
    /// 2 is an error.
    pub status_code: i32,
    /// The status message.
    pub status_message: String,
}

/// A running receiver; stops when dropped.
pub struct TestOtlp {
    /// Its endpoint, for `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub url: String,
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
    stop: CancellationToken,
}

impl Drop for TestOtlp {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

struct Receiver {
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
}

fn text(value: &Option<AnyValue>) -> String {
    match value.as_ref().and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(n)) => n.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut received = Vec::new();
        for resource in request.into_inner().resource_spans {
            let attribute = |key: &str| {
                resource
                    .resource
                    .iter()
                    .flat_map(|r| &r.attributes)
                    .find(|kv| kv.key == key)
                    .map(|kv| text(&kv.value))
                    .unwrap_or_default()
            };
            let (service, pid) = (attribute("service.name"), attribute("process.pid"));
            for scope in resource.scope_spans {
                for span in scope.spans {
                    let status = span.status.unwrap_or_default();
                    received.push(ReceivedSpan {
                        service: service.clone(),
                        pid: pid.clone(),
                        name: span.name,
                        trace_id: hex(&span.trace_id),
                        span_id: hex(&span.span_id),
                        parent_span_id: hex(&span.parent_span_id),
                        attributes: span
                            .attributes
                            .iter()
                            .map(|kv| (kv.key.clone(), text(&kv.value)))
                            .collect(),
                        status_code: status.code,
                        status_message: status.message,
                    });
                }
            }
        }
        self.spans.lock().expect("spans lock").extend(received);
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

impl TestOtlp {
    /// Starts a receiver on a free loopback port.
    pub async fn start() -> Result<Self> {
        Self::start_on("127.0.0.1:0").await
    }

    /// Starts a receiver on `address`.
    pub async fn start_on(address: &str) -> Result<Self> {
        let listener = tokio::net::TcpListener::bind(address).await?;
        let url = format!("http://{}", listener.local_addr()?);
        let spans = Arc::new(Mutex::new(Vec::new()));
        let service = TraceServiceServer::new(Receiver {
            spans: spans.clone(),
        });
        let stop = CancellationToken::new();
        let token = stop.clone();
        tokio::spawn(async move {
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
            let _ = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(incoming, token.cancelled_owned())
                .await;
        });
        Ok(Self { url, spans, stop })
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.spans.lock().expect("spans lock").clone()
    }
}
