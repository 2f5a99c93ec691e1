//! Work that outlives a request, run one way: an index build a client asked for, and the
//! maintenance the gateway does by itself (`maintain`). A job is
//!
//! - a **transaction record** (`catalog::transactions`): written `Running` when the job
//!   starts, refreshed every quarter of the grace period while it runs, and given its
//!   outcome and the figures the work reports when it ends, so DescribeTransaction answers
//!   for it from any gateway, and a job whose gateway died is told from a live one;
//! - optionally a **lease** it works under (`Keeper`): renewed at the same beat; a lease
//!   lost (taken over after it lapsed) stops the work;
//! - a **runner on the data runtime**: the work is a task there, aborted (at its next
//!   await, so before it commits or not at all) when AlterTransaction asks it to stop or its
//!   lease is lost.
//!
//! The work itself is any future answering `Figures`; each kind of job is a small module on
//! top of this one.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::task::JoinHandle;

use crate::catalog::Catalog;
use crate::catalog::transactions::{Transaction, TxStatus};
use crate::error::{Code, Error, Result};

/// What a job reports of itself, by name (`fragments_before`, `bytes_reclaimed`, ...).
pub type Figures = BTreeMap<String, String>;

/// Keeps whatever a job holds besides its record (a lease), at every beat.
#[async_trait]
pub trait Keeper: Send + Sync {
    /// `Ok(false)` when it was lost: the job must stop.
    async fn keep(&self) -> Result<bool>;
}

/// What a job is: its operation, the table it runs on, what it makes, and what it knows of
/// itself before it runs.
pub struct Spec<'a> {
    pub op: &'a str,
    pub table: &'a [String],
    pub target: &'a str,
    pub before: Figures,
}

/// A started job: its transaction id, and its outcome once it ends.
pub struct Running {
    pub id: String,
    outcome: tokio::sync::oneshot::Receiver<Result<Figures>>,
}

impl Running {
    /// Waits for the job's end.
    pub async fn wait(self) -> Result<Figures> {
        self.outcome
            .await
            .map_err(|gone| Error::internal("a job was lost", gone))?
    }

    /// Waits for the job's end for at most `time`: `None` if it is still running.
    pub async fn wait_at_most(self, time: Duration) -> Option<Result<Figures>> {
        match tokio::time::timeout(time, self.outcome).await {
            Ok(Ok(outcome)) => Some(outcome),
            Ok(Err(gone)) => Some(Err(Error::internal("a job was lost", gone))),
            Err(_) => None,
        }
    }
}

/// How a job's work ended.
enum Ended {
    Done(Figures),
    /// Stopped by AlterTransaction before it committed.
    Canceled,
    /// Stopped because its lease was lost.
    Lost,
    Failed(Error),
}

impl Ended {
    fn of(
        joined: std::result::Result<Result<Figures>, tokio::task::JoinError>,
        lost: bool,
    ) -> Self {
        match joined {
            Ok(Ok(figures)) => Ended::Done(figures),
            Ok(Err(e)) => Ended::Failed(e),
            Err(e) if e.is_cancelled() && lost => Ended::Lost,
            Err(e) if e.is_cancelled() => Ended::Canceled,
            Err(e) => Ended::Failed(Error::internal("a job failed", e)),
        }
    }

    fn into_result(self) -> Result<Figures> {
        match self {
            Ended::Done(figures) => Ok(figures),
            Ended::Canceled => Err(Error::new(
                Code::ConcurrentModification,
                "the work was canceled (AlterTransaction) before it committed",
            )),
            Ended::Lost => Err(Error::new(
                Code::ConcurrentModification,
                "the work lost its lease to another gateway before it committed",
            )),
            Ended::Failed(e) => Err(e),
        }
    }
}

/// Starts a job: writes its record, then has `work` start it on the data runtime (given
/// the transaction id, which the work may write into what it commits) and watches it to
/// its end in the background. Answers once the work has started; if the record cannot be
/// written, the work never starts.
pub async fn start<W>(
    catalog: &Arc<Catalog>,
    spec: Spec<'_>,
    keeper: Option<Arc<dyn Keeper>>,
    work: W,
) -> Result<Running>
where
    W: FnOnce(&str) -> JoinHandle<Result<Figures>>,
{
    let tx = catalog
        .begin_transaction(spec.table, spec.op, spec.target, spec.before)
        .await?;
    let work = work(&tx.record.id);
    Ok(follow(catalog, tx, keeper, work))
}

/// Watches `work` to its end under transaction `tx`, which this gateway owns: one it began,
/// or one it adopted from a gateway that stopped while the work went on elsewhere (a Ray
/// job, `Catalog::adopt_transaction`).
pub fn follow(
    catalog: &Arc<Catalog>,
    mut tx: Transaction,
    keeper: Option<Arc<dyn Keeper>>,
    work: JoinHandle<Result<Figures>>,
) -> Running {
    let id = tx.record.id.clone();
    let (done, outcome) = tokio::sync::oneshot::channel();
    let catalog = catalog.clone();
    tokio::spawn(async move {
        let result = watch(&catalog, &mut tx, keeper, work).await;
        let _ = done.send(result);
    });
    Running { id, outcome }
}

/// Refreshes the record (and the lease) while `work` runs, stops it when a cancel is asked
/// for or the lease is lost, and writes the outcome.
async fn watch(
    catalog: &Catalog,
    tx: &mut Transaction,
    keeper: Option<Arc<dyn Keeper>>,
    mut work: JoinHandle<Result<Figures>>,
) -> Result<Figures> {
    let mut beat = tokio::time::interval(catalog.heartbeat());
    beat.tick().await;
    let mut lost = false;
    // Work that committed before an abort reached it ends as done: the outcome is always
    // what happened. The refreshes go on until it has ended (an abort lands only at the
    // work's next await, which a long computation may take a while to reach).
    let ended = loop {
        tokio::select! {
            joined = &mut work => break Ended::of(joined, lost),
            _ = beat.tick() => {
                match catalog.refresh_transaction(tx).await {
                    Ok(true) => work.abort(),
                    Ok(false) => {}
                    Err(e) => tracing::warn!(transaction = %tx.record.id, error = %e, "could not refresh a transaction"),
                }
                if let Some(keeper) = &keeper {
                    match keeper.keep().await {
                        Ok(true) => {}
                        Ok(false) => {
                            lost = true;
                            work.abort();
                        }
                        Err(e) => tracing::warn!(transaction = %tx.record.id, error = %e, "could not renew a job's lease"),
                    }
                }
            }
        }
    };
    let (status, error, figures) = match &ended {
        Ended::Done(figures) => (TxStatus::Succeeded, None, figures.clone()),
        Ended::Canceled => (TxStatus::Canceled, None, Figures::new()),
        Ended::Lost => (
            TxStatus::Failed,
            Some("lost its lease to another gateway before it committed".to_string()),
            Figures::new(),
        ),
        Ended::Failed(e) => (TxStatus::Failed, Some(e.message.clone()), Figures::new()),
    };
    if let Err(e) = catalog
        .finish_transaction(tx, status, error, &figures)
        .await
    {
        tracing::warn!(transaction = %tx.record.id, error = %e, "could not record a transaction's outcome");
    }
    ended.into_result()
}
