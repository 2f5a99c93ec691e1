//! OIDC bearer tokens (JWTs). A token is accepted when it is signed by one of the issuer's
//! keys (its JWKS: fetched, cached, and fetched again when a token names a key id it does
//! not hold, at most every few seconds), with an asymmetric algorithm only (no `none`, no
//! HMAC: a token "signed" with the issuer's public key as an HMAC secret is refused before
//! any key is looked at), whose `iss` and `aud` are the configured ones, and whose `exp`
//! and `nbf` hold with a minute of leeway. The principal and its groups come from
//! configurable claims.

use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{AlgorithmParameters, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use tokio::sync::Mutex;

use crate::access::Principal;
use crate::config::OidcSettings;

/// How soon after a fetch an unknown key id may fetch the keys again.
const REFETCH_AFTER: Duration = Duration::from_secs(5);
const LEEWAY_SECS: u64 = 60;

struct Keys {
    set: JwkSet,
    fetched: Instant,
}

pub struct Oidc {
    settings: OidcSettings,
    http: reqwest::Client,
    keys: Mutex<Option<Keys>>,
}

fn asymmetric(alg: Algorithm) -> bool {
    !matches!(alg, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512)
}

impl Oidc {
    pub fn new(settings: OidcSettings) -> Result<Self, String> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| format!("cannot make an HTTP client: {e}"))?;
        Ok(Oidc {
            settings,
            http,
            keys: Mutex::new(None),
        })
    }

    async fn get_json(&self, url: &str) -> Result<serde_json::Value, String> {
        let bytes = self
            .http
            .get(url)
            .send()
            .await
            .and_then(|r| r.error_for_status())
            .map_err(|e| format!("fetching {url}: {e}"))?
            .bytes()
            .await
            .map_err(|e| format!("reading {url}: {e}"))?;
        serde_json::from_slice(&bytes).map_err(|e| format!("{url} is not JSON: {e}"))
    }

    async fn jwks_url(&self) -> Result<String, String> {
        if let Some(url) = &self.settings.jwks_url {
            return Ok(url.clone());
        }
        let discovery = format!(
            "{}/.well-known/openid-configuration",
            self.settings.issuer.trim_end_matches('/')
        );
        self.get_json(&discovery)
            .await?
            .get("jwks_uri")
            .and_then(|u| u.as_str())
            .map(str::to_string)
            .ok_or_else(|| format!("{discovery} names no jwks_uri"))
    }

    async fn fetch(&self) -> Result<JwkSet, String> {
        let url = self.jwks_url().await?;
        serde_json::from_value(self.get_json(&url).await?)
            .map_err(|e| format!("{url} is not a JWKS: {e}"))
    }

    /// The issuer's key `kid`, fetching the keys when they are unknown yet or do not hold it.
    async fn key(&self, kid: &str) -> Result<jsonwebtoken::jwk::Jwk, String> {
        let mut keys = self.keys.lock().await;
        if let Some(k) = keys.as_ref()
            && let Some(jwk) = k.set.find(kid)
        {
            return Ok(jwk.clone());
        }
        let recently = keys
            .as_ref()
            .is_some_and(|k| k.fetched.elapsed() < REFETCH_AFTER);
        if !recently {
            match self.fetch().await {
                Ok(set) => {
                    *keys = Some(Keys {
                        set,
                        fetched: Instant::now(),
                    })
                }
                Err(e) => tracing::warn!(error = %e, "could not fetch the issuer's keys"),
            }
        }
        keys.as_ref()
            .and_then(|k| k.set.find(kid))
            .cloned()
            .ok_or_else(|| format!("the issuer has no key '{kid}'"))
    }

    /// The principal a token names, or why it is refused.
    pub async fn verify(&self, token: &str) -> Result<Principal, String> {
        let header = jsonwebtoken::decode_header(token).map_err(|e| format!("not a JWT: {e}"))?;
        if !asymmetric(header.alg) {
            return Err(format!("algorithm {:?} is not accepted", header.alg));
        }
        let kid = header.kid.ok_or("the token names no key id (kid)")?;
        let jwk = self.key(&kid).await?;
        let family_fits = matches!(
            (&jwk.algorithm, header.alg),
            (
                AlgorithmParameters::RSA(_),
                Algorithm::RS256
                    | Algorithm::RS384
                    | Algorithm::RS512
                    | Algorithm::PS256
                    | Algorithm::PS384
                    | Algorithm::PS512
            ) | (
                AlgorithmParameters::EllipticCurve(_),
                Algorithm::ES256 | Algorithm::ES384
            ) | (AlgorithmParameters::OctetKeyPair(_), Algorithm::EdDSA)
        );
        if !family_fits {
            return Err(format!("key '{kid}' does not sign with {:?}", header.alg));
        }
        let key = DecodingKey::from_jwk(&jwk).map_err(|e| format!("key '{kid}': {e}"))?;
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[&self.settings.issuer]);
        validation.set_audience(&[&self.settings.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.validate_nbf = true;
        validation.leeway = LEEWAY_SECS;
        let data = jsonwebtoken::decode::<serde_json::Value>(token, &key, &validation)
            .map_err(|e| format!("{e}"))?;
        let claims = data.claims;
        let name = claims
            .get(&self.settings.principal_claim)
            .and_then(|v| v.as_str())
            .filter(|n| !n.is_empty())
            .ok_or_else(|| format!("the token has no '{}' claim", self.settings.principal_claim))?
            .to_string();
        let groups = match claims.get(&self.settings.groups_claim) {
            Some(serde_json::Value::Array(items)) => items
                .iter()
                .filter_map(|g| g.as_str().map(str::to_string))
                .collect(),
            Some(serde_json::Value::String(g)) => vec![g.clone()],
            _ => Vec::new(),
        };
        Ok(Principal {
            name,
            groups,
            scheme: "jwt",
        })
    }
}
