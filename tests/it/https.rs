//! An HTTPS client that trusts a berth CA, shared by the end-to-end tests and the benches.

/// A client trusting `ca_pem`; `h2` negotiates HTTP/2 (all requests share one connection),
/// otherwise it speaks HTTP/1.1 with a pool of keep-alive connections.
pub fn client_with(ca_pem: &str, h2: bool) -> reqwest::Client {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let mut tls = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let builder = if h2 {
        tls.alpn_protocols = vec![b"h2".to_vec()];
        reqwest::Client::builder().tls_backend_preconfigured(tls)
    } else {
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .http1_only()
            .pool_max_idle_per_host(2000)
    };
    builder.build().unwrap()
}
