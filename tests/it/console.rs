//! The web console's static files: served without a token, with their content types and
//! security headers; `/` sends browsers there and leaves other clients as they were.

use crate::support::TestServer;

/// A client that does not follow redirects (to see them).
fn no_redirects(ca_pem: &str) -> reqwest::Client {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let tls = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

#[tokio::test]
async fn the_console_page_and_its_modules_need_no_token() {
    let s = TestServer::start().await;
    let client = no_redirects(&s.ca_pem);

    let resp = client
        .get(format!("{}/console/", s.url))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let h = resp.headers().clone();
    assert!(h["content-type"].to_str().unwrap().starts_with("text/html"));
    let csp = h["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("default-src 'self'"), "{csp}");
    assert!(!csp.contains("unsafe-inline"), "{csp}");
    assert_eq!(h["x-content-type-options"], "nosniff");
    assert!(h.contains_key("cache-control"));
    let page = resp.text().await.unwrap();
    assert!(
        page.contains(r#"<script type="module" src="app.js">"#),
        "{page}"
    );
    assert!(!page.contains("<style"), "no inline styles");

    let resp = client
        .get(format!("{}/console/app.js", s.url))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/javascript")
    );
    assert!(resp.text().await.unwrap().contains("import "));

    let resp = client
        .get(format!("{}/console/style.css", s.url))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/css")
    );

    // `/console` without the slash goes to the app.
    let resp = client
        .get(format!("{}/console", s.url))
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_redirection(), "{}", resp.status());
    assert_eq!(resp.headers()["location"], "/console/");
    s.stop().await;
}

#[tokio::test]
async fn an_unknown_asset_is_a_404_status() {
    let s = TestServer::start().await;
    let client = no_redirects(&s.ca_pem);
    for path in [
        "/console/nope.js",
        "/console/../Cargo.toml",
        "/console/a/b.js",
    ] {
        let resp = client.get(format!("{}{path}", s.url)).send().await.unwrap();
        assert_eq!(resp.status(), 404, "{path}");
        let body: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(body["kind"], "Status", "{path}");
        assert_eq!(body["reason"], "NotFound", "{path}");
    }
    s.stop().await;
}

#[tokio::test]
async fn browsers_asking_for_the_root_go_to_the_console() {
    let s = TestServer::start().await;
    let client = no_redirects(&s.ca_pem);
    let resp = client
        .get(format!("{}/", s.url))
        .header("accept", "text/html,application/xhtml+xml,*/*;q=0.8")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 302, "a temporary redirect");
    assert_eq!(resp.headers()["location"], "/console/");
    s.stop().await;
}

#[tokio::test]
async fn other_clients_of_the_root_see_no_change() {
    let s = TestServer::start().await;
    let client = no_redirects(&s.ca_pem);
    for accept in [None, Some("application/json"), Some("*/*")] {
        let mut req = client.get(format!("{}/", s.url));
        if let Some(a) = accept {
            req = req.header("accept", a);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), 404, "{accept:?}");
        let body: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(body["kind"], "Status");
        assert_eq!(body["reason"], "NotFound");
    }
    // With a token, too: the API has never had anything at `/`.
    let (code, body) = s.get("/").await;
    assert_eq!(code, 404);
    assert_eq!(body["reason"], "NotFound");
    s.stop().await;
}
