//! Who calls the coordinator, and what they may do (SPEC 11).
//!
//! [`Identities`] is the table `[[tokens]]` and `[[certificates]]` make:
//! a caller is named by a bearer token (checked against every token's
//! SHA-256 digest in constant time) or by a client certificate that the
//! TLS handshake verified against `client_ca` (its subject's common name).
//! [`layer::AuthLayer`] puts the table in front of every gRPC service:
//! each request is refused (`UNAUTHENTICATED`, or `PERMISSION_DENIED`
//! naming the role needed) or goes on carrying its [`Principal`], which
//! the services read for namespaces, approvers and the events they record.
//!
//! Without tokens and without `client_ca` nothing is required: every
//! caller is the anonymous admin of the `default` namespace (which the
//! secure-by-default check allows only on loopback or when told
//! `insecure`).

pub mod layer;

use std::sync::Arc;

use subtle::ConstantTimeEq;

/// The namespace of identities that name none, and of runs submitted
/// without identities.
pub use weft_machine::DEFAULT_NAMESPACE;

/// What an identity may do, lowest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// List, get and watch the runs of its namespace.
    Reader,
    /// A reader that also submits, resumes, cancels and retries.
    Operator,
    /// An operator in every namespace.
    Admin,
    /// Joins as a worker, nothing else.
    Worker,
}

impl Role {
    /// The role a config file names.
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim() {
            "reader" => Some(Self::Reader),
            "operator" => Some(Self::Operator),
            "admin" => Some(Self::Admin),
            "worker" => Some(Self::Worker),
            _ => None,
        }
    }

    /// The role's name, as config files and messages write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Reader => "reader",
            Self::Operator => "operator",
            Self::Admin => "admin",
            Self::Worker => "worker",
        }
    }

    /// Whether this role may do what `needed` may.
    pub fn covers(self, needed: Role) -> bool {
        match needed {
            Self::Reader => matches!(self, Self::Reader | Self::Operator | Self::Admin),
            Self::Operator => matches!(self, Self::Operator | Self::Admin),
            Self::Admin => self == Self::Admin,
            Self::Worker => self == Self::Worker,
        }
    }
}

/// A configured identity: a token's or a certificate subject's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The token's name, or the certificate's subject common name.
    pub name: String,
    /// What it may do.
    pub role: Role,
    /// The namespace its runs belong to, and the one it sees (an admin
    /// sees every namespace).
    pub namespace: String,
    /// For a worker: the namespaces whose tasks it may run (`None`: all).
    pub worker_namespaces: Option<Vec<String>>,
}

impl Identity {
    /// An identity.
    pub fn new(
        name: String,
        role: Role,
        namespace: String,
        worker_namespaces: Option<Vec<String>>,
    ) -> Self {
        Self {
            name,
            role,
            namespace,
            worker_namespaces,
        }
    }

    /// Whether runs of `namespace` are visible to this identity.
    pub fn sees(&self, namespace: &str) -> bool {
        self.role == Role::Admin || self.namespace == namespace
    }
}

/// The identity a request was made with.
pub type Principal = Arc<Identity>;

/// The identity of a request that carries none.
pub fn anonymous() -> Principal {
    Arc::new(Identity::new(
        "anonymous".into(),
        Role::Admin,
        DEFAULT_NAMESPACE.into(),
        None,
    ))
}

/// Why a request's identity was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// The request carries neither a token nor a certificate.
    #[error(
        "this coordinator requires an identity: send a token (weft --token or WEFT_TOKEN; worker --token or WEFT_WORKER_TOKEN) or a client certificate"
    )]
    Missing,
    /// The `authorization` header is not `Bearer TOKEN`.
    #[error("the authorization header is not 'Bearer TOKEN'")]
    Malformed,
    /// The token matches no `[[tokens]]` entry.
    #[error("the token is not one this coordinator knows")]
    UnknownToken,
}

impl AuthError {
    /// The reason label of the refused-requests metric.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Missing => "no_identity",
            Self::Malformed | Self::UnknownToken => "unknown_identity",
        }
    }
}

/// Every identity the coordinator knows; see the module docs.
#[derive(Clone, PartialEq, Eq)]
pub struct Identities {
    tokens: Vec<([u8; 32], Principal)>,
    certificates: Vec<Principal>,
    client_ca: bool,
    anonymous: Principal,
}

/// Names, roles and namespaces only: never a digest.
impl std::fmt::Debug for Identities {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let describe = |p: &Principal| {
            let mut text = format!(
                "{} ({}, namespace {})",
                p.name,
                p.role.as_str(),
                p.namespace
            );
            if let Some(list) = &p.worker_namespaces {
                text.push_str(&format!(", runs tasks of {}", list.join(", ")));
            }
            text
        };
        f.debug_struct("Identities")
            .field(
                "tokens",
                &self
                    .tokens
                    .iter()
                    .map(|(_, p)| describe(p))
                    .collect::<Vec<_>>(),
            )
            .field(
                "certificates",
                &self.certificates.iter().map(describe).collect::<Vec<_>>(),
            )
            .field("client_certificates", &self.client_ca)
            .finish()
    }
}

impl Default for Identities {
    fn default() -> Self {
        Self::new(false)
    }
}

impl Identities {
    /// No identities yet; `client_ca`: client certificates are verified.
    pub fn new(client_ca: bool) -> Self {
        Self {
            tokens: Vec::new(),
            certificates: Vec::new(),
            client_ca,
            anonymous: anonymous(),
        }
    }

    /// Adds a token by the digest of its secret; false when another token
    /// has the same one.
    pub fn add_token(&mut self, digest: [u8; 32], identity: Identity) -> bool {
        if self.tokens.iter().any(|(known, _)| *known == digest) {
            return false;
        }
        self.tokens.push((digest, Arc::new(identity)));
        true
    }

    /// Gives the client certificates of subject `identity.name` its role.
    pub fn add_certificate(&mut self, identity: Identity) {
        self.certificates.push(Arc::new(identity));
    }

    /// Calls the anonymous identity `name` (the local cluster's user), for
    /// `approvers:` and the events it records.
    pub fn name_anonymous(&mut self, name: &str) {
        self.anonymous = Arc::new(Identity {
            name: name.to_owned(),
            ..(*self.anonymous).clone()
        });
    }

    /// The namespaces runs can belong to: every identity's own, and the
    /// anonymous one's where no identity is required.
    pub fn namespaces(&self) -> std::collections::BTreeSet<String> {
        let mut names: std::collections::BTreeSet<String> = (self.tokens.iter().map(|(_, p)| p))
            .chain(&self.certificates)
            .map(|p| p.namespace.clone())
            .collect();
        if !self.required() {
            names.insert(self.anonymous.namespace.clone());
        }
        names
    }

    /// Whether every request must carry an identity.
    pub fn required(&self) -> bool {
        !self.tokens.is_empty() || self.client_ca
    }

    /// The identity of a request with this `authorization` header and
    /// this verified client certificate subject. A token wins over a
    /// certificate; a certificate no `[[certificates]]` entry names is a
    /// worker's (SPEC 11: workers may join with a certificate alone), with
    /// the least a worker may have: the `default` namespace's tasks only.
    pub fn authenticate(
        &self,
        authorization: Option<&[u8]>,
        certificate_subject: Option<&str>,
    ) -> Result<Principal, AuthError> {
        if !self.required() {
            return Ok(self.anonymous.clone());
        }
        if let Some(header) = authorization {
            let token = bearer(header).ok_or(AuthError::Malformed)?;
            return self.by_token(token).ok_or(AuthError::UnknownToken);
        }
        match certificate_subject {
            Some(subject) => Ok(self.by_certificate(subject)),
            None => Err(AuthError::Missing),
        }
    }

    /// The token's identity: its digest compared with every entry's, each
    /// comparison in constant time and none skipped.
    fn by_token(&self, token: &[u8]) -> Option<Principal> {
        use sha2::Digest;
        let digest: [u8; 32] = sha2::Sha256::digest(token).into();
        let mut found = None;
        for (known, principal) in &self.tokens {
            if bool::from(known.ct_eq(&digest)) {
                found = Some(principal.clone());
            }
        }
        found
    }

    fn by_certificate(&self, subject: &str) -> Principal {
        self.certificates
            .iter()
            .find(|p| p.name == subject)
            .cloned()
            .unwrap_or_else(|| {
                // Least privilege: a CA may sign more than Weft's workers.
                Arc::new(Identity::new(
                    subject.to_owned(),
                    Role::Worker,
                    DEFAULT_NAMESPACE.into(),
                    Some(vec![DEFAULT_NAMESPACE.to_owned()]),
                ))
            })
    }
}

/// The token of a `Bearer TOKEN` header (the scheme in any case).
fn bearer(header: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = header.split_at_checked(7)?;
    (scheme.eq_ignore_ascii_case(b"bearer ") && !rest.trim_ascii().is_empty())
        .then(|| rest.trim_ascii())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::Digest;

    fn table() -> Identities {
        let mut identities = Identities::new(true);
        let digest = |s: &str| -> [u8; 32] { sha2::Sha256::digest(s.as_bytes()).into() };
        let ops = Identity::new("ops".into(), Role::Operator, "team-a".into(), None);
        assert!(identities.add_token(digest("ops-secret-0123456789"), ops));
        let reader = Identity::new("viewer".into(), Role::Reader, "team-a".into(), None);
        assert!(identities.add_token(digest("viewer-secret-0123456789"), reader));
        identities.add_certificate(Identity::new(
            "alice".into(),
            Role::Admin,
            "default".into(),
            None,
        ));
        identities
    }

    #[test]
    fn tokens_name_their_identity_and_certificates_default_to_workers() {
        let identities = table();
        let ops = identities
            .authenticate(Some(b"Bearer ops-secret-0123456789"), None)
            .unwrap();
        assert_eq!((ops.name.as_str(), ops.role), ("ops", Role::Operator));
        let viewer = identities
            .authenticate(Some(b"bearer viewer-secret-0123456789"), Some("alice"))
            .unwrap();
        assert_eq!(viewer.name, "viewer", "a token wins over a certificate");
        assert_eq!(
            identities.authenticate(None, Some("alice")).unwrap().role,
            Role::Admin
        );
        let node = identities.authenticate(None, Some("node-7")).unwrap();
        assert_eq!((node.name.as_str(), node.role), ("node-7", Role::Worker));
        // An unlisted certificate gets the least: the default namespace's
        // tasks, never every namespace's.
        assert_eq!(
            node.worker_namespaces.as_deref(),
            Some(&["default".to_owned()][..])
        );
    }

    #[test]
    fn missing_malformed_and_unknown_identities_are_refused() {
        let identities = table();
        assert_eq!(identities.authenticate(None, None), Err(AuthError::Missing));
        assert_eq!(
            identities.authenticate(Some(b"Basic b3BzOng="), None),
            Err(AuthError::Malformed)
        );
        assert_eq!(
            identities.authenticate(Some(b"Bearer "), None),
            Err(AuthError::Malformed)
        );
        assert_eq!(
            identities.authenticate(Some(b"Bearer ops-secret-012345678"), None),
            Err(AuthError::UnknownToken)
        );
    }

    #[test]
    fn without_identities_everyone_is_the_anonymous_admin() {
        let mut identities = Identities::default();
        identities.name_anonymous("dana");
        let who = identities
            .authenticate(Some(b"Bearer anything"), None)
            .unwrap();
        assert_eq!((who.name.as_str(), who.role), ("dana", Role::Admin));
        assert!(who.sees("team-b"));
    }

    #[test]
    fn roles_cover_what_they_include() {
        assert!(Role::Admin.covers(Role::Operator));
        assert!(Role::Operator.covers(Role::Reader));
        assert!(!Role::Reader.covers(Role::Operator));
        assert!(!Role::Admin.covers(Role::Worker));
        assert!(!Role::Worker.covers(Role::Reader));
    }
}
