//! The one mapping from `Error` to the spec's error body and status. Extractor
//! rejections, unknown routes, wrong methods, timeouts and oversized bodies all become an
//! `Error` first and come through here.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use lance_namespace::models::ErrorResponse;

use crate::error::{Code, Error};

tokio::task_local! {
    /// The path and id of the request being served: the error's `instance`, and what a
    /// client quotes when it reports a server error.
    pub static REQUEST: (String, String);
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.code.http_status())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let (path, request_id) = REQUEST.try_with(Clone::clone).unwrap_or_default();
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
            instance: Some(path).filter(|p| !p.is_empty()),
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
