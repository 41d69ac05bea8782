//! A partitioned group described (`DescribeGroup`, the viewer's
//! partitions panel, `weft group`): the member asked describes the
//! partitions it leads and asks every other member to describe itself,
//! falling back on the group's view for one that does not answer.

use tonic::{Request, Response, Status};
use weft_proto::FORWARDED_METADATA;
use weft_proto::v1 as pb;
use weft_proto::v1::run_service_server::RunService;

use super::{Credentials, FrontRuns, Route};
use crate::ha::member::Member;

/// How long a member waits for another to describe itself before it shows
/// that one's partitions by the group's view, uncounted.
const DESCRIBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

impl FrontRuns {
    /// The group as `member` sees it: the partitions it leads (and their
    /// runs, counted for a caller who sees every namespace), and (unless
    /// the request was forwarded here) every other member's as it
    /// describes itself — or, where it does not answer within
    /// [`DESCRIBE_TIMEOUT`], as the view names them.
    pub(super) async fn describe_across(
        &self,
        member: &Member,
        request: Request<pb::DescribeGroupRequest>,
    ) -> Result<Response<pb::GroupDescription>, Status> {
        let forwarded_in = request.metadata().contains_key(FORWARDED_METADATA);
        let credentials = Credentials::of(&request);
        let counted = credentials.principal()?.role == crate::auth::Role::Admin;
        let here = pb::GroupMember {
            url: member.url.clone(),
            partitions: member
                .partitions
                .holdings()
                .into_iter()
                .map(|held| pb::PartitionLed {
                    partition: held.partition.0,
                    runs: if counted { held.runs as u64 } else { 0 },
                    restoring: held.restoring,
                })
                .collect(),
            answered: true,
            asked: true,
        };
        let (elsewhere, unled) = member.led_elsewhere();
        let mut members = vec![here];
        if !forwarded_in {
            for (url, by_view) in elsewhere {
                members.push(self.described(&credentials, url, by_view).await?);
            }
        }
        Ok(Response::new(pb::GroupDescription {
            partitions: member.partitions.count(),
            members,
            unled,
            runs_counted: counted,
        }))
    }

    /// The member at `url` as it describes itself, or, where it does not
    /// answer within [`DESCRIBE_TIMEOUT`], leading `by_view` (uncounted).
    async fn described(
        &self,
        credentials: &Credentials,
        url: String,
        by_view: Vec<u32>,
    ) -> Result<pb::GroupMember, Status> {
        let described = match self.client_of(url.clone()) {
            Ok(Route::Forward(mut client, url)) => {
                let onward = credentials.onward(
                    pb::DescribeGroupRequest {},
                    self.identities_required,
                    &url,
                )?;
                let call = self.forward(&url, client.describe_group(onward));
                tokio::time::timeout(DESCRIBE_TIMEOUT, call).await.ok()
            }
            _ => None,
        };
        let itself = described
            .and_then(Result::ok)
            .and_then(|answer| answer.into_inner().members.into_iter().find(|m| m.asked));
        Ok(match itself {
            Some(itself) => pb::GroupMember {
                asked: false,
                ..itself
            },
            None => pb::GroupMember {
                url,
                partitions: by_view
                    .into_iter()
                    .map(|partition| pb::PartitionLed {
                        partition,
                        runs: 0,
                        restoring: false,
                    })
                    .collect(),
                answered: false,
                asked: false,
            },
        })
    }

    /// The group as `caller` may see it (for the HTTP door).
    pub(crate) async fn group(&self, caller: &Credentials) -> Result<pb::GroupDescription, Status> {
        let request = caller.request(pb::DescribeGroupRequest {});
        Ok(self.describe_group(request).await?.into_inner())
    }

    /// The partition run `id` lives in, in a partitioned group.
    pub(crate) fn partition_of(&self, id: &str) -> Option<u32> {
        self.member().map(|member| member.partition_of(id))
    }
}
