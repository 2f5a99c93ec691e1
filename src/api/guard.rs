//! The middleware every API request passes: it authenticates the caller, builds the
//! request's `Ctx` for the handlers (and through them the catalog), and writes the audit
//! line once the answer is known. A request refused before its body is read has the body
//! drained (up to a bound) or the connection announced as closing, so a client that reuses
//! connections does not lose its next request.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;

use super::{AppState, REQUEST_ID};
use crate::access::Ctx;
use crate::audit::Event;
use crate::auth::PeerIdentity;
use crate::catalog::names;
use crate::error::Error;

/// How much of an unread body is read and thrown away to keep a connection usable.
const DRAIN_LIMIT: usize = 1 << 20;

/// Operations that change nothing: audited only when refused or when they vend credentials.
const READS: &[&str] = &[
    "describe",
    "exists",
    "list",
    "table/list",
    "query",
    "count_rows",
    "explain_plan",
    "analyze_plan",
    "stats",
    "version/list",
    "version/describe",
    "index/list",
    "tags/list",
    "tags/version",
    "branches/list",
    "dropped_tables",
];

/// `<object>.<operation>` and the id a request names, from its path
/// (`/v1/<object>/<id>/<operation...>`).
fn route_of(path: &str, delimiter: &str) -> (String, Vec<String>, bool) {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match segments.as_slice() {
        ["v1", object, id, op @ ..] if !op.is_empty() => {
            let op = op.join("/");
            let id = names::parse_path_id(id, delimiter).unwrap_or_default();
            let read = READS.contains(&op.as_str());
            (format!("{object}.{op}"), id, read)
        }
        ["v1", object, rest @ ..] => (format!("{object}.{}", rest.join("/")), Vec::new(), true),
        _ => (path.to_string(), Vec::new(), true),
    }
}

/// Reads and throws away what is left of a body, up to `DRAIN_LIMIT`; false when more was
/// left (the connection must then close).
pub(crate) async fn drain(body: Body) -> bool {
    let mut body = http_body_util::Limited::new(body, DRAIN_LIMIT);
    loop {
        match body.frame().await {
            None => return true,
            Some(Ok(_)) => {}
            Some(Err(_)) => return false,
        }
    }
}

/// Marks a response as the connection's last.
pub(crate) fn closing(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

pub(crate) async fn guard(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    let path = req.uri().path();
    // Health checks, and the console's files: they hold no data, and everything the page
    // shows it asks for under the caller's credential.
    if path == "/healthz" || path == "/readyz" || super::console::is_console(path) {
        return next.run(req).await;
    }
    let request_id = req
        .headers()
        .get(&REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-")
        .to_string();
    // What the audit line names: worked out only when there is an audit log to write.
    let audited = state.audit.enabled().then(|| {
        let delimiter =
            super::extract::delimiter_of(req.uri().query()).unwrap_or_else(|_| "$".into());
        let (operation, id, read) = route_of(path, &delimiter);
        let mutation = req.method() == Method::POST && !read;
        (operation, id, mutation)
    });
    let peer = req.extensions().get::<PeerIdentity>().cloned();
    let authenticated = if state.auth.wants_body_identity(req.headers(), peer.as_ref())
        && req.method() == Method::POST
    {
        match body_identity(req).await {
            Ok((rebuilt, Some((key, token)))) => {
                req = rebuilt;
                state
                    .auth
                    .authenticate_identity(key.as_deref(), token.as_deref())
                    .await
            }
            Ok((rebuilt, None)) => {
                req = rebuilt;
                state.auth.authenticate(req.headers(), None).await
            }
            Err(response) => return response,
        }
    } else {
        state.auth.authenticate(req.headers(), peer.as_ref()).await
    };
    let principal = match authenticated {
        Ok(p) => {
            crate::telemetry::authentication(p.scheme, true);
            p
        }
        Err(error) => {
            crate::telemetry::authentication("none", false);
            if let Some((operation, id, _)) = audited {
                state.audit.record(Event {
                    request_id,
                    principal: "-".into(),
                    scheme: "none".into(),
                    operation,
                    id,
                    decision: "deny",
                    status: 401,
                    reason: Some(error.message.clone()),
                    ..Default::default()
                });
            }
            let drained = drain(req.into_body()).await;
            let response = error.into_response();
            return if drained { response } else { closing(response) };
        }
    };
    let ctx = Ctx::new(principal, request_id);
    req.extensions_mut().insert(ctx.clone());
    let response = next.run(req).await;
    if let Some((operation, id, mutation)) = audited {
        let notes = ctx.notes_taken();
        let status = response.status().as_u16();
        let denied = notes.denied.is_some() || status == 401 || status == 403;
        if mutation || denied || notes.vended.is_some() {
            let vended = notes.vended;
            state.audit.record(Event {
                request_id: ctx.request_id.clone(),
                principal: ctx.principal.name.clone(),
                scheme: ctx.principal.scheme.into(),
                operation,
                id,
                decision: if denied { "deny" } else { "allow" },
                status,
                reason: notes.denied,
                access_vended: vended.as_ref().map(|v| v.access.to_string()),
                key_id_prefix: vended.as_ref().map(|v| v.key_id_prefix.clone()),
                expires_at_ms: vended.and_then(|v| v.expires_at_ms),
                ..Default::default()
            });
        }
    }
    response
}

/// The `identity` a JSON body carries (`api_key`, `auth_token`), read from the body and put
/// back: the spec's fallback for clients that send credentials in the body rather than in
/// headers. Read only when authentication is configured and no header carries any.
async fn body_identity(
    req: Request,
) -> Result<(Request, Option<(Option<String>, Option<String>)>), Response> {
    let json = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("application/json"));
    if !json {
        return Ok((req, None));
    }
    let (parts, body) = req.into_parts();
    let bytes = match axum::body::to_bytes(body, DRAIN_LIMIT).await {
        Ok(bytes) => bytes,
        Err(_) => {
            let error = Error::invalid("the request body could not be read");
            return Err(closing(error.into_response()));
        }
    };
    #[derive(serde::Deserialize)]
    struct Identity {
        api_key: Option<String>,
        auth_token: Option<String>,
    }
    #[derive(serde::Deserialize)]
    struct WithIdentity {
        identity: Option<Identity>,
    }
    let identity = serde_json::from_slice::<WithIdentity>(&bytes)
        .ok()
        .and_then(|b| b.identity)
        .filter(|i| i.api_key.is_some() || i.auth_token.is_some())
        .map(|i| (i.api_key, i.auth_token));
    Ok((Request::from_parts(parts, Body::from(bytes)), identity))
}

/// The request's context, as the guard built it.
impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Ctx {
    type Rejection = Error;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _state: &S,
    ) -> Result<Self, Error> {
        parts
            .extensions
            .get::<Ctx>()
            .cloned()
            .ok_or_else(|| Error::internal("the request has no context", "the guard did not run"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_name_their_operation_and_id() {
        assert_eq!(
            route_of("/v1/table/ml%24emb/declare", "$"),
            (
                "table.declare".into(),
                vec!["ml".into(), "emb".into()],
                false
            )
        );
        assert_eq!(
            route_of("/v1/namespace/ml/table/list", "$"),
            ("namespace.table/list".into(), vec!["ml".into()], true)
        );
        assert!(route_of("/v1/table", "$").2, "list-all is a read");
        assert!(!route_of("/v1/namespace/a/drop", "$").2);
    }
}
