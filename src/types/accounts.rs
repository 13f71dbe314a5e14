//! Service accounts' tokens as the API and the service-account controller share them:
//! the Secret type and annotations that hold one, and the token's
//! format (it names the Secret that holds it, so checking one is a single lookup).

use base64::Engine;

/// The Secret type that holds a service account's token.
pub const SERVICE_ACCOUNT_TOKEN: &str = "kubernetes.io/service-account-token";
/// Annotations of a token Secret naming its service account.
pub const SA_NAME: &str = "kubernetes.io/service-account.name";
pub const SA_UID: &str = "kubernetes.io/service-account.uid";

/// A new service-account token naming the Secret `namespace/secret` that will hold it.
pub fn new_service_account_token(namespace: &str, secret: &str) -> String {
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let mut raw = [0u8; 32];
    getrandom::fill(&mut raw).expect("the OS random source works");
    format!(
        "bsa.{}.{}.{}",
        b64.encode(namespace),
        b64.encode(secret),
        b64.encode(raw)
    )
}

/// The namespace and Secret a service-account token names.
pub fn parse_service_account_token(token: &str) -> Option<(String, String)> {
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let mut parts = token.strip_prefix("bsa.")?.split('.');
    let ns = String::from_utf8(b64.decode(parts.next()?).ok()?).ok()?;
    let secret = String::from_utf8(b64.decode(parts.next()?).ok()?).ok()?;
    parts.next()?;
    parts.next().is_none().then_some((ns, secret))
}
