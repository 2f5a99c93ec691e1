//! Listings: the namespaces and tables of a namespace, and every table of the warehouse.
//! Pages go through the store in key order with start-after, and list in that order (a
//! name's key is its key segment then `.json`, so `t-1` comes before `t`); the page token is
//! the last name returned. A create or rename that has committed but is not published yet is
//! listed from its pending entry, so a listing never misses what readers already see; the
//! pending entries are read before the records (an entry goes only after its record is
//! published, so whatever the first read misses, the second sees). A listing is not a
//! snapshot: a page holds every name that existed throughout the request and no name that
//! did not exist at some moment during it.

use std::collections::HashSet;

use futures::future::join_all;

use super::layout::Layout;
use super::names::{self, Id, key_segment};
use super::records::*;
use super::{Catalog, PAGE};
use crate::access::Ctx;
use crate::error::{Error, Result};

/// A page of names or ids and the token for the next page, if any.
#[derive(Clone, Debug, Default)]
pub struct Listing {
    pub items: Vec<String>,
    pub next: Option<String>,
}

/// One name found by a listing: its sort key and what is shown.
struct Found {
    sort: String,
    shown: String,
}

impl Catalog {
    pub async fn list_namespaces(
        &self,
        ctx: &Ctx,
        id: &[String],
        token: Option<&str>,
        limit: Option<usize>,
    ) -> Result<Listing> {
        self.may_see_namespace(ctx, id)?;
        if id.is_empty() && self.layout.endpoint_mode() {
            return self.list_catalog_buckets(ctx, token, limit).await;
        }
        if self.find_namespace(id).await?.is_none() {
            return Err(Error::namespace_not_found(&self.show(id)));
        }
        let placed = self.layout.place(id)?;
        let prefix = Layout::namespaces_prefix(&placed);
        let arrivals = self
            .arrivals(&Layout::pending_prefix(&placed), false, ".ns.json", token)
            .await?;
        self.list_names(&prefix, token, limit, arrivals, |name, _, _| {
            let mut child = id.to_vec();
            child.push(name);
            let shown = self.sees_namespace(ctx, &child);
            async move { Ok(shown) }
        })
        .await
    }

    /// Endpoint mode root: the buckets that hold a catalog (that `ctx` may see), in name
    /// order.
    pub(crate) async fn list_catalog_buckets(
        &self,
        ctx: &Ctx,
        token: Option<&str>,
        limit: Option<usize>,
    ) -> Result<Listing> {
        let limit = limit.unwrap_or(usize::MAX);
        let buckets = self.store.list_buckets().await?;
        let mut out = Listing::default();
        for bucket in buckets
            .into_iter()
            .filter(|b| token.is_none_or(|t| b.as_str() > t))
        {
            if super::layout::validate_bucket(&bucket).is_err()
                || !self.sees_namespace(ctx, std::slice::from_ref(&bucket))
            {
                continue;
            }
            if self
                .read_namespace(std::slice::from_ref(&bucket))
                .await?
                .is_some()
            {
                if out.items.len() == limit {
                    out.next = out.items.last().cloned();
                    break;
                }
                out.items.push(bucket);
            }
        }
        Ok(out)
    }

    pub async fn list_tables(
        &self,
        ctx: &Ctx,
        id: &[String],
        token: Option<&str>,
        limit: Option<usize>,
        include_declared: bool,
    ) -> Result<Listing> {
        self.may_see_namespace(ctx, id)?;
        if id.is_empty() && self.layout.endpoint_mode() {
            // The endpoint root holds buckets, never tables.
            return Ok(Listing::default());
        }
        let placed = self.layout.place(id)?;
        let pending_prefix = Layout::pending_prefix(&placed);
        let (namespace, arrivals) = tokio::join!(
            self.find_namespace(id),
            self.arrivals(&pending_prefix, false, ".table.json", token)
        );
        if namespace?.is_none() {
            return Err(Error::namespace_not_found(&self.show(id)));
        }
        let prefix = Layout::tables_prefix(&placed);
        self.list_names(&prefix, token, limit, arrivals?, |name, key, record| {
            let mut table = id.to_vec();
            table.push(name);
            let shown = self.sees_table(ctx, &table);
            async move { Ok(shown && self.keep_table((key, record), include_declared).await?) }
        })
        .await
    }

    /// Whether a listed table is shown: every one with `include_declared`, else only those
    /// holding data.
    async fn keep_table(
        &self,
        found: (String, Option<TableRecord>),
        include_declared: bool,
    ) -> Result<bool> {
        if include_declared {
            return Ok(true);
        }
        let record = match found {
            (_, Some(record)) => record,
            (key, None) => match self.read::<TableRecord>(&key).await? {
                Some((record, _)) => record,
                None => return Ok(false),
            },
        };
        self.has_data(&record).await
    }

    /// The committed creates and renames among the entries under `prefix` whose names sort
    /// after `token` (a name, or for `recursive` listings a store key), as table or
    /// namespace names (or, when `recursive`, full pending keys). Usually there are none:
    /// entries live for the few milliseconds of an operation.
    async fn arrivals(
        &self,
        prefix: &str,
        recursive: bool,
        suffix: &str,
        token: Option<&str>,
    ) -> Result<Vec<(String, TableOrNamespace)>> {
        let page = self.store.list(prefix, None, PAGE, !recursive).await?;
        // Compared as the records' keys are (`<segment>.json`), the order pages follow.
        let after = token.map(|t| format!("{}.json", key_segment(t)));
        let wanted: Vec<&String> = page
            .keys
            .iter()
            .filter(|k| k.ends_with(suffix))
            .filter(|k| {
                recursive
                    || after.as_ref().is_none_or(|a| {
                        format!("{}.json", &k[prefix.len()..k.len() - suffix.len()]) > *a
                    })
            })
            .collect();
        let read = join_all(wanted.iter().map(|k| async move {
            let arriving = match self.read_entry(k).await? {
                Some((entry, _)) => self.visible_arrival(&entry).await?,
                None => None,
            };
            Ok::<_, Error>(arriving.map(|a| ((*k).clone(), a)))
        }))
        .await;
        let mut out = Vec::new();
        for found in read {
            if let Some(found) = found? {
                out.push(found);
            }
        }
        Ok(out)
    }

    /// What a pending entry makes visible before its record is published (or, for a
    /// batch's deregister, hides before its record is deleted).
    async fn visible_arrival(&self, entry: &Entry) -> Result<Option<TableOrNamespace>> {
        if let Entry::Intent(intent) = entry
            && let Some(batch) = intent.deciding_batch()
        {
            if !self.batch_committed(batch).await? {
                return Ok(None);
            }
            return Ok(match &intent.kind {
                IntentKind::CreateTable { record } => {
                    Some(TableOrNamespace::Table(Box::new(record.clone())))
                }
                IntentKind::DropTable { .. } => Some(TableOrNamespace::Departed),
                _ => None,
            });
        }
        Ok(match entry {
            // Only a batch's deregister waits at its table's pending key.
            Entry::Intent(Intent {
                state: IntentState::Committed,
                kind: IntentKind::DropTable { .. },
                ..
            }) => Some(TableOrNamespace::Departed),
            Entry::Intent(Intent {
                state: IntentState::Committed,
                kind: IntentKind::CreateNamespace { .. },
                ..
            }) => Some(TableOrNamespace::Namespace),
            Entry::Intent(Intent {
                state: IntentState::Committed,
                kind: IntentKind::CreateTable { record },
                ..
            }) => Some(TableOrNamespace::Table(Box::new(record.clone()))),
            Entry::Intent(Intent {
                state: IntentState::Committed,
                kind: IntentKind::RenameTable { from, record },
                op_id,
                ..
            }) => {
                if self.source_still_marked(from, op_id).await? {
                    None
                } else {
                    Some(TableOrNamespace::Table(Box::new(record.clone())))
                }
            }
            _ => None,
        })
    }

    /// Lists the names of records directly under `prefix`, starting after the name `token`,
    /// keeping those `keep` accepts, until `limit` are found; merges in `arrivals` (pending
    /// keys with what they will publish) that fall within the page.
    async fn list_names<F, Fut>(
        &self,
        prefix: &str,
        token: Option<&str>,
        limit: Option<usize>,
        arrivals: Vec<(String, TableOrNamespace)>,
        keep: F,
    ) -> Result<Listing>
    where
        F: Fn(String, String, Option<TableRecord>) -> Fut,
        Fut: std::future::Future<Output = Result<bool>>,
    {
        let limit = limit.unwrap_or(usize::MAX);
        let (departed, arrivals) = departures(arrivals, |key| {
            Layout::name_of(key, key_suffix(key))
                .map(|name| format!("{prefix}{}.json", key_segment(&name)))
        });
        let mut after = token.map(|t| format!("{prefix}{}.json", key_segment(t)));
        let mut found: Vec<Found> = Vec::new();
        let more = loop {
            let want = limit.saturating_sub(found.len()).clamp(1, PAGE);
            let page = self
                .store
                .list(prefix, after.as_deref(), want, true)
                .await?;
            for key in &page.keys {
                let Some(name) = Layout::name_of(key, ".json") else {
                    continue;
                };
                if departed.contains(key) {
                    continue;
                }
                if keep(name.clone(), key.clone(), None).await? {
                    // Sorted by key, the order the store lists in and start-after skips by.
                    found.push(Found {
                        sort: key.clone(),
                        shown: name,
                    });
                }
            }
            after = page.keys.last().cloned();
            if found.len() >= limit || !page.more {
                break page.more || found.len() > limit;
            }
        };
        // Arrivals beyond the last key read belong to a later page.
        let bound = more.then(|| found.last().map(|f| f.sort.clone())).flatten();
        for (key, arriving) in arrivals {
            let Some(name) = Layout::name_of(&key, key_suffix(&key)) else {
                continue;
            };
            let sort = format!("{prefix}{}.json", key_segment(&name));
            if bound.as_ref().is_some_and(|b| sort > *b) || found.iter().any(|f| f.sort == sort) {
                continue;
            }
            let record = match arriving {
                TableOrNamespace::Table(r) => Some(*r),
                TableOrNamespace::Namespace | TableOrNamespace::Departed => None,
            };
            if keep(name.clone(), String::new(), record).await? {
                found.push(Found { sort, shown: name });
            }
        }
        Ok(page_of(found, limit, more))
    }

    /// Every table in the warehouse, as full ids joined with `delimiter`, in key order.
    pub async fn list_all_tables(
        &self,
        ctx: &Ctx,
        delimiter: &str,
        token: Option<&str>,
        limit: Option<usize>,
        include_declared: bool,
    ) -> Result<Listing> {
        let limit = limit.unwrap_or(usize::MAX);
        let start: Option<Id> = match token {
            Some(t) => Some(names::split_id(t, delimiter)?),
            None => None,
        };
        let cells: Vec<String> = if self.layout.endpoint_mode() {
            let first = start.as_ref().and_then(|s| s.first().cloned());
            let buckets = self.list_catalog_buckets(ctx, None, None).await?.items;
            buckets
                .into_iter()
                .filter(|b| first.as_ref().is_none_or(|f| b >= f))
                .map(|b| format!("{b}/"))
                .collect()
        } else {
            vec![String::new()]
        };
        let mut found: Vec<Found> = Vec::new();
        let mut more = false;
        for cell in cells {
            let prefix = Layout::all_tables_prefix(&cell);
            let after_key: Option<String> = start.as_ref().and_then(|s| {
                let rel = if cell.is_empty() {
                    &s[..]
                } else if s.first().map(|b| format!("{b}/")) == Some(cell.clone()) {
                    &s[1..]
                } else {
                    return None;
                };
                (!rel.is_empty()).then(|| Layout::table_key_of_rel(&cell, rel))
            });
            let full_id = |rel: Id| {
                let mut full: Id = cell
                    .trim_end_matches('/')
                    .split('/')
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect();
                full.extend(rel);
                full
            };
            // Pending entries before records: an entry goes only after its record is
            // published, so what this misses of an arrival the record listing sees.
            let arrivals = self
                .arrivals(
                    &Layout::all_pending_prefix(&cell),
                    true,
                    ".table.json",
                    None,
                )
                .await?;
            let (departed, arrivals) = departures(arrivals, |key| {
                Layout::pending_table_rel_of(&cell, key)
                    .map(|rel| Layout::table_key_of_rel(&cell, &rel))
            });
            let mut after = after_key.clone();
            let first_in_cell = found.len();
            let cell_more = loop {
                let want = limit.saturating_sub(found.len()).clamp(1, PAGE);
                let page = self
                    .store
                    .list(&prefix, after.as_deref(), want, false)
                    .await?;
                for key in &page.keys {
                    let Some(rel) = Layout::table_rel_of(&cell, key) else {
                        continue;
                    };
                    if departed.contains(key) {
                        continue;
                    }
                    let full = full_id(rel);
                    if self.sees_table(ctx, &full)
                        && self
                            .keep_table((key.clone(), None), include_declared)
                            .await?
                    {
                        found.push(Found {
                            sort: key.clone(),
                            shown: full.join(delimiter),
                        });
                    }
                }
                after = page.keys.last().cloned();
                if found.len() >= limit || !page.more {
                    break page.more || found.len() > limit;
                }
            };
            // This cell's arrivals within the range read.
            let bound = cell_more
                .then(|| found.last().map(|f| f.sort.clone()))
                .flatten();
            for (key, arriving) in arrivals {
                let (Some(rel), TableOrNamespace::Table(record)) =
                    (Layout::pending_table_rel_of(&cell, &key), arriving)
                else {
                    continue;
                };
                let sort = Layout::table_key_of_rel(&cell, &rel);
                let in_range = after_key.as_ref().is_none_or(|a| sort > *a)
                    && bound.as_ref().is_none_or(|b| sort <= *b);
                if !in_range || found[first_in_cell..].iter().any(|f| f.sort == sort) {
                    continue;
                }
                let full = full_id(rel);
                if self.sees_table(ctx, &full)
                    && self
                        .keep_table((String::new(), Some(*record)), include_declared)
                        .await?
                {
                    found.push(Found {
                        sort,
                        shown: full.join(delimiter),
                    });
                }
            }
            found[first_in_cell..].sort_by(|a, b| a.sort.cmp(&b.sort));
            if found.len() >= limit || cell_more {
                more = true;
                break;
            }
        }
        Ok(page_of(found, limit, more))
    }
}

/// What an arrival will publish.
pub(crate) enum TableOrNamespace {
    Table(Box<TableRecord>),
    Namespace,
    /// A table a committed batch deregisters, whose record is not deleted yet: not listed.
    Departed,
}

/// Splits the record keys of departed tables (by `record_key`, from a pending key) from
/// the arrivals proper.
fn departures(
    arrivals: Vec<(String, TableOrNamespace)>,
    record_key: impl Fn(&str) -> Option<String>,
) -> (HashSet<String>, Vec<(String, TableOrNamespace)>) {
    let (departed, arrivals): (Vec<_>, Vec<_>) = arrivals
        .into_iter()
        .partition(|(_, a)| matches!(a, TableOrNamespace::Departed));
    let departed = departed
        .iter()
        .filter_map(|(key, _)| record_key(key))
        .collect();
    (departed, arrivals)
}

fn key_suffix(key: &str) -> &'static str {
    if key.ends_with(".ns.json") {
        ".ns.json"
    } else {
        ".table.json"
    }
}

/// Sorts what was found, cuts it to `limit`, and sets the token when more may follow.
fn page_of(mut found: Vec<Found>, limit: usize, more: bool) -> Listing {
    found.sort_by(|a, b| a.sort.cmp(&b.sort));
    let more = more || found.len() > limit;
    found.truncate(limit);
    Listing {
        next: if more {
            found.last().map(|f| f.shown.clone())
        } else {
            None
        },
        items: found.into_iter().map(|f| f.shown).collect(),
    }
}
