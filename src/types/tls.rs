//! TLS toward a pod's own server, whose certificate nobody can check: the kubelet's
//! HTTPS probes ask only whether the container answers, and the API server's
//! `pods/proxy` and `services/proxy` reach a pod's `https:` port as kube-apiserver
//! does, without verifying it.

/// Accepts any server certificate.
#[derive(Debug)]
struct AnyCertificate(rustls::crypto::CryptoProvider);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The TLS client configuration that accepts any server certificate, made once.
pub fn insecure_client() -> std::sync::Arc<rustls::ClientConfig> {
    static CONFIG: std::sync::OnceLock<std::sync::Arc<rustls::ClientConfig>> =
        std::sync::OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let provider = rustls::crypto::ring::default_provider();
            let config =
                rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(provider.clone()))
                    .with_safe_default_protocol_versions()
                    .expect("ring supports the default protocol versions")
                    .dangerous()
                    .with_custom_certificate_verifier(std::sync::Arc::new(AnyCertificate(provider)))
                    .with_no_client_auth();
            std::sync::Arc::new(config)
        })
        .clone()
}
