//! The records the catalog keeps, one small JSON object each. Every record carries
//! `format_version`; a gateway refuses records of a newer format than it knows, so the
//! layout can evolve without an old binary misreading a new warehouse.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The layout and record format this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;

pub type Properties = HashMap<String, String>;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NamespaceRecord {
    pub format_version: u32,
    pub id: Vec<String>,
    pub uid: String,
    pub created_at_ms: u64,
    #[serde(default)]
    pub properties: Properties,
    /// Set while a drop checks that the namespace is empty; creates under a namespace with a
    /// fresh mark fail, so nothing can appear under it between the check and the delete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dropping_since_ms: Option<u64>,
}

/// The record at the root of a cell (`catalog.json`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CellRecord {
    pub format_version: u32,
    pub created_at_ms: u64,
    /// In endpoint mode the cell is the level-1 namespace named after its bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<NamespaceRecord>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TableRecord {
    pub format_version: u32,
    pub id: Vec<String>,
    pub uid: String,
    /// The data folder as a store key (relative to the warehouse).
    pub data_key: String,
    /// The data folder as clients see it (`s3://…`, `file://…`).
    pub location: String,
    pub created_at_ms: u64,
    #[serde(default)]
    pub properties: Properties,
    /// How the entry came to be: `declare` or `register`.
    pub origin: String,
}

/// An operation in flight that creates a name: written before the operation's first visible
/// step, removed after its last. `recovery` finishes or undoes those left by a crash. Table
/// creates stage their record instead (see `PendingEntry`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PendingRecord {
    pub format_version: u32,
    /// `create_namespace`, `declare`, `register` or `rename`.
    pub op: String,
    pub uid: String,
    pub started_at_ms: u64,
    /// For tables: the record to publish (with its claimed data folder).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<TableRecord>,
    /// For renames: the id the table is moving from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rename_from: Option<Vec<String>>,
}

/// A pending entry as stored. A table create (declare, register) stages the very record it
/// will publish, so a store that can move objects publishes it without writing it again;
/// renames and namespace creates stage a `PendingRecord`.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum PendingEntry {
    Op(PendingRecord),
    Staged(TableRecord),
}

impl PendingEntry {
    /// The entry as the operation it stands for.
    pub fn into_pending(self) -> PendingRecord {
        match self {
            PendingEntry::Op(pending) => pending,
            PendingEntry::Staged(table) => PendingRecord {
                format_version: table.format_version,
                op: table.origin.clone(),
                uid: table.uid.clone(),
                started_at_ms: table.created_at_ms,
                table: Some(table),
                rename_from: None,
            },
        }
    }
}

/// A drop or deregister in flight: written before the table record is deleted.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DropRecord {
    pub format_version: u32,
    /// `drop` (delete the data too) or `deregister` (keep it).
    pub op: String,
    pub started_at_ms: u64,
    pub table: TableRecord,
}

/// The claim on a data folder, so no two tables ever share or nest their data.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LocationClaim {
    pub format_version: u32,
    pub uid: String,
    /// The owning table's id when claimed (informational: renames do not rewrite it).
    pub table: Vec<String>,
}

pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

pub fn new_uid() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

pub fn encode<T: Serialize>(record: &T) -> bytes::Bytes {
    // Serializing these plain structs cannot fail.
    bytes::Bytes::from(serde_json::to_vec(record).unwrap_or_default())
}

pub fn decode<T: for<'de> Deserialize<'de>>(key: &str, body: &[u8]) -> Result<T> {
    #[derive(Deserialize)]
    struct Version {
        format_version: u32,
    }
    let version: Version = serde_json::from_slice(body)
        .map_err(|e| Error::internal("a catalog record is unreadable", format!("{key}: {e}")))?;
    if version.format_version > FORMAT_VERSION {
        return Err(Error::internal(
            "the warehouse was written by a newer lance-gateway",
            format!(
                "{key}: format_version {} > {FORMAT_VERSION}",
                version.format_version
            ),
        ));
    }
    serde_json::from_slice(body)
        .map_err(|e| Error::internal("a catalog record is unreadable", format!("{key}: {e}")))
}
