//! A task's result as the worker stream carries it (`TaskResult` of
//! `workers.proto`), written and read by hand so that its run id is
//! shared rather than copied: a worker writes it from the id it holds,
//! and a coordinator reads it as a view of the received message, which it
//! compares with the last result's id from the same worker ([`LastRun`])
//! rather than make the same id again for each of a map's items. The
//! bytes on the wire are the generated message's (a test reads one as the
//! other).

use prost::bytes::{Buf, BufMut};
use prost::encoding::{DecodeContext, WireType, message, skip_field, uint64};
use prost::{DecodeError, Message};

use super::batch::{encode_text, merge_text, text_len};
use crate::v1 as pb;
use crate::{RunId, SharedText};

/// `TaskResult` of `workers.proto`.
#[derive(Clone, PartialEq, Default, Debug)]
pub struct TaskResult {
    /// Field 1.
    pub run_id: SharedText,
    /// Field 2.
    pub task_key: u64,
    /// Fields 3 and 4 (one of).
    pub outcome: Option<Outcome>,
    /// Field 5 (packed).
    pub messages_read: Vec<u64>,
}

/// What a task came to: the `outcome` of a [`TaskResult`].
#[derive(Clone, PartialEq, Debug)]
pub enum Outcome {
    /// Field 3.
    Output(pb::TaskOutput),
    /// Field 4.
    Error(pb::TaskError),
}

/// The run id of the last result read from one worker: the next result of
/// the same run (a map's items come one after another) shares it.
#[derive(Debug, Default)]
pub struct LastRun(Option<RunId>);

impl LastRun {
    /// The run id `text`, shared with the last result's when it is the
    /// same.
    pub fn run_id(&mut self, text: &SharedText) -> RunId {
        super::kept::shared_with_last(&mut self.0, text)
    }
}

impl Message for TaskResult {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        encode_text(1, &self.run_id, buf);
        if self.task_key != 0 {
            uint64::encode(2, &self.task_key, buf);
        }
        match &self.outcome {
            Some(Outcome::Output(output)) => message::encode(3, output, buf),
            Some(Outcome::Error(error)) => message::encode(4, error, buf),
            None => {}
        }
        uint64::encode_packed(5, &self.messages_read, buf);
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        match tag {
            1 => merge_text(wire_type, &mut self.run_id, buf, ctx),
            2 => uint64::merge(wire_type, &mut self.task_key, buf, ctx),
            // As one of a oneof: a second of the same kind merges into
            // the first, one of the other kind replaces it.
            3 => {
                let mut output = match self.outcome.take() {
                    Some(Outcome::Output(output)) => output,
                    _ => pb::TaskOutput::default(),
                };
                let merged = message::merge(wire_type, &mut output, buf, ctx);
                self.outcome = Some(Outcome::Output(output));
                merged
            }
            4 => {
                let mut error = match self.outcome.take() {
                    Some(Outcome::Error(error)) => error,
                    _ => pb::TaskError::default(),
                };
                let merged = message::merge(wire_type, &mut error, buf, ctx);
                self.outcome = Some(Outcome::Error(error));
                merged
            }
            5 => uint64::merge_repeated(wire_type, &mut self.messages_read, buf, ctx),
            _ => skip_field(wire_type, tag, buf, ctx),
        }
    }

    fn encoded_len(&self) -> usize {
        let run_id = text_len(1, &self.run_id);
        let key = if self.task_key != 0 {
            uint64::encoded_len(2, &self.task_key)
        } else {
            0
        };
        let outcome = match &self.outcome {
            Some(Outcome::Output(output)) => message::encoded_len(3, output),
            Some(Outcome::Error(error)) => message::encoded_len(4, error),
            None => 0,
        };
        run_id + key + outcome + uint64::encoded_len_packed(5, &self.messages_read)
    }

    fn clear(&mut self) {
        *self = Self::default();
    }
}

#[cfg(test)]
mod tests {
    use prost::bytes::Bytes;

    use super::*;

    /// `TaskResult` as prost would generate it from `workers.proto`.
    #[derive(Clone, PartialEq, prost::Message)]
    struct Generated {
        #[prost(string, tag = "1")]
        run_id: String,
        #[prost(uint64, tag = "2")]
        task_key: u64,
        #[prost(oneof = "GeneratedOutcome", tags = "3, 4")]
        outcome: Option<GeneratedOutcome>,
        #[prost(uint64, repeated, tag = "5")]
        messages_read: Vec<u64>,
    }

    #[derive(Clone, PartialEq, prost::Oneof)]
    enum GeneratedOutcome {
        #[prost(message, tag = "3")]
        Output(pb::TaskOutput),
        #[prost(message, tag = "4")]
        Error(pb::TaskError),
    }

    fn output() -> pb::TaskOutput {
        pb::TaskOutput {
            json: r#"{"doubled":8}"#.into(),
            output_json: String::new(),
            notes_json: vec![r#"{"type":"model_called"}"#.into()],
        }
    }

    #[test]
    fn a_result_reads_as_the_generated_message_and_back() {
        let generated = Generated {
            run_id: "run-7".into(),
            task_key: 12,
            outcome: Some(GeneratedOutcome::Output(output())),
            messages_read: vec![1, 300, 2],
        };
        let read = TaskResult::decode(generated.encode_to_vec().as_slice()).unwrap();
        assert_eq!(read.run_id, SharedText::from("run-7"));
        assert_eq!(read.task_key, 12);
        assert_eq!(read.outcome, Some(Outcome::Output(output())));
        assert_eq!(read.messages_read, [1, 300, 2]);
        assert_eq!(read.encoded_len(), generated.encoded_len());
        assert_eq!(read.encode_to_vec(), generated.encode_to_vec());
        let failed = Generated {
            outcome: Some(GeneratedOutcome::Error(pb::TaskError {
                kind: "timeout".into(),
                message: "too slow".into(),
                notes_json: Vec::new(),
            })),
            ..generated
        };
        let read = TaskResult::decode(failed.encode_to_vec().as_slice()).unwrap();
        assert_eq!(read.encode_to_vec(), failed.encode_to_vec());
    }

    #[test]
    fn a_received_results_run_id_is_a_view_of_the_message_and_shared_with_the_last() {
        let bytes = Bytes::from(
            TaskResult {
                run_id: SharedText::from("run-7"),
                task_key: 3,
                ..TaskResult::default()
            }
            .encode_to_vec(),
        );
        let read = TaskResult::decode(bytes.clone()).unwrap();
        assert!(
            bytes
                .as_ptr_range()
                .contains(&read.run_id.as_bytes().as_ptr())
        );
        let mut last = LastRun::default();
        let first = last.run_id(&read.run_id);
        let again = last.run_id(&SharedText::from("run-7"));
        assert_eq!(first.as_ptr(), again.as_ptr());
        let other = last.run_id(&SharedText::from("run-8"));
        assert_eq!(other, "run-8");
    }
}
