//! Requests from elsewhere: the `Origin` of state-changing requests and the
//! `Host` of every request, checked before any route.
//!
//! A browser lets any page send a "simple" cross-origin POST (a form, or
//! `fetch` with `Content-Type: text/plain`) to a coordinator on the same
//! machine; without identities (the default loopback coordinator) it
//! would act as its admin. So a POST, PUT, PATCH or DELETE whose `Origin`
//! (or `Sec-Fetch-Site: cross-site`) says it comes from another site is
//! refused, whatever the identities. And a page of a name that its
//! attacker points at 127.0.0.1 (DNS rebinding) is same-origin to the
//! browser: so a coordinator that asks for no identity answers only
//! requests whose `Host` is an address, `localhost`, or one of `[http]
//! hosts`; with names configured, every coordinator checks them.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// What a request's `Host` may be.
#[derive(Debug, Clone)]
pub(crate) struct Hosts {
    /// Checked: the coordinator wants no identity, or names are set.
    checked: bool,
    /// `[http] hosts`.
    names: Arc<[String]>,
}

impl Hosts {
    /// Hosts for a coordinator that does (or does not) require identities
    /// and names these in `[http] hosts`.
    pub(crate) fn new(identities_required: bool, names: &[String]) -> Self {
        Self {
            checked: !identities_required || !names.is_empty(),
            names: names.iter().map(|n| n.to_ascii_lowercase()).collect(),
        }
    }

    /// Why a request with this `Host` is refused, if it is.
    fn refuses(&self, host: Option<&str>) -> Option<String> {
        if !self.checked {
            return None;
        }
        let Some(host) = host else {
            return Some("the request names no Host".to_owned());
        };
        let name = host_name(host).to_ascii_lowercase();
        let allowed = name.parse::<std::net::IpAddr>().is_ok()
            || name == "localhost"
            || self.names.contains(&name);
        (!allowed).then(|| {
            format!(
                "Host '{host}' is not a name of this coordinator (an address, localhost, or one of [http] hosts)"
            )
        })
    }
}

/// The name of a `Host` value, without its port or an IPv6 literal's
/// brackets.
fn host_name(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    host.rsplit_once(':').map_or(host, |(name, port)| {
        if port.chars().all(|c| c.is_ascii_digit()) {
            name
        } else {
            host
        }
    })
}

/// Whether `origin` (`scheme://host[:port]`) is the site `host` names.
fn same_origin(origin: &str, host: Option<&str>) -> bool {
    let Some(host) = host else {
        return false;
    };
    origin
        .split_once("://")
        .is_some_and(|(_, authority)| authority.eq_ignore_ascii_case(host))
}

/// The guard itself, in front of every route.
pub(crate) async fn guard(State(hosts): State<Hosts>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .or_else(|| request.uri().authority().map(|a| a.as_str()));
    if let Some(reason) = hosts.refuses(host) {
        return refused(StatusCode::MISDIRECTED_REQUEST, "misdirected", reason);
    }
    let changes = !matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    );
    if changes {
        let origin = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok());
        let cross_site = headers
            .get("sec-fetch-site")
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"cross-site"));
        let foreign = match origin {
            // `null`: a sandboxed frame, a file, a redirect across sites.
            Some(origin) => !same_origin(origin, host),
            None => false,
        };
        if foreign || cross_site {
            return refused(
                StatusCode::FORBIDDEN,
                "cross_origin",
                format!(
                    "a {} from another site ({}) is refused: the viewer's own page, the command line and clients may act on runs",
                    request.method(),
                    origin.unwrap_or("Sec-Fetch-Site: cross-site")
                ),
            );
        }
    }
    next.run(request).await
}

fn refused(status: StatusCode, code: &'static str, message: String) -> Response {
    let body = serde_json::json!({ "error": { "code": code, "message": message } });
    (status, axum::Json(body)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_coordinator_without_identities_answers_addresses_localhost_and_its_names() {
        let open = Hosts::new(false, &["weft.example".to_owned()]);
        for host in [
            "127.0.0.1:9464",
            "[::1]:9464",
            "localhost:9464",
            "localhost",
            "WEFT.example:443",
            "10.0.0.7",
        ] {
            assert_eq!(open.refuses(Some(host)), None, "{host}");
        }
        let refused = open.refuses(Some("evil.example:9464")).expect("refused");
        assert!(refused.contains("Host 'evil.example:9464' is not a name of this coordinator"));
        assert!(open.refuses(None).is_some());
        // With identities and no names, a request's credentials are what
        // count: any name is answered (a group behind a load balancer).
        let secured = Hosts::new(true, &[]);
        assert_eq!(secured.refuses(Some("coordinator-a:9464")), None);
    }

    #[test]
    fn an_origin_is_its_site_when_it_names_the_host() {
        assert!(same_origin("http://127.0.0.1:9464", Some("127.0.0.1:9464")));
        assert!(same_origin("https://Weft.example", Some("weft.example")));
        assert!(!same_origin("https://evil.example", Some("127.0.0.1:9464")));
        assert!(!same_origin("null", Some("127.0.0.1:9464")));
        assert!(!same_origin(
            "http://127.0.0.1:9465",
            Some("127.0.0.1:9464")
        ));
    }
}
