//! Answers to people's requests, routed to where they wait: a run's own
//! `approval` and `input` nodes, or a request of one of its child runs,
//! which the parent lists by its path (`bar/ask`: node `ask` of the child
//! that subgraph node `bar` started), nested as deep as subgraphs go.

use std::time::Duration;

use super::Runs;
use crate::run_actor::{HumanAnswer, Rejected, RunHandle, RunRequestError, RunView};

/// How long an answer to a child's request waits for the parent to take
/// note, so that the view it returns no longer lists the request.
const PARENT_PATIENCE: Duration = Duration::from_secs(10);

impl Runs {
    /// Answers request `node` of run `handle`: one of its nodes, or a
    /// child's request by its path, by its last part or by the subgraph
    /// node's name when that names one request only. The run's view after.
    pub async fn answer(
        &self,
        handle: &RunHandle,
        node: String,
        answer: HumanAnswer,
    ) -> Result<RunView, RunRequestError> {
        let view = handle.summary().await?;
        let Some(path) = requested(&view.waiting, &node) else {
            // The run says what waits instead.
            return handle.resume(node, answer).await;
        };
        let Some((subgraph, inner)) = path.split_once('/') else {
            return handle.resume(path, answer).await;
        };
        let child = view
            .children
            .iter()
            .rev()
            .find(|(at, _)| &**at == subgraph)
            .and_then(|(_, id)| self.get(id))
            .ok_or_else(|| Rejected::NotWaiting {
                node: node.clone(),
                waiting: Vec::new(),
            })?;
        // Watched from before the answer, so the parent's note of it is
        // not missed.
        let (_, live) = handle.watch(view.event_count).await?;
        Box::pin(self.answer(&child, inner.to_owned(), answer)).await?;
        if let Some(mut live) = live {
            let noted = async {
                while live.recv().await.is_ok() {
                    match handle.summary().await {
                        Ok(now) if now.waiting.iter().any(|(n, _, _)| *n == path) => {}
                        _ => return,
                    }
                }
            };
            let _ = tokio::time::timeout(PARENT_PATIENCE, noted).await;
        }
        handle.get().await
    }
}

/// Which of a run's requests `node` names, if any: the request of that
/// name or path, else the one request whose last part or subgraph node it
/// is.
fn requested(waiting: &[(String, String, String)], node: &str) -> Option<String> {
    if waiting.iter().any(|(path, _, _)| path == node) {
        return Some(node.to_owned());
    }
    let mut named = waiting.iter().map(|(path, _, _)| path).filter(|path| {
        path.contains('/')
            && (path.rsplit('/').next() == Some(node) || path.split('/').next() == Some(node))
    });
    match (named.next(), named.next()) {
        (Some(only), None) => Some(only.clone()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::requested;

    fn waits(paths: &[&str]) -> Vec<(String, String, String)> {
        paths
            .iter()
            .map(|p| ((*p).to_owned(), "input".to_owned(), String::new()))
            .collect()
    }

    #[test]
    fn a_request_is_named_by_path_last_part_or_subgraph_node() {
        let waiting = waits(&["review", "bar/ask", "outer/inner/check"]);
        assert_eq!(requested(&waiting, "review").as_deref(), Some("review"));
        assert_eq!(requested(&waiting, "bar/ask").as_deref(), Some("bar/ask"));
        assert_eq!(requested(&waiting, "ask").as_deref(), Some("bar/ask"));
        assert_eq!(requested(&waiting, "bar").as_deref(), Some("bar/ask"));
        assert_eq!(
            requested(&waiting, "check").as_deref(),
            Some("outer/inner/check")
        );
        assert_eq!(requested(&waiting, "nothing"), None);
    }

    #[test]
    fn an_ambiguous_name_names_nothing() {
        let waiting = waits(&["a/ask", "b/ask"]);
        assert_eq!(requested(&waiting, "ask"), None);
        assert_eq!(requested(&waiting, "a").as_deref(), Some("a/ask"));
    }
}
