//! Versions, tags and branches, read from and written to the dataset itself (Lance keeps
//! tags under `_refs/tags/` and branches under `_refs/branches/`).

use std::collections::HashMap;

use lance::Dataset;
use lance_namespace::models::{BranchContents, TableVersion, TagContents};

use super::lance_error;
use crate::error::{Code, Error, Result};

/// The manifest path of `version` as the client's object store names it (relative to the
/// store's root: Lance reads it as given under managed versioning), in the folder and the
/// naming scheme of the dataset's current manifest (V1 `_versions/{v}.manifest`, V2
/// `_versions/{u64::MAX - v}` padded to 20 digits, so newer versions list first).
fn manifest_path(dataset: &Dataset, version: u64) -> String {
    let current = dataset.manifest_location();
    let here = current.path.as_ref();
    let folder = here.rsplit_once('/').map_or("", |(dir, _)| dir);
    let v1 = current
        .path
        .filename()
        .is_some_and(|f| f == format!("{}.manifest", current.version));
    let name = if v1 {
        format!("{version}.manifest")
    } else {
        format!("{:020}.manifest", u64::MAX - version)
    };
    if folder.is_empty() {
        name
    } else {
        format!("{folder}/{name}")
    }
}

fn table_version(dataset: &Dataset, v: &lance::dataset::Version) -> TableVersion {
    let here = dataset.manifest_location();
    let (size, e_tag) = if here.version == v.version {
        (here.size.map(|s| s as i64), here.e_tag.clone())
    } else {
        (None, None)
    };
    TableVersion {
        version: v.version as i64,
        manifest_path: manifest_path(dataset, v.version),
        manifest_size: size,
        e_tag,
        timestamp_millis: Some(v.timestamp.timestamp_millis()),
        metadata: Some(v.metadata.clone().into_iter().collect()),
    }
}

/// One page of the dataset's versions, oldest first unless `descending`, each with the
/// operation that made it (`metadata.operation`). The page token is the last version of the
/// page before. The versions are listed without reading their manifests, and only the page's
/// are read, with their transaction files. The newest alone, asked for with `limit=1`, reads
/// nothing (`dataset` holds it): Lance and LanceDB ask for it before every commit of a
/// managed table, and with `read_consistency_interval=0` before every read.
pub async fn list_versions(
    dataset: &Dataset,
    descending: bool,
    after: Option<&str>,
    limit: Option<usize>,
) -> Result<(Vec<TableVersion>, Option<String>)> {
    if descending && after.is_none_or(str::is_empty) && limit == Some(1) {
        // The newest version: the one `dataset` was just brought up to. Whether older ones
        // are left is not listed; the token may lead to an empty last page.
        let newest = dataset.version();
        let next = (newest.version > 1).then(|| newest.version.to_string());
        return Ok((vec![table_version(dataset, &newest)], next));
    }
    let mut numbers: Vec<u64> = dataset
        .version_refs()
        .await
        .map_err(lance_error)?
        .into_iter()
        .map(|r| r.version)
        .collect();
    if descending {
        numbers.reverse();
    }
    let after = match after.filter(|t| !t.is_empty()) {
        Some(token) => Some(
            token
                .parse::<u64>()
                .map_err(|_| Error::invalid(format!("bad page_token '{token}'")))?,
        ),
        None => None,
    };
    let rest = numbers.into_iter().filter(|v| match after {
        None => true,
        Some(a) if descending => *v < a,
        Some(a) => *v > a,
    });
    let limit = limit.filter(|l| *l > 0).unwrap_or(usize::MAX);
    let mut page: Vec<u64> = rest.take(limit.saturating_add(1)).collect();
    let next = if page.len() > limit {
        page.truncate(limit);
        page.last().map(u64::to_string)
    } else {
        None
    };
    let mut versions = Vec::with_capacity(page.len());
    for number in page {
        let (version, operation) = if number == dataset.version().version {
            (dataset.version(), operation_of(dataset).await)
        } else {
            match dataset.checkout_version(number).await {
                Ok(at) => (at.version(), operation_of(&at).await),
                // Removed since the listing (a cleanup): not a version any more.
                Err(lance::Error::NotFound { .. } | lance::Error::DatasetNotFound { .. }) => {
                    continue;
                }
                Err(e) => return Err(lance_error(e)),
            }
        };
        let mut listed = table_version(dataset, &version);
        if let Some(operation) = operation {
            listed
                .metadata
                .get_or_insert_default()
                .insert("operation".into(), operation);
        }
        versions.push(listed);
    }
    Ok((versions, next))
}

/// The operation that made the version `dataset` is at (`Append`, `Overwrite`, `Rewrite`
/// for a compaction, ...), from its transaction file; none if Lance kept no such file.
async fn operation_of(dataset: &Dataset) -> Option<String> {
    match dataset.read_transaction().await {
        Ok(Some(t)) => Some(t.operation.name().to_string()),
        _ => None,
    }
}

/// DescribeTableVersion: `dataset` already checked out at the version asked for.
pub fn describe_version(dataset: &Dataset) -> TableVersion {
    table_version(dataset, &dataset.version())
}

/// RestoreTable: the checked-out version becomes the newest. Answers the new version.
pub async fn restore(mut dataset: Dataset) -> Result<u64> {
    dataset.restore().await.map_err(lance_error)?;
    Ok(dataset.version().version)
}

fn tag_contents(t: &lance::dataset::refs::TagContents) -> TagContents {
    TagContents {
        branch: t.branch.clone(),
        version: t.version as i64,
        manifest_size: t.manifest_size as i64,
    }
}

/// Pages a name-keyed map: names in order, after `after`, at most `limit`.
fn page_of<T>(
    mut entries: Vec<(String, T)>,
    after: Option<&str>,
    limit: Option<usize>,
) -> (HashMap<String, T>, Option<String>) {
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    let after = after.filter(|a| !a.is_empty());
    let limit = limit.filter(|l| *l > 0).unwrap_or(usize::MAX);
    let rest: Vec<_> = entries
        .into_iter()
        .filter(|(name, _)| after.is_none_or(|a| name.as_str() > a))
        .collect();
    let next = if rest.len() > limit {
        Some(rest[limit - 1].0.clone())
    } else {
        None
    };
    (rest.into_iter().take(limit).collect(), next)
}

pub async fn list_tags(
    dataset: &Dataset,
    after: Option<&str>,
    limit: Option<usize>,
) -> Result<(HashMap<String, TagContents>, Option<String>)> {
    let tags = dataset.tags().list().await.map_err(lance_error)?;
    let entries = tags
        .iter()
        .map(|(name, t)| (name.clone(), tag_contents(t)))
        .collect();
    Ok(page_of(entries, after, limit))
}

pub async fn tag_version(dataset: &Dataset, tag: &str) -> Result<TagContents> {
    dataset
        .tags()
        .get(tag)
        .await
        .map(|t| tag_contents(&t))
        .map_err(|e| tag_error(e, tag))
}

/// A tag failure: a missing tag is TableTagNotFound whatever words Lance used.
fn tag_error(e: lance::Error, tag: &str) -> Error {
    let mapped = lance_error(e);
    match mapped.code {
        Code::TableTagNotFound | Code::TableVersionNotFound | Code::TableTagAlreadyExists => mapped,
        _ if mapped.message.contains("not found") || mapped.message.contains("not exist") => {
            Error::new(Code::TableTagNotFound, format!("tag '{tag}' not found"))
                .with_detail(mapped.message)
        }
        _ => mapped,
    }
}

/// Creates (or, with `update`, moves) a tag to `version` of `branch`.
pub async fn set_tag(
    dataset: &Dataset,
    tag: &str,
    version: i64,
    branch: Option<&str>,
    update: bool,
) -> Result<()> {
    if version < 0 {
        return Err(Error::invalid(format!(
            "version must not be negative, got {version}"
        )));
    }
    let version = version as u64;
    let reference: lance::dataset::refs::Ref = match branch.filter(|b| !b.is_empty()) {
        Some(branch) => (branch, version).into(),
        None => version.into(),
    };
    let tags = dataset.tags();
    if update {
        // Lance reports a missing tag on update in its own words; check first.
        tags.get(tag).await.map_err(|e| tag_error(e, tag))?;
        tags.update(tag, reference)
            .await
            .map_err(|e| tag_error(e, tag))
    } else {
        tags.create(tag, reference)
            .await
            .map_err(|e| tag_error(e, tag))
    }
}

pub async fn delete_tag(dataset: &Dataset, tag: &str) -> Result<()> {
    let tags = dataset.tags();
    tags.get(tag).await.map_err(|e| tag_error(e, tag))?;
    tags.delete(tag).await.map_err(|e| tag_error(e, tag))
}

pub async fn list_branches(
    dataset: &Dataset,
    after: Option<&str>,
    limit: Option<usize>,
) -> Result<(HashMap<String, BranchContents>, Option<String>)> {
    let branches = dataset.list_branches().await.map_err(lance_error)?;
    let entries = branches
        .into_iter()
        .map(|(name, b)| {
            (
                name,
                BranchContents {
                    parent_branch: b.parent_branch.clone(),
                    parent_version: b.parent_version as i64,
                    create_at: b.create_at as i64,
                    manifest_size: b.manifest_size as i64,
                    metadata: None,
                },
            )
        })
        .collect();
    Ok(page_of(entries, after, limit))
}

/// Creates branch `name` from `from_version` (default: the latest) of `from_branch`
/// (default: main). `dataset` is the table at `from_branch`.
pub async fn create_branch(
    mut dataset: Dataset,
    name: &str,
    from_branch: Option<&str>,
    from_version: Option<u64>,
) -> Result<()> {
    if name.trim().is_empty() || name == "main" {
        return Err(Error::invalid(format!("'{name}' cannot name a new branch")));
    }
    if dataset
        .list_branches()
        .await
        .map_err(lance_error)?
        .contains_key(name)
    {
        return Err(Error::new(
            Code::TableBranchAlreadyExists,
            format!("branch '{name}' already exists"),
        ));
    }
    let version = from_version.unwrap_or(dataset.version().version);
    let from = from_branch.filter(|b| !b.is_empty() && *b != "main");
    let reference: lance::dataset::refs::Ref = match from {
        Some(branch) => (branch, version).into(),
        None => version.into(),
    };
    dataset
        .create_branch(name, reference, None)
        .await
        .map(|_| ())
        .map_err(lance_error)
}

pub async fn delete_branch(mut dataset: Dataset, name: &str) -> Result<()> {
    if !dataset
        .list_branches()
        .await
        .map_err(lance_error)?
        .contains_key(name)
    {
        return Err(Error::new(
            Code::TableBranchNotFound,
            format!("branch '{name}' not found"),
        ));
    }
    dataset.delete_branch(name).await.map_err(lance_error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_of_names_continue_after_the_token() {
        let entries: Vec<(String, u8)> =
            ["c", "a", "b"].iter().map(|n| (n.to_string(), 0)).collect();
        let (first, next) = page_of(entries.clone(), None, Some(2));
        assert_eq!(first.len(), 2);
        assert_eq!(next.as_deref(), Some("b"));
        let (second, next) = page_of(entries.clone(), Some("b"), Some(2));
        assert_eq!(second.keys().collect::<Vec<_>>(), vec!["c"]);
        assert_eq!(next, None);
        assert_eq!(page_of(entries, None, None).0.len(), 3);
    }
}
