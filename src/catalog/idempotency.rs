//! Idempotency keys: a client names a commit (the `Idempotency-Key` header on
//! CreateTableVersion, BatchCreateTableVersions and BatchCommitTables) so that a retry, to
//! any gateway, gets the first attempt's outcome instead of applying the commit again.
//!
//! A key is one object beside the transaction records of the cell the commit lands in
//! (`transactions/keys/<digest>.json`, the digest of the caller and the key, so two callers'
//! keys never meet). It holds the fingerprint of the request it was first used with (a
//! digest of the request's JSON in canonical form), and either the batch's transaction id
//! (the batch's record then says how it ended, and what each entry did) or, for a
//! single-table commit, the outcome itself.
//!
//! Invariants:
//! - **A key is claimed once**: create-if-absent, before the batch's record is written. Of
//!   two requests racing under one key, one claims it and runs; the other waits for the
//!   first one's outcome.
//! - **The same key with another request is refused** (409, naming the key): it would
//!   otherwise answer the first request's outcome for a request that never ran.
//! - **A key outlives nothing it answers for**: a key is honoured for `KEEP` after it was
//!   claimed, and a batch's record (kept `KEEP` after it ends) is always younger than its
//!   key, so a key is never found with its record swept while it is honoured. A claimed key
//!   whose record is missing belongs to a gateway that stopped before it wrote the record
//!   (nothing of the batch was applied): the retry runs the batch under the same
//!   transaction id, create-if-absent, so a late write of the first attempt and the retry
//!   cannot both run it.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::Catalog;
use super::layout::Layout;
use super::records::{FORMAT_VERSION, decode, encode, now_ms};
use super::transactions::KEEP;
use super::versions::CommittedVersion;
use crate::access::Ctx;
use crate::error::{Code, Error, Result};
use crate::secrets::hex;
use crate::store::{Condition, StoreError};

/// The longest key accepted.
pub const MAX_KEY_LEN: usize = 255;

/// A commit's idempotency key, as a request gives it, with the request's fingerprint.
#[derive(Clone, Debug)]
pub struct Key {
    pub name: String,
    /// A digest of the request the key is sent with (`fingerprint`).
    pub fingerprint: String,
}

impl Key {
    /// Checks a key as the header gives it: 1 to `MAX_KEY_LEN` visible ASCII characters.
    pub fn new(name: &str, fingerprint: String) -> Result<Key> {
        if name.is_empty()
            || name.len() > MAX_KEY_LEN
            || !name.bytes().all(|b| b.is_ascii_graphic())
        {
            return Err(Error::invalid(format!(
                "the Idempotency-Key header must be 1 to {MAX_KEY_LEN} visible ASCII characters"
            )));
        }
        Ok(Key {
            name: name.to_string(),
            fingerprint,
        })
    }
}

/// The fingerprint of a request: a digest of the operation and of its body as JSON with
/// every object's keys sorted, so the same request serialized another way is the same.
pub fn fingerprint<T: Serialize>(op: &str, request: &T) -> String {
    let canonical = serde_json::to_value(request)
        .and_then(|v| serde_json::to_vec(&v))
        .unwrap_or_default();
    let mut h = Sha256::new();
    h.update(op.as_bytes());
    h.update([0]);
    h.update(&canonical);
    hex(&h.finalize())
}

/// What a single-table commit ended with, kept under its key.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum Outcome {
    Committed(CommittedVersion),
    /// Refused: the error's code and message.
    Refused {
        code: i32,
        message: String,
    },
}

/// A claimed key.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct KeyRecord {
    pub format_version: u32,
    /// The operation it was used for.
    pub op: String,
    pub fingerprint: String,
    pub claimed_at_ms: u64,
    /// The batch it names (a batch commit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transaction_id: Option<String>,
    /// A single-table commit's outcome, once known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
}

impl KeyRecord {
    /// A claim of `key` for `op`, made now.
    fn new(op: &str, key: &Key, transaction_id: Option<&str>, outcome: Option<Outcome>) -> Self {
        KeyRecord {
            format_version: FORMAT_VERSION,
            op: op.to_string(),
            fingerprint: key.fingerprint.clone(),
            claimed_at_ms: now_ms(),
            transaction_id: transaction_id.map(str::to_string),
            outcome,
        }
    }

    /// Whether it is still honoured.
    pub fn live(&self) -> bool {
        now_ms().saturating_sub(self.claimed_at_ms) < KEEP.as_millis() as u64
    }
}

/// A key as read from the store.
pub(crate) struct Claimed {
    pub store_key: String,
    pub record: KeyRecord,
}

impl Layout {
    /// Where the keys of a cell live: beside its transaction records, one level down (the
    /// sweep of records lists only the records).
    pub fn keys_prefix(cell: &str) -> String {
        format!("{}keys/", Self::transactions_prefix(cell))
    }
}

/// The store key of `name` as `principal` uses it in `cell`.
fn store_key(cell: &str, principal: &str, name: &str) -> String {
    let mut h = Sha256::new();
    h.update(principal.as_bytes());
    h.update([0]);
    h.update(name.as_bytes());
    format!("{}{}.json", Layout::keys_prefix(cell), hex(&h.finalize()))
}

/// The refusal of a key used before with another request.
fn reused(name: &str, op: &str) -> Error {
    Error::new(
        Code::ConcurrentModification,
        format!(
            "idempotency key '{name}' was used with a different request ({op}): a key names one \
             request; send a new key for a new request"
        ),
    )
}

impl Catalog {
    /// The key `key` of the caller in `cell`, if claimed and still honoured; a key claimed
    /// for another request is refused here.
    pub(crate) async fn find_key(
        &self,
        ctx: &Ctx,
        cell: &str,
        key: &Key,
        op: &str,
    ) -> Result<Option<Claimed>> {
        let store_key = store_key(cell, &ctx.principal.name, &key.name);
        let Some(obj) = self.store.get(&store_key).await? else {
            return Ok(None);
        };
        let record: KeyRecord = decode(&store_key, &obj.body)?;
        if !record.live() {
            return Ok(None);
        }
        if record.fingerprint != key.fingerprint || record.op != op {
            return Err(reused(&key.name, &record.op));
        }
        Ok(Some(Claimed { store_key, record }))
    }

    /// Claims `key` for a request doing `op` (naming batch `transaction_id`, if any):
    /// `Ok(None)` when this request claimed it, the claim that stands when another request
    /// got there first (refused if it is another request's).
    pub(crate) async fn claim_key(
        &self,
        ctx: &Ctx,
        cell: &str,
        key: &Key,
        op: &str,
        transaction_id: Option<&str>,
    ) -> Result<Option<Claimed>> {
        let store_key = store_key(cell, &ctx.principal.name, &key.name);
        let record = KeyRecord::new(op, key, transaction_id, None);
        // Create-if-absent first (the caller has just looked and found none); a claim found
        // in the way is answered, or replaced when it has expired.
        let mut condition = Condition::IfAbsent;
        loop {
            match self
                .store
                .put(&store_key, encode(&record), condition.clone())
                .await
            {
                Ok(_) => return Ok(None),
                Err(StoreError::PreconditionFailed) => {}
                Err(e) => return Err(e.into()),
            }
            condition = match self.store.get(&store_key).await? {
                None => Condition::IfAbsent,
                Some(obj) => {
                    let found: KeyRecord = decode(&store_key, &obj.body)?;
                    if !found.live() {
                        Condition::IfMatch(obj.etag)
                    } else if found.fingerprint != key.fingerprint || found.op != op {
                        return Err(reused(&key.name, &found.op));
                    } else {
                        return Ok(Some(Claimed {
                            store_key,
                            record: found,
                        }));
                    }
                }
            };
        }
    }

    /// Records a single-table commit's outcome under its key (after the answer: a retry that
    /// finds no outcome yet runs the commit again, which a CreateTableVersion survives).
    pub(crate) async fn keep_outcome(
        &self,
        ctx: &Ctx,
        cell: &str,
        key: &Key,
        op: &str,
        outcome: Outcome,
    ) -> Result<()> {
        let store_key = store_key(cell, &ctx.principal.name, &key.name);
        let record = KeyRecord::new(op, key, None, Some(outcome));
        // Create-if-absent: a key already holding an outcome keeps the first one.
        match self
            .store
            .put(&store_key, encode(&record), Condition::IfAbsent)
            .await
        {
            Ok(_) | Err(StoreError::PreconditionFailed) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Removes the keys of `cell` claimed more than `KEEP` ago; answers how many.
    pub(crate) async fn sweep_keys(&self, cell: &str) -> Result<u64> {
        use futures::TryStreamExt;
        let prefix = Layout::keys_prefix(cell);
        let mut removed = 0;
        let mut pages = std::pin::pin!(self.key_pages(&prefix, true));
        while let Some(keys) = pages.try_next().await? {
            for key in &keys {
                let Some(obj) = self.store.get(key).await? else {
                    continue;
                };
                let Ok(record) = decode::<KeyRecord>(key, &obj.body) else {
                    continue;
                };
                if !record.live() {
                    removed += self.remove_unchanged(key, obj.etag).await?;
                }
            }
        }
        Ok(removed)
    }
}

/// The error a refused commit's outcome stands for, as first answered.
pub(crate) fn refusal(code: i32, message: String) -> Error {
    Error::new(Code::from_number(code).unwrap_or(Code::Internal), message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fingerprint_ignores_key_order_and_tells_bodies_apart() {
        let a = serde_json::json!({"a": 1, "b": [1, 2]});
        let b: serde_json::Value = serde_json::from_str(r#"{"b":[1,2],"a":1}"#).unwrap();
        assert_eq!(fingerprint("x", &a), fingerprint("x", &b));
        assert_ne!(fingerprint("x", &a), fingerprint("y", &a));
        let c = serde_json::json!({"a": 1, "b": [2, 1]});
        assert_ne!(fingerprint("x", &a), fingerprint("x", &c));
    }

    #[test]
    fn keys_are_visible_ascii_of_bounded_length() {
        assert!(Key::new("block-7f3a", String::new()).is_ok());
        for bad in ["", "a b", "é", &"k".repeat(MAX_KEY_LEN + 1)] {
            assert_eq!(
                Key::new(bad, String::new()).unwrap_err().code,
                Code::InvalidInput
            );
        }
    }

    #[test]
    fn callers_keys_never_meet() {
        assert_ne!(store_key("", "alice", "k"), store_key("", "bob", "k"));
        assert_ne!(store_key("", "a", "bk"), store_key("", "ab", "k"));
        assert!(store_key("b/", "a", "k").starts_with("b/.lance-gateway/transactions/keys/"));
    }
}
