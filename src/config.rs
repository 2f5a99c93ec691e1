//! One `Config`: defaults, then an optional TOML file, then environment variables, then
//! flags (each later source wins). Every setting is defined once, in `Settings`: clap reads
//! it from flags and the environment, serde from the file, and the two are merged as TOML
//! tables. `Config::load` checks everything before the port is bound; a bad value names its
//! setting. Secrets are `Secret`s, which never print.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use serde::{Deserialize, Serialize};

/// `--version`: the release and the record formats it reads and writes (`catalog::upgrade`).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (catalog record formats: reads 1-3, writes 2-3; writes 3 once the warehouse is upgraded)"
);

#[derive(Parser, Debug)]
#[command(
    name = "lance-gateway",
    version = VERSION,
    about = "A Lance Namespace REST catalog over S3-compatible stores or a local warehouse"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Serve the Lance Namespace REST API.
    Serve(Box<ServeArgs>),
    /// Manage API keys.
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Inspect and check a warehouse directly, with no server running (same settings as
    /// `serve`: flags, environment, `--config`).
    #[command(subcommand)]
    Admin(AdminCommand),
}

#[derive(Subcommand, Debug)]
pub enum AdminCommand {
    /// List the namespaces directly under one (the root when none is given).
    Namespaces {
        /// A namespace id, its parts joined by `$` (`ml$emb`).
        id: Option<String>,
        #[command(flatten)]
        common: Box<AdminCommon>,
    },
    /// List the tables of a namespace (the root when none is given).
    Tables {
        /// A namespace id, its parts joined by `$`.
        namespace: Option<String>,
        #[command(flatten)]
        common: Box<AdminCommon>,
    },
    /// Show a table's record (or a namespace's properties).
    Describe {
        /// A table or namespace id, its parts joined by `$`.
        id: String,
        #[command(flatten)]
        common: Box<AdminCommon>,
    },
    /// Run table maintenance now (compaction, index upkeep, version cleanup) under each
    /// table's policy, with no server running; say what ran or, with --dry-run, what would.
    /// Exit status 0 when every task that ran succeeded, 1 when one failed, 2 when the
    /// command could not run.
    Maintain {
        /// A table, or a namespace (every table below it), its parts joined by `$`; the
        /// whole warehouse when none is given.
        id: Option<String>,
        /// Measure and say what would run; change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Only this task: compaction, index or cleanup (repeatable) [default: all].
        #[arg(long = "task", value_parser = ["compaction", "index", "cleanup"])]
        tasks: Vec<String>,
        #[command(flatten)]
        common: Box<AdminCommon>,
    },
    /// Check every record, claim, unfinished operation and data folder; exit status 0 when
    /// clean, 1 when problems are left, 2 when the check could not run.
    Fsck {
        /// Settle what recovery would settle, clear void marks, restore missing claims and
        /// remove claims no one holds (never data).
        #[arg(long)]
        repair: bool,
        /// With --repair, also delete dataset folders no table or operation points to.
        #[arg(long, requires = "repair")]
        delete_orphans: bool,
        /// With --repair, point records that name another warehouse's folders (a moved or
        /// copied warehouse) at their folders in this one.
        #[arg(long, requires = "repair")]
        relocate: bool,
        /// Note tables due for a maintenance task that has not succeeded on them for this
        /// many hours (0: note every table that is due).
        #[arg(long, default_value_t = 24)]
        overdue_hours: u64,
        #[command(flatten)]
        common: Box<AdminCommon>,
    },
    /// Say the warehouse's format and the gateways seen serving it; with --to, raise the
    /// format (once no gateway of an older release serves the warehouse: see
    /// docs/consistency.md, "Upgrades"). Refused while the registry shows a live gateway
    /// that cannot read the new format, unless --force.
    Upgrade {
        /// The format to raise the warehouse to (this release writes up to 3).
        #[arg(long)]
        to: Option<u32>,
        /// Raise it even though the registry shows gateways that cannot read it.
        #[arg(long, requires = "to")]
        force: bool,
        #[command(flatten)]
        common: Box<AdminCommon>,
    },
    /// List the tables dropped in a namespace and kept for undrop (the root when none is
    /// given): drop id, when, by whom, size, when they will be purged.
    Dropped {
        /// A namespace id, its parts joined by `$`.
        namespace: Option<String>,
        #[command(flatten)]
        common: Box<AdminCommon>,
    },
    /// Undrop a dropped table: every version, tag and index as they were.
    Undrop {
        /// The table's id when it was dropped, its parts joined by `$`.
        id: String,
        /// Which drop, when the name was dropped more than once [default: the latest].
        #[arg(long)]
        drop_id: Option<String>,
        /// Undrop it under this id instead (its parts joined by `$`), when the name was
        /// taken again.
        #[arg(long = "as")]
        new_id: Option<String>,
        #[command(flatten)]
        common: Box<AdminCommon>,
    },
    /// Write a consistent copy of the catalog's records (not the data) to a file, with the
    /// version each table is at (docs/consistency.md, "Backup and restore").
    Backup {
        /// Where to write it (JSON lines): a file, `-` for standard output, or
        /// `s3://bucket/key`, reached with the warehouse's S3 settings.
        #[arg(long)]
        to: String,
        #[command(flatten)]
        common: Box<AdminCommon>,
    },
    /// Write a backup into this warehouse, whose catalog must be empty (unless --force),
    /// pointing every table at its folder here (copy the data first when restoring into
    /// another bucket or prefix).
    Restore {
        /// The backup: a file, `-` for standard input, or `s3://bucket/key`.
        #[arg(long)]
        from: String,
        /// Write over a catalog that is there (objects of the same keys are replaced).
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        common: Box<AdminCommon>,
    },
    /// Check every table of a backup (or of the catalog) against storage: the version it
    /// was at, or a newer one, must be there. Exit status 1 when any is missing.
    Verify {
        /// The backup (a file or `s3://bucket/key`) [default: the live catalog].
        #[arg(long)]
        from: Option<String>,
        #[command(flatten)]
        common: Box<AdminCommon>,
    },
    /// Delete a dropped table's data now, before its retention ends. Cannot be undone.
    Purge {
        /// The table's id when it was dropped, its parts joined by `$`.
        id: String,
        /// Which drop [default: the latest].
        #[arg(long)]
        drop_id: Option<String>,
        /// The table's id typed again, to confirm.
        #[arg(long)]
        confirm: String,
        #[command(flatten)]
        common: Box<AdminCommon>,
    },
}

/// What every admin command takes: the warehouse settings, and the output format.
#[derive(Args, Debug)]
pub struct AdminCommon {
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub serve: ServeArgs,
}

#[derive(Subcommand, Debug)]
pub enum KeysCommand {
    /// Create an API key: prints the key (give it to its holder; it is not stored) and the
    /// line to add to the `--api-keys` file (which holds only a salted hash).
    Create {
        /// The principal the key authenticates as.
        #[arg(long)]
        principal: String,
        /// Groups of the principal, comma-separated.
        #[arg(long, value_delimiter = ',')]
        groups: Vec<String>,
    },
}

/// A secret setting: prints as `***`.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl FromStr for Secret {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Secret(s.to_string()))
    }
}

/// Who gets which credentials beside a table's location.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CredentialPolicy {
    /// Vend no keys: clients bring their own (endpoint, region and addressing are still vended).
    None,
    /// Vend the keys configured for clients (`client-access-key-id`, `client-secret-access-key`): every caller gets the same keys.
    Static,
    /// Vend the gateway's own keys. Only for trusted clients.
    Gateway,
    /// Vend short-lived keys from STS AssumeRole, limited to the table's folder and to the caller's access (read or read-write).
    Sts,
    /// Azure: vend a short-lived SAS token signed with the account key, read-only or read-write by the caller's access, limited to the table's folder where the account has a hierarchical namespace.
    Sas,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

/// Every setting of `serve`, each optional: a flag, an environment variable, or a key in
/// the TOML file (snake_case).
#[derive(Args, Debug, Default, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// Address to listen on [default: 127.0.0.1:2333].
    #[arg(long, env = "LANCE_GATEWAY_LISTEN")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
    /// Serve Prometheus metrics (`GET /metrics`) on this address [default: off].
    #[arg(long, env = "LANCE_GATEWAY_METRICS_LISTEN")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics_listen: Option<String>,
    /// Where catalog and tables live: a directory, file:///dir, s3://bucket/prefix, s3:// (endpoint mode), gs://bucket/prefix or az://container/prefix [default: ./warehouse].
    #[arg(long, env = "LANCE_GATEWAY_WAREHOUSE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warehouse: Option<String>,
    /// S3 endpoint URL (else AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, else AWS).
    #[arg(long, env = "LANCE_GATEWAY_S3_ENDPOINT")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub s3_endpoint: Option<String>,
    /// S3 region (else AWS_REGION / the profile, else us-east-1).
    #[arg(long, env = "LANCE_GATEWAY_S3_REGION")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub s3_region: Option<String>,
    /// Access key id for the gateway's own S3 access (else the AWS credential chain).
    #[arg(long, env = "LANCE_GATEWAY_S3_ACCESS_KEY_ID")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub s3_access_key_id: Option<String>,
    /// Secret key for the gateway's own S3 access.
    #[arg(
        long,
        env = "LANCE_GATEWAY_S3_SECRET_ACCESS_KEY",
        hide_env_values = true
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub s3_secret_access_key: Option<Secret>,
    /// Use virtual-hosted-style bucket addressing instead of path style.
    #[arg(long, env = "LANCE_GATEWAY_S3_VIRTUAL_HOSTED")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub s3_virtual_hosted: Option<bool>,
    /// GCS warehouses: the JSON API's base URL, for an emulator such as fake-gcs-server [default: https://storage.googleapis.com].
    #[arg(long, env = "LANCE_GATEWAY_GCS_ENDPOINT")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gcs_endpoint: Option<String>,
    /// GCS warehouses: a service account key file for the gateway's own access [default: object_store's chain: GOOGLE_SERVICE_ACCOUNT, GOOGLE_APPLICATION_CREDENTIALS, the metadata server].
    #[arg(long, env = "LANCE_GATEWAY_GCS_SERVICE_ACCOUNT_KEY")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gcs_service_account_key: Option<PathBuf>,
    /// GCS warehouses: send requests unsigned (an emulator that checks no tokens) [default: false].
    #[arg(long, env = "LANCE_GATEWAY_GCS_ANONYMOUS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gcs_anonymous: Option<bool>,
    /// Azure warehouses: the storage account [default: AZURE_STORAGE_ACCOUNT_NAME].
    #[arg(long, env = "LANCE_GATEWAY_AZURE_ACCOUNT")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub azure_account: Option<String>,
    /// Azure warehouses: the account's access key, for the gateway's own access and for signing SAS tokens [default: AZURE_STORAGE_ACCOUNT_KEY].
    #[arg(long, env = "LANCE_GATEWAY_AZURE_ACCESS_KEY", hide_env_values = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub azure_access_key: Option<Secret>,
    /// Azure warehouses: the blob service URL, with the account in its path for an emulator (http://127.0.0.1:10000/devstoreaccount1) [default: https://<account>.blob.core.windows.net].
    #[arg(long, env = "LANCE_GATEWAY_AZURE_ENDPOINT")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub azure_endpoint: Option<String>,
    /// What a vended SAS reaches: directory (the table's folder; needs an account with a hierarchical namespace) or container (the whole container: for flat accounts and emulators, chosen knowingly) [default: directory].
    #[arg(long, env = "LANCE_GATEWAY_AZURE_SAS_SCOPE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub azure_sas_scope: Option<String>,
    /// How long vended SAS tokens last, in seconds [default: 3600].
    #[arg(long, env = "LANCE_GATEWAY_SAS_DURATION_SECS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sas_duration_secs: Option<u64>,
    /// The S3 endpoint vended to clients, when they reach the store by another address than the gateway does.
    #[arg(long, env = "LANCE_GATEWAY_CLIENT_ENDPOINT")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_endpoint: Option<String>,
    /// Which credentials to vend beside locations: none, static, gateway, sts (S3) or sas (Azure) [default: none].
    #[arg(long, env = "LANCE_GATEWAY_CREDENTIALS", value_enum)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub credentials: Option<CredentialPolicy>,
    /// Access key id vended to clients under the static policy.
    #[arg(long, env = "LANCE_GATEWAY_CLIENT_ACCESS_KEY_ID")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_access_key_id: Option<String>,
    /// Secret key vended to clients under the static policy.
    #[arg(
        long,
        env = "LANCE_GATEWAY_CLIENT_SECRET_ACCESS_KEY",
        hide_env_values = true
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_secret_access_key: Option<Secret>,
    /// STS endpoint for the sts policy [default: the S3 endpoint, as SeaweedFS serves STS there].
    #[arg(long, env = "LANCE_GATEWAY_STS_ENDPOINT")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sts_endpoint: Option<String>,
    /// The role the sts policy assumes (its own policy should already be limited to the warehouse).
    #[arg(long, env = "LANCE_GATEWAY_STS_ROLE_ARN")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sts_role_arn: Option<String>,
    /// How long vended STS credentials last, in seconds [default: 3600].
    #[arg(long, env = "LANCE_GATEWAY_STS_DURATION_SECS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sts_duration_secs: Option<u64>,
    /// File of API keys (lines from `lance-gateway keys create`); reloaded when it changes.
    #[arg(long, env = "LANCE_GATEWAY_API_KEYS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_keys: Option<PathBuf>,
    /// OIDC issuer whose bearer tokens (JWTs) are accepted (its `iss`).
    #[arg(long, env = "LANCE_GATEWAY_OIDC_ISSUER")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oidc_issuer: Option<String>,
    /// The audience tokens must name (`aud`); required with an issuer.
    #[arg(long, env = "LANCE_GATEWAY_OIDC_AUDIENCE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oidc_audience: Option<String>,
    /// Where the issuer's keys are [default: the issuer's discovery document].
    #[arg(long, env = "LANCE_GATEWAY_OIDC_JWKS_URL")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oidc_jwks_url: Option<String>,
    /// The claim naming the principal [default: sub].
    #[arg(long, env = "LANCE_GATEWAY_OIDC_PRINCIPAL_CLAIM")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oidc_principal_claim: Option<String>,
    /// The claim listing the principal's groups [default: groups].
    #[arg(long, env = "LANCE_GATEWAY_OIDC_GROUPS_CLAIM")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oidc_groups_claim: Option<String>,
    /// Serve callers that present no credentials, as principal `anonymous` [default: false when any authentication is configured].
    #[arg(long, env = "LANCE_GATEWAY_ALLOW_ANONYMOUS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow_anonymous: Option<bool>,
    /// Grants file (TOML): who may read, write or administer which ids. Without it every authenticated caller may do everything. Reloaded when it changes and on SIGHUP.
    #[arg(long, env = "LANCE_GATEWAY_GRANTS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grants: Option<PathBuf>,
    /// TLS certificate chain (PEM); serves HTTPS with --tls-key. Reloaded when it changes.
    #[arg(long, env = "LANCE_GATEWAY_TLS_CERT")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM).
    #[arg(long, env = "LANCE_GATEWAY_TLS_KEY")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_key: Option<PathBuf>,
    /// CA certificates (PEM) client certificates must chain to; a client certificate's subject common name is its principal.
    #[arg(long, env = "LANCE_GATEWAY_TLS_CLIENT_CA")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_client_ca: Option<PathBuf>,
    /// With --tls-client-ca, also accept clients without a certificate (they authenticate otherwise) [default: false].
    #[arg(long, env = "LANCE_GATEWAY_TLS_CLIENT_CERT_OPTIONAL")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_client_cert_optional: Option<bool>,
    /// Audit log destination: a file path, `stdout` or `stderr` [default: off].
    #[arg(long, env = "LANCE_GATEWAY_AUDIT_LOG")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audit_log: Option<String>,
    /// Largest request body accepted, in bytes [default: 16777216].
    #[arg(long, env = "LANCE_GATEWAY_MAX_BODY_BYTES")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_body_bytes: Option<usize>,
    /// Largest Arrow upload (CreateTable, InsertIntoTable, MergeInsertIntoTable), in bytes [default: 268435456].
    #[arg(long, env = "LANCE_GATEWAY_MAX_ARROW_BODY_BYTES")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_arrow_body_bytes: Option<usize>,
    /// Most rows one QueryTable answer may hold [default: 1000000].
    #[arg(long, env = "LANCE_GATEWAY_MAX_QUERY_ROWS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_query_rows: Option<usize>,
    /// Largest QueryTable answer, in bytes of Arrow data [default: 268435456].
    #[arg(long, env = "LANCE_GATEWAY_MAX_QUERY_BYTES")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_query_bytes: Option<usize>,
    /// Threads for data work (writes, queries, index builds), apart from those answering requests [default: the number of CPUs].
    #[arg(long, env = "LANCE_GATEWAY_DATA_THREADS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_threads: Option<usize>,
    /// Longest a request may take, in seconds [default: 30].
    #[arg(long, env = "LANCE_GATEWAY_REQUEST_TIMEOUT_SECS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_timeout_secs: Option<u64>,
    /// Longest a client may take to send a request's headers, or a TLS handshake, in seconds; a kept-alive connection idle that long after an answer is closed too [default: 10].
    #[arg(long, env = "LANCE_GATEWAY_HEADER_TIMEOUT_SECS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub header_timeout_secs: Option<u64>,
    /// Most connections served at once; more wait to be accepted [default: 1024].
    #[arg(long, env = "LANCE_GATEWAY_MAX_CONNECTIONS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<usize>,
    /// Age in seconds after which an unfinished catalog operation is settled by others [default: 120].
    #[arg(long, env = "LANCE_GATEWAY_RECOVERY_GRACE_SECS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recovery_grace_secs: Option<u64>,
    /// Seconds between sweeps for abandoned operations [default: 60].
    #[arg(long, env = "LANCE_GATEWAY_RECOVERY_INTERVAL_SECS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recovery_interval_secs: Option<u64>,
    /// Local warehouse: sync each catalog write to disk before publishing it [default: true].
    #[arg(long, env = "LANCE_GATEWAY_FS_SYNC")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fs_sync: Option<bool>,
    /// Answer `managed_versioning: true`, so Lance clients commit each version through the gateway (CreateTableVersion), which checks and orders them [default: false].
    #[arg(long, env = "LANCE_GATEWAY_MANAGED_VERSIONING")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub managed_versioning: Option<bool>,
    /// Serve the web console at /ui/ (its files are in the binary; what it shows, it asks the REST routes for, under the caller's credential) [default: true].
    #[arg(long, env = "LANCE_GATEWAY_CONSOLE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub console: Option<bool>,
    /// Maintain tables by itself: compact small fragments, bring indices up to date, remove old versions, under each table's policy (see --maintenance-policy) [default: true].
    #[arg(long, env = "LANCE_GATEWAY_MAINTENANCE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub maintenance: Option<bool>,
    /// The maintenance policy tables have unless their namespace's or their own properties say otherwise: KEY=VALUE pairs, comma-separated, keys as the `maintenance.*` properties name them (`compaction.min_fragments=8,cleanup.retention=3d`) [default: the README's defaults].
    #[arg(long, env = "LANCE_GATEWAY_MAINTENANCE_POLICY", value_delimiter = ',')]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub maintenance_policy: Option<Vec<String>>,
    /// How long a dropped table is kept (data, versions, tags, indices) so it can be undropped, before the maintenance sweep purges it: `7d`, `36h`, `0s` (delete at once, as before format 3); overridable per namespace and table with the `maintenance.drop_retention` property [default: 7d].
    #[arg(long, env = "LANCE_GATEWAY_DROP_RETENTION")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drop_retention: Option<String>,
    /// Tables maintained at once by this gateway [default: 1].
    #[arg(long, env = "LANCE_GATEWAY_MAINTENANCE_CONCURRENCY")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub maintenance_concurrency: Option<usize>,
    /// Seconds after a commit before its table is looked at for maintenance [default: 30].
    #[arg(long, env = "LANCE_GATEWAY_MAINTENANCE_DELAY_SECS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub maintenance_delay_secs: Option<u64>,
    /// Seconds between looks at every table (for tables clients write directly) [default: 3600].
    #[arg(long, env = "LANCE_GATEWAY_MAINTENANCE_SWEEP_SECS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub maintenance_sweep_secs: Option<u64>,
    /// Ray's Jobs API (the dashboard's address, such as http://ray-head:8265): maintenance of tables past the policy's `maintenance.ray.*` thresholds runs there as Ray jobs instead of in the gateway [default: off, everything runs in the gateway].
    #[arg(long, env = "LANCE_GATEWAY_RAY_ADDRESS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ray_address: Option<String>,
    /// This gateway's REST address as the Ray cluster's workers reach it; a job opens its table and commits through it [default: http(s)://<listen address, or the host name when it listens on all>:<port>].
    #[arg(long, env = "LANCE_GATEWAY_RAY_GATEWAY_URI")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ray_gateway_uri: Option<String>,
    /// The token of a Ray cluster that authenticates callers (Ray's token authentication, `RAY_AUTH_MODE=token`): sent to its Jobs API as a bearer token [default: none].
    #[arg(long, env = "LANCE_GATEWAY_RAY_TOKEN", hide_env_values = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ray_token: Option<Secret>,
    /// The API key a Ray job presents to this gateway, where callers must authenticate (a key from --api-keys whose principal may maintain the tables) [default: none].
    #[arg(long, env = "LANCE_GATEWAY_RAY_API_KEY", hide_env_values = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ray_api_key: Option<Secret>,
    /// This gateway's name among those sharing the warehouse; a gateway restarted under the same name settles its unfinished operations at once [default: <host name>:<port>].
    #[arg(long, env = "LANCE_GATEWAY_NODE_ID")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    /// Answer describe, exists and the catalog's listings from memory while nothing they depend on has changed, kept exact across gateways: writers pin what they change on every gateway that caches (docs/consistency.md, "Answers from memory"). Needs a warehouse at format 3 in a directory or bucket (not endpoint mode) [default: false].
    #[arg(long, env = "LANCE_GATEWAY_READ_CACHE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_cache: Option<bool>,
    /// The read cache's lease on the gateway registry, in seconds: a gateway other gateways cannot reach stops answering from memory within it, and a write that meets such a gateway waits it out once [default: 8].
    #[arg(long, env = "LANCE_GATEWAY_READ_CACHE_LEASE_SECS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_cache_lease_secs: Option<u64>,
    /// Most memory the read cache holds, in MiB [default: 16].
    #[arg(long, env = "LANCE_GATEWAY_READ_CACHE_MIB")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_cache_mib: Option<usize>,
    /// Where this gateway takes pins from the others when its read cache is on (plain HTTP, signed with a secret kept in the warehouse) [default: the listen address's host, any free port].
    #[arg(long, env = "LANCE_GATEWAY_PEER_LISTEN")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer_listen: Option<String>,
    /// The URL other gateways reach --peer-listen at, such as http://10.0.0.7:8182 [default: http://<listen host, or the host name>:<peer port>].
    #[arg(long, env = "LANCE_GATEWAY_PEER_URL")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer_url: Option<String>,
    /// Log format: text or json [default: text].
    #[arg(long, env = "LANCE_GATEWAY_LOG_FORMAT", value_enum)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_format: Option<LogFormat>,
}

#[derive(Args, Debug, Default, Clone)]
pub struct ServeArgs {
    /// TOML file with any of the settings below (flags and environment win over it).
    #[arg(long, env = "LANCE_GATEWAY_CONFIG")]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub settings: Settings,
}

/// A setting that failed validation.
#[derive(Debug, thiserror::Error)]
#[error("invalid setting `{setting}`: {message}")]
pub struct ConfigError {
    pub setting: &'static str,
    pub message: String,
}

fn bad(setting: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError {
        setting,
        message: message.into(),
    }
}

/// Where the warehouse is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WarehouseUri {
    Local(PathBuf),
    S3Bucket {
        bucket: String,
        prefix: String,
    },
    S3Endpoint,
    /// `gs://bucket/prefix`.
    Gcs {
        bucket: String,
        prefix: String,
    },
    /// `az://container/prefix`.
    Azure {
        container: String,
        prefix: String,
    },
}

#[derive(Clone, Debug)]
pub struct GcsSettings {
    pub endpoint: Option<String>,
    pub service_account_key: Option<PathBuf>,
    pub anonymous: bool,
}

#[derive(Clone, Debug)]
pub struct AzureSettings {
    pub account: Option<String>,
    pub access_key: Option<Secret>,
    pub endpoint: Option<String>,
    pub sas_scope: crate::vend::sas::Scope,
    pub sas_duration: Duration,
}

#[derive(Clone, Debug)]
pub struct S3Settings {
    pub endpoint: Option<String>,
    pub region: Option<String>,
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<Secret>,
    pub path_style: bool,
}

#[derive(Clone, Debug)]
pub struct OidcSettings {
    pub issuer: String,
    pub audience: String,
    pub jwks_url: Option<String>,
    pub principal_claim: String,
    pub groups_claim: String,
}

#[derive(Clone, Debug)]
pub struct AuthSettings {
    pub api_keys: Option<PathBuf>,
    pub oidc: Option<OidcSettings>,
    pub allow_anonymous: bool,
}

impl AuthSettings {
    /// Whether any scheme authenticates callers (API keys, tokens, client certificates).
    pub fn enabled(&self, tls: Option<&TlsSettings>) -> bool {
        self.api_keys.is_some() || self.oidc.is_some() || tls.is_some_and(|t| t.client_ca.is_some())
    }
}

#[derive(Clone, Debug)]
pub struct TlsSettings {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: Option<PathBuf>,
    pub client_cert_optional: bool,
}

#[derive(Clone, Debug)]
pub struct StsSettings {
    pub endpoint: Option<String>,
    pub role_arn: String,
    pub duration: Duration,
}

#[derive(Clone, Debug)]
pub struct ConnectionLimits {
    pub header_timeout: Duration,
    pub max_connections: usize,
}

#[derive(Clone, Debug)]
pub struct Config {
    pub listen: SocketAddr,
    pub metrics_listen: Option<SocketAddr>,
    pub warehouse: WarehouseUri,
    pub s3: S3Settings,
    pub gcs: GcsSettings,
    pub azure: AzureSettings,
    pub client_endpoint: Option<String>,
    pub credentials: CredentialPolicy,
    pub client_access_key_id: Option<String>,
    pub client_secret_access_key: Option<Secret>,
    pub sts: Option<StsSettings>,
    pub auth: AuthSettings,
    pub grants: Option<PathBuf>,
    pub tls: Option<TlsSettings>,
    pub audit_log: Option<String>,
    pub max_body_bytes: usize,
    pub data_limits: crate::data::DataLimits,
    pub data_threads: usize,
    pub request_timeout: Duration,
    pub limits: ConnectionLimits,
    pub recovery_grace: Duration,
    pub recovery_interval: Duration,
    pub fs_sync: bool,
    pub managed_versioning: bool,
    pub console: bool,
    pub maintenance: crate::maintain::Settings,
    pub maintenance_policy: crate::catalog::policy::Policy,
    pub node_id: String,
    pub log_format: LogFormat,
    /// The read cache, when on.
    pub read_cache: Option<ReadCacheSettings>,
    /// The Ray cluster heavy maintenance runs on, when one is configured.
    pub ray: Option<crate::ray::RaySettings>,
}

#[derive(Clone, Debug)]
pub struct ReadCacheSettings {
    pub lease: Duration,
    pub budget_bytes: usize,
    pub peer_listen: SocketAddr,
    pub peer_url: Option<String>,
}

/// The file's settings overridden by those of the flags and environment: both as TOML
/// tables, the second's keys replacing the first's.
fn merged(file: Settings, over: Settings) -> Result<Settings, ConfigError> {
    let table = |s: &Settings| match toml::Value::try_from(s) {
        Ok(toml::Value::Table(t)) => Ok(t),
        _ => Err(bad("config", "the settings could not be merged")),
    };
    let mut base = table(&file)?;
    base.extend(table(&over)?);
    toml::Value::Table(base)
        .try_into()
        .map_err(|e| bad("config", format!("the settings could not be merged: {e}")))
}

fn positive(setting: &'static str, value: Option<u64>, default: u64) -> Result<u64, ConfigError> {
    match value.unwrap_or(default) {
        0 => Err(bad(setting, "must be at least 1")),
        v => Ok(v),
    }
}

/// The default maintenance policy from `KEY=VALUE` pairs named as the `maintenance.*`
/// properties are (with or without that prefix).
fn maintenance_policy(
    pairs: Option<&[String]>,
) -> Result<crate::catalog::policy::Policy, ConfigError> {
    use crate::catalog::policy::{PREFIX, Policy};
    let mut properties = std::collections::HashMap::new();
    for pair in pairs.unwrap_or_default() {
        let pair = pair.trim();
        if pair.is_empty() {
            continue;
        }
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| bad("maintenance-policy", format!("'{pair}' is not KEY=VALUE")))?;
        let key = key.trim();
        let key = if key.starts_with(PREFIX) {
            key.to_string()
        } else {
            format!("{PREFIX}{key}")
        };
        properties.insert(key, value.trim().to_string());
    }
    Policy::default()
        .resolve([&properties])
        .map_err(|e| bad("maintenance-policy", e.message))
}

impl Config {
    /// Merges file, environment and flags (clap has already folded environment into
    /// `args`) and validates the result.
    pub fn load(args: ServeArgs) -> Result<Config, ConfigError> {
        let file: Settings = match &args.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| bad("config", format!("cannot read {}: {e}", path.display())))?;
                toml::from_str(&text)
                    .map_err(|e| bad("config", format!("{}: {}", path.display(), e.message())))?
            }
            None => Settings::default(),
        };
        Self::validate(merged(file, args.settings)?)
    }

    fn validate(s: Settings) -> Result<Config, ConfigError> {
        let listen_text = s.listen.unwrap_or_else(|| "127.0.0.1:2333".into());
        let listen = listen_text.parse::<SocketAddr>().map_err(|_| {
            bad(
                "listen",
                format!("'{listen_text}' is not an address like 127.0.0.1:2333"),
            )
        })?;
        let metrics_listen = match s.metrics_listen.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(text) => Some(text.parse::<SocketAddr>().map_err(|_| {
                bad(
                    "metrics-listen",
                    format!("'{text}' is not an address like 127.0.0.1:9090"),
                )
            })?),
        };
        let warehouse = parse_warehouse(&s.warehouse.unwrap_or_else(|| "./warehouse".into()))?;
        if let Some(e) = &s.s3_endpoint {
            check_url("s3-endpoint", e)?;
        }
        if let Some(e) = &s.client_endpoint {
            check_url("client-endpoint", e)?;
        }
        let s3 = S3Settings {
            endpoint: s.s3_endpoint,
            region: s.s3_region,
            access_key_id: s.s3_access_key_id,
            secret_access_key: s.s3_secret_access_key,
            path_style: !s.s3_virtual_hosted.unwrap_or(false),
        };
        if s3.access_key_id.is_some() != s3.secret_access_key.is_some() {
            return Err(bad(
                "s3-access-key-id",
                "give both the access key id and the secret access key, or neither",
            ));
        }
        if let Some(e) = &s.gcs_endpoint {
            check_url("gcs-endpoint", e)?;
        }
        if let Some(e) = &s.azure_endpoint {
            check_url("azure-endpoint", e)?;
        }
        let gcs = GcsSettings {
            endpoint: s.gcs_endpoint,
            service_account_key: s.gcs_service_account_key,
            anonymous: s.gcs_anonymous.unwrap_or(false),
        };
        let sas_secs = s.sas_duration_secs.unwrap_or(3600);
        if !(60..=7 * 24 * 3600).contains(&sas_secs) {
            return Err(bad(
                "sas-duration-secs",
                "must be between 60 and 604800 (seven days, what Azure accepts for a SAS)",
            ));
        }
        let azure = AzureSettings {
            account: s
                .azure_account
                .or_else(|| std::env::var("AZURE_STORAGE_ACCOUNT_NAME").ok())
                .filter(|a| !a.trim().is_empty()),
            access_key: s.azure_access_key.or_else(|| {
                std::env::var("AZURE_STORAGE_ACCOUNT_KEY")
                    .ok()
                    .filter(|k| !k.is_empty())
                    .map(Secret)
            }),
            endpoint: s.azure_endpoint,
            sas_scope: match s.azure_sas_scope.as_deref().map(str::trim) {
                None | Some("directory") => crate::vend::sas::Scope::Directory,
                Some("container") => crate::vend::sas::Scope::Container,
                Some(other) => {
                    return Err(bad(
                        "azure-sas-scope",
                        format!("'{other}' is not directory or container"),
                    ));
                }
            },
            sas_duration: Duration::from_secs(sas_secs),
        };
        let credentials = s.credentials.unwrap_or(CredentialPolicy::None);
        check_cloud_settings(&warehouse, credentials, &azure)?;
        if credentials == CredentialPolicy::Static
            && (s.client_access_key_id.is_none() || s.client_secret_access_key.is_none())
        {
            return Err(bad(
                "credentials",
                "the static policy needs client-access-key-id and client-secret-access-key",
            ));
        }
        let sts = match credentials {
            CredentialPolicy::Sts => {
                if matches!(warehouse, WarehouseUri::Local(_)) {
                    return Err(bad("credentials", "the sts policy needs an S3 warehouse"));
                }
                let role_arn = s
                    .sts_role_arn
                    .filter(|r| !r.trim().is_empty())
                    .ok_or_else(|| bad("sts-role-arn", "the sts policy needs a role to assume"))?;
                if let Some(e) = &s.sts_endpoint {
                    check_url("sts-endpoint", e)?;
                }
                let secs = s.sts_duration_secs.unwrap_or(3600);
                if !(900..=43200).contains(&secs) {
                    return Err(bad(
                        "sts-duration-secs",
                        "must be between 900 and 43200 (what STS accepts)",
                    ));
                }
                Some(StsSettings {
                    endpoint: s.sts_endpoint,
                    role_arn,
                    duration: Duration::from_secs(secs),
                })
            }
            _ => None,
        };
        let oidc = match (s.oidc_issuer, s.oidc_audience) {
            (None, None) => None,
            (Some(issuer), Some(audience)) => {
                check_url("oidc-issuer", &issuer)?;
                if let Some(u) = &s.oidc_jwks_url {
                    check_url("oidc-jwks-url", u)?;
                }
                Some(OidcSettings {
                    issuer,
                    audience,
                    jwks_url: s.oidc_jwks_url,
                    principal_claim: s.oidc_principal_claim.unwrap_or_else(|| "sub".into()),
                    groups_claim: s.oidc_groups_claim.unwrap_or_else(|| "groups".into()),
                })
            }
            (Some(_), None) => {
                return Err(bad(
                    "oidc-audience",
                    "an OIDC issuer needs the audience its tokens must name",
                ));
            }
            (None, Some(_)) => return Err(bad("oidc-issuer", "an audience needs its issuer")),
        };
        let tls = match (s.tls_cert, s.tls_key) {
            (None, None) => {
                if s.tls_client_ca.is_some() {
                    return Err(bad(
                        "tls-client-ca",
                        "client certificates need TLS: set tls-cert and tls-key",
                    ));
                }
                None
            }
            (Some(cert), Some(key)) => Some(TlsSettings {
                cert,
                key,
                client_ca: s.tls_client_ca,
                client_cert_optional: s.tls_client_cert_optional.unwrap_or(false),
            }),
            _ => {
                return Err(bad(
                    "tls-cert",
                    "give both tls-cert and tls-key, or neither",
                ));
            }
        };
        let auth = AuthSettings {
            api_keys: s.api_keys,
            oidc,
            allow_anonymous: s.allow_anonymous.unwrap_or(false),
        };
        // A gateway that hands out keys to anyone who can reach it must be a choice.
        let vends_keys = credentials != CredentialPolicy::None;
        if vends_keys
            && !listen.ip().is_loopback()
            && !auth.enabled(tls.as_ref())
            && !auth.allow_anonymous
        {
            return Err(bad(
                "allow-anonymous",
                format!(
                    "listening on {listen}, a non-loopback address, while vending {credentials:?} credentials and authenticating no one: configure api-keys, oidc-issuer or tls-client-ca, or set allow-anonymous=true to serve anyone on purpose"
                ),
            ));
        }
        if s.grants.is_some() && !auth.enabled(tls.as_ref()) && !auth.allow_anonymous {
            return Err(bad(
                "grants",
                "grants need callers to authenticate: configure api-keys, oidc-issuer or tls-client-ca (or allow-anonymous=true to grant to `anonymous`)",
            ));
        }
        let max_body_bytes = s.max_body_bytes.unwrap_or(16 * 1024 * 1024);
        if max_body_bytes < 1024 {
            return Err(bad("max-body-bytes", "must be at least 1024"));
        }
        let defaults = crate::data::DataLimits::default();
        let at_least_one = |name: &'static str, value: Option<usize>, default: usize| match value {
            Some(0) => Err(bad(name, "must be at least 1")),
            Some(v) => Ok(v),
            None => Ok(default),
        };
        let data_limits = crate::data::DataLimits {
            max_arrow_body_bytes: at_least_one(
                "max-arrow-body-bytes",
                s.max_arrow_body_bytes,
                defaults.max_arrow_body_bytes,
            )?,
            max_query_rows: at_least_one(
                "max-query-rows",
                s.max_query_rows,
                defaults.max_query_rows,
            )?,
            max_query_bytes: at_least_one(
                "max-query-bytes",
                s.max_query_bytes,
                defaults.max_query_bytes,
            )?,
            build_wait: defaults.build_wait,
        };
        let data_threads = at_least_one(
            "data-threads",
            s.data_threads,
            std::thread::available_parallelism().map_or(2, |n| n.get()),
        )?;
        let timeout = positive("request-timeout-secs", s.request_timeout_secs, 30)?;
        let data_limits = crate::data::DataLimits {
            build_wait: Duration::from_millis(timeout.saturating_mul(750)),
            ..data_limits
        };
        let grace = s.recovery_grace_secs.unwrap_or(120);
        if grace < 2 {
            return Err(bad("recovery-grace-secs", "must be at least 2"));
        }
        let interval = positive("recovery-interval-secs", s.recovery_interval_secs, 60)?;
        let limits = ConnectionLimits {
            header_timeout: Duration::from_secs(positive(
                "header-timeout-secs",
                s.header_timeout_secs,
                10,
            )?),
            max_connections: match s.max_connections.unwrap_or(1024) {
                0 => return Err(bad("max-connections", "must be at least 1")),
                n => n,
            },
        };
        let mut maintenance_policy = maintenance_policy(s.maintenance_policy.as_deref())?;
        if let Some(retention) = &s.drop_retention {
            maintenance_policy.drop_retention = crate::catalog::policy::duration(retention)
                .map_err(|e| bad("drop-retention", e))?;
        }
        let maintenance = crate::maintain::Settings {
            enabled: s.maintenance.unwrap_or(true),
            concurrency: at_least_one("maintenance-concurrency", s.maintenance_concurrency, 1)?,
            delay: Duration::from_secs(s.maintenance_delay_secs.unwrap_or(30)),
            sweep_interval: Duration::from_secs(positive(
                "maintenance-sweep-secs",
                s.maintenance_sweep_secs,
                3600,
            )?),
            // The cluster's client is made when the gateway starts (`server`).
            ray: None,
        };
        let ray = match s.ray_address.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(address) => {
                check_url("ray-address", address)?;
                let gateway_uri = match s.ray_gateway_uri.as_deref().map(str::trim) {
                    None | Some("") => {
                        let scheme = if tls.is_some() { "https" } else { "http" };
                        let host = if listen.ip().is_unspecified() {
                            host_name()
                        } else {
                            listen.ip().to_string()
                        };
                        format!("{scheme}://{host}:{}", listen.port())
                    }
                    Some(uri) => {
                        check_url("ray-gateway-uri", uri)?;
                        uri.trim_end_matches('/').to_string()
                    }
                };
                Some(crate::ray::RaySettings {
                    address: address.trim_end_matches('/').to_string(),
                    gateway_uri,
                    api_key: s.ray_api_key.filter(|k| !k.expose().trim().is_empty()),
                    token: s.ray_token.filter(|k| !k.expose().trim().is_empty()),
                    poll: Duration::from_secs(1),
                })
            }
        };
        let node_id = match s.node_id {
            Some(id)
                if id.trim().is_empty() || id.len() > 200 || id.chars().any(char::is_control) =>
            {
                return Err(bad("node-id", "must be 1 to 200 printable characters"));
            }
            Some(id) => id,
            None => format!("{}:{}", host_name(), listen.port()),
        };
        let read_cache = match s.read_cache.unwrap_or(false) {
            false => None,
            true => {
                let lease = positive("read-cache-lease-secs", s.read_cache_lease_secs, 8)?;
                if lease < 2 {
                    return Err(bad("read-cache-lease-secs", "must be at least 2"));
                }
                let peer_listen = match s.peer_listen.as_deref().map(str::trim) {
                    None | Some("") => SocketAddr::new(listen.ip(), 0),
                    Some(text) => text.parse::<SocketAddr>().map_err(|_| {
                        bad(
                            "peer-listen",
                            format!("'{text}' is not an address like 10.0.0.7:8182"),
                        )
                    })?,
                };
                let peer_url = match s.peer_url.as_deref().map(str::trim) {
                    None | Some("") => None,
                    Some(url) => {
                        check_url("peer-url", url)?;
                        Some(url.trim_end_matches('/').to_string())
                    }
                };
                Some(ReadCacheSettings {
                    lease: Duration::from_secs(lease),
                    budget_bytes: at_least_one("read-cache-mib", s.read_cache_mib, 16)? << 20,
                    peer_listen,
                    peer_url,
                })
            }
        };
        Ok(Config {
            listen,
            metrics_listen,
            warehouse,
            s3,
            gcs,
            azure,
            client_endpoint: s.client_endpoint,
            credentials,
            client_access_key_id: s.client_access_key_id,
            client_secret_access_key: s.client_secret_access_key,
            sts,
            auth,
            grants: s.grants,
            tls,
            audit_log: s.audit_log.filter(|a| !a.trim().is_empty()),
            max_body_bytes,
            data_limits,
            data_threads,
            request_timeout: Duration::from_secs(timeout),
            limits,
            recovery_grace: Duration::from_secs(grace),
            recovery_interval: Duration::from_secs(interval),
            fs_sync: s.fs_sync.unwrap_or(true),
            managed_versioning: s.managed_versioning.unwrap_or(false),
            maintenance,
            console: s.console.unwrap_or(true),
            maintenance_policy,
            node_id,
            log_format: s.log_format.unwrap_or(LogFormat::Text),
            read_cache,
            ray,
        })
    }
}

/// The machine's host name (a pod's name under Kubernetes), for the default node id.
pub(crate) fn host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

fn check_url(setting: &'static str, url: &str) -> Result<(), ConfigError> {
    match url::Url::parse(url) {
        Ok(u) if (u.scheme() == "http" || u.scheme() == "https") && u.host().is_some() => Ok(()),
        _ => Err(bad(setting, format!("'{url}' is not an http(s) URL"))),
    }
}

/// What each cloud's warehouse needs besides its URI, and which vending policies it has.
fn check_cloud_settings(
    warehouse: &WarehouseUri,
    credentials: CredentialPolicy,
    azure: &AzureSettings,
) -> Result<(), ConfigError> {
    let refuse = |cloud: &str, has: &str| {
        Err(bad(
            "credentials",
            format!("a {cloud} warehouse vends {has}; `{credentials:?}` is for another store")
                .replace("`Sts`", "`sts`")
                .replace("`Sas`", "`sas`")
                .replace("`Static`", "`static`"),
        ))
    };
    match warehouse {
        WarehouseUri::Gcs { .. } => match credentials {
            CredentialPolicy::None | CredentialPolicy::Gateway => Ok(()),
            _ => refuse("GCS", "none or gateway (its own access token)"),
        },
        WarehouseUri::Azure { .. } => {
            if azure.account.is_none() {
                return Err(bad(
                    "azure-account",
                    "an Azure warehouse needs its storage account (azure-account or AZURE_STORAGE_ACCOUNT_NAME)",
                ));
            }
            match credentials {
                CredentialPolicy::None => Ok(()),
                CredentialPolicy::Gateway | CredentialPolicy::Sas if azure.access_key.is_none() => {
                    Err(bad(
                        "azure-access-key",
                        "vending gateway keys or SAS tokens needs the account key (azure-access-key or AZURE_STORAGE_ACCOUNT_KEY)",
                    ))
                }
                CredentialPolicy::Gateway | CredentialPolicy::Sas => Ok(()),
                _ => refuse("Azure", "none, gateway (the account key) or sas"),
            }
        }
        _ if credentials == CredentialPolicy::Sas => Err(bad(
            "credentials",
            "the sas policy is for Azure warehouses (S3 has sts)",
        )),
        _ => Ok(()),
    }
}

/// A bucket or container name and a key prefix (empty, or ending in `/`) from the rest of a
/// cloud URI.
fn bucket_and_prefix(text: &str, rest: &str) -> Result<(String, String), ConfigError> {
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    let prefix = prefix.trim_matches('/');
    if prefix.split('/').any(|s| s == "." || s == "..") || prefix.contains("//") {
        return Err(bad(
            "warehouse",
            format!("'{text}' has an empty, '.' or '..' segment"),
        ));
    }
    let prefix = if prefix.is_empty() {
        String::new()
    } else {
        format!("{prefix}/")
    };
    Ok((bucket.to_string(), prefix))
}

/// Parses a warehouse URI: a path, `file:///dir`, `s3://bucket[/prefix]`, `s3://`,
/// `gs://bucket[/prefix]` or `az://container[/prefix]`.
pub fn parse_warehouse(text: &str) -> Result<WarehouseUri, ConfigError> {
    if let Some(rest) = text.strip_prefix("gs://") {
        let (bucket, prefix) = bucket_and_prefix(text, rest)?;
        let ok = (3..=63).contains(&bucket.len())
            && bucket.bytes().all(|b| {
                b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'_' | b'.')
            })
            && bucket.as_bytes()[0].is_ascii_alphanumeric()
            && bucket.as_bytes()[bucket.len() - 1].is_ascii_alphanumeric();
        if !ok {
            return Err(bad(
                "warehouse",
                format!(
                    "'{text}': a GCS bucket name is 3-63 lowercase letters, digits, '-', '_' and '.', starting and ending with a letter or digit"
                ),
            ));
        }
        return Ok(WarehouseUri::Gcs { bucket, prefix });
    }
    if let Some(rest) = text.strip_prefix("az://") {
        let (container, prefix) = bucket_and_prefix(text, rest)?;
        let ok = (3..=63).contains(&container.len())
            && container
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && container.as_bytes()[0].is_ascii_alphanumeric()
            && container.as_bytes()[container.len() - 1].is_ascii_alphanumeric()
            && !container.contains("--");
        if !ok {
            return Err(bad(
                "warehouse",
                format!(
                    "'{text}': an Azure container name is 3-63 lowercase letters, digits and single hyphens, starting and ending with a letter or digit"
                ),
            ));
        }
        return Ok(WarehouseUri::Azure { container, prefix });
    }
    for other in ["abfss://", "abfs://", "wasbs://", "gcs://", "azure://"] {
        if text.starts_with(other) {
            return Err(bad(
                "warehouse",
                format!(
                    "'{text}': name an Azure warehouse az://container/prefix and a GCS one gs://bucket/prefix (the account goes in azure-account)"
                ),
            ));
        }
    }
    if let Some(rest) = text.strip_prefix("s3://") {
        if rest.is_empty() || rest == "/" {
            return Ok(WarehouseUri::S3Endpoint);
        }
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        crate::catalog::layout::validate_bucket(bucket).map_err(|e| bad("warehouse", e.message))?;
        let prefix = prefix.trim_matches('/');
        if prefix.split('/').any(|s| s == "." || s == "..") || prefix.contains("//") {
            return Err(bad(
                "warehouse",
                format!("'{text}' has an empty, '.' or '..' segment"),
            ));
        }
        let prefix = if prefix.is_empty() {
            String::new()
        } else {
            format!("{prefix}/")
        };
        return Ok(WarehouseUri::S3Bucket {
            bucket: bucket.to_string(),
            prefix,
        });
    }
    if let Some(path) = text.strip_prefix("file://") {
        if !path.starts_with('/') {
            return Err(bad(
                "warehouse",
                format!("'{text}': a file URI needs an absolute path (file:///dir)"),
            ));
        }
        return Ok(WarehouseUri::Local(PathBuf::from(path)));
    }
    if text.contains("://") {
        return Err(bad(
            "warehouse",
            format!(
                "'{text}': use a directory, file:///dir, s3://bucket/prefix, s3://, gs://bucket/prefix or az://container/prefix"
            ),
        ));
    }
    if text.is_empty() {
        return Err(bad("warehouse", "must not be empty"));
    }
    Ok(WarehouseUri::Local(PathBuf::from(text)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(settings: Settings) -> Result<Config, ConfigError> {
        Config::load(ServeArgs {
            config: None,
            settings,
        })
    }

    #[test]
    fn the_version_names_the_formats_this_build_reads_and_writes() {
        use crate::catalog::records::{BASE_WAREHOUSE_FORMAT, READS_UP_TO, WRITES_UP_TO};
        assert!(
            VERSION.contains(&format!("reads 1-{READS_UP_TO}")),
            "{VERSION}"
        );
        assert!(
            VERSION.contains(&format!("writes {BASE_WAREHOUSE_FORMAT}-{WRITES_UP_TO}")),
            "{VERSION}"
        );
    }

    #[test]
    fn warehouse_forms() {
        assert_eq!(parse_warehouse("s3://").unwrap(), WarehouseUri::S3Endpoint);
        assert_eq!(
            parse_warehouse("s3://bkt/a/b/").unwrap(),
            WarehouseUri::S3Bucket {
                bucket: "bkt".into(),
                prefix: "a/b/".into()
            }
        );
        assert_eq!(
            parse_warehouse("s3://bkt").unwrap(),
            WarehouseUri::S3Bucket {
                bucket: "bkt".into(),
                prefix: "".into()
            }
        );
        assert_eq!(
            parse_warehouse("file:///tmp/w").unwrap(),
            WarehouseUri::Local("/tmp/w".into())
        );
        assert_eq!(
            parse_warehouse("./w").unwrap(),
            WarehouseUri::Local("./w".into())
        );
        assert_eq!(
            parse_warehouse("gs://my_bucket.x/lake/").unwrap(),
            WarehouseUri::Gcs {
                bucket: "my_bucket.x".into(),
                prefix: "lake/".into()
            }
        );
        assert_eq!(
            parse_warehouse("az://wh-1").unwrap(),
            WarehouseUri::Azure {
                container: "wh-1".into(),
                prefix: "".into()
            }
        );
        for bad in [
            "gs://b",
            "gs://Bucket",
            "az://under_score",
            "az://a--b",
            "az://wh/../x",
            "abfss://wh@acct.dfs.core.windows.net/x",
            "hdfs://x",
            "s3://B",
            "s3://bkt/../x",
            "file://rel",
            "",
        ] {
            let err = parse_warehouse(bad).unwrap_err();
            assert_eq!(err.setting, "warehouse", "{bad}");
        }
    }

    #[test]
    fn each_cloud_takes_its_own_settings_and_policies() {
        let with = |warehouse: &str, credentials: CredentialPolicy, account: bool, key: bool| {
            load(Settings {
                warehouse: Some(warehouse.into()),
                credentials: Some(credentials),
                azure_account: account.then(|| "acct".to_string()),
                azure_access_key: key.then(|| Secret("a2V5".into())),
                client_access_key_id: Some("id".into()),
                client_secret_access_key: Some(Secret("s".into())),
                ..Default::default()
            })
        };
        assert!(with("gs://bkt", CredentialPolicy::Gateway, false, false).is_ok());
        for refused in [
            CredentialPolicy::Static,
            CredentialPolicy::Sts,
            CredentialPolicy::Sas,
        ] {
            assert_eq!(
                with("gs://bkt", refused, false, false).unwrap_err().setting,
                "credentials"
            );
        }
        if let Err(e) = with("az://lake", CredentialPolicy::Sas, true, true) {
            panic!("{}: {}", e.setting, e.message);
        }
        assert_eq!(
            with("az://lake", CredentialPolicy::None, false, false)
                .unwrap_err()
                .setting,
            "azure-account"
        );
        assert_eq!(
            with("az://lake", CredentialPolicy::Sas, true, false)
                .unwrap_err()
                .setting,
            "azure-access-key"
        );
        assert_eq!(
            with("az://lake", CredentialPolicy::Sts, true, true)
                .unwrap_err()
                .setting,
            "credentials"
        );
        assert_eq!(
            with("s3://bkt", CredentialPolicy::Sas, false, false)
                .unwrap_err()
                .setting,
            "credentials"
        );
        let scope = load(Settings {
            warehouse: Some("az://lake".into()),
            azure_account: Some("acct".into()),
            azure_sas_scope: Some("account".into()),
            ..Default::default()
        });
        assert_eq!(scope.unwrap_err().setting, "azure-sas-scope");
    }

    #[test]
    fn bad_values_name_their_setting() {
        let cases: Vec<(Settings, &str)> = vec![
            (
                Settings {
                    listen: Some("nope".into()),
                    ..Default::default()
                },
                "listen",
            ),
            (
                Settings {
                    credentials: Some(CredentialPolicy::Static),
                    ..Default::default()
                },
                "credentials",
            ),
            (
                Settings {
                    s3_endpoint: Some("localhost:9000".into()),
                    ..Default::default()
                },
                "s3-endpoint",
            ),
            (
                Settings {
                    warehouse: Some("s3://bkt".into()),
                    credentials: Some(CredentialPolicy::Sts),
                    ..Default::default()
                },
                "sts-role-arn",
            ),
            (
                Settings {
                    oidc_issuer: Some("https://idp.example".into()),
                    ..Default::default()
                },
                "oidc-audience",
            ),
            (
                Settings {
                    tls_cert: Some("c.pem".into()),
                    ..Default::default()
                },
                "tls-cert",
            ),
            (
                Settings {
                    grants: Some("g.toml".into()),
                    ..Default::default()
                },
                "grants",
            ),
        ];
        for (settings, setting) in cases {
            assert_eq!(load(settings).unwrap_err().setting, setting);
        }
    }

    #[test]
    fn vending_keys_to_anyone_on_a_public_address_must_be_deliberate() {
        let open = Settings {
            listen: Some("0.0.0.0:2333".into()),
            warehouse: Some("s3://bkt".into()),
            credentials: Some(CredentialPolicy::Gateway),
            ..Default::default()
        };
        let err = load(open.clone()).unwrap_err();
        assert_eq!(err.setting, "allow-anonymous");
        assert!(err.message.contains("api-keys"), "{}", err.message);
        assert!(
            load(Settings {
                allow_anonymous: Some(true),
                ..open.clone()
            })
            .is_ok()
        );
        assert!(
            load(Settings {
                api_keys: Some("keys".into()),
                ..open.clone()
            })
            .is_ok()
        );
        assert!(
            load(Settings {
                listen: Some("127.0.0.1:2333".into()),
                ..open
            })
            .is_ok()
        );
    }

    #[test]
    fn flags_win_over_the_file_and_secrets_do_not_print() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gw.toml");
        std::fs::write(
            &path,
            "listen = \"127.0.0.1:9999\"\nwarehouse = \"s3://filebkt\"\ns3_access_key_id = \"AK\"\ns3_secret_access_key = \"topsecret\"\n",
        )
        .unwrap();
        let cfg = Config::load(ServeArgs {
            config: Some(path.clone()),
            settings: Settings {
                listen: Some("127.0.0.1:1".into()),
                ..Default::default()
            },
        })
        .unwrap();
        assert_eq!(cfg.listen.port(), 1);
        assert_eq!(
            cfg.warehouse,
            WarehouseUri::S3Bucket {
                bucket: "filebkt".into(),
                prefix: String::new()
            }
        );
        assert_eq!(
            cfg.s3.secret_access_key.as_ref().map(Secret::expose),
            Some("topsecret")
        );
        assert!(!format!("{cfg:?}").contains("topsecret"));
        std::fs::write(&path, "listn = \"x\"\n").unwrap();
        assert_eq!(
            Config::load(ServeArgs {
                config: Some(path),
                settings: Settings::default(),
            })
            .unwrap_err()
            .setting,
            "config"
        );
    }
}
