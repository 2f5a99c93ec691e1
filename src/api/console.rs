//! The web console: three files compiled into the binary, served at `/ui/` without
//! credentials (they hold no data), and `GET /v1/whoami`, which the console (or any caller)
//! asks who it is and what it may do with an object. Everything the console shows comes from
//! the public routes, under the caller's own credential and grants.

use axum::extract::State;
use axum::http::{HeaderValue, Uri, header};
use axum::response::{IntoResponse, Response};

use crate::access::Ctx;
use crate::api::AppState;
use crate::api::extract::delimiter_of;
use crate::catalog::names;
use crate::error::Result;

const INDEX: &str = include_str!("../../ui/index.html");
const SCRIPT: &str = include_str!("../../ui/app.js");
const STYLE: &str = include_str!("../../ui/app.css");

/// Scripts and styles from this origin's own files only (no inline script, so a name that
/// slipped into markup still could not run), calls to this origin only, and no framing.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                      connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

pub fn is_console(path: &str) -> bool {
    path == "/ui" || path.starts_with("/ui/")
}

pub async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX)
}

pub async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

pub async fn style() -> Response {
    asset("text/css; charset=utf-8", STYLE)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    // A new binary may bring new files: the browser asks again each time (they are small).
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// `GET /v1/whoami[?id=...]`: the caller's principal, how it authenticated, and (for an id,
/// joined with `delimiter`, `$` by default) its access level there: `none`, `read`, `write`
/// or `admin`. The console asks it to offer only what the caller may do.
pub async fn whoami(
    State(state): State<AppState>,
    ctx: Ctx,
    uri: Uri,
) -> Result<axum::Json<serde_json::Value>> {
    let mut answer = serde_json::json!({
        "principal": ctx.principal.name,
        "scheme": ctx.principal.scheme,
        "groups": ctx.principal.groups,
    });
    let id = uri.query().and_then(|q| {
        form_urlencoded::parse(q.as_bytes())
            .find(|(k, _)| k == "id")
            .map(|(_, v)| v.into_owned())
    });
    if let Some(id) = id {
        let id = names::split_id(&id, &delimiter_of(uri.query())?)?;
        answer["level"] = state.catalog.access(&ctx, &id).name().into();
    }
    Ok(axum::Json(answer))
}
