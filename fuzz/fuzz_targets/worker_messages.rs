//! A task assignment as a coordinator sends it (protobuf), decoded and
//! read by the worker's conversion edge: never a panic, whatever the
//! fields hold (JSON text that is not JSON, unknown kinds, …).
#![no_main]

use libfuzzer_sys::fuzz_target;
use prost::Message;
use weft_proto::v1 as pb;

fuzz_target!(|data: &[u8]| {
    if let Ok(assignment) = pb::TaskAssignment::decode(data) {
        let _ = weft_worker::wire::read_assignment(assignment);
    }
    // What the coordinator decodes from workers and clients.
    let _ = pb::CoordinatorMessage::decode(data);
    let _ = pb::WorkerMessage::decode(data);
    let _ = pb::SubmitRequest::decode(data);
});
