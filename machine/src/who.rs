//! Who a run belongs to and who acted on it (SPEC 11): the run's owner
//! (its namespace and submitter), the caller of a request, and who
//! answered each human node, which `weft status` shows ("approved by
//! NAME"). The machine records them; the services decide who may call.

use serde::{Deserialize, Serialize};

use super::RunMachine;

/// The namespace of runs, tokens and workers that name none.
pub const DEFAULT_NAMESPACE: &str = "default";

/// The namespace a run belongs to and who submitted it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    /// The run's namespace.
    pub namespace: String,
    /// The identity that submitted it (a child run: its parent's
    /// submitter); empty for runs stored before owners were.
    pub submitted_by: String,
    /// The priority it was submitted with (`weft run --priority`), over
    /// its graph's `settings.priority`; a child run inherits it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<crate::graph::Priority>,
    /// The runs whose `settings.budget` its model calls count against: it
    /// and its ancestors that have one, outermost first (SPEC 18).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub budgets: Vec<weft_proto::RunId>,
    /// Submitted with `weft run --no-cache`: its steps neither take nor
    /// keep node cache entries (SPEC 20); a child run inherits it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_cache: bool,
}

impl Default for Owner {
    fn default() -> Self {
        Self {
            namespace: DEFAULT_NAMESPACE.to_owned(),
            submitted_by: String::new(),
            priority: None,
            budgets: Vec::new(),
            no_cache: false,
        }
    }
}

/// The identity behind a request, as the machine checks `approvers:`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// A token's name or a certificate's subject.
    pub name: String,
    /// Its role (`operator`, `admin`, …).
    pub role: String,
}

/// Who answered a human node last, and how.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answered {
    /// The node.
    pub node: String,
    /// Who answered.
    pub by: String,
    /// For an approval: whether it was approved; `None` for an input.
    pub approved: Option<bool>,
}

impl RunMachine {
    /// Sets the run's namespace and submitter; kept with the run.
    pub fn set_owner(&mut self, owner: Owner) {
        self.run.owner = owner;
    }

    /// The run's namespace and submitter.
    pub fn owner(&self) -> &Owner {
        &self.run.owner
    }

    /// Who answered each human node (the latest answer of each), in the
    /// order they were answered.
    pub fn answers(&self) -> &[Answered] {
        &self.run.answers
    }

    /// Records an answer of `node`, replacing an earlier one (a loop asks
    /// again).
    pub(super) fn record_answer(&mut self, answered: Answered) {
        self.run.answers.retain(|a| a.node != answered.node);
        self.run.answers.push(answered);
    }
}
