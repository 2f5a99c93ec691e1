//! The managed-versioning routes (spec §2.3): CreateTableVersion and
//! BatchDeleteTableVersions. The rules are in `catalog::versions`; ListTableVersions and
//! DescribeTableVersion read the dataset and live with the data routes.

use axum::Json;
use axum::extract::State;
use lance_namespace::models::{
    BatchDeleteTableVersionsRequest, BatchDeleteTableVersionsResponse, CreateTableVersionRequest,
    CreateTableVersionResponse, TableVersion,
};

use super::extract::{JsonBody, Target};
use super::{AppState, detached};
use crate::access::Ctx;
use crate::catalog::versions::NewVersion;
use crate::error::Result;
use crate::fields;

fields!(CreateTableVersionRequest, "CreateTableVersion", served: [
    "version", "branch", "manifest_path", "manifest_size", "e_tag", "naming_scheme",
], refused: [
    ("metadata", "version metadata is not kept by lance-gateway: the manifest is the version's whole record"),
]);
fields!(BatchDeleteTableVersionsRequest, "BatchDeleteTableVersions", served: ["branch", "ranges"]);

pub async fn create(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    JsonBody(req): JsonBody<CreateTableVersionRequest>,
) -> Result<Json<CreateTableVersionResponse>> {
    target.check_body_id(req.id.as_ref())?;
    let new = NewVersion {
        version: req.version,
        manifest_path: req.manifest_path,
        manifest_size: req.manifest_size,
        e_tag: req.e_tag,
        naming_scheme: req.naming_scheme,
        branch: req.branch,
    };
    let catalog = state.catalog.clone();
    // Run to its end: a publish cut off before the staging manifest is removed leaves
    // only garbage, but the client must not be left guessing longer than needed.
    let committed =
        detached(async move { catalog.create_table_version(&ctx, &target.id, new).await }).await?;
    Ok(Json(CreateTableVersionResponse {
        version: Some(Box::new(TableVersion {
            version: committed.version as i64,
            manifest_path: committed.manifest_path,
            manifest_size: Some(committed.size as i64),
            e_tag: committed.e_tag,
            ..Default::default()
        })),
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
