//! Checking a warehouse's catalog state, and repairing what is safe to repair, with no
//! server running (`lance-gateway admin fsck`). It reads every record through the same
//! store and catalog code the server uses, and repairs with the same steps recovery takes.
//!
//! What is checked, per cell (the warehouse, or each bucket in endpoint mode):
//! - every namespace's parent exists; every table's namespace exists;
//! - every table's folder claim exists and is its own; no two tables share or nest a folder;
//! - every table whose folder holds data opens as a Lance dataset; a registered table has data;
//! - marks on records whose operation is gone (a rollback's leftover);
//! - unfinished operations (pending creates and renames, drops), with their age;
//! - claims no table or operation holds, and dataset folders no record points to.
//!
//! Repair (`--repair`) settles unfinished operations recovery would settle (older than the
//! grace period, or left by this node id in an earlier run), clears void marks, restores a
//! missing claim, and removes claims no one holds whose folders hold no data. It never
//! deletes data unless asked to (`--delete-orphans`): then dataset folders no record or
//! operation points to are deleted, with their claims. Problems that need a decision
//! (a table whose namespace is gone, two tables on one folder, a dataset that does not
//! open) are reported and left.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;

use super::Catalog;
use super::layout::Layout;
use super::names::key_segment_decode;
use super::records::*;
use crate::access::Ctx;
use crate::error::Result;
use crate::store::Condition;

const RESTORED: &str = "; repair makes it again, with no properties";

/// What to repair.
#[derive(Clone, Copy, Debug, Default)]
pub struct Repair {
    pub repair: bool,
    pub delete_orphans: bool,
}

/// One problem found.
#[derive(Clone, Debug, Serialize)]
pub struct Finding {
    /// A stable name for the kind of problem (`missing-claim`, `orphan-data`, ...).
    pub problem: &'static str,
    /// The object concerned: a table or namespace id, or a store key.
    pub object: String,
    pub detail: String,
    /// Whether `--repair` fixed it in this run.
    pub repaired: bool,
    /// `problem`, or `note` for a leftover that every reader already treats as absent
    /// (a void mark): reported and repaired, but not a reason to fail.
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

/// All keys under `prefix`, in order.
async fn list_all(cat: &Catalog, prefix: &str, shallow: bool) -> Result<Vec<String>> {
    let mut keys = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = cat
            .store
            .list(prefix, after.as_deref(), 1000, shallow)
            .await?;
        keys.extend(page.keys.iter().cloned());
        after = page.keys.last().cloned();
        if !page.more || after.is_none() {
            return Ok(keys);
        }
    }
}

/// The id below its cell of a record key `<prefix><seg>/.../<seg>.json`.
fn rel_id(prefix: &str, key: &str) -> Option<Vec<String>> {
    key.strip_prefix(prefix)?
        .strip_suffix(".json")?
        .split('/')
        .map(key_segment_decode)
        .collect()
}

/// `folder` is `other` or lies inside it.
fn within(folder: &str, other: &str) -> bool {
    folder == other || (folder.starts_with(other) && folder[other.len()..].starts_with('/'))
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
        let severity = if problem == "void-mark" {
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

    fn show(&self, rel: &[String]) -> String {
        let mut id = self.base.clone();
        id.extend(rel.iter().cloned());
        self.cat.show(&id)
    }

    async fn check(mut self) -> Result<()> {
        // 1. Unfinished operations first: settling them is what makes the rest consistent.
        let entries_text = self.entries().await?;
        let cat = self.cat;
        let dir = Layout::catalog_dir(&self.cell);

        // 2. Namespaces.
        let ns_prefix = format!("{dir}ns/");
        let mut namespaces: HashSet<Vec<String>> = HashSet::new();
        for key in list_all(cat, &ns_prefix, false).await? {
            let Some(rel) = rel_id(&ns_prefix, &key) else {
                self.find(
                    "unreadable-key",
                    key,
                    "not a namespace record key".into(),
                    false,
                );
                continue;
            };
            match cat.read::<NamespaceRecord>(&key).await {
                Ok(Some((record, _))) => {
                    if let Some(mark) = &record.mark {
                        self.void_mark(mark, &record.id, false).await?;
                    }
                    namespaces.insert(rel);
                }
                Ok(None) => {}
                Err(e) => self.find("unreadable-record", key, e.message, false),
            }
        }
        self.report.namespaces += namespaces.len();
        let mut sorted: Vec<&Vec<String>> = namespaces.iter().collect();
        sorted.sort();
        let mut restored: HashSet<Vec<String>> = HashSet::new();
        for rel in sorted {
            let parent = &rel[..rel.len() - 1];
            if !parent.is_empty() && !namespaces.contains(parent) {
                let repaired = self
                    .restore_namespaces(parent, &namespaces, &mut restored)
                    .await?;
                self.find(
                    "namespace-without-parent",
                    self.show(rel),
                    format!(
                        "its parent namespace '{}' does not exist{RESTORED}",
                        self.show(parent)
                    ),
                    repaired,
                );
            }
        }

        // 3. Tables.
        let tables_prefix = Layout::all_tables_prefix(&self.cell);
        let mut tables: Vec<TableRecord> = Vec::new();
        for key in list_all(cat, &tables_prefix, false).await? {
            match cat.read::<TableRecord>(&key).await {
                Ok(Some((mut record, _))) => {
                    if let Some(mark) = &record.mark {
                        self.void_mark(mark, &record.id, true).await?;
                    }
                    let uri = cat.layout.uri_of(&record.data_key);
                    if record.location != uri {
                        let repaired = self.how.repair && self.relocate(&key, &uri).await?;
                        self.find(
                            "location-mismatch",
                            cat.show(&record.id),
                            format!(
                                "its location {} is not its data folder in this warehouse, {uri} (a moved or copied warehouse?); repair points it there",
                                record.location
                            ),
                            repaired,
                        );
                        // The data is checked where the folder is in this warehouse.
                        record.location = uri;
                    }
                    tables.push(record);
                }
                Ok(None) => {}
                Err(e) => self.find("unreadable-record", key, e.message, false),
            }
        }
        self.report.tables += tables.len();
        for t in &tables {
            let rel = &t.id[self.base.len()..];
            let parent = &rel[..rel.len().saturating_sub(1)];
            if !parent.is_empty() && !namespaces.contains(parent) {
                let repaired = self
                    .restore_namespaces(parent, &namespaces, &mut restored)
                    .await?;
                self.find(
                    "table-without-namespace",
                    cat.show(&t.id),
                    format!(
                        "its namespace '{}' does not exist{RESTORED}",
                        self.show(parent)
                    ),
                    repaired,
                );
            }
            self.check_claim(t).await?;
            self.check_data(t).await?;
        }
        // Shared or nested folders.
        let mut by_folder: BTreeMap<&str, &TableRecord> = BTreeMap::new();
        for t in &tables {
            if let Some(other) = by_folder.insert(&t.data_key, t) {
                self.find(
                    "shared-folder",
                    cat.show(&t.id),
                    format!(
                        "shares its data folder {} with table '{}'",
                        t.location,
                        cat.show(&other.id)
                    ),
                    false,
                );
            }
        }
        for t in &tables {
            let mut above = t.data_key.as_str();
            while let Some(cut) = above.rfind('/') {
                above = &above[..cut];
                if let Some(outer) = by_folder.get(above) {
                    self.find(
                        "nested-folder",
                        cat.show(&t.id),
                        format!(
                            "its data folder {} lies inside that of table '{}'",
                            t.location,
                            cat.show(&outer.id)
                        ),
                        false,
                    );
                }
            }
        }

        // 4. Claims and dataset folders no one holds.
        let datasets = self.datasets().await?;
        self.report.datasets += datasets.len();
        let uids: HashSet<&str> = tables.iter().map(|t| t.uid.as_str()).collect();
        let claims_prefix = format!("{dir}locations/");
        let mut claimed_folders: HashMap<String, (String, String)> = HashMap::new();
        let dataset_by_claim: HashMap<String, &String> = datasets
            .iter()
            .map(|d| (Layout::location_claim_key(&self.cell, d), d))
            .collect();
        for key in list_all(cat, &claims_prefix, false).await? {
            self.report.claims += 1;
            let (claim, etag) = match cat.read::<LocationClaim>(&key).await {
                Ok(Some(found)) => found,
                Ok(None) => continue,
                Err(e) => {
                    self.find("unreadable-record", key, e.message, false);
                    continue;
                }
            };
            if uids.contains(claim.uid.as_str()) || entries_text.contains(&claim.uid) {
                continue;
            }
            match dataset_by_claim.get(&key) {
                Some(folder) => {
                    // The dataset is reported below, and the claim goes with it.
                    claimed_folders.insert((*folder).clone(), (key, etag));
                }
                None => {
                    let repaired = self.how.repair
                        && cat
                            .remove(&key, &etag)
                            .await
                            .map_err(crate::error::Error::from)?;
                    self.find(
                        "orphan-claim",
                        key,
                        format!(
                            "a folder claim of table '{}' (uid {}) that no table or operation holds; its folder holds no dataset",
                            cat.show(&claim.table),
                            claim.uid
                        ),
                        repaired,
                    );
                }
            }
        }
        for folder in &datasets {
            let held = tables.iter().any(|t| within(folder, &t.data_key))
                || entries_text.contains(folder.as_str());
            if held {
                continue;
            }
            let claim = claimed_folders.remove(folder);
            let mut repaired = false;
            if self.how.delete_orphans {
                cat.store.delete_prefix(&format!("{folder}/")).await?;
                if let Some((key, etag)) = &claim {
                    cat.remove(key, etag)
                        .await
                        .map_err(crate::error::Error::from)?;
                }
                repaired = true;
            }
            self.find(
                "orphan-data",
                cat.layout.uri_of(folder),
                format!(
                    "a Lance dataset no table record points to{}; deleted only with --delete-orphans",
                    if claim.is_some() {
                        " (its folder claim is left too)"
                    } else {
                        ""
                    }
                ),
                repaired,
            );
        }
        Ok(())
    }

    /// Reports (and with repair, settles) every unfinished operation; returns the text of
    /// those left, so claims and folders they hold are not taken for orphans.
    async fn entries(&mut self) -> Result<String> {
        let cat = self.cat;
        let mut left = String::new();
        for (prefix, shallow) in [
            (Layout::all_pending_prefix(&self.cell), false),
            (Layout::drops_prefix(&self.cell), true),
        ] {
            for key in list_all(cat, &prefix, shallow).await? {
                let Some(obj) = cat.store.get(&key).await? else {
                    continue;
                };
                let entry = match Entry::decode(&key, Layout::entry_kind(&key), &obj.body) {
                    Ok(entry) => entry,
                    Err(e) => {
                        self.find("unreadable-record", key, e.message, false);
                        left.push_str(&String::from_utf8_lossy(&obj.body));
                        continue;
                    }
                };
                self.report.operations_in_flight += 1;
                let age_s = now_ms().saturating_sub(entry.started_at_ms()) / 1000;
                let settleable = entry.is_aborted() || cat.settleable_entry(&entry);
                let detail = format!(
                    "{} (operation {}) by {}, started {age_s} s ago{}",
                    entry.name(),
                    entry.op_id(),
                    entry.owner().unwrap_or("a format-1 gateway"),
                    if settleable {
                        ""
                    } else {
                        "; younger than the grace period, so possibly live: settled by its gateway, or by repair once it is older"
                    }
                );
                let repaired = if self.how.repair && settleable {
                    cat.settle(&key, entry, &obj.etag).await?
                        && cat.store.get(&key).await?.is_none()
                } else {
                    false
                };
                if !repaired {
                    left.push_str(&String::from_utf8_lossy(&obj.body));
                }
                let problem = if key.starts_with(&Layout::drops_prefix(&self.cell)) {
                    "unfinished-drop"
                } else {
                    "unfinished-operation"
                };
                self.find(problem, key, detail, repaired);
            }
        }
        Ok(left)
    }

    /// A mark whose operation is gone (the leftover of a rollback): reported, and cleared
    /// with repair. A mark whose operation is still recorded is that operation's, reported
    /// with it. Nothing is settled here: a check without repair changes nothing.
    async fn void_mark(&mut self, mark: &Mark, id: &[String], table: bool) -> Result<()> {
        let cat = self.cat;
        if let Some((entry, _)) = cat.read_entry(&mark.intent).await?
            && entry.op_id() == mark.op_id
        {
            return Ok(());
        }
        if self.how.repair {
            if table {
                cat.unmark_table(id, &mark.op_id).await?;
            } else {
                cat.unmark_namespace(id, &mark.op_id).await?;
            }
        }
        self.find(
            "void-mark",
            cat.show(id),
            format!(
                "marked by operation {} whose intent is gone: the leftover of a rollback cut short, which every reader treats as no mark",
                mark.op_id
            ),
            self.how.repair,
        );
        Ok(())
    }

    /// With repair, makes namespace `rel` and any missing namespace above it again (empty
    /// properties): the tables under it become reachable, and nothing is deleted.
    async fn restore_namespaces(
        &mut self,
        rel: &[String],
        existing: &HashSet<Vec<String>>,
        restored: &mut HashSet<Vec<String>>,
    ) -> Result<bool> {
        if !self.how.repair {
            return Ok(false);
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
            match self.cat.write_namespace(&record, Condition::IfAbsent).await {
                Ok(_) | Err(crate::store::StoreError::PreconditionFailed) => {
                    restored.insert(part.to_vec());
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(true)
    }

    /// Points the record at `key` to `uri`, its data folder in this warehouse.
    async fn relocate(&self, key: &str, uri: &str) -> Result<bool> {
        let Some((mut record, etag)) = self.cat.read::<TableRecord>(key).await? else {
            return Ok(false);
        };
        record.location = uri.to_string();
        Ok(self
            .cat
            .write(key, encode(&record.revised()), Condition::IfMatch(etag))
            .await
            .is_ok())
    }

    async fn check_claim(&mut self, t: &TableRecord) -> Result<()> {
        let cat = self.cat;
        let key = Layout::location_claim_key(&self.cell, &t.data_key);
        match cat.read::<LocationClaim>(&key).await? {
            Some((claim, _)) if claim.uid == t.uid => {}
            Some((claim, _)) => self.find(
                "claim-of-another",
                cat.show(&t.id),
                format!(
                    "its data folder {} is claimed by table '{}' (uid {})",
                    t.location,
                    cat.show(&claim.table),
                    claim.uid
                ),
                false,
            ),
            None => {
                let claim = LocationClaim {
                    format_version: FORMAT_VERSION,
                    uid: t.uid.clone(),
                    table: t.id.clone(),
                };
                let repaired = self.how.repair
                    && cat
                        .write(&key, encode(&claim), Condition::IfAbsent)
                        .await
                        .is_ok();
                self.find(
                    "missing-claim",
                    cat.show(&t.id),
                    format!("its data folder {} is not claimed", t.location),
                    repaired,
                );
            }
        }
        Ok(())
    }

    async fn check_data(&mut self, t: &TableRecord) -> Result<()> {
        let cat = self.cat;
        if cat.has_data(t).await? {
            if let Err(e) = cat.dataset_details(t).await {
                self.find(
                    "unreadable-dataset",
                    cat.show(&t.id),
                    format!(
                        "its data folder {} does not open as a Lance dataset: {}",
                        t.location,
                        e.detail.as_deref().unwrap_or(&e.message)
                    ),
                    false,
                );
            }
        } else if t.origin == "register" {
            self.find(
                "missing-data",
                cat.show(&t.id),
                format!("registered at {}, which holds no Lance dataset", t.location),
                false,
            );
        }
        Ok(())
    }

    /// The dataset folders of the cell: every folder holding `_versions/`, outside the
    /// catalog's own folder.
    async fn datasets(&self) -> Result<Vec<String>> {
        let dir = Layout::catalog_dir(&self.cell);
        let mut found: Vec<String> = Vec::new();
        for key in list_all(self.cat, &self.cell, false).await? {
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
        found.dedup();
        Ok(found)
    }
}
