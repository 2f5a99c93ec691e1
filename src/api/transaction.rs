//! Work that may outlive its request, and the transaction routes (spec §2.8).
//!
//! `supervised` runs a piece of data work a client asked for (an index build) as a job
//! (`jobs`): the request waits for it up to `DataLimits::build_wait` and answers its
//! outcome, or, if it is still running by then, answers its transaction id and lets it go
//! on. DescribeTransaction and AlterTransaction read and change the records of every job,
//! the gateway's own maintenance runs among them (`catalog::transactions`).

use std::future::Future;

use axum::Json;
use axum::extract::State;
use lance_namespace::models::{
    AlterTransactionRequest, AlterTransactionResponse, DescribeTransactionRequest,
    DescribeTransactionResponse,
};
use tokio::task::JoinHandle;

use super::AppState;
use super::extract::{JsonBody, TransactionId};
use crate::access::Ctx;
use crate::catalog::transactions::{TransactionRecord, TxAction, TxStatus};
use crate::error::{Error, Result};
use crate::fields;
use crate::jobs::{self, Figures, Spec};

fields!(DescribeTransactionRequest, "DescribeTransaction", served: []);
fields!(AlterTransactionRequest, "AlterTransaction", served: ["actions"]);

/// Runs `work` (which starts it on the data runtime) as a job (`jobs`) doing `op` on
/// `table`, making `target`, its record starting with the figures `before`; answers its transaction id once it succeeded or once the
/// request has waited `build_wait`, and its error if it failed within that time.
pub(crate) async fn supervised<W>(
    state: &AppState,
    table: &[String],
    (op, target): (&str, &str),
    before: Figures,
    work: W,
) -> Result<String>
where
    W: FnOnce(&str) -> JoinHandle<Result<Figures>>,
{
    let spec = Spec {
        op,
        table,
        target,
        before,
    };
    let running = jobs::start(&state.catalog, spec, None, work).await?;
    let id = running.id.clone();
    match running.wait_at_most(state.data_limits.build_wait).await {
        Some(Ok(_)) => Ok(id),
        Some(Err(e)) => Err(e),
        // Still running: the client follows it with DescribeTransaction.
        None => Ok(id),
    }
}

fn answer(record: TransactionRecord) -> (String, std::collections::HashMap<String, String>) {
    let mut properties: std::collections::HashMap<String, String> =
        record.properties.into_iter().collect();
    // What the record knows beyond the status, under names that cannot clash with a
    // caller's own (they are refused as property keys below).
    properties.insert("lance_gateway.operation".into(), record.op);
    properties.insert("lance_gateway.target".into(), record.target);
    properties.insert(
        "lance_gateway.table".into(),
        crate::catalog::names::join(&record.table, crate::catalog::names::DEFAULT_DELIMITER),
    );
    properties.insert("lance_gateway.node".into(), record.node);
    properties.insert(
        "lance_gateway.updated_at_ms".into(),
        record.updated_at_ms.to_string(),
    );
    for (key, value) in record.results {
        properties.insert(format!("lance_gateway.{key}"), value);
    }
    properties.insert(
        "lance_gateway.started_at_ms".into(),
        record.started_at_ms.to_string(),
    );
    if record.cancel_requested {
        properties.insert("lance_gateway.cancel_requested".into(), "true".into());
    }
    if let Some(error) = record.error {
        properties.insert("lance_gateway.error".into(), error);
    }
    (record.status.name().to_string(), properties)
}

/// Settles a record whose gateway stopped, by looking at what the work would have made.
async fn current<F, Fut>(
    state: &AppState,
    ctx: &Ctx,
    id: &str,
    committed: F,
) -> Result<TransactionRecord>
where
    F: FnOnce(TransactionRecord) -> Fut,
    Fut: Future<Output = Result<bool>>,
{
    let record = state.catalog.describe_transaction(ctx, id).await?;
    if !state.catalog.abandoned(&record) {
        return Ok(record);
    }
    if let Some(adopted) = adopt_build(state, &record).await? {
        return Ok(adopted);
    }
    let (status, error) = if committed(record).await? {
        (TxStatus::Succeeded, None)
    } else {
        (
            TxStatus::Failed,
            Some("the gateway running it stopped before it committed".to_string()),
        )
    };
    state
        .catalog
        .settle_transaction(ctx, id, status, error)
        .await
}

/// An index build left running on the Ray cluster by a gateway that stopped, adopted by
/// this one when it has the cluster: it takes over the record and follows the job to its
/// end (as maintenance adopts its jobs through their lease), so the build is neither
/// stopped nor run again. The record as adopted; `None` when it is not such a build, or
/// another gateway took it first.
async fn adopt_build(
    state: &AppState,
    record: &TransactionRecord,
) -> Result<Option<TransactionRecord>> {
    let Some(ray) = state.ray.clone() else {
        return Ok(None);
    };
    if record.op != "create_index"
        || record.results.get("executor").map(String::as_str) != Some("ray")
    {
        return Ok(None);
    }
    let Some(tx) = state.catalog.adopt_transaction(&record.id).await? else {
        return Ok(None);
    };
    tracing::info!(transaction = %record.id, table = ?record.table, "adopting an index build running on Ray");
    let adopted = tx.record.clone();
    let job = crate::ray::job_id(&record.id);
    let work = state.data.runtime().start(async move {
        let result = ray.follow(&job).await?;
        Ok(crate::ray::figures(&job, &result))
    });
    // Followed to its end in the background: the record says how it ended.
    drop(jobs::follow(&state.catalog, tx, None, work));
    Ok(Some(adopted))
}

/// The transaction a body names must be the path's (the Lance client writes it as an id
/// list joined with the delimiter).
fn same_transaction(path: &str, body: Option<&Vec<String>>) -> Result<()> {
    match body {
        Some(parts) if !parts.is_empty() && parts.join("$") != path && parts.concat() != path => {
            Err(Error::invalid(format!(
                "the body names transaction {parts:?} but the path names '{path}'"
            )))
        }
        _ => Ok(()),
    }
}

pub async fn describe(
    State(state): State<AppState>,
    ctx: Ctx,
    TransactionId(id): TransactionId,
    JsonBody(req): JsonBody<DescribeTransactionRequest>,
) -> Result<Json<DescribeTransactionResponse>> {
    same_transaction(&id, req.id.as_ref())?;
    let record = current(&state, &ctx, &id, |r| async {
        if r.op == crate::catalog::batch::BATCH_OP {
            // A batch commits by its record's own write: one still running did not.
            Ok(false)
        } else if r.op == "create_index" {
            super::data::indices::index_committed(&state, &ctx, r).await
        } else {
            crate::maintain::committed(&state.catalog, &state.data, state.ray.as_ref(), r).await
        }
    })
    .await?;
    let (status, properties) = answer(record);
    Ok(Json(DescribeTransactionResponse {
        status,
        properties: Some(properties),
        ..Default::default()
    }))
}

pub async fn alter(
    State(state): State<AppState>,
    ctx: Ctx,
    TransactionId(id): TransactionId,
    JsonBody(req): JsonBody<AlterTransactionRequest>,
) -> Result<Json<AlterTransactionResponse>> {
    same_transaction(&id, req.id.as_ref())?;
    let mut actions = Vec::new();
    for action in req.actions {
        let key_of = |key: Option<String>| {
            let key = key
                .filter(|k| !k.is_empty())
                .ok_or_else(|| Error::invalid("a property action needs a key"))?;
            if key.starts_with("lance_gateway.") {
                return Err(Error::invalid(format!(
                    "property '{key}' is the gateway's own"
                )));
            }
            Ok(key)
        };
        actions.push(
            match (
                action.set_status_action,
                action.set_property_action,
                action.unset_property_action,
            ) {
                (Some(set), None, None) => TxAction::SetStatus(
                    set.status
                        .ok_or_else(|| Error::invalid("setStatusAction needs a status"))?,
                ),
                (None, Some(set), None) => TxAction::SetProperty {
                    key: key_of(set.key)?,
                    value: set
                        .value
                        .ok_or_else(|| Error::invalid("setPropertyAction needs a value"))?,
                    mode: set.mode.unwrap_or_default(),
                },
                (None, None, Some(unset)) => TxAction::UnsetProperty {
                    key: key_of(unset.key)?,
                    mode: unset.mode.unwrap_or_default(),
                },
                _ => {
                    return Err(Error::invalid(
                        "each action must be exactly one of setStatusAction, setPropertyAction, unsetPropertyAction",
                    ));
                }
            },
        );
    }
    let record = state.catalog.alter_transaction(&ctx, &id, &actions).await?;
    let (status, properties) = answer(record);
    Ok(Json(AlterTransactionResponse {
        status,
        properties: Some(properties),
        ..Default::default()
    }))
}

/// `GET /v1/table/{id}/transaction/list[?limit=N]` (a lance-gateway route, for the console):
/// the table's transactions still on record (a day after they end), newest first, each as
/// DescribeTransaction answers it.
pub async fn list_for_table(
    State(state): State<AppState>,
    ctx: Ctx,
    target: super::extract::Target,
    uri: axum::http::Uri,
) -> Result<Json<serde_json::Value>> {
    if target.id.is_empty() {
        return Err(Error::invalid("the route needs a table id"));
    }
    let limit = match uri.query().and_then(|q| {
        form_urlencoded::parse(q.as_bytes())
            .find(|(k, _)| k == "limit")
            .map(|(_, v)| v.into_owned())
    }) {
        None => 50,
        Some(v) => match v.parse::<usize>() {
            Ok(n @ 1..=1000) => n,
            _ => {
                return Err(Error::invalid(format!(
                    "limit must be 1 to 1000, not '{v}'"
                )));
            }
        },
    };
    // The table must exist and be the caller's to read.
    state.catalog.describe_table(&ctx, &target.id).await?;
    let records = state
        .catalog
        .table_transactions(&ctx, &target.id, limit)
        .await?;
    let transactions: Vec<serde_json::Value> = records
        .into_iter()
        .map(|record| {
            let id = record.id.clone();
            let (status, properties) = answer(record);
            serde_json::json!({ "id": id, "status": status, "properties": properties })
        })
        .collect();
    Ok(Json(serde_json::json!({ "transactions": transactions })))
}
