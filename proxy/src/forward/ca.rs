//! The sidecar's certificate authority: loaded from `ca.pem`/`ca-key.pem`
//! in its directory, or generated there at first start (the key file is
//! written owner-only). It mints a leaf certificate per intercepted host,
//! and the TLS server configurations built from them are cached (moka,
//! bounded, a day's life; leaves are valid for a week).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::ServerConfig;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// The CA's files in its directory.
pub const CA_CERT: &str = "ca.pem";
pub const CA_KEY: &str = "ca-key.pem";
/// The system roots plus the CA, for clients whose CA setting replaces
/// their roots.
pub const CA_BUNDLE: &str = "ca-bundle.pem";

/// A CA failure, with what to fix.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CaError(String);

fn fail(what: impl Into<String>) -> impl FnOnce(rcgen::Error) -> CaError {
    let what = what.into();
    move |e| CaError(format!("{what}: {e}"))
}

/// The sidecar's CA and its cache of per-host TLS configurations.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    cert: CertificateDer<'static>,
    configs: moka::sync::Cache<String, Arc<ServerConfig>>,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca").finish_non_exhaustive()
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl Ca {
    /// Loads the CA of `dir`, generating it first if the directory has none.
    /// `system_roots` go into `ca-bundle.pem` ahead of the CA.
    pub fn load_or_generate(
        dir: &Path,
        system_roots: &[CertificateDer<'static>],
    ) -> Result<Ca, CaError> {
        let (cert_path, key_path) = (dir.join(CA_CERT), dir.join(CA_KEY));
        if !cert_path.exists() {
            generate(dir, &cert_path, &key_path)?;
        }
        let read = |p: &PathBuf| {
            std::fs::read_to_string(p).map_err(|e| CaError(format!("{}: {e}", p.display())))
        };
        let (cert_pem, key_pem) = (read(&cert_path)?, read(&key_path)?);
        let key = KeyPair::from_pem(&key_pem).map_err(fail(key_path.display().to_string()))?;
        let issuer = Issuer::from_ca_cert_pem(&cert_pem, key)
            .map_err(fail(cert_path.display().to_string()))?;
        let cert = rustls_pki_types::pem::PemObject::from_pem_slice(cert_pem.as_bytes())
            .map_err(|e| CaError(format!("{}: {e}", cert_path.display())))?;
        write_bundle(dir, system_roots, &cert_pem)?;
        Ok(Ca {
            issuer,
            cert,
            configs: moka::sync::Cache::builder()
                .max_capacity(1_000)
                .time_to_live(Duration::from_secs(24 * 3600))
                .build(),
        })
    }

    /// The TLS server configuration presenting a certificate for `host`.
    pub fn server_config(&self, host: &str) -> Result<Arc<ServerConfig>, CaError> {
        if let Some(c) = self.configs.get(host) {
            return Ok(c);
        }
        let config = Arc::new(self.mint(host)?);
        self.configs.insert(host.to_owned(), config.clone());
        Ok(config)
    }

    fn mint(&self, host: &str) -> Result<ServerConfig, CaError> {
        let mut params = CertificateParams::new(vec![host.to_owned()])
            .map_err(fail(format!("leaf for {host}")))?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, host);
        params.distinguished_name = dn;
        let now = time_now();
        params.not_before = now - time::Duration::hours(1);
        params.not_after = now + time::Duration::days(7);
        params.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate().map_err(fail("leaf key"))?;
        let leaf = params
            .signed_by(&key, &self.issuer)
            .map_err(fail(format!("leaf for {host}")))?;
        let chain = vec![leaf.der().clone(), self.cert.clone()];
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| CaError(format!("TLS versions: {e}")))?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| CaError(format!("leaf for {host}: {e}")))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    }
}

/// Writes `ca-bundle.pem`: the system's roots followed by the sidecar's CA.
/// `SSL_CERT_FILE` and `REQUESTS_CA_BUNDLE` replace a client's roots, so an
/// agent pointed at this file still verifies the hosts that are tunnelled
/// untouched. Rewritten at every start (the roots may have changed), through
/// a temporary file so that a reader never sees half of it.
fn write_bundle(
    dir: &Path,
    system_roots: &[CertificateDer<'static>],
    ca_pem: &str,
) -> Result<(), CaError> {
    let roots: Vec<pem::Pem> = system_roots
        .iter()
        .map(|root| pem::Pem::new("CERTIFICATE", root.as_ref()))
        .collect();
    let config = pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF);
    let mut bundle = pem::encode_many_config(&roots, config);
    bundle.push_str(ca_pem);
    let (tmp, path) = (dir.join(".ca-bundle.pem.tmp"), dir.join(CA_BUNDLE));
    std::fs::write(&tmp, bundle)
        .and_then(|()| std::fs::rename(&tmp, &path))
        .map_err(|e| CaError(format!("{}: {e}", path.display())))
}

fn time_now() -> time::OffsetDateTime {
    time::OffsetDateTime::now_utc()
}

fn generate(dir: &Path, cert_path: &Path, key_path: &Path) -> Result<(), CaError> {
    std::fs::create_dir_all(dir).map_err(|e| CaError(format!("{}: {e}", dir.display())))?;
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "Warden sidecar CA");
    dn.push(DnType::OrganizationName, "Warden");
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let now = time_now();
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + time::Duration::days(3650);
    let key = KeyPair::generate().map_err(fail("CA key"))?;
    let cert = params.self_signed(&key).map_err(fail("CA certificate"))?;
    write_private(key_path, key.serialize_pem().as_bytes())?;
    std::fs::write(cert_path, cert.pem())
        .map_err(|e| CaError(format!("{}: {e}", cert_path.display())))?;
    tracing::info!(cert = %cert_path.display(), "generated the sidecar's CA");
    Ok(())
}

/// Writes a file only its owner can read.
fn write_private(path: &Path, bytes: &[u8]) -> Result<(), CaError> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options
        .open(path)
        .map_err(|e| CaError(format!("{}: {e}", path.display())))?;
    file.write_all(bytes)
        .map_err(|e| CaError(format!("{}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_ca_is_reloaded_and_mints_cached_leaves() {
        let dir = std::env::temp_dir().join(format!("warden-ca-{}", uuid::Uuid::new_v4()));
        let roots = rustls_native_certs::load_native_certs().certs;
        let ca = Ca::load_or_generate(&dir, &roots).unwrap();
        let first = ca.server_config("127.0.0.1").unwrap();
        assert!(Arc::ptr_eq(&first, &ca.server_config("127.0.0.1").unwrap()));
        let pem = std::fs::read_to_string(dir.join(CA_CERT)).unwrap();
        let again = Ca::load_or_generate(&dir, &roots).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join(CA_CERT)).unwrap(),
            pem,
            "not regenerated"
        );
        again.server_config("api.example.com").unwrap();
        // The bundle holds the system's roots, then the CA, each parseable.
        let bundle = std::fs::read(dir.join(CA_BUNDLE)).unwrap();
        use rustls_pki_types::pem::PemObject as _;
        let certs: Vec<_> = rustls_pki_types::CertificateDer::pem_slice_iter(&bundle)
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(certs.len(), roots.len() + 1);
        assert_eq!(
            certs.last().map(|c| c.as_ref().to_vec()),
            Some(again.cert.as_ref().to_vec())
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.join(CA_KEY))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o077, 0, "the key is owner-only");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
