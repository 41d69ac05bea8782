//! A member's connection to the group's flow authority: one
//! `GroupService.Flow` stream to whichever member leads partition 0 by the
//! group's view — this one included, through its own address — made
//! again when that leader changes or the stream ends.
//!
//! Each connection has a generation: the dispatcher is told when one is
//! made (its registry then declares everything it holds and asks again
//! for what waits), of each answer on it, and when it ends; an answer of
//! an earlier connection is ignored there. While no member leads partition
//! 0, or its leader cannot be reached, the asks wait: nothing is granted
//! that the authority did not grant.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio_stream::StreamExt;
use tokio_util::sync::CancellationToken;
use weft_partitions::PartitionId;
use weft_proto::v1::group_service_client::GroupServiceClient;

use super::membership::GroupView;
use crate::dispatch::DispatcherHandle;
use crate::grpc::group_flow::{GROUP_KEY_HEADER, MEMBER_HEADER, answer_from_wire, to_wire};

/// The first pause before connecting again, doubled up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(50);
const MAX_PAUSE: Duration = Duration::from_secs(1);

/// How long a connection may take to be made.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// What a member needs to reach the authority.
pub struct Link {
    /// The group as last read.
    pub view: watch::Receiver<GroupView>,
    /// The member's dispatcher.
    pub dispatcher: DispatcherHandle,
    /// The group's key.
    pub key: Arc<str>,
    /// What to trust at an `https://` member.
    pub peers: weft_proto::transport::ClientTls,
    /// This member's URL, as the group lists it.
    pub url: String,
}

/// Keeps the member connected to the authority until `ended`.
pub async fn keep_linked(mut link: Link, ended: CancellationToken) {
    let mut generation = 0;
    let mut pause = FIRST_PAUSE;
    loop {
        let Some(url) = leader_of_zero(&mut link.view, &ended).await else {
            return;
        };
        generation += 1;
        match connect_once(&link, &url, generation, &ended).await {
            Ok(()) => pause = FIRST_PAUSE,
            Err(error) => {
                tracing::debug!(%url, %error, "cannot reach the group's flow authority yet");
            }
        }
        link.dispatcher.group_disconnected(generation);
        tokio::select! {
            () = ended.cancelled() => return,
            () = tokio::time::sleep(pause) => {}
        }
        pause = (pause * 2).min(MAX_PAUSE);
    }
}

/// The URL of partition 0's leader, once the view names one.
async fn leader_of_zero(
    view: &mut watch::Receiver<GroupView>,
    ended: &CancellationToken,
) -> Option<String> {
    loop {
        if let Some(url) = view.borrow_and_update().leaders.get(&PartitionId(0)) {
            return Some(url.clone());
        }
        tokio::select! {
            () = ended.cancelled() => return None,
            changed = view.changed() => changed.ok()?,
        }
    }
}

/// One connection: made, declared, its answers passed on until it ends,
/// partition 0's leader changes, or the member stops. `Ok` once it was
/// made.
async fn connect_once(
    link: &Link,
    url: &str,
    generation: u64,
    ended: &CancellationToken,
) -> Result<(), String> {
    let peers = if url.starts_with("https://") {
        link.peers.clone()
    } else {
        weft_proto::transport::ClientTls::default()
    };
    let endpoint = weft_proto::transport::endpoint(url, &peers)
        .map_err(|e| e.to_string())?
        .connect_timeout(CONNECT_TIMEOUT);
    let channel = tokio::time::timeout(CONNECT_TIMEOUT, endpoint.connect())
        .await
        .map_err(|_| "timed out".to_owned())?
        .map_err(|e| e.to_string())?;
    let (sender, requests) = mpsc::unbounded_channel();
    let outbound = tokio_stream::wrappers::UnboundedReceiverStream::new(requests).map(to_wire);
    let mut request = tonic::Request::new(outbound);
    let key = link
        .key
        .parse()
        .map_err(|_| "the group's key is not a header value".to_owned())?;
    request.metadata_mut().insert(GROUP_KEY_HEADER, key);
    let name = link
        .url
        .parse()
        .map_err(|_| "the member's URL is not a header value".to_owned())?;
    request.metadata_mut().insert(MEMBER_HEADER, name);
    let mut answers = GroupServiceClient::new(channel)
        .flow(request)
        .await
        .map_err(|status| status.message().to_owned())?
        .into_inner();
    tracing::info!(%url, generation, "connected to the group's flow authority");
    link.dispatcher.group_connected(generation, sender);
    let mut view = link.view.clone();
    loop {
        tokio::select! {
            () = ended.cancelled() => return Ok(()),
            answer = answers.message() => match answer {
                Ok(Some(answer)) => link.dispatcher.group_answer(generation, answer_from_wire(answer)),
                Ok(None) => return Ok(()),
                Err(status) => {
                    tracing::info!(%url, error = %status.message(), "the flow authority's stream ended");
                    return Ok(());
                }
            },
            changed = view.changed() => {
                if changed.is_err() {
                    return Ok(());
                }
                let moved = view.borrow_and_update().leaders.get(&PartitionId(0)).is_none_or(|u| u != url);
                if moved {
                    tracing::info!(%url, "partition 0 moved; connecting to its new leader");
                    return Ok(());
                }
            }
        }
    }
}
