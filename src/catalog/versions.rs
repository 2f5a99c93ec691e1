//! Managed versioning (spec §2.3 and §6.3): with `--managed-versioning` the gateway answers
//! `managed_versioning: true`, and Lance clients then commit every version through
//! CreateTableVersion. The client writes its manifest under a staging name
//! (`_versions/<final name>-<uuid>`); the gateway checks that it belongs to this table and
//! follows the latest version, commits it in the table's commit log (`log`) and publishes it
//! under its final name.
//!
//! Managed readers are answered from the log, settled first; storage stays the truth for
//! versions made around it (unmanaged writers; the gateway's own data operations and
//! maintenance commit through it, `own_commits`), so a table can be switched between managed
//! and unmanaged at any time.
//!
//! Invariants:
//! - A version is committed only if it follows the newer of the log's head and storage's
//!   newest manifest (or is the first of its branch): no holes.
//! - Committing is a write conditional on the head read, so of two writers of version N
//!   through the catalog exactly one wins; the other gets ConcurrentModification (code 14),
//!   unless it sent the same bytes (a retried request), which succeeds.
//! - The staging manifest must be in the table's own `_versions/` folder (of the branch
//!   named) and be a staging name of the version committed: the gateway, which holds the
//!   broad credentials, copies nothing from elsewhere in the bucket.

use bytes::Bytes;

use super::Catalog;
use super::records::TableRecord;
use crate::access::{Ctx, Level};
use crate::error::{Code, Error, Result};
use crate::store::Condition;

/// How manifests are named (Lance's `ManifestNamingScheme`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NamingScheme {
    /// `_versions/{version}.manifest`
    V1,
    /// `_versions/{u64::MAX - version}.manifest`, 20 digits, so newer versions list first.
    V2,
}

impl NamingScheme {
    pub fn parse(name: Option<&str>) -> Result<Self> {
        match name.map(str::to_ascii_uppercase).as_deref() {
            None | Some("") | Some("V2") => Ok(NamingScheme::V2),
            Some("V1") => Ok(NamingScheme::V1),
            Some(other) => Err(Error::invalid(format!(
                "unknown naming_scheme '{other}': use V1 or V2"
            ))),
        }
    }

    pub fn file_name(self, version: u64) -> String {
        match self {
            NamingScheme::V1 => format!("{version}.manifest"),
            NamingScheme::V2 => format!("{:020}.manifest", u64::MAX - version),
        }
    }
}

/// The version a final manifest name holds, in either scheme; `None` for anything else
/// (staging manifests, transaction files).
pub fn version_of_file(name: &str) -> Option<u64> {
    let stem = name.strip_suffix(".manifest")?;
    if stem.is_empty() || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = stem.parse().ok()?;
    Some(if stem.len() == 20 { u64::MAX - n } else { n })
}

/// A version a client asks to commit (CreateTableVersion).
#[derive(Clone, Debug)]
pub struct NewVersion {
    pub version: i64,
    /// The staging manifest, as the client's object store names it.
    pub manifest_path: String,
    pub manifest_size: Option<i64>,
    /// The staged manifest's ETag as the client's object store reported it.
    pub e_tag: Option<String>,
    pub naming_scheme: Option<String>,
    pub branch: Option<String>,
}

/// What a CreateTableVersion names, checked (`Catalog::staging_of`).
#[derive(Clone, Debug)]
pub struct Staging {
    pub version: u64,
    /// `None` for main.
    pub branch: Option<String>,
    /// The versions folder (a store key ending in `/`), the staged manifest's file name in
    /// it, and the final one's.
    pub dir: String,
    pub staged: String,
    pub manifest: String,
    /// Whether the folder is a branch's, whose first version follows the one it was made
    /// from.
    pub first_of_branch: bool,
}

/// Checks BatchDeleteTableVersions' ranges (`[start, end)`, `end` -1 for open).
pub(crate) fn check_ranges(ranges: &[(i64, i64)]) -> Result<()> {
    if ranges.is_empty() {
        return Err(Error::invalid("ranges must name at least one range"));
    }
    for (start, end) in ranges {
        if *start < 0 || (*end != -1 && end < start) {
            return Err(Error::invalid(format!(
                "bad version range [{start}, {end})"
            )));
        }
    }
    Ok(())
}

/// A version as published.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CommittedVersion {
    pub version: u64,
    /// The final manifest, as the client's object store names it.
    pub manifest_path: String,
    pub size: u64,
    /// Only where the client's object store reports the same ETags (S3).
    pub e_tag: Option<String>,
}

/// A branch name as Lance keeps it: `/`-separated segments, none empty, `.` or `..`.
fn check_branch(branch: &str) -> Result<()> {
    let bad_char = branch
        .chars()
        .any(|c| c.is_control() || matches!(c, '\\' | '%' | '?' | '#' | '*' | '$'));
    if bad_char
        || branch
            .split('/')
            .any(|seg| seg.is_empty() || seg == "." || seg == "..")
    {
        return Err(Error::invalid(format!("bad branch name '{branch}'")));
    }
    Ok(())
}

/// The key of the `_versions/` folder of `branch` (main when `None`) of a table.
pub(crate) fn versions_dir(record: &TableRecord, branch: Option<&str>) -> Result<String> {
    match branch.filter(|b| !b.is_empty() && *b != "main") {
        None => Ok(format!("{}/_versions/", record.data_key)),
        Some(branch) => {
            check_branch(branch)?;
            Ok(format!("{}/tree/{branch}/_versions/", record.data_key))
        }
    }
}

fn version_number(version: i64) -> Result<u64> {
    u64::try_from(version)
        .ok()
        .filter(|v| *v >= 1 && *v < u64::MAX)
        .ok_or_else(|| Error::invalid(format!("version {version} is not a valid version number")))
}

/// The operation a CreateTableVersion's idempotency key is claimed for.
pub const VERSION_OP: &str = "create_table_version";

fn conflict(message: String) -> Error {
    Error::new(Code::ConcurrentModification, message)
}

impl Catalog {
    /// The newest version published in `dir`, or `None` when it holds none.
    pub(crate) async fn latest_published(&self, dir: &str) -> Result<Option<u64>> {
        let mut after: Option<String> = None;
        let mut latest = None;
        loop {
            let page = self
                .store
                .list(dir, after.as_deref(), super::PAGE, true)
                .await?;
            for key in &page.keys {
                let name = &key[dir.len()..];
                if let Some(v) = version_of_file(name) {
                    // V2 names list newest first: the first one is the answer.
                    if name.len() == NamingScheme::V2.file_name(0).len() {
                        return Ok(Some(latest.map_or(v, |l: u64| l.max(v))));
                    }
                    latest = Some(latest.map_or(v, |l: u64| l.max(v)));
                }
            }
            if !page.more {
                return Ok(latest);
            }
            after = page.keys.last().cloned();
        }
    }

    /// Checks what a CreateTableVersion (alone or in a batch) names, before anything is
    /// read: the version number, the naming scheme, and that the manifest is a staging name
    /// of that version in the table's own versions folder (of the branch named).
    pub(crate) fn staging_of(&self, record: &TableRecord, req: &NewVersion) -> Result<Staging> {
        let version = version_number(req.version)?;
        let scheme = NamingScheme::parse(req.naming_scheme.as_deref())?;
        let dir = versions_dir(record, req.branch.as_deref())?;
        let final_name = scheme.file_name(version);

        // The staging manifest: `<dir>/<final name>-<suffix>`, nothing else.
        let dir_path = self.layout.store_path_of(&dir);
        let given = super::layout::Layout::plain_store_path(&req.manifest_path);
        let in_dir = given.strip_prefix(&dir_path).ok_or_else(|| {
            Error::invalid(format!(
                "manifest_path '{}' is not in the table's versions folder '{dir_path}'",
                req.manifest_path
            ))
        })?;
        if in_dir == final_name {
            return Err(Error::invalid(format!(
                "manifest_path '{}' is the final manifest of version {version}, not a staged one",
                req.manifest_path
            )));
        }
        let staged_name = in_dir
            .strip_prefix(&final_name)
            .and_then(|rest| rest.strip_prefix('-'))
            .filter(|suffix| !suffix.is_empty() && !suffix.contains('/'));
        if staged_name.is_none() {
            return Err(Error::invalid(format!(
                "manifest_path '{}' is not a staged manifest of version {version} \
                 (expected '{dir_path}{final_name}-<id>')",
                req.manifest_path
            )));
        }
        let first_of_branch = dir != versions_dir(record, None)?;
        Ok(Staging {
            version,
            branch: req.branch.clone().filter(|b| !b.is_empty() && b != "main"),
            staged: in_dir.to_string(),
            manifest: final_name,
            dir,
            first_of_branch,
        })
    }

    /// The staged manifest as the client describes it (`manifest_size`, `e_tag`): one
    /// replaced since the client wrote it is not the one it means to commit.
    pub(crate) fn check_staged(
        &self,
        req: &NewVersion,
        staged: &crate::store::Object,
    ) -> Result<()> {
        if let Some(size) = req.manifest_size
            && size != staged.body.len() as i64
        {
            return Err(Error::invalid(format!(
                "manifest_size {size} does not match the staged manifest ({} bytes)",
                staged.body.len()
            )));
        }
        // The client's ETag, where the store's are the client's own (S3).
        if let Some(tag) = req.e_tag.as_deref().filter(|t| !t.is_empty())
            && self.layout.shares_etags()
            && tag.trim_matches('"') != staged.etag.trim_matches('"')
        {
            return Err(Error::invalid(format!(
                "e_tag {tag} does not match the staged manifest's ({})",
                staged.etag
            )));
        }
        Ok(())
    }

    /// The table's log, settled, and storage's newest version, read side by side.
    pub(crate) async fn log_and_storage(
        &self,
        record: &TableRecord,
        branch: Option<&str>,
        dir: &str,
    ) -> (Result<super::log::LogState>, Result<Option<u64>>) {
        self.settle_beside(record, branch, self.latest_published(dir), |stored| {
            stored.as_ref().ok().copied().flatten()
        })
        .await
    }

    /// Whether `staging` may commit on top of what the log and storage hold: it follows the
    /// newer of the two, and no batch still deciding holds the table. `Ok(false)`: the
    /// version is already there (the caller compares bytes: a retry, or a rival's).
    pub(crate) fn follows(
        &self,
        staging: &Staging,
        log: &super::log::LogState,
        stored: Option<u64>,
    ) -> Result<bool> {
        if let Some(lock) = log.live_lock() {
            return Err(conflict(format!(
                "version {} of the table is held by batch commit {}, which is committing",
                lock.version, lock.transaction_id
            )));
        }
        let latest = stored.max(log.head.as_ref().map(|h| h.version).filter(|v| *v > 0));
        let version = staging.version;
        let follows = match latest {
            Some(latest) => version == latest + 1,
            // The first version of the table, or of a branch (which starts at the version
            // it was made from).
            None => version == 1 || staging.first_of_branch,
        };
        if follows {
            return Ok(true);
        }
        if latest.is_none_or(|l| version > l) {
            return Err(conflict(format!(
                "version {version} does not follow the latest version ({})",
                latest.map_or("none".to_string(), |l| l.to_string())
            )));
        }
        Ok(false)
    }

    /// CreateTableVersion: commits a staged manifest as version `req.version` of the table
    /// through its log (`log`), then publishes it (see the module's invariants). Needs write
    /// access.
    pub async fn create_table_version(
        self: &std::sync::Arc<Self>,
        ctx: &Ctx,
        id: &[String],
        req: NewVersion,
    ) -> Result<CommittedVersion> {
        let record = self.describe_table(ctx, id).await?;
        self.may_change_table(ctx, id, Level::Write, "committing a version")?;
        let staging = self.staging_of(&record, &req)?;
        let branch = staging.branch.as_deref();
        let version = staging.version;
        let staging_key = format!("{}{}", staging.dir, staging.staged);
        let final_key = format!("{}{}", staging.dir, staging.manifest);
        let head_key = self.head_key_of(&record, branch)?;

        // The staged manifest, the log and storage's newest version do not depend on each
        // other.
        let (staged, (log, stored)) = tokio::join!(
            self.store.get(&staging_key),
            self.log_and_storage(&record, branch, &staging.dir)
        );
        let Some(staged) = staged? else {
            // Gone: the gateway removes a staging manifest once it has published it, so
            // this may be the client's own commit, retried after its answer was lost.
            return match self.read_receipt(&record, branch, version).await? {
                Some(receipt) if receipt.staged.as_deref() == Some(staging.staged.as_str()) => {
                    Ok(CommittedVersion {
                        version,
                        manifest_path: receipt
                            .manifest_path
                            .unwrap_or_else(|| self.layout.store_path_of(&final_key)),
                        size: receipt.size.unwrap_or_default(),
                        e_tag: receipt.e_tag,
                    })
                }
                _ => Err(Error::invalid(format!(
                    "the staged manifest '{}' does not exist",
                    req.manifest_path
                ))),
            };
        };
        self.check_staged(&req, &staged)?;
        let (mut log, mut stored) = (log?, stored?);

        // The commit point: the head moves to this version, conditional on the head read.
        let head_etag = loop {
            if !self.follows(&staging, &log, stored)? {
                // Taken: by this very commit, retried after its answer was lost (the same
                // bytes), or by a rival.
                let etag = self
                    .same_as_published(&final_key, &staged.body, version)
                    .await?;
                let committed = CommittedVersion {
                    version,
                    manifest_path: self.layout.store_path_of(&final_key),
                    size: staged.body.len() as u64,
                    e_tag: self.layout.shares_etags().then_some(etag),
                };
                self.record_published(&record, &staging, &committed).await?;
                self.forget_staged(&staging).await;
                return Ok(committed);
            }
            let head = super::log::Head {
                version,
                manifest: staging.manifest.clone(),
                staged: Some(staging.staged.clone()),
                size: staged.body.len() as u64,
                ..Self::new_head(&record, version)
            };
            match self.put_head(&head_key, &head, log.etag.as_deref()).await {
                Ok(Some(etag)) => break etag,
                Ok(None) => {}
                // Sent, but the store did not say: the head tells whether it landed.
                Err(e) => {
                    if let Some(etag) = self.landed_head(&head_key, &head, e).await? {
                        break etag;
                    }
                }
            }
            // A rival moved the head: look again (its version may be the one asked for).
            let (again, newest) = self.log_and_storage(&record, branch, &staging.dir).await;
            (log, stored) = (again?, newest?);
        };

        // Committed: from here on nothing turns the answer into a failure. A publish the
        // store fails is left to the next reader (managed readers settle the head first)
        // and tried again after the answer.
        let published = match self
            .publish_body(&staging.dir, &staging.manifest, staged.body.clone())
            .await
        {
            Ok(published) => published,
            Err(e) => {
                tracing::warn!(table = %self.show(&record.id), version, error = %e, "a committed version is left for its next reader, or for this gateway after the answer, to publish");
                let (catalog, record, branch) =
                    (self.clone(), record.clone(), staging.branch.clone());
                self.after_answer(async move {
                    if let Err(e) = catalog.settle_log(&record, branch.as_deref()).await {
                        tracing::warn!(table = ?record.id, error = %e, "a committed version is left for its next reader to publish");
                    }
                });
                return Ok(CommittedVersion {
                    version,
                    manifest_path: self.layout.store_path_of(&final_key),
                    size: staged.body.len() as u64,
                    e_tag: None,
                });
            }
        };
        let etag = match published {
            super::log::Published::At(etag) => etag,
            super::log::Published::Taken => {
                // Taken in storage between the check and the publish by a writer that
                // bypassed the catalog: its manifest stands, and this commit lost.
                let mut head = Self::new_head(&record, version);
                head.manifest = staging.manifest.clone();
                self.put_head(&head_key, &head, Some(head_etag.as_str()))
                    .await?;
                return Err(conflict(format!(
                    "version {version} already exists with different content"
                )));
            }
        };
        let committed = CommittedVersion {
            version,
            manifest_path: self.layout.store_path_of(&final_key),
            size: staged.body.len() as u64,
            e_tag: self.layout.shares_etags().then_some(etag),
        };
        self.commit_seen(&record);
        // After the answer, in this order: the receipt (which answers a retry once the
        // staging manifest is gone; until then the staging manifest does), then the staging
        // manifest. The head keeps its staged note: storage holding the version says it is
        // published (`settle_beside`), so noting it would only cost the commit a write.
        let catalog = self.clone();
        let (record, staging, done) = (record.clone(), staging.clone(), committed.clone());
        self.after_answer(async move {
            if let Err(e) = catalog.write_receipt_of(&record, &staging, &done).await {
                tracing::warn!(table = ?record.id, version = done.version, error = %e, "could not write a commit's receipt; its staging manifest is kept");
                return;
            }
            catalog.forget_staged(&staging).await;
        });
        Ok(committed)
    }

    /// `create_table_version` under an idempotency key (`idempotency`): a key used before
    /// answers the first attempt's outcome, and one used with another request is refused.
    /// The outcome is kept under the key after the answer; a retry that comes before it is
    /// kept runs the commit again, which answers the same (a CreateTableVersion names its
    /// staged manifest, and the one already committed is recognised by its receipt or its
    /// bytes).
    pub async fn create_table_version_keyed(
        self: &std::sync::Arc<Self>,
        ctx: &Ctx,
        id: &[String],
        req: NewVersion,
        key: Option<super::idempotency::Key>,
    ) -> Result<CommittedVersion> {
        use super::idempotency::{Outcome, refusal};
        let Some(key) = key else {
            return self.create_table_version(ctx, id, req).await;
        };
        let cell = self.cell_of(id)?;
        if let Some(claim) = self.find_key(ctx, &cell, &key, VERSION_OP).await? {
            match claim.record.outcome {
                Some(Outcome::Committed(version)) => return Ok(version),
                Some(Outcome::Refused { code, message }) => return Err(refusal(code, message)),
                None => {}
            }
        }
        let result = self.create_table_version(ctx, id, req).await;
        let outcome = match &result {
            Ok(version) => Some(Outcome::Committed(version.clone())),
            // A refusal stands; a store failure or an unknown outcome is the retry's to learn.
            Err(e) if e.code.http_status() < 500 && !e.outcome_unknown => Some(Outcome::Refused {
                code: e.code as i32,
                message: e.message.clone(),
            }),
            Err(_) => None,
        };
        if let Some(outcome) = outcome {
            let (catalog, ctx) = (self.clone(), ctx.clone());
            self.after_answer(async move {
                if let Err(e) = catalog
                    .keep_outcome(&ctx, &cell, &key, VERSION_OP, outcome)
                    .await
                {
                    tracing::warn!(error = %e, "could not keep a commit's outcome under its idempotency key");
                }
            });
        }
        result
    }

    /// Whether a head write the store failed (`error`) landed after all: the head is read
    /// until the store answers (`commit_wait`). Its ETag when it holds `head`'s version from
    /// `head`'s staged manifest; `None` when it holds anything else (the write was
    /// conditional on the head before, so it can no longer land); the unknown-outcome error
    /// when the store will not say.
    async fn landed_head(
        &self,
        key: &str,
        head: &super::log::Head,
        error: Error,
    ) -> Result<Option<String>> {
        let mut patience = super::Patience::new(self.commit_wait);
        loop {
            match self.store.get(key).await {
                Ok(Some(obj)) => {
                    let now: super::log::Head = super::records::decode(key, &obj.body)?;
                    let ours = now.table_uid == head.table_uid
                        && now.version == head.version
                        && now.staged == head.staged;
                    return Ok(ours.then_some(obj.etag));
                }
                Ok(None) => return Ok(None),
                Err(_) if patience.wait().await => {}
                Err(_) => return Err(Error::commit_state_unknown(None, error)),
            }
        }
    }

    /// What follows a published version: its receipt (which answers a retry once the staged
    /// manifest is gone) and the commit listener.
    pub(crate) async fn record_published(
        &self,
        record: &TableRecord,
        staging: &Staging,
        committed: &CommittedVersion,
    ) -> Result<()> {
        self.write_receipt_of(record, staging, committed).await?;
        self.commit_seen(record);
        Ok(())
    }

    /// The receipt of a version published from `staging`.
    async fn write_receipt_of(
        &self,
        record: &TableRecord,
        staging: &Staging,
        committed: &CommittedVersion,
    ) -> Result<()> {
        let receipt = super::commits::Receipt {
            format_version: super::records::FORMAT_VERSION,
            table_uid: record.uid.clone(),
            version: committed.version,
            staged: Some(staging.staged.clone()),
            manifest_path: Some(committed.manifest_path.clone()),
            size: Some(committed.size),
            e_tag: committed.e_tag.clone(),
            committed_at_ms: super::records::now_ms(),
        };
        self.write_receipt(record, staging.branch.as_deref(), &receipt)
            .await
    }

    /// Removes a published version's staging manifest (tidying only: a settler finds the
    /// version in storage, and a retry is answered from the receipt).
    pub(crate) async fn forget_staged(&self, staging: &Staging) {
        let staging_key = format!("{}{}", staging.dir, staging.staged);
        if let Err(e) = self.store.delete(&staging_key, Condition::None).await {
            tracing::warn!(key = %staging_key, error = %e, "could not delete a published staging manifest");
        }
    }

    /// A version already taken: the same bytes are the client's own commit retried (its
    /// answer was lost), anything else is a rival's.
    pub(crate) async fn same_as_published(
        &self,
        final_key: &str,
        staged: &Bytes,
        version: u64,
    ) -> Result<String> {
        match self.store.get(final_key).await? {
            Some(existing) if existing.body == *staged => Ok(existing.etag),
            _ => Err(conflict(format!(
                "version {version} already exists with different content"
            ))),
        }
    }

    /// BatchDeleteTableVersions: removes the manifests of the versions in `ranges`
    /// (`[start, end)`, an `end` of -1 meaning no end). The latest version and tagged
    /// versions are refused, not skipped: removing them would roll the table back or break a
    /// tag. Needs admin access (it removes history). Answers how many were removed.
    pub async fn delete_table_versions(
        &self,
        ctx: &Ctx,
        id: &[String],
        branch: Option<&str>,
        ranges: &[(i64, i64)],
    ) -> Result<u64> {
        let record = self.describe_table(ctx, id).await?;
        self.may_change_table(ctx, id, Level::Admin, "deleting versions")?;
        check_ranges(ranges)?;
        let dir = versions_dir(&record, branch)?;
        let doomed = self.doomed_versions(&record, branch, ranges).await?;
        for name in &doomed {
            self.store
                .delete(&format!("{dir}{name}"), Condition::None)
                .await?;
        }
        Ok(doomed.len() as u64)
    }

    /// The final manifests (file names in the versions folder of `branch`) of the versions
    /// in `ranges`, refusing the latest version and tagged ones.
    pub(crate) async fn doomed_versions(
        &self,
        record: &TableRecord,
        branch: Option<&str>,
        ranges: &[(i64, i64)],
    ) -> Result<Vec<String>> {
        let within = |v: u64| {
            ranges
                .iter()
                .any(|(start, end)| v >= *start as u64 && (*end == -1 || v < *end as u64))
        };
        let dir = versions_dir(record, branch)?;
        let mut doomed = Vec::new();
        let mut latest = None;
        for key in self.all_keys(&dir, true).await? {
            let name = &key[dir.len()..];
            if let Some(v) = version_of_file(name) {
                latest = Some(latest.map_or(v, |l: u64| l.max(v)));
                if within(v) {
                    doomed.push(name.to_string());
                }
            }
        }
        if let Some(latest) = latest.filter(|l| within(*l)) {
            return Err(Error::invalid(format!(
                "version {latest} is the latest version and cannot be deleted"
            )));
        }
        let tagged = self.tagged_versions(record, branch).await?;
        if let Some((tag, v)) = tagged.iter().find(|(_, v)| within(*v)) {
            return Err(Error::invalid(format!(
                "version {v} is tagged '{tag}': delete the tag first"
            )));
        }
        Ok(doomed)
    }

    /// The tags (Lance's `_refs/tags/<name>.json`) that point into `branch`.
    async fn tagged_versions(
        &self,
        record: &TableRecord,
        branch: Option<&str>,
    ) -> Result<Vec<(String, u64)>> {
        #[derive(serde::Deserialize)]
        struct Tag {
            branch: Option<String>,
            version: u64,
        }
        let branch = branch.filter(|b| !b.is_empty() && *b != "main");
        let dir = format!("{}/_refs/tags/", record.data_key);
        let mut tagged = Vec::new();
        for key in self.all_keys(&dir, true).await? {
            let Some(name) = key[dir.len()..].strip_suffix(".json") else {
                continue;
            };
            let Some(obj) = self.store.get(&key).await? else {
                continue;
            };
            let tag: Tag = serde_json::from_slice(&obj.body)
                .map_err(|e| Error::internal("a tag of the table could not be read", e))?;
            let tag_branch = tag.branch.as_deref().filter(|b| *b != "main");
            if tag_branch == branch {
                tagged.push((name.to_string(), tag.version));
            }
        }
        Ok(tagged)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn final_names_round_trip_in_both_schemes() {
        for v in [1u64, 2, 9, 10, 12345] {
            assert_eq!(version_of_file(&NamingScheme::V1.file_name(v)), Some(v));
            assert_eq!(version_of_file(&NamingScheme::V2.file_name(v)), Some(v));
        }
        assert_eq!(
            NamingScheme::V2.file_name(1),
            "18446744073709551614.manifest"
        );
    }

    #[test]
    fn staging_and_other_files_are_not_versions() {
        for name in [
            "18446744073709551614.manifest-4b515e97",
            "1.txn",
            ".manifest",
            "x1.manifest",
            "_latest.manifest",
        ] {
            assert_eq!(version_of_file(name), None, "{name}");
        }
    }

    #[test]
    fn branch_names_cannot_leave_the_table() {
        for bad in ["..", "a/../b", "a//b", "/a", "a%2f", ""] {
            assert!(check_branch(bad).is_err(), "{bad}");
        }
        assert!(check_branch("feature/x").is_ok());
    }

    #[test]
    fn naming_schemes_default_to_v2() {
        assert_eq!(NamingScheme::parse(None).unwrap(), NamingScheme::V2);
        assert_eq!(NamingScheme::parse(Some("v1")).unwrap(), NamingScheme::V1);
        assert!(NamingScheme::parse(Some("V3")).is_err());
    }
}
