//! OIDC bearer tokens (JWTs). A token is accepted when it is signed by one of the issuer's
//! keys (its JWKS: fetched, cached, and fetched again when a token names a key id it does
//! not hold, at most every few seconds), with an asymmetric algorithm only (no `none`, no
//! HMAC: a token "signed" with the issuer's public key as an HMAC secret is refused before
//! any key is looked at), whose `iss` and `aud` are the configured ones, and whose `exp`
//! and `nbf` hold with a minute of leeway. The principal and its groups come from
//! configurable claims.
//!
//! Checking an RSA signature costs more than the rest of a describe, so a verified token is
//! remembered (by its SHA-256) until it expires, for at most `TOKEN_CACHE_FOR`; the keys are
//! fetched again when they are older than `KEYS_MAX_AGE`, and a change of keys forgets
//! every remembered token, so a key the issuer withdraws stops working within minutes.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

use jsonwebtoken::jwk::{AlgorithmParameters, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use tokio::sync::Mutex;

use crate::access::Principal;
use crate::config::OidcSettings;

/// How soon after a fetch an unknown key id may fetch the keys again.
const REFETCH_AFTER: Duration = Duration::from_secs(5);
const LEEWAY_SECS: u64 = 60;
/// How long fetched keys are trusted before they are fetched again.
const KEYS_MAX_AGE: Duration = Duration::from_secs(300);
/// The longest a verified token is remembered.
const TOKEN_CACHE_FOR: Duration = Duration::from_secs(300);
/// The most tokens remembered; when full, expired ones go, and if none has, all do.
const TOKEN_CACHE_SIZE: usize = 10_000;

struct Keys {
    set: JwkSet,
    fetched: Instant,
    decoded: HashMap<String, Arc<DecodingKey>>,
}

struct Verified {
    principal: Principal,
    until: Instant,
}

pub struct Oidc {
    settings: OidcSettings,
    http: reqwest::Client,
    keys: Mutex<Option<Keys>>,
    tokens: std::sync::Mutex<HashMap<[u8; 32], Verified>>,
}

fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
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
            tokens: std::sync::Mutex::new(HashMap::new()),
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

    /// The issuer's key `kid` (its parameters and the key ready to check signatures),
    /// fetching the keys when they are unknown yet, old, or do not hold it.
    async fn key(&self, kid: &str) -> Result<(AlgorithmParameters, Arc<DecodingKey>), String> {
        let mut keys = self.keys.lock().await;
        let fresh = keys
            .as_ref()
            .is_some_and(|k| k.fetched.elapsed() < KEYS_MAX_AGE);
        let held = keys.as_ref().is_some_and(|k| k.set.find(kid).is_some());
        let recently = keys
            .as_ref()
            .is_some_and(|k| k.fetched.elapsed() < REFETCH_AFTER);
        if !(recently || (fresh && held)) {
            match self.fetch().await {
                Ok(set) => {
                    if keys.as_ref().is_some_and(|k| k.set != set) {
                        self.cache().clear();
                    }
                    *keys = Some(Keys {
                        set,
                        fetched: Instant::now(),
                        decoded: HashMap::new(),
                    })
                }
                Err(e) => {
                    tracing::warn!(error = %e, "could not fetch the issuer's keys");
                    if let Some(k) = keys.as_mut() {
                        // keep the keys held; try again after REFETCH_AFTER, not at once
                        k.fetched = Instant::now() - KEYS_MAX_AGE + REFETCH_AFTER;
                    }
                }
            }
        }
        let k = keys
            .as_mut()
            .ok_or("the issuer's keys could not be fetched")?;
        let jwk = k
            .set
            .find(kid)
            .ok_or_else(|| format!("the issuer has no key '{kid}'"))?;
        let params = jwk.algorithm.clone();
        if let Some(decoded) = k.decoded.get(kid) {
            return Ok((params, decoded.clone()));
        }
        let decoded =
            Arc::new(DecodingKey::from_jwk(jwk).map_err(|e| format!("key '{kid}': {e}"))?);
        k.decoded.insert(kid.to_string(), decoded.clone());
        Ok((params, decoded))
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Verified>> {
        self.tokens.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn remember(&self, digest: [u8; 32], principal: &Principal, exp: u64) {
        let left = Duration::from_secs((exp + LEEWAY_SECS).saturating_sub(now_unix()));
        let until = Instant::now() + left.min(TOKEN_CACHE_FOR);
        let mut cache = self.cache();
        if cache.len() >= TOKEN_CACHE_SIZE {
            let now = Instant::now();
            cache.retain(|_, v| v.until > now);
            if cache.len() >= TOKEN_CACHE_SIZE {
                cache.clear();
            }
        }
        cache.insert(
            digest,
            Verified {
                principal: principal.clone(),
                until,
            },
        );
    }

    /// The principal a token names, or why it is refused.
    pub async fn verify(&self, token: &str) -> Result<Principal, String> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(v) = self.cache().get(&digest)
            && v.until > Instant::now()
        {
            return Ok(v.principal.clone());
        }
        let (principal, exp) = self.check(token).await?;
        self.remember(digest, &principal, exp);
        Ok(principal)
    }

    /// Checks a token in full: its principal and its `exp`.
    async fn check(&self, token: &str) -> Result<(Principal, u64), String> {
        let header = jsonwebtoken::decode_header(token).map_err(|e| format!("not a JWT: {e}"))?;
        if !asymmetric(header.alg) {
            return Err(format!("algorithm {:?} is not accepted", header.alg));
        }
        let kid = header.kid.ok_or("the token names no key id (kid)")?;
        let (params, key) = self.key(&kid).await?;
        let family_fits = matches!(
            (&params, header.alg),
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
        let exp = claims.get("exp").and_then(|v| v.as_u64()).unwrap_or(0);
        Ok((
            Principal {
                name,
                groups,
                scheme: "jwt",
            },
            exp,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn oidc() -> Oidc {
        Oidc::new(OidcSettings {
            issuer: "http://127.0.0.1:1".into(),
            audience: "lance-gateway".into(),
            jwks_url: None,
            principal_claim: "sub".into(),
            groups_claim: "groups".into(),
        })
        .unwrap()
    }

    fn alice() -> Principal {
        Principal {
            name: "alice".into(),
            groups: Vec::new(),
            scheme: "jwt",
        }
    }

    fn remembered(o: &Oidc, digest: &[u8; 32]) -> bool {
        o.cache()
            .get(digest)
            .is_some_and(|v| v.until > Instant::now())
    }

    #[test]
    fn a_token_is_remembered_no_longer_than_it_is_valid() {
        let o = oidc();
        let now = now_unix();
        o.remember([1; 32], &alice(), now + 3600);
        o.remember([2; 32], &alice(), now - 2 * LEEWAY_SECS);
        assert!(remembered(&o, &[1; 32]));
        assert!(
            !remembered(&o, &[2; 32]),
            "an expired token must be checked again"
        );
        let until = o.cache()[&[1; 32]].until;
        assert!(until <= Instant::now() + TOKEN_CACHE_FOR);
    }

    #[test]
    fn a_full_cache_makes_room() {
        let o = oidc();
        let now = now_unix();
        for i in 0..TOKEN_CACHE_SIZE {
            let mut d = [0u8; 32];
            d[..8].copy_from_slice(&(i as u64).to_le_bytes());
            o.remember(d, &alice(), now + 3600);
        }
        o.remember([0xff; 32], &alice(), now + 3600);
        assert!(o.cache().len() <= TOKEN_CACHE_SIZE);
        assert!(remembered(&o, &[0xff; 32]));
    }

    #[tokio::test]
    async fn an_unverifiable_token_is_not_remembered() {
        let o = oidc();
        assert!(o.verify("not.a.jwt").await.is_err());
        assert!(o.cache().is_empty());
    }
}
