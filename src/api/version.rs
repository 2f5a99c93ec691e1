//! The managed-versioning routes (spec §2.3): CreateTableVersion, BatchDeleteTableVersions,
//! and the batch commits (BatchCreateTableVersions, BatchCommitTables). The rules are in
//! `catalog::versions`, `catalog::log` and `catalog::batch`; ListTableVersions and
//! DescribeTableVersion read the dataset (after the log) and live with the data routes.

use axum::Json;
use axum::extract::State;
use lance_namespace::models::{
    BatchCommitTablesRequest, BatchCommitTablesResponse, BatchCreateTableVersionsRequest,
    BatchCreateTableVersionsResponse, BatchDeleteTableVersionsRequest,
    BatchDeleteTableVersionsResponse, CommitTableResult, CreateTableVersionRequest,
    CreateTableVersionResponse, DeclareTableResponse, DeregisterTableResponse, TableVersion,
};

use super::extract::{Idempotency, JsonBody, Target};
use super::{AppState, detached};
use crate::access::Ctx;
use crate::catalog::batch::{Change, Done};
use crate::catalog::versions::{CommittedVersion, NewVersion};
use crate::error::{Error, Result};
use crate::fields;

fields!(CreateTableVersionRequest, "CreateTableVersion", served: [
    "version", "branch", "manifest_path", "manifest_size", "e_tag", "naming_scheme",
], refused: [
    ("metadata", "version metadata is not kept by lance-gateway: the manifest is the version's whole record"),
]);
fields!(BatchDeleteTableVersionsRequest, "BatchDeleteTableVersions", served: ["branch", "ranges"]);
fields!(BatchCreateTableVersionsRequest, "BatchCreateTableVersions", served: ["entries"]);
fields!(BatchCommitTablesRequest, "BatchCommitTables", served: ["operations"]);

const NO_METADATA: &str =
    "version metadata is not kept by lance-gateway: the manifest is the version's whole record";

/// The version a request names: CreateTableVersionRequest, and the entries and operations of
/// the batches, carry the same fields.
macro_rules! new_version {
    ($m:expr) => {
        NewVersion {
            version: $m.version,
            manifest_path: $m.manifest_path,
            manifest_size: $m.manifest_size,
            e_tag: $m.e_tag,
            naming_scheme: $m.naming_scheme,
            branch: $m.branch,
        }
    };
}

/// A version as the answers carry it.
fn table_version(committed: CommittedVersion) -> TableVersion {
    TableVersion {
        version: committed.version as i64,
        manifest_path: committed.manifest_path,
        manifest_size: Some(committed.size as i64),
        e_tag: committed.e_tag,
        ..Default::default()
    }
}

/// One entry of a batch: its table id (required there) and the version it commits.
fn batch_entry(
    at: &str,
    id: Option<Vec<String>>,
    metadata: Option<&std::collections::HashMap<String, String>>,
    new: NewVersion,
) -> Result<(Vec<String>, Change)> {
    if metadata.is_some_and(|m| !m.is_empty()) {
        return Err(Error::invalid(format!(
            "{at}: metadata is refused: {NO_METADATA}"
        )));
    }
    Ok((required_id(at, id)?, Change::Version(new)))
}

/// A batch entry's table id, which the entry must name.
fn required_id(at: &str, id: Option<Vec<String>>) -> Result<Vec<String>> {
    id.filter(|id| !id.is_empty())
        .ok_or_else(|| Error::invalid(format!("{at}: id is required")))
}

pub async fn create(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    idempotency: Idempotency,
    JsonBody(req): JsonBody<CreateTableVersionRequest>,
) -> Result<Json<CreateTableVersionResponse>> {
    target.check_body_id(req.id.as_ref())?;
    // The path names the table: the same body for another table is another request.
    let key = idempotency.key("CreateTableVersion", &(&target.id, &req))?;
    let new = new_version!(req);
    let catalog = state.catalog.clone();
    // Run to its end: a publish cut off before the staging manifest is removed leaves
    // only garbage, but the client must not be left guessing longer than needed.
    let committed = detached(async move {
        catalog
            .create_table_version_keyed(&ctx, &target.id, new, key)
            .await
    })
    .await?;
    Ok(Json(CreateTableVersionResponse {
        version: Some(Box::new(table_version(committed))),
        ..Default::default()
    }))
}

/// BatchCreateTableVersions: every entry's version or none (`catalog::batch`).
pub async fn batch_create(
    State(state): State<AppState>,
    ctx: Ctx,
    idempotency: Idempotency,
    JsonBody(req): JsonBody<BatchCreateTableVersionsRequest>,
) -> Result<Json<BatchCreateTableVersionsResponse>> {
    let key = idempotency.key("BatchCreateTableVersions", &req)?;
    let entries = req
        .entries
        .into_iter()
        .enumerate()
        .map(|(i, e)| {
            let new = new_version!(e);
            batch_entry(
                &format!("entries[{i}]"),
                Some(e.id),
                e.metadata.as_ref(),
                new,
            )
        })
        .collect::<Result<Vec<_>>>()?;
    let catalog = state.catalog.clone();
    let (id, committed) =
        detached(async move { catalog.commit_batch_keyed(&ctx, entries, key).await }).await?;
    Ok(Json(BatchCreateTableVersionsResponse {
        transaction_id: Some(id),
        versions: committed
            .into_iter()
            .filter_map(|done| match done {
                Done::Version(v) => Some(table_version(v)),
                _ => None,
            })
            .collect(),
        ..Default::default()
    }))
}

/// BatchCommitTables: its operations (declare_table, create_table_version,
/// delete_table_versions, deregister_table) committed together (`catalog::batch`). A
/// declared table's answer vends storage options as DeclareTable's does.
pub async fn batch_commit(
    State(state): State<AppState>,
    ctx: Ctx,
    idempotency: Idempotency,
    JsonBody(req): JsonBody<BatchCommitTablesRequest>,
) -> Result<Json<BatchCommitTablesResponse>> {
    let key = idempotency.key("BatchCommitTables", &req)?;
    let mut entries = Vec::with_capacity(req.operations.len());
    // Each declare's vend_credentials, in order.
    let mut vend = Vec::new();
    for (i, op) in req.operations.into_iter().enumerate() {
        let at = format!("operations[{i}]");
        let kinds = [
            op.declare_table.is_some(),
            op.create_table_version.is_some(),
            op.delete_table_versions.is_some(),
            op.deregister_table.is_some(),
        ];
        if kinds.iter().filter(|k| **k).count() != 1 {
            return Err(Error::invalid(format!(
                "{at}: name exactly one of declare_table, create_table_version, \
                 delete_table_versions and deregister_table"
            )));
        }
        if let Some(v) = op.create_table_version.map(|v| *v) {
            let new = new_version!(v);
            entries.push(batch_entry(&at, v.id, v.metadata.as_ref(), new)?);
        } else if let Some(d) = op.delete_table_versions.map(|d| *d) {
            let ranges = d
                .ranges
                .iter()
                .map(|r| (r.start_version, r.end_version))
                .collect();
            let change = Change::DeleteVersions {
                branch: d.branch,
                ranges,
            };
            entries.push((required_id(&at, d.id)?, change));
        } else if let Some(d) = op.declare_table.map(|d| *d) {
            vend.push(d.vend_credentials.unwrap_or(true));
            let change = Change::Declare {
                location: d.location.filter(|l| !l.is_empty()),
                properties: d.properties.unwrap_or_default(),
            };
            entries.push((required_id(&at, d.id)?, change));
        } else if let Some(d) = op.deregister_table.map(|d| *d) {
            entries.push((required_id(&at, d.id)?, Change::Deregister));
        }
    }
    let (catalog, change_ctx) = (state.catalog.clone(), ctx.clone());
    let (id, done) =
        detached(async move { catalog.commit_batch_keyed(&change_ctx, entries, key).await })
            .await?;
    let mut vend = vend.into_iter();
    let mut results = Vec::with_capacity(done.len());
    for done in done {
        results.push(match done {
            Done::Declared(record) => {
                let level = state.catalog.access(&ctx, &record.id);
                let vend = vend.next().unwrap_or(true);
                // The batch has committed: a vending failure now leaves the options out
                // rather than hide the commit behind an error.
                let storage_options = match state.vendor.options(&ctx, &record, level, vend).await
                {
                    Ok(options) => Some(options),
                    Err(e) => {
                        tracing::warn!(table = ?record.id, error = %e, "a table declared in a committed batch is answered without storage options");
                        None
                    }
                };
                CommitTableResult {
                    declare_table: Some(Box::new(DeclareTableResponse {
                        location: Some(record.location),
                        storage_options,
                        properties: Some(record.properties),
                        managed_versioning: Some(state.catalog.managed_versioning()),
                        ..Default::default()
                    })),
                    ..Default::default()
                }
            }
            Done::Deregistered(record) => CommitTableResult {
                deregister_table: Some(Box::new(DeregisterTableResponse {
                    id: Some(record.id),
                    location: Some(record.location),
                    properties: Some(record.properties),
                    ..Default::default()
                })),
                ..Default::default()
            },
            Done::Version(v) => CommitTableResult {
                create_table_version: Some(Box::new(CreateTableVersionResponse {
                    version: Some(Box::new(table_version(v))),
                    ..Default::default()
                })),
                ..Default::default()
            },
            Done::Deleted(count) => CommitTableResult {
                delete_table_versions: Some(Box::new(BatchDeleteTableVersionsResponse {
                    deleted_count: Some(count as i64),
                    ..Default::default()
                })),
                ..Default::default()
            },
        });
    }
    Ok(Json(BatchCommitTablesResponse {
        transaction_id: Some(id),
        results,
        ..Default::default()
    }))
}

pub async fn delete(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    JsonBody(req): JsonBody<BatchDeleteTableVersionsRequest>,
) -> Result<Json<BatchDeleteTableVersionsResponse>> {
    target.check_body_id(req.id.as_ref())?;
    let ranges: Vec<(i64, i64)> = req
        .ranges
        .iter()
        .map(|r| (r.start_version, r.end_version))
        .collect();
    let deleted = state
        .catalog
        .delete_table_versions(&ctx, &target.id, req.branch.as_deref(), &ranges)
        .await?;
    Ok(Json(BatchDeleteTableVersionsResponse {
        deleted_count: Some(deleted as i64),
        ..Default::default()
    }))
}
