//! Reads: QueryTable, CountTableRows, ExplainTableQueryPlan, AnalyzeTableQueryPlan and
//! GetTableStats. A table that holds no data yet answers no rows, zero stats and an empty
//! plan.

use std::sync::Arc;

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use lance_namespace::models::GetTableStatsResponse;
use serde::Deserialize;

use super::{arrow_file, has_rows, on_data, or_empty, table, with_dataset};
use crate::access::{Ctx, Level};
use crate::api::AppState;
use crate::api::extract::{JsonBody, Target};
use crate::data::read::Query;
use crate::data::{At, ipc, read};
use crate::error::{Error, Result};
use crate::fields;

fields!(Query, "QueryTable", served: [
    "branch", "bypass_vector_index", "columns", "distance_type", "ef", "fast_search",
    "filter", "full_text_query", "k", "lower_bound", "maximum_nprobes", "minimum_nprobes",
    "nprobes", "offset", "prefilter", "refine_factor", "upper_bound", "vector",
    "vector_column", "version", "with_row_id",
    // LanceDB's remote client.
    "order_by",
], refused: [
    ("approx_mode", "only RQ-quantized indices (IVF_RQ) read it, and lance-gateway does not build them"),
    ("use_lsm", "lance-gateway tables have no MemWAL (LSM) to read"),
]);

/// The plan a table with no data yet has.
const EMPTY_PLAN: &str = "EmptyExec: the table holds no data yet";

pub async fn query(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    headers: axum::http::HeaderMap,
    JsonBody(req): JsonBody<Query>,
) -> Result<Response> {
    let json = wants_json(&headers);
    target.check_body_id(req.id.as_ref())?;
    read::check(&req)?;
    let record = table(&state, &ctx, &target, Level::Read, "querying").await?;
    let at = At::of(req.version, req.branch.as_deref())?;
    let limits = state.data_limits.results();
    let answer = with_dataset(&state, &record, at, move |dataset| async move {
        read::query(Arc::new(dataset), &req, limits).await
    })
    .await;
    let answer = or_empty(answer, || {
        // No rows, and no columns to describe them.
        read::Answer::Whole(ipc::encode_file(&ipc::empty_schema(), &[]).unwrap_or_default())
    })?;
    match answer {
        read::Answer::Whole(bytes) if json => Ok(Json(json_rows(&bytes)?).into_response()),
        read::Answer::Whole(bytes) => Ok(arrow_file(bytes.into())),
        read::Answer::Streaming(_) if json => Err(Error::invalid(
            "the answer is too large to send as JSON (over 8 MiB as Arrow): ask for fewer rows \
             or columns, or for Arrow",
        )),
        read::Answer::Streaming(rest) => {
            // The rest is read and written on the data runtime while the body goes out.
            let (tx, rx) = tokio::sync::mpsc::channel(4);
            state.data.runtime().spawn(rest.send(tx));
            let chunks = futures::stream::unfold(rx, |mut rx| async move {
                rx.recv().await.map(|chunk| (chunk, rx))
            });
            Ok(arrow_file(Body::from_stream(chunks)))
        }
    }
}

/// Whether the caller asked for the rows as JSON (`Accept: application/json`, as the
/// console does) rather than Arrow, the spec's answer.
fn wants_json(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get_all(axum::http::header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.split(';').next().map(str::trim) == Some("application/json"))
}

/// An Arrow IPC file's rows as JSON (`data::json`).
fn json_rows(file: &[u8]) -> Result<serde_json::Value> {
    let reader = arrow_ipc::reader::FileReader::try_new(std::io::Cursor::new(file), None)
        .map_err(|e| Error::internal("could not read the answer back", e))?;
    let schema = reader.schema();
    let batches = reader
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| Error::internal("could not read the answer back", e))?;
    Ok(crate::data::json::rows(&schema, &batches))
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct CountBody {
    id: Option<Vec<String>>,
    version: Option<i64>,
    branch: Option<String>,
    predicate: Option<String>,
    /// LanceDB's remote client's name for the predicate.
    filter: Option<String>,
}
fields!(CountBody, "CountTableRows", served: ["version", "branch", "predicate", "filter"]);

pub async fn count_rows(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    JsonBody(req): JsonBody<CountBody>,
) -> Result<Json<i64>> {
    target.check_body_id(req.id.as_ref())?;
    let record = table(&state, &ctx, &target, Level::Read, "counting").await?;
    let at = At::of(req.version, req.branch.as_deref())?;
    let predicate = req.predicate.or(req.filter);
    let n = with_dataset(&state, &record, at, move |dataset| async move {
        read::count_rows(&dataset, predicate.as_deref()).await
    })
    .await;
    // A table with no data yet has no rows.
    Ok(Json(or_empty(n, || 0)? as i64))
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct ExplainBody {
    id: Option<Vec<String>>,
    query: Query,
    verbose: Option<bool>,
    branch: Option<String>,
}
fields!(ExplainBody, "ExplainTableQueryPlan", served: ["query", "verbose", "branch"]);

pub async fn explain_plan(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    JsonBody(req): JsonBody<ExplainBody>,
) -> Result<Json<String>> {
    target.check_body_id(req.id.as_ref())?;
    let branch = req.branch.clone().or(req.query.branch.clone());
    plan(
        (state, ctx, target),
        req.query,
        branch,
        req.verbose.unwrap_or(false),
        false,
    )
    .await
}

/// AnalyzeTableQueryPlanRequest is the query's own fields.
#[derive(Deserialize, Default)]
#[serde(transparent)]
pub struct AnalyzeBody(Query);
fields!(AnalyzeBody, "AnalyzeTableQueryPlan", served: [
    "branch", "bypass_vector_index", "columns", "distance_type", "ef", "fast_search",
    "filter", "full_text_query", "k", "lower_bound", "maximum_nprobes", "minimum_nprobes",
    "nprobes", "offset", "prefilter", "refine_factor", "upper_bound", "vector",
    "vector_column", "version", "with_row_id", "order_by",
], refused: [
    ("approx_mode", "only RQ-quantized indices (IVF_RQ) read it, and lance-gateway does not build them"),
    ("use_lsm", "lance-gateway tables have no MemWAL (LSM) to read"),
]);

pub async fn analyze_plan(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    JsonBody(AnalyzeBody(req)): JsonBody<AnalyzeBody>,
) -> Result<Json<String>> {
    target.check_body_id(req.id.as_ref())?;
    let branch = req.branch.clone();
    plan((state, ctx, target), req, branch, false, true).await
}

async fn plan(
    (state, ctx, target): (AppState, Ctx, Target),
    query: Query,
    branch: Option<String>,
    verbose: bool,
    analyze: bool,
) -> Result<Json<String>> {
    read::check(&query)?;
    let record = table(&state, &ctx, &target, Level::Read, "planning").await?;
    let at = At::of(query.version, branch.as_deref())?;
    let limits = state.data_limits.results();
    let text = with_dataset(&state, &record, at, move |dataset| async move {
        read::plan(Arc::new(dataset), &query, limits, verbose, analyze).await
    })
    .await;
    Ok(Json(or_empty(text, || EMPTY_PLAN.to_string())?))
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct StatsBody {
    id: Option<Vec<String>>,
    branch: Option<String>,
    version: Option<i64>,
}
fields!(StatsBody, "GetTableStats", served: ["branch", "version"]);

pub async fn stats(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    JsonBody(req): JsonBody<StatsBody>,
) -> Result<Json<GetTableStatsResponse>> {
    target.check_body_id(req.id.as_ref())?;
    let record = table(&state, &ctx, &target, Level::Read, "reading stats").await?;
    let at = At::of(req.version, req.branch.as_deref())?;
    if !has_rows(&state, &record).await? {
        if at.version.is_some() {
            return Err(super::absent::version(req.version));
        }
        if let Some(branch) = &at.branch {
            return Err(super::absent::branch(branch));
        }
        return Ok(Json(read::empty_stats()));
    }
    let location = crate::data::TableData::of(&record);
    let stats = on_data(&state, move |datasets| async move {
        let dataset = datasets.open(&location, &at).await?;
        read::stats(Arc::new(dataset)).await
    })
    .await?;
    Ok(Json(stats))
}
