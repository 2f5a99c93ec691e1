//! Leases: a record that one gateway at a time may hold, for work on one object that must
//! not run twice at once (a table's maintenance). The record outlives its holders and keeps
//! what they leave in it (`state`: when each task last ran), so the next holder starts from
//! what the last one did.
//!
//! Taking, renewing and giving back a lease are conditional writes on the record itself
//! (create-if-absent when there is none, replace-if-unchanged after), so of two gateways
//! that want it exactly one gets it. A holder renews while it works; a lease not renewed
//! for the grace period has lapsed and may be taken over, and so may one held by this very
//! node in an earlier run (a gateway restarted under its node id takes back its own work at
//! once). A holder that finds its renewal refused has lost the lease and stops: whatever it
//! was doing must be safe to abandon at any step (a Lance commit that did not happen
//! changes nothing), and the next holder starts over.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::Catalog;
use super::records::{FORMAT_VERSION, decode, encode, new_uid, now_ms};
use crate::error::{Error, Result};
use crate::store::{Condition, Object, StoreError};

/// Who holds a lease.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Holder {
    /// The gateway's node id.
    pub node: String,
    /// What it is doing (a transaction id, or an operation name).
    pub work: String,
    pub taken_at_ms: u64,
    pub renewed_at_ms: u64,
}

/// A leasable record: its holder while held, and the state holders leave behind.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Leased<T> {
    pub format_version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<Holder>,
    /// New on every write: S3 ETags are hashes of the bytes, and a renewal must never
    /// return the record to a tag a stalled rival still holds.
    #[serde(default)]
    pub rev: String,
    #[serde(default)]
    pub state: T,
}

/// A lease this gateway holds: the record as it wrote it, and the tag it was written at.
pub struct Lease<T> {
    key: String,
    etag: String,
    pub record: Leased<T>,
}

impl<T> Lease<T> {
    pub fn key(&self) -> &str {
        &self.key
    }
}

/// The state of a lease on work done once per period whichever gateway does it (the
/// warehouse-wide housekeeping, the maintenance sweep): when it last got through.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Spaced {
    #[serde(default)]
    pub last_ran_ms: u64,
    /// The gateway that ran it last: it runs it again after `spacing`, any other gateway
    /// only after half as long again (the work stays where its memory is: the maintenance
    /// sweep's record of what each table looked like).
    #[serde(default)]
    pub last_node: String,
}

/// Why a lease could not be taken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Taken {
    /// Another gateway holds it and renews it.
    By(Holder),
}

impl Catalog {
    /// Whether `holder` no longer holds its lease: not renewed for the grace period, or
    /// this node's own from an earlier run.
    pub fn lapsed(&self, holder: &Holder) -> bool {
        self.settleable(Some(&holder.node), holder.taken_at_ms, holder.renewed_at_ms)
    }

    /// The record at `key` and its tag, holder or not.
    pub async fn read_leased<T>(&self, key: &str) -> Result<Option<(Leased<T>, String)>>
    where
        T: DeserializeOwned + Default,
    {
        self.read::<Leased<T>>(key).await
    }

    /// Takes the lease at `key` for `work`: when nobody holds it, or its holder's lease
    /// lapsed. `Err(Taken)` inside `Ok` when a live holder has it.
    pub async fn take_lease<T>(
        &self,
        key: &str,
        work: &str,
    ) -> Result<std::result::Result<Lease<T>, Taken>>
    where
        T: Serialize + DeserializeOwned + Default + Clone,
    {
        loop {
            let current = self.read_leased::<T>(key).await?;
            let now = now_ms();
            let holder = Holder {
                node: self.node.clone(),
                work: work.to_string(),
                taken_at_ms: now,
                renewed_at_ms: now,
            };
            let (state, cond) = match current {
                None => (T::default(), Condition::IfAbsent),
                Some((record, etag)) => {
                    if let Some(h) = record.holder.as_ref().filter(|h| !self.lapsed(h)) {
                        return Ok(Err(Taken::By(h.clone())));
                    }
                    if let Some(h) = &record.holder {
                        tracing::info!(key, holder = %h.node, work = %h.work, "taking over a lapsed lease");
                    }
                    (record.state, Condition::IfMatch(etag))
                }
            };
            let record = Leased {
                format_version: FORMAT_VERSION,
                holder: Some(holder),
                rev: new_uid(),
                state,
            };
            match self.write(key, encode(&record), cond).await {
                Ok(etag) => {
                    return Ok(Ok(Lease {
                        key: key.to_string(),
                        etag,
                        record,
                    }));
                }
                // Someone else wrote first: look again.
                Err(StoreError::PreconditionFailed) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Renews a lease; `Ok(false)` when it was lost (taken over after it lapsed).
    pub async fn renew_lease<T>(&self, lease: &mut Lease<T>) -> Result<bool>
    where
        T: Serialize + Clone,
    {
        let mut record = lease.record.clone();
        if let Some(h) = record.holder.as_mut() {
            h.renewed_at_ms = now_ms();
        }
        record.rev = new_uid();
        self.put_lease(lease, record).await
    }

    /// Writes `state` into the record while holding it; `Ok(false)` when it was lost.
    pub async fn save_lease<T>(&self, lease: &mut Lease<T>, state: T) -> Result<bool>
    where
        T: Serialize + Clone,
    {
        let mut record = lease.record.clone();
        record.state = state;
        if let Some(h) = record.holder.as_mut() {
            h.renewed_at_ms = now_ms();
        }
        record.rev = new_uid();
        self.put_lease(lease, record).await
    }

    /// Gives the lease back, keeping its state.
    pub async fn release_lease<T>(&self, mut lease: Lease<T>) -> Result<()>
    where
        T: Serialize + Clone,
    {
        let mut record = lease.record.clone();
        record.holder = None;
        record.rev = new_uid();
        if !self.put_lease(&mut lease, record).await? {
            tracing::warn!(key = %lease.key, "a lease was taken over before it was given back");
        }
        Ok(())
    }

    async fn put_lease<T>(&self, lease: &mut Lease<T>, record: Leased<T>) -> Result<bool>
    where
        T: Serialize,
    {
        match self
            .write(
                &lease.key,
                encode(&record),
                Condition::IfMatch(lease.etag.clone()),
            )
            .await
        {
            Ok(etag) => {
                lease.etag = etag;
                lease.record = record;
                Ok(true)
            }
            Err(StoreError::PreconditionFailed) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Takes the lease at `key` on periodic `work` if this gateway may run it now: nobody
    /// holds it live and it last got through at least `spacing` ago, whichever gateway ran
    /// it. `None` otherwise, after one read in the usual case.
    pub async fn take_spaced(
        &self,
        key: &str,
        work: &str,
        spacing: std::time::Duration,
    ) -> Result<Option<Lease<Spaced>>> {
        let due = |state: &Spaced| {
            let wait = if state.last_node.is_empty() || state.last_node == self.node {
                spacing
            } else {
                spacing.mul_f64(1.5)
            };
            now_ms().saturating_sub(state.last_ran_ms) >= wait.as_millis() as u64
        };
        if let Some((record, _)) = self.read_leased::<Spaced>(key).await?
            && (!due(&record.state) || record.holder.as_ref().is_some_and(|h| !self.lapsed(h)))
        {
            return Ok(None);
        }
        match self.take_lease::<Spaced>(key, work).await? {
            Ok(lease) if due(&lease.record.state) => Ok(Some(lease)),
            // Run by another between the look and the take.
            Ok(lease) => {
                self.release_lease(lease).await?;
                Ok(None)
            }
            Err(Taken::By(_)) => Ok(None),
        }
    }

    /// Gives back a lease from `take_spaced`; `done`: the work got through, so the next run
    /// is spaced from now (else the next sweep of any gateway tries again).
    pub async fn give_back_spaced(&self, mut lease: Lease<Spaced>, done: bool) -> Result<()> {
        if done
            && !self
                .save_lease(
                    &mut lease,
                    Spaced {
                        last_ran_ms: now_ms(),
                        last_node: self.node.clone(),
                    },
                )
                .await?
        {
            return Ok(());
        }
        self.release_lease(lease).await
    }

    /// Removes a leasable record (its object went away): only while nobody holds it live.
    pub async fn remove_leased(&self, key: &str) -> Result<()> {
        match self.store.get(key).await {
            Ok(Some(Object { body, etag })) => {
                let record: Leased<serde_json::Value> = decode(key, &body)?;
                if record.holder.as_ref().is_some_and(|h| !self.lapsed(h)) {
                    return Err(Error::conflict(format!(
                        "'{key}' is held by a live gateway"
                    )));
                }
                self.remove(key, &etag).await?;
                Ok(())
            }
            Ok(None) | Err(StoreError::NoSuchBucket(_)) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}
