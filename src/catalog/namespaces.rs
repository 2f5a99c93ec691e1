//! Namespaces: create (with its modes), describe, exists, and drop (restrict or cascade).
//!
//! A create reserves the name with its staged record under the parent's pending folder,
//! checks that the parent is open, then commits. A drop writes its intent, marks the
//! namespace, checks (or empties) it, and deletes the record only while its mark is there:
//! that delete is the drop's linearization point, and a rollback is the removal of the mark.

use super::intents::Rival;
use super::layout::Layout;
use super::records::*;
use super::{Catalog, CreateMode, DropBehavior, DropMode, Patience, Slot, recovery};
use crate::access::Ctx;
use crate::error::{Error, Result};
use crate::store::{Condition, StoreError};

/// Something under a namespace that keeps it from being dropped.
pub(crate) enum Child {
    Table(Vec<String>),
    Namespace(Vec<String>),
    /// A create or rename that has committed and is not published yet.
    Arriving(Vec<String>),
}

/// How a create attempt ended.
pub(crate) enum Commit {
    Done,
    /// The name was taken (the staged entry is already removed): look again.
    Taken,
    /// Someone settled the staged entry first: the create did not happen.
    Lost,
}

impl Catalog {
    /// Reads a namespace record as stored (with its mark); `None` when there is none. The
    /// root reads as an empty record that always exists.
    pub(crate) async fn read_namespace(
        &self,
        id: &[String],
    ) -> Result<Option<(NamespaceRecord, String)>> {
        match self.slot(id)? {
            Slot::Root => Ok(Some((
                NamespaceRecord {
                    format_version: FORMAT_VERSION,
                    id: Vec::new(),
                    uid: String::new(),
                    created_at_ms: 0,
                    properties: Properties::new(),
                    created_by: None,
                    mark: None,
                    rev: String::new(),
                },
                String::new(),
            ))),
            Slot::Cell(key) => Ok(self
                .read::<CellRecord>(&key)
                .await?
                .and_then(|(cell, etag)| cell.namespace.map(|ns| (ns, etag)))),
            Slot::Plain(key) => self.read::<NamespaceRecord>(&key).await,
        }
    }

    /// Writes a namespace record under `cond`; returns the new ETag.
    pub(crate) async fn write_namespace(
        &self,
        record: &NamespaceRecord,
        cond: Condition,
    ) -> Result<String, StoreError> {
        match self
            .slot(&record.id)
            .map_err(|e| StoreError::Other(e.message))?
        {
            Slot::Root => Err(StoreError::Other("the root namespace has no record".into())),
            Slot::Cell(key) => {
                // The cell's warehouse format is kept as it is (a conditional write fails
                // anyway if the record changed since it was read here). A new bucket starts
                // at the base format: gateways of an older release may serve beside this one.
                let warehouse_format = match &cond {
                    Condition::IfMatch(_) => self
                        .read::<CellRecord>(&key)
                        .await
                        .map_err(|e| StoreError::Other(e.message))?
                        .and_then(|(c, _)| c.warehouse_format),
                    _ => None,
                };
                let cell = CellRecord {
                    format_version: FORMAT_VERSION,
                    created_at_ms: record.created_at_ms,
                    namespace: Some(record.clone()),
                    warehouse_format,
                };
                self.write(&key, encode(&cell), cond).await
            }
            Slot::Plain(key) => self.write(&key, encode(record), cond).await,
        }
    }

    fn namespace_key(&self, id: &[String]) -> Result<Option<String>> {
        Ok(match self.slot(id)? {
            Slot::Root => None,
            Slot::Cell(key) | Slot::Plain(key) => Some(key),
        })
    }

    /// Namespace `id` as readers see it: its record, or its committed create not yet
    /// published.
    pub(crate) async fn find_namespace(&self, id: &[String]) -> Result<Option<NamespaceRecord>> {
        if let Some((ns, _)) = self.read_namespace(id).await? {
            return Ok(Some(ns));
        }
        if let Some(ns) = self.arriving_namespace(id).await? {
            return Ok(Some(ns));
        }
        // A create may have published and removed its entry between the two reads.
        Ok(self.read_namespace(id).await?.map(|(ns, _)| ns))
    }

    pub async fn describe_namespace(&self, ctx: &Ctx, id: &[String]) -> Result<Properties> {
        self.may_see_namespace(ctx, id)?;
        match self.find_namespace(id).await? {
            Some(ns) => Ok(ns.properties),
            None => Err(Error::namespace_not_found(&self.show(id))),
        }
    }

    pub async fn namespace_exists(&self, ctx: &Ctx, id: &[String]) -> Result<()> {
        self.describe_namespace(ctx, id).await.map(|_| ())
    }

    /// Checks that children may be created under `id` now: it exists and no drop of it is
    /// live. A live drop is waited for a little.
    pub(crate) async fn ensure_open_namespace(&self, id: &[String]) -> Result<()> {
        let mut patience = self.patience();
        loop {
            let Some((ns, etag)) = self.read_namespace(id).await? else {
                if self.arriving_namespace(id).await?.is_some() {
                    return Ok(());
                }
                // Published (and its entry removed) between the two reads?
                if self.read_namespace(id).await?.is_some() {
                    continue;
                }
                return Err(Error::namespace_not_found(&self.show(id)));
            };
            let (Some(mark), Some(key)) = (&ns.mark, self.namespace_key(id)?) else {
                return Ok(());
            };
            match self.resolve_mark(&key, &etag, mark).await? {
                super::intents::MarkState::Void => return Ok(()),
                super::intents::MarkState::Moved => {}
                super::intents::MarkState::Live => {
                    if !patience.wait().await {
                        return Err(Error::conflict(format!(
                            "namespace '{}' is being dropped; retry",
                            self.show(id)
                        )));
                    }
                }
            }
        }
    }

    pub async fn create_namespace(
        &self,
        ctx: &Ctx,
        id: &[String],
        mode: CreateMode,
        properties: Properties,
    ) -> Result<Properties> {
        if id.is_empty() {
            return Err(Error::invalid(
                "the root namespace always exists and cannot be created",
            ));
        }
        self.may_create_namespace(ctx, id)?;
        super::policy::check(&properties)?;
        let slot = self.slot(id)?;
        for _attempt in 0..8 {
            if let Some(found) = self.namespace_found(id, mode, &properties).await? {
                return found;
            }
            let record = NamespaceRecord {
                format_version: FORMAT_VERSION,
                id: id.to_vec(),
                uid: new_uid(),
                created_at_ms: now_ms(),
                properties: properties.clone(),
                created_by: Some(self.node.clone()),
                mark: None,
                rev: new_uid(),
            };
            match &slot {
                Slot::Root => unreachable!("refused above"),
                // A level-1 namespace in endpoint mode is a bucket holding a catalog: its
                // parent is the endpoint itself, which always exists, so it is one write.
                Slot::Cell(_) => {
                    self.store.ensure_bucket(&id[0]).await.map_err(|e| {
                        Error::unavailable(format!("could not create bucket '{}'", id[0]))
                            .with_detail(e.to_string())
                    })?;
                    match self.write_namespace(&record, Condition::IfAbsent).await {
                        Ok(_) => return Ok(properties),
                        // Taken meanwhile, or the bucket of a namespace being dropped was
                        // removed after `ensure_bucket`: look again.
                        Err(StoreError::PreconditionFailed | StoreError::NoSuchBucket(_)) => {
                            continue;
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
                Slot::Plain(key) => {
                    let (name, parent) = id.split_last().expect("non-empty");
                    let pending_key =
                        Layout::pending_namespace_key(&self.layout.place(parent)?, name);
                    let etag = match self
                        .write(&pending_key, encode(&record), Condition::IfAbsent)
                        .await
                    {
                        Ok(etag) => etag,
                        Err(StoreError::PreconditionFailed) => {
                            match self.await_rival(&pending_key, key).await? {
                                Rival::Gone | Rival::Committed => continue,
                                Rival::Busy => return Err(self.busy("namespace", id)),
                            }
                        }
                        Err(StoreError::NoSuchBucket(_)) => {
                            return Err(Error::namespace_not_found(&self.show(parent)));
                        }
                        Err(e) => return Err(e.into()),
                    };
                    let checked = async {
                        let (open, taken) =
                            tokio::join!(self.ensure_open_namespace(parent), self.store.get(key));
                        open?;
                        Ok::<_, Error>(taken?.is_some())
                    }
                    .await;
                    let taken = match checked {
                        Ok(taken) => taken,
                        Err(e) => {
                            self.abandon_staged(&pending_key, &etag, None).await;
                            return Err(e);
                        }
                    };
                    if taken {
                        self.abandon_staged(&pending_key, &etag, None).await;
                        continue;
                    }
                    let kind = IntentKind::CreateNamespace {
                        record: record.clone(),
                    };
                    match self
                        .commit_create(
                            &pending_key,
                            &etag,
                            key,
                            &record.uid,
                            record.created_at_ms,
                            kind,
                        )
                        .await?
                    {
                        Commit::Done => return Ok(properties),
                        Commit::Taken => {
                            self.abandon_staged(&pending_key, &etag, None).await;
                            continue;
                        }
                        Commit::Lost => return Err(self.busy("namespace", id)),
                    }
                }
            }
        }
        Err(self.busy("namespace", id))
    }

    /// CreateNamespace when `id` may exist: the answer by mode if it does, `None` if not.
    async fn namespace_found(
        &self,
        id: &[String],
        mode: CreateMode,
        properties: &Properties,
    ) -> Result<Option<Result<Properties>>> {
        // Both read at once: neither answer is relied on for a free name (the create checks
        // again once its staged entry holds the name), so they need not wait on each other.
        let (record, arriving) = tokio::join!(self.read_namespace(id), self.arriving_namespace(id));
        let existing = match record? {
            Some(found) => Some(found),
            None => arriving?.map(|ns| (ns, String::new())),
        };
        let Some((existing, etag)) = existing else {
            return Ok(None);
        };
        Ok(Some(match mode {
            CreateMode::Create => Err(Error::namespace_exists(&self.show(id))),
            CreateMode::ExistOk => Ok(existing.properties),
            CreateMode::Overwrite if etag.is_empty() => Err(self.busy("namespace", id)),
            CreateMode::Overwrite => {
                self.overwrite_namespace(existing, etag, properties.clone())
                    .await
            }
        }))
    }

    /// Overwrite mode: replace the properties of an existing namespace, which must be empty
    /// (overwriting never drops tables). It is marked while it is checked, so no child can
    /// commit between the check and the write.
    async fn overwrite_namespace(
        &self,
        existing: NamespaceRecord,
        etag: String,
        properties: Properties,
    ) -> Result<Properties> {
        let id = existing.id.clone();
        if let (Some(mark), Some(key)) = (&existing.mark, self.namespace_key(&id)?)
            && self.resolve_mark(&key, &etag, mark).await? != super::intents::MarkState::Void
        {
            return Err(self.busy("namespace", &id));
        }
        if matches!(self.slot(&id)?, Slot::Root) {
            return Err(Error::invalid("the root namespace cannot be overwritten"));
        }
        let kind = IntentKind::ReplaceNamespace { id: id.clone() };
        let Some(marked) = self.mark_namespace(existing, etag, kind).await? else {
            return Err(self.busy("namespace", &id));
        };
        match self.first_child(&id, &mut self.patience()).await {
            Ok(None) => {}
            Ok(Some(child)) => {
                self.unmark(&marked).await;
                return Err(self.not_empty(&id, &child));
            }
            Err(e) => {
                self.unmark(&marked).await;
                return Err(e);
            }
        }
        let record = NamespaceRecord {
            properties: properties.clone(),
            created_at_ms: now_ms(),
            mark: None,
            ..marked.record.clone()
        }
        .revised();
        let written = self
            .write_namespace(&record, Condition::IfMatch(marked.etag.clone()))
            .await;
        let _ = self.remove(&marked.intent_key, &marked.intent_etag).await;
        match written {
            Ok(_) => Ok(properties),
            Err(StoreError::PreconditionFailed) => Err(self.busy("namespace", &id)),
            Err(e) => Err(e.into()),
        }
    }

    /// Commits a staged create (a table's or a namespace's record at `pending_key`, at
    /// `etag`) under `final_key`. A store that moves objects publishes the staged record in
    /// one conditional step; on the others the staged entry is rewritten as a committed
    /// intent (the decision) and the record then published from it.
    pub(crate) async fn commit_create(
        &self,
        pending_key: &str,
        etag: &str,
        final_key: &str,
        uid: &str,
        started_at_ms: u64,
        kind: IntentKind,
    ) -> Result<Commit> {
        if self.store.atomic_publish() {
            return match self.store.publish(pending_key, etag, final_key).await {
                Ok(_) => Ok(Commit::Done),
                Err(StoreError::PreconditionFailed) => Ok(Commit::Taken),
                Err(StoreError::StagedChanged) => Ok(Commit::Lost),
                Err(e) => {
                    let landed = self
                        .read::<serde_json::Value>(final_key)
                        .await?
                        .is_some_and(|(v, _)| v.get("uid").and_then(|u| u.as_str()) == Some(uid));
                    if landed {
                        Ok(Commit::Done)
                    } else {
                        Err(e.into())
                    }
                }
            };
        }
        let mut intent = Intent::new(uid.to_string(), self.node.clone(), kind);
        intent.started_at_ms = started_at_ms;
        intent.state = IntentState::Committed;
        match self
            .write(
                pending_key,
                encode(&intent),
                Condition::IfMatch(etag.to_string()),
            )
            .await
        {
            Ok(committed_etag) => {
                let finished = if !self.owner_in_time(started_at_ms) {
                    Ok(())
                } else if let IntentKind::CreateTable { record } = &intent.kind {
                    // A table is answered at its commit: readers find it through the
                    // committed entry until its record is out (describe, listings), and
                    // whatever makes it leave its name waits for the record and clears
                    // the entry first (`clear_arrival`). The record is published, and the
                    // entry removed, after the answer.
                    self.publish_created_table(pending_key, record, committed_etag, started_at_ms)
                } else {
                    self.roll_forward(pending_key, &mut intent, committed_etag)
                        .await
                };
                if let Err(e) = finished {
                    // Committed all the same: readers see it through the intent, and
                    // recovery publishes it.
                    tracing::warn!(pending_key, error = %e, "a committed create could not be published yet");
                }
                Ok(Commit::Done)
            }
            Err(StoreError::PreconditionFailed) => Ok(Commit::Lost),
            Err(e) => Err(e.into()),
        }
    }

    /// The owner gives up a staged create that has not committed. One that holds a folder
    /// claim (`claimed`: its record) is aborted as a settler would, so the decision stays
    /// written until the claim is released; otherwise the staged entry just goes.
    pub(crate) async fn abandon_staged(
        &self,
        pending_key: &str,
        etag: &str,
        claimed: Option<TableRecord>,
    ) {
        let result = match claimed {
            Some(record) => self
                .abort_create(pending_key, etag, record)
                .await
                .map(|_| ()),
            None => self
                .remove(pending_key, etag)
                .await
                .map(|_| ())
                .map_err(Error::from),
        };
        if let Err(e) = result {
            tracing::warn!(pending_key, error = %e, "could not give up a staged create; recovery will");
        }
    }

    fn not_empty(&self, id: &[String], child: &Child) -> Error {
        let what = match child {
            Child::Table(t) => {
                format!("it holds table '{}'", t.last().cloned().unwrap_or_default())
            }
            Child::Namespace(n) => format!(
                "it holds namespace '{}'",
                n.last().cloned().unwrap_or_default()
            ),
            Child::Arriving(c) => format!(
                "'{}' is being created in it",
                c.last().cloned().unwrap_or_default()
            ),
        };
        Error::namespace_not_empty(&self.show(id), &what)
    }

    /// The first thing under namespace `id`, if any. Entries at its pending keys are looked
    /// at first and records after: a create publishes its record before it removes its
    /// entry, so whatever this misses of a create in flight (its entry already gone) the
    /// record listings still see. An abandoned entry is settled; a live one that has not
    /// committed is waited for (it may yet fail, so it is no child), and fails the call
    /// with ConcurrentModification when `patience` runs out.
    pub(crate) async fn first_child(
        &self,
        id: &[String],
        patience: &mut Patience,
    ) -> Result<Option<Child>> {
        if self.layout.endpoint_mode() && id.is_empty() {
            return Ok(None);
        }
        let placed = self.layout.place(id)?;
        let pending = self
            .store
            .list(&Layout::pending_prefix(&placed), None, super::PAGE, true)
            .await?;
        for key in pending.keys {
            loop {
                let Some((entry, etag)) = self.read_entry(&key).await? else {
                    break;
                };
                if (self.settleable_entry(&entry) || entry.is_aborted())
                    && self.settle(&key, entry.clone(), &etag).await?
                {
                    continue;
                }
                match &entry {
                    Entry::Intent(Intent {
                        state: IntentState::Committed,
                        kind,
                        op_id,
                        ..
                    }) => {
                        let child = match kind {
                            IntentKind::CreateTable { record } => record.id.clone(),
                            IntentKind::RenameTable { from, record } => {
                                // The rename counts here once its source is gone: take that
                                // deciding step, safe for anyone once committed.
                                self.delete_marked_table(from, op_id).await?;
                                record.id.clone()
                            }
                            IntentKind::CreateNamespace { record } => record.id.clone(),
                            IntentKind::DropTable { record, .. } => {
                                // A committed batch's deregister being finished: its table
                                // is leaving; take the deciding step, safe for anyone now.
                                self.delete_marked_table(&record.id, op_id).await?;
                                break;
                            }
                            _ => break,
                        };
                        return Ok(Some(Child::Arriving(child)));
                    }
                    _ => {
                        if !patience.wait().await {
                            return Err(Error::conflict(format!(
                                "namespace '{}': a table or namespace is being created in it; retry",
                                self.show(id)
                            )));
                        }
                    }
                }
            }
        }
        let (tables_prefix, namespaces_prefix) = (
            Layout::tables_prefix(&placed),
            Layout::namespaces_prefix(&placed),
        );
        let (tables, children) = tokio::join!(
            self.store.list(&tables_prefix, None, 1, true),
            self.store.list(&namespaces_prefix, None, 1, true)
        );
        if let Some(name) = tables?
            .keys
            .first()
            .and_then(|k| Layout::name_of(k, ".json"))
        {
            let mut t = id.to_vec();
            t.push(name);
            return Ok(Some(Child::Table(t)));
        }
        if let Some(name) = children?
            .keys
            .first()
            .and_then(|k| Layout::name_of(k, ".json"))
        {
            let mut n = id.to_vec();
            n.push(name);
            return Ok(Some(Child::Namespace(n)));
        }
        Ok(None)
    }

    pub async fn drop_namespace(
        &self,
        ctx: &Ctx,
        id: &[String],
        mode: DropMode,
        behavior: DropBehavior,
    ) -> Result<()> {
        if id.is_empty() {
            return Err(Error::invalid("the root namespace cannot be dropped"));
        }
        self.may_drop_namespace(ctx, id)?;
        let by = Some(ctx.principal.name.clone());
        self.drop_namespace_checked(id, mode, behavior, &by).await
    }

    /// DropNamespace once access is checked (a cascade's children are covered by the
    /// admin access its namespace needs).
    async fn drop_namespace_checked(
        &self,
        id: &[String],
        mode: DropMode,
        behavior: DropBehavior,
        by: &Option<String>,
    ) -> Result<()> {
        let shown = self.show(id);
        let key = self
            .namespace_key(id)?
            .ok_or_else(|| Error::invalid("the root namespace cannot be dropped"))?;
        let mut patience = self.patience();
        for _attempt in 0..20 {
            let Some((record, etag)) = self.read_namespace_for_update(id, &mut patience).await?
            else {
                return match mode {
                    DropMode::Skip => Ok(()),
                    DropMode::Fail => Err(Error::namespace_not_found(&shown)),
                };
            };
            // 1-2. The intent, then the mark: from here on no create under it can commit.
            let kind = IntentKind::DropNamespace { id: id.to_vec() };
            let Some(mut marked) = self.mark_namespace(record, etag, kind).await? else {
                continue;
            };
            // 3. Check (or, with Cascade, empty) its contents.
            let emptied = match behavior {
                DropBehavior::Restrict => match self.first_child(id, &mut self.patience()).await {
                    Ok(None) => Ok(()),
                    Ok(Some(child)) => Err(self.not_empty(id, &child)),
                    Err(e) => Err(e),
                },
                DropBehavior::Cascade => Box::pin(self.drop_children(id, &mut marked, by)).await,
            };
            if let Err(e) = emptied {
                self.unmark(&marked).await;
                return Err(e);
            }
            // 4. Delete, only if the mark is still ours (a settler may have rolled it back).
            if !self.remove(&key, &marked.etag).await? {
                let _ = self.remove(&marked.intent_key, &marked.intent_etag).await;
                return Err(Error::conflict(format!(
                    "namespace '{shown}' changed while it was being dropped; retry"
                )));
            }
            if let Err(e) = self.remove(&marked.intent_key, &marked.intent_etag).await {
                tracing::warn!(intent_key = marked.intent_key, error = %e, "could not remove a finished drop's intent; recovery will");
            }
            if let Slot::Cell(_) = self.slot(id)? {
                self.retire_bucket(&id[0]).await;
            }
            return Ok(());
        }
        Err(Error::conflict(format!(
            "namespace '{shown}' kept changing; retry the drop"
        )))
    }

    /// Namespace `id`'s record ready to be changed: unmarked, or marked by an operation
    /// that is gone; a live operation on it is waited for. `None` when it does not exist.
    async fn read_namespace_for_update(
        &self,
        id: &[String],
        patience: &mut Patience,
    ) -> Result<Option<(NamespaceRecord, String)>> {
        let key = self
            .namespace_key(id)?
            .ok_or_else(|| Error::invalid("the root namespace has no record"))?;
        loop {
            let Some((record, etag)) = self.read_namespace(id).await? else {
                if self.arriving_namespace(id).await?.is_some() {
                    // Committed and about to be published: it exists, so wait for it.
                    if !patience.wait().await {
                        return Err(self.busy("namespace", id));
                    }
                    continue;
                }
                // Published (and its entry removed) between the two reads?
                if self.read_namespace(id).await?.is_some() {
                    continue;
                }
                return Ok(None);
            };
            let Some(mark) = &record.mark else {
                return Ok(Some((record, etag)));
            };
            match self.resolve_mark(&key, &etag, mark).await? {
                super::intents::MarkState::Void => return Ok(Some((record, etag))),
                super::intents::MarkState::Moved => {}
                super::intents::MarkState::Live => {
                    if !patience.wait().await {
                        return Err(self.busy("namespace", id));
                    }
                }
            }
        }
    }

    /// Marks a namespace for an operation that needs it to stay as it is while it looks
    /// inside (a drop, an overwrite): first the intent (so the mark can always be traced
    /// and rolled back), then the mark. `None` when the record changed first.
    async fn mark_namespace(
        &self,
        record: NamespaceRecord,
        etag: String,
        kind: IntentKind,
    ) -> Result<Option<MarkedNamespace>> {
        let cell = match self.slot(&record.id)? {
            Slot::Cell(_) => format!("{}/", record.id[0]),
            _ => self.layout.place(&record.id)?.cell,
        };
        let op_id = new_uid();
        let intent_key = Layout::drop_key(&cell, &op_id);
        let intent = Intent::new(op_id.clone(), self.node.clone(), kind);
        let intent_etag = self
            .write(&intent_key, encode(&intent), Condition::IfAbsent)
            .await?;
        let marked = NamespaceRecord {
            mark: Some(Mark {
                op_id,
                intent: intent_key.clone(),
                batch: None,
            }),
            ..record.clone()
        }
        .revised();
        match self
            .write_namespace(&marked, Condition::IfMatch(etag))
            .await
        {
            Ok(etag) => Ok(Some(MarkedNamespace {
                record,
                etag,
                intent_key,
                intent,
                intent_etag,
            })),
            Err(e) => {
                let _ = self.remove(&intent_key, &intent_etag).await;
                match e {
                    StoreError::PreconditionFailed => Ok(None),
                    other => Err(other.into()),
                }
            }
        }
    }

    /// The owner gives up its mark: the record as it was (a settler may have done it
    /// already), then the intent.
    async fn unmark(&self, marked: &MarkedNamespace) {
        let _ = self
            .write_namespace(
                &marked.record.clone().revised(),
                Condition::IfMatch(marked.etag.clone()),
            )
            .await;
        let _ = self.remove(&marked.intent_key, &marked.intent_etag).await;
    }

    /// After the level-1 namespace of a bucket is dropped: settle its catalog folder and
    /// delete the bucket if nothing else is in it. A bucket that holds objects stays.
    async fn retire_bucket(&self, bucket: &str) {
        let cell = format!("{bucket}/");
        if let Err(e) = recovery::settle_cell(self, &cell, true).await {
            tracing::warn!(bucket, error = %e, "could not settle the catalog of a dropped bucket namespace");
            return;
        }
        match self.store.remove_bucket_if_empty(bucket).await {
            Ok(true) => tracing::info!(bucket, "deleted the empty bucket of a dropped namespace"),
            Ok(false) => tracing::info!(
                bucket,
                "kept the bucket of a dropped namespace: it still holds objects"
            ),
            Err(e) => {
                tracing::warn!(bucket, error = %e, "could not delete the bucket of a dropped namespace")
            }
        }
    }

    /// Cascade: drops every table (data included) and child namespace under `id`, which is
    /// marked, so nothing new can commit under it meanwhile. A long cascade renews its intent
    /// between children, and stops when someone has rolled it back meanwhile.
    async fn drop_children(
        &self,
        id: &[String],
        marked: &mut MarkedNamespace,
        by: &Option<String>,
    ) -> Result<()> {
        let mut patience = self.patience();
        loop {
            if self.due_for_renewal(marked.intent.alive_at_ms())
                && !self
                    .renew(
                        &marked.intent_key,
                        &mut marked.intent,
                        &mut marked.intent_etag,
                    )
                    .await?
            {
                return Err(Error::conflict(format!(
                    "the drop of namespace '{}' stopped: it was taken for abandoned; retry",
                    self.show(id)
                )));
            }
            match self.first_child(id, &mut self.patience()).await? {
                None => return Ok(()),
                Some(Child::Table(table)) => match self
                    .remove_table(&table, super::dropped::Removal::Drop { by: by.clone() })
                    .await
                {
                    Ok(_) => {}
                    Err(e) if e.code == crate::error::Code::TableNotFound => {}
                    Err(e) => return Err(e),
                },
                Some(Child::Namespace(child)) => {
                    Box::pin(self.drop_namespace_checked(
                        &child,
                        DropMode::Skip,
                        DropBehavior::Cascade,
                        by,
                    ))
                    .await?
                }
                Some(Child::Arriving(_)) => {
                    // Committed, not published yet: its owner publishes it in a moment.
                    if !patience.wait().await {
                        return Err(Error::conflict(format!(
                            "namespace '{}': a table or namespace is still being created in it; retry",
                            self.show(id)
                        )));
                    }
                }
            }
        }
    }
}

/// A namespace this request has marked, and the intent behind the mark.
pub(crate) struct MarkedNamespace {
    /// The record as it was before the mark.
    record: NamespaceRecord,
    /// The marked record's ETag.
    etag: String,
    intent_key: String,
    intent: Intent,
    intent_etag: String,
}
