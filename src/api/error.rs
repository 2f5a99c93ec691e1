//! The one mapping from `Error` to the spec's error body and status. Extractor
//! rejections, unknown routes, wrong methods, timeouts and oversized bodies all become an
//! `Error` first and come through here.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use lance_namespace::models::ErrorResponse;

use crate::error::{Code, Error};

/// What an error's answer needs to know of the request being served.
#[derive(Clone, Default)]
pub struct Served {
    /// The request's URI, whose path is the error's `instance` (kept as the request's own
    /// shared bytes: most requests never need it).
    pub uri: axum::http::Uri,
    /// The request id, which a client quotes when it reports a server error.
    pub request_id: Option<HeaderValue>,
    /// Whether the caller is LanceDB's remote client (`extract::Dialect::LanceDbRemote`).
    pub remote: bool,
}

tokio::task_local! {
    pub static REQUEST: Served;
}

/// The status LanceDB's remote client needs for `code`, where the spec's would mislead it:
/// it takes every 404 for "table not found" and retries every 409. So what is missing
/// inside a table (a column, a tag, an index, a version) and what conflicts without a retry
/// helping (an existing table, tag, index or branch) are 400s to it, with the spec's code.
fn remote_status(code: Code, status: StatusCode) -> StatusCode {
    match code {
        Code::TableNotFound | Code::NamespaceNotFound | Code::ConcurrentModification => status,
        _ if status == StatusCode::NOT_FOUND || status == StatusCode::CONFLICT => {
            StatusCode::BAD_REQUEST
        }
        _ => status,
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let Served {
            uri,
            request_id,
            remote,
        } = REQUEST.try_with(Clone::clone).unwrap_or_default();
        let request_id = request_id
            .as_ref()
            .and_then(|v| v.to_str().ok())
            .unwrap_or("-");
        let path = uri.path();
        let mut status = StatusCode::from_u16(self.code.http_status())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        if remote {
            status = remote_status(self.code, status);
        }
        let server_side = self.code == Code::Internal || self.code == Code::ServiceUnavailable;
        // A server-side failure is told to the client only by its safe message and the
        // request id; what went wrong inside (store errors, paths, causes) goes to the log.
        let detail = if server_side {
            tracing::warn!(code = self.code as i32, error = %self.message, detail = ?self.detail, request_id, "request failed");
            Some(format!("request id {request_id}"))
        } else {
            self.detail
        };
        let body = ErrorResponse {
            context: None,
            error: Some(self.message),
            code: self.code as i32,
            detail,
            // A default (no request in scope) URI's path is `/`: no instance then.
            instance: Some(path)
                .filter(|p| !p.is_empty() && *p != "/")
                .map(str::to_string),
        };
        let bytes = serde_json::to_vec(&body).unwrap_or_default();
        let mut response = (status, bytes).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if self.code == Code::ServiceUnavailable {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        if self.code == Code::Unauthenticated {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"lance-gateway\""),
            );
        }
        response
    }
}
