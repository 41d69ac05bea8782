//! What the coordinator decodes from clients and workers, read by its own
//! conversion edge: a submission's bundle checked and its graph loaded and
//! validated, a worker's message turned into a result, a refusal, a
//! teammate send. Never a panic, whatever the bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prost::Message;
use weft_proto::v1 as pb;

fuzz_target!(|data: &[u8]| {
    if let Ok(request) = pb::SubmitRequest::decode(data) {
        weft_coordinator::fuzzing::submission(request);
    }
    if let Ok(message) = pb::WorkerMessage::decode(data) {
        weft_coordinator::fuzzing::worker_message(message);
    }
    let _ = pb::ResumeRequest::decode(data);
    let _ = pb::ListRunsRequest::decode(data);
    let _ = pb::WatchRunRequest::decode(data);
});
