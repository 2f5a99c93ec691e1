//! Schema changes: AlterTableAddColumns, AlterTableAlterColumns, AlterTableDropColumns,
//! UpdateFieldMetadata and UpdateTableSchemaMetadata. Each is one Lance commit; a table
//! that holds no data yet has no columns to change.

use std::collections::HashMap;

use axum::Json;
use axum::extract::State;
use lance_namespace::models::{
    AlterTableAddColumnsResponse, AlterTableAlterColumnsResponse, AlterTableDropColumnsResponse,
    UpdateFieldMetadataResponse,
};
use serde::Deserialize;

use super::{absent, committing};
use crate::access::{Ctx, Level};
use crate::api::AppState;
use crate::api::extract::{Dialect, JsonBody, QueryOf, Target};
use crate::api::fields::{Fields, Request};
use crate::data::schema;
use crate::error::Result;
use crate::fields;

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct AddColumnsBody {
    id: Option<Vec<String>>,
    new_columns: Vec<schema::NewColumn>,
    branch: Option<String>,
}
fields!(AddColumnsBody, "AlterTableAddColumns", served: ["new_columns", "branch"]);

pub async fn add_columns(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    JsonBody(req): JsonBody<AddColumnsBody>,
) -> Result<Json<AlterTableAddColumnsResponse>> {
    target.check_body_id(req.id.as_ref())?;
    let access = (Level::Write, "adding columns");
    let columns = req.new_columns;
    let version = committing(
        (&state, &ctx, &target),
        access,
        req.branch.as_deref(),
        absent::schema,
        |ds| async move { schema::add_columns(ds, &columns).await.map(|v| (v, v)) },
    )
    .await?;
    Ok(Json(AlterTableAddColumnsResponse {
        version: version as i64,
        ..Default::default()
    }))
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct AlterColumnsBody {
    id: Option<Vec<String>>,
    alterations: Vec<schema::Alteration>,
    branch: Option<String>,
}
fields!(AlterColumnsBody, "AlterTableAlterColumns", served: ["alterations", "branch"]);

pub async fn alter_columns(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    dialect: Dialect,
    JsonBody(req): JsonBody<AlterColumnsBody>,
) -> Result<Json<AlterTableAlterColumnsResponse>> {
    target.check_body_id(req.id.as_ref())?;
    let access = (Level::Admin, "altering columns");
    let alterations = req.alterations;
    let first = alterations
        .first()
        .map(|a| a.path.clone())
        .unwrap_or_default();
    // LanceDB's remote client writes types in Lance's JSON form (`{"type": "float"}`).
    let lance_types_first = dialect == Dialect::LanceDbRemote;
    let version = committing(
        (&state, &ctx, &target),
        access,
        req.branch.as_deref(),
        || absent::column(&first),
        move |ds| async move {
            schema::alter_columns(ds, &alterations, lance_types_first)
                .await
                .map(|v| (v, v))
        },
    )
    .await?;
    Ok(Json(AlterTableAlterColumnsResponse {
        version: version as i64,
        ..Default::default()
    }))
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct DropColumnsBody {
    id: Option<Vec<String>>,
    columns: Vec<String>,
    branch: Option<String>,
}
fields!(DropColumnsBody, "AlterTableDropColumns", served: ["columns", "branch"]);

pub async fn drop_columns(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    JsonBody(req): JsonBody<DropColumnsBody>,
) -> Result<Json<AlterTableDropColumnsResponse>> {
    target.check_body_id(req.id.as_ref())?;
    let access = (Level::Admin, "dropping columns");
    let columns = req.columns;
    let first = columns.first().cloned().unwrap_or_default();
    let version = committing(
        (&state, &ctx, &target),
        access,
        req.branch.as_deref(),
        || absent::column(&first),
        |ds| async move { schema::drop_columns(ds, &columns).await.map(|v| (v, v)) },
    )
    .await?;
    Ok(Json(AlterTableDropColumnsResponse {
        version: version as i64,
        ..Default::default()
    }))
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct FieldMetadataBody {
    id: Option<Vec<String>>,
    updates: Vec<schema::FieldMetadata>,
    branch: Option<String>,
}
fields!(FieldMetadataBody, "UpdateFieldMetadata", served: ["updates", "branch"]);

pub async fn update_field_metadata(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    JsonBody(req): JsonBody<FieldMetadataBody>,
) -> Result<Json<UpdateFieldMetadataResponse>> {
    target.check_body_id(req.id.as_ref())?;
    let access = (Level::Write, "updating field metadata");
    let updates = req.updates;
    let first = updates.first().map(|u| u.path.clone()).unwrap_or_default();
    let (version, fields) = committing(
        (&state, &ctx, &target),
        access,
        req.branch.as_deref(),
        || absent::column(&first),
        |ds| async move {
            schema::update_field_metadata(ds, &updates)
                .await
                .map(|(v, f)| (v, (v, f)))
        },
    )
    .await?;
    Ok(Json(UpdateFieldMetadataResponse {
        version: version as i64,
        fields: Some(fields),
        ..Default::default()
    }))
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct SchemaMetadataQuery {
    branch: Option<String>,
}
fields!(SchemaMetadataQuery, "UpdateTableSchemaMetadata", served: ["branch"]);

/// UpdateTableSchemaMetadata's body is the bare map of metadata: every key is data.
#[derive(Deserialize, Default)]
#[serde(transparent)]
pub struct SchemaMetadata(HashMap<String, String>);

impl Request for SchemaMetadata {
    const FIELDS: &'static Fields = &Fields {
        op: "UpdateTableSchemaMetadata",
        served: &[],
        refused: &[],
        open: true,
    };
}

pub async fn update_schema_metadata(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    QueryOf(q): QueryOf<SchemaMetadataQuery>,
    JsonBody(SchemaMetadata(metadata)): JsonBody<SchemaMetadata>,
) -> Result<Json<HashMap<String, String>>> {
    let access = (Level::Write, "updating schema metadata");
    let result = committing(
        (&state, &ctx, &target),
        access,
        q.branch.as_deref(),
        absent::schema,
        |ds| async move { schema::replace_schema_metadata(ds, metadata).await },
    )
    .await?;
    Ok(Json(result))
}
