//! Which storage options go beside a location. A Lance client opens a table's data itself,
//! so the map must hold everything it needs to reach this warehouse: for S3 the endpoint,
//! region, `allow_http` for a plain-HTTP endpoint and path-style addressing, plus keys by the
//! configured policy. LanceDB replaces its own options with whatever is vended on create, so
//! a vended map is always complete (competitors.md §3.3).
//!
//! Keys by policy: none; `static` (the same client keys for every caller); `gateway` (the
//! gateway's own); `sts` (short-lived keys limited to the table's folder, read-only or
//! read-write by the caller's access, see `sts.rs`); `sas` (Azure: a short-lived SAS token
//! likewise, see `sas.rs`). GCS and Azure warehouses vend the option names Lance's
//! object_store reads for those clouds (`google_*`, `azure_storage_*`). Every vend of keys is noted on the
//! request for the audit log, with only the first characters of the key id.

pub mod sas;
pub mod sts;

use std::collections::HashMap;
use std::sync::Arc;

use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};

use crate::access::{Ctx, Level, Vended};
use crate::catalog::records::TableRecord;
use crate::config::CredentialPolicy;
use crate::error::{Error, Result};

enum Keys {
    None,
    Static {
        id: String,
        secret: String,
    },
    Gateway(SharedCredentialsProvider),
    Sts(Arc<sts::Sts>),
    /// GCS: the gateway's own access token, as `google_storage_token`.
    GcsToken(object_store::gcp::GcpCredentialProvider),
    /// Azure: the account key.
    AzureKey(String),
    /// Azure: a SAS token per table and caller.
    AzureSas(Arc<sas::Sas>),
}

/// How long a vended GCS access token is said to last: object_store renews the gateway's
/// token when it has less than five minutes left, so one it hands out lasts at least that.
const GCS_TOKEN_MS: u64 = 5 * 60 * 1000;

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64
}

fn key_id_prefix(id: &str) -> String {
    id.chars().take(8).collect()
}

pub struct Vendor {
    base: HashMap<String, String>,
    keys: Keys,
}

impl Vendor {
    /// A local warehouse: clients need nothing to open a `file://` location.
    pub fn local() -> Self {
        Vendor {
            base: HashMap::new(),
            keys: Keys::None,
        }
    }

    pub fn s3(
        endpoint: Option<&str>,
        region: &str,
        path_style: bool,
        policy: CredentialPolicy,
        client_keys: Option<(String, String)>,
        gateway_keys: Option<SharedCredentialsProvider>,
    ) -> Result<Self> {
        let mut base = HashMap::new();
        base.insert("aws_region".to_string(), region.to_string());
        if let Some(endpoint) = endpoint {
            base.insert(
                "aws_endpoint".to_string(),
                endpoint.trim_end_matches('/').to_string(),
            );
            if endpoint.starts_with("http://") {
                base.insert("allow_http".to_string(), "true".to_string());
            }
        }
        base.insert(
            "aws_virtual_hosted_style_request".to_string(),
            (!path_style).to_string(),
        );
        let keys = match policy {
            CredentialPolicy::None => Keys::None,
            CredentialPolicy::Static => {
                let (id, secret) = client_keys
                    .ok_or_else(|| Error::invalid("static credentials are not configured"))?;
                Keys::Static { id, secret }
            }
            CredentialPolicy::Gateway => Keys::Gateway(
                gateway_keys
                    .ok_or_else(|| Error::invalid("the gateway has no credentials to vend"))?,
            ),
            CredentialPolicy::Sts => {
                return Err(Error::invalid(
                    "the sts policy is set up with Vendor::with_sts",
                ));
            }
            CredentialPolicy::Sas => {
                return Err(Error::invalid("the sas policy is for Azure warehouses"));
            }
        };
        Ok(Vendor { base, keys })
    }

    /// A GCS warehouse: the base URL of an emulator (else Google's), unsigned requests for
    /// one that checks no tokens, and under `gateway` the gateway's own access token.
    pub fn gcs(
        endpoint: Option<&str>,
        anonymous: bool,
        policy: CredentialPolicy,
        own: Option<object_store::gcp::GcpCredentialProvider>,
    ) -> Result<Self> {
        let mut base = HashMap::new();
        if let Some(endpoint) = endpoint {
            base.insert(
                "google_base_url".to_string(),
                endpoint.trim_end_matches('/').to_string(),
            );
            if endpoint.starts_with("http://") {
                base.insert("allow_http".to_string(), "true".to_string());
            }
        }
        if anonymous {
            base.insert("google_skip_signature".to_string(), "true".to_string());
        }
        let keys = match policy {
            CredentialPolicy::None => Keys::None,
            CredentialPolicy::Gateway => Keys::GcsToken(
                own.ok_or_else(|| Error::invalid("the gateway has no GCS credentials to vend"))?,
            ),
            _ => return Err(Error::invalid("a GCS warehouse vends none or gateway")),
        };
        Ok(Vendor { base, keys })
    }

    /// An Azure warehouse: the account, the blob endpoint where it is not Azure's, and keys
    /// by the policy (the account key, or a SAS per table).
    pub fn azure(
        account: &str,
        endpoint: Option<&str>,
        policy: CredentialPolicy,
        key: Option<&str>,
        sas: Option<sas::Sas>,
    ) -> Result<Self> {
        let mut base = HashMap::new();
        base.insert(
            "azure_storage_account_name".to_string(),
            account.to_string(),
        );
        if let Some(endpoint) = endpoint {
            base.insert(
                "azure_storage_endpoint".to_string(),
                endpoint.trim_end_matches('/').to_string(),
            );
            if endpoint.starts_with("http://") {
                base.insert("allow_http".to_string(), "true".to_string());
            }
        }
        let keys = match policy {
            CredentialPolicy::None => Keys::None,
            CredentialPolicy::Gateway => Keys::AzureKey(
                key.ok_or_else(|| Error::invalid("the gateway has no Azure account key to vend"))?
                    .to_string(),
            ),
            CredentialPolicy::Sas => {
                Keys::AzureSas(Arc::new(sas.ok_or_else(|| {
                    Error::invalid("the sas policy needs the account key")
                })?))
            }
            _ => {
                return Err(Error::invalid(
                    "an Azure warehouse vends none, gateway or sas",
                ));
            }
        };
        Ok(Vendor { base, keys })
    }

    /// Vends table-scoped keys from STS beside the endpoint options of `self`.
    pub fn with_sts(self, sts: sts::Sts) -> Self {
        Vendor {
            base: self.base,
            keys: Keys::Sts(Arc::new(sts)),
        }
    }

    /// The options for `ctx`'s caller to open `table`, which it may use at `level`; keys only
    /// when `with_credentials` (the request's `vend_credentials`, default true) and the
    /// policy has some.
    pub async fn options(
        &self,
        ctx: &Ctx,
        table: &TableRecord,
        level: Level,
        with_credentials: bool,
    ) -> Result<HashMap<String, String>> {
        if let Keys::AzureSas(sas) = &self.keys {
            let mut map = self.base.clone();
            if !with_credentials || level < Level::Read {
                return Ok(map);
            }
            let write = level >= Level::Write;
            let folder = table
                .location
                .strip_prefix("az://")
                .and_then(|rest| rest.split_once('/'))
                .map(|(_, path)| path.trim_end_matches('/'))
                .ok_or_else(|| Error::internal("a table of an Azure warehouse", &table.location))?;
            let issued = sas.issue(folder, write, now_ms());
            crate::telemetry::vended("sas", if write { "write" } else { "read" });
            ctx.note_vended(Vended {
                access: if write { "write" } else { "read" },
                key_id_prefix: key_id_prefix(&format!("sas:{}", folder)),
                expires_at_ms: Some(issued.expires_at_ms),
            });
            map.insert("azure_storage_sas_token".into(), issued.token);
            map.insert("expires_at_millis".into(), issued.expires_at_ms.to_string());
            return Ok(map);
        }
        let Keys::Sts(sts) = &self.keys else {
            let map = self.plain(with_credentials).await?;
            let id = map
                .get("aws_access_key_id")
                .or_else(|| map.get("google_storage_token"))
                .or_else(|| map.get("azure_storage_account_key"));
            if let Some(id) = id {
                let policy = match self.keys {
                    Keys::Static { .. } => "static",
                    _ => "gateway",
                };
                crate::telemetry::vended(policy, "all");
                ctx.note_vended(Vended {
                    access: policy,
                    key_id_prefix: key_id_prefix(id),
                    expires_at_ms: map.get("expires_at_millis").and_then(|e| e.parse().ok()),
                });
            }
            return Ok(map);
        };
        let mut map = self.base.clone();
        if !with_credentials || level < Level::Read {
            return Ok(map);
        }
        let write = level >= Level::Write;
        let issued = sts
            .credentials(&ctx.principal.name, &table.location, write)
            .await?;
        crate::telemetry::vended("sts", if write { "write" } else { "read" });
        ctx.note_vended(Vended {
            access: if write { "write" } else { "read" },
            key_id_prefix: key_id_prefix(&issued.access_key_id),
            expires_at_ms: Some(issued.expires_at_ms),
        });
        map.insert("aws_access_key_id".into(), issued.access_key_id);
        map.insert("aws_secret_access_key".into(), issued.secret_access_key);
        map.insert("aws_session_token".into(), issued.session_token);
        map.insert("expires_at_millis".into(), issued.expires_at_ms.to_string());
        Ok(map)
    }

    /// The options of a policy that vends the same to every caller (and of the gateway's own
    /// access to datasets); keys only when `with_credentials` and the policy has some.
    pub async fn plain(&self, with_credentials: bool) -> Result<HashMap<String, String>> {
        let mut map = self.base.clone();
        if !with_credentials {
            return Ok(map);
        }
        match &self.keys {
            Keys::None | Keys::Sts(_) | Keys::AzureSas(_) => {}
            Keys::AzureKey(key) => {
                map.insert("azure_storage_account_key".into(), key.clone());
            }
            Keys::GcsToken(provider) => {
                let token = provider.get_credential().await.map_err(|e| {
                    Error::unavailable("could not resolve the gateway's GCS credentials")
                        .with_detail(e.to_string())
                })?;
                map.insert("google_storage_token".into(), token.bearer.clone());
                map.insert(
                    "expires_at_millis".into(),
                    (now_ms() + GCS_TOKEN_MS).to_string(),
                );
            }
            Keys::Static { id, secret } => {
                map.insert("aws_access_key_id".into(), id.clone());
                map.insert("aws_secret_access_key".into(), secret.clone());
            }
            Keys::Gateway(provider) => {
                let creds = provider.provide_credentials().await.map_err(|e| {
                    Error::unavailable("could not resolve the gateway's credentials")
                        .with_detail(e.to_string())
                })?;
                map.insert(
                    "aws_access_key_id".into(),
                    creds.access_key_id().to_string(),
                );
                map.insert(
                    "aws_secret_access_key".into(),
                    creds.secret_access_key().to_string(),
                );
                if let Some(token) = creds.session_token() {
                    map.insert("aws_session_token".into(), token.to_string());
                }
                if let Some(expiry) = creds.expiry()
                    && let Ok(d) = expiry.duration_since(std::time::UNIX_EPOCH)
                {
                    map.insert("expires_at_millis".into(), d.as_millis().to_string());
                }
            }
        }
        Ok(map)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn s3_options_are_complete_and_keys_follow_the_policy() {
        let v = Vendor::s3(
            Some("http://127.0.0.1:8333/"),
            "us-east-1",
            true,
            CredentialPolicy::Static,
            Some(("AK".into(), "SK".into())),
            None,
        )
        .unwrap();
        let with = v.plain(true).await.unwrap();
        assert_eq!(with["aws_endpoint"], "http://127.0.0.1:8333");
        assert_eq!(with["allow_http"], "true");
        assert_eq!(with["aws_region"], "us-east-1");
        assert_eq!(with["aws_virtual_hosted_style_request"], "false");
        assert_eq!(with["aws_access_key_id"], "AK");
        let without = v.plain(false).await.unwrap();
        assert!(!without.contains_key("aws_access_key_id"));
        assert_eq!(without["aws_endpoint"], "http://127.0.0.1:8333");

        let none = Vendor::s3(
            Some("https://s3.example"),
            "eu-west-1",
            false,
            CredentialPolicy::None,
            None,
            None,
        )
        .unwrap();
        let opts = none.plain(true).await.unwrap();
        assert!(!opts.contains_key("allow_http") && !opts.contains_key("aws_secret_access_key"));
        assert!(Vendor::local().plain(true).await.unwrap().is_empty());
    }
}
