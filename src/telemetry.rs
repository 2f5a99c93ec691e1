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
//! | `lance_gateway_maintenance_swept_tables_total` | | tables a maintenance sweep of this gateway went through (one gateway sweeps each cell per interval) |
//! | `lance_gateway_maintenance_looks_total` | kind | looks at a table: `quiet` (unchanged since the last look: one store request), `full` (the dataset opened and measured) |
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
use std::sync::atomic::{AtomicI64, AtomicU16, AtomicU64, Ordering};
use std::sync::{LazyLock, OnceLock, RwLock};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use metrics::{
    Counter, Histogram, counter, describe_counter, describe_gauge, describe_histogram, gauge,
    histogram,
};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

pub const REQUESTS: &str = "lance_gateway_requests_total";
pub const REQUEST_SECONDS: &str = "lance_gateway_request_duration_seconds";
pub const IN_FLIGHT: &str = "lance_gateway_requests_in_flight";
pub const STORE_OPS: &str = "lance_gateway_store_operations_total";
pub const STORE_SECONDS: &str = "lance_gateway_store_operation_duration_seconds";
pub const SWEEPS: &str = "lance_gateway_recovery_sweeps_total";
pub const SWEPT_TABLES: &str = "lance_gateway_maintenance_swept_tables_total";
pub const MAINTENANCE_LOOKS: &str = "lance_gateway_maintenance_looks_total";
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
pub const BUILD_INFO: &str = "lance_gateway_build_info";
pub const NEWER_RECORDS: &str = "lance_gateway_newer_records_total";
pub const DROPPED_TABLES: &str = "lance_gateway_dropped_tables";
pub const DROPPED_BYTES: &str = "lance_gateway_dropped_bytes";
pub const PURGES: &str = "lance_gateway_purges_total";
pub const DROPS: &str = "lance_gateway_table_drops_total";
pub const READ_CACHE: &str = "lance_gateway_read_cache_total";
pub const PEER_PINS: &str = "lance_gateway_peer_pins_total";
pub const PEER_REVOCATIONS: &str = "lance_gateway_peer_revocations_total";

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
        .set_buckets_for_metric(Matcher::Full(STORE_SECONDS.into()), STORE_BUCKETS)
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
        READ_CACHE,
        "Reads of catalog records and listings by whether memory answered them (`hit`) or the store (`miss`)."
    );
    describe_counter!(
        PEER_PINS,
        "Pins sent to gateways that answer from memory before a write, by whether they were confirmed."
    );
    describe_counter!(
        PEER_REVOCATIONS,
        "Gateways whose read cache this gateway revoked because they could not be reached."
    );
    describe_counter!(
        SWEPT_TABLES,
        "Tables this gateway's maintenance sweeps went through."
    );
    describe_counter!(
        MAINTENANCE_LOOKS,
        "Looks at a table by maintenance: quiet (found unchanged with one store request) or full."
    );
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
    describe_gauge!(
        BUILD_INFO,
        "Always 1: the release, and the record formats it reads and writes (`reads_up_to`, `writes_up_to`)."
    );
    gauge!(
        BUILD_INFO,
        "version" => env!("CARGO_PKG_VERSION"),
        "reads_up_to" => crate::catalog::records::READS_UP_TO.to_string(),
        "writes_up_to" => crate::catalog::records::WRITES_UP_TO.to_string(),
        "base_format" => crate::catalog::records::FORMAT_VERSION.to_string()
    )
    .set(1.0);
    describe_counter!(
        NEWER_RECORDS,
        "Catalog records met in a format newer than this gateway reads (left for a newer gateway; the request answered 503)."
    );
    describe_gauge!(
        DROPPED_TABLES,
        "Dropped tables kept for undrop, as the last purge sweep of this gateway counted them."
    );
    describe_gauge!(
        DROPPED_BYTES,
        metrics::Unit::Bytes,
        "Bytes held by dropped tables kept for undrop, as the last purge sweep counted them."
    );
    describe_counter!(
        PURGES,
        "Dropped tables purged (their data deleted), by why: `expired` (the sweep) or `requested`."
    );
    describe_counter!(
        DROPS,
        "Tables dropped, by how: `kept` (soft: undroppable until purged) or `deleted` (at once)."
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
    let mut text = handle.render();
    render_requests(&mut text);
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

/// Binds the metrics address, naming the setting when it cannot.
pub async fn bind(addr: SocketAddr) -> Result<tokio::net::TcpListener, String> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("invalid setting `metrics-listen`: cannot bind {addr}: {e}"))
}

/// The request series (`lance_gateway_requests_total`, `..._request_duration_seconds`,
/// `..._requests_in_flight`), kept by the gateway itself rather than by the recorder, so
/// that a request costs only what it must: a row found by its route template without a
/// lock (a fixed table of slots, each filled once), the time taken into a histogram of
/// atomic bucket counts (no sample kept), its status counted in a slot of its own, and two
/// additions to the in-flight count. Nothing is allocated or locked per request; the rows
/// are read when `/metrics` is scraped.
pub struct Tracked {
    row: &'static MethodRow,
    started: Instant,
}

impl Tracked {
    /// Starts timing a request to `route` (its template: never the raw path, whose ids
    /// would make a series per table) with `method`.
    pub fn start(route: Option<&str>, method: &axum::http::Method) -> Self {
        IN_FLIGHT_NOW.fetch_add(1, Ordering::Relaxed);
        Tracked {
            row: ROUTES
                .row(route.unwrap_or("unmatched"))
                .method(method_index(method)),
            started: Instant::now(),
        }
    }

    /// Counts the answer.
    pub fn finish(self, status: u16) {
        self.row.record(self.started.elapsed(), status);
    }
}

impl Drop for Tracked {
    /// Left in flight no more, answered or not (a request whose client goes away is
    /// cancelled mid-await).
    fn drop(&mut self) {
        IN_FLIGHT_NOW.fetch_sub(1, Ordering::Relaxed);
    }
}

static IN_FLIGHT_NOW: AtomicI64 = AtomicI64::new(0);
static ROUTES: LazyLock<RouteTable> = LazyLock::new(RouteTable::new);

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

/// Rows by route template: open addressing on the template's hash over slots filled once;
/// a full table sends the rest to one overflow row (the router has about sixty routes).
struct RouteTable {
    slots: Box<[OnceLock<RouteRow>]>,
    overflow: RouteRow,
}

const ROUTE_SLOTS: usize = 256;

impl RouteTable {
    fn new() -> Self {
        RouteTable {
            slots: (0..ROUTE_SLOTS).map(|_| OnceLock::new()).collect(),
            overflow: RouteRow::new("other"),
        }
    }

    fn row(&self, route: &str) -> &RouteRow {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        route.hash(&mut hasher);
        let start = hasher.finish() as usize % ROUTE_SLOTS;
        for i in 0..ROUTE_SLOTS {
            let slot = &self.slots[(start + i) % ROUTE_SLOTS];
            let row = slot.get_or_init(|| RouteRow::new(route));
            if &*row.route == route {
                return row;
            }
        }
        &self.overflow
    }

    fn rows(&self) -> impl Iterator<Item = &RouteRow> {
        self.slots
            .iter()
            .filter_map(OnceLock::get)
            .chain(std::iter::once(&self.overflow))
    }
}

/// One route template's series, a row per method, each made on first use.
struct RouteRow {
    route: Box<str>,
    methods: [OnceLock<MethodRow>; 8],
}

impl RouteRow {
    fn new(route: &str) -> Self {
        RouteRow {
            route: route.into(),
            methods: Default::default(),
        }
    }

    fn method(&self, method: usize) -> &MethodRow {
        self.methods[method].get_or_init(MethodRow::default)
    }
}

/// One route and method: answers by status, and the time they took.
#[derive(Default)]
struct MethodRow {
    /// How many took at most each of `REQUEST_BUCKETS` (not cumulated), then the rest.
    buckets: [AtomicU64; REQUEST_BUCKETS.len() + 1],
    nanos: AtomicU64,
    /// Answers by status: a slot per status seen (status 0: free); the last slot counts any
    /// more statuses than the others hold, as `other`.
    statuses: [(AtomicU16, AtomicU64); 16],
}

impl MethodRow {
    fn record(&self, took: Duration, status: u16) {
        let secs = took.as_secs_f64();
        let bucket = REQUEST_BUCKETS.partition_point(|b| *b < secs);
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.nanos
            .fetch_add(took.as_nanos() as u64, Ordering::Relaxed);
        let last = self.statuses.len() - 1;
        for (i, (code, count)) in self.statuses.iter().enumerate() {
            let seen = code.load(Ordering::Relaxed);
            let mine = i == last
                || seen == status
                || (seen == 0
                    && match code.compare_exchange(0, status, Ordering::Relaxed, Ordering::Relaxed)
                    {
                        Ok(_) => true,
                        Err(now) => now == status,
                    });
            if mine {
                count.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
    }
}

/// The request series in Prometheus's text format.
fn render_requests(out: &mut String) {
    use std::fmt::Write;
    let rows: Vec<(&RouteRow, &'static str, &MethodRow)> = ROUTES
        .rows()
        .flat_map(|r| {
            r.methods
                .iter()
                .enumerate()
                .filter_map(move |(m, row)| row.get().map(|row| (r, METHODS[m], row)))
        })
        .collect();
    let label = |route: &str| route.replace('\\', "\\\\").replace('"', "\\\"");
    let _ = writeln!(
        out,
        "# HELP {REQUESTS} Requests answered, by route template, method and status.\n# TYPE {REQUESTS} counter"
    );
    for (r, method, row) in &rows {
        let route = label(&r.route);
        let last = row.statuses.len() - 1;
        for (i, (code, count)) in row.statuses.iter().enumerate() {
            let (code, count) = (code.load(Ordering::Relaxed), count.load(Ordering::Relaxed));
            let code = match (i == last, code) {
                (true, _) if count > 0 => "other".to_string(),
                (false, c) if c != 0 => c.to_string(),
                _ => continue,
            };
            let _ = writeln!(
                out,
                "{REQUESTS}{{route=\"{route}\",method=\"{method}\",status=\"{code}\"}} {count}"
            );
        }
    }
    let _ = writeln!(
        out,
        "# HELP {REQUEST_SECONDS} Time to answer a request.\n# TYPE {REQUEST_SECONDS} histogram"
    );
    for (r, method, row) in &rows {
        let route = label(&r.route);
        let mut total = 0;
        for (i, n) in row.buckets.iter().enumerate() {
            total += n.load(Ordering::Relaxed);
            let le = match REQUEST_BUCKETS.get(i) {
                Some(b) => b.to_string(),
                None => "+Inf".to_string(),
            };
            let _ = writeln!(
                out,
                "{REQUEST_SECONDS}_bucket{{route=\"{route}\",method=\"{method}\",le=\"{le}\"}} {total}"
            );
        }
        let sum = row.nanos.load(Ordering::Relaxed) as f64 / 1e9;
        let _ = writeln!(
            out,
            "{REQUEST_SECONDS}_sum{{route=\"{route}\",method=\"{method}\"}} {sum}\n{REQUEST_SECONDS}_count{{route=\"{route}\",method=\"{method}\"}} {total}"
        );
    }
    let _ = writeln!(
        out,
        "# HELP {IN_FLIGHT} Requests being served.\n# TYPE {IN_FLIGHT} gauge\n{IN_FLIGHT} {}",
        IN_FLIGHT_NOW.load(Ordering::Relaxed)
    );
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

pub fn read_cache(op: &'static str, hit: bool) {
    static READS: Handles<(&str, bool), Counter> = Handles::new();
    READS
        .get(
            (op, hit),
            || counter!(READ_CACHE, "op" => op, "result" => if hit { "hit" } else { "miss" }),
        )
        .increment(1);
}

pub fn peer_pin(confirmed: bool) {
    let outcome = if confirmed { "ok" } else { "failed" };
    counter!(PEER_PINS, "outcome" => outcome).increment(1);
}

pub fn peer_revoked() {
    counter!(PEER_REVOCATIONS).increment(1);
}

pub fn newer_record() {
    counter!(NEWER_RECORDS).increment(1);
}

pub fn dropped(kept: bool) {
    counter!(DROPS, "how" => if kept { "kept" } else { "deleted" }).increment(1);
}

pub fn purged(why: &'static str) {
    counter!(PURGES, "why" => why).increment(1);
}

pub fn dropped_held(tables: usize, bytes: u64) {
    gauge!(DROPPED_TABLES).set(tables as f64);
    gauge!(DROPPED_BYTES).set(bytes as f64);
}

pub fn sweep(ok: bool) {
    counter!(SWEEPS, "outcome" => if ok { "ok" } else { "error" }).increment(1);
}

pub fn maintenance_swept(tables: usize) {
    counter!(SWEPT_TABLES).increment(tables as u64);
}

pub fn maintenance_look(quiet: bool) {
    counter!(MAINTENANCE_LOOKS, "kind" => if quiet { "quiet" } else { "full" }).increment(1);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_counts_by_bucket_and_status_and_renders_as_prometheus_reads_it() {
        let row = MethodRow::default();
        row.record(Duration::from_micros(300), 200);
        row.record(Duration::from_micros(500), 200);
        row.record(Duration::from_millis(40), 404);
        row.record(Duration::from_secs(60), 503);
        // Bucket bounds are inclusive (`le`); past the last one is +Inf.
        let counts: Vec<u64> = row
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        assert_eq!(counts[0], 2);
        assert_eq!(counts[REQUEST_BUCKETS.partition_point(|b| *b < 0.04)], 1);
        assert_eq!(counts[REQUEST_BUCKETS.len()], 1);
        // More statuses than slots: the rest are counted as `other`, none lost.
        for code in 1000..1020 {
            row.record(Duration::from_millis(1), code);
        }
        let total: u64 = row
            .statuses
            .iter()
            .map(|(_, n)| n.load(Ordering::Relaxed))
            .sum();
        assert_eq!(total, 24);
        let route = ROUTES.row("/test/{id}");
        assert!(std::ptr::eq(route, ROUTES.row("/test/{id}")));
        route.method(1).record(Duration::from_millis(2), 201);
        let mut text = String::new();
        render_requests(&mut text);
        assert!(text.contains(
            "lance_gateway_requests_total{route=\"/test/{id}\",method=\"POST\",status=\"201\"} 1"
        ));
        assert!(text.contains(
            "lance_gateway_request_duration_seconds_bucket{route=\"/test/{id}\",method=\"POST\",le=\"+Inf\"} 1"
        ));
        assert!(text.contains("lance_gateway_requests_in_flight 0"));
    }
}
