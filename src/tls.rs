//! HTTPS with rustls, from PEM files that are picked up again when they change (a renewed
//! certificate needs no restart; a file that does not load keeps the configuration in
//! force). With a client CA, client certificates are verified against it, and a verified
//! certificate's subject common name is the connection's principal.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;

use crate::config::TlsSettings;

pub struct Tls {
    settings: TlsSettings,
    current: RwLock<Arc<ServerConfig>>,
}

fn build(settings: &TlsSettings) -> Result<ServerConfig, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&settings.cert)
        .and_then(|it| it.collect::<Result<_, _>>())
        .map_err(|e| format!("{}: {e}", settings.cert.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no certificate", settings.cert.display()));
    }
    let key = PrivateKeyDer::from_pem_file(&settings.key)
        .map_err(|e| format!("{}: {e}", settings.key.display()))?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = match &settings.client_ca {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in
                CertificateDer::pem_file_iter(ca).map_err(|e| format!("{}: {e}", ca.display()))?
            {
                let cert = cert.map_err(|e| format!("{}: {e}", ca.display()))?;
                roots
                    .add(cert)
                    .map_err(|e| format!("{}: {e}", ca.display()))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = if settings.client_cert_optional {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            builder.with_client_cert_verifier(
                verifier
                    .build()
                    .map_err(|e| format!("{}: {e}", ca.display()))?,
            )
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| format!("{}: {e}", settings.key.display()))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

impl Tls {
    /// Loads the files, which must load now.
    pub fn load(settings: TlsSettings) -> Result<Self, String> {
        let config = build(&settings)?;
        Ok(Tls {
            settings,
            current: RwLock::new(Arc::new(config)),
        })
    }

    /// The files whose changes reload the configuration.
    pub fn paths(&self) -> Vec<PathBuf> {
        let mut paths = vec![self.settings.cert.clone(), self.settings.key.clone()];
        paths.extend(self.settings.client_ca.clone());
        paths
    }

    /// Whether client certificates name principals.
    pub fn verifies_clients(&self) -> bool {
        self.settings.client_ca.is_some()
    }

    pub fn reload(&self) {
        match build(&self.settings) {
            Ok(config) => {
                *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(config);
                tracing::info!(cert = %self.settings.cert.display(), "reloaded the TLS certificate");
            }
            Err(e) => {
                tracing::error!(error = %e, "the TLS files do not load; the certificate in force stays")
            }
        }
    }

    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(
            self.current
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
        )
    }
}

/// The subject common name of a (verified) client certificate.
pub fn common_name(cert: &CertificateDer<'_>) -> Option<String> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    parsed
        .subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .map(str::to_string)
        .filter(|cn| !cn.is_empty())
}
