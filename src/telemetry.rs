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
//! | `lance_gateway_maintenance_runs_total` | task, outcome | maintenance tasks run: `succeeded`, `failed` |
//! | `lance_gateway_maintenance_duration_seconds` | task | histogram of a task's run |
//! | `lance_gateway_maintenance_bytes_reclaimed_total` | | bytes version cleanup deleted |
//! | `lance_gateway_maintenance_tables_due` | task | tables this gateway last found due and has not yet maintained |

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, LazyLock, OnceLock, RwLock};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use metrics::{
    Counter, Gauge, Histogram, counter, describe_counter, describe_gauge, describe_histogram,
    gauge, histogram,
};
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
pub const MAINTENANCE_RUNS: &str = "lance_gateway_maintenance_runs_total";
pub const MAINTENANCE_SECONDS: &str = "lance_gateway_maintenance_duration_seconds";
pub const MAINTENANCE_RECLAIMED: &str = "lance_gateway_maintenance_bytes_reclaimed_total";
pub const MAINTENANCE_DUE: &str = "lance_gateway_maintenance_tables_due";

/// Request latencies: from well under a millisecond (a describe) to the request timeout.
const REQUEST_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
/// Store calls: a local file operation to a slow S3 round trip.
const STORE_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];
/// Maintenance tasks: a cleanup with nothing to do to a compaction of a large table.
const MAINTENANCE_BUCKETS: &[f64] = &[
    0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
];

/// Installs the Prometheus recorder (once per process) and describes every metric.
pub fn install() -> Result<PrometheusHandle, String> {
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Full(REQUEST_SECONDS.into()), REQUEST_BUCKETS)
        .and_then(|b| b.set_buckets_for_metric(Matcher::Full(STORE_SECONDS.into()), STORE_BUCKETS))
        .and_then(|b| {
            b.set_buckets_for_metric(
                Matcher::Full(MAINTENANCE_SECONDS.into()),
                MAINTENANCE_BUCKETS,
            )
        })
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
    describe_counter!(
        MAINTENANCE_RUNS,
        "Maintenance tasks run by the gateway, by task and outcome."
    );
    describe_histogram!(
        MAINTENANCE_SECONDS,
        metrics::Unit::Seconds,
        "Time a maintenance task took."
    );
    describe_counter!(
        MAINTENANCE_RECLAIMED,
        metrics::Unit::Bytes,
        "Bytes deleted by version cleanup."
    );
    describe_gauge!(
        MAINTENANCE_DUE,
        "Tables this gateway last found due for a task and has not maintained since."
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
/// whose ids would make a series per table). The series' handles are made the first time a
/// route, method and status are seen and kept: a request then costs a read lock on a map,
/// two atomic additions and a histogram push, with no label built or hashed by the recorder.
pub async fn track(req: Request, next: Next) -> Response {
    let route = route_series(req.extensions().get::<MatchedPath>().map(|p| p.as_str()));
    let method = method_index(req.method());
    let started = Instant::now();
    // Decremented on drop: a request whose client goes away is cancelled mid-await.
    let _in_flight = InFlight::enter();
    let response = next.run(req).await;
    let series = route.of(method);
    series.duration.record(started.elapsed().as_secs_f64());
    series.answered(route.route.as_str(), method, response.status().as_u16());
    response
}

/// The methods that get a series of their own; any other token counts as `other`.
const METHODS: [&str; 8] = [
    "GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH", "other",
];

fn method_index(method: &axum::http::Method) -> usize {
    METHODS[..7]
        .iter()
        .position(|m| *m == method.as_str())
        .unwrap_or(7)
}

/// One route template's series, a slot per method, each made on first use.
struct RouteSeries {
    route: String,
    methods: [OnceLock<MethodSeries>; 8],
}

struct MethodSeries {
    duration: Histogram,
    /// Counters by status: a handful per route, looked up by a linear scan.
    answered: RwLock<Vec<(u16, Counter)>>,
}

impl RouteSeries {
    fn of(&self, method: usize) -> &MethodSeries {
        self.methods[method].get_or_init(|| MethodSeries {
            duration: histogram!(REQUEST_SECONDS, "route" => self.route.clone(), "method" => METHODS[method]),
            answered: RwLock::new(Vec::new()),
        })
    }
}

impl MethodSeries {
    fn answered(&self, route: &str, method: usize, status: u16) {
        let known = |list: &Vec<(u16, Counter)>| {
            list.iter()
                .find(|(s, _)| *s == status)
                .map(|(_, c)| c.clone())
        };
        let found = known(&self.answered.read().unwrap_or_else(|e| e.into_inner()));
        let counter = found.unwrap_or_else(|| {
            let mut list = self.answered.write().unwrap_or_else(|e| e.into_inner());
            known(&list).unwrap_or_else(|| {
                let made = counter!(REQUESTS, "route" => route.to_string(), "method" => METHODS[method], "status" => status.to_string());
                list.push((status, made.clone()));
                made
            })
        });
        counter.increment(1);
    }
}

/// The series of a route template (`unmatched` for requests no route took), made once.
fn route_series(route: Option<&str>) -> Arc<RouteSeries> {
    static ROUTES: LazyLock<RwLock<HashMap<String, Arc<RouteSeries>>>> =
        LazyLock::new(Default::default);
    let route = route.unwrap_or("unmatched");
    if let Some(found) = ROUTES.read().unwrap_or_else(|e| e.into_inner()).get(route) {
        return found.clone();
    }
    ROUTES
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .entry(route.to_string())
        .or_insert_with(|| {
            Arc::new(RouteSeries {
                route: route.to_string(),
                methods: Default::default(),
            })
        })
        .clone()
}

/// A request counted in flight until dropped.
struct InFlight;

static IN_FLIGHT_GAUGE: LazyLock<Gauge> = LazyLock::new(|| gauge!(IN_FLIGHT));

impl InFlight {
    fn enter() -> Self {
        IN_FLIGHT_GAUGE.increment(1.0);
        InFlight
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        IN_FLIGHT_GAUGE.decrement(1.0);
    }
}

/// Handles made once per key: the first use registers the series with the recorder, every
/// later one finds the handle under a read lock.
struct Handles<K, H>(LazyLock<RwLock<HashMap<K, H>>>);

impl<K: std::hash::Hash + Eq + Copy, H: Clone> Handles<K, H> {
    const fn new() -> Self {
        Handles(LazyLock::new(Default::default))
    }

    fn get(&self, key: K, make: impl FnOnce() -> H) -> H {
        if let Some(found) = self.0.read().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return found.clone();
        }
        self.0
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .entry(key)
            .or_insert_with(make)
            .clone()
    }
}

/// One store call's outcome, under handles kept per operation and outcome.
pub fn store_op(op: &'static str, outcome: &'static str, took: Duration) {
    static STORE: Handles<(&str, &str), (Counter, Histogram)> = Handles::new();
    let (count, time) = STORE.get((op, outcome), || {
        (
            counter!(STORE_OPS, "op" => op, "outcome" => outcome),
            histogram!(STORE_SECONDS, "op" => op),
        )
    });
    count.increment(1);
    time.record(took.as_secs_f64());
}

pub fn sweep(ok: bool) {
    counter!(SWEEPS, "outcome" => if ok { "ok" } else { "error" }).increment(1);
}

pub fn settled(ok: bool) {
    counter!(SETTLED, "outcome" => if ok { "settled" } else { "failed" }).increment(1);
}

pub fn authentication(scheme: &'static str, allowed: bool) {
    // Counted on every request: kept as handles like the request series.
    static DECISIONS: Handles<(&str, bool), Counter> = Handles::new();
    DECISIONS
        .get((scheme, allowed), || {
            counter!(AUTHENTICATIONS, "scheme" => scheme, "decision" => if allowed { "allow" } else { "deny" })
        })
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

/// One maintenance task's run.
pub fn maintenance_run(task: &'static str, outcome: &str, seconds: f64, reclaimed: u64) {
    let outcome = if outcome == "succeeded" {
        "succeeded"
    } else {
        "failed"
    };
    counter!(MAINTENANCE_RUNS, "task" => task, "outcome" => outcome).increment(1);
    histogram!(MAINTENANCE_SECONDS, "task" => task).record(seconds);
    if reclaimed > 0 {
        counter!(MAINTENANCE_RECLAIMED).increment(reclaimed);
    }
}

/// How many tables are due for `task`, as this gateway last found them.
pub fn maintenance_due(task: &'static str, tables: usize) {
    gauge!(MAINTENANCE_DUE, "task" => task).set(tables as f64);
}
