//! Checking a warehouse's catalog state, and repairing what is safe to repair, with no
//! server running (`lance-gateway admin fsck`). It reads every record through the same
//! store and catalog code the server uses, and repairs with the same steps recovery takes.
//!
//! What is checked, per cell (the warehouse, or each bucket in endpoint mode):
//! - every namespace's parent exists; every table's namespace exists; every record sits
//!   under the key its id names;
//! - every table's folder claim exists and is its own; no two tables share or nest a folder;
//! - every table whose folder holds data opens as a Lance dataset; a registered table has data;
//! - a record naming a folder of another warehouse (a moved or copied one);
//! - marks on records whose operation is gone (a rollback's leftover);
//! - unfinished operations (pending creates and renames, drops), with their age;
//! - claims no table or operation holds, and dataset folders no record points to.
//!
//! A check without `--repair` writes nothing (the admin opens a local store read-only).
//! Repair settles unfinished operations recovery would settle (older than the grace period,
//! or left by this node id in an earlier run), clears void marks, restores a missing claim
//! or namespace, and removes claims no one holds over folders without data. Every repair is
//! a conditional write on what was read, so an object that changed meanwhile is left alone.
//! Data is deleted only with `--delete-orphans`, and only after the folder is claimed for
//! the deletion (or its own unheld claim is found unchanged), so no create can take the
//! folder meanwhile. Problems that need a decision (two tables on one folder, a dataset
//! that does not open) are reported and left; a moved warehouse's records are pointed at
//! their folders here only with `--relocate`.
//!
//! The lists of claims and datasets are read before the unfinished operations, and those
//! before the records, so an operation that starts during the check is either seen as
//! unfinished or leaves no trace in the earlier lists.

use std::collections::{BTreeMap, HashSet};

use futures::StreamExt;

use serde::Serialize;

use super::Catalog;
use super::layout::Layout;
use super::log::Decision;
use super::names::key_segment_decode;
use super::records::*;
use crate::access::Ctx;
use crate::error::{Error, Result};
use crate::store::Condition;

/// What to repair.
#[derive(Clone, Copy, Debug, Default)]
pub struct Repair {
    pub repair: bool,
    pub delete_orphans: bool,
    pub relocate: bool,
}

/// One thing found.
#[derive(Clone, Debug, Serialize)]
pub struct Finding {
    /// A stable name for the kind of finding (`missing-claim`, `orphan-data`, ...).
    pub problem: &'static str,
    /// The object concerned: a table or namespace id, a store key, or a folder's URI.
    pub object: String,
    pub detail: String,
    /// Whether this run repaired it.
    pub repaired: bool,
    /// `problem`, or `note` for what is not wrong in itself: a leftover every reader
    /// already treats as absent (a void mark), or data no table points to (a deregistered
    /// table's data is kept on purpose).
    pub severity: &'static str,
}

/// What a check saw and found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    pub namespaces: usize,
    pub tables: usize,
    pub claims: usize,
    pub operations_in_flight: usize,
    pub datasets: usize,
    /// Dropped tables kept for undrop (their folders and claims are theirs).
    pub dropped_tables: usize,
    pub findings: Vec<Finding>,
}

impl Report {
    /// Problems that are still there after this run (notes do not count).
    pub fn left(&self) -> usize {
        self.findings
            .iter()
            .filter(|f| !f.repaired && f.severity == "problem")
            .count()
    }
}

const NOTES: &[&str] = &["void-mark", "orphan-data"];

/// Tables whose own checks run at once: a far store's latency is paid once a batch, not
/// once a table.
const CHECKS_AT_ONCE: usize = 16;

/// A finding before it is reported: problem, object, detail, whether repaired.
type Found = (&'static str, String, String, bool);

/// A read or repair of one object failed: what is reported.
fn failure(object: String, what: &str, e: Error) -> Found {
    let detail = match e.detail {
        Some(d) => format!("{what}: {} ({d})", e.message),
        None => format!("{what}: {}", e.message),
    };
    ("check-failed", object, detail, false)
}
const RESTORED: &str = "; repair makes it again, with no properties";

/// The id below its cell of a record key `<prefix><seg>/.../<seg>.json`.
fn rel_id(prefix: &str, key: &str) -> Option<Vec<String>> {
    key.strip_prefix(prefix)?
        .strip_suffix(".json")?
        .split('/')
        .map(key_segment_decode)
        .collect()
}

/// Folder `a` is folder `b` or lies inside it.
fn within(a: &str, b: &str) -> bool {
    a == b || (a.starts_with(b) && a[b.len()..].starts_with('/'))
}

/// One folder inside the other, either way.
fn overlap(a: &str, b: &str) -> bool {
    within(a, b) || within(b, a)
}

/// Data folders, sorted, asked whether a folder overlaps any of them in logarithmic time: a
/// warehouse of a million tables with data is checked without comparing every dataset
/// with every table.
struct FolderIndex<'a>(Vec<&'a str>);

impl<'a> FolderIndex<'a> {
    fn new(folders: impl Iterator<Item = &'a str>) -> Self {
        let mut sorted: Vec<&str> = folders.collect();
        sorted.sort_unstable();
        sorted.dedup();
        FolderIndex(sorted)
    }

    /// Whether `folder` is one of them, lies inside one, or holds one (`overlap`).
    fn overlaps(&self, folder: &str) -> bool {
        let mut above = folder;
        loop {
            if self.0.binary_search(&above).is_ok() {
                return true;
            }
            match above.rfind('/') {
                Some(cut) => above = &above[..cut],
                None => break,
            }
        }
        // Folders inside `folder` sort together, right from `folder/`.
        let inside = format!("{folder}/");
        let at = self.0.partition_point(|f| *f < inside.as_str());
        self.0.get(at).is_some_and(|f| f.starts_with(&inside))
    }
}

/// What the checks of the whole warehouse (shared folders, claims and datasets no table
/// holds) need of a table, once its own checks are done.
struct Kept {
    uid: Box<str>,
    data_key: Box<str>,
    id: Box<[String]>,
}

/// What a table's folder claim was found to be.
enum Claim {
    /// Its own (no finding), another table's, or unreadable.
    Found(Option<Found>),
    /// Missing: restored, or reported, in the walk's order (`restore_claim`).
    Missing,
}

/// What the unfinished operations left after the check hold: table uids, data folders and
/// namespaces being created, and the raw text of entries that could not be decoded.
#[derive(Default)]
struct Held {
    uids: HashSet<String>,
    folders: Vec<String>,
    namespaces: HashSet<Vec<String>>,
    opaque: String,
}

impl Held {
    fn table(&mut self, t: &TableRecord) {
        self.uids.insert(t.uid.clone());
        self.folders.push(t.data_key.clone());
    }

    fn entry(&mut self, entry: &Entry) {
        match entry {
            Entry::StagedTable(t) => self.table(t),
            Entry::StagedNamespace(n) => {
                self.namespaces.insert(n.id.clone());
            }
            Entry::Intent(i) => match &i.kind {
                IntentKind::CreateTable { record }
                | IntentKind::RenameTable { record, .. }
                | IntentKind::DropTable { record, .. }
                | IntentKind::UndropTable { record, .. } => self.table(record),
                IntentKind::CreateNamespace { record } => {
                    self.namespaces.insert(record.id.clone());
                }
                IntentKind::DropNamespace { .. } | IntentKind::ReplaceNamespace { .. } => {}
            },
            Entry::LegacyPending(p) => {
                self.uids.insert(p.uid.clone());
                if let Some(t) = &p.table {
                    self.table(t);
                }
            }
            Entry::LegacyDrop(d) => self.table(&d.table),
        }
    }

    fn holds_uid(&self, uid: &str) -> bool {
        self.uids.contains(uid) || self.opaque.contains(uid)
    }

    fn holds_folder(&self, folder: &str) -> bool {
        self.folders.iter().any(|f| overlap(folder, f)) || self.opaque.contains(folder)
    }
}

struct Cell<'a> {
    cat: &'a Catalog,
    cell: String,
    /// The id parts every id in this cell starts with (its bucket, in endpoint mode).
    base: Vec<String>,
    how: Repair,
    report: &'a mut Report,
}

impl Catalog {
    /// Checks the whole warehouse and repairs what `how` allows.
    pub async fn fsck(&self, how: Repair) -> Result<Report> {
        let mut report = Report::default();
        let cells: Vec<(String, Vec<String>)> = if self.layout.endpoint_mode() {
            self.list_catalog_buckets(&Ctx::internal(), None, None)
                .await?
                .items
                .into_iter()
                .map(|b| (format!("{b}/"), vec![b]))
                .collect()
        } else {
            vec![(String::new(), Vec::new())]
        };
        for (cell, base) in cells {
            Cell {
                cat: self,
                cell,
                base,
                how,
                report: &mut report,
            }
            .check()
            .await?;
        }
        if how.repair {
            match self.store.remove_leftovers(self.grace()).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(removed = n, "removed temporary files of killed writers"),
                Err(e) => tracing::warn!(error = %e, "could not remove temporary files"),
            }
        }
        Ok(report)
    }
}

impl Cell<'_> {
    fn find(&mut self, problem: &'static str, object: String, detail: String, repaired: bool) {
        let severity = if NOTES.contains(&problem) {
            "note"
        } else {
            "problem"
        };
        self.report.findings.push(Finding {
            problem,
            object,
            detail,
            repaired,
            severity,
        });
    }

    /// `object` (a namespace or table) whose namespace `parent` (`what`) does not exist:
    /// reported, and with repair the namespace and those missing above it made again.
    async fn missing_parent(
        &mut self,
        problem: &'static str,
        object: String,
        what: &str,
        parent: &[String],
        namespaces: &HashSet<Vec<String>>,
        restored: &mut HashSet<Vec<String>>,
    ) {
        if parent.is_empty() || namespaces.contains(parent) {
            return;
        }
        let repaired = self.restore_namespaces(parent, namespaces, restored).await;
        let detail = format!("{what} '{}' does not exist{RESTORED}", self.show(parent));
        self.find(problem, object, detail, repaired);
    }

    /// A read or repair of one object failed: reported, and the check goes on.
    fn failed(&mut self, object: String, what: &str, e: Error) {
        let (problem, object, detail, repaired) = failure(object, what, e);
        self.find(problem, object, detail, repaired);
    }

    fn show(&self, rel: &[String]) -> String {
        let mut id = self.base.clone();
        id.extend(rel.iter().cloned());
        self.cat.show(&id)
    }

    async fn check(mut self) -> Result<()> {
        let cat = self.cat;
        let dir = Layout::catalog_dir(&self.cell);

        // 1. What may turn out to be orphans, listed first (see the module's docs).
        let claims_prefix = format!("{dir}locations/");
        let claim_keys = cat.all_keys(&claims_prefix, false).await?;
        let datasets = self.datasets().await?;
        self.report.claims += claim_keys.len();
        self.report.datasets += datasets.len();

        // 2. Unfinished operations: settling them is what makes the rest consistent.
        let held = self.entries().await?;

        // 3. Namespaces.
        let ns_prefix = format!("{dir}ns/");
        let mut namespaces: HashSet<Vec<String>> = held
            .namespaces
            .iter()
            .filter_map(|id| id.get(self.base.len()..).map(<[String]>::to_vec))
            .collect();
        let mut seen = 0;
        for key in cat.all_keys(&ns_prefix, false).await? {
            let Some(rel) = rel_id(&ns_prefix, &key) else {
                self.find(
                    "misplaced-record",
                    key,
                    "not a namespace record's key".into(),
                    false,
                );
                continue;
            };
            match cat.read::<NamespaceRecord>(&key).await {
                Ok(Some((record, _))) => {
                    if record.id.get(self.base.len()..) != Some(&rel[..])
                        || !record.id.starts_with(&self.base)
                    {
                        self.find(
                            "misplaced-record",
                            key,
                            format!(
                                "holds namespace '{}', which belongs elsewhere",
                                cat.show(&record.id)
                            ),
                            false,
                        );
                        continue;
                    }
                    if let Some(mark) = &record.mark {
                        self.void_mark(mark, &record.id, false).await;
                    }
                    seen += 1;
                    namespaces.insert(rel);
                }
                Ok(None) => {}
                Err(e) => self.find("unreadable-record", key, e.message, false),
            }
        }
        self.report.namespaces += seen;
        let mut sorted: Vec<Vec<String>> = namespaces.iter().cloned().collect();
        sorted.sort();
        let mut restored: HashSet<Vec<String>> = HashSet::new();
        for rel in &sorted {
            let object = self.show(rel);
            self.missing_parent(
                "namespace-without-parent",
                object,
                "its parent namespace",
                &rel[..rel.len() - 1],
                &namespaces,
                &mut restored,
            )
            .await;
        }

        // 4. Tables, each checked as it is read; what the checks of the whole need of it is
        // kept (`Kept`), not its record, so a million tables fit in a few hundred MiB.
        let tables_prefix = Layout::all_tables_prefix(&self.cell);
        let mut tables: Vec<Kept> = Vec::new();
        let mut pages = std::pin::pin!(cat.key_pages(&tables_prefix, false));
        while let Some(keys) = pages.next().await.transpose()? {
            // The page's records read `CHECKS_AT_ONCE` at a time, looked at in key order.
            let records: Vec<(String, Result<Option<(TableRecord, String)>>)> =
                futures::stream::iter(keys)
                    .map(|key| async move {
                        let record = cat.read::<TableRecord>(&key).await;
                        (key, record)
                    })
                    .buffered(CHECKS_AT_ONCE)
                    .collect()
                    .await;
            let mut read: Vec<TableRecord> = Vec::with_capacity(records.len());
            for (key, record) in records {
                let record = match record {
                    Ok(Some((record, _))) => record,
                    Ok(None) => continue,
                    Err(e) => {
                        self.find("unreadable-record", key, e.message, false);
                        continue;
                    }
                };
                let placed = record
                    .id
                    .get(self.base.len()..)
                    .filter(|rel| !rel.is_empty() && record.id.starts_with(&self.base))
                    .map(|rel| Layout::table_key_of_rel(&self.cell, rel));
                if placed.as_deref() != Some(key.as_str())
                    || !record.data_key.starts_with(&self.cell)
                {
                    self.find(
                        "misplaced-record",
                        key,
                        format!(
                            "holds table '{}' with folder '{}', which belong elsewhere",
                            cat.show(&record.id),
                            record.data_key
                        ),
                        false,
                    );
                    continue;
                }
                let mut record = record;
                if let Some(mark) = &record.mark {
                    self.void_mark(mark, &record.id, true).await;
                }
                let uri = cat.layout.uri_of(&record.data_key);
                if record.location != uri {
                    let repaired = self.how.relocate && self.relocate(&key, &uri).await;
                    let detail = format!(
                        "its location {} is not its folder in this warehouse, {uri} (a moved \
                         or copied warehouse?); --repair --relocate points it there",
                        record.location
                    );
                    self.find("location-mismatch", cat.show(&record.id), detail, repaired);
                    // The data is checked where the folder is in this warehouse.
                    record.location = uri;
                }
                let rel = &record.id[self.base.len()..];
                self.missing_parent(
                    "table-without-namespace",
                    cat.show(&record.id),
                    "its namespace",
                    &rel[..rel.len() - 1],
                    &namespaces,
                    &mut restored,
                )
                .await;
                read.push(record);
            }
            // Each table's own checks, `CHECKS_AT_ONCE` tables at a time (a far store's
            // latency is not paid table after table), reported in the walk's order.
            let found: Vec<(Claim, Vec<Found>)> = futures::stream::iter(&read)
                .map(|t| self.check_table(t))
                .buffered(CHECKS_AT_ONCE)
                .collect()
                .await;
            for (record, (claim, found)) in read.into_iter().zip(found) {
                // A missing claim is restored here, in the walk's order, as when the tables
                // were checked one by one: of two tables on one folder, the first walked
                // gets the claim and the other is reported as the folder's other table.
                let claim = match claim {
                    Claim::Missing => Some(self.restore_claim(&record).await),
                    Claim::Found(found) => found,
                };
                for (problem, object, detail, repaired) in claim.into_iter().chain(found) {
                    self.find(problem, object, detail, repaired);
                }
                tables.push(Kept {
                    uid: record.uid.into(),
                    data_key: record.data_key.into(),
                    id: record.id.into(),
                });
            }
        }
        self.report.tables += tables.len();
        self.shared_folders(&tables);

        // 5. Claims and dataset folders no one holds.
        let uids: HashSet<&str> = tables.iter().map(|t| &*t.uid).collect();
        let mut unheld_claims: BTreeMap<String, (String, String)> = BTreeMap::new();
        // Read `CHECKS_AT_ONCE` at a time, looked at in key order.
        let mut claims = std::pin::pin!(
            futures::stream::iter(claim_keys)
                .map(|key| async move {
                    let claim = cat.read::<LocationClaim>(&key).await;
                    (key, claim)
                })
                .buffered(CHECKS_AT_ONCE)
        );
        while let Some((key, claim)) = claims.next().await {
            let (claim, etag) = match claim {
                Ok(Some(found)) => found,
                Ok(None) => continue,
                Err(e) => {
                    self.find("unreadable-record", key, e.message, false);
                    continue;
                }
            };
            if uids.contains(claim.uid.as_str()) || held.holds_uid(&claim.uid) {
                continue;
            }
            match datasets
                .iter()
                .find(|d| Layout::location_claim_key(&self.cell, d) == key)
            {
                // Reported with its dataset below; the claim goes with the data.
                Some(folder) => {
                    unheld_claims.insert(folder.clone(), (key, etag));
                }
                None => {
                    let repaired =
                        self.how.repair && matches!(cat.remove(&key, &etag).await, Ok(true));
                    self.find(
                        "orphan-claim",
                        key,
                        format!(
                            "a folder claim of table '{}' (uid {}) that no table or operation holds, over a folder without a dataset",
                            cat.show(&claim.table),
                            claim.uid
                        ),
                        repaired,
                    );
                }
            }
        }
        let table_folders = FolderIndex::new(tables.iter().map(|t| &*t.data_key));
        for folder in &datasets {
            let held_by_table = table_folders.overlaps(folder);
            if held_by_table || held.holds_folder(folder) {
                continue;
            }
            let claim = unheld_claims.remove(folder);
            let (repaired, note) = if self.how.delete_orphans {
                self.delete_orphan(folder, claim.as_ref()).await
            } else {
                (false, String::new())
            };
            self.find(
                "orphan-data",
                cat.layout.uri_of(folder),
                format!(
                    "a Lance dataset no table or operation points to (a deregistered table's data is kept on purpose); deleted only with --repair --delete-orphans{note}"
                ),
                repaired,
            );
        }
        Ok(())
    }

    /// Reports (and with repair, settles) every unfinished operation; returns what those
    /// left hold, so their claims, folders and namespaces are not taken for orphans.
    async fn entries(&mut self) -> Result<Held> {
        let cat = self.cat;
        let mut held = Held::default();
        // Dropped tables kept for undrop hold their folders and claims until purged.
        for key in cat
            .all_keys(&Layout::dropped_prefix(&self.cell), false)
            .await?
        {
            match cat.store.get(&key).await {
                Ok(Some(obj)) => match decode::<DroppedTable>(&key, &obj.body) {
                    Ok(dropped) => {
                        self.report.dropped_tables += 1;
                        held.table(&dropped.table);
                    }
                    Err(e) => {
                        self.find("unreadable-record", key, e.message, false);
                        held.opaque.push_str(&String::from_utf8_lossy(&obj.body));
                    }
                },
                Ok(None) => {}
                Err(e) => self.failed(key, "reading it", e.into()),
            }
        }
        let drops = Layout::drops_prefix(&self.cell);
        for (prefix, shallow) in [
            (Layout::all_pending_prefix(&self.cell), false),
            (drops.clone(), true),
        ] {
            for key in cat.all_keys(&prefix, shallow).await? {
                let obj = match cat.store.get(&key).await {
                    Ok(Some(obj)) => obj,
                    Ok(None) => continue,
                    Err(e) => {
                        self.failed(key, "reading it", e.into());
                        continue;
                    }
                };
                let entry = match Entry::decode(&key, Layout::entry_kind(&key), &obj.body) {
                    Ok(entry) => entry,
                    Err(e) => {
                        self.find("unreadable-record", key, e.message, false);
                        held.opaque.push_str(&String::from_utf8_lossy(&obj.body));
                        continue;
                    }
                };
                self.report.operations_in_flight += 1;
                let idle_s = now_ms().saturating_sub(entry.alive_at_ms()) / 1000;
                let age_s = now_ms().saturating_sub(entry.started_at_ms()) / 1000;
                // An intent a batch decides waits on that batch's record, whatever its age.
                let deciding = match &entry {
                    Entry::Intent(intent) => match intent.deciding_batch() {
                        Some(batch) => matches!(cat.decision(batch).await, Ok(Decision::Deciding))
                            .then(|| batch.to_string()),
                        None => None,
                    },
                    _ => None,
                };
                let settleable =
                    deciding.is_none() && (entry.is_aborted() || cat.settleable_entry(&entry));
                let waiting = match &deciding {
                    Some(batch) => format!("; decided by batch commit {batch}, which is still deciding"),
                    None if !settleable => "; within the grace period, so possibly live: settled by its gateway, or by repair once it is older".to_string(),
                    None => String::new(),
                };
                let mut detail = format!(
                    "{} (operation {}) by {}, started {age_s} s ago, last driven {idle_s} s ago{waiting}",
                    entry.name(),
                    entry.op_id(),
                    entry.owner().unwrap_or("a format-1 gateway"),
                );
                let mut repaired = false;
                if self.how.repair && settleable {
                    match cat.settle(&key, entry.clone(), &obj.etag).await {
                        Ok(_) => repaired = matches!(cat.store.get(&key).await, Ok(None)),
                        Err(e) => detail.push_str(&format!("; settling failed: {e}")),
                    }
                    if !repaired {
                        detail.push_str(
                            "; not settled (changed meanwhile, or another gateway settles it)",
                        );
                    }
                }
                if !repaired {
                    held.entry(&entry);
                }
                let problem = if key.starts_with(&drops) {
                    "unfinished-drop"
                } else {
                    "unfinished-operation"
                };
                self.find(problem, key, detail, repaired);
            }
        }
        Ok(held)
    }

    /// A mark whose operation is gone (the leftover of a rollback): reported, and cleared
    /// with repair. A mark whose operation is still recorded is that operation's, reported
    /// with it. Nothing is settled here: a check without repair changes nothing.
    async fn void_mark(&mut self, mark: &Mark, id: &[String], table: bool) {
        let cat = self.cat;
        match cat.read_entry(&mark.intent).await {
            Ok(Some((entry, _))) if entry.op_id() == mark.op_id => return,
            Ok(_) => {}
            Err(e) => return self.failed(cat.show(id), "reading the operation of its mark", e),
        }
        let mut repaired = false;
        if self.how.repair {
            let cleared = if table {
                cat.unmark_table(id, &mark.op_id).await
            } else {
                cat.unmark_namespace(id, &mark.op_id).await
            };
            repaired = cleared.is_ok();
        }
        self.find(
            "void-mark",
            cat.show(id),
            format!(
                "marked by operation {} whose intent is gone: the leftover of a rollback cut short, which every reader treats as no mark",
                mark.op_id
            ),
            repaired,
        );
    }

    /// With repair, makes namespace `rel` and any missing namespace above it again (empty
    /// properties): the tables under it become reachable, and nothing is deleted.
    async fn restore_namespaces(
        &mut self,
        rel: &[String],
        existing: &HashSet<Vec<String>>,
        restored: &mut HashSet<Vec<String>>,
    ) -> bool {
        if !self.how.repair {
            return false;
        }
        for depth in 1..=rel.len() {
            let part = &rel[..depth];
            if existing.contains(part) || restored.contains(part) {
                continue;
            }
            let mut id = self.base.clone();
            id.extend(part.iter().cloned());
            let record = NamespaceRecord {
                format_version: FORMAT_VERSION,
                id,
                uid: new_uid(),
                created_at_ms: now_ms(),
                properties: Default::default(),
                created_by: Some(self.cat.node().to_string()),
                mark: None,
                rev: new_uid(),
            };
            if self
                .cat
                .write_namespace(&record, Condition::IfAbsent)
                .await
                .is_err()
            {
                // Taken meanwhile, or the store refused: either way not repaired by us.
                return false;
            }
            restored.insert(part.to_vec());
        }
        true
    }

    /// Points the record at `key` to `uri`, its data folder in this warehouse.
    async fn relocate(&self, key: &str, uri: &str) -> bool {
        let Ok(Some((mut record, etag))) = self.cat.read::<TableRecord>(key).await else {
            return false;
        };
        record.location = uri.to_string();
        self.cat
            .write(key, encode(&record.revised()), Condition::IfMatch(etag))
            .await
            .is_ok()
    }

    /// Table `t`'s own checks (its claim, its data, then its commit log): what they found.
    /// Its data is looked at before its log is settled, as when the checks ran one by one.
    async fn check_table(&self, t: &TableRecord) -> (Claim, Vec<Found>) {
        let (claim, (data, log)) = tokio::join!(self.check_claim(t), async {
            let data = self.check_data(t).await;
            (data, self.check_log(t).await)
        });
        (claim, [data, log].into_iter().flatten().collect())
    }

    /// Table `t`'s folder claim, read (a missing one is restored by `restore_claim`).
    async fn check_claim(&self, t: &TableRecord) -> Claim {
        let cat = self.cat;
        let key = Layout::location_claim_key(&self.cell, &t.data_key);
        match cat.read::<LocationClaim>(&key).await {
            Ok(Some((claim, _))) => Claim::Found(self.claim_of_another(t, &claim)),
            Ok(None) => Claim::Missing,
            Err(e) => Claim::Found(Some(failure(
                cat.show(&t.id),
                "reading its folder claim",
                e,
            ))),
        }
    }

    /// A claim found on table `t`'s folder: the finding when it is another table's.
    fn claim_of_another(&self, t: &TableRecord, claim: &LocationClaim) -> Option<Found> {
        (claim.uid != t.uid).then(|| {
            (
                "claim-of-another",
                self.cat.show(&t.id),
                format!(
                    "its data folder {} is claimed by table '{}' (uid {})",
                    t.location,
                    self.cat.show(&claim.table),
                    claim.uid
                ),
                false,
            )
        })
    }

    /// Table `t`'s folder claim, found missing: reported, and written again (if absent still)
    /// under repair. When another table's claim was written first, that is what is reported.
    async fn restore_claim(&self, t: &TableRecord) -> Found {
        let cat = self.cat;
        let key = Layout::location_claim_key(&self.cell, &t.data_key);
        let claim = LocationClaim {
            format_version: FORMAT_VERSION,
            uid: t.uid.clone(),
            table: t.id.clone(),
        };
        let missing = (
            "missing-claim",
            cat.show(&t.id),
            format!("its data folder {} is not claimed", t.location),
        );
        if !self.how.repair {
            return (missing.0, missing.1, missing.2, false);
        }
        // Claimed as a create would: refused if a folder above or below is claimed.
        if cat
            .write(&key, encode(&claim), Condition::IfAbsent)
            .await
            .is_ok()
        {
            return (missing.0, missing.1, missing.2, true);
        }
        match cat.read::<LocationClaim>(&key).await {
            Ok(Some((found, _))) => self.claim_of_another(t, &found),
            _ => None,
        }
        .unwrap_or((missing.0, missing.1, missing.2, false))
    }

    /// A commit log left unsettled by a gateway that stopped (`log`): a committed version
    /// not yet published, or the lock of a batch that will not commit. Readers and writers
    /// settle it when they come; repair settles it now.
    async fn check_log(&self, t: &TableRecord) -> Option<Found> {
        let cat = self.cat;
        match cat.unsettled(t).await {
            Ok(None) => None,
            Ok(Some(what)) => {
                let repaired = self.how.repair && cat.settle_log(t, None).await.is_ok();
                Some(("unsettled-commit", cat.show(&t.id), what, repaired))
            }
            Err(e) => Some(failure(cat.show(&t.id), "reading its commit log", e)),
        }
    }

    async fn check_data(&self, t: &TableRecord) -> Option<Found> {
        let cat = self.cat;
        match cat.has_data(t).await {
            Ok(true) => cat.dataset_details(t).await.err().map(|e| {
                (
                    "unreadable-dataset",
                    cat.show(&t.id),
                    format!(
                        "its data folder {} does not open as a Lance dataset: {}",
                        t.location,
                        e.detail.as_deref().unwrap_or(&e.message)
                    ),
                    false,
                )
            }),
            Ok(false) if t.origin == "register" => Some((
                "missing-data",
                cat.show(&t.id),
                format!("registered at {}, which holds no Lance dataset", t.location),
                false,
            )),
            Ok(false) => None,
            Err(e) => Some(failure(cat.show(&t.id), "looking for its data", e)),
        }
    }

    /// Table `t` and table `other` on one folder: reported, for a person to decide.
    fn two_tables(&mut self, problem: &'static str, t: &Kept, how: &str, other: &Kept) {
        // Their locations, as the walk checked them: their folders in this warehouse.
        let detail = format!(
            "{how} that of table '{}' ({} and {})",
            self.cat.show(&other.id),
            self.cat.layout.uri_of(&t.data_key),
            self.cat.layout.uri_of(&other.data_key)
        );
        self.find(problem, self.cat.show(&t.id), detail, false);
    }

    fn shared_folders(&mut self, tables: &[Kept]) {
        let mut by_folder: BTreeMap<&str, &Kept> = BTreeMap::new();
        for t in tables {
            if let Some(other) = by_folder.insert(&t.data_key, t) {
                self.two_tables("shared-folder", t, "shares its data folder with", other);
            }
        }
        for t in tables {
            let mut above = &*t.data_key;
            while let Some(cut) = above.rfind('/') {
                above = &above[..cut];
                if let Some(outer) = by_folder.get(above) {
                    self.two_tables("nested-folder", t, "its data folder lies inside", outer);
                }
            }
        }
    }

    /// Deletes an orphan dataset: only under a claim no create can get past (its own
    /// unheld claim, found unchanged, or one taken for the deletion), and only if no claim
    /// lies below it. Returns whether it was deleted, and why not.
    async fn delete_orphan(
        &self,
        folder: &str,
        claim: Option<&(String, String)>,
    ) -> (bool, String) {
        let cat = self.cat;
        let below = Layout::location_claims_below(&self.cell, folder);
        match cat.store.list(&below, None, 1, false).await {
            Ok(page) if page.keys.is_empty() => {}
            Ok(_) => return (false, "; not deleted: a folder inside it is claimed".into()),
            Err(e) => return (false, format!("; not deleted: {e}")),
        }
        let result: Result<()> = async {
            match claim {
                Some((key, etag)) => {
                    match cat.read::<LocationClaim>(key).await? {
                        Some((_, now)) if &now == etag => {}
                        _ => return Err(Error::conflict("its claim changed during the check")),
                    }
                    cat.store.delete_prefix(&format!("{folder}/")).await?;
                    cat.remove(key, etag).await?;
                }
                None => {
                    let uid = format!("fsck-{}", new_uid());
                    let fsck = ["lance-gateway-fsck".to_string()];
                    match cat.claim_location(&self.cell, folder, &uid, &fsck).await? {
                        super::claims::Claim::Claimed => {}
                        _ => {
                            return Err(Error::conflict("the folder was claimed during the check"));
                        }
                    }
                    let deleted = cat.store.delete_prefix(&format!("{folder}/")).await;
                    cat.release_location(&self.cell, folder, &uid).await?;
                    deleted?;
                }
            }
            Ok(())
        }
        .await;
        match result {
            Ok(()) => (true, String::new()),
            Err(e) => (false, format!("; not deleted: {}", e.message)),
        }
    }

    /// The dataset folders of the cell: every folder holding `_versions/`, outside the
    /// catalog's own folder.
    ///
    /// Walked a page at a time, keeping only the folders: the cell's keys are not held. The
    /// catalog's folder, which in a warehouse of many tables holds most of its keys and
    /// never a dataset, is stepped over (the next page starts past its last possible key).
    async fn datasets(&self) -> Result<Vec<String>> {
        let dir = Layout::catalog_dir(&self.cell);
        let past_dir = format!("{dir}{}", char::MAX);
        let mut found: Vec<String> = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = self
                .cat
                .store()
                .list(&self.cell, after.as_deref(), super::PAGE, false)
                .await?;
            for key in &page.keys {
                if key.starts_with(&dir) {
                    continue;
                }
                if let Some(cut) = key.find("/_versions/") {
                    let folder = &key[..cut];
                    if found.last().map(String::as_str) != Some(folder)
                        && folder.len() > self.cell.len()
                    {
                        found.push(folder.to_string());
                    }
                }
            }
            match page.keys.last() {
                Some(last) if page.more => {
                    after = Some(if last.starts_with(&dir) {
                        past_dir.clone()
                    } else {
                        last.clone()
                    });
                }
                _ => break,
            }
        }
        found.dedup();
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_folder_index_answers_as_comparing_every_folder() {
        let held = [
            "wh/a/t1",
            "wh/a/t10",
            "wh/a/t1-x",
            "wh/b/deep/t2",
            "wh/c",
            "wh/d.lance",
        ];
        let index = FolderIndex::new(held.iter().copied());
        let asked = [
            "wh/a/t1",
            "wh/a/t1/inner",
            "wh/a/t1x",
            "wh/a/t",
            "wh/a",
            "wh",
            "wh/b",
            "wh/b/deep",
            "wh/b/deep/t2/_versions",
            "wh/b/deep/t3",
            "wh/c/any/thing",
            "wh/cc",
            "wh/d",
            "wh/d.lance/x",
            "other",
            "wh/a/t1-",
        ];
        for folder in asked {
            let naive = held.iter().any(|h| overlap(folder, h));
            assert_eq!(index.overlaps(folder), naive, "{folder}");
        }
        assert!(!FolderIndex::new(std::iter::empty()).overlaps("wh/a"));
    }
}
