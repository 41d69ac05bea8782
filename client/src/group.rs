//! The group of coordinators as the one asked describes it (SPEC 21):
//! who leads each partition of a partitioned group and the runs each
//! holds, as `weft group` and [`crate::Client::group`] show them.

use serde::Serialize;
use weft_proto::v1 as pb;

/// A group of coordinators: one partition (a lone coordinator, or a
/// leader and its standbys) or several, each led by a member. Serialized
/// as the API's `/api/v1/group` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GroupInfo {
    /// The group's partition count.
    pub partitions: u32,
    /// The members of a partitioned group (none with one partition), the
    /// one asked first.
    pub members: Vec<GroupMember>,
    /// Partitions nobody leads at the moment (mid take-over).
    pub unled: Vec<u32>,
}

/// A member of a partitioned group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GroupMember {
    /// Its advertised URL.
    pub url: String,
    /// The partitions it leads.
    pub partitions: Vec<PartitionLed>,
    /// It answered for itself; otherwise its partitions are those the
    /// group's view names, uncounted.
    pub answered: bool,
    /// It is the coordinator the client asked.
    #[serde(rename = "this")]
    pub asked: bool,
}

/// A partition a member leads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PartitionLed {
    /// Its number.
    pub partition: u32,
    /// The runs it holds: counted for a caller who sees every namespace.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runs: Option<u64>,
    /// Its runs are being restored (it was just taken over).
    pub restoring: bool,
}

impl From<pb::GroupDescription> for GroupInfo {
    fn from(group: pb::GroupDescription) -> Self {
        let counted = group.runs_counted;
        Self {
            partitions: group.partitions,
            members: group
                .members
                .into_iter()
                .map(|member| GroupMember {
                    partitions: member
                        .partitions
                        .into_iter()
                        .map(|led| PartitionLed {
                            partition: led.partition,
                            runs: (counted && member.answered).then_some(led.runs),
                            restoring: led.restoring,
                        })
                        .collect(),
                    url: member.url,
                    answered: member.answered,
                    asked: member.asked,
                })
                .collect(),
            unled: group.unled,
        }
    }
}
