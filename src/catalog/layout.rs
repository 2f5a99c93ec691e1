//! Where everything lives on storage. This module is the one place that turns ids into
//! object keys and data locations; the layout it writes is documented in the README
//! ("Storage layout") for operators.
//!
//! A *cell* is one catalog: the whole warehouse for a directory or `s3://bucket/prefix`, or
//! one bucket in endpoint mode (`s3://`). Inside a cell, under `.lance-gateway/`:
//!
//! ```text
//! catalog.json                         the cell's own record (format version; in endpoint
//!                                      mode also the level-1 namespace's properties)
//! ns/<a>/<b>.json                      namespace [a, b] (one record per namespace)
//! tables/<a>/<b>/<t>.json              table [a, b, t]
//! pending/<a>/<t>.table.json           a create (the staged table record, or its committed
//!                                      intent) or a rename into [a, t], in flight
//! pending/<a>/<n>.ns.json              a create of namespace [a, n] in flight
//! drops/<op>.json                      a table drop or deregister, or a namespace drop, in
//!                                      flight (one per operation)
//! locations/<seg>/<seg>.lance.json     the claim on a table's data location
//! transactions-of/<a>/<t>/<tx id>     a transaction naming table [a, t] (an empty marker)
//! ```
//!
//! Each name is percent-encoded into one key segment (`names::key_segment`). Table data
//! lives outside `.lance-gateway/`, by default at `<ns...>/<table>.lance` within the cell.

use std::path::PathBuf;

use super::names::{Id, key_segment, key_segment_decode, path_segment};
use super::records::EntryKey;
use crate::error::{Error, Result};

pub const CATALOG_DIR: &str = ".lance-gateway";

/// The warehouse as configured.
#[derive(Clone, Debug)]
pub enum Warehouse {
    /// A local folder (absolute, canonical).
    Local(PathBuf),
    /// One bucket, with a key prefix that is empty or ends in `/`.
    S3Bucket { bucket: String, prefix: String },
    /// Every bucket on the endpoint; the first id part is the bucket.
    S3Endpoint,
    /// A Google Cloud Storage bucket (`gs`) or an Azure container (`az`), with a key prefix
    /// that is empty or ends in `/`.
    Cloud {
        scheme: &'static str,
        bucket: String,
        prefix: String,
    },
}

/// An id placed in its cell: the key prefix of the cell (empty, or `<bucket>/`) and the id's
/// parts below the cell.
#[derive(Clone, Debug)]
pub struct Placed<'a> {
    pub cell: String,
    pub rel: &'a [String],
}

#[derive(Clone, Debug)]
pub struct Layout {
    pub warehouse: Warehouse,
}

fn path_of(parts: &[String]) -> String {
    parts
        .iter()
        .map(|p| format!("{}/", key_segment(p)))
        .collect()
}

impl Layout {
    pub fn new(warehouse: Warehouse) -> Self {
        Layout { warehouse }
    }

    pub fn endpoint_mode(&self) -> bool {
        matches!(self.warehouse, Warehouse::S3Endpoint)
    }

    /// Places a namespace or table-parent id in its cell. In endpoint mode the id must name a
    /// bucket (at least one part).
    pub fn place<'a>(&self, id: &'a [String]) -> Result<Placed<'a>> {
        if self.endpoint_mode() {
            let (bucket, rel) = id.split_first().ok_or_else(|| {
                Error::invalid("in endpoint mode an id starts with a bucket name")
            })?;
            validate_bucket(bucket)?;
            Ok(Placed {
                cell: format!("{bucket}/"),
                rel,
            })
        } else {
            Ok(Placed {
                cell: String::new(),
                rel: id,
            })
        }
    }

    pub fn catalog_dir(cell: &str) -> String {
        format!("{cell}{CATALOG_DIR}/")
    }

    pub fn cell_record(cell: &str) -> String {
        format!("{}catalog.json", Self::catalog_dir(cell))
    }

    /// The record of a namespace whose id below its cell is `rel` (non-empty).
    pub fn namespace_key(p: &Placed) -> String {
        let (name, parent) = p
            .rel
            .split_last()
            .expect("namespace_key needs a non-empty id");
        format!(
            "{}ns/{}{}.json",
            Self::catalog_dir(&p.cell),
            path_of(parent),
            key_segment(name)
        )
    }

    /// The folder holding the records of the namespaces directly under `p`.
    pub fn namespaces_prefix(p: &Placed) -> String {
        format!("{}ns/{}", Self::catalog_dir(&p.cell), path_of(p.rel))
    }

    /// The record of table `name` in namespace `p`.
    pub fn table_key(p: &Placed, name: &str) -> String {
        format!("{}{}.json", Self::tables_prefix(p), key_segment(name))
    }

    pub fn tables_prefix(p: &Placed) -> String {
        format!("{}tables/{}", Self::catalog_dir(&p.cell), path_of(p.rel))
    }

    pub fn all_tables_prefix(cell: &str) -> String {
        format!("{}tables/", Self::catalog_dir(cell))
    }

    pub fn pending_prefix(p: &Placed) -> String {
        format!("{}pending/{}", Self::catalog_dir(&p.cell), path_of(p.rel))
    }

    pub fn pending_table_key(p: &Placed, name: &str) -> String {
        format!(
            "{}{}.table.json",
            Self::pending_prefix(p),
            key_segment(name)
        )
    }

    pub fn pending_namespace_key(p: &Placed, name: &str) -> String {
        format!("{}{}.ns.json", Self::pending_prefix(p), key_segment(name))
    }

    pub fn all_pending_prefix(cell: &str) -> String {
        format!("{}pending/", Self::catalog_dir(cell))
    }

    /// What an entry key holds, by its folder and suffix.
    pub fn entry_kind(key: &str) -> EntryKey {
        if key.ends_with(".table.json") {
            EntryKey::Table
        } else if key.ends_with(".ns.json") {
            EntryKey::Namespace
        } else {
            EntryKey::Drop
        }
    }

    /// Decodes a pending table key found under `all_pending_prefix(cell)` back to the id of
    /// the table it reserves, below the cell.
    pub fn pending_table_rel_of(cell: &str, key: &str) -> Option<Id> {
        let rest = key
            .strip_prefix(&Self::all_pending_prefix(cell))?
            .strip_suffix(".table.json")?;
        rest.split('/').map(key_segment_decode).collect()
    }

    pub fn transactions_prefix(cell: &str) -> String {
        format!("{}transactions/", Self::catalog_dir(cell))
    }

    pub fn transaction_key(cell: &str, stem: &str) -> String {
        format!("{}{stem}.json", Self::transactions_prefix(cell))
    }

    /// The folder of table `rel`'s transaction markers (`transactions-of/<a>/<t>/`): one
    /// empty object per transaction that names the table, keyed by the transaction's stem,
    /// so a table's transactions are found by listing its own folder (shallow: a table
    /// `[a, t, x]`'s markers sit one folder down) and not the whole cell's.
    pub fn table_transactions_prefix(cell: &str, rel: &[String]) -> String {
        format!(
            "{}transactions-of/{}",
            Self::catalog_dir(cell),
            path_of(rel)
        )
    }

    pub fn drops_prefix(cell: &str) -> String {
        format!("{}drops/", Self::catalog_dir(cell))
    }

    pub fn drop_key(cell: &str, op_id: &str) -> String {
        format!("{}{op_id}.json", Self::drops_prefix(cell))
    }

    /// The claim on the data folder `data_key` (a store key, below the cell). Claims are
    /// keyed by the folder's lower-case name, so no two tables' folders differ only in case:
    /// S3-compatible stores may match policy resources without regard to case (SeaweedFS
    /// does), and credentials scoped to one folder must not reach another.
    pub fn location_claim_key(cell: &str, data_key: &str) -> String {
        let rel = data_key[cell.len()..].to_lowercase();
        let segs: Vec<String> = rel.split('/').map(key_segment).collect();
        format!(
            "{}locations/{}.json",
            Self::catalog_dir(cell),
            segs.join("/")
        )
    }

    /// The folder of claims nested below `data_key`.
    pub fn location_claims_below(cell: &str, data_key: &str) -> String {
        let rel = data_key[cell.len()..].to_lowercase();
        let segs: Vec<String> = rel.split('/').map(key_segment).collect();
        format!("{}locations/{}/", Self::catalog_dir(cell), segs.join("/"))
    }

    /// The data folder the server picks for table `name` in namespace `p`:
    /// `<ns...>/<table>.lance`, with `suffix` (`-<hex>`) when the plain one is taken.
    pub fn default_data_key(p: &Placed, name: &str, suffix: &str) -> String {
        let mut key = p.cell.clone();
        for part in p.rel {
            key.push_str(&path_segment(part));
            key.push('/');
        }
        key.push_str(&path_segment(name));
        key.push_str(suffix);
        key.push_str(".lance");
        key
    }

    /// Decodes the name at the end of a record key (`.../<seg><suffix>`).
    pub fn name_of(key: &str, suffix: &str) -> Option<String> {
        let last = key.rsplit('/').next()?;
        key_segment_decode(last.strip_suffix(suffix)?)
    }

    /// Decodes a table key found under `all_tables_prefix(cell)` back to the id below the cell.
    pub fn table_rel_of(cell: &str, key: &str) -> Option<Id> {
        let rest = key
            .strip_prefix(&Self::all_tables_prefix(cell))?
            .strip_suffix(".json")?;
        rest.split('/').map(key_segment_decode).collect()
    }

    /// The key of a table found by id below its cell (inverse of `table_rel_of`).
    pub fn table_key_of_rel(cell: &str, rel: &[String]) -> String {
        let segs: Vec<String> = rel.iter().map(|p| key_segment(p)).collect();
        format!("{}{}.json", Self::all_tables_prefix(cell), segs.join("/"))
    }

    /// The URI a client uses for the data folder `data_key`.
    pub fn uri_of(&self, data_key: &str) -> String {
        match &self.warehouse {
            Warehouse::Local(root) => format!("file://{}/{}", root.display(), data_key),
            Warehouse::S3Bucket { bucket, prefix } => format!("s3://{bucket}/{prefix}{data_key}"),
            Warehouse::S3Endpoint => format!("s3://{data_key}"),
            Warehouse::Cloud {
                scheme,
                bucket,
                prefix,
            } => format!("{scheme}://{bucket}/{prefix}{data_key}"),
        }
    }

    /// Turns a client-given location into a store key, refusing anything outside the
    /// warehouse, with `.`/`..`/empty segments, or inside the catalog's own folder.
    /// A relative location is taken relative to the warehouse root.
    pub fn data_key_of(&self, location: &str, cell: &str) -> Result<String> {
        // A client's object store decodes percent-escapes (`%2e%2e` is `..`) and reads `?`
        // and `#` as the end of a path: such locations could point anywhere once decoded.
        if location
            .chars()
            .any(|c| matches!(c, '%' | '?' | '#' | '\\' | '*' | '$') || c.is_control())
        {
            // `*` and `$` too: a folder is named in the IAM policies of vended credentials,
            // where they are wildcards and variables.
            return Err(Error::invalid(format!(
                "location '{location}' holds '%', '?', '#', '\\', '*', '$' or a control character: send the plain path"
            )));
        }
        let location = location.trim_end_matches('/');
        let rel: String = match &self.warehouse {
            Warehouse::Local(root) => {
                let path = location.strip_prefix("file://").unwrap_or(location);
                if location.contains("://") && !location.starts_with("file://") {
                    return Err(outside(location, &self.root_uri()));
                }
                if path.starts_with('/') {
                    let root = root.to_string_lossy();
                    match path
                        .strip_prefix(root.as_ref())
                        .and_then(|r| r.strip_prefix('/'))
                    {
                        Some(rest) => rest.to_string(),
                        None => return Err(outside(location, &self.root_uri())),
                    }
                } else {
                    path.to_string()
                }
            }
            Warehouse::S3Bucket { bucket, prefix } | Warehouse::Cloud { bucket, prefix, .. } => {
                let scheme = match &self.warehouse {
                    Warehouse::Cloud { scheme, .. } => *scheme,
                    _ => "s3",
                };
                if let Some(rest) = location.strip_prefix(&format!("{scheme}://")) {
                    let full = format!("{bucket}/{prefix}");
                    match rest.strip_prefix(&full) {
                        Some(r) => r.to_string(),
                        None => return Err(outside(location, &self.root_uri())),
                    }
                } else if location.contains("://") || location.starts_with('/') {
                    return Err(outside(location, &self.root_uri()));
                } else {
                    location.to_string()
                }
            }
            Warehouse::S3Endpoint => {
                let rest = location.strip_prefix("s3://").unwrap_or(location);
                if location.contains("://") && !location.starts_with("s3://")
                    || rest.starts_with('/')
                {
                    return Err(outside(location, "s3://"));
                }
                rest.to_string()
            }
        };
        if rel.is_empty() {
            return Err(Error::invalid(format!(
                "location '{location}' is the warehouse root itself"
            )));
        }
        for seg in rel.split('/') {
            if seg.is_empty() || seg == "." || seg == ".." {
                return Err(Error::invalid(format!(
                    "location '{location}' has an empty, '.' or '..' path segment"
                )));
            }
        }
        if !rel.starts_with(cell) {
            return Err(Error::invalid(format!(
                "location '{location}' is not in the table's bucket '{}'",
                cell.trim_end_matches('/')
            )));
        }
        let in_cell = &rel[cell.len()..];
        if in_cell.is_empty() {
            return Err(Error::invalid(format!(
                "location '{location}' is a bucket root"
            )));
        }
        if in_cell == CATALOG_DIR || in_cell.starts_with(&format!("{CATALOG_DIR}/")) {
            return Err(Error::invalid(format!(
                "location '{location}' is inside the catalog's own folder"
            )));
        }
        Ok(rel)
    }

    /// The path a Lance client's object store gives the object at `key`: relative to the
    /// store's root, with no scheme, no bucket and no leading `/` (how Lance names manifests
    /// in CreateTableVersion and reads the paths it is answered).
    pub fn store_path_of(&self, key: &str) -> String {
        match &self.warehouse {
            Warehouse::Local(root) => {
                let root = root.to_string_lossy();
                let root = root.trim_matches('/');
                if root.is_empty() {
                    key.to_string()
                } else {
                    format!("{root}/{key}")
                }
            }
            Warehouse::S3Bucket { prefix, .. } | Warehouse::Cloud { prefix, .. } => {
                format!("{prefix}{key}")
            }
            Warehouse::S3Endpoint => key.split_once('/').map_or("", |(_, rest)| rest).to_string(),
        }
    }

    /// `path` as `store_path_of` gives it, also accepted as a full URI (`s3://bucket/…`,
    /// `file:///…`), which the spec's examples show.
    pub fn plain_store_path(path: &str) -> &str {
        if let Some(rest) = path
            .strip_prefix("s3://")
            .or_else(|| path.strip_prefix("gs://"))
            .or_else(|| path.strip_prefix("az://"))
        {
            rest.split_once('/').map_or("", |(_, p)| p)
        } else if let Some(rest) = path.strip_prefix("file://") {
            rest.trim_start_matches('/')
        } else {
            path
        }
    }

    /// Whether the store's ETags are the ones a Lance client's object store reports for the
    /// same object (S3 and Azure: the server's; a local folder: each side makes its own; GCS:
    /// the catalog's tag is the object's generation, which object_store reports as its
    /// version, not its ETag).
    pub fn shares_etags(&self) -> bool {
        !matches!(
            self.warehouse,
            Warehouse::Local(_) | Warehouse::Cloud { scheme: "gs", .. }
        )
    }

    pub fn root_uri(&self) -> String {
        match &self.warehouse {
            Warehouse::Local(root) => format!("file://{}", root.display()),
            Warehouse::S3Bucket { bucket, prefix } => format!("s3://{bucket}/{prefix}"),
            Warehouse::S3Endpoint => "s3://".to_string(),
            Warehouse::Cloud {
                scheme,
                bucket,
                prefix,
            } => format!("{scheme}://{bucket}/{prefix}"),
        }
    }
}

fn outside(location: &str, root: &str) -> Error {
    Error::invalid(format!(
        "location '{location}' is outside the warehouse {root}"
    ))
}

/// S3 bucket naming rules (the subset every S3-compatible store enforces).
pub fn validate_bucket(name: &str) -> Result<()> {
    let ok = (3..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.as_bytes()[name.len() - 1].is_ascii_alphanumeric()
        && !name.contains("..");
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "'{name}' is not a valid bucket name (3-63 of a-z, 0-9, '-', '.'; in endpoint mode the first id part is a bucket)"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(parts: &[&str]) -> Vec<String> {
        parts.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn keys_nest_by_namespace() {
        let layout = Layout::new(Warehouse::S3Bucket {
            bucket: "b".into(),
            prefix: "w/".into(),
        });
        let id = ids(&["a", "b c"]);
        let p = layout.place(&id).unwrap();
        assert_eq!(Layout::namespace_key(&p), ".lance-gateway/ns/a/b%20c.json");
        assert_eq!(Layout::tables_prefix(&p), ".lance-gateway/tables/a/b%20c/");
        assert_eq!(
            Layout::table_key(&p, "t.1"),
            ".lance-gateway/tables/a/b%20c/t%2E1.json"
        );
        assert_eq!(
            Layout::default_data_key(&p, "t", ""),
            "a/b_c-".to_string() + &path_segment("b c")[4..] + "/t.lance"
        );
        assert_eq!(layout.uri_of("a/t.lance"), "s3://b/w/a/t.lance");
    }

    #[test]
    fn endpoint_mode_places_ids_in_buckets() {
        let layout = Layout::new(Warehouse::S3Endpoint);
        let id = ids(&["bkt", "ml"]);
        let p = layout.place(&id).unwrap();
        assert_eq!(p.cell, "bkt/");
        assert_eq!(Layout::namespace_key(&p), "bkt/.lance-gateway/ns/ml.json");
        assert_eq!(Layout::default_data_key(&p, "emb", ""), "bkt/ml/emb.lance");
        assert_eq!(layout.uri_of("bkt/ml/emb.lance"), "s3://bkt/ml/emb.lance");
        assert!(layout.place(&ids(&["Bad_Bucket"])).is_err());
    }

    #[test]
    fn client_locations_are_validated() {
        let layout = Layout::new(Warehouse::S3Bucket {
            bucket: "b".into(),
            prefix: "w/".into(),
        });
        assert_eq!(
            layout.data_key_of("s3://b/w/x/t.lance/", "").unwrap(),
            "x/t.lance"
        );
        assert_eq!(layout.data_key_of("x/t.lance", "").unwrap(), "x/t.lance");
        for bad in [
            "s3://other/w/x",
            "s3://b/elsewhere/x",
            "s3://b/w/../x",
            "x/../../y",
            "s3://b/w/",
            "s3://b/w/.lance-gateway/x",
            "/abs",
            "gs://b/w/x",
            "s3://b/w/%2e%2e/x",
            "s3://b/w/x/%2E%2E/%2E%2E/y",
            "s3://b/w/.%2e/x",
            "s3://b/w/x?y",
            "s3://b/w/x#y",
        ] {
            assert!(layout.data_key_of(bad, "").is_err(), "{bad}");
        }
        let local = Layout::new(Warehouse::Local("/data/wh".into()));
        assert_eq!(local.data_key_of("file:///data/wh/a/t", "").unwrap(), "a/t");
        assert_eq!(local.data_key_of("/data/wh/a/t", "").unwrap(), "a/t");
        assert!(local.data_key_of("/data/whx/a", "").is_err());
        for bad in [
            "file:///data/wh/%2e%2e/evil",
            "file:///data/wh/%2E%2E/evil",
            "file:///data/wh/x/%2e%2e/%2e%2e/evil",
            "file:///data/wh/a%2Fb",
        ] {
            assert!(local.data_key_of(bad, "").is_err(), "{bad}");
        }
        let ep = Layout::new(Warehouse::S3Endpoint);
        assert_eq!(ep.data_key_of("s3://bkt/x/t", "bkt/").unwrap(), "bkt/x/t");
        assert!(ep.data_key_of("s3://other/x/t", "bkt/").is_err());
    }
}
