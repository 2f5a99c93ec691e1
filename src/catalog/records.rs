//! The records the catalog keeps, one small JSON object each. Every record carries
//! `format_version`; a gateway refuses records of a newer format than it knows, so the
//! layout can evolve without an old binary misreading a new warehouse.
//!
//! Three kinds of object:
//! - **records**: a namespace (`NamespaceRecord`), a table (`TableRecord`), a data-folder
//!   claim (`LocationClaim`), the cell's own `catalog.json` (`CellRecord`);
//! - **staged records**: a create not yet committed stages the very record it will publish
//!   at its name's pending key (so a store that moves objects publishes it by moving it);
//! - **intents** (`Intent`): a multi-step operation in flight, with the state that decides
//!   it (`prepared` or `committed`). `docs/consistency.md` gives the protocol.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The record format every kind of record existing in format 2 is still written in, whatever
/// the warehouse's format: a gateway of the previous release reads them. Version 2 added
/// intents with a committed state and marks on records; a version-1 gateway refuses them.
pub const FORMAT_VERSION: u32 = 2;

/// Format 3 adds soft drops: the records of dropped tables kept for undrop (`dropped/`),
/// drop intents that keep a table's data (`keep_until_ms`), purge a dropped table
/// (`dropped`) or undrop one (`undrop_table`), and the gateway registry (`gateways/`).
/// These are written only once the warehouse's format is 3 (`CellRecord::warehouse_format`),
/// so a release that reads format 2 at most never meets them until an operator says it is
/// gone (`admin upgrade`).
pub const FORMAT_SOFT_DROP: u32 = 3;

/// The newest format this build reads: records of a newer one are left untouched for a
/// newer gateway (`decode` refuses them with `Error::newer_format`).
pub const READS_UP_TO: u32 = 3;

/// The newest format this build writes, where the warehouse's format allows it.
pub const WRITES_UP_TO: u32 = 3;

/// The warehouse format of a cell whose record names none: written by a release before
/// format 3, which knew no warehouse format.
pub const BASE_WAREHOUSE_FORMAT: u32 = FORMAT_VERSION;

pub type Properties = HashMap<String, String>;

/// Set on a record while an operation that removes it (a rename, drop or deregister of a
/// table, a drop of a namespace) is in flight. Whoever finds a mark reads the intent it
/// names to learn whether that operation is still live, committed, or gone.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mark {
    pub op_id: String,
    /// The key of the operation's intent.
    pub intent: String,
    /// The batch commit whose record decides the operation (`Intent::batch`), if any: a
    /// reader takes the record for gone once that batch has committed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NamespaceRecord {
    pub format_version: u32,
    pub id: Vec<String>,
    pub uid: String,
    pub created_at_ms: u64,
    #[serde(default)]
    pub properties: Properties,
    /// The gateway that created it (for a staged record: the one that settles it after a
    /// restart).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_by: Option<String>,
    /// Set while a drop checks or empties the namespace: creates under it wait or fail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mark: Option<Mark>,
    /// New on every write, so no two versions of a record are the same bytes (on S3 an ETag
    /// is a hash of the bytes: a renamed-back or unmarked record must not get an old tag).
    #[serde(default)]
    pub rev: String,
}

impl NamespaceRecord {
    /// The record with a new revision, for writing.
    pub fn revised(mut self) -> Self {
        self.rev = new_uid();
        self
    }
}

/// The record at the root of a cell (`catalog.json`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CellRecord {
    pub format_version: u32,
    pub created_at_ms: u64,
    /// In endpoint mode the cell is the level-1 namespace named after its bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<NamespaceRecord>,
    /// The newest record format gateways may write in this cell (absent: format 2). Raised
    /// by `admin upgrade` once no gateway of an older release serves the warehouse; never
    /// lowered by a gateway. Releases before format 3 ignore the field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warehouse_format: Option<u32>,
}

impl CellRecord {
    pub fn warehouse_format(&self) -> u32 {
        self.warehouse_format.unwrap_or(BASE_WAREHOUSE_FORMAT)
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
    /// The gateway that created it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_by: Option<String>,
    /// Set while a rename, drop or deregister of this table is in flight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mark: Option<Mark>,
    /// New on every write (see `NamespaceRecord::rev`).
    #[serde(default)]
    pub rev: String,
}

impl TableRecord {
    /// The record with a new revision, for writing.
    pub fn revised(mut self) -> Self {
        self.rev = new_uid();
        self
    }
}

/// Who runs an operation that is past its first step and is not done yet.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Settler {
    pub node: String,
    pub since_ms: u64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IntentState {
    /// Not decided: the operation may still commit, or be rolled back by anyone who finds
    /// it abandoned. The two are conditional writes on the intent, so exactly one wins.
    #[default]
    Prepared,
    /// Decided: the operation has happened and is only finished from here (rolled forward).
    Committed,
    /// Decided against, by someone who found it abandoned; what it reserved is being
    /// released. Written only for creates, whose claim must go after the decision.
    Aborted,
}

/// A multi-step operation in flight. Creates and renames keep theirs at the target name's
/// pending key (it reserves the name); drops keep theirs under `drops/<op_id>.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Intent {
    pub format_version: u32,
    pub op_id: String,
    /// The gateway running it (`--node-id`).
    pub owner: String,
    pub started_at_ms: u64,
    #[serde(default)]
    pub state: IntentState,
    /// Set by a gateway that took over finishing the operation from an owner that is gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settler: Option<Settler>,
    /// When whoever drives the operation last showed it is alive: long operations (a
    /// cascade, the deletion of a large table's data) renew it, so others do not take them
    /// for abandoned while they run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renewed_at_ms: Option<u64>,
    /// The batch commit (its transaction id) whose record decides this intent while it is
    /// `prepared`: a table declared or deregistered inside BatchCommitTables. Such an intent
    /// commits when the batch's record says `Succeeded` and is given up when it says
    /// anything else final (or is gone); whoever finds it settles it by that record, never
    /// by its own age (`Catalog::settle`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<String>,
    #[serde(flatten)]
    pub kind: IntentKind,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum IntentKind {
    /// A table create that has committed, on a store that cannot move the staged record
    /// into place in one step; `record` is published next.
    CreateTable { record: TableRecord },
    /// The same for a namespace.
    CreateNamespace { record: NamespaceRecord },
    /// A rename: `from` is marked, and once committed it is deleted and `record` (the table
    /// under its new id) published.
    RenameTable {
        from: Vec<String>,
        record: TableRecord,
    },
    /// A drop (`delete_data`) or deregister: `record` is marked, and once committed it is
    /// deleted, then its data (for a drop) and its folder claim. A soft drop
    /// (`keep_until_ms`, format 3) keeps the data and the claim and leaves a `DroppedTable`
    /// at `dropped/` instead. A purge of a dropped table (`dropped`, format 3: the key of its
    /// `DroppedTable`, which is marked instead of a table record) deletes the data, the claim,
    /// then the dropped record.
    DropTable {
        record: TableRecord,
        delete_data: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        keep_until_ms: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dropped: Option<String>,
        /// Who dropped it (a soft drop's `DroppedTable::dropped_by`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dropped_by: Option<String>,
    },
    /// A namespace drop: the namespace is marked while its children are checked or dropped.
    DropNamespace { id: Vec<String> },
    /// A create in Overwrite mode replacing the properties of an existing namespace: it is
    /// marked while it is checked to be empty.
    ReplaceNamespace { id: Vec<String> },
    /// An undrop (format 3), at the target name's pending key: the dropped record at
    /// `dropped` is marked, and once committed `record` (the table under its name) is
    /// published and the dropped record deleted. A rename out of the dropped tables.
    UndropTable {
        dropped: String,
        record: TableRecord,
    },
}

/// A table dropped and kept for its retention period (`dropped/<table id>/<drop_id>.json`, format 3):
/// its record as it was, when and by whom it was dropped, and when it may be purged. Its
/// data folder stays claimed by its uid, so no new table takes the folder.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DroppedTable {
    pub format_version: u32,
    /// The drop's operation id: how undrop and purge name this drop.
    pub drop_id: String,
    pub table: TableRecord,
    pub dropped_at_ms: u64,
    /// The principal that dropped it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dropped_by: Option<String>,
    /// When the maintenance sweep may purge it.
    pub purge_after_ms: u64,
    /// Set while an undrop or purge of it is in flight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mark: Option<Mark>,
    #[serde(default)]
    pub rev: String,
}

impl Intent {
    pub fn new(op_id: String, owner: String, kind: IntentKind) -> Self {
        Intent {
            format_version: FORMAT_VERSION,
            op_id,
            owner,
            started_at_ms: now_ms(),
            state: IntentState::Prepared,
            settler: None,
            renewed_at_ms: None,
            batch: None,
            kind,
        }
    }

    /// The batch whose record decides this intent, while it is undecided itself.
    pub fn deciding_batch(&self) -> Option<&str> {
        self.batch
            .as_deref()
            .filter(|_| self.state == IntentState::Prepared)
    }

    /// The last time the operation was known to be driven.
    pub fn alive_at_ms(&self) -> u64 {
        self.renewed_at_ms.unwrap_or(self.started_at_ms)
    }

    pub fn name(&self) -> &'static str {
        match self.kind {
            IntentKind::CreateTable { .. } => "create_table",
            IntentKind::CreateNamespace { .. } => "create_namespace",
            IntentKind::RenameTable { .. } => "rename_table",
            IntentKind::DropTable { .. } => "drop_table",
            IntentKind::DropNamespace { .. } => "drop_namespace",
            IntentKind::ReplaceNamespace { .. } => "replace_namespace",
            IntentKind::UndropTable { .. } => "undrop_table",
        }
    }
}

/// An intent as written by format version 1 (pending creates and renames): still read so
/// that leftovers of an older gateway are settled, conservatively.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LegacyPending {
    pub format_version: u32,
    /// `create_namespace`, `declare`, `register` or `rename`.
    pub op: String,
    pub uid: String,
    pub started_at_ms: u64,
    #[serde(default)]
    pub table: Option<TableRecord>,
    #[serde(default)]
    pub rename_from: Option<Vec<String>>,
}

/// A version-1 drop record (`drops/<uid>.json`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LegacyDrop {
    pub format_version: u32,
    pub op: String,
    pub started_at_ms: u64,
    pub table: TableRecord,
}

/// Whatever can sit at a pending key or under `drops/`.
#[derive(Clone, Debug)]
pub enum Entry {
    /// A table create, staged and not committed: the record it will publish.
    StagedTable(TableRecord),
    /// A namespace create, staged and not committed.
    StagedNamespace(NamespaceRecord),
    Intent(Intent),
    LegacyPending(LegacyPending),
    LegacyDrop(LegacyDrop),
}

/// The kind of pending key an entry was read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKey {
    Table,
    Namespace,
    Drop,
}

impl Entry {
    /// Decodes an entry by the shape of its key and body.
    pub fn decode(key: &str, kind: EntryKey, body: &[u8]) -> Result<Entry> {
        let value: serde_json::Value = decode(key, body)?;
        let op = value.get("op").and_then(|o| o.as_str()).map(str::to_string);
        let version = value
            .get("format_version")
            .and_then(|v| v.as_u64())
            .unwrap_or(0);
        let unreadable = |e: serde_json::Error| {
            Error::internal("a catalog record is unreadable", format!("{key}: {e}"))
        };
        Ok(match (op, kind) {
            (Some(_), EntryKey::Drop) if version < 2 => {
                Entry::LegacyDrop(serde_json::from_value(value).map_err(unreadable)?)
            }
            (Some(_), _) if version < 2 => {
                Entry::LegacyPending(serde_json::from_value(value).map_err(unreadable)?)
            }
            (Some(_), _) if version > u64::from(READS_UP_TO) => {
                return Err(Error::newer_format(key, version as u32));
            }
            (Some(_), _) => Entry::Intent(serde_json::from_value(value).map_err(unreadable)?),
            (None, EntryKey::Namespace) => {
                Entry::StagedNamespace(serde_json::from_value(value).map_err(unreadable)?)
            }
            (None, _) => Entry::StagedTable(serde_json::from_value(value).map_err(unreadable)?),
        })
    }

    /// The operation's id: an intent's own, or the uid of a staged record.
    pub fn op_id(&self) -> &str {
        match self {
            Entry::StagedTable(t) => &t.uid,
            Entry::StagedNamespace(n) => &n.uid,
            Entry::Intent(i) => &i.op_id,
            Entry::LegacyPending(p) => &p.uid,
            Entry::LegacyDrop(d) => &d.table.uid,
        }
    }

    pub fn owner(&self) -> Option<&str> {
        match self {
            Entry::StagedTable(t) => t.created_by.as_deref(),
            Entry::StagedNamespace(n) => n.created_by.as_deref(),
            Entry::Intent(i) => Some(&i.owner),
            Entry::LegacyPending(_) | Entry::LegacyDrop(_) => None,
        }
    }

    pub fn started_at_ms(&self) -> u64 {
        match self {
            Entry::StagedTable(t) => t.created_at_ms,
            Entry::StagedNamespace(n) => n.created_at_ms,
            Entry::Intent(i) => i.started_at_ms,
            Entry::LegacyPending(p) => p.started_at_ms,
            Entry::LegacyDrop(d) => d.started_at_ms,
        }
    }

    /// The last time the operation was known to be driven (its start, or its last renewal).
    pub fn alive_at_ms(&self) -> u64 {
        match self {
            Entry::Intent(i) => i.alive_at_ms(),
            other => other.started_at_ms(),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Entry::StagedTable(_) => "create_table",
            Entry::StagedNamespace(_) => "create_namespace",
            Entry::Intent(i) => i.name(),
            Entry::LegacyPending(_) => "legacy_pending",
            Entry::LegacyDrop(_) => "legacy_drop",
        }
    }

    /// A create decided against, whose reservations are being released: anyone may finish.
    pub fn is_aborted(&self) -> bool {
        matches!(self, Entry::Intent(i) if i.state == IntentState::Aborted)
    }

    /// The table this entry will make visible under its name once committed, if it is a
    /// committed create or rename.
    pub fn committed_table(&self) -> Option<&TableRecord> {
        match self {
            Entry::Intent(Intent {
                state: IntentState::Committed,
                kind:
                    IntentKind::CreateTable { record }
                    | IntentKind::RenameTable { record, .. }
                    | IntentKind::UndropTable { record, .. },
                ..
            }) => Some(record),
            _ => None,
        }
    }
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

/// The `format_version` a record written by `encode` starts with (`{"format_version":2,`),
/// read without parsing the rest: every record type declares it first.
fn leading_format_version(body: &[u8]) -> Option<u32> {
    let rest = body.strip_prefix(b"{\"format_version\":")?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || digits > 9 || !matches!(rest.get(digits), Some(b',' | b'}')) {
        return None;
    }
    std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()
}

pub fn decode<T: for<'de> Deserialize<'de>>(key: &str, body: &[u8]) -> Result<T> {
    #[derive(Deserialize)]
    struct Version {
        format_version: u32,
    }
    // Records this gateway wrote are checked without a second parse; anything else (a
    // record written by hand, by another tool) is read for its version first.
    let format_version = match leading_format_version(body) {
        Some(v) => v,
        None => {
            serde_json::from_slice::<Version>(body)
                .map_err(|e| {
                    Error::internal("a catalog record is unreadable", format!("{key}: {e}"))
                })?
                .format_version
        }
    };
    if format_version > READS_UP_TO {
        return Err(Error::newer_format(key, format_version));
    }
    serde_json::from_slice(body)
        .map_err(|e| Error::internal("a catalog record is unreadable", format!("{key}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_is_read_from_the_front_of_records_we_wrote_and_parsed_otherwise() {
        assert_eq!(
            leading_format_version(&encode(&table())),
            Some(FORMAT_VERSION)
        );
        assert_eq!(
            leading_format_version(br#"{"format_version":12}"#),
            Some(12)
        );
        assert_eq!(leading_format_version(br#"{ "format_version": 2}"#), None);
        assert_eq!(leading_format_version(br#"{"format_version":2x"#), None);
        assert_eq!(leading_format_version(br#"{"format_version":,"#), None);
        // A newer record is refused either way it is written.
        let newer = br#"{"id":["a"],"format_version":99}"#;
        assert!(decode::<serde_json::Value>("k", newer).is_err());
        let newer = br#"{"format_version":99,"id":["a"]}"#;
        assert!(decode::<serde_json::Value>("k", newer).is_err());
        let t: TableRecord = decode("k", &encode(&table())).unwrap();
        assert_eq!(t, table());
    }

    fn table() -> TableRecord {
        TableRecord {
            format_version: FORMAT_VERSION,
            id: vec!["a".into(), "t".into()],
            uid: "u1".into(),
            data_key: "a/t.lance".into(),
            location: "file:///w/a/t.lance".into(),
            created_at_ms: 5,
            properties: Properties::new(),
            origin: "declare".into(),
            created_by: Some("n1".into()),
            mark: None,
            rev: String::new(),
        }
    }

    #[test]
    fn entries_decode_by_shape() {
        let staged = encode(&table());
        assert!(matches!(
            Entry::decode("k", EntryKey::Table, &staged).unwrap(),
            Entry::StagedTable(t) if t.uid == "u1"
        ));
        let mut intent = Intent::new(
            "op1".into(),
            "n1".into(),
            IntentKind::RenameTable {
                from: vec!["a".into(), "s".into()],
                record: table(),
            },
        );
        intent.state = IntentState::Committed;
        let entry = Entry::decode("k", EntryKey::Table, &encode(&intent)).unwrap();
        assert_eq!(entry.op_id(), "op1");
        assert_eq!(entry.committed_table().map(|t| t.uid.as_str()), Some("u1"));
        let legacy = serde_json::json!({"format_version": 1, "op": "rename", "uid": "u",
            "started_at_ms": 1, "table": table(), "rename_from": ["a", "s"]});
        assert!(matches!(
            Entry::decode("k", EntryKey::Table, legacy.to_string().as_bytes()).unwrap(),
            Entry::LegacyPending(p) if p.op == "rename"
        ));
        let drop = Intent::new(
            "op2".into(),
            "n1".into(),
            IntentKind::DropTable {
                record: table(),
                delete_data: true,
                keep_until_ms: None,
                dropped: None,
                dropped_by: None,
            },
        );
        let entry = Entry::decode("k", EntryKey::Drop, &encode(&drop)).unwrap();
        assert_eq!(entry.name(), "drop_table");
        assert!(entry.committed_table().is_none());
    }

    #[test]
    fn newer_records_are_refused_naming_both_formats() {
        let body = serde_json::json!({"format_version": READS_UP_TO + 1, "op": "x"});
        let e = Entry::decode("k", EntryKey::Drop, body.to_string().as_bytes()).unwrap_err();
        assert_eq!(e.code, crate::error::Code::ServiceUnavailable);
        assert!(
            e.message.contains(&format!("format {}", READS_UP_TO + 1)),
            "{}",
            e.message
        );
        assert!(
            e.message.contains(&format!("up to {READS_UP_TO}")),
            "{}",
            e.message
        );
        // A record of format 3 is read.
        let body = serde_json::json!({"format_version": FORMAT_SOFT_DROP, "op": "drop_table",
            "op_id": "o", "owner": "n", "started_at_ms": 1, "record": table(),
            "delete_data": true, "keep_until_ms": 9});
        let entry = Entry::decode("k", EntryKey::Drop, body.to_string().as_bytes()).unwrap();
        assert!(matches!(
            entry,
            Entry::Intent(Intent {
                kind: IntentKind::DropTable {
                    keep_until_ms: Some(9),
                    ..
                },
                ..
            })
        ));
    }

    #[test]
    fn a_cell_record_without_a_warehouse_format_is_at_the_base_format() {
        let old = br#"{"format_version":2,"created_at_ms":1}"#;
        let cell: CellRecord = decode("k", old).unwrap();
        assert_eq!(cell.warehouse_format(), 2);
        let raised = CellRecord {
            warehouse_format: Some(3),
            ..cell
        };
        let back: CellRecord = decode("k", &encode(&raised)).unwrap();
        assert_eq!(back.warehouse_format(), 3);
        // The cell record itself stays in format 2, which the previous release reads.
        assert!(encode(&raised).starts_with(b"{\"format_version\":2,"));
    }
}
