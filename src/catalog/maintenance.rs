//! What the catalog keeps for table maintenance: each table's effective policy (the
//! defaults, overridden down its namespace tree and by its own properties), and one
//! leasable record per table (`maintenance/<table uid>.json` in its cell) that says who is
//! maintaining it now, if anyone, and when each task last ran. The record is keyed by the
//! table's uid, so a table renamed keeps its history and a new table of an old name starts
//! afresh; it goes when the table does.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use super::Catalog;
use super::layout::Layout;
use super::leases::{Lease, Leased, Taken};
use super::policy::Policy;
use super::records::{Properties, TableRecord};
use crate::error::Result;

/// The maintenance tasks, by the names records, metrics, properties and flags use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Task {
    Compaction,
    Index,
    Cleanup,
}

impl Task {
    pub const ALL: [Task; 3] = [Task::Compaction, Task::Index, Task::Cleanup];

    pub fn name(self) -> &'static str {
        match self {
            Task::Compaction => "compaction",
            Task::Index => "index",
            Task::Cleanup => "cleanup",
        }
    }

    /// The operation its transactions record.
    pub fn operation(self) -> &'static str {
        match self {
            Task::Compaction => "compact",
            Task::Index => "update_indices",
            Task::Cleanup => "cleanup_versions",
        }
    }

    pub fn parse(name: &str) -> Option<Task> {
        Task::ALL
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(name.trim()))
    }
}

/// The last run of one task on a table.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LastRun {
    pub at_ms: u64,
    /// `succeeded` or `failed`.
    pub outcome: String,
    /// The transaction that ran it (DescribeTransaction answers it).
    pub transaction_id: String,
    /// The table's version it started from and (if it made one) the version it made.
    pub version_before: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version_after: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A table's maintenance history: the last run of each task, by task name.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Upkeep {
    #[serde(default)]
    pub table: Vec<String>,
    #[serde(default)]
    pub last: BTreeMap<String, LastRun>,
    /// The transaction of a compaction running on the Ray cluster under this lease: a
    /// gateway that takes the lease after its holder stopped adopts the job (`maintain`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_ray: Option<String>,
}

impl Upkeep {
    pub fn last_run(&self, task: Task) -> Option<&LastRun> {
        self.last.get(task.name())
    }
}

impl Layout {
    pub fn maintenance_prefix(cell: &str) -> String {
        format!("{}maintenance/", Self::catalog_dir(cell))
    }

    pub fn maintenance_key(cell: &str, table_uid: &str) -> String {
        format!("{}{table_uid}.json", Self::maintenance_prefix(cell))
    }

    /// The lease on a cell's maintenance sweep (`leases::Spaced`).
    pub fn maintenance_sweep_key(cell: &str) -> String {
        format!("{}maintenance-sweep.json", Self::catalog_dir(cell))
    }
}

impl Catalog {
    fn maintenance_key_of(&self, record: &TableRecord) -> Result<String> {
        Ok(Layout::maintenance_key(
            &self.cell_of(&record.id)?,
            &record.uid,
        ))
    }

    /// The table's policy: the defaults, then each namespace above it from the root down,
    /// then its own properties.
    pub async fn table_policy(&self, record: &TableRecord) -> Result<Policy> {
        self.namespaces_policy(&record.id)
            .await?
            .resolve([&record.properties])
    }

    /// The policy of the namespaces above table `id`: the defaults, then each namespace from
    /// the root down (read side by side).
    pub(crate) async fn namespaces_policy(&self, id: &[String]) -> Result<Policy> {
        let parent = &id[..id.len().saturating_sub(1)];
        let reads = (1..=parent.len()).map(|n| self.find_namespace(&parent[..n]));
        let namespaces = futures::future::try_join_all(reads).await?;
        let layers: Vec<&Properties> = namespaces
            .iter()
            .flatten()
            .map(|ns| &ns.properties)
            .collect();
        self.maintenance.resolve(layers)
    }

    /// The table's maintenance record, if any task ever ran on it.
    pub async fn upkeep(&self, record: &TableRecord) -> Result<Option<Leased<Upkeep>>> {
        let key = self.maintenance_key_of(record)?;
        Ok(self.read_leased::<Upkeep>(&key).await?.map(|(r, _)| r))
    }

    /// Takes the lease on maintaining the table, for `work`.
    pub async fn take_upkeep(
        &self,
        record: &TableRecord,
        work: &str,
    ) -> Result<std::result::Result<Lease<Upkeep>, Taken>> {
        let key = self.maintenance_key_of(record)?;
        self.take_lease(&key, work).await
    }

    /// The ids of every table in the warehouse (published records only), for sweeps.
    pub async fn all_table_ids(&self) -> Result<Vec<Vec<String>>> {
        let mut ids = Vec::new();
        for cell in self.cells().await? {
            ids.extend(self.table_ids_in(&cell).await?);
        }
        Ok(ids)
    }

    /// The ids of the tables of one cell (published records only).
    pub async fn table_ids_in(&self, cell: &str) -> Result<Vec<Vec<String>>> {
        let base: Vec<String> = cell
            .strip_suffix('/')
            .map(|b| vec![b.to_string()])
            .unwrap_or_default();
        let mut ids = Vec::new();
        for key in self
            .all_keys(&Layout::all_tables_prefix(cell), false)
            .await?
        {
            if let Some(rel) = Layout::table_rel_of(cell, &key) {
                let mut id = base.clone();
                id.extend(rel);
                ids.push(id);
            }
        }
        Ok(ids)
    }

    /// The ETags of a cell's namespace records, which `swept_tables_page` folds into each
    /// table's fingerprint (their properties make its policy). One paged listing.
    pub async fn swept_namespaces(&self, cell: &str) -> Result<HashMap<String, String>> {
        Ok(self
            .all_keys_with_etags(&format!("{}ns/", Layout::catalog_dir(cell)))
            .await?
            .into_iter()
            .collect())
    }

    /// One page of a cell's tables as a sweep sees them, after the table key `after`: each
    /// id with a fingerprint of everything its maintenance depends on in the catalog (its
    /// record's ETag and those of the namespaces above it, from `namespaces`), and the key
    /// the next page starts after (`None` after the last). A fingerprint unchanged since a
    /// look means nothing in the catalog changed the table's record or policy meanwhile.
    /// Page by page, so a sweep holds one page of a warehouse of any size.
    pub async fn swept_tables_page(
        &self,
        cell: &str,
        namespaces: &HashMap<String, String>,
        after: Option<&str>,
    ) -> Result<(Vec<(Vec<String>, u64)>, Option<String>)> {
        use std::hash::{Hash, Hasher};
        let base: Vec<String> = cell
            .strip_suffix('/')
            .map(|b| vec![b.to_string()])
            .unwrap_or_default();
        let page = self
            .store
            .list_with_etags(&Layout::all_tables_prefix(cell), after, super::PAGE, false)
            .await?;
        let next = page.keys.last().filter(|_| page.more).cloned();
        let mut out = Vec::with_capacity(page.keys.len());
        for (key, etag) in page.keys.iter().zip(&page.etags) {
            let Some(rel) = Layout::table_rel_of(cell, key) else {
                continue;
            };
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            etag.hash(&mut hasher);
            for n in 1..rel.len() {
                let placed = super::layout::Placed {
                    cell: cell.to_string(),
                    rel: &rel[..n],
                };
                namespaces
                    .get(&Layout::namespace_key(&placed))
                    .hash(&mut hasher);
            }
            let mut id = base.clone();
            id.extend(rel);
            out.push((id, hasher.finish()));
        }
        Ok((out, next))
    }

    /// Removes a table's maintenance record (the table is gone).
    pub(crate) async fn forget_upkeep(&self, record: &TableRecord) -> Result<()> {
        let key = self.maintenance_key_of(record)?;
        self.remove_leased(&key).await
    }
}
