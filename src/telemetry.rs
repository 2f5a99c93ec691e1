//! Metrics, in Prometheus's text format on their own address (`--metrics-listen`, off by
//! default). The code records through the `metrics` facade, which costs next to nothing
//! while no recorder is installed; `install` puts the Prometheus recorder in place and
//! `serve` answers `GET /metrics` with what it holds.
//!
//! Every name and label is defined here, so the README's list and the dashboard in
//! `docker/` have one place to follow:
//!
//! | metric | labels | what |
//! |---|---|---|
//! | `lance_gateway_requests_total` | route, method, status | answered requests, by route template |
//! | `lance_gateway_request_duration_seconds` | route, method | histogram of the time to answer |
//! | `lance_gateway_requests_in_flight` | | requests being served |
//! | `lance_gateway_store_operations_total` | op, outcome | store calls: `ok`, `conflict` (a conditional write or delete refused: contention), `error` |
//! | `lance_gateway_store_operation_duration_seconds` | op | histogram |
//! | `lance_gateway_recovery_sweeps_total` | outcome | sweeps over the warehouse: `ok`, `error` |
//! | `lance_gateway_recovery_entries_total` | outcome | unfinished operations found by sweeps: `settled`, `failed` |
//! | `lance_gateway_authentications_total` | scheme, decision | `allow` / `deny` per scheme (`api-key`, `jwt`, `certificate`, `anonymous`, `none`) |
//! | `lance_gateway_authorization_denials_total` | needed | requests refused by the grants, by the access they lacked |
//! | `lance_gateway_credentials_vended_total` | policy, access | keys handed out beside a location |
//! | `lance_gateway_sts_requests_total` | outcome | AssumeRole calls made (cache misses): `ok`, `error` |
//! | `lance_gateway_unmanaged_commits_total` | | versions of managed tables committed behind the gateway's back (with no commit receipt) |

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

pub const REQUESTS: &str = "lance_gateway_requests_total";
pub const REQUEST_SECONDS: &str = "lance_gateway_request_duration_seconds";
pub const IN_FLIGHT: &str = "lance_gateway_requests_in_flight";
pub const STORE_OPS: &str = "lance_gateway_store_operations_total";
pub const STORE_SECONDS: &str = "lance_gateway_store_operation_duration_seconds";
pub const SWEEPS: &str = "lance_gateway_recovery_sweeps_total";
pub const SETTLED: &str = "lance_gateway_recovery_entries_total";
pub const AUTHENTICATIONS: &str = "lance_gateway_authentications_total";
pub const DENIALS: &str = "lance_gateway_authorization_denials_total";
pub const VENDED: &str = "lance_gateway_credentials_vended_total";
pub const STS_CALLS: &str = "lance_gateway_sts_requests_total";
pub const UNMANAGED: &str = "lance_gateway_unmanaged_commits_total";

/// Request latencies: from well under a millisecond (a describe) to the request timeout.
const REQUEST_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
/// Store calls: a local file operation to a slow S3 round trip.
const STORE_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

/// Installs the Prometheus recorder (once per process) and describes every metric.
pub fn install() -> Result<PrometheusHandle, String> {
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Full(REQUEST_SECONDS.into()), REQUEST_BUCKETS)
        .and_then(|b| b.set_buckets_for_metric(Matcher::Full(STORE_SECONDS.into()), STORE_BUCKETS))
        .map_err(|e| format!("metrics: {e}"))?
        .install_recorder()
        .map_err(|e| format!("metrics: {e}"))?;
    describe_counter!(
        REQUESTS,
        "Requests answered, by route template, method and status."
    );
    describe_histogram!(
        REQUEST_SECONDS,
        metrics::Unit::Seconds,
        "Time to answer a request."
    );
    describe_gauge!(IN_FLIGHT, "Requests being served.");
    describe_counter!(
        STORE_OPS,
        "Store operations by kind and outcome; `conflict` is a refused conditional write or delete (contention)."
    );
    describe_histogram!(
        STORE_SECONDS,
        metrics::Unit::Seconds,
        "Time a store operation took."
    );
    describe_counter!(SWEEPS, "Recovery sweeps over the warehouse, by outcome.");
    describe_counter!(
        SETTLED,
        "Unfinished operations of crashed or stalled gateways that sweeps settled or failed to settle."
    );
    describe_counter!(
        AUTHENTICATIONS,
        "Authentication decisions by scheme: allow or deny."
    );
    describe_counter!(
        DENIALS,
        "Requests refused by the grants, by the access level they lacked."
    );
    describe_counter!(VENDED, "Credentials vended beside a location.");
    describe_counter!(
        STS_CALLS,
        "AssumeRole calls made for table-scoped credentials."
    );
    describe_counter!(
        UNMANAGED,
        "Versions of managed tables that were not committed through the gateway (no commit receipt): a client bypasses CreateTableVersion."
    );
    Ok(handle)
}

/// Serves `GET /metrics` until the process ends; keeps the recorder's histograms tidy.
pub async fn serve(listener: tokio::net::TcpListener, handle: PrometheusHandle) {
    let upkeep = handle.clone();
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(Duration::from_secs(5));
        loop {
            ticker.tick().await;
            upkeep.run_upkeep();
        }
    });
    let app = Router::new()
        .route("/metrics", get(render))
        .with_state(handle);
    if let Err(e) = axum::serve(listener, app).await {
        tracing::error!(error = %e, "the metrics listener stopped");
    }
}

async fn render(State(handle): State<PrometheusHandle>) -> Response {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        handle.render(),
    )
        .into_response()
}

/// Binds the metrics address, naming the setting when it cannot.
pub async fn bind(addr: SocketAddr) -> Result<tokio::net::TcpListener, String> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("invalid setting `metrics-listen`: cannot bind {addr}: {e}"))
}

/// Middleware: counts and times every request by its route template (never the raw path,
/// whose ids would make a series per table).
pub async fn track(req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "unmatched".to_string());
    // Any token is a valid method: only the ones the API knows get a series of their own.
    let method: &'static str = match req.method().as_str() {
        "GET" => "GET",
        "POST" => "POST",
        "PUT" => "PUT",
        "DELETE" => "DELETE",
        "HEAD" => "HEAD",
        "OPTIONS" => "OPTIONS",
        "PATCH" => "PATCH",
        _ => "other",
    };
    let started = Instant::now();
    // Decremented on drop: a request whose client goes away is cancelled mid-await.
    let _in_flight = InFlight::enter();
    let response = next.run(req).await;
    let status = response.status().as_u16().to_string();
    histogram!(REQUEST_SECONDS, "route" => route.clone(), "method" => method)
        .record(started.elapsed().as_secs_f64());
    counter!(REQUESTS, "route" => route, "method" => method, "status" => status).increment(1);
    response
}

/// A request counted in flight until dropped.
struct InFlight;

impl InFlight {
    fn enter() -> Self {
        gauge!(IN_FLIGHT).increment(1.0);
        InFlight
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        gauge!(IN_FLIGHT).decrement(1.0);
    }
}

/// One store call's outcome.
pub fn store_op(op: &'static str, outcome: &'static str, took: Duration) {
    counter!(STORE_OPS, "op" => op, "outcome" => outcome).increment(1);
    histogram!(STORE_SECONDS, "op" => op).record(took.as_secs_f64());
}

pub fn sweep(ok: bool) {
    counter!(SWEEPS, "outcome" => if ok { "ok" } else { "error" }).increment(1);
}

pub fn settled(ok: bool) {
    counter!(SETTLED, "outcome" => if ok { "settled" } else { "failed" }).increment(1);
}

pub fn authentication(scheme: &'static str, allowed: bool) {
    counter!(AUTHENTICATIONS, "scheme" => scheme, "decision" => if allowed { "allow" } else { "deny" })
        .increment(1);
}

pub fn denial(needed: &'static str) {
    counter!(DENIALS, "needed" => needed).increment(1);
}

pub fn vended(policy: &'static str, access: &'static str) {
    counter!(VENDED, "policy" => policy, "access" => access).increment(1);
}

pub fn sts_call(ok: bool) {
    counter!(STS_CALLS, "outcome" => if ok { "ok" } else { "error" }).increment(1);
}

pub fn unmanaged_commits(versions: u64) {
    counter!(UNMANAGED).increment(versions);
}
