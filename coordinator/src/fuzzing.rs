//! What the fuzz targets (`fuzz/`) call: the coordinator's conversion edge
//! fed messages decoded from arbitrary bytes, as a client or a worker
//! could send them. Not an API: it exists so the edge, private to the
//! gRPC services, is fuzzed as it runs.

use weft_proto::v1 as pb;

/// A submission as the run service takes it: the bundle checked against
/// a limit, its graph loaded and validated, the graphs it embeds found.
pub fn submission(request: pb::SubmitRequest) {
    let Ok(bundle) = crate::grpc::convert::bundle(request.bundle, 1 << 20) else {
        return;
    };
    if let Ok((graph, _)) = bundle.load_graph() {
        let _ = bundle.check_family(&graph);
    }
}

/// A worker's message as the worker service reads it.
pub fn worker_message(message: pb::WorkerMessage) {
    let mut last = weft_proto::worker_protocol::wire::LastRun::default();
    for message in weft_proto::worker_protocol::wire::unbatched(message) {
        let _ = weft_proto::worker_protocol::wire::is_large(&message);
        let _ = weft_proto::worker_protocol::wire::read_worker_message(message, &mut last);
    }
}
