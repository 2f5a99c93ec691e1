//! Schema changes: add columns from SQL expressions, alter (rename, nullability, type), drop
//! columns, field metadata and schema metadata. Each is one Lance commit.

use std::collections::HashMap;

use lance::Dataset;
use lance::dataset::{ColumnAlteration, NewColumnTransform};
use lance_namespace::models::JsonArrowDataType;
use serde::Deserialize;
use serde_json::Value;

use super::lance_error;
use crate::error::{Code, Error, Result};

fn missing_column(path: &str) -> Error {
    Error::new(
        Code::TableColumnNotFound,
        format!("column '{path}' is not in the table"),
    )
}

/// One new column: a name and the SQL expression that fills it. Computed and UDF-backed
/// columns belong to other products and are refused as Unsupported.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct NewColumn {
    pub name: String,
    pub expression: Option<String>,
    pub computed: Option<Value>,
    pub virtual_column: Option<Value>,
}

pub async fn add_columns(mut dataset: Dataset, columns: &[NewColumn]) -> Result<u64> {
    if columns.is_empty() {
        return Err(Error::invalid("add_columns needs at least one new column"));
    }
    let mut expressions = Vec::with_capacity(columns.len());
    for c in columns {
        if c.computed.as_ref().is_some_and(|v| !v.is_null())
            || c.virtual_column.as_ref().is_some_and(|v| !v.is_null())
        {
            return Err(Error::unsupported(format!(
                "column '{}': computed and virtual (UDF) columns are not served by lance-gateway; give an SQL expression",
                c.name
            )));
        }
        let Some(expression) = c.expression.as_deref().filter(|e| !e.trim().is_empty()) else {
            return Err(Error::invalid(format!(
                "column '{}' needs an expression",
                c.name
            )));
        };
        if c.name.trim().is_empty() {
            return Err(Error::invalid("a new column needs a name"));
        }
        if dataset.schema().field(&c.name).is_some() {
            return Err(Error::new(
                Code::TableSchemaValidationError,
                format!("column '{}' already exists", c.name),
            ));
        }
        expressions.push((c.name.clone(), expression.to_string()));
    }
    dataset
        .add_columns(NewColumnTransform::SqlExpressions(expressions), None, None)
        .await
        .map_err(lance_error)?;
    Ok(dataset.version().version)
}

/// One alteration as the spec writes it.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Alteration {
    pub path: String,
    pub rename: Option<String>,
    pub nullable: Option<bool>,
    pub data_type: Option<Value>,
    pub virtual_column: Option<Value>,
}

/// A column type as a request writes it: the spec's JSON form (`{"type": "float32"}`) or
/// Lance's own (`{"type": "float"}`, which LanceDB's remote client sends and the remote
/// describe answers), tried in the order the client's dialect suggests.
fn data_type(path: &str, json: &Value, lance_first: bool) -> Result<arrow_schema::DataType> {
    type Reader = fn(&Value) -> std::result::Result<arrow_schema::DataType, String>;
    fn spec(json: &Value) -> std::result::Result<arrow_schema::DataType, String> {
        let json: JsonArrowDataType =
            serde_json::from_value(json.clone()).map_err(|e| e.to_string())?;
        lance_namespace::schema::convert_json_arrow_type(&json).map_err(|e| e.to_string())
    }
    fn lance(json: &Value) -> std::result::Result<arrow_schema::DataType, String> {
        let json: lance::arrow::json::JsonDataType =
            serde_json::from_value(json.clone()).map_err(|e| e.to_string())?;
        arrow_schema::DataType::try_from(&json).map_err(|e| e.to_string())
    }
    let (first, second): (Reader, Reader) = if lance_first {
        (lance, spec)
    } else {
        (spec, lance)
    };
    first(json).or_else(|first_error| {
        second(json).map_err(|_| {
            Error::invalid(format!(
                "bad data_type for '{path}': not a type in the spec's JSON form or Lance's"
            ))
            .with_detail(first_error)
        })
    })
}

pub async fn alter_columns(
    mut dataset: Dataset,
    alterations: &[Alteration],
    lance_types_first: bool,
) -> Result<u64> {
    if alterations.is_empty() {
        return Err(Error::invalid(
            "alter_columns needs at least one alteration",
        ));
    }
    let mut changes = Vec::with_capacity(alterations.len());
    for a in alterations {
        if a.virtual_column.as_ref().is_some_and(|v| !v.is_null()) {
            return Err(Error::unsupported(
                "virtual (UDF) columns are not served by lance-gateway",
            ));
        }
        if dataset.schema().field(&a.path).is_none() {
            return Err(missing_column(&a.path));
        }
        let mut change = ColumnAlteration::new(a.path.clone());
        change.rename = a.rename.clone().filter(|r| !r.trim().is_empty());
        change.nullable = a.nullable;
        if let Some(json) = a.data_type.as_ref().filter(|v| !v.is_null()) {
            change.data_type = Some(data_type(&a.path, json, lance_types_first)?);
        }
        changes.push(change);
    }
    dataset.alter_columns(&changes).await.map_err(|e| {
        let mapped = lance_error(e);
        if mapped.code == Code::InvalidInput {
            Error::new(Code::TableSchemaValidationError, mapped.message.clone())
                .with_detail(mapped.detail.unwrap_or_default())
        } else {
            mapped
        }
    })?;
    Ok(dataset.version().version)
}

pub async fn drop_columns(mut dataset: Dataset, columns: &[String]) -> Result<u64> {
    if columns.is_empty() {
        return Err(Error::invalid("drop_columns needs at least one column"));
    }
    for c in columns {
        if dataset.schema().field(c).is_none() {
            return Err(missing_column(c));
        }
    }
    let names: Vec<&str> = columns.iter().map(String::as_str).collect();
    dataset.drop_columns(&names).await.map_err(lance_error)?;
    Ok(dataset.version().version)
}

/// One field's metadata change: keys with a `null` value are removed; `replace` replaces
/// the field's whole map instead of merging into it.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct FieldMetadata {
    pub path: String,
    #[serde(default)]
    pub metadata: HashMap<String, Option<String>>,
    pub replace: Option<bool>,
}

/// Updates field metadata; answers the new version and each changed field's metadata.
pub async fn update_field_metadata(
    mut dataset: Dataset,
    updates: &[FieldMetadata],
) -> Result<(u64, HashMap<String, HashMap<String, String>>)> {
    if updates.is_empty() {
        return Err(Error::invalid(
            "update_field_metadata needs at least one update",
        ));
    }
    let mut ids = Vec::with_capacity(updates.len());
    for u in updates {
        let field = dataset
            .schema()
            .field(&u.path)
            .ok_or_else(|| missing_column(&u.path))?;
        ids.push(field.id);
    }
    let mut builder = dataset.update_field_metadata();
    for (u, id) in updates.iter().zip(&ids) {
        let entries: Vec<(String, Option<String>)> = u
            .metadata
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        builder = if u.replace == Some(true) {
            builder.replace(*id, entries)
        } else {
            builder.update(*id, entries)
        }
        .map_err(lance_error)?;
    }
    builder.await.map_err(lance_error)?;
    let mut fields = HashMap::new();
    for (u, id) in updates.iter().zip(&ids) {
        if let Some(field) = dataset.schema().field_by_id(*id) {
            fields.insert(u.path.clone(), field.metadata.clone());
        }
    }
    Ok((dataset.version().version, fields))
}

/// Replaces the schema's metadata; answers the version that made and what it now is.
pub async fn replace_schema_metadata(
    mut dataset: Dataset,
    metadata: HashMap<String, String>,
) -> Result<(u64, HashMap<String, String>)> {
    dataset
        .update_schema_metadata(metadata)
        .replace()
        .await
        .map_err(lance_error)?;
    Ok((dataset.version().version, dataset.schema().metadata.clone()))
}
