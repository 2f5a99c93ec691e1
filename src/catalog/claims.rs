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
    /// The same folder is claimed by this claim's table.
    Taken(LocationClaim),
    /// A folder above or below is claimed by this claim's table.
    Overlaps(LocationClaim),
}

impl Catalog {
    pub(crate) fn claim_error(&self, data_key: &str, refused: Claim) -> Error {
        let uri = self.layout.uri_of(data_key);
        match refused {
            Claim::Claimed => Error::internal("a granted claim reported as refused", uri),
            Claim::Taken(owner) => Error::invalid(format!(
                "location '{uri}' is already the data folder of table '{}'",
                self.show(&owner.table)
            )),
            Claim::Overlaps(owner) => Error::invalid(format!(
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
                Some((c, _)) => return Ok(Claim::Taken(c)),
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
            for found in above {
                if let Some((c, _)) = found? {
                    return Ok(Some(c));
                }
            }
            if let Some(k) = below?.keys.first() {
                return Ok(self.read::<LocationClaim>(k).await?.map(|(c, _)| c));
            }
            Ok::<_, Error>(None)
        }
        .await;
        match overlap {
            Ok(None) => Ok(Claim::Claimed),
            Ok(Some(other)) => {
                self.release_location(cell, data_key, uid).await?;
                Ok(Claim::Overlaps(other))
            }
            Err(e) => {
                self.release_or_log(cell, data_key, uid).await;
                Err(e)
            }
        }
    }

    /// Whether a claim is held by a create that has not committed yet (it may still fail
    /// and release it): then a rival claiming the folder waits rather than be refused.
    pub(crate) async fn claim_in_flight(&self, holder: &Claim) -> Result<bool> {
        let (Claim::Taken(claim) | Claim::Overlaps(claim)) = holder else {
            return Ok(false);
        };
        if claim.table.is_empty() {
            return Ok(false);
        }
        Ok(
            match self
                .read_entry(&self.table_pending_key(&claim.table)?)
                .await?
            {
                Some((Entry::StagedTable(t), _)) => t.uid == claim.uid,
                Some((entry @ Entry::Intent(_), _)) => {
                    entry.op_id() == claim.uid && entry.committed_table().is_none()
                }
                _ => false,
            },
        )
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
