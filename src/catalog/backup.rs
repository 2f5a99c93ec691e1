//! A copy of the catalog itself: `admin backup`, `admin restore`, `admin verify`.
//!
//! **What is copied**: every record that says what the catalog holds, in every cell: the
//! warehouse's record (`catalog.json`, with its format), namespaces, tables, the folder
//! claims, dropped tables kept for undrop, and the operations in flight (pending creates and
//! renames, drop intents). Not copied, because the catalog rebuilds them or they only
//! describe the past: commit logs and receipts (`commits/`: a table's log starts again at
//! its newest version in storage, which is where the log's own rule already looks), the
//! maintenance leases and last runs, job transactions and idempotency keys, the gateway
//! registry, the local store's temporary files. No data is copied: the data stays where it
//! is, or is copied by the operator (`aws s3 sync`, `rclone`) before a restore elsewhere.
//!
//! **Consistency**: the copy is taken by reading every record twice over (a *double
//! collect*): when a second pass lists the same keys with the same ETags as the first, no
//! record changed between the two passes, so the copy is the catalog as it was at one
//! instant in between. A catalog that keeps changing is read again, a few times, then the
//! backup fails rather than write a copy no instant had. Operations in flight are copied as
//! they stand: a restored one is a crash state, which recovery finishes or undoes as it
//! would after a gateway died (`docs/consistency.md`).
//!
//! **Restore** writes the copy into a warehouse whose catalog is empty (refused otherwise,
//! unless forced), and points every table (live, dropped, or named by an operation in
//! flight) at its folder in the warehouse it is restored into: a table's folder is always
//! inside its warehouse, so a warehouse restored into another bucket or prefix, after its
//! data was copied there, finds every table again.
//!
//! **Verify** looks, for every table of a copy (or of the live catalog), for its versions in
//! storage: the version it was at when copied must still be there, or a newer one.

use std::collections::BTreeMap;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use serde::{Deserialize, Serialize};

use super::Catalog;
use super::layout::{CATALOG_DIR, Layout};
use super::records::{BASE_WAREHOUSE_FORMAT, CellRecord, TableRecord, decode, now_ms};
use crate::error::{Error, Result};
use crate::store::Condition;

/// The version of the backup file's own layout.
pub const BACKUP_FORMAT: u32 = 1;
/// The folders of a cell's catalog that a backup copies (beside `catalog.json`).
const COPIED: [&str; 6] = [
    "ns/",
    "tables/",
    "locations/",
    "dropped/",
    "pending/",
    "drops/",
];
/// How many times the catalog is read over before a backup gives up on a quiet instant.
const PASSES: usize = 8;
/// Reads in flight at once.
const READS: usize = 32;

/// One line of a backup file (JSON lines: the header, then the objects, then the tables).
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Line {
    Header(Header),
    Object(Copied),
    Table(TableAt),
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Header {
    pub backup_format: u32,
    pub release: String,
    pub taken_at_ms: u64,
    /// The warehouse it was taken from (`file:///…`, `s3://bucket/prefix/`, `s3://`).
    pub warehouse: String,
    pub endpoint_mode: bool,
    pub cells: Vec<String>,
    pub objects: usize,
    pub tables: usize,
    /// How many passes over the catalog it took to find it still.
    pub passes: usize,
}

/// A catalog object: its cell ("" or "<bucket>/"), its key below the cell, its body.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Copied {
    pub cell: String,
    pub key: String,
    pub body: serde_json::Value,
}

/// A live table and the version it was at.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct TableAt {
    pub id: Vec<String>,
    pub location: String,
    /// Its newest version in storage (`None`: declared, no version yet).
    pub version: Option<u64>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Backup {
    pub header: Option<Header>,
    pub objects: Vec<Copied>,
    pub tables: Vec<TableAt>,
}

impl Backup {
    /// The backup as JSON lines.
    pub fn to_lines(&self) -> Result<String> {
        let mut out = String::new();
        let mut push = |line: Line| -> Result<()> {
            out.push_str(
                &serde_json::to_string(&line)
                    .map_err(|e| Error::internal("the backup could not be written", e))?,
            );
            out.push('\n');
            Ok(())
        };
        if let Some(h) = &self.header {
            push(Line::Header(h.clone()))?;
        }
        for o in &self.objects {
            push(Line::Object(o.clone()))?;
        }
        for t in &self.tables {
            push(Line::Table(t.clone()))?;
        }
        Ok(out)
    }

    /// Reads a backup written by `to_lines`; refuses anything else by its line number.
    pub fn from_lines(text: &str) -> Result<Backup> {
        let mut backup = Backup::default();
        for (n, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            let parsed: Line = serde_json::from_str(line).map_err(|e| {
                Error::invalid(format!("line {} is not a catalog backup line: {e}", n + 1))
            })?;
            match parsed {
                Line::Header(h) if backup.header.is_none() && n == 0 => {
                    if h.backup_format > BACKUP_FORMAT {
                        return Err(Error::invalid(format!(
                            "the backup is of format {}; this release reads up to {BACKUP_FORMAT}",
                            h.backup_format
                        )));
                    }
                    backup.header = Some(h)
                }
                Line::Header(_) => {
                    return Err(Error::invalid(format!(
                        "line {}: a header after the first line",
                        n + 1
                    )));
                }
                Line::Object(o) => backup.objects.push(o),
                Line::Table(t) => backup.tables.push(t),
            }
        }
        let Some(header) = &backup.header else {
            return Err(Error::invalid("not a catalog backup: no header line"));
        };
        if header.objects != backup.objects.len() || header.tables != backup.tables.len() {
            return Err(Error::invalid(format!(
                "the backup is cut short: its header names {} objects and {} tables, it holds {} and {}",
                header.objects,
                header.tables,
                backup.objects.len(),
                backup.tables.len()
            )));
        }
        Ok(backup)
    }
}

/// What a restore did.
#[derive(Debug, Default, Serialize)]
pub struct Restored {
    pub objects: usize,
    pub tables: usize,
    /// Records pointed at their folders in this warehouse (taken from another one).
    pub relocated: usize,
}

/// One table as `verify` found it.
#[derive(Debug, Serialize)]
pub struct Verified {
    pub id: Vec<String>,
    pub location: String,
    /// The version the backup (or the catalog) expects, and the newest one in storage.
    pub expected: Option<u64>,
    pub found: Option<u64>,
    /// "ok", or "missing" (no version in storage, or an older one than expected).
    pub state: &'static str,
}

impl Catalog {
    /// The catalog's objects in every cell at one instant: key (with its cell) → (ETag,
    /// body), read over until two passes agree.
    async fn still_catalog(
        &self,
    ) -> Result<(Vec<String>, BTreeMap<String, (String, Bytes)>, usize)> {
        let mut last: Option<BTreeMap<String, (String, Bytes)>> = None;
        for pass in 1..=PASSES {
            let cells = self.cells().await?;
            let mut keys = Vec::new();
            for cell in &cells {
                keys.push(Layout::cell_record(cell));
                for dir in COPIED {
                    let prefix = format!("{}{dir}", Layout::catalog_dir(cell));
                    keys.extend(self.all_keys(&prefix, false).await?);
                }
            }
            let store = self.store.clone();
            let read: BTreeMap<String, (String, Bytes)> = futures::stream::iter(keys)
                .map(|key| {
                    let store = store.clone();
                    async move { Ok::<_, Error>((store.get(&key).await?, key)) }
                })
                .buffer_unordered(READS)
                .try_filter_map(
                    |(obj, key)| async move { Ok(obj.map(|o| (key, (o.etag, o.body)))) },
                )
                .try_collect()
                .await?;
            let same = last.as_ref().is_some_and(|before| {
                before.len() == read.len()
                    && before
                        .iter()
                        .zip(read.iter())
                        .all(|((k1, (e1, _)), (k2, (e2, _)))| k1 == k2 && e1 == e2)
            });
            if same {
                return Ok((cells, read, pass));
            }
            last = Some(read);
        }
        Err(Error::unavailable(format!(
            "the catalog changed between each of {PASSES} passes over it; no instant could be copied (retry when fewer tables are being created, renamed or dropped)"
        )))
    }

    /// A consistent copy of the catalog's records, with each live table's newest version.
    pub async fn backup(&self) -> Result<Backup> {
        let (cells, objects, passes) = self.still_catalog().await?;
        let mut copied = Vec::with_capacity(objects.len());
        let mut live = Vec::new();
        for (key, (_, body)) in objects {
            let cell = cells
                .iter()
                .filter(|c| key.starts_with(&format!("{c}{CATALOG_DIR}/")))
                .max_by_key(|c| c.len())
                .cloned()
                .unwrap_or_default();
            let value: serde_json::Value = serde_json::from_slice(&body)
                .map_err(|e| Error::internal(format!("catalog object {key} is not JSON"), e))?;
            if key.starts_with(&Layout::all_tables_prefix(&cell)) {
                live.push(decode::<TableRecord>(&key, &body)?);
            }
            copied.push(Copied {
                key: key[cell.len()..].to_string(),
                cell,
                body: value,
            });
        }
        let tables: Vec<TableAt> = futures::stream::iter(live)
            .map(|record| async move {
                let dir = super::versions::versions_dir(&record, None)?;
                let version = self.latest_published(&dir).await?;
                Ok::<_, Error>(TableAt {
                    id: record.id,
                    location: record.location,
                    version,
                })
            })
            .buffered(READS)
            .try_collect()
            .await?;
        Ok(Backup {
            header: Some(Header {
                backup_format: BACKUP_FORMAT,
                release: env!("CARGO_PKG_VERSION").to_string(),
                taken_at_ms: now_ms(),
                warehouse: self.layout.root_uri(),
                endpoint_mode: self.layout.endpoint_mode(),
                cells,
                objects: copied.len(),
                tables: tables.len(),
                passes,
            }),
            objects: copied,
            tables,
        })
    }

    /// Whether any cell of `cells` holds catalog records beyond its `catalog.json`.
    async fn holds_a_catalog(&self, cells: &[String]) -> Result<bool> {
        for cell in cells {
            for dir in COPIED {
                let prefix = format!("{}{dir}", Layout::catalog_dir(cell));
                match self.store.list(&prefix, None, 1, false).await {
                    Ok(page) if !page.keys.is_empty() => return Ok(true),
                    Ok(_) => {}
                    // A bucket not made yet holds nothing.
                    Err(_) if self.layout.endpoint_mode() => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(false)
    }

    /// Writes `backup` into this warehouse. Refused when it holds a catalog already, unless
    /// `force` (then the copy's objects replace those of the same keys, others stay).
    pub async fn restore(&self, backup: &Backup, force: bool) -> Result<Restored> {
        let header = backup
            .header
            .as_ref()
            .ok_or_else(|| Error::invalid("not a catalog backup: no header"))?;
        if header.endpoint_mode != self.layout.endpoint_mode() {
            return Err(Error::invalid(format!(
                "the backup is of a warehouse {} endpoint mode ({}); this one is {}",
                if header.endpoint_mode { "in" } else { "not in" },
                header.warehouse,
                self.layout.root_uri()
            )));
        }
        if self.layout.endpoint_mode() {
            for cell in &header.cells {
                self.store.ensure_bucket(cell.trim_end_matches('/')).await?;
            }
        }
        let occupied = self.holds_a_catalog(&header.cells).await?;
        if occupied && !force {
            return Err(Error::invalid(format!(
                "the warehouse {} holds a catalog already; restore into an empty one, or pass --force to write the backup over it",
                self.layout.root_uri()
            )));
        }
        let mut restored = Restored {
            tables: backup.tables.len(),
            ..Default::default()
        };
        // A warehouse format only rises: over a catalog (forced), the higher of the copy's
        // and the one here stays. An empty warehouse takes the copy's.
        let mut formats = BTreeMap::new();
        for cell in header.cells.iter().filter(|_| occupied) {
            if let Some((record, _)) = self.read::<CellRecord>(&Layout::cell_record(cell)).await? {
                formats.insert(cell.clone(), record.warehouse_format());
            }
        }
        let writes: Vec<(String, Bytes, bool)> = backup
            .objects
            .iter()
            .map(|o| {
                let mut body = o.body.clone();
                if o.key == format!("{CATALOG_DIR}/catalog.json")
                    && let Some(here) = formats.get(&o.cell)
                    && let serde_json::Value::Object(map) = &mut body
                {
                    let copied = map
                        .get("warehouse_format")
                        .and_then(|f| f.as_u64())
                        .unwrap_or(BASE_WAREHOUSE_FORMAT as u64);
                    map.insert("warehouse_format".into(), copied.max(*here as u64).into());
                }
                let moved = self.relocate_in(&mut body);
                let key = format!("{}{}", o.cell, o.key);
                let bytes = serde_json::to_vec(&body)
                    .map(Bytes::from)
                    .map_err(|e| Error::internal("the backup could not be restored", e))?;
                Ok::<_, Error>((key, bytes, moved > 0))
            })
            .collect::<Result<_>>()?;
        restored.relocated = writes.iter().filter(|(_, _, moved)| *moved).count();
        let store = self.store.clone();
        restored.objects = futures::stream::iter(writes)
            .map(|(key, body, _)| {
                let store = store.clone();
                async move {
                    // The warehouse's record is replaced (a gateway that opened the empty
                    // warehouse wrote one); the rest are created, or replaced when forced.
                    let cond = if force || key.ends_with(&format!("{CATALOG_DIR}/catalog.json")) {
                        Condition::None
                    } else {
                        Condition::IfAbsent
                    };
                    store
                        .put(&key, body, cond)
                        .await
                        .map_err(|e| Error::from(e).with_detail(format!("restoring {key}")))
                }
            })
            .buffer_unordered(READS)
            .try_fold(0usize, |n, _| async move { Ok(n + 1) })
            .await?;
        Ok(restored)
    }

    /// Points every table record inside `value` (one with a `data_key` and a `location`) at
    /// its folder in this warehouse; answers how many it changed.
    fn relocate_in(&self, value: &mut serde_json::Value) -> usize {
        let mut changed = 0;
        match value {
            serde_json::Value::Object(map) => {
                let here = match (map.get("data_key"), map.get("location")) {
                    (Some(serde_json::Value::String(k)), Some(serde_json::Value::String(l))) => {
                        let uri = self.layout.uri_of(k);
                        (uri != *l).then_some(uri)
                    }
                    _ => None,
                };
                if let Some(uri) = here {
                    map.insert("location".into(), serde_json::Value::String(uri));
                    changed += 1;
                }
                for v in map.values_mut() {
                    changed += self.relocate_in(v);
                }
            }
            serde_json::Value::Array(items) => {
                for v in items {
                    changed += self.relocate_in(v);
                }
            }
            _ => {}
        }
        changed
    }

    /// Every table of `backup` (or, without one, of the live catalog) checked against
    /// storage: its expected version or a newer one must be there.
    pub async fn verify(&self, backup: Option<&Backup>) -> Result<Vec<Verified>> {
        let expected: Vec<(TableRecord, Option<u64>)> = match backup {
            Some(b) => {
                let at: BTreeMap<&Vec<String>, Option<u64>> =
                    b.tables.iter().map(|t| (&t.id, t.version)).collect();
                let mut out = Vec::new();
                for o in &b.objects {
                    let prefix = Layout::all_tables_prefix(&o.cell);
                    let key = format!("{}{}", o.cell, o.key);
                    if !key.starts_with(&prefix) {
                        continue;
                    }
                    let mut body = o.body.clone();
                    self.relocate_in(&mut body);
                    let record: TableRecord = serde_json::from_value(body).map_err(|e| {
                        Error::invalid(format!("the backup's {key} is not a table record: {e}"))
                    })?;
                    let version = at.get(&record.id).copied().flatten();
                    out.push((record, version));
                }
                out
            }
            None => {
                let mut out = Vec::new();
                for cell in self.cells().await? {
                    for key in self
                        .all_keys(&Layout::all_tables_prefix(&cell), false)
                        .await?
                    {
                        if let Some((record, _)) = self.read::<TableRecord>(&key).await? {
                            out.push((record, None));
                        }
                    }
                }
                out
            }
        };
        futures::stream::iter(expected)
            .map(|(record, expected)| async move {
                let dir = super::versions::versions_dir(&record, None)?;
                let found = self.latest_published(&dir).await?;
                let ok = match (expected, found) {
                    (Some(want), Some(have)) => have >= want,
                    (Some(_), None) => false,
                    // Declared when copied (or no copy): whatever storage has is its state.
                    (None, _) => true,
                };
                Ok::<_, Error>(Verified {
                    id: record.id,
                    location: record.location,
                    expected,
                    found,
                    state: if ok { "ok" } else { "missing" },
                })
            })
            .buffered(READS)
            .try_collect()
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Backup {
        let objects = vec![Copied {
            cell: String::new(),
            key: ".lance-gateway/ns/ml.json".into(),
            body: serde_json::json!({"format_version": 2, "id": ["ml"]}),
        }];
        let tables = vec![TableAt {
            id: vec!["ml".into(), "t".into()],
            location: "file:///wh/ml/t.lance".into(),
            version: Some(3),
        }];
        Backup {
            header: Some(Header {
                backup_format: BACKUP_FORMAT,
                release: "test".into(),
                taken_at_ms: 1,
                warehouse: "file:///wh".into(),
                endpoint_mode: false,
                cells: vec![String::new()],
                objects: objects.len(),
                tables: tables.len(),
                passes: 2,
            }),
            objects,
            tables,
        }
    }

    #[test]
    fn a_backup_reads_back_as_written() {
        let text = sample().to_lines().unwrap();
        assert_eq!(text.lines().count(), 3);
        let back = Backup::from_lines(&text).unwrap();
        assert_eq!(back.tables, sample().tables);
        assert_eq!(back.objects[0].body, sample().objects[0].body);
    }

    #[test]
    fn a_cut_short_or_foreign_file_is_refused() {
        let text = sample().to_lines().unwrap();
        let cut: String = text.lines().take(2).map(|l| format!("{l}\n")).collect();
        let e = Backup::from_lines(&cut).unwrap_err();
        assert!(e.message.contains("cut short"), "{}", e.message);
        let e = Backup::from_lines("{\"namespaces\": []}\n").unwrap_err();
        assert!(e.message.contains("line 1"), "{}", e.message);
        let e = Backup::from_lines("").unwrap_err();
        assert!(e.message.contains("no header"), "{}", e.message);
        let newer = text.replace("\"backup_format\":1", "\"backup_format\":9");
        let e = Backup::from_lines(&newer).unwrap_err();
        assert!(e.message.contains("format 9"), "{}", e.message);
    }
}
