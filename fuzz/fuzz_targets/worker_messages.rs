//! A coordinator's message as a worker reads it (protobuf), decoded and
//! read by the worker protocol and the worker's reading of a task: never a
//! panic, whatever the fields hold (JSON text that is not JSON, unknown
//! kinds, unknown argument forms, node definitions kept or named by
//! numbers never given, …), each field read as a step would.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prost::Message;
use weft_proto::v1 as pb;
use weft_proto::worker_protocol::ToWorker;
use weft_proto::worker_protocol::wire::{read_coordinator_message, Kept};
use weft_proto::worker_protocol::TaskAssignment;
use weft_worker::state_sync::{Assignment, Sent};

/// Reads a task as the worker does, then each field's value it carried.
fn read_task(task: TaskAssignment) {
    let _ = task.definition.config();
    let assignment = Assignment::read(task);
    for field in &assignment.fields {
        if let Sent::Value(value) = &field.value {
            let _ = value.value();
        }
    }
}

fuzz_target!(|data: &[u8]| {
    // One session's definitions, kept across both readings below.
    let mut kept = Kept::default();
    if let Ok(message) = pb::CoordinatorMessage::decode(data) {
        let mut read = Vec::new();
        read_coordinator_message(message, &mut kept, &mut read);
        for message in read {
            if let Ok(ToWorker::Task(task)) = message {
                read_task(task);
            }
        }
    }
    if let Ok(assignment) = pb::TaskAssignment::decode(data) {
        let message = pb::CoordinatorMessage {
            body: Some(pb::coordinator_message::Body::Task(assignment)),
        };
        let mut read = Vec::new();
        read_coordinator_message(message, &mut kept, &mut read);
        if let Some(Ok(ToWorker::Task(task))) = read.pop() {
            read_task(task);
        }
    }
    // What the coordinator decodes from workers and clients.
    let _ = pb::WorkerMessage::decode(data);
    let _ = pb::SubmitRequest::decode(data);
});
