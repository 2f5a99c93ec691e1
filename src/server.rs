//! Wiring: from a validated `Config` to a running server. `build_parts` makes the store and
//! the vendors; `serve` adds the catalog, authentication, grants, audit log and TLS, and
//! runs the accept loop: at most `max-connections` connections at once, a TLS handshake and
//! every request's headers bounded by `header-timeout-secs` (which also closes a kept-alive
//! connection that sits idle that long), files picked up again when they change or on
//! SIGHUP, and a graceful shutdown on SIGTERM and Ctrl-C.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_config::{BehaviorVersion, Region};
use aws_credential_types::Credentials;
use aws_credential_types::provider::SharedCredentialsProvider;
use aws_sdk_s3::config::{RequestChecksumCalculation, ResponseChecksumValidation};
use axum::body::Body;
use axum::http::HeaderName;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tower::{Service, ServiceExt};

use crate::access::Grants;
use crate::api::{self, AppState, Limits};
use crate::audit::Audit;
use crate::auth::{ApiKeys, Authenticator, Oidc, PeerIdentity};
use crate::catalog::layout::{Layout, Warehouse};
use crate::catalog::{Catalog, Settings, recovery};
use crate::config::{Config, CredentialPolicy, WarehouseUri};
use crate::data::{DataRuntime, LanceDatasets};
use crate::store::Store;
use crate::store::fs::FsStore;
use crate::store::metered::Metered;
use crate::store::s3::{S3Root, S3Store};
use crate::store::s3_reads::S3Access;
use crate::telemetry;
use crate::tls::Tls;
use crate::vend::Vendor;
use crate::vend::sts::Sts;

/// What the gateway is built from: the store, its layout, and the two vendors (one for
/// clients, one for the gateway's own reads of datasets).
pub struct Parts {
    pub store: Arc<dyn Store>,
    pub layout: Layout,
    pub client_vendor: Vendor,
    pub own_access: Vendor,
}

/// Builds the store and vendors. Fails (with a message naming the setting) on a warehouse
/// that cannot be opened. Without `writes` a local warehouse is opened read-only (for
/// `admin` checks: nothing is created or cleaned up).
pub async fn build_parts(config: &Config, writes: bool) -> Result<Parts, String> {
    match &config.warehouse {
        WarehouseUri::Local(path) => {
            let store = if writes {
                FsStore::open_with_sync(path, config.fs_sync)
            } else {
                FsStore::open_read_only(path)
            }
            .map_err(|e| format!("invalid setting `warehouse`: {}: {e}", path.display()))?;
            let layout = Layout::new(Warehouse::Local(store.root().to_path_buf()));
            Ok(Parts {
                store: Arc::new(store),
                layout,
                client_vendor: Vendor::local(),
                own_access: Vendor::local(),
            })
        }
        WarehouseUri::Gcs { bucket, prefix } => checked(gcs_parts(config, bucket, prefix)?).await,
        WarehouseUri::Azure { container, prefix } => {
            checked(azure_parts(config, container, prefix)?).await
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
                    secret.expose(),
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
                .zip(config.client_secret_access_key.clone())
                .map(|(id, secret)| (id, secret.expose().to_string()));
            let client_endpoint = config.client_endpoint.clone().or_else(|| endpoint.clone());
            let vendor = |policy| {
                Vendor::s3(
                    client_endpoint.as_deref(),
                    &region,
                    s3.path_style,
                    policy,
                    client_keys.clone(),
                    own_keys.clone(),
                )
                .map_err(|e| format!("invalid setting `credentials`: {}", e.message))
            };
            let client_vendor = match &config.sts {
                Some(sts) => {
                    let mut sts_conf = aws_sdk_sts::config::Builder::from(&sdk)
                        .region(Region::new(region.clone()));
                    if let Some(e) = sts.endpoint.clone().or_else(|| endpoint.clone()) {
                        sts_conf = sts_conf.endpoint_url(e);
                    }
                    let client = aws_sdk_sts::Client::from_conf(sts_conf.build());
                    vendor(CredentialPolicy::None)?.with_sts(
                        Sts::new(client, sts.role_arn.clone(), sts.duration)
                            .with_commit_gate(config.managed_versioning),
                    )
                }
                None => vendor(config.credentials)?,
            };
            let reads = S3Access {
                endpoint: endpoint.clone(),
                region: region.clone(),
                path_style: s3.path_style,
                credentials: own_keys.clone(),
            };
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
                store: Arc::new(S3Store::new(client, root).reading_through(reads)),
                layout: Layout::new(warehouse),
                client_vendor,
                own_access,
            })
        }
    }
}

/// A cloud warehouse is looked at once before anything is served: a bucket or container
/// that is not there, or credentials the store refuses, stop the start with the setting to
/// change. A store that cannot be reached at all is only warned of (it may come up after the
/// gateway; `/readyz` says so until it does).
async fn checked(parts: Parts) -> Result<Parts, String> {
    use crate::store::StoreError;
    match parts.store.check().await {
        Ok(()) => Ok(parts),
        Err(StoreError::NoSuchBucket(name)) => Err(format!(
            "invalid setting `warehouse`: the bucket or container '{name}' does not exist"
        )),
        Err(StoreError::Denied(message)) => Err(format!(
            "invalid setting `warehouse`: the store refuses the gateway's credentials: {}",
            // One line: the store's answer may be a multi-line XML document.
            message.split_whitespace().collect::<Vec<_>>().join(" ")
        )),
        Err(e) => {
            tracing::warn!(error = %e, "the warehouse store is not reachable yet");
            Ok(parts)
        }
    }
}

/// A GCS warehouse: the store over the JSON API, signed with object_store's credentials
/// (or unsigned for an emulator), and the options vended beside its tables.
fn gcs_parts(config: &Config, bucket: &str, prefix: &str) -> Result<Parts, String> {
    use crate::store::gcs::{DEFAULT_BASE_URL, GcsAuth, GcsStore};
    let gcs = &config.gcs;
    let own = if gcs.anonymous {
        None
    } else {
        let mut builder =
            object_store::gcp::GoogleCloudStorageBuilder::from_env().with_bucket_name(bucket);
        if let Some(path) = &gcs.service_account_key {
            if !path.is_file() {
                return Err(format!(
                    "invalid setting `gcs-service-account-key`: {} is not a file",
                    path.display()
                ));
            }
            builder = builder.with_service_account_path(path.to_string_lossy());
        }
        let store = builder
            .build()
            .map_err(|e| format!("invalid setting `warehouse`: the GCS credentials: {e}"))?;
        Some(store.credentials().clone())
    };
    let auth = match &own {
        Some(provider) => GcsAuth::Provider(provider.clone()),
        None => GcsAuth::Anonymous,
    };
    let base = gcs.endpoint.as_deref().unwrap_or(DEFAULT_BASE_URL);
    let store = GcsStore::new(base, bucket, prefix, auth)
        .map_err(|e| format!("invalid setting `warehouse`: {e}"))?;
    let vendor = |policy| {
        Vendor::gcs(gcs.endpoint.as_deref(), gcs.anonymous, policy, own.clone())
            .map_err(|e| format!("invalid setting `credentials`: {}", e.message))
    };
    Ok(Parts {
        store: Arc::new(store),
        layout: Layout::new(Warehouse::Cloud {
            scheme: "gs",
            bucket: bucket.to_string(),
            prefix: prefix.to_string(),
        }),
        client_vendor: vendor(config.credentials)?,
        own_access: vendor(if own.is_some() {
            CredentialPolicy::Gateway
        } else {
            CredentialPolicy::None
        })?,
    })
}

/// An Azure warehouse: the store over object_store's Azure client, and the options (and SAS
/// tokens) vended beside its tables.
fn azure_parts(config: &Config, container: &str, prefix: &str) -> Result<Parts, String> {
    use crate::store::azure::AzureStore;
    use crate::vend::sas::Sas;
    let azure = &config.azure;
    let account = azure
        .account
        .clone()
        .ok_or("invalid setting `azure-account`: an Azure warehouse needs its storage account")?;
    let key = azure.access_key.as_ref().map(|k| k.expose().to_string());
    let store = AzureStore::connect(
        &account,
        key.as_deref(),
        azure.endpoint.as_deref(),
        container,
        prefix,
    )
    .map_err(|e| format!("invalid setting `warehouse`: {e}"))?;
    let sas = match (config.credentials, &key) {
        (CredentialPolicy::Sas, Some(key)) => Some(
            Sas::new(
                &account,
                key,
                container,
                azure.sas_scope,
                azure.sas_duration,
            )
            .map_err(|e| format!("invalid setting `azure-access-key`: {}", e.message))?,
        ),
        _ => None,
    };
    let vendor = |policy, sas| {
        Vendor::azure(
            &account,
            azure.endpoint.as_deref(),
            policy,
            key.as_deref(),
            sas,
        )
        .map_err(|e| format!("invalid setting `credentials`: {}", e.message))
    };
    Ok(Parts {
        store: Arc::new(store),
        layout: Layout::new(Warehouse::Cloud {
            scheme: "az",
            bucket: container.to_string(),
            prefix: prefix.to_string(),
        }),
        client_vendor: vendor(config.credentials, sas)?,
        own_access: vendor(
            if key.is_some() {
                CredentialPolicy::Gateway
            } else {
                CredentialPolicy::None
            },
            None,
        )?,
    })
}

/// Who authenticates callers and what they may do, from the configuration.
struct Security {
    auth: Authenticator,
    grants: Arc<Grants>,
    tls: Option<Arc<Tls>>,
    audit: Audit,
}

fn security(config: &Config) -> Result<Security, String> {
    let keys = match &config.auth.api_keys {
        Some(path) => Some(Arc::new(ApiKeys::from_file(path).map_err(|e| {
            format!("invalid setting `api-keys`: {}: {e}", path.display())
        })?)),
        None => None,
    };
    let oidc = match &config.auth.oidc {
        Some(settings) => Some(
            Oidc::new(settings.clone())
                .map_err(|e| format!("invalid setting `oidc-issuer`: {e}"))?,
        ),
        None => None,
    };
    let tls = match &config.tls {
        Some(settings) => Some(Arc::new(
            Tls::load(settings.clone()).map_err(|e| format!("invalid setting `tls-cert`: {e}"))?,
        )),
        None => None,
    };
    let grants = match &config.grants {
        Some(path) => Grants::from_file(path)
            .map_err(|e| format!("invalid setting `grants`: {}: {e}", path.display()))?,
        None => Grants::open(),
    };
    let audit = match &config.audit_log {
        Some(dest) => Audit::open(dest).map_err(|e| format!("invalid setting `audit-log`: {e}"))?,
        None => Audit::off(),
    };
    Ok(Security {
        auth: Authenticator {
            keys,
            oidc,
            certificates: tls.as_ref().is_some_and(|t| t.verifies_clients()),
            allow_anonymous: config.auth.allow_anonymous,
        },
        grants: Arc::new(grants),
        tls,
        audit,
    })
}

/// Files, and what to do when one of them changes.
type WatchedFiles = Vec<(Vec<PathBuf>, Box<dyn Fn() + Send + Sync>)>;

/// Reloads the grants, the API keys and the TLS files when one of them changes (checked
/// every second) and on SIGHUP.
fn watch_files(grants: Arc<Grants>, keys: Option<Arc<ApiKeys>>, tls: Option<Arc<Tls>>) {
    let mut watched: WatchedFiles = Vec::new();
    if let Some(path) = grants.path().map(|p| p.to_path_buf()) {
        let g = grants.clone();
        watched.push((vec![path], Box::new(move || g.reload())));
    }
    if let Some(keys) = keys {
        let path = keys.path().to_path_buf();
        watched.push((vec![path], Box::new(move || keys.reload())));
    }
    if let Some(tls) = tls {
        let paths = tls.paths();
        watched.push((paths, Box::new(move || tls.reload())));
    }
    if watched.is_empty() {
        return;
    }
    let stamp = |paths: &[PathBuf]| -> Vec<Option<(SystemTime, u64)>> {
        paths
            .iter()
            .map(|p| {
                std::fs::metadata(p)
                    .ok()
                    .and_then(|m| Some((m.modified().ok()?, m.len())))
            })
            .collect()
    };
    tokio::spawn(async move {
        let mut stamps: Vec<_> = watched.iter().map(|(p, _)| stamp(p)).collect();
        #[cfg(unix)]
        let mut hangup =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
        loop {
            #[cfg(unix)]
            let hung_up = async {
                match hangup.as_mut() {
                    Some(h) => {
                        h.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            #[cfg(not(unix))]
            let hung_up = std::future::pending::<()>();
            let all = tokio::select! {
                _ = hung_up => true,
                _ = tokio::time::sleep(Duration::from_secs(1)) => false,
            };
            for (i, (paths, reload)) in watched.iter().enumerate() {
                let now = stamp(paths);
                if all || now != stamps[i] {
                    stamps[i] = now;
                    reload();
                }
            }
        }
    });
}

/// How long a graceful stop waits for catalog changes still running and for the work
/// requests left after their answers.
const AFTER_ANSWERS_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Opens the catalog, starts the recovery sweeper and serves until SIGTERM or Ctrl-C.

pub async fn serve(config: Config, parts: Parts, listener: TcpListener) -> Result<(), String> {
    let security = security(&config)?;
    if let Some(addr) = config.metrics_listen {
        let metrics = telemetry::bind(addr).await?;
        let handle = telemetry::install()?;
        tracing::info!(listen = %addr, "serving metrics at /metrics");
        tokio::spawn(telemetry::serve(metrics, handle));
    }
    // Store calls are counted only while metrics are served.
    let store: Arc<dyn Store> = if config.metrics_listen.is_some() {
        Arc::new(Metered::new(parts.store))
    } else {
        parts.store
    };
    // Writes pin what they change on gateways that answer from memory; with
    // `--read-cache`, this one does too.
    let (store, mut coherence) =
        crate::coherence::for_gateway(store, &parts.layout, &config).await?;
    let caches = coherence
        .as_ref()
        .is_some_and(|c| c.peers.member().is_some());
    let runtime = DataRuntime::dedicated(config.data_threads)
        .map_err(|e| format!("could not start the data runtime: {e}"))?;
    let datasets = Arc::new(LanceDatasets::new(parts.own_access).with_runtime(runtime));
    let catalog = Catalog::open(
        store,
        parts.layout,
        datasets.clone(),
        Settings::new(config.recovery_grace, config.node_id.clone())
            .with_grants(security.grants.clone())
            .with_managed_versioning(config.managed_versioning)
            .with_maintenance(config.maintenance_policy.clone())
            .with_request_timeout(config.request_timeout),
    )
    .await
    .map_err(|e| format!("could not open the warehouse: {e}"))?;
    let catalog = Arc::new(catalog);
    // Once the warehouse is open (its format known to be there).
    let coherence_tasks = coherence
        .as_mut()
        .map(|c| c.start(crate::catalog::records::now_ms()))
        .unwrap_or_default();
    let after_answers = catalog.clone();
    if config.managed_versioning {
        // The gateway's own commits order against its clients' and batches in the log.
        datasets.commit_through(Arc::new(crate::catalog::own_commits::OwnCommits::of(
            catalog.clone(),
        )));
    }
    // The first sweep runs at once: a gateway restarted under the same node id settles what
    // its earlier run left unfinished before others would (they wait out the grace period).
    let sweeper = {
        let catalog = catalog.clone();
        let interval = config.recovery_interval;
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(interval);
            let mut registered: Option<std::time::Instant> = None;
            loop {
                ticker.tick().await;
                // The gateway registry (`catalog::upgrade`): what `admin upgrade` checks. A
                // gateway that caches keeps its entry itself (`coherence::peers`).
                if !caches
                    && registered
                        .is_none_or(|at| at.elapsed() >= crate::catalog::upgrade::REGISTRY_EVERY)
                {
                    match catalog.register_gateway().await {
                        Ok(()) => registered = Some(std::time::Instant::now()),
                        Err(e) => {
                            tracing::warn!(error = %e, "could not write this gateway's registry entry")
                        }
                    }
                }
                // Housekeeping runs on one gateway per half interval, whichever it is.
                if let Err(e) = recovery::sweep_spaced(&catalog, interval / 2).await {
                    tracing::warn!(error = %e, "recovery sweep failed");
                }
            }
        })
    };
    watch_files(
        security.grants.clone(),
        security.auth.keys.clone(),
        security.tls.clone(),
    );
    let audit = Arc::new(security.audit);
    // Maintenance listens for commits and sweeps the warehouse in the background.
    let mut maintenance = config.maintenance.clone();
    if let Some(ray) = &config.ray {
        tracing::info!(address = %ray.address, gateway = %ray.gateway_uri, "maintenance past the policy's Ray thresholds runs on the Ray cluster");
        maintenance.ray = Some(crate::ray::Ray::new(ray.clone()).map_err(|e| e.message)?);
    }
    let ray = maintenance.ray.clone();
    crate::maintain::Maintainer::new(
        catalog.clone(),
        datasets.clone(),
        audit.clone(),
        maintenance,
    )
    .start();
    let state = AppState::new(api::Services {
        catalog,
        vendor: Arc::new(parts.client_vendor),
        auth: Arc::new(security.auth),
        audit,
        data: datasets,
        data_limits: config.data_limits,
        ray,
    });
    let limits = Limits {
        max_body_bytes: config.max_body_bytes,
        request_timeout: config.request_timeout,
        metrics: config.metrics_listen.is_some(),
        console: config.console,
    };
    let app = tower::ServiceBuilder::new()
        .map_request(api::normalize_path)
        .service(api::router(state, &limits));
    tracing::info!(listen = %listener.local_addr().map(|a| a.to_string()).unwrap_or_default(), warehouse = ?config.warehouse, node = %config.node_id, tls = security.tls.is_some(), "lance-gateway serving");
    accept_loop(
        listener,
        app,
        security.tls,
        config.limits.header_timeout,
        config.limits.max_connections,
    )
    .await;
    sweeper.abort();
    for task in coherence_tasks {
        task.abort();
    }
    if let Some(c) = &coherence {
        c.peers.leave().await;
    }
    // Changes whose clients went away run on (`api::detached`), and so may the work any
    // request left after its answer: both are waited for, up to the grace.
    let finished = async {
        crate::api::detached_finished().await;
        after_answers.finish_after_answers().await;
    };
    if tokio::time::timeout(AFTER_ANSWERS_GRACE, finished)
        .await
        .is_err()
    {
        tracing::warn!(
            "stopping with catalog changes or work after answers unfinished; recovery will \
             finish them"
        );
    }
    tracing::info!("lance-gateway stopped");
    Ok(())
}

/// Accepts connections until shutdown, then lets those open finish what they are doing.
async fn accept_loop<S>(
    listener: TcpListener,
    app: S,
    tls: Option<Arc<Tls>>,
    header_timeout: Duration,
    max_connections: usize,
) where
    S: Service<axum::http::Request<Body>, Response = axum::response::Response>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: std::fmt::Display + Send,
{
    let permits = Arc::new(tokio::sync::Semaphore::new(max_connections));
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut connections = tokio::task::JoinSet::new();
    let shutdown = shutdown_signal();
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            _ = &mut shutdown => break,
            permit = permits.clone().acquire_owned() => match permit {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        let (tcp, _) = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "could not accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = tcp.set_nodelay(true);
        let (app, tls, stopped) = (app.clone(), tls.clone(), stopped.clone());
        connections.spawn(async move {
            let _permit = permit;
            match tls {
                None => {
                    serve_connection(TokioIo::new(tcp), None, app, header_timeout, stopped).await
                }
                Some(tls) => {
                    let accepted =
                        tokio::time::timeout(header_timeout, tls.acceptor().accept(tcp)).await;
                    let Ok(Ok(stream)) = accepted else {
                        return;
                    };
                    let peer = stream
                        .get_ref()
                        .1
                        .peer_certificates()
                        .and_then(|certs| certs.first())
                        .and_then(crate::tls::common_name)
                        .map(PeerIdentity);
                    serve_connection(TokioIo::new(stream), peer, app, header_timeout, stopped).await
                }
            }
        });
        // Forget connections that are done.
        while connections.try_join_next().is_some() {}
    }
    let _ = stop.send(true);
    let drained = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(Duration::from_secs(30), drained)
        .await
        .is_err()
    {
        tracing::warn!("connections still open 30 s after shutdown began; closing them");
    }
}

async fn serve_connection<I, S>(
    io: TokioIo<I>,
    peer: Option<PeerIdentity>,
    app: S,
    header_timeout: Duration,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    S: Service<axum::http::Request<Body>, Response = axum::response::Response>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: std::fmt::Display + Send,
{
    let keep_alive = keep_alive_hint(header_timeout);
    let service =
        hyper::service::service_fn(move |req: axum::http::Request<hyper::body::Incoming>| {
            let left = Arc::new(std::sync::Mutex::new(Leftover::Held));
            let mut req = req.map(|incoming| {
                Body::new(Watched {
                    inner: Some(incoming),
                    left: left.clone(),
                })
            });
            if let Some(peer) = &peer {
                req.extensions_mut().insert(peer.clone());
            }
            let (app, keep_alive) = (app.clone(), keep_alive.clone());
            async move {
                let response = app
                    .oneshot(req)
                    .await
                    .map_err(|e| std::io::Error::other(e.to_string()))?;
                let mut response = settle(&left, response).await;
                if !closes(&response) {
                    response
                        .headers_mut()
                        .insert(HeaderName::from_static("keep-alive"), keep_alive);
                }
                Ok::<_, std::io::Error>(response)
            }
        });
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        // Request heads larger than this are refused (431) rather than buffered.
        .max_buf_size(64 * 1024)
        .max_headers(100)
        .serve_connection(io, service);
    tokio::pin!(connection);
    tokio::select! {
        result = connection.as_mut() => {
            if let Err(e) = result
                && !e.is_timeout()
                && !e.is_incomplete_message()
            {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        }
        _ = stopped.changed() => {
            connection.as_mut().graceful_shutdown();
            let _ = connection.await;
        }
    }
}

/// What became of a request's body by the time its answer is ready.
enum Leftover {
    /// Still held (by the handler or a task it started), or broken off by the client.
    Held,
    /// Read to its end, or empty.
    Done,
    /// Dropped before its end (an extractor refused the request, a handler answered
    /// without reading it, an upload was refused part way, the request timed out): the
    /// rest, to be read and thrown away before the answer goes out.
    Unread(hyper::body::Incoming),
}

/// A request body that records whether it was read to its end, and hands back what is
/// left of it when it is dropped unread. hyper decides whether to keep a connection alive
/// only after it has written the answer's head: a body dropped unfinished then makes it
/// close the connection without `Connection: close`, and the client's next request on it
/// is lost. `settle` drains what is left, or announces the close, first.
struct Watched {
    inner: Option<hyper::body::Incoming>,
    left: Arc<std::sync::Mutex<Leftover>>,
}

impl Watched {
    fn record(&self, to: Leftover) {
        *self
            .left
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = to;
    }
}

impl hyper::body::Body for Watched {
    type Data = bytes::Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<bytes::Bytes>, hyper::Error>>> {
        let Some(inner) = self.inner.as_mut() else {
            return std::task::Poll::Ready(None);
        };
        let polled = hyper::body::Body::poll_frame(std::pin::Pin::new(inner), cx);
        match &polled {
            std::task::Poll::Ready(None) => {
                self.inner = None;
                self.record(Leftover::Done);
            }
            // Broken off: the connection cannot be reused (`Held` closes it).
            std::task::Poll::Ready(Some(Err(_))) => self.inner = None,
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner
            .as_ref()
            .is_none_or(hyper::body::Body::is_end_stream)
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner
            .as_ref()
            .map(hyper::body::Body::size_hint)
            .unwrap_or_else(|| hyper::body::SizeHint::with_exact(0))
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take() {
            if hyper::body::Body::is_end_stream(&inner) {
                self.record(Leftover::Done);
            } else {
                self.record(Leftover::Unread(inner));
            }
        }
    }
}

/// Longest the rest of an unread body is waited for before the answer goes out anyway,
/// announcing the close.
const DRAIN_TIME: Duration = Duration::from_secs(2);

/// The answer, once the request's body is done with: read to its end, drained (up to
/// `guard::drain`'s bound), or, past that bound, still held, broken off or after a timeout
/// (whose body is not coming), with the connection announced as closing.
async fn settle(
    left: &std::sync::Mutex<Leftover>,
    response: axum::response::Response,
) -> axum::response::Response {
    let left = std::mem::replace(
        &mut *left
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
        Leftover::Done,
    );
    match left {
        Leftover::Done => response,
        Leftover::Unread(rest)
            if response.status() != axum::http::StatusCode::SERVICE_UNAVAILABLE
                && !closes(&response) =>
        {
            let drained = tokio::time::timeout(DRAIN_TIME, api::guard::drain(Body::new(rest)))
                .await
                .unwrap_or(false);
            if drained {
                response
            } else {
                api::guard::closing(response)
            }
        }
        Leftover::Unread(_) | Leftover::Held => api::guard::closing(response),
    }
}

fn closes(response: &axum::response::Response) -> bool {
    response
        .headers()
        .get(axum::http::header::CONNECTION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().contains("close"))
}

/// `Keep-Alive: timeout=N` for every answer that keeps the connection: hyper's header-read
/// timeout also closes a connection idle that long after an answer, without a word, so a
/// request sent as it fires is lost. Told the idle limit (a second short of it), clients
/// that read the header retire the connection first.
fn keep_alive_hint(header_timeout: Duration) -> axum::http::HeaderValue {
    let secs = header_timeout.as_secs().saturating_sub(1).max(1);
    axum::http::HeaderValue::from_str(&format!("timeout={secs}"))
        .unwrap_or_else(|_| axum::http::HeaderValue::from_static("timeout=1"))
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
