//! HTTP Basic authentication for an endpoint reachable from other hosts.

use std::fmt;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;

use super::WebContext;

/// Paths probes use: open even with auth on (they show only up/down).
const OPEN_PATHS: [&str; 2] = ["/healthz", "/readyz"];

/// The expected `user:password`.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials(Vec<u8>);

impl Credentials {
    pub fn new(user: &str, password: &str) -> Credentials {
        Credentials(format!("{user}:{password}").into_bytes())
    }

    /// Whether `headers` carry these credentials.
    pub fn admits(&self, headers: &HeaderMap) -> bool {
        let Some(value) = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()) else {
            return false;
        };
        let Some((scheme, encoded)) = value.trim().split_once(' ') else {
            return false;
        };
        if !scheme.eq_ignore_ascii_case("basic") {
            return false;
        }
        match base64::engine::general_purpose::STANDARD.decode(encoded.trim()) {
            Ok(given) => constant_time_eq(&given, &self.0),
            Err(_) => false,
        }
    }
}

// So the password cannot reach a log line.
impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Credentials(<redacted>)")
    }
}

/// Compares without an early exit, so timing does not tell how much matched.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

pub async fn require(State(ctx): State<WebContext>, request: Request, next: Next) -> Response {
    match &ctx.credentials {
        Some(c) if !OPEN_PATHS.contains(&request.uri().path()) && !c.admits(request.headers()) => (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Basic realm=\"roadseg\", charset=\"UTF-8\"")],
            "authentication required\n",
        )
            .into_response(),
        _ => next.run(request).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, value.parse().unwrap());
        h
    }

    #[test]
    fn only_the_exact_credentials_are_admitted() {
        // Rule: Basic auth admits exactly user:password (any case of "Basic"), nothing else, and never prints the password.
        let c = Credentials::new("viewer", "s3cret:x");
        let encode = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        assert!(c.admits(&with(&format!("Basic {}", encode("viewer:s3cret:x")))));
        assert!(c.admits(&with(&format!("basic {}", encode("viewer:s3cret:x")))));
        assert!(!c.admits(&with(&format!("Basic {}", encode("viewer:s3cret")))));
        assert!(!c.admits(&with(&format!("Bearer {}", encode("viewer:s3cret:x")))));
        assert!(!c.admits(&with("Basic !!!")));
        assert!(!c.admits(&HeaderMap::new()));
        assert!(!format!("{c:?}").contains("s3cret"));
    }
}
