//! One `Config`: defaults, then an optional TOML file, then environment variables, then
//! flags (each later source wins). `Config::validate` checks everything before the port is
//! bound; a bad value names its setting.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use serde::Deserialize;

#[derive(Parser, Debug)]
#[command(
    name = "lance-gateway",
    version,
    about = "A Lance Namespace REST catalog over S3-compatible stores or a local warehouse"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Serve the Lance Namespace REST API.
    Serve(ServeArgs),
}

/// Who gets which credentials beside a table's location.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CredentialPolicy {
    /// Vend no keys: clients bring their own (endpoint, region and addressing are still vended).
    None,
    /// Vend the keys configured for clients (`client-access-key-id`, `client-secret-access-key`).
    Static,
    /// Vend the gateway's own keys. Only for trusted clients.
    Gateway,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Args, Debug, Default)]
pub struct ServeArgs {
    /// TOML file with any of the settings below (flags and environment win over it).
    #[arg(long, env = "LANCE_GATEWAY_CONFIG")]
    pub config: Option<PathBuf>,
    /// Address to listen on [default: 127.0.0.1:2333].
    #[arg(long, env = "LANCE_GATEWAY_LISTEN")]
    pub listen: Option<String>,
    /// Where catalog and tables live: a directory, file:///dir, s3://bucket/prefix, or s3:// (endpoint mode) [default: ./warehouse].
    #[arg(long, env = "LANCE_GATEWAY_WAREHOUSE")]
    pub warehouse: Option<String>,
    /// S3 endpoint URL (else AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, else AWS).
    #[arg(long, env = "LANCE_GATEWAY_S3_ENDPOINT")]
    pub s3_endpoint: Option<String>,
    /// S3 region (else AWS_REGION / the profile, else us-east-1).
    #[arg(long, env = "LANCE_GATEWAY_S3_REGION")]
    pub s3_region: Option<String>,
    /// Access key id for the gateway's own S3 access (else the AWS credential chain).
    #[arg(long, env = "LANCE_GATEWAY_S3_ACCESS_KEY_ID")]
    pub s3_access_key_id: Option<String>,
    /// Secret key for the gateway's own S3 access.
    #[arg(
        long,
        env = "LANCE_GATEWAY_S3_SECRET_ACCESS_KEY",
        hide_env_values = true
    )]
    pub s3_secret_access_key: Option<String>,
    /// Use virtual-hosted-style bucket addressing instead of path style.
    #[arg(long, env = "LANCE_GATEWAY_S3_VIRTUAL_HOSTED")]
    pub s3_virtual_hosted: Option<bool>,
    /// The S3 endpoint vended to clients, when they reach the store by another address than the gateway does.
    #[arg(long, env = "LANCE_GATEWAY_CLIENT_ENDPOINT")]
    pub client_endpoint: Option<String>,
    /// Which credentials to vend beside locations: none, static or gateway [default: none].
    #[arg(long, env = "LANCE_GATEWAY_CREDENTIALS", value_enum)]
    pub credentials: Option<CredentialPolicy>,
    /// Access key id vended to clients under the static policy.
    #[arg(long, env = "LANCE_GATEWAY_CLIENT_ACCESS_KEY_ID")]
    pub client_access_key_id: Option<String>,
    /// Secret key vended to clients under the static policy.
    #[arg(
        long,
        env = "LANCE_GATEWAY_CLIENT_SECRET_ACCESS_KEY",
        hide_env_values = true
    )]
    pub client_secret_access_key: Option<String>,
    /// Largest request body accepted, in bytes [default: 16777216].
    #[arg(long, env = "LANCE_GATEWAY_MAX_BODY_BYTES")]
    pub max_body_bytes: Option<usize>,
    /// Longest a request may take, in seconds [default: 30].
    #[arg(long, env = "LANCE_GATEWAY_REQUEST_TIMEOUT_SECS")]
    pub request_timeout_secs: Option<u64>,
    /// Age in seconds after which an unfinished catalog operation is settled by others [default: 120].
    #[arg(long, env = "LANCE_GATEWAY_RECOVERY_GRACE_SECS")]
    pub recovery_grace_secs: Option<u64>,
    /// Seconds between sweeps for abandoned operations [default: 60].
    #[arg(long, env = "LANCE_GATEWAY_RECOVERY_INTERVAL_SECS")]
    pub recovery_interval_secs: Option<u64>,
    /// Local warehouse: sync each catalog write to disk before publishing it [default: true].
    #[arg(long, env = "LANCE_GATEWAY_FS_SYNC")]
    pub fs_sync: Option<bool>,
    /// This gateway's name among those sharing the warehouse; a gateway restarted under the same name settles its unfinished operations at once [default: <host name>:<port>].
    #[arg(long, env = "LANCE_GATEWAY_NODE_ID")]
    pub node_id: Option<String>,
    /// Log format: text or json [default: text].
    #[arg(long, env = "LANCE_GATEWAY_LOG_FORMAT", value_enum)]
    pub log_format: Option<LogFormat>,
}

/// The optional TOML file: the same settings, snake_case.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    listen: Option<String>,
    warehouse: Option<String>,
    s3_endpoint: Option<String>,
    s3_region: Option<String>,
    s3_access_key_id: Option<String>,
    s3_secret_access_key: Option<String>,
    s3_virtual_hosted: Option<bool>,
    client_endpoint: Option<String>,
    credentials: Option<CredentialPolicy>,
    client_access_key_id: Option<String>,
    client_secret_access_key: Option<String>,
    max_body_bytes: Option<usize>,
    request_timeout_secs: Option<u64>,
    recovery_grace_secs: Option<u64>,
    recovery_interval_secs: Option<u64>,
    fs_sync: Option<bool>,
    node_id: Option<String>,
    log_format: Option<LogFormat>,
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
    S3Bucket { bucket: String, prefix: String },
    S3Endpoint,
}

#[derive(Clone, Debug)]
pub struct S3Settings {
    pub endpoint: Option<String>,
    pub region: Option<String>,
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
    pub path_style: bool,
}

#[derive(Clone, Debug)]
pub struct Config {
    pub listen: SocketAddr,
    pub warehouse: WarehouseUri,
    pub s3: S3Settings,
    pub client_endpoint: Option<String>,
    pub credentials: CredentialPolicy,
    pub client_access_key_id: Option<String>,
    pub client_secret_access_key: Option<String>,
    pub max_body_bytes: usize,
    pub request_timeout: Duration,
    pub recovery_grace: Duration,
    pub recovery_interval: Duration,
    pub fs_sync: bool,
    pub node_id: String,
    pub log_format: LogFormat,
}

impl Config {
    /// Merges file, environment and flags (clap has already folded environment into `args`)
    /// and validates the result.
    pub fn load(args: ServeArgs) -> Result<Config, ConfigError> {
        let file: FileConfig = match &args.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| bad("config", format!("cannot read {}: {e}", path.display())))?;
                toml::from_str(&text)
                    .map_err(|e| bad("config", format!("{}: {}", path.display(), e.message())))?
            }
            None => FileConfig::default(),
        };
        let listen_text = args
            .listen
            .or(file.listen)
            .unwrap_or_else(|| "127.0.0.1:2333".into());
        let listen = listen_text.parse::<SocketAddr>().map_err(|_| {
            bad(
                "listen",
                format!("'{listen_text}' is not an address like 127.0.0.1:2333"),
            )
        })?;
        let warehouse_text = args
            .warehouse
            .or(file.warehouse)
            .unwrap_or_else(|| "./warehouse".into());
        let warehouse = parse_warehouse(&warehouse_text)?;
        let endpoint = args.s3_endpoint.or(file.s3_endpoint);
        if let Some(e) = &endpoint {
            check_url("s3-endpoint", e)?;
        }
        let client_endpoint = args.client_endpoint.or(file.client_endpoint);
        if let Some(e) = &client_endpoint {
            check_url("client-endpoint", e)?;
        }
        let s3 = S3Settings {
            endpoint,
            region: args.s3_region.or(file.s3_region),
            access_key_id: args.s3_access_key_id.or(file.s3_access_key_id),
            secret_access_key: args.s3_secret_access_key.or(file.s3_secret_access_key),
            path_style: !args
                .s3_virtual_hosted
                .or(file.s3_virtual_hosted)
                .unwrap_or(false),
        };
        if s3.access_key_id.is_some() != s3.secret_access_key.is_some() {
            return Err(bad(
                "s3-access-key-id",
                "give both the access key id and the secret access key, or neither",
            ));
        }
        let credentials = args
            .credentials
            .or(file.credentials)
            .unwrap_or(CredentialPolicy::None);
        let client_access_key_id = args.client_access_key_id.or(file.client_access_key_id);
        let client_secret_access_key = args
            .client_secret_access_key
            .or(file.client_secret_access_key);
        if credentials == CredentialPolicy::Static
            && (client_access_key_id.is_none() || client_secret_access_key.is_none())
        {
            return Err(bad(
                "credentials",
                "the static policy needs client-access-key-id and client-secret-access-key",
            ));
        }
        let max_body_bytes = args
            .max_body_bytes
            .or(file.max_body_bytes)
            .unwrap_or(16 * 1024 * 1024);
        if max_body_bytes < 1024 {
            return Err(bad("max-body-bytes", "must be at least 1024"));
        }
        let timeout = args
            .request_timeout_secs
            .or(file.request_timeout_secs)
            .unwrap_or(30);
        if timeout == 0 {
            return Err(bad("request-timeout-secs", "must be at least 1"));
        }
        let grace = args
            .recovery_grace_secs
            .or(file.recovery_grace_secs)
            .unwrap_or(120);
        if grace < 2 {
            return Err(bad("recovery-grace-secs", "must be at least 2"));
        }
        let interval = args
            .recovery_interval_secs
            .or(file.recovery_interval_secs)
            .unwrap_or(60);
        if interval == 0 {
            return Err(bad("recovery-interval-secs", "must be at least 1"));
        }
        let node_id = match args.node_id.or(file.node_id) {
            Some(id)
                if id.trim().is_empty() || id.len() > 200 || id.chars().any(char::is_control) =>
            {
                return Err(bad("node-id", "must be 1 to 200 printable characters"));
            }
            Some(id) => id,
            None => format!("{}:{}", host_name(), listen.port()),
        };
        Ok(Config {
            listen,
            warehouse,
            s3,
            client_endpoint,
            credentials,
            client_access_key_id,
            client_secret_access_key,
            max_body_bytes,
            request_timeout: Duration::from_secs(timeout),
            recovery_grace: Duration::from_secs(grace),
            recovery_interval: Duration::from_secs(interval),
            fs_sync: args.fs_sync.or(file.fs_sync).unwrap_or(true),
            node_id,
            log_format: args
                .log_format
                .or(file.log_format)
                .unwrap_or(LogFormat::Text),
        })
    }
}

/// The machine's host name (a pod's name under Kubernetes), for the default node id.
fn host_name() -> String {
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

/// Parses a warehouse URI: a path, `file:///dir`, `s3://bucket[/prefix]`, or `s3://`.
pub fn parse_warehouse(text: &str) -> Result<WarehouseUri, ConfigError> {
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
            format!("'{text}': use a directory, file:///dir, s3://bucket/prefix or s3://"),
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
        for bad in ["gs://b", "s3://B", "s3://bkt/../x", "file://rel", ""] {
            let err = parse_warehouse(bad).unwrap_err();
            assert_eq!(err.setting, "warehouse", "{bad}");
        }
    }

    #[test]
    fn bad_values_name_their_setting() {
        let err = Config::load(ServeArgs {
            listen: Some("nope".into()),
            ..Default::default()
        })
        .unwrap_err();
        assert_eq!(err.setting, "listen");
        let err = Config::load(ServeArgs {
            credentials: Some(CredentialPolicy::Static),
            ..Default::default()
        })
        .unwrap_err();
        assert_eq!(err.setting, "credentials");
        let err = Config::load(ServeArgs {
            s3_endpoint: Some("localhost:9000".into()),
            ..Default::default()
        })
        .unwrap_err();
        assert_eq!(err.setting, "s3-endpoint");
    }

    #[test]
    fn flags_win_over_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gw.toml");
        std::fs::write(
            &path,
            "listen = \"127.0.0.1:9999\"\nwarehouse = \"s3://filebkt\"\n",
        )
        .unwrap();
        let cfg = Config::load(ServeArgs {
            config: Some(path.clone()),
            listen: Some("127.0.0.1:1".into()),
            ..Default::default()
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
        std::fs::write(&path, "listn = \"x\"\n").unwrap();
        assert_eq!(
            Config::load(ServeArgs {
                config: Some(path),
                ..Default::default()
            })
            .unwrap_err()
            .setting,
            "config"
        );
    }
}
