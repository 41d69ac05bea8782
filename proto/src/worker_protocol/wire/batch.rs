//! A batch of tasks as the worker stream carries it, written and read by
//! hand where a map item's texts would otherwise be copied.
//!
//! Every map item's task carries its run's id, its map's id and its scope.
//! The generated message holds them as `String`s: a coordinator copied its
//! shared ids into new strings to encode them, and a worker decoded them
//! into new strings only to look the ids up and parse the scope. Here a
//! batch's task is the generated message for every other field, beside
//! those three as [`SharedText`]: written from the coordinator's shared
//! text, and read as views of the received message (`Bytes` split from
//! it, no copy). The bytes on the wire are the generated message's (a
//! test decodes one with the other).

use prost::bytes::{Buf, BufMut, Bytes};
use prost::encoding::{
    DecodeContext, WireType, bytes as wire_bytes, encode_key, encode_varint, encoded_len_varint,
    key_len, message, skip_field, uint32, uint64,
};
use prost::{DecodeError, Message};

use crate::SharedText;
use crate::v1 as pb;

/// `TaskBatch` of `workers.proto`.
#[derive(Clone, PartialEq, Default, Debug)]
pub struct TaskBatch {
    /// The tasks, in order.
    pub tasks: Vec<BatchTask>,
}

/// A `TaskAssignment` of a batch: the three texts each map item's task
/// carries as [`SharedText`], every other field in `rest`.
#[derive(Clone, PartialEq, Default, Debug)]
pub struct BatchTask {
    /// Every field but `run_id`, `scope_json` and `item`, which it leaves
    /// empty.
    pub rest: pb::TaskAssignment,
    /// Field 1.
    pub run_id: SharedText,
    /// Field 8.
    pub scope_json: SharedText,
    /// Field 9.
    pub item: Option<BatchItem>,
}

/// An `ItemRef`, its map's id shared.
#[derive(Clone, PartialEq, Default, Debug)]
pub struct BatchItem {
    /// Field 1: the map node's id.
    pub map: SharedText,
    /// Field 2.
    pub index: u64,
    /// Field 3.
    pub step: u32,
}

const RUN_ID: u32 = 1;
const SCOPE_JSON: u32 = 8;
const ITEM: u32 = 9;

/// Writes a string field from shared text (nothing for an empty one, as
/// for any string of proto3).
pub(super) fn encode_text(tag: u32, text: &SharedText, buf: &mut impl BufMut) {
    if !text.is_empty() {
        encode_key(tag, WireType::LengthDelimited, buf);
        encode_varint(text.len() as u64, buf);
        buf.put_slice(text.as_bytes());
    }
}

/// The length [`encode_text`] writes.
pub(super) fn text_len(tag: u32, text: &SharedText) -> usize {
    if text.is_empty() {
        0
    } else {
        key_len(tag) + encoded_len_varint(text.len() as u64) + text.len()
    }
}

/// A length-delimited field read as a view of the message's bytes.
pub(super) fn merge_text(
    wire_type: WireType,
    text: &mut SharedText,
    buf: &mut impl Buf,
    ctx: DecodeContext,
) -> Result<(), DecodeError> {
    let mut bytes = Bytes::new();
    wire_bytes::merge(wire_type, &mut bytes, buf, ctx)?;
    *text = SharedText::received(bytes);
    Ok(())
}

impl Message for TaskBatch {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        message::encode_repeated(1, &self.tasks, buf);
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        match tag {
            1 => message::merge_repeated(wire_type, &mut self.tasks, buf, ctx),
            _ => skip_field(wire_type, tag, buf, ctx),
        }
    }

    fn encoded_len(&self) -> usize {
        message::encoded_len_repeated(1, &self.tasks)
    }

    fn clear(&mut self) {
        self.tasks.clear();
    }
}

impl Message for BatchTask {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        encode_text(RUN_ID, &self.run_id, buf);
        self.rest.encode_raw(buf);
        encode_text(SCOPE_JSON, &self.scope_json, buf);
        if let Some(item) = &self.item {
            message::encode(ITEM, item, buf);
        }
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        match tag {
            RUN_ID => merge_text(wire_type, &mut self.run_id, buf, ctx),
            SCOPE_JSON => merge_text(wire_type, &mut self.scope_json, buf, ctx),
            ITEM => message::merge(
                wire_type,
                self.item.get_or_insert_with(BatchItem::default),
                buf,
                ctx,
            ),
            _ => self.rest.merge_field(tag, wire_type, buf, ctx),
        }
    }

    fn encoded_len(&self) -> usize {
        text_len(RUN_ID, &self.run_id)
            + self.rest.encoded_len()
            + text_len(SCOPE_JSON, &self.scope_json)
            + self
                .item
                .as_ref()
                .map_or(0, |item| message::encoded_len(ITEM, item))
    }

    fn clear(&mut self) {
        *self = Self::default();
    }
}

impl Message for BatchItem {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        encode_text(1, &self.map, buf);
        if self.index != 0 {
            uint64::encode(2, &self.index, buf);
        }
        if self.step != 0 {
            uint32::encode(3, &self.step, buf);
        }
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        match tag {
            1 => merge_text(wire_type, &mut self.map, buf, ctx),
            2 => uint64::merge(wire_type, &mut self.index, buf, ctx),
            3 => uint32::merge(wire_type, &mut self.step, buf, ctx),
            _ => skip_field(wire_type, tag, buf, ctx),
        }
    }

    fn encoded_len(&self) -> usize {
        text_len(1, &self.map)
            + if self.index != 0 {
                uint64::encoded_len(2, &self.index)
            } else {
                0
            }
            + if self.step != 0 {
                uint32::encoded_len(3, &self.step)
            } else {
                0
            }
    }

    fn clear(&mut self) {
        *self = Self::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generated() -> pb::TaskAssignment {
        pb::TaskAssignment {
            run_id: "run-7".into(),
            task_key: 12,
            node: "double".into(),
            attempt: 2,
            kind: "task".into(),
            config_json: r#"{"handler":"double"}"#.into(),
            state: vec![pb::StateField {
                name: "items".into(),
                version: 3,
                json: "[1,2]".into(),
            }],
            scope_json: r#"{"item":4}"#.into(),
            item: Some(pb::ItemRef {
                map: "fan".into(),
                index: 4,
                step: 1,
            }),
            timeout_ms: 30_000,
            traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into(),
            node_ref: 5,
            ..pb::TaskAssignment::default()
        }
    }

    #[test]
    fn a_batch_task_reads_as_the_generated_message_and_back() {
        let wire = generated();
        let read = BatchTask::decode(wire.encode_to_vec().as_slice()).unwrap();
        assert_eq!(read.run_id, SharedText::from("run-7"));
        assert_eq!(read.scope_json, SharedText::from(r#"{"item":4}"#));
        let item = read.item.clone().unwrap();
        assert_eq!((item.map, item.index, item.step), ("fan".into(), 4, 1));
        assert_eq!(read.rest.task_key, 12);
        assert!(read.rest.run_id.is_empty() && read.rest.item.is_none());
        // Written again, it reads as the generated message it came from.
        let again = pb::TaskAssignment::decode(read.encode_to_vec().as_slice()).unwrap();
        assert_eq!(again, wire);
        assert_eq!(read.encoded_len(), wire.encoded_len());
        let batch = TaskBatch {
            tasks: vec![read.clone(), BatchTask::default()],
        };
        let generated_batch = pb::CoordinatorMessage::decode(
            pb::CoordinatorMessage::from(pb::coordinator_message::Body::Tasks(batch.clone()))
                .encode_to_vec()
                .as_slice(),
        )
        .unwrap();
        assert_eq!(
            generated_batch.body,
            Some(pb::coordinator_message::Body::Tasks(batch))
        );
    }

    #[test]
    fn a_received_batch_tasks_texts_are_views_of_the_message_not_copies() {
        let bytes = Bytes::from(
            TaskBatch {
                tasks: vec![BatchTask::from(generated())],
            }
            .encode_to_vec(),
        );
        let range = bytes.as_ptr_range();
        let batch = TaskBatch::decode(bytes.clone()).unwrap();
        let task = &batch.tasks[0];
        let item = task.item.as_ref().unwrap();
        for text in [&task.run_id, &task.scope_json, &item.map] {
            assert!(
                range.contains(&text.as_bytes().as_ptr()),
                "{text:?} was copied out of the message"
            );
        }
    }

    #[test]
    fn a_task_whose_run_id_is_not_utf8_is_read_and_its_id_named_with_its_bytes_replaced() {
        let mut kept = super::super::Kept::default();
        let mut task = BatchTask::from(generated());
        task.run_id = SharedText::received(Bytes::from_static(b"run-\xff"));
        task.scope_json = SharedText::received(Bytes::from_static(b"{\"item\":\"\xff\"}"));
        let mut read = Vec::new();
        super::super::read_coordinator_message(
            pb::coordinator_message::Body::Tasks(TaskBatch { tasks: vec![task] }).into(),
            &mut kept,
            &mut read,
        );
        let Ok(crate::worker_protocol::ToWorker::Task(task)) = &read[0] else {
            panic!("not read as a task: {read:?}");
        };
        assert_eq!(task.run_id.as_str(), "run-\u{fffd}");
        // The scope's bytes go to the worker as they came; parsing them
        // names what is wrong.
        assert!(
            serde_json::from_slice::<serde_json::Value>(task.scope_json.as_bytes())
                .unwrap_err()
                .to_string()
                .contains("invalid unicode")
        );
    }
}
