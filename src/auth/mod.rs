//! Who is asking. Several schemes may be on at once, each off unless configured:
//! - API keys, sent as `x-api-key` (the spec's `api_key` identity; LanceDB and lance-spark
//!   `headers.x-api-key`) or as `Authorization: Bearer <key>`;
//! - OIDC bearer tokens (JWTs) in `Authorization: Bearer`;
//! - client certificates, when TLS verifies them: the subject's common name.
//!
//! Credentials that are presented must be valid (401 otherwise, even where anonymous
//! callers are served); a request without any is served as `anonymous` only when that is
//! allowed, and without any scheme configured every caller is served (`open`).

pub mod keys;
pub mod oidc;

use std::sync::Arc;

use axum::http::HeaderMap;

use crate::access::Principal;
use crate::error::{Error, Result};

pub use keys::ApiKeys;
pub use oidc::Oidc;

/// The identity TLS established for a connection: the verified client certificate's subject
/// common name.
#[derive(Clone, Debug)]
pub struct PeerIdentity(pub String);

pub struct Authenticator {
    pub keys: Option<Arc<ApiKeys>>,
    pub oidc: Option<Oidc>,
    /// Whether TLS verifies client certificates (so one may name the caller).
    pub certificates: bool,
    pub allow_anonymous: bool,
}

impl Authenticator {
    /// Serves everyone: no scheme configured.
    pub fn open() -> Self {
        Authenticator {
            keys: None,
            oidc: None,
            certificates: false,
            allow_anonymous: true,
        }
    }

    pub fn enabled(&self) -> bool {
        self.keys.is_some() || self.oidc.is_some() || self.certificates
    }

    /// Whether a request with these headers, on a connection with this identity, carries no
    /// credentials where authentication is configured: the spec then lets a body's
    /// `identity` (`api_key`, `auth_token`) name the caller.
    pub fn wants_body_identity(&self, headers: &HeaderMap, peer: Option<&PeerIdentity>) -> bool {
        self.enabled()
            && peer.is_none()
            && !headers.contains_key("x-api-key")
            && !headers.contains_key(axum::http::header::AUTHORIZATION)
    }

    /// The caller a body's `identity` names: its API key, else its bearer token, checked as
    /// the same credentials in headers would be.
    pub async fn authenticate_identity(
        &self,
        api_key: Option<&str>,
        auth_token: Option<&str>,
    ) -> Result<Principal> {
        let mut headers = HeaderMap::new();
        let value = |v: &str| {
            axum::http::HeaderValue::from_str(v)
                .map_err(|_| Self::refused("the identity in the body is not a valid credential"))
        };
        if let Some(key) = api_key.map(str::trim).filter(|k| !k.is_empty()) {
            headers.insert("x-api-key", value(key)?);
        } else if let Some(token) = auth_token.map(str::trim).filter(|t| !t.is_empty()) {
            headers.insert(
                axum::http::header::AUTHORIZATION,
                value(&format!("Bearer {token}"))?,
            );
        }
        self.authenticate(&headers, None).await
    }

    fn refused(why: impl Into<String>) -> Error {
        Error::unauthenticated(why)
    }

    /// The caller of a request with these headers, on a connection with this identity.
    pub async fn authenticate(
        &self,
        headers: &HeaderMap,
        peer: Option<&PeerIdentity>,
    ) -> Result<Principal> {
        // With no scheme configured every caller is served, and credentials a client sends
        // anyway (LanceDB's remote client always sends a key) are ignored, as the reference
        // server ignores them: said once in the log.
        if !self.enabled() {
            if headers.contains_key("x-api-key")
                || headers.contains_key(axum::http::header::AUTHORIZATION)
            {
                static SAID: std::sync::Once = std::sync::Once::new();
                SAID.call_once(|| {
                    tracing::warn!(
                        "a request carried credentials, but no authentication is configured \
                         (--api-keys, --oidc-issuer, --tls-client-ca): they are ignored and \
                         every caller is served"
                    )
                });
            }
            return Ok(Principal::anonymous("open"));
        }
        let header = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::trim)
                .filter(|v| !v.is_empty())
        };
        if let Some(key) = header("x-api-key") {
            return match &self.keys {
                Some(keys) => keys
                    .verify(key)
                    .ok_or_else(|| Self::refused("the API key is not valid")),
                None => Err(Self::refused("API keys are not accepted here")),
            };
        }
        if let Some(authorization) = header("authorization") {
            let token = authorization
                .split_once(' ')
                .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
                .map(|(_, t)| t.trim())
                .ok_or_else(|| Self::refused("only Bearer authorization is accepted"))?;
            if ApiKeys::looks_like_key(token) {
                return match &self.keys {
                    Some(keys) => keys
                        .verify(token)
                        .ok_or_else(|| Self::refused("the API key is not valid")),
                    None => Err(Self::refused("API keys are not accepted here")),
                };
            }
            return match &self.oidc {
                Some(oidc) => oidc.verify(token).await.map_err(|why| {
                    tracing::info!(reason = %why, "refused a bearer token");
                    Self::refused("the bearer token is not valid")
                }),
                None => Err(Self::refused("bearer tokens are not accepted here")),
            };
        }
        if let Some(PeerIdentity(name)) = peer {
            return Ok(Principal {
                name: name.clone(),
                groups: Vec::new(),
                scheme: "certificate",
            });
        }
        if self.allow_anonymous {
            return Ok(Principal::anonymous("anonymous"));
        }
        Err(Self::refused(
            "authentication required: send an API key (x-api-key) or a bearer token",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[tokio::test]
    async fn schemes_and_anonymous_callers() {
        let dir = tempfile::tempdir().unwrap();
        let (key, line) = keys::create("alice", &[]).unwrap();
        let path = dir.path().join("keys");
        std::fs::write(&path, line).unwrap();
        let auth = Authenticator {
            keys: Some(Arc::new(ApiKeys::from_file(&path).unwrap())),
            oidc: None,
            certificates: false,
            allow_anonymous: false,
        };
        let by_header = auth
            .authenticate(&headers(&[("x-api-key", &key)]), None)
            .await
            .unwrap();
        assert_eq!(
            (by_header.name.as_str(), by_header.scheme),
            ("alice", "api-key")
        );
        let bearer = format!("Bearer {key}");
        let by_bearer = auth
            .authenticate(&headers(&[("authorization", &bearer)]), None)
            .await
            .unwrap();
        assert_eq!(by_bearer.name, "alice");
        for bad in [
            headers(&[("x-api-key", "lgk_nope_nope")]),
            headers(&[("authorization", "Basic YWxpY2U6eA==")]),
            headers(&[("authorization", "Bearer eyJhbGciOiJub25lIn0.e30.")]),
            headers(&[]),
        ] {
            let err = auth.authenticate(&bad, None).await.unwrap_err();
            assert_eq!(err.code, crate::error::Code::Unauthenticated);
        }
        let cert = auth
            .authenticate(&headers(&[]), Some(&PeerIdentity("svc".into())))
            .await
            .unwrap();
        assert_eq!((cert.name.as_str(), cert.scheme), ("svc", "certificate"));
        let anonymous = Authenticator {
            allow_anonymous: true,
            ..auth
        };
        assert_eq!(
            anonymous
                .authenticate(&headers(&[]), None)
                .await
                .unwrap()
                .scheme,
            "anonymous"
        );
        assert!(
            anonymous
                .authenticate(&headers(&[("x-api-key", "lgk_x_y")]), None)
                .await
                .is_err(),
            "presented credentials must be valid even where anonymous callers are served"
        );
        for sent in [
            headers(&[]),
            headers(&[("x-api-key", "sk-anything")]),
            headers(&[("authorization", "Bearer whatever")]),
        ] {
            assert_eq!(
                Authenticator::open()
                    .authenticate(&sent, None)
                    .await
                    .unwrap()
                    .scheme,
                "open",
                "an open gateway ignores credentials"
            );
        }
    }
}
