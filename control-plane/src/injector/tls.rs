//! The injector's serving certificate, re-read when its files change.
//! Kubernetes updates a mounted Secret in place: a chart upgrade that
//! regenerates the certificate, or a cert-manager renewal, reaches the
//! running server without a restart. A file that cannot be read or parsed
//! keeps the certificate in use, with a warning.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use anyhow::Context;
use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// The files' bytes and the key they made.
#[derive(Debug)]
struct Loaded {
    cert_pem: Vec<u8>,
    key_pem: Vec<u8>,
    key: Arc<CertifiedKey>,
}

/// A certificate resolver over two PEM files.
#[derive(Debug)]
pub struct ReloadingCert {
    cert: PathBuf,
    key: PathBuf,
    provider: Arc<CryptoProvider>,
    current: RwLock<Loaded>,
}

fn read(path: &Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("reading {}", path.display()))
}

fn parse(
    cert_pem: &[u8],
    key_pem: &[u8],
    provider: &CryptoProvider,
) -> anyhow::Result<CertifiedKey> {
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .context("parsing the certificate chain")?;
    anyhow::ensure!(
        !chain.is_empty(),
        "the certificate file holds no certificate"
    );
    let key = PrivateKeyDer::from_pem_slice(key_pem).context("parsing the private key")?;
    CertifiedKey::from_der(chain, key, provider)
        .context("the injector's certificate and key do not match")
}

impl ReloadingCert {
    /// Loads both files; an error here stops the server from starting.
    pub fn load(cert: &Path, key: &Path) -> anyhow::Result<ReloadingCert> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let (cert_pem, key_pem) = (read(cert)?, read(key)?);
        let certified = parse(&cert_pem, &key_pem, &provider)
            .with_context(|| format!("{} and {}", cert.display(), key.display()))?;
        Ok(ReloadingCert {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            provider,
            current: RwLock::new(Loaded {
                cert_pem,
                key_pem,
                key: Arc::new(certified),
            }),
        })
    }

    /// Re-reads the files; swaps the certificate in when they changed and
    /// parse. Returns whether it swapped.
    pub fn refresh(&self) -> bool {
        let (cert_pem, key_pem) = match (read(&self.cert), read(&self.key)) {
            (Ok(c), Ok(k)) => (c, k),
            (Err(e), _) | (_, Err(e)) => {
                tracing::warn!(
                    error = format!("{e:#}"),
                    "injector certificate unreadable; keeping the one in use"
                );
                return false;
            }
        };
        {
            let current = self.current.read().unwrap_or_else(|p| p.into_inner());
            if current.cert_pem == cert_pem && current.key_pem == key_pem {
                return false;
            }
        }
        match parse(&cert_pem, &key_pem, &self.provider) {
            Ok(key) => {
                *self.current.write().unwrap_or_else(|p| p.into_inner()) = Loaded {
                    cert_pem,
                    key_pem,
                    key: Arc::new(key),
                };
                tracing::info!(cert = %self.cert.display(), "injector certificate reloaded");
                true
            }
            Err(e) => {
                // Mid-update (one file written, not the other) lands here too:
                // the next look picks up the finished pair.
                tracing::warn!(
                    error = format!("{e:#}"),
                    "injector certificate invalid; keeping the one in use"
                );
                false
            }
        }
    }

    /// The TLS configuration that serves the current certificate.
    pub fn server_config(self: &Arc<Self>) -> anyhow::Result<rustls::ServerConfig> {
        let mut config = rustls::ServerConfig::builder_with_provider(self.provider.clone())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_cert_resolver(self.clone());
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .key
                .clone(),
        )
    }
}
