//! Two releases on one warehouse: which record formats a gateway may write, and how that
//! moves forward. `docs/consistency.md` ("Upgrades: formats and releases") is the operator's
//! account; this is the mechanism.
//!
//! - Every record states the format it was written in (`format_version`). A gateway reads
//!   formats up to `READS_UP_TO` and leaves anything newer untouched (`Error::newer_format`).
//! - Each cell's `catalog.json` holds the *warehouse format*: the newest format any gateway
//!   may write there. A gateway writes a record of a newer kind (a soft drop's records,
//!   format 3) only when the warehouse format allows it, so a release beside it that reads
//!   only the older format never meets one. Records of the kinds the older release knows
//!   keep the older format.
//! - The warehouse format is raised by `admin upgrade`, the operator's word that no gateway
//!   of an older release serves the warehouse any more. It checks the gateway registry
//!   first: every gateway of this release on writes `gateways/<node>.json` (its release and
//!   the formats it reads) as it starts and every few minutes, and the upgrade refuses while
//!   a gateway that cannot read the new format was seen within `REGISTRY_LIVE`. A release
//!   before the registry writes no entry, which is why the raise is never automatic: only
//!   the operator knows those are gone.
//! - A gateway reads the warehouse format when it first needs it and again once its copy is
//!   `FORMAT_TTL` old: the format only ever rises, so a stale copy only delays the new
//!   kinds of record, never writes one early.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::Catalog;
use super::layout::Layout;
use super::records::*;
use crate::error::{Error, Result};
use crate::store::{Condition, StoreError};

/// How long a gateway trusts its copy of a cell's warehouse format.
pub const FORMAT_TTL: Duration = Duration::from_secs(30);

/// A registry entry younger than this is a gateway that may still be serving.
pub const REGISTRY_LIVE: Duration = Duration::from_secs(15 * 60);

/// How often a gateway rewrites its registry entry.
pub const REGISTRY_EVERY: Duration = Duration::from_secs(5 * 60);

/// A gateway's entry in the registry (`gateways/<node>.json`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GatewayEntry {
    pub format_version: u32,
    pub node: String,
    pub release: String,
    pub reads_up_to: u32,
    pub writes_up_to: u32,
    pub started_at_ms: u64,
    pub seen_at_ms: u64,
    /// Where this gateway takes pins, while it answers from memory (`coherence::peers`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<PeerInfo>,
    /// Set by a writer that could not reach this gateway: its lease is void.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at_ms: Option<u64>,
}

/// How writers reach a gateway that answers from memory.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PeerInfo {
    pub url: String,
    /// New at each registration: a restarted gateway is a new incarnation.
    pub incarnation: String,
    /// Its lease: how long after a revocation it may still answer from memory.
    pub lease_ms: u64,
}

/// What `admin upgrade` did, per cell.
#[derive(Clone, Debug, Serialize)]
pub struct Raised {
    /// The cell's key prefix (empty for a directory or bucket-prefix warehouse).
    pub cell: String,
    pub from: u32,
    pub to: u32,
}

/// The warehouse formats read so far, per cell, with when.
#[derive(Default)]
pub(crate) struct Formats(Mutex<HashMap<String, (u32, Instant)>>);

impl Layout {
    pub fn gateways_prefix(cell: &str) -> String {
        format!("{}gateways/", Self::catalog_dir(cell))
    }

    pub fn gateway_key(cell: &str, node: &str) -> String {
        format!(
            "{}{}.json",
            Self::gateways_prefix(cell),
            super::names::key_segment(node)
        )
    }
}

impl Catalog {
    /// The newest format this gateway may write in `cell`: the lower of the warehouse's
    /// format and its own.
    pub(crate) async fn write_format(&self, cell: &str) -> Result<u32> {
        if let Ok(known) = self.formats.0.lock()
            && let Some((format, at)) = known.get(cell)
            && at.elapsed() < FORMAT_TTL
        {
            return Ok(*format);
        }
        let format = match self.read::<CellRecord>(&Layout::cell_record(cell)).await? {
            Some((cell_record, _)) => cell_record.warehouse_format(),
            None => BASE_WAREHOUSE_FORMAT,
        }
        .min(WRITES_UP_TO);
        if let Ok(mut known) = self.formats.0.lock() {
            known.insert(cell.to_string(), (format, Instant::now()));
        }
        Ok(format)
    }

    /// The cells of the warehouse: the one cell, or every bucket's in endpoint mode.
    pub async fn cells(&self) -> Result<Vec<String>> {
        if self.layout.endpoint_mode() {
            let all = crate::access::Ctx::internal();
            let buckets = self.list_catalog_buckets(&all, None, None).await?.items;
            Ok(buckets.into_iter().map(|b| format!("{b}/")).collect())
        } else {
            Ok(vec![String::new()])
        }
    }

    /// Writes this gateway's registry entry (in the warehouse's first cell, once its format
    /// allows records of format 3).
    pub async fn register_gateway(&self) -> Result<()> {
        let cell = match self.cells().await?.into_iter().next() {
            Some(cell) => cell,
            None => return Ok(()),
        };
        if self.write_format(&cell).await? < FORMAT_SOFT_DROP {
            return Ok(());
        }
        let entry = GatewayEntry {
            format_version: FORMAT_SOFT_DROP,
            node: self.node.clone(),
            release: env!("CARGO_PKG_VERSION").to_string(),
            reads_up_to: READS_UP_TO,
            writes_up_to: WRITES_UP_TO,
            started_at_ms: self.started_ms,
            seen_at_ms: now_ms(),
            peer: None,
            revoked_by: None,
            revoked_at_ms: None,
        };
        self.store
            .put(
                &Layout::gateway_key(&cell, &self.node),
                encode(&entry),
                Condition::None,
            )
            .await?;
        Ok(())
    }

    /// The registry: every gateway entry, newest first.
    pub async fn gateways(&self) -> Result<Vec<GatewayEntry>> {
        let mut entries = Vec::new();
        if let Some(cell) = self.cells().await?.into_iter().next() {
            for key in self.all_keys(&Layout::gateways_prefix(&cell), true).await? {
                match self.read::<GatewayEntry>(&key).await {
                    Ok(Some((entry, _))) => entries.push(entry),
                    Ok(None) => {}
                    Err(e) => tracing::warn!(key, error = %e, "an unreadable gateway entry"),
                }
            }
        }
        entries.sort_by_key(|e| std::cmp::Reverse(e.seen_at_ms));
        Ok(entries)
    }

    /// The warehouse format of every cell.
    pub async fn warehouse_formats(&self) -> Result<Vec<(String, u32)>> {
        let mut out = Vec::new();
        for cell in self.cells().await? {
            let format = self
                .read::<CellRecord>(&Layout::cell_record(&cell))
                .await?
                .map_or(BASE_WAREHOUSE_FORMAT, |(c, _)| c.warehouse_format());
            out.push((cell, format));
        }
        Ok(out)
    }

    /// `admin upgrade`: raises every cell's warehouse format to `to` (at most what this
    /// build writes). Refused while a gateway that cannot read `to` was seen within
    /// `REGISTRY_LIVE`, unless `force`. A cell already at `to` or above is left alone.
    pub async fn upgrade_warehouse(&self, to: u32, force: bool) -> Result<Vec<Raised>> {
        if !(BASE_WAREHOUSE_FORMAT..=WRITES_UP_TO).contains(&to) {
            return Err(Error::invalid(format!(
                "this release writes formats {BASE_WAREHOUSE_FORMAT} to {WRITES_UP_TO}; format {to} is not one of them"
            )));
        }
        let live_since = now_ms().saturating_sub(REGISTRY_LIVE.as_millis() as u64);
        let behind: Vec<String> = self
            .gateways()
            .await?
            .into_iter()
            .filter(|g| g.seen_at_ms >= live_since && g.reads_up_to < to)
            .map(|g| {
                format!(
                    "{} (lance-gateway {}, reads up to {})",
                    g.node, g.release, g.reads_up_to
                )
            })
            .collect();
        if !behind.is_empty() && !force {
            return Err(Error::conflict(format!(
                "gateways that cannot read format {to} were seen in the last {} minutes: {}; \
                 upgrade or stop them first (or pass --force if they are gone)",
                REGISTRY_LIVE.as_secs() / 60,
                behind.join(", ")
            )));
        }
        let mut raised = Vec::new();
        for cell in self.cells().await? {
            let key = Layout::cell_record(&cell);
            loop {
                let (mut record, cond) = match self.read::<CellRecord>(&key).await? {
                    Some((record, etag)) => (record, Condition::IfMatch(etag)),
                    None => (
                        CellRecord {
                            format_version: FORMAT_VERSION,
                            created_at_ms: now_ms(),
                            namespace: None,
                            warehouse_format: None,
                        },
                        Condition::IfAbsent,
                    ),
                };
                let from = record.warehouse_format();
                if from >= to {
                    break;
                }
                record.warehouse_format = Some(to);
                match self.write(&key, encode(&record), cond).await {
                    Ok(_) => {
                        raised.push(Raised {
                            cell: cell.clone(),
                            from,
                            to,
                        });
                        break;
                    }
                    Err(StoreError::PreconditionFailed) => continue,
                    Err(e) => return Err(e.into()),
                }
            }
        }
        if let Ok(mut known) = self.formats.0.lock() {
            known.clear();
        }
        Ok(raised)
    }
}
