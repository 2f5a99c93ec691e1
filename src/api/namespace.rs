//! Namespace routes: create, list, describe, drop, exists, and the tables of a namespace.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use lance_namespace::models::{
    CreateNamespaceRequest, CreateNamespaceResponse, DescribeNamespaceRequest,
    DescribeNamespaceResponse, DropNamespaceRequest, DropNamespaceResponse, ListNamespacesResponse,
    ListTablesResponse, NamespaceExistsRequest,
};
use serde::Deserialize;

use super::extract::{JsonBody, QueryOf, Target};
use super::{AppState, detached};
use crate::access::Ctx;
use crate::catalog::{CreateMode, DropBehavior, DropMode};
use crate::error::Result;
use crate::fields;

fields!(CreateNamespaceRequest, "CreateNamespace", served: ["mode", "properties"]);
fields!(DescribeNamespaceRequest, "DescribeNamespace", served: []);
fields!(DropNamespaceRequest, "DropNamespace", served: ["mode", "behavior"]);
fields!(NamespaceExistsRequest, "NamespaceExists", served: []);

#[derive(Deserialize, Default)]
pub struct PageQuery {
    pub page_token: Option<String>,
    pub limit: Option<i64>,
    pub include_declared: Option<bool>,
}
// ListNamespaces, ListTables and ListAllTables (`include_declared` is the table lists').
fields!(PageQuery, "a listing", served: ["page_token", "limit", "include_declared"]);

impl PageQuery {
    /// `limit` as a count; absent (or 0 or less, which some clients send for "no limit") = all.
    pub fn limit(&self) -> Option<usize> {
        self.limit.filter(|l| *l > 0).map(|l| l as usize)
    }

    pub fn token(&self) -> Option<&str> {
        self.page_token.as_deref().filter(|t| !t.is_empty())
    }
}

pub async fn create(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    JsonBody(req): JsonBody<CreateNamespaceRequest>,
) -> Result<Json<CreateNamespaceResponse>> {
    target.check_body_id(req.id.as_ref())?;
    let mode = CreateMode::parse(req.mode.as_deref())?;
    let (catalog, id) = (state.catalog.clone(), target.id.clone());
    let properties = req.properties.unwrap_or_default();
    let properties =
        detached(async move { catalog.create_namespace(&ctx, &id, mode, properties).await })
            .await?;
    Ok(Json(CreateNamespaceResponse {
        properties: Some(properties),
        ..Default::default()
    }))
}

pub async fn list(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    QueryOf(q): QueryOf<PageQuery>,
) -> Result<Json<ListNamespacesResponse>> {
    let listing = state
        .catalog
        .list_namespaces(&ctx, &target.id, q.token(), q.limit())
        .await?;
    Ok(Json(ListNamespacesResponse {
        namespaces: listing.items,
        page_token: listing.next,
        ..Default::default()
    }))
}

pub async fn describe(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    JsonBody(req): JsonBody<DescribeNamespaceRequest>,
) -> Result<Json<DescribeNamespaceResponse>> {
    target.check_body_id(req.id.as_ref())?;
    let properties = state.catalog.describe_namespace(&ctx, &target.id).await?;
    Ok(Json(DescribeNamespaceResponse {
        properties: Some(properties),
        ..Default::default()
    }))
}

pub async fn drop(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    JsonBody(req): JsonBody<DropNamespaceRequest>,
) -> Result<Json<DropNamespaceResponse>> {
    target.check_body_id(req.id.as_ref())?;
    let mode = DropMode::parse(req.mode.as_deref())?;
    let behavior = DropBehavior::parse(req.behavior.as_deref())?;
    let (catalog, id) = (state.catalog.clone(), target.id.clone());
    detached(async move { catalog.drop_namespace(&ctx, &id, mode, behavior).await }).await?;
    Ok(Json(DropNamespaceResponse::default()))
}

pub async fn exists(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    JsonBody(req): JsonBody<NamespaceExistsRequest>,
) -> Result<StatusCode> {
    target.check_body_id(req.id.as_ref())?;
    state.catalog.namespace_exists(&ctx, &target.id).await?;
    Ok(StatusCode::OK)
}

pub async fn list_tables(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    QueryOf(q): QueryOf<PageQuery>,
) -> Result<Json<ListTablesResponse>> {
    let include_declared = q.include_declared.unwrap_or(true);
    let listing = state
        .catalog
        .list_tables(&ctx, &target.id, q.token(), q.limit(), include_declared)
        .await?;
    Ok(Json(ListTablesResponse {
        tables: listing.items,
        page_token: listing.next,
        ..Default::default()
    }))
}
