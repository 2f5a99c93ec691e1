//! Which gateways answer from memory, and how a writer reaches them before it writes.
//!
//! - **Membership.** A gateway with the read cache on writes its registry entry
//!   (`gateways/<node>.json`, `catalog::upgrade`) with the URL where it takes pins and an
//!   incarnation, and renews it every quarter lease with a conditional rewrite. It answers
//!   from memory only until one lease after the start of its last renewal that succeeded,
//!   and only once `enable_delay` has passed since it (re)registered: by then every writer's
//!   view of the registry was taken after the registration, so every writer pins it.
//! - **Views.** A write never uses a view of the registry taken more than `VIEW_LIMIT`
//!   before it (`current`); gateways refresh theirs in the background while any caches.
//! - **Pins.** Before a write of a cached key, the writer pins the key on each gateway of its
//!   view (an authenticated POST to its peer URL) and on itself, and unpins after the store
//!   answered. A gateway that does not confirm the pin is **revoked**: the writer rewrites its
//!   registry entry (conditional on the entry as read), so the gateway's next renewal fails
//!   and it stops answering from memory, and the writer waits that gateway's lease before it
//!   writes: its last renewal started before the revocation, so its lease has ended by then.
//!   A revoked gateway stays off for the grace period at least, then registers again.
//!
//! The argument in full is in `docs/consistency.md` ("Answers from memory").

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes as BodyBytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use super::cache::ReadCache;
use crate::catalog::layout::{CATALOG_DIR, Layout};
use crate::catalog::records::{
    CellRecord, FORMAT_SOFT_DROP, READS_UP_TO, WRITES_UP_TO, encode, now_ms,
};
use crate::catalog::upgrade::{GatewayEntry, PeerInfo};
use crate::secrets::{hex, random_bytes, unhex};
use crate::store::{Condition, Store, StoreError, StoreResult};
use crate::telemetry;

const SIGNATURE: &str = "x-lance-gateway-peer";
/// How long a pin's POST may take before its gateway is revoked.
const PIN_TIMEOUT: Duration = Duration::from_secs(1);
/// How far a signed request's clock may be from the receiver's.
const SIGNATURE_SKEW_MS: u64 = 60_000;
/// The oldest view of the registry a write may use (the same for every gateway and
/// `admin`, whatever their leases: a newcomer's wait depends on it).
pub const VIEW_LIMIT: Duration = Duration::from_secs(2);

fn secret_key() -> String {
    format!("{CATALOG_DIR}/peer-secret.json")
}

#[derive(Serialize, Deserialize)]
struct SecretRecord {
    format_version: u32,
    secret: String,
}

#[derive(Serialize, Deserialize)]
struct PinBody {
    id: String,
    keys: Vec<String>,
    everything: bool,
    ttl_ms: u64,
}

#[derive(Serialize, Deserialize)]
struct UnpinBody {
    id: String,
}

/// A gateway of the registry that answers from memory.
#[derive(Clone, Debug)]
struct Peer {
    key: String,
    etag: String,
    url: String,
    incarnation: String,
}

#[derive(Default)]
struct View {
    taken: Option<Instant>,
    peers: Vec<Peer>,
    /// Entries as last read, by key, with their ETags: an unchanged ETag is not read again.
    entries: HashMap<String, (String, GatewayEntry)>,
}

/// This gateway's own cache and where it takes pins.
pub struct Member {
    pub cache: Arc<ReadCache>,
    pub url: String,
    etag: Mutex<Option<String>>,
}

pub struct Peers {
    store: Arc<dyn Store>,
    node: String,
    lease: Duration,
    grace: Duration,
    /// Made at the first pin sent: a gateway whose peers never cache holds no client.
    http: std::sync::OnceLock<reqwest::Client>,
    /// Pin ids: a random prefix of this process, and a count.
    pin_prefix: u64,
    pins_sent: std::sync::atomic::AtomicU64,
    secret: tokio::sync::OnceCell<Arc<[u8]>>,
    view: Mutex<View>,
    refreshing: tokio::sync::Mutex<()>,
    member: Option<Member>,
}

/// What became of a gateway that did not confirm a pin.
enum Unreached {
    /// It confirmed when asked again (it had restarted or renewed).
    Pinned(String),
    /// Revoked (by this writer or another): it answers from memory no longer after this.
    Revoked(Instant),
    /// It left, or stopped answering from memory, by itself.
    Gone,
}

fn mac(secret: &[u8], ms: u64, path: &str, body: &[u8]) -> Hmac<Sha256> {
    let mut mac =
        <Hmac<Sha256> as KeyInit>::new_from_slice(secret).expect("HMAC takes a key of any length");
    mac.update(format!("{ms}\n{path}\n").as_bytes());
    mac.update(body);
    mac
}

impl Peers {
    /// `store` is the store beneath the cache. With `member`, this gateway answers from
    /// memory and takes pins at its URL.
    pub fn new(
        store: Arc<dyn Store>,
        node: String,
        lease: Duration,
        grace: Duration,
        member: Option<(Arc<ReadCache>, String)>,
    ) -> Arc<Self> {
        Arc::new(Peers {
            store,
            node,
            lease,
            grace,
            http: std::sync::OnceLock::new(),
            pin_prefix: uuid::Uuid::new_v4().as_u64_pair().0,
            pins_sent: std::sync::atomic::AtomicU64::new(0),
            secret: tokio::sync::OnceCell::new(),
            view: Mutex::new(View::default()),
            refreshing: tokio::sync::Mutex::new(()),
            member: member.map(|(cache, url)| Member {
                cache,
                url,
                etag: Mutex::new(None),
            }),
        })
    }

    pub fn member(&self) -> Option<&Member> {
        self.member.as_ref()
    }

    /// How long a (re)registered gateway waits before it answers from memory: past any
    /// view taken before it registered, and past the time a write sent under such a view
    /// may take to land (half the grace period, the catalog's one timing assumption).
    pub fn enable_delay(&self) -> Duration {
        VIEW_LIMIT + self.grace / 2 + Duration::from_millis(500)
    }

    fn own_key(&self) -> String {
        Layout::gateway_key("", &self.node)
    }

    /// The secret peers sign pins with, made by the first gateway that needs it.
    async fn secret(&self) -> StoreResult<Arc<[u8]>> {
        self.secret
            .get_or_try_init(|| async {
                let key = secret_key();
                for _ in 0..3 {
                    if let Some(obj) = self.store.get(&key).await? {
                        let record: SecretRecord = serde_json::from_slice(&obj.body)
                            .map_err(|e| StoreError::Other(format!("{key}: {e}")))?;
                        return unhex(&record.secret)
                            .filter(|s| s.len() >= 16)
                            .map(Arc::from)
                            .ok_or_else(|| StoreError::Other(format!("{key}: not a secret")));
                    }
                    let fresh = random_bytes(32);
                    let record = SecretRecord {
                        format_version: FORMAT_SOFT_DROP,
                        secret: hex(&fresh),
                    };
                    match self
                        .store
                        .put(&key, encode(&record), Condition::IfAbsent)
                        .await
                    {
                        Ok(_) => return Ok(Arc::from(fresh)),
                        Err(StoreError::PreconditionFailed) => continue,
                        Err(e) => return Err(e),
                    }
                }
                Err(StoreError::Other(format!("{key} could not be made")))
            })
            .await
            .cloned()
    }

    /// Reads the registry again.
    async fn refresh(&self) -> StoreResult<()> {
        let _one = self.refreshing.lock().await;
        let taken = Instant::now();
        let prefix = Layout::gateways_prefix("");
        let mut known =
            std::mem::take(&mut self.view.lock().unwrap_or_else(|e| e.into_inner()).entries);
        let mut entries = HashMap::new();
        let mut after: Option<String> = None;
        let result: StoreResult<()> = async {
            loop {
                let page = self
                    .store
                    .list_with_etags(&prefix, after.as_deref(), 1000, true)
                    .await?;
                for (key, etag) in page.keys.iter().zip(&page.etags) {
                    if let Some((seen, entry)) = known.remove(key)
                        && &seen == etag
                    {
                        entries.insert(key.clone(), (seen, entry));
                        continue;
                    }
                    let Some(obj) = self.store.get(key).await? else {
                        continue;
                    };
                    match serde_json::from_slice::<GatewayEntry>(&obj.body) {
                        Ok(entry) => {
                            entries.insert(key.clone(), (obj.etag, entry));
                        }
                        Err(e) => tracing::warn!(key, error = %e, "an unreadable gateway entry"),
                    }
                }
                match (page.more, page.keys.last()) {
                    (true, Some(last)) => after = Some(last.clone()),
                    _ => return Ok(()),
                }
            }
        }
        .await;
        let mut view = self.view.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = result {
            view.entries = entries;
            return Err(e);
        }
        view.peers = entries
            .iter()
            .filter_map(|(key, (etag, entry))| {
                let peer = entry.peer.as_ref()?;
                (entry.node != self.node && entry.revoked_by.is_none()).then(|| Peer {
                    key: key.clone(),
                    etag: etag.clone(),
                    url: peer.url.clone(),
                    incarnation: peer.incarnation.clone(),
                })
            })
            .collect();
        view.entries = entries;
        view.taken = Some(taken);
        Ok(())
    }

    /// The gateways a write must pin now: from a view no older than `VIEW_LIMIT`.
    async fn current(&self) -> StoreResult<Vec<Peer>> {
        let fresh = |v: &View| v.taken.is_some_and(|t| t.elapsed() < VIEW_LIMIT);
        {
            let view = self.view.lock().unwrap_or_else(|e| e.into_inner());
            if fresh(&view) {
                return Ok(view.peers.clone());
            }
        }
        self.refresh().await?;
        let view = self.view.lock().unwrap_or_else(|e| e.into_inner());
        Ok(view.peers.clone())
    }

    async fn send<T: Serialize>(&self, url: &str, op: &str, body: &T) -> Result<(), String> {
        let secret = self.secret().await.map_err(|e| e.to_string())?;
        let path = format!("/peer/v1/{op}");
        let body = serde_json::to_vec(body).map_err(|e| e.to_string())?;
        let ms = now_ms();
        let signature = hex(&mac(&secret, ms, &path, &body).finalize().into_bytes());
        let answer = self
            .http
            .get_or_init(|| {
                reqwest::Client::builder()
                    .timeout(PIN_TIMEOUT)
                    .connect_timeout(PIN_TIMEOUT)
                    .build()
                    .unwrap_or_default()
            })
            .post(format!("{}{path}", url.trim_end_matches('/')))
            .header(SIGNATURE, format!("{ms}.{signature}"))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        match answer.status().is_success() {
            true => Ok(()),
            false => Err(format!("answered {}", answer.status())),
        }
    }

    /// Pins `keys` (with `everything`, every cached key) here and on every gateway that
    /// answers from memory, before a write of them; the guard unpins when dropped, after
    /// the write's answer.
    pub async fn pin(self: &Arc<Self>, keys: &[&str], everything: bool) -> StoreResult<PinGuard> {
        let count = self
            .pins_sent
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let id = (u128::from(self.pin_prefix) << 64) | u128::from(count);
        let keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
        if let Some(m) = &self.member {
            m.cache.pin(id, &keys, everything, self.grace);
        }
        let mut guard = PinGuard {
            peers: self.clone(),
            id,
            pinned: Vec::new(),
            answered: false,
        };
        // Until the write is sent, a failure here lets its pins go at once (`answered`).
        let peers = match self.current().await {
            Ok(peers) => peers,
            Err(e) => {
                guard.answered(true);
                return Err(e);
            }
        };
        if peers.is_empty() {
            return Ok(guard);
        }
        let body = PinBody {
            id: format!("{id:032x}"),
            keys,
            everything,
            ttl_ms: self.grace.as_millis() as u64,
        };
        let sent =
            futures::future::join_all(peers.iter().map(|p| self.send(&p.url, "pin", &body))).await;
        let mut revoked_at: Option<Instant> = None;
        for (peer, result) in peers.into_iter().zip(sent) {
            match result {
                Ok(()) => {
                    telemetry::peer_pin(true);
                    guard.pinned.push(peer.url);
                }
                Err(e) => {
                    telemetry::peer_pin(false);
                    tracing::warn!(peer = %peer.url, error = %e, "a gateway that answers from memory did not confirm a pin");
                    let unreached = match self.unreached(peer, &body).await {
                        Ok(unreached) => unreached,
                        Err(e) => {
                            guard.answered(true);
                            return Err(e);
                        }
                    };
                    match unreached {
                        Unreached::Pinned(url) => guard.pinned.push(url),
                        Unreached::Revoked(at) => {
                            revoked_at = Some(revoked_at.map_or(at, |r| r.max(at)))
                        }
                        Unreached::Gone => {}
                    }
                }
            }
        }
        if let Some(at) = revoked_at {
            // Its lease, renewed before the revocation at the latest, ends by then.
            tokio::time::sleep_until(at.into()).await;
        }
        Ok(guard)
    }

    /// Revokes a gateway that did not confirm a pin, unless it turns out to have restarted
    /// or renewed and confirms it now.
    async fn unreached(&self, mut peer: Peer, body: &PinBody) -> StoreResult<Unreached> {
        for _ in 0..5 {
            let Some(obj) = self.store.get(&peer.key).await? else {
                return Ok(Unreached::Gone);
            };
            let mut entry: GatewayEntry = serde_json::from_slice(&obj.body)
                .map_err(|e| StoreError::Other(format!("{}: {e}", peer.key)))?;
            let Some(info) = entry.peer.clone() else {
                return Ok(Unreached::Gone);
            };
            let lease = Duration::from_millis(info.lease_ms);
            if entry.revoked_by.is_some() {
                return Ok(Unreached::Revoked(Instant::now() + lease));
            }
            if obj.etag != peer.etag || info.incarnation != peer.incarnation {
                if self.send(&info.url, "pin", body).await.is_ok() {
                    return Ok(Unreached::Pinned(info.url));
                }
                peer.etag = obj.etag.clone();
                peer.incarnation = info.incarnation.clone();
            }
            entry.revoked_by = Some(self.node.clone());
            entry.revoked_at_ms = Some(now_ms());
            match self
                .store
                .put(&peer.key, encode(&entry), Condition::IfMatch(obj.etag))
                .await
            {
                Ok(_) => {
                    telemetry::peer_revoked();
                    tracing::warn!(peer = %info.url, node = %entry.node, "revoked a gateway's read cache: it could not be reached; waiting one lease before writing");
                    return Ok(Unreached::Revoked(Instant::now() + lease));
                }
                Err(StoreError::PreconditionFailed) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(StoreError::Other(format!(
            "gateway entry {} kept changing while it was being revoked",
            peer.key
        )))
    }

    /// Keeps this gateway's view of the registry fresh, so its writes need not wait for
    /// one: while it caches itself or its last view showed a gateway that does. (Otherwise
    /// a write reads the registry first when its view is older than `VIEW_LIMIT`.)
    pub async fn keep_view(self: Arc<Self>) {
        loop {
            let active = self.member.is_some()
                || !self
                    .view
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .peers
                    .is_empty();
            if active && let Err(e) = self.refresh().await {
                tracing::warn!(error = %e, "could not read the gateway registry");
            }
            tokio::time::sleep(VIEW_LIMIT / 2).await;
        }
    }

    /// Whether the warehouse's format has the registry (format 3).
    async fn registry_allowed(&self) -> StoreResult<bool> {
        let Some(obj) = self.store.get(&Layout::cell_record("")).await? else {
            return Ok(false);
        };
        let record: CellRecord = serde_json::from_slice(&obj.body)
            .map_err(|e| StoreError::Other(format!("catalog.json: {e}")))?;
        Ok(record.warehouse_format() >= FORMAT_SOFT_DROP)
    }

    fn entry(&self, incarnation: Option<String>, url: &str, started_at_ms: u64) -> GatewayEntry {
        GatewayEntry {
            format_version: FORMAT_SOFT_DROP,
            node: self.node.clone(),
            release: env!("CARGO_PKG_VERSION").to_string(),
            reads_up_to: READS_UP_TO,
            writes_up_to: WRITES_UP_TO,
            started_at_ms,
            seen_at_ms: now_ms(),
            peer: incarnation.map(|incarnation| PeerInfo {
                url: url.to_string(),
                incarnation,
                lease_ms: self.lease.as_millis() as u64,
            }),
            revoked_by: None,
            revoked_at_ms: None,
        }
    }

    /// Registers this gateway, renews its lease and turns its cache on and off with it.
    pub async fn keep_membership(self: Arc<Self>, started_at_ms: u64) {
        let Some(m) = &self.member else {
            return;
        };
        let key = self.own_key();
        let renew_every = self.lease / 4;
        let mut off_for = self.grace.max(Duration::from_secs(60));
        loop {
            match self.registry_allowed().await {
                Ok(true) => {}
                Ok(false) => {
                    tracing::info!("read cache: off until the warehouse is at format 3");
                    tokio::time::sleep(self.lease).await;
                    continue;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "read cache: could not read the warehouse format");
                    tokio::time::sleep(renew_every).await;
                    continue;
                }
            }
            if let Err(e) = self.secret().await {
                tracing::warn!(error = %e, "read cache: could not read the peers' secret");
                tokio::time::sleep(renew_every).await;
                continue;
            }
            // Registered over the entry as read: an earlier incarnation's revocation is
            // seen (and waited out: its revoker writes only a lease after it), never
            // overwritten unseen.
            let (cond, revoked_wait) = match self.store.get(&key).await {
                Ok(Some(obj)) => {
                    let wait = serde_json::from_slice::<GatewayEntry>(&obj.body)
                        .ok()
                        .filter(|e| e.revoked_by.is_some())
                        .map_or(Duration::ZERO, |e| {
                            e.peer
                                .map_or(self.lease, |p| Duration::from_millis(p.lease_ms))
                        });
                    (Condition::IfMatch(obj.etag), wait)
                }
                Ok(None) => (Condition::IfAbsent, Duration::ZERO),
                Err(e) => {
                    tracing::warn!(error = %e, "read cache: could not read the registry");
                    tokio::time::sleep(renew_every).await;
                    continue;
                }
            };
            let incarnation = uuid::Uuid::new_v4().simple().to_string();
            let mut entry = self.entry(Some(incarnation), &m.url, started_at_ms);
            let mut etag = match self.store.put(&key, encode(&entry), cond).await {
                Ok(etag) => etag,
                Err(StoreError::PreconditionFailed) => continue,
                Err(e) => {
                    tracing::warn!(error = %e, "read cache: could not register");
                    tokio::time::sleep(renew_every).await;
                    continue;
                }
            };
            *m.etag.lock().unwrap_or_else(|e| e.into_inner()) = Some(etag.clone());
            let enable_at = Instant::now() + self.enable_delay() + revoked_wait;
            let mut enabled = false;
            tracing::info!(url = %m.url, in_secs = self.enable_delay().as_secs(), "read cache: registered");
            loop {
                tokio::time::sleep(renew_every).await;
                let start = Instant::now();
                entry.seen_at_ms = now_ms();
                match self
                    .store
                    .put(&key, encode(&entry), Condition::IfMatch(etag.clone()))
                    .await
                {
                    Ok(new) => {
                        etag = new;
                        *m.etag.lock().unwrap_or_else(|e| e.into_inner()) = Some(etag.clone());
                        // Nobody revoked the lease since the last renewal, so every write
                        // since pinned this gateway (pins apply whether or not it answers
                        // from memory): what it holds is still exact after a lapse too.
                        if Instant::now() >= enable_at {
                            if !enabled {
                                m.cache.clear();
                                enabled = true;
                                tracing::info!("read cache: answering from memory");
                            }
                            m.cache.serve_until(Some(start + self.lease));
                        }
                    }
                    Err(StoreError::PreconditionFailed) => {
                        m.cache.serve_until(None);
                        m.cache.clear();
                        tracing::warn!(
                            url = %m.url,
                            off_secs = off_for.as_secs(),
                            "read cache: revoked by a gateway that could not reach this one at its peer URL (check --peer-url and --peer-listen); answering from the store for now"
                        );
                        tokio::time::sleep(off_for).await;
                        off_for = (off_for * 2).min(Duration::from_secs(1800));
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "read cache: could not renew the lease");
                    }
                }
            }
        }
    }

    /// Stops answering from memory and says so in the registry, so writers stop pinning
    /// this gateway (a graceful stop).
    pub async fn leave(&self) {
        let Some(m) = &self.member else {
            return;
        };
        m.cache.serve_until(None);
        let etag = m.etag.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let key = self.own_key();
        if let (Some(etag), Ok(Some(obj))) = (etag, self.store.get(&key).await)
            && let Ok(mut entry) = serde_json::from_slice::<GatewayEntry>(&obj.body)
            && obj.etag == etag
        {
            entry.peer = None;
            entry.seen_at_ms = now_ms();
            let _ = self
                .store
                .put(&key, encode(&entry), Condition::IfMatch(etag))
                .await;
        }
    }

    /// The routes peers call: `POST /peer/v1/pin` and `/peer/v1/unpin`, signed.
    pub fn router(self: Arc<Self>) -> axum::Router {
        axum::Router::new()
            .route("/peer/v1/pin", axum::routing::post(take_pin))
            .route("/peer/v1/unpin", axum::routing::post(take_unpin))
            .with_state(self)
    }

    async fn verified(
        &self,
        path: &str,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<(), StatusCode> {
        let header = headers
            .get(SIGNATURE)
            .and_then(|v| v.to_str().ok())
            .ok_or(StatusCode::UNAUTHORIZED)?;
        let (ms, signature) = header.split_once('.').ok_or(StatusCode::UNAUTHORIZED)?;
        let ms: u64 = ms.parse().map_err(|_| StatusCode::UNAUTHORIZED)?;
        if now_ms().abs_diff(ms) > SIGNATURE_SKEW_MS {
            return Err(StatusCode::UNAUTHORIZED);
        }
        let signature = unhex(signature).ok_or(StatusCode::UNAUTHORIZED)?;
        let secret = self
            .secret()
            .await
            .map_err(|_| StatusCode::SERVICE_UNAVAILABLE)?;
        mac(&secret, ms, path, body)
            .verify_slice(&signature)
            .map_err(|_| StatusCode::UNAUTHORIZED)
    }
}

async fn take_pin(
    State(peers): State<Arc<Peers>>,
    headers: HeaderMap,
    body: BodyBytes,
) -> StatusCode {
    if let Err(status) = peers.verified("/peer/v1/pin", &headers, &body).await {
        return status;
    }
    let Ok(pin) = serde_json::from_slice::<PinBody>(&body) else {
        return StatusCode::BAD_REQUEST;
    };
    let Ok(id) = u128::from_str_radix(&pin.id, 16) else {
        return StatusCode::BAD_REQUEST;
    };
    if let Some(m) = &peers.member {
        m.cache.pin(
            id,
            &pin.keys,
            pin.everything,
            Duration::from_millis(pin.ttl_ms),
        );
    }
    StatusCode::NO_CONTENT
}

async fn take_unpin(
    State(peers): State<Arc<Peers>>,
    headers: HeaderMap,
    body: BodyBytes,
) -> StatusCode {
    if let Err(status) = peers.verified("/peer/v1/unpin", &headers, &body).await {
        return status;
    }
    let Some(id) = serde_json::from_slice::<UnpinBody>(&body)
        .ok()
        .and_then(|u| u128::from_str_radix(&u.id, 16).ok())
    else {
        return StatusCode::BAD_REQUEST;
    };
    if let Some(m) = &peers.member {
        m.cache.unpin(id);
    }
    StatusCode::NO_CONTENT
}

/// Pins held for one write. Dropped after `answered`, it unpins them (here at once, on
/// peers in the background); dropped without, it leaves them to expire.
pub struct PinGuard {
    peers: Arc<Peers>,
    id: u128,
    pinned: Vec<String>,
    answered: bool,
}

impl PinGuard {
    /// Says whether the store's answer to the write settled what it did.
    pub fn answered(&mut self, settled: bool) {
        self.answered = settled;
    }
}

impl Drop for PinGuard {
    fn drop(&mut self) {
        if !self.answered {
            return;
        }
        if let Some(m) = &self.peers.member {
            m.cache.unpin(self.id);
        }
        if self.pinned.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (peers, urls) = (self.peers.clone(), std::mem::take(&mut self.pinned));
        let body = UnpinBody {
            id: format!("{:032x}", self.id),
        };
        runtime.spawn(async move {
            let sent = urls.iter().map(|url| peers.send(url, "unpin", &body));
            for (url, result) in urls.iter().zip(futures::future::join_all(sent).await) {
                if let Err(e) = result {
                    // Harmless: the pin expires by itself; until then the peer reads the
                    // keys from the store.
                    tracing::debug!(peer = %url, error = %e, "an unpin was not confirmed");
                }
            }
        });
    }
}
