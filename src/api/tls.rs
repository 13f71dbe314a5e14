//! TLS: a certificate authority generated at first start (`DATA/ca.crt`, key in
//! `DATA/pki/ca.key`), and a serving certificate signed by it, made anew at every start
//! for the names the server answers to. Or certificate files given by the user.

use std::path::Path;
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// What can go wrong setting up TLS.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Cert(String),
}

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let context = context.into();
    move |source| Error::Io { context, source }
}

fn cert_err(context: &str) -> impl FnOnce(rcgen::Error) -> Error + '_ {
    move |e| Error::Cert(format!("{context}: {e}"))
}

/// Writes `contents` to `path` readable by the owner only.
pub fn write_private(path: &Path, contents: &[u8]) -> Result<(), Error> {
    use std::io::Write;
    #[cfg(unix)]
    use std::os::unix::fs::OpenOptionsExt;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    opts.mode(0o600);
    let mut f = opts
        .open(path)
        .map_err(io(format!("write {}", path.display())))?;
    f.write_all(contents)
        .and_then(|()| f.sync_all())
        .map_err(io(format!("write {}", path.display())))
}

/// The CA's subject; the issuer built from it must name the CA exactly so.
fn ca_params() -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "berth-ca");
    dn.push(DnType::OrganizationName, "berth");
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = rcgen::date_time_ymd(2024, 1, 1);
    params.not_after = rcgen::date_time_ymd(2124, 1, 1);
    params
}

/// The CA certificate (PEM) and key of `data_dir`, made on first use.
pub fn ensure_ca(data_dir: &Path) -> Result<(String, KeyPair), Error> {
    let cert_path = data_dir.join("ca.crt");
    let key_path = data_dir.join("pki").join("ca.key");
    if cert_path.exists() && key_path.exists() {
        let cert = std::fs::read_to_string(&cert_path)
            .map_err(io(format!("read {}", cert_path.display())))?;
        let key_pem = crate::types::private::read(&key_path)
            .map_err(io(format!("read {}", key_path.display())))?
            .unwrap_or_default();
        let key = KeyPair::from_pem(&key_pem).map_err(cert_err("read the CA key"))?;
        return Ok((cert, key));
    }
    std::fs::create_dir_all(data_dir.join("pki")).map_err(io("create the pki directory"))?;
    let key = KeyPair::generate().map_err(cert_err("generate the CA key"))?;
    let cert = ca_params()
        .self_signed(&key)
        .map_err(cert_err("sign the CA certificate"))?;
    write_private(&key_path, key.serialize_pem().as_bytes())?;
    std::fs::write(&cert_path, cert.pem()).map_err(io(format!("write {}", cert_path.display())))?;
    tracing::info!(ca = %cert_path.display(), "generated a certificate authority");
    Ok((cert.pem(), key))
}

/// The key service-account tokens are signed with (`DATA/pki/sa.key`, P-256, made on
/// first use): its PKCS#8 DER and its public key (the uncompressed point).
pub fn ensure_service_account_key(data_dir: &Path) -> Result<(Vec<u8>, Vec<u8>), Error> {
    let key_path = data_dir.join("pki").join("sa.key");
    let key = match crate::types::private::read(&key_path)
        .map_err(io(format!("read {}", key_path.display())))?
    {
        Some(pem) => KeyPair::from_pem(&pem).map_err(cert_err("read the service account key"))?,
        None => {
            std::fs::create_dir_all(data_dir.join("pki"))
                .map_err(io("create the pki directory"))?;
            let key = KeyPair::generate().map_err(cert_err("generate the service account key"))?;
            write_private(&key_path, key.serialize_pem().as_bytes())?;
            key
        }
    };
    Ok((key.serialize_der(), key.public_key_raw().to_vec()))
}

/// A serving certificate (chain PEM) and key (PEM) for `hosts`, signed by the CA.
pub fn serving_cert(ca_key: &KeyPair, hosts: &[String]) -> Result<(String, String), Error> {
    let issuer = Issuer::new(ca_params(), ca_key);
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "berth-apiserver");
    params.distinguished_name = dn;
    params.subject_alt_names = hosts
        .iter()
        .map(|h| match h.parse::<std::net::IpAddr>() {
            Ok(ip) => Ok(SanType::IpAddress(ip)),
            Err(_) => h
                .clone()
                .try_into()
                .map(SanType::DnsName)
                .map_err(|e: rcgen::Error| Error::Cert(format!("host name {h:?}: {e}"))),
        })
        .collect::<Result<_, _>>()?;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.not_before = rcgen::date_time_ymd(2024, 1, 1);
    params.not_after = rcgen::date_time_ymd(2124, 1, 1);
    let key = KeyPair::generate().map_err(cert_err("generate the serving key"))?;
    let cert = params
        .signed_by(&key, &issuer)
        .map_err(cert_err("sign the serving certificate"))?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// A rustls server configuration for the chain and key (PEM), offering HTTP/2 and HTTP/1.1.
pub fn server_config(chain_pem: &str, key_pem: &str) -> Result<Arc<rustls::ServerConfig>, Error> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(chain_pem.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| Error::Cert(format!("read the certificate chain: {e}")))?;
    if chain.is_empty() {
        return Err(Error::Cert(
            "the certificate file holds no certificate".into(),
        ));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
        .map_err(|e| Error::Cert(format!("read the private key: {e}")))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Cert(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| Error::Cert(format!("the certificate and key do not fit: {e}")))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ca_is_made_once_and_signs_serving_certificates() {
        let dir = tempfile::tempdir().unwrap();
        let (ca1, key) = ensure_ca(dir.path()).unwrap();
        let (ca2, _) = ensure_ca(dir.path()).unwrap();
        assert_eq!(ca1, ca2, "the CA is reused");
        let (chain, skey) = serving_cert(
            &key,
            &["127.0.0.1".into(), "localhost".into(), "::1".into()],
        )
        .unwrap();
        server_config(&chain, &skey).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join("pki/ca.key"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert!(server_config(&chain, "not a key").is_err());
    }
}
