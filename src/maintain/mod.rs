//! Tables that keep themselves healthy: the gateway compacts small fragments, brings
//! indices up to date and removes old versions by itself, under each table's policy
//! (`catalog::policy`).
//!
//! - **Finding tables that are due, cheaply.** Every version this gateway commits (its own
//!   data operations, and CreateTableVersion under managed versioning) queues its table for
//!   a look a little later (`--maintenance-delay-secs`: a burst of appends is looked at
//!   once); a slow sweep (`--maintenance-sweep-secs`) goes through every table, for those
//!   that clients write behind the gateway. A look opens the latest version and measures it
//!   (`data::maintain::assess`); a table that is not due costs that and nothing more.
//! - **One sweep for all gateways, and unchanged tables for one request.** Each cell's
//!   sweep runs under a spaced lease (`maintenance-sweep.json`) that stays with the gateway
//!   that last ran it, so a table is swept once per interval however many gateways there
//!   are, and by the gateway that remembers it. The sweep lists the table records and the
//!   namespace records with their ETags (two listings, paged); a table whose fingerprint
//!   is unchanged since a look that found nothing due gets a quiet look: one listing of
//!   the manifest its next version would have, or under V2 naming of its newest manifest
//!   (`quiet::QuietBook`, `quiet::Listing`). Only when a newer version shows,
//!   or the fingerprint changed, or old versions come of age for cleanup, is the table
//!   queued for a full look and its dataset opened.
//! - **The same at a million tables.** The sweep walks a page of tables at a time, makes
//!   its quiet looks 16 at once, and waits while 256 of its tables are queued for full
//!   looks; a memo is 24 bytes a table. Memory and each table's cost stay flat as the
//!   warehouse grows.
//! - **One gateway per table.** A due table is maintained under its lease
//!   (`catalog::maintenance`, `catalog::leases`), taken with a conditional write and renewed
//!   while the work runs. Under the lease the table is measured again at its latest
//!   version, so a table another gateway has just compacted is found not due: no table is
//!   compacted twice for the same state.
//! - **Each task is a job** (`jobs`): a transaction record with the figures before and
//!   after, an audit line, metrics, and the task's last run kept in the table's record.
//!   Killed at any step, a run leaves the table at a committed version (Lance commits are
//!   atomic), its lease lapses, and the next holder starts over.
//! - **Bounded.** At most `--maintenance-concurrency` tables at once, on the data runtime,
//!   each rewrite one task at a time, so metadata requests keep their latency.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde::Serialize;

use crate::access::Ctx;
use crate::audit::{Audit, Event};
use crate::catalog::Catalog;
use crate::catalog::fsck::Finding;
use crate::catalog::layout::Layout;
use crate::catalog::leases::{Lease, Taken};
use crate::catalog::maintenance::{LastRun, Task, Upkeep};
use crate::catalog::policy::Policy;
use crate::catalog::records::{TableRecord, now_ms};
use crate::catalog::transactions::TransactionRecord;
use crate::data::maintain::{self as work, Assessment};
use crate::data::{At, LanceDatasets};
use crate::error::{Code, Error, Result};
use crate::jobs::{self, Figures, Keeper, Spec};

mod quiet;
use quiet::{Probe, QuietBook};

/// How the scheduler runs (the policy's defaults are `catalog::policy`'s).
#[derive(Clone, Debug)]
pub struct Settings {
    /// The switch for the scheduler: off, the gateway maintains nothing by itself
    /// (`admin maintain` still runs on demand).
    pub enabled: bool,
    /// Tables maintained at once by this gateway.
    pub concurrency: usize,
    /// How long after a commit its table is looked at.
    pub delay: Duration,
    /// How often every table is looked at.
    pub sweep_interval: Duration,
    /// The Ray cluster jobs past the policy's `maintenance.ray.*` thresholds run on.
    pub ray: Option<Arc<crate::ray::Ray>>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            enabled: true,
            concurrency: 1,
            delay: Duration::from_secs(30),
            sweep_interval: Duration::from_secs(3600),
            ray: None,
        }
    }
}

/// Cleanup is looked at no more often than this (or the retention period, if shorter): it
/// lists every version, and old versions only become removable as time passes.
const CLEANUP_EVERY: Duration = Duration::from_secs(3600);

/// Most tables waiting for a look; more commits than this between looks are left to the
/// sweep.
const QUEUED_AT_MOST: usize = 100_000;

/// Most tables a sweep has queued for a full look and the scheduler has not yet taken:
/// the sweep waits for room, so it holds a bounded part of a warehouse of any size.
const SWEEP_QUEUED_AT_MOST: usize = 256;

/// Quiet looks a sweep makes at once (each one store request, no dataset opened), so a
/// far store's latency does not multiply by the warehouse's size.
const QUIET_LOOKS_AT_ONCE: usize = 16;

/// A table waiting for a look.
struct Queued {
    id: Vec<String>,
    at: Instant,
    /// From a sweep: the fingerprint of the table's record and namespaces.
    listed: Option<u64>,
    /// From a sweep: its place among the sweep's queued tables, given back when taken.
    _room: Option<tokio::sync::OwnedSemaphorePermit>,
}

/// What to do for one table.
#[derive(Clone, Debug, Default)]
pub struct How {
    /// Say what would run, run nothing.
    pub dry_run: bool,
    /// Only these tasks (all when empty).
    pub tasks: Vec<Task>,
    /// Run a task that is due even if it ran recently (`admin maintain`).
    pub now: bool,
}

/// One task's run, as reported.
#[derive(Clone, Debug, Serialize)]
pub struct TaskRun {
    pub task: &'static str,
    /// `would run` (dry run), `succeeded`, `failed`.
    pub outcome: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transaction_id: Option<String>,
    pub figures: Figures,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What a look at one table found and did.
#[derive(Clone, Debug, Serialize)]
pub struct TableReport {
    pub table: Vec<String>,
    /// Why nothing ran, when nothing did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    pub due: Vec<&'static str>,
    pub runs: Vec<TaskRun>,
    /// The table as measured (before any run).
    pub figures: Figures,
}

impl TableReport {
    fn skipped(table: &[String], why: impl Into<String>) -> Self {
        TableReport {
            table: table.to_vec(),
            skipped: Some(why.into()),
            due: Vec::new(),
            runs: Vec::new(),
            figures: Figures::new(),
        }
    }
}

/// The maintainer of one gateway: its queue of tables to look at, and its bounds.
pub struct Maintainer {
    catalog: Arc<Catalog>,
    datasets: Arc<LanceDatasets>,
    audit: Arc<Audit>,
    settings: Settings,
    /// Tables to look at, by uid (or id, from a sweep): the id, when, and the sweep's
    /// fingerprint of its catalog state (`Catalog::swept_tables_in`).
    queue: Mutex<HashMap<String, Queued>>,
    /// What the last full look found at each table a sweep brought, for the next sweep's
    /// quiet look (`quiet::QuietBook`).
    quiet: Mutex<QuietBook>,
    /// Room for the tables a sweep queues (`SWEEP_QUEUED_AT_MOST`).
    sweep_room: Arc<tokio::sync::Semaphore>,
    /// Tables this gateway is maintaining now (their own commits queue nothing).
    busy: Mutex<std::collections::HashSet<String>>,
    /// What each table was last found due for and not yet given (the metrics' gauge).
    due_now: Mutex<HashMap<String, Vec<Task>>>,
    wake: tokio::sync::Notify,
    permits: Arc<tokio::sync::Semaphore>,
}

impl Maintainer {
    pub fn new(
        catalog: Arc<Catalog>,
        datasets: Arc<LanceDatasets>,
        audit: Arc<Audit>,
        settings: Settings,
    ) -> Arc<Self> {
        let permits = Arc::new(tokio::sync::Semaphore::new(settings.concurrency.max(1)));
        Arc::new(Maintainer {
            catalog,
            datasets,
            audit,
            settings,
            queue: Mutex::new(HashMap::new()),
            quiet: Mutex::new(QuietBook::default()),
            sweep_room: Arc::new(tokio::sync::Semaphore::new(SWEEP_QUEUED_AT_MOST)),
            busy: Mutex::new(Default::default()),
            due_now: Mutex::new(HashMap::new()),
            wake: tokio::sync::Notify::new(),
            permits,
        })
    }

    /// Listens for commits and runs the scheduler and the sweep, until the process ends.
    pub fn start(self: &Arc<Self>) {
        if !self.settings.enabled {
            tracing::info!("maintenance is off (--maintenance false)");
            return;
        }
        let me = Arc::downgrade(self);
        self.catalog.listen_for_commits(Arc::new(move |record| {
            if let Some(me) = me.upgrade() {
                me.note_commit(record);
            }
        }));
        let scheduler = self.clone();
        tokio::spawn(async move { scheduler.schedule().await });
        let sweeper = self.clone();
        tokio::spawn(async move { sweeper.sweep_forever().await });
    }

    /// Queues a table whose version this gateway just committed.
    pub fn note_commit(&self, record: &TableRecord) {
        if lock(&self.busy).contains(&record.uid) {
            return;
        }
        self.enqueue(
            record.uid.clone(),
            record.id.clone(),
            self.settings.delay,
            None,
            None,
        );
    }

    fn enqueue(
        &self,
        uid: String,
        id: Vec<String>,
        after: Duration,
        listed: Option<u64>,
        room: Option<tokio::sync::OwnedSemaphorePermit>,
    ) {
        let at = Instant::now() + after;
        {
            let mut queue = lock(&self.queue);
            // A sweep's table (it holds room in the sweep's own bound) is never turned away.
            if room.is_none() && queue.len() >= QUEUED_AT_MOST && !queue.contains_key(&uid) {
                return;
            }
            let entry = queue.entry(uid).or_insert(Queued {
                id: id.clone(),
                at,
                listed,
                _room: None,
            });
            entry.id = id;
            entry.at = entry.at.min(at);
            entry.listed = entry.listed.and(listed);
            if entry._room.is_none() {
                entry._room = room;
            }
        }
        self.wake.notify_one();
    }

    /// Takes tables off the queue as their time comes, a permit each.
    async fn schedule(self: Arc<Self>) {
        loop {
            let next = {
                let queue = lock(&self.queue);
                queue.values().map(|q| q.at).min()
            };
            match next {
                None => self.wake.notified().await,
                Some(at) if at > Instant::now() => {
                    tokio::select! {
                        _ = tokio::time::sleep_until(at.into()) => {}
                        _ = self.wake.notified() => {}
                    }
                }
                Some(_) => {
                    let Ok(permit) = self.permits.clone().acquire_owned().await else {
                        return;
                    };
                    let due = {
                        let mut queue = lock(&self.queue);
                        let now = Instant::now();
                        let uid = queue
                            .iter()
                            .filter(|(_, q)| q.at <= now)
                            .min_by_key(|(_, q)| q.at)
                            .map(|(uid, _)| uid.clone());
                        uid.and_then(|uid| queue.remove(&uid).map(|q| (uid, q)))
                    };
                    let Some((key, Queued { id, listed, .. })) = due else {
                        continue;
                    };
                    let me = self.clone();
                    tokio::spawn(async move {
                        let _permit = permit;
                        match me.look(&key, &id, listed).await {
                            Ok(Some(report)) => log_report(&report),
                            Ok(None) => {}
                            Err(e) if e.code == Code::TableNotFound => {}
                            Err(e) => {
                                tracing::warn!(table = ?id, error = %e, "could not maintain a table")
                            }
                        }
                    });
                }
            }
        }
    }

    /// Sweeps every table, every `sweep_interval` (the first sweep a minute after start,
    /// or sooner with a shorter interval), on one gateway at a time: each cell's sweep is
    /// taken under its lease (`maintenance-sweep.json`) and not again within nine tenths of
    /// the interval by any gateway, so however many gateways serve the warehouse, each
    /// table is looked at once per sweep, not once per gateway. (A commit still brings its
    /// table round on the gateway that served it.)
    async fn sweep_forever(self: Arc<Self>) {
        let first = self.settings.sweep_interval.min(Duration::from_secs(60));
        tokio::time::sleep(first).await;
        let spacing = self.settings.sweep_interval.mul_f64(0.9);
        loop {
            let cells = self.catalog.cells().await;
            if let Err(e) = &cells {
                tracing::warn!(error = %e, "maintenance sweep could not list the buckets");
            }
            let epoch = lock(&self.quiet).begin_sweep();
            let mut complete = cells.is_ok();
            for cell in cells.unwrap_or_default() {
                match self.sweep_cell(&cell, spacing).await {
                    Ok(whole) => complete &= whole,
                    Err(e) => {
                        complete = false;
                        tracing::warn!(error = %e, "maintenance sweep could not list the tables");
                    }
                }
            }
            // Tables gone since the last sweep take their memos with them.
            lock(&self.quiet).end_sweep(epoch, complete);
            tokio::time::sleep(self.settings.sweep_interval).await;
        }
    }

    /// Sweeps every table of `cell`, if this gateway holds the cell's sweep now, renewing
    /// the sweep's lease while it walks; whether it swept them all.
    async fn sweep_cell(self: &Arc<Self>, cell: &str, spacing: Duration) -> Result<bool> {
        let key = Layout::maintenance_sweep_key(cell);
        let Some(mut lease) = self
            .catalog
            .take_spaced(&key, "maintenance sweep", spacing)
            .await?
        else {
            return Ok(false);
        };
        let every = self.catalog.grace() / 3;
        let catalog = self.catalog.clone();
        let keep = async {
            loop {
                tokio::time::sleep(every).await;
                match catalog.renew_lease(&mut lease).await {
                    Ok(true) => {}
                    Ok(false) => return,
                    Err(e) => {
                        tracing::warn!(error = %e, "could not renew the maintenance sweep's lease")
                    }
                }
            }
        };
        let walked = tokio::select! {
            walked = self.sweep_tables(cell) => Some(walked),
            () = keep => None,
        };
        match walked {
            Some(Ok(())) => {
                self.catalog.give_back_spaced(lease, true).await?;
                Ok(true)
            }
            Some(Err(e)) => {
                self.catalog.give_back_spaced(lease, false).await?;
                Err(e)
            }
            None => {
                tracing::warn!(
                    cell,
                    "the maintenance sweep's lease was taken over: sweep stopped"
                );
                Ok(false)
            }
        }
    }

    /// Walks a cell's tables page by page: a table unchanged since a look that found
    /// nothing due gets a quiet look here; the others are queued for a full look, the walk
    /// waiting while `SWEEP_QUEUED_AT_MOST` are.
    async fn sweep_tables(self: &Arc<Self>, cell: &str) -> Result<()> {
        use futures::StreamExt;
        let namespaces = self.catalog.swept_namespaces(cell).await?;
        let mut after: Option<String> = None;
        loop {
            let (tables, next) = self
                .catalog
                .swept_tables_page(cell, &namespaces, after.as_deref())
                .await?;
            crate::telemetry::maintenance_swept(tables.len());
            futures::stream::iter(tables)
                .for_each_concurrent(QUIET_LOOKS_AT_ONCE, |(id, listed)| async move {
                    if self.quiet_look(&id, listed).await {
                        return;
                    }
                    let room = self.sweep_room.clone().acquire_owned().await.ok();
                    self.enqueue(swept_key(&id), id, Duration::ZERO, Some(listed), room);
                })
                .await;
            match next {
                Some(key) => after = Some(key),
                None => return Ok(()),
            }
        }
    }

    /// A sweep's quiet look at table `id`, listed with fingerprint `listed`: true when the
    /// last look found nothing due, the fingerprint is the same, nothing has come due by
    /// time and one listing shows no new version.
    async fn quiet_look(&self, id: &[String], listed: u64) -> bool {
        let key = QuietBook::key_of(&swept_key(id));
        let Some(memo) = lock(&self.quiet).quiet(key, listed, now_ms()) else {
            return false;
        };
        let folder = match memo.folder {
            Some(folder) => folder.to_string(),
            None => match default_data_key(self.catalog.layout(), id) {
                Some(folder) => folder,
                None => return false,
            },
        };
        let unchanged = match memo.probe.listing(&folder) {
            None => true,
            Some(listing) => {
                let page = self
                    .catalog
                    .store()
                    .list(&listing.prefix, None, 1, false)
                    .await;
                page.is_ok_and(|p| listing.unchanged(p.keys.first().map(String::as_str)))
            }
        };
        if unchanged {
            crate::telemetry::maintenance_look(true);
        } else {
            lock(&self.quiet).forget(key, listed);
        }
        unchanged
    }

    /// Looks at table `id` for the scheduler (a sweep's table: in full, its quiet look
    /// having found a change or no memo).
    async fn look(
        &self,
        key: &str,
        id: &[String],
        listed: Option<u64>,
    ) -> Result<Option<TableReport>> {
        let remember = listed.map(|listed| (key, listed));
        self.maintain_remembering(id, &How::default(), remember)
            .await
            .map(Some)
    }

    /// Looks at table `id` and runs what is due (or says what would run).
    pub async fn maintain(&self, id: &[String], how: &How) -> Result<TableReport> {
        self.maintain_remembering(id, how, None).await
    }

    /// Notes that table `key` (as a sweep keys it) had nothing due when the sweep's
    /// fingerprint was `listed`, and what will show a change.
    fn remember_quiet(
        &self,
        remember: Option<(&str, u64)>,
        record: &TableRecord,
        probe: Probe,
        until_ms: u64,
    ) {
        let Some((key, listed)) = remember else {
            return;
        };
        let odd = (default_data_key(self.catalog.layout(), &record.id).as_deref()
            != Some(record.data_key.as_str()))
        .then_some(record.data_key.as_str());
        lock(&self.quiet).remember(QuietBook::key_of(key), listed, probe, odd, until_ms);
    }

    async fn maintain_remembering(
        &self,
        id: &[String],
        how: &How,
        remember: Option<(&str, u64)>,
    ) -> Result<TableReport> {
        crate::telemetry::maintenance_look(false);
        let record = self.catalog.describe_table(&Ctx::internal(), id).await?;
        let policy = match self.catalog.table_policy(&record).await {
            Ok(policy) => policy,
            Err(e) => return Ok(TableReport::skipped(id, e.message)),
        };
        if !policy.any() {
            self.remember_quiet(remember, &record, Probe::None, u64::MAX);
            return Ok(TableReport::skipped(
                id,
                "maintenance is off for this table",
            ));
        }
        let policy = limit_to(policy, &how.tasks);
        let Some(assessment) = self.assess(&record, &policy).await? else {
            self.remember_quiet(remember, &record, Probe::AnyManifest, u64::MAX);
            return Ok(TableReport::skipped(id, "the table holds no data yet"));
        };
        let upkeep = self.catalog.upkeep(&record).await?.map(|r| r.state);
        let due = due_tasks(&assessment, &policy, upkeep.as_ref(), how.now);
        let mut report = TableReport {
            table: id.to_vec(),
            skipped: None,
            due: due.iter().map(|(t, _)| t.name()).collect(),
            runs: Vec::new(),
            figures: table_figures(&assessment),
        };
        if due.is_empty() {
            self.remember_due(&record.uid, Vec::new());
            if !how.dry_run
                && let Some(probe) = Probe::of_next_manifest(&assessment.next_manifest)
            {
                let until = quiet_until(&assessment, &policy);
                self.remember_quiet(remember, &record, probe, until);
            }
            return Ok(report);
        }
        if how.dry_run {
            for (task, indices) in &due {
                report
                    .runs
                    .push(self.dry_run(&record, &policy, *task, indices).await?);
            }
            return Ok(report);
        }
        let lease = match self.catalog.take_upkeep(&record, "maintenance").await? {
            Ok(lease) => lease,
            Err(Taken::By(holder)) => {
                self.remember_due(&record.uid, due.iter().map(|(t, _)| *t).collect());
                report.skipped = Some(format!(
                    "gateway '{}' is maintaining it ({})",
                    holder.node, holder.work
                ));
                return Ok(report);
            }
        };
        lock(&self.busy).insert(record.uid.clone());
        let keeper = Arc::new(UpkeepKeeper {
            catalog: self.catalog.clone(),
            lease: tokio::sync::Mutex::new(lease),
        });
        let result = self
            .maintain_leased(&record, &policy, how, keeper.clone(), &mut report)
            .await;
        lock(&self.busy).remove(&record.uid);
        let left = report
            .due
            .iter()
            .filter_map(|name| Task::parse(name))
            .filter(|t| {
                !report
                    .runs
                    .iter()
                    .any(|r| r.task == t.name() && r.outcome == "succeeded")
            })
            .collect();
        self.remember_due(&record.uid, left);
        match Arc::try_unwrap(keeper) {
            Ok(keeper) => {
                let lease = keeper.lease.into_inner();
                if let Err(e) = self.catalog.release_lease(lease).await {
                    tracing::warn!(table = ?id, error = %e, "could not give back a maintenance lease");
                }
            }
            // A job still holds it (it cannot: each is awaited); it lapses by itself.
            Err(_) => tracing::warn!(table = ?id, "a maintenance lease was left to lapse"),
        }
        result.map(|()| report)
    }

    /// Notes what a table is still due for, and sets the gauge of tables due per task.
    fn remember_due(&self, uid: &str, tasks: Vec<Task>) {
        let mut due = lock(&self.due_now);
        if tasks.is_empty() {
            due.remove(uid);
        } else {
            due.insert(uid.to_string(), tasks);
        }
        for task in Task::ALL {
            let n = due.values().filter(|ts| ts.contains(&task)).count();
            crate::telemetry::maintenance_due(task.name(), n);
        }
    }

    /// Under the lease: measures the latest version again and runs each task that is due.
    async fn maintain_leased(
        &self,
        record: &TableRecord,
        policy: &Policy,
        how: &How,
        keeper: Arc<UpkeepKeeper>,
        report: &mut TableReport,
    ) -> Result<()> {
        if let Some(run) = self.adopt(record, &keeper).await {
            let failed = run.outcome == "failed";
            report.runs.push(run);
            if failed {
                return Ok(());
            }
        }
        let Some(assessment) = self.assess(record, policy).await? else {
            return Ok(());
        };
        let upkeep = keeper.lease.lock().await.record.state.clone();
        let due = due_tasks(&assessment, policy, Some(&upkeep), how.now);
        report.due = due.iter().map(|(t, _)| t.name()).collect();
        report.figures = table_figures(&assessment);
        for (task, indices) in due {
            let ray = self.ray_for(&assessment, policy);
            let run = self
                .run_task(record, policy, task, &indices, keeper.clone(), ray)
                .await;
            let failed = run.outcome == "failed";
            report.runs.push(run);
            // A failure leaves the rest for the next look (the table may be gone, or the
            // lease lost).
            if failed {
                break;
            }
        }
        Ok(())
    }

    /// The Ray cluster a task runs on for a table measured as `a`, if it leaves the gateway:
    /// a cluster is configured, and the table is past the policy's threshold.
    fn ray_for(&self, a: &Assessment, policy: &Policy) -> Option<Arc<crate::ray::Ray>> {
        let ray = self.settings.ray.as_ref()?;
        (a.rows >= policy.ray.min_rows).then(|| ray.clone())
    }

    /// The latest version of the table, measured under `policy`; `None` when it holds no
    /// data yet.
    async fn assess(&self, record: &TableRecord, policy: &Policy) -> Result<Option<Assessment>> {
        if !self.catalog.has_data(record).await? {
            return Ok(None);
        }
        let (datasets, location, policy) = (
            self.datasets.clone(),
            crate::data::TableData::of(&record),
            policy.clone(),
        );
        let measured = self
            .datasets
            .runtime()
            .run(async move {
                let dataset = datasets.open(&location, &At::latest()).await?;
                work::assess(&dataset, &policy).await
            })
            .await?;
        Ok(Some(measured))
    }

    async fn dry_run(
        &self,
        record: &TableRecord,
        policy: &Policy,
        task: Task,
        indices: &[String],
    ) -> Result<TaskRun> {
        let mut figures = Figures::new();
        match task {
            Task::Compaction => {}
            Task::Index => {
                figures.insert("indices".into(), indices.join(","));
            }
            Task::Cleanup => {
                let (datasets, location, policy) = (
                    self.datasets.clone(),
                    crate::data::TableData::of(&record),
                    policy.clone(),
                );
                let stats = self
                    .datasets
                    .runtime()
                    .run(async move {
                        let dataset = datasets.open(&location, &At::latest()).await?;
                        work::cleanup(&dataset, &policy, true).await
                    })
                    .await?;
                figures.insert("versions_removable".into(), stats.old_versions.to_string());
                figures.insert("bytes_reclaimable".into(), stats.bytes_removed.to_string());
            }
        }
        Ok(TaskRun {
            task: task.name(),
            outcome: "would run".into(),
            transaction_id: None,
            figures,
            error: None,
        })
    }

    /// Runs one task as a job under the lease, and records its run.
    async fn run_task(
        &self,
        record: &TableRecord,
        policy: &Policy,
        task: Task,
        indices: &[String],
        keeper: Arc<UpkeepKeeper>,
        ray: Option<Arc<crate::ray::Ray>>,
    ) -> TaskRun {
        let started = Instant::now();
        let (datasets, location, policy) = (
            self.datasets.clone(),
            crate::data::TableData::of(&record),
            policy.clone(),
        );
        let (catalog, runtime) = (self.catalog.clone(), self.datasets.runtime().clone());
        let (record_for_work, indices_for_work) = (record.clone(), indices.to_vec());
        let keeper_for_work = keeper.clone();
        let mut before = Figures::new();
        if ray.is_some() {
            // The record says where the work runs; the job is `ray::job_id` of its id.
            before.insert("executor".into(), "ray".into());
        }
        let spec = Spec {
            op: task.operation(),
            table: &record.id,
            target: if task == Task::Index { "" } else { task.name() },
            before,
        };
        let started_job = jobs::start(
            &self.catalog,
            spec,
            Some(keeper.clone() as Arc<dyn Keeper>),
            move |id: &str| {
                let id = id.to_string();
                runtime.start(async move {
                    let mut dataset = datasets.open(&location, &At::latest()).await?;
                    let before = work::assess(&dataset, &policy).await?;
                    let mut figures = Figures::new();
                    figures.insert("version_before".into(), before.version.to_string());
                    match task {
                        Task::Compaction => {
                            figures.insert("fragments_before".into(), before.fragments.to_string());
                            if let Some(ray) = &ray {
                                let c = &policy.compaction;
                                let options = serde_json::json!({
                                    "target_rows_per_fragment": c.target_rows_per_fragment,
                                    "materialize_deletions_threshold": c.deleted_share,
                                });
                                let job = (&record_for_work.id[..], id.as_str(), "compact");
                                figures.extend(on_ray(ray, &keeper_for_work, job, options).await?);
                            } else {
                                let done = work::compact(&mut dataset, &policy, &id, || async {
                                    pause_before_commit().await;
                                    // The lease must still be ours when the rewrite commits.
                                    match keeper_for_work.keep().await {
                                        Ok(true) => Ok(()),
                                        Ok(false) => Err(Error::conflict(
                                            "lost the table's maintenance lease before committing",
                                        )),
                                        Err(e) => Err(e),
                                    }
                                })
                                .await?;
                                figures.insert(
                                    "fragments_removed".into(),
                                    done.fragments_removed.to_string(),
                                );
                                figures.insert(
                                    "fragments_added".into(),
                                    done.fragments_added.to_string(),
                                );
                                for v in &done.versions {
                                    catalog.note_own_commit(&record_for_work, None, *v);
                                }
                            }
                        }
                        Task::Index => {
                            figures.insert(
                                "unindexed_rows_before".into(),
                                before.unindexed_rows().to_string(),
                            );
                            figures.insert("indices".into(), indices_for_work.join(","));
                            if let Some(ray) = &ray {
                                let options = serde_json::json!({"indices": indices_for_work});
                                let job = (&record_for_work.id[..], id.as_str(), "index_upkeep");
                                figures.extend(on_ray(ray, &keeper_for_work, job, options).await?);
                            } else {
                                pause_before_commit().await;
                                let v = work::update_indices(&mut dataset, &indices_for_work, &id)
                                    .await?;
                                catalog.note_own_commit(&record_for_work, None, v);
                            }
                        }
                        Task::Cleanup => {
                            if let Some(ray) = &ray {
                                let c = &policy.cleanup;
                                let options = serde_json::json!({
                                    "retention_s": c.retention.as_secs_f64(),
                                    "keep_versions": c.keep_versions,
                                });
                                let job = (&record_for_work.id[..], id.as_str(), "cleanup");
                                figures.extend(on_ray(ray, &keeper_for_work, job, options).await?);
                            } else {
                                let stats = work::cleanup(&dataset, &policy, false).await?;
                                figures.insert(
                                    "versions_removed".into(),
                                    stats.old_versions.to_string(),
                                );
                                figures.insert(
                                    "bytes_reclaimed".into(),
                                    stats.bytes_removed.to_string(),
                                );
                                figures.insert(
                                    "files_removed".into(),
                                    (stats.data_files_removed
                                        + stats.index_files_removed
                                        + stats.deletion_files_removed
                                        + stats.transaction_files_removed)
                                        .to_string(),
                                );
                            }
                            // The receipts of the versions it removed go too.
                            let kept = datasets.open(&location, &At::latest()).await?;
                            let kept = work::version_numbers(&kept).await?;
                            let removed = catalog.forget_receipts(&record_for_work, &kept).await?;
                            figures.insert("receipts_removed".into(), removed.to_string());
                        }
                    }
                    let after = datasets.open(&location, &At::latest()).await?;
                    let measured = work::assess(&after, &policy).await?;
                    figures.insert("version_after".into(), measured.version.to_string());
                    figures.insert("fragments_after".into(), measured.fragments.to_string());
                    figures.insert(
                        "unindexed_rows_after".into(),
                        measured.unindexed_rows().to_string(),
                    );
                    Ok(figures)
                })
            },
        )
        .await;
        let (transaction_id, outcome) = match started_job {
            Ok(running) => {
                let id = running.id.clone();
                (Some(id), running.wait().await)
            }
            Err(e) => (None, Err(e)),
        };
        self.record_run(record, task, transaction_id, outcome, started, &keeper)
            .await
    }

    /// A task (compaction, index upkeep, cleanup) left running on the Ray cluster by a
    /// lease holder that stopped (the lease names its transaction): adopted, followed to its end and recorded as a run.
    /// `None` when there is none, or it has ended (its record says how), or this gateway
    /// has no Ray cluster to follow it on.
    async fn adopt(&self, record: &TableRecord, keeper: &Arc<UpkeepKeeper>) -> Option<TaskRun> {
        let transaction = keeper.lease.lock().await.record.state.on_ray.clone()?;
        let ray = self.settings.ray.clone()?;
        let started = Instant::now();
        // The task the job runs, as its record names it.
        let mut task = Task::Compaction;
        let adopted = self.catalog.adopt_transaction(&transaction).await;
        let outcome = match adopted {
            Ok(Some(tx)) => {
                tracing::info!(table = ?record.id, transaction = %transaction, "adopting a compaction running on Ray");
                task = Task::ALL
                    .into_iter()
                    .find(|t| t.operation() == tx.record.op)
                    .unwrap_or(Task::Compaction);
                let job = crate::ray::job_id(&transaction);
                let work = self.datasets.runtime().start(async move {
                    let result = ray.follow(&job).await?;
                    Ok(crate::ray::figures(&job, &result))
                });
                jobs::follow(
                    &self.catalog,
                    tx,
                    Some(keeper.clone() as Arc<dyn Keeper>),
                    work,
                )
                .wait()
                .await
            }
            Ok(None) => {
                // Ended (or settled): nothing to follow, and the lease forgets it.
                if let Err(e) = keeper.note_on_ray(None).await {
                    tracing::warn!(table = ?record.id, error = %e, "could not update a maintenance lease");
                }
                return None;
            }
            Err(e) => Err(e),
        };
        Some(
            self.record_run(record, task, Some(transaction), outcome, started, keeper)
                .await,
        )
    }

    /// Records a task's run: metrics, an audit line, and its last run in the lease.
    async fn record_run(
        &self,
        record: &TableRecord,
        task: Task,
        transaction_id: Option<String>,
        outcome: Result<Figures>,
        started: Instant,
        keeper: &Arc<UpkeepKeeper>,
    ) -> TaskRun {
        let seconds = started.elapsed().as_secs_f64();
        let run = match outcome {
            Ok(figures) => TaskRun {
                task: task.name(),
                outcome: "succeeded".into(),
                transaction_id: transaction_id.clone(),
                figures,
                error: None,
            },
            Err(e) => TaskRun {
                task: task.name(),
                outcome: "failed".into(),
                transaction_id: transaction_id.clone(),
                figures: Figures::new(),
                error: Some(e.message.clone()),
            },
        };
        let reclaimed = run
            .figures
            .get("bytes_reclaimed")
            .and_then(|b| b.parse().ok())
            .unwrap_or(0);
        crate::telemetry::maintenance_run(task.name(), &run.outcome, seconds, reclaimed);
        self.audit.record(Event {
            request_id: transaction_id.clone().unwrap_or_default(),
            principal: self.catalog.node().to_string(),
            scheme: "internal".into(),
            operation: format!("table.{}", task.operation()),
            id: record.id.clone(),
            decision: "allow",
            status: if run.outcome == "succeeded" { 200 } else { 500 },
            reason: run.error.clone(),
            ..Default::default()
        });
        let last = LastRun {
            at_ms: now_ms(),
            outcome: run.outcome.clone(),
            transaction_id: transaction_id.unwrap_or_default(),
            version_before: number(&run.figures, "version_before"),
            version_after: run
                .figures
                .get("version_after")
                .and_then(|v| v.parse().ok()),
            error: run.error.clone(),
        };
        let mut lease = keeper.lease.lock().await;
        let mut state = lease.record.state.clone();
        state.table = record.id.clone();
        state.last.insert(task.name().to_string(), last);
        state.on_ray = None;
        match self.catalog.save_lease(&mut lease, state).await {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!(table = ?record.id, "lost the maintenance lease before recording a run")
            }
            Err(e) => {
                tracing::warn!(table = ?record.id, error = %e, "could not record a maintenance run")
            }
        }
        run
    }
}

impl Maintainer {
    /// Notes, for `admin fsck`, the tables that are due for a task that has not succeeded
    /// on them for `after` (or ever, for a table older than that).
    pub async fn overdue(&self, after: Duration) -> Result<Vec<Finding>> {
        use futures::StreamExt;
        let limit = after.as_millis() as u64;
        // Tables looked at `OVERDUE_AT_ONCE` at a time (a far store's latency is not paid
        // table after table), their notes in the listing's order.
        let found: Vec<Result<Vec<Finding>>> =
            futures::stream::iter(self.catalog.all_table_ids().await?)
                .map(|id| self.overdue_table(id, limit))
                .buffered(OVERDUE_AT_ONCE)
                .collect()
                .await;
        let mut notes = Vec::new();
        for table in found {
            notes.extend(table?);
        }
        Ok(notes)
    }

    /// `overdue` for table `id`: a note for each task due on it for longer than `limit` ms.
    async fn overdue_table(&self, id: Vec<String>, limit: u64) -> Result<Vec<Finding>> {
        let mut notes = Vec::new();
        let record = match self.catalog.describe_table(&Ctx::internal(), &id).await {
            Ok(record) => record,
            Err(_) => return Ok(notes),
        };
        let Ok(policy) = self.catalog.table_policy(&record).await else {
            return Ok(notes);
        };
        if !policy.any() {
            return Ok(notes);
        }
        let Ok(Some(assessment)) = self.assess(&record, &policy).await else {
            return Ok(notes);
        };
        let upkeep = self.catalog.upkeep(&record).await?.map(|r| r.state);
        for (task, _) in due_tasks(&assessment, &policy, upkeep.as_ref(), true) {
            let last_ok = upkeep
                .as_ref()
                .and_then(|u| u.last_run(task))
                .filter(|r| r.outcome == "succeeded")
                .map(|r| r.at_ms);
            let since = last_ok.unwrap_or(record.created_at_ms);
            if now_ms().saturating_sub(since) < limit {
                continue;
            }
            let hours = now_ms().saturating_sub(since) / 3_600_000;
            notes.push(Finding {
                problem: "maintenance-overdue",
                object: self.catalog.show(&record.id),
                detail: format!(
                    "due for {} ({}); {}",
                    task.name(),
                    why_due(task, &assessment),
                    match last_ok {
                        Some(_) => format!("it last succeeded {hours} h ago"),
                        None => format!("it never ran (the table is {hours} h old)"),
                    }
                ),
                repaired: false,
                severity: "note",
            });
        }
        Ok(notes)
    }
}

/// Tables `overdue` looks at at once.
const OVERDUE_AT_ONCE: usize = 16;

fn why_due(task: Task, a: &Assessment) -> String {
    match task {
        Task::Compaction => format!(
            "{} small fragments of {}, {} of {} rows deleted",
            a.small_fragments, a.fragments, a.deleted_rows, a.rows
        ),
        Task::Index => format!("{} unindexed rows", a.unindexed_rows()),
        Task::Cleanup => format!("{} versions", a.versions),
    }
}

/// Renews a table's maintenance lease at each beat of its jobs.
struct UpkeepKeeper {
    catalog: Arc<Catalog>,
    lease: tokio::sync::Mutex<Lease<Upkeep>>,
}

impl UpkeepKeeper {
    /// Writes into the lease the transaction of a compaction running on Ray (or that none
    /// is): an error when the lease was lost.
    async fn note_on_ray(&self, transaction: Option<&str>) -> Result<()> {
        let mut lease = self.lease.lock().await;
        let mut state = lease.record.state.clone();
        state.on_ray = transaction.map(str::to_string);
        match self.catalog.save_lease(&mut lease, state).await? {
            true => Ok(()),
            false => Err(Error::conflict(
                "lost the table's maintenance lease before starting its Ray job",
            )),
        }
    }
}

#[async_trait]
impl Keeper for UpkeepKeeper {
    async fn keep(&self) -> Result<bool> {
        let mut lease = self.lease.lock().await;
        self.catalog.renew_lease(&mut lease).await
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn number(figures: &Figures, name: &str) -> u64 {
    figures.get(name).and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// The sweep's key of a table (by id, until a look reads its uid).
fn swept_key(id: &[String]) -> String {
    format!("id:{}", crate::catalog::names::join(id, "\u{0}"))
}

/// The data folder the gateway would pick for table `id` (`Layout::default_data_key`):
/// where a quiet look finds most tables without keeping their folder.
fn default_data_key(layout: &Layout, id: &[String]) -> Option<String> {
    let placed = layout.place(id).ok()?;
    let (name, namespace) = placed.rel.split_last()?;
    let parent = crate::catalog::layout::Placed {
        cell: placed.cell.clone(),
        rel: namespace,
    };
    Some(Layout::default_data_key(&parent, name, ""))
}

/// Until when a table found not due stays so unless it commits: for ever, unless cleanup
/// keeps versions that come of age (then when the oldest does, or within `CLEANUP_EVERY`).
fn quiet_until(a: &Assessment, policy: &Policy) -> u64 {
    let c = &policy.cleanup;
    if !c.enabled || a.versions <= c.keep_versions {
        return u64::MAX;
    }
    let left = match a.oldest_version_age {
        Some(age) => c.retention.saturating_sub(age),
        None => Duration::ZERO,
    };
    now_ms().saturating_add(left.min(CLEANUP_EVERY).as_millis() as u64)
}

/// The policy with every task not in `tasks` turned off (`tasks` empty: all kept).
fn limit_to(mut policy: Policy, tasks: &[Task]) -> Policy {
    if !tasks.is_empty() {
        policy.compaction.enabled &= tasks.contains(&Task::Compaction);
        policy.index.enabled &= tasks.contains(&Task::Index);
        policy.cleanup.enabled &= tasks.contains(&Task::Cleanup);
    }
    policy
}

/// Runs `task` of the job package on table `table` on Ray, under transaction
/// `transaction`, with `options`: the figures it reports. The lease names the transaction
/// before the job exists, so a holder after this one adopts the job.
async fn on_ray(
    ray: &Arc<crate::ray::Ray>,
    keeper: &UpkeepKeeper,
    (table, transaction, task): (&[String], &str, &str),
    options: serde_json::Value,
) -> Result<Figures> {
    keeper.note_on_ray(Some(transaction)).await?;
    ray.work(crate::ray::JobSpec {
        task,
        table,
        transaction,
        options,
    })
    .await
}

/// The tasks due, in the order they run (compaction first: index upkeep then indexes
/// the rewritten fragments once; cleanup last, so it removes what the others replaced),
/// with the indices due for index upkeep. Cleanup runs at most every `CLEANUP_EVERY` (or
/// retention period, if shorter) unless `now`.
fn due_tasks(
    a: &Assessment,
    policy: &Policy,
    upkeep: Option<&Upkeep>,
    now: bool,
) -> Vec<(Task, Vec<String>)> {
    let mut due = Vec::new();
    if a.compaction_due(policy) {
        due.push((Task::Compaction, Vec::new()));
    }
    let indices = a.indices_due(policy);
    if !indices.is_empty() {
        due.push((Task::Index, indices));
    }
    let every = CLEANUP_EVERY.min(policy.cleanup.retention);
    let cleaned_lately = upkeep
        .and_then(|u| u.last_run(Task::Cleanup))
        .is_some_and(|r| now_ms().saturating_sub(r.at_ms) < every.as_millis() as u64);
    if a.cleanup_due(policy) && (now || !cleaned_lately) {
        due.push((Task::Cleanup, Vec::new()));
    }
    due
}

fn table_figures(a: &Assessment) -> Figures {
    BTreeMap::from([
        ("version".into(), a.version.to_string()),
        ("fragments".into(), a.fragments.to_string()),
        ("small_fragments".into(), a.small_fragments.to_string()),
        ("rows".into(), a.rows.to_string()),
        ("deleted_rows".into(), a.deleted_rows.to_string()),
        ("unindexed_rows".into(), a.unindexed_rows().to_string()),
        ("versions".into(), a.versions.to_string()),
    ])
}

fn log_report(report: &TableReport) {
    for run in &report.runs {
        tracing::info!(
            table = ?report.table,
            task = run.task,
            outcome = %run.outcome,
            transaction = run.transaction_id.as_deref().unwrap_or("-"),
            figures = ?run.figures,
            error = run.error.as_deref().unwrap_or(""),
            "maintenance ran"
        );
    }
}

/// A fault-injection hook for the crash suite: with `LANCE_GATEWAY_FAULT_PAUSE_BEFORE_COMMIT_MS`
/// set, each maintenance task waits that long after its rewrite and before its commit, so a
/// test can kill the gateway there. Unset (always, outside the suite), it does nothing.
async fn pause_before_commit() {
    static PAUSE: std::sync::LazyLock<Option<Duration>> = std::sync::LazyLock::new(|| {
        std::env::var("LANCE_GATEWAY_FAULT_PAUSE_BEFORE_COMMIT_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .map(Duration::from_millis)
    });
    if let Some(pause) = *PAUSE {
        tracing::warn!(
            pause_ms = pause.as_millis() as u64,
            "fault injection: pausing before a maintenance commit"
        );
        tokio::time::sleep(pause).await;
    }
}

/// Whether a maintenance run whose gateway stopped committed: a version of its table made
/// since it started carries its transaction id.
pub async fn committed(
    catalog: &Catalog,
    datasets: &Arc<LanceDatasets>,
    ray: Option<&Arc<crate::ray::Ray>>,
    tx: TransactionRecord,
) -> Result<bool> {
    // pylance cannot tag a job's commit: Ray's record of the job says.
    if let Some(settled) = crate::ray::settled(ray, &tx).await {
        return settled;
    }
    let record = match catalog.describe_table(&Ctx::internal(), &tx.table).await {
        Ok(record) => record,
        Err(e) if e.code == Code::TableNotFound || e.code == Code::NamespaceNotFound => {
            return Ok(false);
        }
        Err(e) => return Err(e),
    };
    if tx.op == Task::Cleanup.operation() || !catalog.has_data(&record).await? {
        // Cleanup commits no version: a stopped one is reported failed (it may have
        // removed some of what it meant to, which the next run finishes).
        return Ok(false);
    }
    let (datasets_for_work, location) = (datasets.clone(), crate::data::TableData::of(&record));
    datasets
        .runtime()
        .run(async move {
            let dataset = datasets_for_work.open(&location, &At::latest()).await?;
            work::committed_by(&dataset, &tx.id, tx.started_at_ms).await
        })
        .await
}
