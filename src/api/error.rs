//! The one mapping from `Error` to the spec's error body and status. Extractor
//! rejections, unknown routes, wrong methods, timeouts and oversized bodies all become an
//! `Error` first and come through here.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use lance_namespace::models::ErrorResponse;

use crate::error::{Code, Error};

tokio::task_local! {
    /// The path of the request being served, reported as the error's `instance`.
    pub static REQUEST_PATH: String;
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.code.http_status())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        if self.code == Code::Internal || self.code == Code::ServiceUnavailable {
            tracing::warn!(code = self.code as i32, error = %self.message, detail = ?self.detail, "request failed");
        }
        let body = ErrorResponse {
            context: None,
            error: Some(self.message),
            code: self.code as i32,
            detail: self.detail,
            instance: REQUEST_PATH.try_with(Clone::clone).ok(),
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
        response
    }
}
