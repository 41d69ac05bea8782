//! `approvers:` on `approval` and `input` nodes (SPEC 11): who may answer
//! them, by identity name or by role.
//!
//! An entry is a name (a token's `name`, or a client certificate's
//! subject) or `role:ROLE`. Only roles that may resume runs can answer, so
//! `role:operator` and `role:admin` are the roles an entry may name; an
//! `admin` counts as an operator. The coordinator checks the identity of
//! whoever resumes against the list; an empty list (the field left out)
//! lets any identity whose role may resume answer.

use super::builder::Builder;

/// Roles an identity can have, lowest first (SPEC 11).
pub const ROLES: [&str; 4] = ["reader", "operator", "admin", "worker"];

/// Roles that may resume runs, and so may be named in `approvers:`.
const ANSWERING_ROLES: [&str; 2] = ["operator", "admin"];

/// One entry of `approvers:`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Approver {
    /// An identity, by its name.
    Name(String),
    /// Every identity of a role (`operator` or `admin`).
    Role(String),
}

impl Approver {
    /// Whether the identity `name` with role `role` is this approver.
    pub fn admits(&self, name: &str, role: &str) -> bool {
        match self {
            Self::Name(wanted) => wanted == name,
            Self::Role(wanted) => wanted == role || (wanted == "operator" && role == "admin"),
        }
    }
}

impl std::fmt::Display for Approver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Name(name) => f.write_str(name),
            Self::Role(role) => write!(f, "role:{role}"),
        }
    }
}

impl Builder<'_, '_> {
    /// The node's `approvers:`, each entry checked; a bad one is reported
    /// naming its position and left out.
    pub(super) fn approvers(&mut self, id: &str, entries: Option<&[String]>) -> Vec<Approver> {
        let Some(entries) = entries else {
            return Vec::new();
        };
        if entries.is_empty() {
            self.error(
                format!(
                    "node '{id}': 'approvers' is empty, so nobody could answer; leave it out to let any operator answer"
                ),
                &[id],
            );
        }
        let mut approvers = Vec::with_capacity(entries.len());
        for (index, entry) in entries.iter().enumerate() {
            let at = format!("node '{id}': approvers[{index}]");
            let approver = match entry.trim().strip_prefix("role:") {
                Some(role) if ANSWERING_ROLES.contains(&role.trim()) => {
                    Approver::Role(role.trim().to_owned())
                }
                Some(role) if ROLES.contains(&role.trim()) => {
                    self.error(
                        format!(
                            "{at}: the role '{}' cannot resume runs, so it cannot answer (roles that can: operator, admin)",
                            role.trim()
                        ),
                        &[id],
                    );
                    continue;
                }
                Some(role) => {
                    self.error(
                        format!(
                            "{at}: unknown role '{}' (roles that can answer: operator, admin)",
                            role.trim()
                        ),
                        &[id],
                    );
                    continue;
                }
                None if entry.trim().is_empty() => {
                    self.error(
                        format!("{at}: an empty name (write an identity's name or role:ROLE)"),
                        &[id],
                    );
                    continue;
                }
                None if entry.trim() != entry => {
                    self.error(
                        format!(
                            "{at}: '{entry}' has spaces around it (identity names are matched exactly)"
                        ),
                        &[id],
                    );
                    continue;
                }
                None => Approver::Name(entry.clone()),
            };
            if approvers.contains(&approver) {
                self.error(format!("{at}: '{approver}' is listed twice"), &[id]);
                continue;
            }
            approvers.push(approver);
        }
        approvers
    }
}

#[cfg(test)]
mod tests {
    use super::Approver;

    #[test]
    fn names_match_exactly_and_admins_count_as_operators() {
        let alice = Approver::Name("alice".into());
        assert!(alice.admits("alice", "operator"));
        assert!(!alice.admits("Alice", "admin"));
        let operators = Approver::Role("operator".into());
        assert!(operators.admits("bob", "operator"));
        assert!(operators.admits("root", "admin"));
        assert!(!operators.admits("carol", "reader"));
        let admins = Approver::Role("admin".into());
        assert!(!admins.admits("bob", "operator"));
        assert!(admins.admits("root", "admin"));
    }
}
