//! Wiring: from a validated `Config` to a running server.

use std::sync::Arc;

use aws_config::{BehaviorVersion, Region};
use aws_credential_types::Credentials;
use aws_credential_types::provider::SharedCredentialsProvider;
use aws_sdk_s3::config::{RequestChecksumCalculation, ResponseChecksumValidation};
use tokio::net::TcpListener;

use crate::api::{self, AppState, Limits};
use crate::catalog::layout::{Layout, Warehouse};
use crate::catalog::{Catalog, Settings, recovery};
use crate::config::{Config, CredentialPolicy, WarehouseUri};
use crate::data::LanceDatasets;
use crate::store::Store;
use crate::store::fs::FsStore;
use crate::store::s3::{S3Root, S3Store};
use crate::vend::Vendor;

/// What the gateway is built from: the store, its layout, and the two vendors (one for
/// clients, one for the gateway's own reads of datasets).
pub struct Parts {
    pub store: Arc<dyn Store>,
    pub layout: Layout,
    pub client_vendor: Vendor,
    pub own_access: Vendor,
}

/// Builds the store and vendors. Fails (with a message naming the setting) on a warehouse
/// that cannot be opened.
pub async fn build_parts(config: &Config) -> Result<Parts, String> {
    match &config.warehouse {
        WarehouseUri::Local(path) => {
            let store = FsStore::open_with_sync(path, config.fs_sync)
                .map_err(|e| format!("invalid setting `warehouse`: {}: {e}", path.display()))?;
            let layout = Layout::new(Warehouse::Local(store.root().to_path_buf()));
            Ok(Parts {
                store: Arc::new(store),
                layout,
                client_vendor: Vendor::local(),
                own_access: Vendor::local(),
            })
        }
        WarehouseUri::S3Bucket { .. } | WarehouseUri::S3Endpoint => {
            let s3 = &config.s3;
            let mut loader = aws_config::defaults(BehaviorVersion::latest());
            if let Some(endpoint) = &s3.endpoint {
                loader = loader.endpoint_url(endpoint);
            }
            if let Some(region) = &s3.region {
                loader = loader.region(Region::new(region.clone()));
            }
            if let (Some(id), Some(secret)) = (&s3.access_key_id, &s3.secret_access_key) {
                loader = loader.credentials_provider(Credentials::new(
                    id,
                    secret,
                    None,
                    None,
                    "lance-gateway-config",
                ));
            }
            let sdk = loader.load().await;
            let region = sdk
                .region()
                .map(|r| r.to_string())
                .unwrap_or_else(|| "us-east-1".to_string());
            let endpoint = s3
                .endpoint
                .clone()
                .or_else(|| std::env::var("AWS_ENDPOINT_URL_S3").ok())
                .or_else(|| std::env::var("AWS_ENDPOINT_URL").ok())
                .filter(|e| !e.is_empty());
            let conf = aws_sdk_s3::config::Builder::from(&sdk)
                .region(Region::new(region.clone()))
                .force_path_style(s3.path_style)
                .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
                .response_checksum_validation(ResponseChecksumValidation::WhenRequired)
                .build();
            let client = aws_sdk_s3::Client::from_conf(conf);
            let (root, warehouse) = match &config.warehouse {
                WarehouseUri::S3Bucket { bucket, prefix } => (
                    S3Root::Bucket {
                        bucket: bucket.clone(),
                        prefix: prefix.clone(),
                    },
                    Warehouse::S3Bucket {
                        bucket: bucket.clone(),
                        prefix: prefix.clone(),
                    },
                ),
                _ => (S3Root::Endpoint, Warehouse::S3Endpoint),
            };
            let own_keys: Option<SharedCredentialsProvider> = sdk.credentials_provider();
            let client_keys = config
                .client_access_key_id
                .clone()
                .zip(config.client_secret_access_key.clone());
            let client_endpoint = config.client_endpoint.clone().or_else(|| endpoint.clone());
            let client_vendor = Vendor::s3(
                client_endpoint.as_deref(),
                &region,
                s3.path_style,
                config.credentials,
                client_keys,
                own_keys.clone(),
            )
            .map_err(|e| format!("invalid setting `credentials`: {}", e.message))?;
            let own_access = match own_keys {
                Some(keys) => Vendor::s3(
                    endpoint.as_deref(),
                    &region,
                    s3.path_style,
                    CredentialPolicy::Gateway,
                    None,
                    Some(keys),
                ),
                None => Vendor::s3(
                    endpoint.as_deref(),
                    &region,
                    s3.path_style,
                    CredentialPolicy::None,
                    None,
                    None,
                ),
            }
            .map_err(|e| e.message)?;
            Ok(Parts {
                store: Arc::new(S3Store::new(client, root)),
                layout: Layout::new(warehouse),
                client_vendor,
                own_access,
            })
        }
    }
}

/// Opens the catalog, starts the recovery sweeper and serves until SIGTERM or Ctrl-C.
pub async fn serve(config: Config, parts: Parts, listener: TcpListener) -> Result<(), String> {
    let catalog = Catalog::open(
        parts.store,
        parts.layout,
        Arc::new(LanceDatasets::new(parts.own_access)),
        Settings::new(config.recovery_grace, config.node_id.clone()),
    )
    .await
    .map_err(|e| format!("could not open the warehouse: {e}"))?;
    let catalog = Arc::new(catalog);
    // The first sweep runs at once: a gateway restarted under the same node id settles what
    // its earlier run left unfinished before others would (they wait out the grace period).
    let sweeper = {
        let catalog = catalog.clone();
        let interval = config.recovery_interval;
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(interval);
            loop {
                ticker.tick().await;
                if let Err(e) = recovery::sweep(&catalog).await {
                    tracing::warn!(error = %e, "recovery sweep failed");
                }
            }
        })
    };
    let state = AppState {
        catalog,
        vendor: Arc::new(parts.client_vendor),
    };
    let limits = Limits {
        max_body_bytes: config.max_body_bytes,
        request_timeout: config.request_timeout,
    };
    let app = tower::ServiceBuilder::new()
        .map_request(api::normalize_path)
        .service(api::router(state, &limits));
    tracing::info!(listen = %listener.local_addr().map(|a| a.to_string()).unwrap_or_default(), warehouse = ?config.warehouse, node = %config.node_id, "lance-gateway serving");
    let result = axum::serve(listener, tower::make::Shared::new(app))
        .with_graceful_shutdown(shutdown_signal())
        .await
        .map_err(|e| format!("server failed: {e}"));
    sweeper.abort();
    tracing::info!("lance-gateway stopped");
    result
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    tracing::info!("shutting down: finishing requests in flight");
}
