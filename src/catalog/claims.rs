//! Data-folder claims: no two tables ever share or nest their data. A table claims its
//! folder (`locations/<folder>.json`, naming the table's uid) before its create commits, and
//! the claim goes only after the table is gone and, for a drop, its data deleted.

use futures::future::join_all;

use super::Catalog;
use super::layout::Layout;
use super::records::*;
use crate::error::{Error, Result};
use crate::store::{Condition, StoreError};

/// The outcome of claiming a data folder.
#[derive(Debug)]
pub(crate) enum Claim {
    Claimed,
    /// The same folder is claimed: the claim's key and the claim.
    Taken(String, LocationClaim),
    /// A folder above or below is claimed: that claim's key and the claim.
    Overlaps(String, LocationClaim),
}

impl Catalog {
    pub(crate) fn claim_error(&self, data_key: &str, refused: Claim) -> Error {
        let uri = self.layout.uri_of(data_key);
        match refused {
            Claim::Claimed => Error::internal("a granted claim reported as refused", uri),
            Claim::Taken(_, owner) => Error::invalid(format!(
                "location '{uri}' is already the data folder of table '{}'",
                self.show(&owner.table)
            )),
            Claim::Overlaps(_, owner) => Error::invalid(format!(
                "location '{uri}' overlaps the data folder of table '{}'",
                self.show(&owner.table)
            )),
        }
    }

    /// Claims `data_key` for table `uid`: refused when it, a folder above it or a folder
    /// below it is claimed. The claim is written first and the neighbours checked after, so
    /// of two racing overlapping claims at least one sees the other.
    pub(crate) async fn claim_location(
        &self,
        cell: &str,
        data_key: &str,
        uid: &str,
        id: &[String],
    ) -> Result<Claim> {
        let key = Layout::location_claim_key(cell, data_key);
        let claim = LocationClaim {
            format_version: FORMAT_VERSION,
            uid: uid.to_string(),
            table: id.to_vec(),
        };
        match self.write(&key, encode(&claim), Condition::IfAbsent).await {
            Ok(_) => {}
            Err(StoreError::PreconditionFailed) => match self.read::<LocationClaim>(&key).await? {
                // Our own write, landed by an earlier attempt the client retried.
                Some((c, _)) if c.uid == uid => {}
                Some((c, _)) => return Ok(Claim::Taken(key, c)),
                // Released in between: try again.
                None => return Box::pin(self.claim_location(cell, data_key, uid, id)).await,
            },
            Err(e) => return Err(e.into()),
        }
        let overlap = async {
            let rel = &data_key[cell.len()..];
            let segments: Vec<&str> = rel.split('/').collect();
            let ancestors: Vec<String> = (1..segments.len())
                .map(|n| {
                    Layout::location_claim_key(cell, &format!("{cell}{}", segments[..n].join("/")))
                })
                .collect();
            // The folders above and the folders below are looked up side by side.
            let below_prefix = Layout::location_claims_below(cell, data_key);
            let (above, below) = tokio::join!(
                join_all(ancestors.iter().map(|k| self.read::<LocationClaim>(k))),
                self.store.list(&below_prefix, None, 1, false)
            );
            for (found, k) in above.into_iter().zip(&ancestors) {
                if let Some((c, _)) = found? {
                    return Ok(Some((k.clone(), c)));
                }
            }
            if let Some(k) = below?.keys.first() {
                return Ok(self
                    .read::<LocationClaim>(k)
                    .await?
                    .map(|(c, _)| (k.clone(), c)));
            }
            Ok::<_, Error>(None)
        }
        .await;
        match overlap {
            Ok(None) => Ok(Claim::Claimed),
            Ok(Some((other_key, other))) => {
                self.release_location(cell, data_key, uid).await?;
                Ok(Claim::Overlaps(other_key, other))
            }
            Err(e) => {
                self.release_or_log(cell, data_key, uid).await;
                Err(e)
            }
        }
    }

    /// Whether a claim that refused ours may soon be released, so the refusal is no answer
    /// yet: it is gone or changed already, or it is held by a create that has not committed
    /// (it may still fail), or by a deregister that has committed (it releases the claim
    /// next). A claim of a live table, of a table being dropped (its data goes, so the folder
    /// is no dataset any more) or of a renamed table is a real refusal.
    pub(crate) async fn claim_in_flight(&self, holder: &Claim) -> Result<bool> {
        let (Claim::Taken(key, claim) | Claim::Overlaps(key, claim)) = holder else {
            return Ok(false);
        };
        // Read again first: a holder that finished between the refusal and now (and so is
        // neither in flight nor live below) must not make the refusal look real.
        match self.read::<LocationClaim>(key).await? {
            Some((now, _)) if now.uid == claim.uid => {}
            _ => return Ok(true),
        }
        if claim.table.is_empty() {
            return Ok(false);
        }
        if let Some((entry, _)) = self
            .read_entry(&self.table_pending_key(&claim.table)?)
            .await?
            && entry.op_id() == claim.uid
            && entry.committed_table().is_none()
            && !matches!(entry, Entry::LegacyDrop(_))
        {
            return Ok(true);
        }
        // A batch's deregister of the holder (its intent at the holder's pending key): the
        // claim goes if the batch commits.
        if let Some((
            Entry::Intent(Intent {
                kind:
                    IntentKind::DropTable {
                        record,
                        delete_data: false,
                        ..
                    },
                batch: Some(_),
                ..
            }),
            _,
        )) = self
            .read_entry(&self.table_pending_key(&claim.table)?)
            .await?
            && record.uid == claim.uid
        {
            return Ok(true);
        }
        let table_key = self.table_key(&claim.table)?;
        if self
            .read::<TableRecord>(&table_key)
            .await?
            .is_some_and(|(t, _)| t.uid == claim.uid)
        {
            return Ok(false);
        }
        let cell = self.cell_of(&claim.table)?;
        let drops = self
            .store
            .list(&Layout::drops_prefix(&cell), None, super::PAGE, true)
            .await?;
        for drop_key in drops.keys {
            if let Some((
                Entry::Intent(Intent {
                    state: IntentState::Committed,
                    kind:
                        IntentKind::DropTable {
                            record,
                            delete_data: false,
                            ..
                        },
                    ..
                }),
                _,
            )) = self.read_entry(&drop_key).await?
                && record.uid == claim.uid
            {
                return Ok(true);
            }
        }
        // A create giving up releases its claim before it removes its staged entry, so a
        // claim read before the release and an entry read after the removal look like a
        // claim with no create behind it. Read the claim once more: gone now, it was in
        // flight.
        match self.read::<LocationClaim>(key).await? {
            Some((now, _)) if now.uid == claim.uid => Ok(false),
            _ => Ok(true),
        }
    }

    /// Removes the claim on `data_key` if table `uid` still holds it.
    pub(crate) async fn release_location(
        &self,
        cell: &str,
        data_key: &str,
        uid: &str,
    ) -> Result<()> {
        let key = Layout::location_claim_key(cell, data_key);
        if let Some((claim, etag)) = self.read::<LocationClaim>(&key).await?
            && claim.uid == uid
        {
            self.remove(&key, &etag).await?;
        }
        Ok(())
    }

    /// `release_location` on a path that is already failing: the first error is the one to
    /// report, and a claim left behind is logged for an operator.
    pub(crate) async fn release_or_log(&self, cell: &str, data_key: &str, uid: &str) {
        if let Err(e) = self.release_location(cell, data_key, uid).await {
            tracing::warn!(data_key, uid, error = %e, "could not release a location claim");
        }
    }
}
