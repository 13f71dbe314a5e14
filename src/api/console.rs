//! The web console: the static files of `web/`, embedded into the binary and served under
//! `/console/`. They hold no secrets, so they need no token; the app itself signs in with a
//! bearer token and calls the same API as every other client.

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};

use super::error::Error;

/// One embedded file: its name under `web/`, its content type and its bytes.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    bytes: &'static [u8],
}

macro_rules! asset {
    ($name:literal, $type:expr) => {
        Asset {
            name: $name,
            content_type: $type,
            bytes: include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/web/", $name)),
        }
    };
}

const JS: &str = "text/javascript; charset=utf-8";

/// Every file of the console (a unit test checks the table against the folder).
static ASSETS: &[Asset] = &[
    asset!("index.html", "text/html; charset=utf-8"),
    asset!("style.css", "text/css; charset=utf-8"),
    asset!("icon.svg", "image/svg+xml"),
    asset!("app.js", JS),
    asset!("api.js", JS),
    asset!("dom.js", JS),
    asset!("views.js", JS),
    asset!("yaml.js", JS),
];

/// Files in `web/` that are documentation, not part of the app.
#[cfg(test)]
fn is_documentation(name: &str) -> bool {
    matches!(name, "README.md" | "CONTRACT.md") || name.ends_with(".png")
}

/// The content security policy: only the console's own files; no inline scripts or styles.
const CSP: &str = "default-src 'self'; img-src 'self' data:; style-src 'self'";

fn find(name: &str) -> Option<&'static Asset> {
    ASSETS.iter().find(|a| a.name == name)
}

fn serve(asset: &Asset) -> Response {
    let mut resp = (StatusCode::OK, asset.bytes).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(asset.content_type),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    resp
}

/// `GET /console`: the app lives under `/console/` (its relative module paths need the slash).
pub async fn bare() -> Redirect {
    Redirect::permanent("/console/")
}

/// `GET /console/`: the app's page.
pub async fn index() -> Response {
    match find("index.html") {
        Some(asset) => serve(asset),
        None => Error::NoRoute.into_response(),
    }
}

/// `GET /console/{file}`: one of the app's files, or 404.
pub async fn file(axum::extract::Path(name): axum::extract::Path<String>) -> Response {
    match find(&name) {
        Some(asset) => serve(asset),
        None => Error::NoRoute.into_response(),
    }
}

/// Whether a request comes from a browser navigating to a page.
pub fn wants_html(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/html"))
}

/// `GET /`: browsers go to the console; other clients get what they always got.
pub async fn root(headers: HeaderMap) -> Response {
    if wants_html(&headers) {
        // 302 (not 303): what browsers and the tests of the console expect of a moved page.
        (StatusCode::FOUND, [(header::LOCATION, "/console/")]).into_response()
    } else {
        Error::NoRoute.into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_of_web_is_embedded() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("web");
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .expect("read web/")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|n| !is_documentation(n))
            .collect();
        on_disk.sort();
        let mut embedded: Vec<String> = ASSETS.iter().map(|a| a.name.to_string()).collect();
        embedded.sort();
        assert_eq!(
            on_disk, embedded,
            "web/ and the console's asset table differ"
        );
    }

    #[test]
    fn content_types_follow_the_extension() {
        for a in ASSETS {
            let ext = a.name.rsplit('.').next().unwrap_or_default();
            let expected = match ext {
                "html" => "text/html",
                "js" => "text/javascript",
                "css" => "text/css",
                "svg" => "image/svg+xml",
                other => panic!("no content type known for .{other} ({})", a.name),
            };
            assert!(
                a.content_type.starts_with(expected),
                "{}: {}",
                a.name,
                a.content_type
            );
        }
    }

    #[test]
    fn answers_carry_the_security_headers() {
        let resp = serve(find("app.js").expect("app.js"));
        let h = resp.headers();
        assert_eq!(h[header::CONTENT_SECURITY_POLICY], CSP);
        assert_eq!(h[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
        assert_eq!(h[header::CACHE_CONTROL], "no-cache");
        assert!(find("nope.js").is_none());
    }

    /// The console runs offline and under the CSP: nothing fetched from elsewhere, no inline
    /// scripts or styles, no browser dialogs (tests cannot answer them).
    #[test]
    fn the_assets_fetch_nothing_from_elsewhere_and_inline_nothing() {
        for a in ASSETS {
            let text = std::str::from_utf8(a.bytes).expect("text assets");
            // The SVG namespace is a name, not a fetch.
            let text = text.replace("xmlns=\"http://www.w3.org/2000/svg\"", "");
            for bad in [
                "http://",
                "https://",
                "//cdn",
                "@import",
                "innerHTML",
                "eval(",
            ] {
                assert!(!text.contains(bad), "{} contains {bad:?}", a.name);
            }
            for dialog in ["confirm(", "prompt(", "alert("] {
                assert!(
                    !text.contains(&format!("window.{dialog}"))
                        && !text.contains(&format!(" {dialog}")),
                    "{} opens a browser dialog ({dialog})",
                    a.name
                );
            }
            if a.name.ends_with(".html") {
                assert!(!text.contains(" style="), "{}: inline style", a.name);
                assert!(!text.contains("<style"), "{}: inline style", a.name);
                for (i, _) in text.match_indices(" on") {
                    let attr: String = text[i + 1..]
                        .chars()
                        .take_while(|c| c.is_ascii_alphabetic())
                        .collect();
                    let handler = text[i + 1 + attr.len()..].starts_with('=');
                    assert!(!handler, "{}: inline handler {attr}", a.name);
                }
                for (i, _) in text.match_indices("<script") {
                    let tag = &text[i..i + text[i..].find('>').expect("tag end")];
                    assert!(tag.contains(" src="), "{}: inline script {tag}", a.name);
                }
            }
        }
    }

    #[test]
    fn html_is_recognised_in_accept() {
        let mut h = HeaderMap::new();
        assert!(!wants_html(&h));
        h.insert(header::ACCEPT, HeaderValue::from_static("application/json"));
        assert!(!wants_html(&h));
        h.insert(
            header::ACCEPT,
            HeaderValue::from_static("text/html,application/xhtml+xml,*/*;q=0.8"),
        );
        assert!(wants_html(&h));
    }
}
