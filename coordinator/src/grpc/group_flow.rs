//! `GroupService.Flow`: the door of the group's flow authority, and the
//! conversion edge between its messages and the pure core's
//! ([`crate::dispatch::group_flow`]), both ways.
//!
//! Only members of the group may call it: a caller shows the group's key,
//! which is kept in the group's store (whoever can read the store is a
//! member already). The auth layer lets the service's requests through to
//! this check instead of the identities, which name clients and workers,
//! not coordinators.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};
use weft_proto::v1 as pb;
use weft_proto::v1::group_service_server::GroupService;

use crate::dispatch::group_flow::{Answer, Ask, Keyed, RunRefusal};
use crate::dispatch::group_gate::ToAuthority;
use crate::dispatch::limits::{Settlement, Subject, Target};
use crate::term::Role;

/// The header a member shows the group's key in.
pub const GROUP_KEY_HEADER: &str = "x-weft-group-key";

/// The header a member names itself in (its advertised URL).
pub const MEMBER_HEADER: &str = "x-weft-member";

/// The service's path prefix, which the auth layer leaves to it.
pub const SERVICE_PREFIX: &str = "/weft.v1.GroupService/";

/// The group service in front of the role.
#[derive(Clone)]
pub struct GroupFlow {
    role: watch::Receiver<Role>,
}

impl GroupFlow {
    /// Serves by `role`.
    pub fn new(role: watch::Receiver<Role>) -> Self {
        Self { role }
    }
}

type Answers = Pin<Box<dyn Stream<Item = Result<pb::FlowAnswer, Status>> + Send>>;

#[tonic::async_trait]
impl GroupService for GroupFlow {
    type FlowStream = Answers;

    async fn flow(
        &self,
        request: Request<Streaming<pb::FlowRequest>>,
    ) -> Result<Response<Self::FlowStream>, Status> {
        let member = match &*self.role.borrow() {
            Role::Member(member) => member.clone(),
            _ => {
                return Err(Status::failed_precondition(
                    "this coordinator is not a member of a partitioned group",
                ));
            }
        };
        let shown = request
            .metadata()
            .get(GROUP_KEY_HEADER)
            .map(|value| value.as_bytes())
            .unwrap_or_default();
        if !same_secret(shown, member.group_key.as_bytes()) {
            crate::auth::layer::refused("group key");
            return Err(Status::unauthenticated(
                "the group service takes only members of the group, which show the group's key",
            ));
        }
        let Some(authority) = member.authority.get() else {
            return Err(Status::unavailable(format!(
                "{} does not lead partition 0, whose leader holds the group's flow control",
                member.url
            )));
        };
        let name = request
            .metadata()
            .get(MEMBER_HEADER)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let Some((id, answers)) = authority.connect(name).await else {
            return Err(Status::unavailable(
                "the group's flow authority stopped here",
            ));
        };
        let mut inbound = request.into_inner();
        member.tracker.spawn(async move {
            while let Ok(Some(message)) = inbound.message().await {
                match from_wire(message) {
                    Some(request) => authority.request(id, request),
                    None => tracing::warn!(member = id, "a flow request without content; ignored"),
                }
            }
            authority.gone(id);
        });
        let answers = tokio_stream::wrappers::UnboundedReceiverStream::new(answers)
            .map(|a| Ok(answer_to_wire(a)));
        Ok(Response::new(Box::pin(answers)))
    }
}

/// Whether two secrets are equal, in time that does not depend on where
/// they differ.
fn same_secret(shown: &[u8], key: &[u8]) -> bool {
    shown.len() == key.len()
        && !key.is_empty()
        && shown.iter().zip(key).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}

/// A member's request as the core takes it.
fn from_wire(message: pb::FlowRequest) -> Option<ToAuthority> {
    Some(match message.what? {
        pb::flow_request::What::Ask(ask) => {
            let namespace: Arc<str> = ask.namespace.into();
            ToAuthority::Ask(Ask {
                ticket: ask.ticket,
                keyed: ask.key.map(|key| Keyed {
                    namespace: namespace.clone(),
                    key,
                    max: ask.key_max.max(1),
                }),
                subject: ask.subject.map(|subject| Subject {
                    namespace,
                    kind: subject.kind,
                    handler: subject.handler,
                    model_call: subject.model_call.then_some(Target {
                        provider: subject.provider,
                        model: subject.model,
                    }),
                }),
                tokens: ask.tokens,
                held: ask.held,
            })
        }
        pb::flow_request::What::Settle(settle) => ToAuthority::Settle {
            ticket: settle.ticket,
            call: Settlement {
                target: Target {
                    provider: Some(settle.provider),
                    model: Some(settle.model),
                },
                tokens: settle.tokens,
                rate_limited: settle
                    .rate_limited
                    .then_some(settle.retry_after_ms.map(Duration::from_millis)),
            },
        },
        pb::flow_request::What::Release(ticket) => ToAuthority::Release(ticket),
        pb::flow_request::What::Declared(_) => ToAuthority::Declared,
        pb::flow_request::What::AdmitRun(ask) => ToAuthority::AdmitRun {
            ticket: ask.ticket,
            namespace: ask.namespace,
        },
        pb::flow_request::What::Going(going) => ToAuthority::Going {
            partition: going.partition,
            revision: going.revision,
            counts: going.counts.into_iter().collect(),
        },
        pb::flow_request::What::Spent(spent) => ToAuthority::Spent {
            namespace: spent.namespace,
            tokens: spent.tokens,
            cost: spent.cost,
        },
    })
}

/// A member's request as sent.
pub fn to_wire(request: ToAuthority) -> pb::FlowRequest {
    let what = match request {
        ToAuthority::Ask(ask) => {
            let namespace = ask
                .keyed
                .as_ref()
                .map(|keyed| keyed.namespace.to_string())
                .or_else(|| ask.subject.as_ref().map(|s| s.namespace.to_string()))
                .unwrap_or_default();
            pb::flow_request::What::Ask(pb::FlowAsk {
                ticket: ask.ticket,
                held: ask.held,
                namespace,
                key_max: ask.keyed.as_ref().map_or(0, |keyed| keyed.max),
                key: ask.keyed.map(|keyed| keyed.key),
                subject: ask.subject.map(|subject| {
                    let target = subject.model_call.as_ref();
                    pb::FlowSubject {
                        kind: subject.kind,
                        handler: subject.handler,
                        model_call: target.is_some(),
                        provider: target.and_then(|t| t.provider.clone()),
                        model: target.and_then(|t| t.model.clone()),
                    }
                }),
                tokens: ask.tokens,
            })
        }
        ToAuthority::Settle { ticket, call } => pb::flow_request::What::Settle(pb::FlowSettle {
            ticket,
            provider: call.target.provider.unwrap_or_default(),
            model: call.target.model.unwrap_or_default(),
            tokens: call.tokens,
            rate_limited: call.rate_limited.is_some(),
            retry_after_ms: call
                .rate_limited
                .flatten()
                .map(|after| after.as_millis() as u64),
        }),
        ToAuthority::Release(ticket) => pb::flow_request::What::Release(ticket),
        ToAuthority::Declared => pb::flow_request::What::Declared(true),
        ToAuthority::AdmitRun { ticket, namespace } => {
            pb::flow_request::What::AdmitRun(pb::FlowAdmitRun { ticket, namespace })
        }
        ToAuthority::Going {
            partition,
            revision,
            counts,
        } => pb::flow_request::What::Going(pb::FlowGoing {
            partition,
            revision,
            counts: counts.into_iter().collect(),
        }),
        ToAuthority::Spent {
            namespace,
            tokens,
            cost,
        } => pb::flow_request::What::Spent(pb::FlowSpent {
            namespace,
            tokens,
            cost,
        }),
    };
    pb::FlowRequest { what: Some(what) }
}

fn answer_to_wire(answer: Answer) -> pb::FlowAnswer {
    match answer {
        Answer::RunAdmitted { ticket } => pb::FlowAnswer {
            ticket,
            granted: true,
            run: Some(pb::FlowRunAnswer {
                admitted: true,
                ..Default::default()
            }),
            ..Default::default()
        },
        Answer::RunRefused { ticket, refusal } => {
            let run = match refusal {
                RunRefusal::TooMany { running, max } => pb::FlowRunAnswer {
                    admitted: false,
                    running: running as u64,
                    max,
                    day_spent: String::new(),
                },
                RunRefusal::DaySpent(why) => pb::FlowRunAnswer {
                    admitted: false,
                    day_spent: why,
                    ..Default::default()
                },
            };
            pb::FlowAnswer {
                ticket,
                run: Some(run),
                ..Default::default()
            }
        }
        Answer::Granted { ticket, limited } => pb::FlowAnswer {
            ticket,
            granted: true,
            limited,
            ..Default::default()
        },
        Answer::Waits {
            ticket,
            limit,
            wait,
            keyed,
        } => pb::FlowAnswer {
            ticket,
            granted: false,
            limited: false,
            limit: limit.to_string(),
            wait_ms: wait.map(|wait| wait.as_millis() as u64),
            keyed,
            run: None,
        },
    }
}

/// The authority's answer as the member's core takes it.
pub fn answer_from_wire(answer: pb::FlowAnswer) -> Answer {
    if let Some(run) = answer.run {
        return if run.admitted {
            Answer::RunAdmitted {
                ticket: answer.ticket,
            }
        } else if !run.day_spent.is_empty() {
            Answer::RunRefused {
                ticket: answer.ticket,
                refusal: RunRefusal::DaySpent(run.day_spent),
            }
        } else {
            Answer::RunRefused {
                ticket: answer.ticket,
                refusal: RunRefusal::TooMany {
                    running: run.running as usize,
                    max: run.max,
                },
            }
        };
    }
    if answer.granted {
        Answer::Granted {
            ticket: answer.ticket,
            limited: answer.limited,
        }
    } else {
        Answer::Waits {
            ticket: answer.ticket,
            limit: answer.limit.into(),
            wait: answer.wait_ms.map(Duration::from_millis),
            keyed: answer.keyed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_answers_cross_the_wire_unchanged() {
        let ask = ToAuthority::Ask(Ask {
            ticket: 7,
            keyed: Some(Keyed {
                namespace: "acme".into(),
                key: "customer-1".into(),
                max: 2,
            }),
            subject: Some(Subject {
                namespace: "acme".into(),
                kind: "llm".into(),
                handler: None,
                model_call: Some(Target {
                    provider: Some("default".into()),
                    model: None,
                }),
            }),
            tokens: 300,
            held: true,
        });
        let settle = ToAuthority::Settle {
            ticket: 7,
            call: Settlement {
                target: Target {
                    provider: Some("default".into()),
                    model: Some("gpt".into()),
                },
                tokens: 250,
                rate_limited: Some(Some(Duration::from_millis(1500))),
            },
        };
        let going = ToAuthority::Going {
            partition: 3,
            revision: 42,
            counts: [("acme".to_owned(), 2)].into(),
        };
        let admit = ToAuthority::AdmitRun {
            ticket: 5,
            namespace: "acme".into(),
        };
        let spent = ToAuthority::Spent {
            namespace: "acme".into(),
            tokens: 10,
            cost: 0.5,
        };
        for request in [
            ask,
            settle,
            ToAuthority::Release(9),
            ToAuthority::Declared,
            going,
            admit,
            spent,
        ] {
            assert_eq!(from_wire(to_wire(request.clone())), Some(request));
        }
        for answer in [
            Answer::Granted {
                ticket: 3,
                limited: true,
            },
            Answer::Waits {
                ticket: 4,
                limit: "concurrency key 'k' (max 1)".into(),
                wait: Some(Duration::from_millis(250)),
                keyed: true,
            },
            Answer::RunAdmitted { ticket: 5 },
            Answer::RunRefused {
                ticket: 6,
                refusal: RunRefusal::TooMany { running: 3, max: 3 },
            },
            Answer::RunRefused {
                ticket: 7,
                refusal: RunRefusal::DaySpent("spent".into()),
            },
        ] {
            assert_eq!(answer_from_wire(answer_to_wire(answer.clone())), answer);
        }
    }

    #[test]
    fn only_the_groups_key_is_taken() {
        assert!(same_secret(b"abc", b"abc"));
        assert!(!same_secret(b"abd", b"abc"));
        assert!(!same_secret(b"ab", b"abc"));
        assert!(!same_secret(b"", b""));
    }
}
