//! HTTP only: the router, the middleware every request passes through, and the routes of
//! the spec that are not served (answered with Unsupported, code 0).

pub mod console;
pub mod data;
pub mod error;
pub mod extract;
pub mod fields;
pub mod guard;
pub mod namespace;
pub mod table;
pub mod transaction;
pub mod version;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderName, HeaderValue, Method, Uri};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::{Json, Router};
use tower::ServiceBuilder;
use tower_http::request_id::{
    MakeRequestId, PropagateRequestIdLayer, RequestId, SetRequestIdLayer,
};
use tower_http::trace::{DefaultOnResponse, TraceLayer};
use tracing::Level;

use crate::audit::Audit;
use crate::auth::Authenticator;
use crate::catalog::Catalog;
use crate::error::Error;
use crate::vend::Vendor;

/// What every handler and middleware is given: one `Arc`, since axum clones the state for
/// each request it routes.
#[derive(Clone)]
pub struct AppState(Arc<Services>);

/// The services behind `AppState`.
pub struct Services {
    pub catalog: Arc<Catalog>,
    pub vendor: Arc<Vendor>,
    pub auth: Arc<Authenticator>,
    pub audit: Arc<Audit>,
    pub data: Arc<crate::data::LanceDatasets>,
    pub data_limits: crate::data::DataLimits,
    /// The Ray cluster maintenance hands work to, when configured (`--ray-address`).
    pub ray: Option<Arc<crate::ray::Ray>>,
}

impl AppState {
    pub fn new(services: Services) -> Self {
        AppState(Arc::new(services))
    }
}

impl std::ops::Deref for AppState {
    type Target = Services;

    fn deref(&self) -> &Services {
        &self.0
    }
}

pub struct Limits {
    pub max_body_bytes: usize,
    pub request_timeout: Duration,
    /// Count and time requests (only while metrics are served: otherwise the bookkeeping
    /// would cost every request for nothing).
    pub metrics: bool,
    /// Serve the web console at `/ui/`.
    pub console: bool,
}

pub(crate) const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The spec's table routes that lance-gateway does not serve: the jobs of other products
/// (backfills, materialized-view refreshes).
const UNSERVED_TABLE_ROUTES: &[&str] = &["backfill_column", "refresh"];

pub fn router(state: AppState, limits: &Limits) -> Router {
    let mut routes = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/v1/whoami", get(console::whoami))
        .route("/v1/namespace/{id}/create", post(namespace::create))
        .route("/v1/namespace/{id}/list", get(namespace::list))
        // `/v1/namespace/./list` with the `.` delimiter arrives here after the client's URL
        // library normalises the dot away (clients.md §1.1): that is the root.
        .route("/v1/namespace/list", get(list_root_namespaces))
        .route("/v1/namespace/{id}/describe", post(namespace::describe))
        .route("/v1/namespace/{id}/drop", post(namespace::drop))
        .route("/v1/namespace/{id}/exists", post(namespace::exists))
        .route("/v1/namespace/{id}/table/list", get(namespace::list_tables))
        .route("/v1/table", get(table::list_all))
        .route("/v1/table/{id}/declare", post(table::declare))
        // The pre-0.7 name of DeclareTable, still sent by old clients.
        .route("/v1/table/{id}/create-empty", post(table::declare))
        .route("/v1/table/{id}/register", post(table::register))
        .route("/v1/table/{id}/describe", post(table::describe))
        .route("/v1/table/{id}/exists", post(table::exists))
        .route("/v1/table/{id}/drop", post(table::drop))
        .route("/v1/table/{id}/deregister", post(table::deregister))
        // Extensions: dropped tables kept for undrop (`catalog::dropped`).
        .route(
            "/v1/namespace/{id}/dropped_tables",
            get(table::list_dropped),
        )
        .route("/v1/table/{id}/undrop", post(table::undrop))
        .route("/v1/table/{id}/purge", post(table::purge))
        .route("/v1/table/{id}/rename", post(table::rename))
        .route("/v1/table/{id}/create", post(data::rows::create))
        .route("/v1/table/{id}/insert", post(data::rows::insert))
        .route(
            "/v1/table/{id}/merge_insert",
            post(data::rows::merge_insert),
        )
        .route("/v1/table/{id}/update", post(data::rows::update))
        .route("/v1/table/{id}/delete", post(data::rows::delete))
        .route("/v1/table/{id}/query", post(data::reads::query))
        .route("/v1/table/{id}/count_rows", post(data::reads::count_rows))
        .route(
            "/v1/table/{id}/explain_plan",
            post(data::reads::explain_plan),
        )
        .route(
            "/v1/table/{id}/analyze_plan",
            post(data::reads::analyze_plan),
        )
        .route("/v1/table/{id}/stats", post(data::reads::stats))
        .route("/v1/table/{id}/restore", post(data::refs::restore))
        .route(
            "/v1/table/{id}/version/list",
            post(data::refs::list_versions),
        )
        .route(
            "/v1/table/{id}/version/describe",
            post(data::refs::describe_version),
        )
        .route("/v1/table/{id}/version/create", post(version::create))
        .route("/v1/table/{id}/version/delete", post(version::delete))
        .route("/v1/table/{id}/tags/list", post(data::refs::list_tags))
        .route("/v1/table/{id}/tags/version", post(data::refs::tag_version))
        .route("/v1/table/{id}/tags/create", post(data::refs::create_tag))
        .route("/v1/table/{id}/tags/update", post(data::refs::update_tag))
        .route("/v1/table/{id}/tags/delete", post(data::refs::delete_tag))
        .route(
            "/v1/table/{id}/branches/list",
            post(data::refs::list_branches),
        )
        .route(
            "/v1/table/{id}/branches/create",
            post(data::refs::create_branch),
        )
        .route(
            "/v1/table/{id}/branches/delete",
            post(data::refs::delete_branch),
        )
        .route(
            "/v1/table/{id}/create_index",
            post(data::indices::create_index),
        )
        .route(
            "/v1/table/{id}/create_scalar_index",
            post(data::indices::create_scalar_index),
        )
        .route(
            "/v1/table/{id}/index/list",
            post(data::indices::list_indices),
        )
        .route(
            "/v1/table/{id}/index/{index_name}/stats",
            post(data::indices::index_stats),
        )
        .route(
            "/v1/table/{id}/index/{index_name}/drop",
            post(data::indices::drop_index),
        )
        .route(
            "/v1/table/{id}/index/{index_name}/prewarm",
            post(data::indices::prewarm_index),
        )
        .route("/v1/table/{id}/page_cache/prewarm", any(no_page_cache))
        .route(
            "/v1/table/{id}/add_columns",
            post(data::schema::add_columns),
        )
        .route(
            "/v1/table/{id}/alter_columns",
            post(data::schema::alter_columns),
        )
        .route(
            "/v1/table/{id}/drop_columns",
            post(data::schema::drop_columns),
        )
        .route(
            "/v1/table/{id}/update_field_metadata",
            post(data::schema::update_field_metadata),
        )
        .route(
            "/v1/table/{id}/schema_metadata/update",
            post(data::schema::update_schema_metadata),
        )
        .route(
            "/v1/table/version/batch-create",
            post(version::batch_create),
        )
        .route("/v1/table/batch-commit", post(version::batch_commit))
        .route(
            "/v1/table/{id}/transaction/list",
            get(transaction::list_for_table),
        )
        .route("/v1/transaction/{id}/describe", post(transaction::describe))
        .route("/v1/transaction/{id}/alter", post(transaction::alter))
        .route("/v1/materialized_view/{id}/create", any(unsupported))
        .route("/v1/materialized_view/{id}/refresh", any(unsupported));
    for op in UNSERVED_TABLE_ROUTES {
        routes = routes.route(&format!("/v1/table/{{id}}/{op}"), any(unsupported));
    }
    if limits.console {
        routes = routes
            // `/ui/` arrives as `/ui` (trailing slashes are trimmed before routing).
            .route("/ui", get(console::index))
            .route("/ui/index.html", get(console::index))
            .route("/ui/app.js", get(console::script))
            .route("/ui/app.css", get(console::style));
    }
    let (timeout, metrics) = (limits.request_timeout, limits.metrics);
    let routes = routes
        .fallback(no_route)
        .method_not_allowed_fallback(wrong_method)
        .with_state(state.clone())
        .layer(DefaultBodyLimit::max(limits.max_body_bytes))
        .layer(middleware::from_fn_with_state(state, guard::guard))
        .layer(middleware::from_fn(move |req: Request, next: Next| {
            frame(req, next, timeout, metrics)
        }));
    routes.layer(
            ServiceBuilder::new()
                .layer(SetRequestIdLayer::new(REQUEST_ID, RequestIds))
                .layer(
                    TraceLayer::new_for_http().make_span_with(|req: &Request| {
                        let id = req.headers().get(&REQUEST_ID).and_then(|v| v.to_str().ok()).unwrap_or("-");
                        tracing::info_span!("request", method = %req.method(), path = %req.uri().path(), request_id = %id)
                    })
                    .on_response(DefaultOnResponse::new().level(Level::INFO)),
                )
                .layer(PropagateRequestIdLayer::new(REQUEST_ID)),
        )
}

/// Request ids: this process's random prefix and a counter, in 32 hex digits (a UUID's
/// length), unique across gateways without a random draw per request (a UUID v4 costs a
/// `getrandom` system call each).
#[derive(Clone)]
struct RequestIds;

impl MakeRequestId for RequestIds {
    fn make_request_id<B>(&mut self, _: &axum::http::Request<B>) -> Option<RequestId> {
        static PREFIX: std::sync::LazyLock<u64> =
            std::sync::LazyLock::new(|| uuid::Uuid::new_v4().as_u64_pair().0);
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let id = format!("{:016x}{n:016x}", *PREFIX);
        HeaderValue::from_str(&id).ok().map(RequestId::new)
    }
}

/// Runs a catalog change to its end even when the client goes away or the request times out
/// (the client then sees 503 and an unknown outcome): a change cut off between two steps
/// would leave its name blocked until recovery settles it.
pub(crate) async fn detached<T, F>(change: F) -> Result<T, Error>
where
    F: std::future::Future<Output = Result<T, Error>> + Send + 'static,
    T: Send + 'static,
{
    DETACHED_RUNNING.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let running = Running;
    tokio::spawn(async move {
        let _running = running;
        change.await
    })
    .await
    .map_err(|e| Error::internal("a catalog change failed", e))?
}

/// How many catalog changes run detached (`detached`), and who waits for none to be left.
static DETACHED_RUNNING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static DETACHED_DONE: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// One detached change, counted while it runs (its end is counted even if it panics).
struct Running;

impl Drop for Running {
    fn drop(&mut self) {
        if DETACHED_RUNNING.fetch_sub(1, std::sync::atomic::Ordering::SeqCst) == 1 {
            DETACHED_DONE.notify_waiters();
        }
    }
}

/// Waits until no catalog change runs detached: a graceful stop waits for changes whose
/// clients went away, which the connections' drain does not.
pub async fn detached_finished() {
    loop {
        let done = DETACHED_DONE.notified();
        tokio::pin!(done);
        done.as_mut().enable();
        if DETACHED_RUNNING.load(std::sync::atomic::Ordering::SeqCst) == 0 {
            return;
        }
        done.await;
    }
}

/// The server version LanceDB's remote client reads from `phalanx-version` to decide which
/// request shapes it may use: 0.3 takes multivector queries and structured full-text
/// queries; 0.4 would add multipart writes and 0.5 blobs, which lance-gateway does not serve.
const LANCEDB_SERVER_VERSION: HeaderValue = HeaderValue::from_static("0.3.0");

/// What every request runs inside, in one layer: what error answers need of it recorded
/// (`error::Served`), the request timeout, the server version LanceDB's remote client
/// reads from every answer, and (while metrics are served) the request's series.
async fn frame(req: Request, next: Next, timeout: Duration, metrics: bool) -> Response {
    let tracked = metrics.then(|| {
        crate::telemetry::Tracked::start(
            req.extensions()
                .get::<axum::extract::MatchedPath>()
                .map(|p| p.as_str()),
            req.method(),
        )
    });
    let remote = req.headers().contains_key(extract::LANCEDB_DATABASE);
    let served = error::Served {
        uri: req.uri().clone(),
        request_id: req.headers().get(&REQUEST_ID).cloned(),
        remote: extract::Dialect::of(req.headers()) == extract::Dialect::LanceDbRemote,
    };
    let answer = async move {
        match tokio::time::timeout(timeout, next.run(req)).await {
            Ok(response) => response,
            Err(_) => Error::unavailable(format!(
                "the request took longer than {}s",
                timeout.as_secs()
            ))
            .into_response(),
        }
    };
    let mut response = error::REQUEST.scope(served, answer).await;
    if remote {
        response.headers_mut().insert(
            HeaderName::from_static("phalanx-version"),
            LANCEDB_SERVER_VERSION,
        );
    }
    if let Some(tracked) = tracked {
        tracked.finish(response.status().as_u16());
    }
    response
}

/// Collapses repeated slashes and drops a trailing one before routing: the Lance client
/// appends `/v1/...` to the configured URI verbatim, so `uri/` gives `//v1/...`.
pub fn normalize_path(mut req: Request) -> Request {
    let path = req.uri().path();
    if path.contains("//") || (path.len() > 1 && path.ends_with('/')) {
        let mut clean = String::with_capacity(path.len());
        for ch in path.chars() {
            if ch == '/' && clean.ends_with('/') {
                continue;
            }
            clean.push(ch);
        }
        if clean.len() > 1 && clean.ends_with('/') {
            clean.pop();
        }
        let rebuilt = match req.uri().query() {
            Some(q) => format!("{clean}?{q}"),
            None => clean,
        };
        if let Ok(uri) = rebuilt.parse::<Uri>() {
            *req.uri_mut() = uri;
        }
    }
    req
}

async fn healthz() -> Json<serde_json::Value> {
    Json(serde_json::json!({ "status": "ok" }))
}

async fn readyz(State(state): State<AppState>) -> Result<Json<serde_json::Value>, Error> {
    state.catalog.ready().await?;
    Ok(Json(serde_json::json!({ "status": "ready" })))
}

async fn list_root_namespaces(
    state: State<AppState>,
    ctx: crate::access::Ctx,
    query: extract::QueryOf<namespace::PageQuery>,
) -> Result<Json<lance_namespace::models::ListNamespacesResponse>, Error> {
    let target = extract::Target {
        id: Vec::new(),
        delimiter: ".".into(),
    };
    namespace::list(state, ctx, target, query).await
}

/// An answer to a request whose body the handler has no use for: the body is read and
/// thrown away first (up to a bound; past it the connection is announced as closing), so
/// the client's next request on the connection is not lost.
async fn refuse_unread(error: Error, body: axum::body::Body) -> Response {
    let drained = guard::drain(body).await;
    let response = error.into_response();
    if drained {
        response
    } else {
        guard::closing(response)
    }
}

async fn unsupported(method: Method, uri: Uri, body: axum::body::Body) -> Response {
    let error = Error::unsupported(format!(
        "{method} {} is not supported by lance-gateway yet",
        uri.path()
    ));
    refuse_unread(error, body).await
}

/// LanceDB's remote client's `prewarm_data`: LanceDB's service keeps table pages in a cache
/// of its own; the gateway keeps none (its clients read pages from the store), so there is
/// nothing to warm, and saying so beats answering as if it had been done.
async fn no_page_cache(body: axum::body::Body) -> Response {
    refuse_unread(
        Error::unsupported(
            "lance-gateway keeps no page cache of table data, so there is nothing to prewarm \
             (index prewarming is served: index/{name}/prewarm)",
        ),
        body,
    )
    .await
}

async fn no_route(method: Method, uri: Uri, body: axum::body::Body) -> Response {
    refuse_unread(
        Error::unsupported(format!("no such operation: {method} {}", uri.path())),
        body,
    )
    .await
}

async fn wrong_method(method: Method, uri: Uri, body: axum::body::Body) -> Response {
    refuse_unread(
        Error::unsupported(format!("{} does not take {method}", uri.path())),
        body,
    )
    .await
}
