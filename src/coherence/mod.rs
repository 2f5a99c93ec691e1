//! Answers from memory that stay exact across gateways (`--read-cache`).
//!
//! Describe, exists and the catalog's listings read a handful of catalog objects (a table's
//! or namespace's record, its pending entry, the folders of records). With the read cache
//! on, a gateway keeps what the store answered for those (`cache`) and answers from memory
//! while nothing can have changed them; every write of such a key, by any gateway or by
//! `admin`, goes through `store::Cached`, which first pins the key on every gateway that
//! caches (`peers`). A gateway that a writer cannot reach is revoked through the registry
//! and has stopped answering from memory before the write is sent. Every read answered from
//! memory therefore returns what the store holds at that instant, and the catalog's
//! linearizability argument (`docs/consistency.md`) holds unchanged.
//!
//! Every gateway pins, whether or not it caches itself; the cache is per warehouse in a
//! directory or a bucket (endpoint mode has no registry of its own and keeps reading the
//! store).

pub mod cache;
pub mod peers;
pub mod store;

use std::sync::Arc;

use tokio::net::TcpListener;

use crate::catalog::layout::Layout;
use crate::config::Config;
use crate::store::Store;

pub use cache::ReadCache;
pub use peers::Peers;
pub use store::Cached;

/// What a serving gateway runs for coherence.
pub struct Coherence {
    pub peers: Arc<Peers>,
    /// Where peers send pins, when this gateway caches.
    pub listener: Option<TcpListener>,
}

/// Wraps a serving gateway's store: pins always, caches with `--read-cache`. Endpoint mode
/// keeps the store as it is.
pub async fn for_gateway(
    store: Arc<dyn Store>,
    layout: &Layout,
    config: &Config,
) -> Result<(Arc<dyn Store>, Option<Coherence>), String> {
    if layout.endpoint_mode() {
        if config.read_cache.is_some() {
            tracing::warn!("read cache: not available in endpoint mode (s3://); reading the store");
        }
        return Ok((store, None));
    }
    let (member, listener) = match &config.read_cache {
        None => (None, None),
        Some(settings) => {
            let listener = TcpListener::bind(settings.peer_listen).await.map_err(|e| {
                format!(
                    "invalid setting `peer-listen`: {}: {e}",
                    settings.peer_listen
                )
            })?;
            let bound = listener
                .local_addr()
                .map_err(|e| format!("invalid setting `peer-listen`: {e}"))?;
            let url = settings.peer_url.clone().unwrap_or_else(|| {
                let host = match bound.ip() {
                    ip if ip.is_unspecified() => crate::config::host_name(),
                    std::net::IpAddr::V6(ip) => format!("[{ip}]"),
                    ip => ip.to_string(),
                };
                format!("http://{host}:{}", bound.port())
            });
            let cache = Arc::new(ReadCache::new(settings.budget_bytes));
            (Some((cache, url)), Some(listener))
        }
    };
    let lease = config
        .read_cache
        .as_ref()
        .map_or(std::time::Duration::from_secs(8), |s| s.lease);
    let cache = member.as_ref().map(|(c, _)| c.clone());
    let peers = Peers::new(
        store.clone(),
        config.node_id.clone(),
        lease,
        config.recovery_grace,
        member,
    );
    let cached: Arc<dyn Store> = Arc::new(Cached::new(store, cache, peers.clone()));
    Ok((cached, Some(Coherence { peers, listener })))
}

/// Wraps `admin`'s store: it caches nothing, and pins what it writes on the gateways that
/// cache. Its view of them is read at its first write.
pub fn for_admin(store: Arc<dyn Store>, layout: &Layout, config: &Config) -> Arc<dyn Store> {
    if layout.endpoint_mode() {
        return store;
    }
    // A writer's lease is never used: it waits out each revoked gateway's own.
    let peers = Peers::new(
        store.clone(),
        config.node_id.clone(),
        std::time::Duration::from_secs(8),
        config.recovery_grace,
        None,
    );
    Arc::new(Cached::new(store, None, peers))
}

impl Coherence {
    /// Starts the background work: the registry view, and with the cache on, the
    /// membership and the pin routes.
    pub fn start(&mut self, started_at_ms: u64) -> Vec<tokio::task::JoinHandle<()>> {
        let mut tasks = vec![tokio::spawn(self.peers.clone().keep_view())];
        if let Some(listener) = self.listener.take() {
            tasks.push(tokio::spawn(
                self.peers.clone().keep_membership(started_at_ms),
            ));
            let router = self.peers.clone().router();
            tasks.push(tokio::spawn(async move {
                if let Err(e) = axum::serve(listener, router).await {
                    tracing::error!(error = %e, "the peer listener stopped");
                }
            }));
        }
        tasks
    }
}
