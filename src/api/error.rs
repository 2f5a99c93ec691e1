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

/// The status LanceDB's remote client needs for `code` on `path`, where the spec's would
/// mislead it: it takes most 404s for "table not found" and retries every 409. So what is
/// missing inside a table (a column, a tag, a version) and what conflicts without a retry
/// helping (an existing table, tag, index or branch) are 400s to it, with the spec's code.
/// The exception is an index named in the path: the client's `index_stats` reads a 404 there
/// as "no such index" (None, as an embedded table answers), `drop_index` and
/// `prewarm_index` as its IndexNotFound error, and `wait_for_index` needs that None to time
/// out as it does on an embedded table (lancedb `remote/table.rs`, 0.31).
fn remote_status(code: Code, status: StatusCode, path: &str) -> StatusCode {
    match code {
        Code::TableNotFound | Code::NamespaceNotFound | Code::ConcurrentModification => status,
        Code::TableIndexNotFound if names_an_index(path) => status,
        _ if status == StatusCode::NOT_FOUND || status == StatusCode::CONFLICT => {
            StatusCode::BAD_REQUEST
        }
        _ => status,
    }
}

/// Whether `path` is `/v1/table/{id}/index/{name}/{stats,drop,prewarm}`: the routes where a
/// missing index is the answer the remote client asks for, not a failure.
fn names_an_index(path: &str) -> bool {
    let segments: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    matches!(
        segments.as_slice(),
        [
            "",
            "v1",
            "table",
            _,
            "index",
            _,
            "stats" | "drop" | "prewarm"
        ]
    )
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
            status = remote_status(self.code, status, path);
        }
        if self.outcome_unknown {
            // Distinct from every other failure: the commit may have landed. A client must
            // not resend blindly; it follows `transaction_id` or retries with its key.
            status = StatusCode::GATEWAY_TIMEOUT;
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
        let extra = self.transaction_id.is_some() || self.outcome_unknown;
        let bytes = match serde_json::to_value(&body) {
            Ok(serde_json::Value::Object(mut fields)) if extra => {
                if let Some(id) = &self.transaction_id {
                    fields.insert("transaction_id".into(), id.clone().into());
                }
                if self.outcome_unknown {
                    fields.insert("outcome".into(), "unknown".into());
                }
                serde_json::to_vec(&fields).unwrap_or_default()
            }
            _ => serde_json::to_vec(&body).unwrap_or_default(),
        };
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_remote_client_reads_a_missing_index_as_none_only_where_it_names_one() {
        let (missing, nf) = (Code::TableIndexNotFound, StatusCode::NOT_FOUND);
        for path in [
            "/v1/table/docs/index/vec_idx/stats",
            "/v1/table/docs/index/vec_idx/stats/",
            "/v1/table/ml%24docs/index/vec_idx/drop",
            "/v1/table/docs/index/vec_idx/prewarm",
        ] {
            assert_eq!(remote_status(missing, nf, path), nf, "{path}");
        }
        // Elsewhere a 404 would read as "table not found" to it.
        for path in ["/v1/table/docs/query", "/v1/table/docs/index/list"] {
            assert_eq!(
                remote_status(missing, nf, path),
                StatusCode::BAD_REQUEST,
                "{path}"
            );
        }
        assert_eq!(
            remote_status(Code::TableTagNotFound, nf, "/v1/table/docs/index/i/stats"),
            StatusCode::BAD_REQUEST
        );
        assert_eq!(
            remote_status(Code::TableNotFound, nf, "/v1/table/x/describe"),
            nf
        );
    }

    #[test]
    fn an_unknown_outcome_is_its_own_answer_with_the_batch_named() {
        let error = Error::commit_state_unknown(Some("tx-1".into()), "reset");
        let response = error.into_response();
        assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
    }
}
