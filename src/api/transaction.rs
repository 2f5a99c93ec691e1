//! Work that may outlive its request, and the transaction routes (spec §2.8).
//!
//! `supervised` runs a piece of data work (an index build) under a transaction record: the
//! request waits for it up to `DataLimits::build_wait` and answers its outcome, or, if it is
//! still running by then, answers its transaction id and lets it go on. Either way the work
//! is refreshed in its record while it runs, stopped when AlterTransaction asks, and its
//! outcome written when it ends. DescribeTransaction and AlterTransaction read and change
//! those records (`catalog::transactions`).

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
use crate::catalog::Catalog;
use crate::catalog::transactions::{Transaction, TransactionRecord, TxAction, TxStatus};
use crate::error::{Code, Error, Result};
use crate::fields;

fields!(DescribeTransactionRequest, "DescribeTransaction", served: []);
fields!(AlterTransactionRequest, "AlterTransaction", served: ["actions"]);

/// How supervised work ended.
enum Ended {
    Done,
    /// Stopped by AlterTransaction before it committed.
    Canceled,
    Failed(Error),
}

impl Ended {
    fn of(joined: std::result::Result<Result<()>, tokio::task::JoinError>) -> Self {
        match joined {
            Ok(Ok(())) => Ended::Done,
            Ok(Err(e)) => Ended::Failed(e),
            Err(e) if e.is_cancelled() => Ended::Canceled,
            Err(e) => Ended::Failed(Error::internal("a data operation failed", e)),
        }
    }

    fn into_result(self) -> Result<()> {
        match self {
            Ended::Done => Ok(()),
            Ended::Canceled => Err(Error::new(
                Code::ConcurrentModification,
                "the work was canceled (AlterTransaction) before it committed",
            )),
            Ended::Failed(e) => Err(e),
        }
    }
}

/// Runs `work` (already started on the data runtime) as transaction `op` of `table`,
/// making `target`; answers its transaction id once it succeeded or once the request has
/// waited `build_wait`, and its error if it failed within that time.
pub(crate) async fn supervised(
    state: &AppState,
    table: &[String],
    (op, target): (&str, &str),
    work: JoinHandle<Result<()>>,
) -> Result<String> {
    let mut tx = match state.catalog.begin_transaction(table, op, target).await {
        Ok(tx) => tx,
        Err(e) => {
            work.abort();
            return Err(e);
        }
    };
    let id = tx.record.id.clone();
    let (done, outcome) = tokio::sync::oneshot::channel();
    let catalog = state.catalog.clone();
    tokio::spawn(async move {
        let result = watch(&catalog, &mut tx, work).await;
        let _ = done.send(result);
    });
    match tokio::time::timeout(state.data_limits.build_wait, outcome).await {
        Ok(Ok(Ok(()))) => Ok(id),
        Ok(Ok(Err(e))) => Err(e),
        Ok(Err(gone)) => Err(Error::internal("a supervised operation was lost", gone)),
        // Still running: the client follows it with DescribeTransaction.
        Err(_) => Ok(id),
    }
}

/// Refreshes the record while `work` runs, stops it when a cancel is asked for, and writes
/// the outcome.
async fn watch(
    catalog: &Catalog,
    tx: &mut Transaction,
    mut work: JoinHandle<Result<()>>,
) -> Result<()> {
    let mut beat = tokio::time::interval(catalog.heartbeat());
    beat.tick().await;
    // Work that committed before an abort reached it ends as done: the outcome is always
    // what happened. The refreshes go on until it has ended (an abort lands only at the
    // work's next await, which a long computation may take a while to reach).
    let ended = loop {
        tokio::select! {
            joined = &mut work => break Ended::of(joined),
            _ = beat.tick() => match catalog.refresh_transaction(tx).await {
                Ok(true) => work.abort(),
                Ok(false) => {}
                Err(e) => tracing::warn!(transaction = %tx.record.id, error = %e, "could not refresh a transaction"),
            },
        }
    };
    let (status, error) = match &ended {
        Ended::Done => (TxStatus::Succeeded, None),
        Ended::Canceled => (TxStatus::Canceled, None),
        Ended::Failed(e) => (TxStatus::Failed, Some(e.message.clone())),
    };
    if let Err(e) = catalog.finish_transaction(tx, status, error).await {
        tracing::warn!(transaction = %tx.record.id, error = %e, "could not record a transaction's outcome");
    }
    ended.into_result()
}

fn answer(record: TransactionRecord) -> (String, std::collections::HashMap<String, String>) {
    let mut properties: std::collections::HashMap<String, String> =
        record.properties.into_iter().collect();
    // What the record knows beyond the status, under names that cannot clash with a
    // caller's own (they are refused as property keys below).
    properties.insert("lance_gateway.operation".into(), record.op);
    properties.insert("lance_gateway.target".into(), record.target);
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
    let record = current(&state, &ctx, &id, |r| {
        super::data::indices::index_committed(&state, &ctx, r)
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
