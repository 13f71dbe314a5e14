//! `pods/{name}/proxy` and `services/{name}/proxy`: HTTP requests passed through the API
//! to a pod's port, as kube-apiserver's `ProxyREST` does (what `kubectl get --raw
//! /api/v1/namespaces/NS/services/NAME:PORT/proxy/PATH` and dashboards reached through
//! `kubectl proxy` use).
//!
//! The name is `NAME`, `NAME:PORT` or `SCHEME:NAME:PORT` (`http` or `https`; an HTTPS
//! pod's certificate is not checked, as upstream). A pod is reached at its address and
//! the port given, else its first container port. A Service's port is a port name, or a
//! number that names one of its ports; the request goes to a random ready address of
//! its Endpoints with that port that is a pod's own address (as upstream, never an
//! arbitrary address someone wrote into Endpoints). Addresses that are not a pod's to
//! serve — loopback, link-local, multicast, unspecified — are refused, so the API
//! cannot be turned toward the node's own services.
//!
//! The method, the path below `proxy`, the query, the headers (but the hop-by-hop ones
//! and the caller's `Authorization`, which is the API's, never the pod's) and the body
//! are passed on; the answer comes back as the pod gave it, streamed, with a
//! `Location` that names a path of the pod rewritten to the proxy's path. An upgrade
//! (WebSocket) over HTTP/1.1 is passed on and both ends joined. The API server reaches
//! pods through the node's network, so this serves the pods of this machine's network.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use hyper_util::rt::TokioIo;
use serde_json::Value;

use super::AppState;
use super::error::{Error, Result};
use crate::registry::{Kind, User, catalog};
use crate::types::json::{array_at, str_at};

/// How long a connection to the pod may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// What is proxied to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Through {
    Pod,
    Service,
}

impl Through {
    fn plural(self) -> &'static str {
        match self {
            Through::Pod => "pods",
            Through::Service => "services",
        }
    }
}

/// `SplitSchemeNamePort`: `name`, `name:port` or `scheme:name:port`.
pub fn split_scheme_name_port(id: &str) -> Option<(&str, &str, &str)> {
    let parts: Vec<&str> = id.split(':').collect();
    let (scheme, name, port) = match parts[..] {
        [name] => ("", name, ""),
        [name, port] => ("", name, port),
        [scheme, name, port] => (scheme, name, port),
        _ => return None,
    };
    (!name.is_empty() && matches!(scheme, "" | "http" | "https")).then_some((scheme, name, port))
}

/// Whether a pod may be reached at `ip` through the API: an address of a network, not
/// one of the node's own reserved ones.
fn allowed(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            !(v4.is_loopback()
                || v4.is_link_local()
                || v4.is_multicast()
                || v4.is_unspecified()
                || v4.is_broadcast())
        }
        IpAddr::V6(v6) => {
            !(v6.is_loopback()
                || v6.is_multicast()
                || v6.is_unspecified()
                || v6.is_unicast_link_local())
        }
    }
}

/// The pod's addresses (`status.podIPs`, else `status.podIP`).
fn pod_ips(pod: &Value) -> Vec<String> {
    let mut ips: Vec<String> = array_at(pod, "/status/podIPs")
        .iter()
        .map(|ip| str_at(ip, "/ip").to_string())
        .filter(|ip| !ip.is_empty())
        .collect();
    if ips.is_empty() && !str_at(pod, "/status/podIP").is_empty() {
        ips.push(str_at(pod, "/status/podIP").to_string());
    }
    ips
}

fn get(state: &AppState, kind: Kind, ns: &str, name: &str) -> Result<Value> {
    let bytes = state.registry.get(catalog::of(kind), Some(ns), name)?;
    serde_json::from_slice(&bytes).map_err(|e| Error::BadRequest(e.to_string()))
}

/// Where a pod's proxy goes: its address and the port given, else its first container
/// port, else 80.
fn pod_location(state: &AppState, ns: &str, name: &str, port: &str) -> Result<SocketAddr> {
    let port = (!port.is_empty())
        .then(|| {
            port.parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| Error::BadRequest(format!("invalid port {port:?}")))
        })
        .transpose()?;
    let pod = get(state, Kind::Pod, ns, name)?;
    let ip = str_at(&pod, "/status/podIP");
    let ip: IpAddr = ip.parse().ok().filter(|ip| allowed(*ip)).ok_or_else(|| {
        Error::BadRequest(format!(
            "address not allowed: pod {name:?} has no address the API may proxy to ({ip:?})"
        ))
    })?;
    let port = port.unwrap_or_else(|| {
        array_at(&pod, "/spec/containers")
            .iter()
            .flat_map(|c| array_at(c, "/ports"))
            .find_map(|p| p["containerPort"].as_u64())
            .map_or(80, |p| p as u16)
    });
    Ok(SocketAddr::new(ip, port))
}

/// Where a Service's proxy goes: a random ready address, among its Endpoints' with the
/// port named (a port number first becomes its port's name), that is a pod's.
fn service_location(state: &AppState, ns: &str, name: &str, port: &str) -> Result<SocketAddr> {
    let mut port_name = port.to_string();
    if let Ok(number) = port.parse::<i64>() {
        let svc = get(state, Kind::Service, ns, name)?;
        port_name = array_at(&svc, "/spec/ports")
            .iter()
            .find(|p| p["port"].as_i64() == Some(number))
            .map(|p| str_at(p, "/name").to_string())
            .ok_or_else(|| {
                Error::Unavailable(format!(
                    "no service port {number} found for service {name:?}"
                ))
            })?;
    }
    let no_endpoints =
        || Error::Unavailable(format!("no endpoints available for service {name:?}"));
    let found = get(state, Kind::Endpoints, ns, name);
    let endpoints = match found {
        Ok(e) => e,
        Err(Error::Registry(crate::registry::Error::NotFound { .. })) => {
            // A Service that is there, without Endpoints, is unavailable; one that is
            // not there is not found.
            get(state, Kind::Service, ns, name)?;
            return Err(no_endpoints());
        }
        Err(e) => return Err(e),
    };
    let mut candidates: Vec<(String, u16, String)> = Vec::new();
    for subset in array_at(&endpoints, "/subsets") {
        let Some(p) = array_at(subset, "/ports")
            .iter()
            .find(|p| str_at(p, "/name") == port_name)
            .and_then(|p| p["port"].as_u64())
        else {
            continue;
        };
        for address in array_at(subset, "/addresses") {
            let target = &address["targetRef"];
            if str_at(target, "/kind") == "Pod" {
                candidates.push((
                    str_at(address, "/ip").to_string(),
                    p as u16,
                    str_at(target, "/name").to_string(),
                ));
            }
        }
    }
    // Start at a random one; the first that is its pod's address wins.
    let start = if candidates.is_empty() {
        0
    } else {
        let mut b = [0u8; 4];
        getrandom::fill(&mut b).map_err(|e| Error::Unavailable(e.to_string()))?;
        u32::from_le_bytes(b) as usize % candidates.len()
    };
    for i in 0..candidates.len() {
        let (ip, port, pod) = &candidates[(start + i) % candidates.len()];
        let Ok(pod) = get(state, Kind::Pod, ns, pod) else {
            continue;
        };
        let Ok(addr) = ip.parse::<IpAddr>() else {
            continue;
        };
        if allowed(addr)
            && pod_ips(&pod)
                .iter()
                .any(|p| p.parse::<IpAddr>() == Ok(addr))
        {
            return Ok(SocketAddr::new(addr, *port));
        }
    }
    Err(no_endpoints())
}

/// Headers that belong to one connection, never passed on.
fn hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
    )
}

/// The headers passed on: the hop-by-hop ones and those the `Connection` header names
/// dropped (an upgrade's `Connection: Upgrade` and `Upgrade` kept), and `Authorization`.
fn pass_on(headers: &HeaderMap, request: bool) -> HeaderMap {
    let named: Vec<String> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|v| v.trim().to_ascii_lowercase())
        .collect();
    let upgrade = named.iter().any(|n| n == "upgrade") && headers.contains_key(header::UPGRADE);
    let mut out = HeaderMap::new();
    for (name, value) in headers {
        if hop_by_hop(name)
            || named.iter().any(|n| n == name.as_str())
            || (request && (name == header::AUTHORIZATION || name == header::HOST))
        {
            continue;
        }
        out.append(name.clone(), value.clone());
    }
    if upgrade {
        out.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
        if let Some(u) = headers.get(header::UPGRADE) {
            out.insert(header::UPGRADE, u.clone());
        }
    }
    out
}

/// The part of the request's path below `…/{name}/proxy`, and the proxy's own prefix.
fn split_path(path: &str) -> (String, String) {
    // /api/v1/namespaces/{ns}/{pods|services}/{id}/proxy[/rest]
    let mut seen = 0;
    for (i, c) in path.char_indices() {
        if c == '/' {
            seen += 1;
            if seen == 8 {
                return (path[..i].to_string(), path[i..].to_string());
            }
        }
    }
    (path.to_string(), "/".to_string())
}

/// A `Location` the pod answered with, rewritten to go through the proxy when it names
/// a path of the pod.
fn rewrite_location(location: &str, prefix: &str, target: SocketAddr) -> Option<String> {
    if location.starts_with('/') && !location.starts_with("//") {
        return Some(format!("{prefix}{location}"));
    }
    let uri: Uri = location.parse().ok()?;
    let same = uri.authority().is_some_and(|a| {
        a.port_u16() == Some(target.port())
            && a.host().trim_matches(['[', ']']).parse::<IpAddr>() == Ok(target.ip())
    });
    if !same {
        return None;
    }
    let rest = uri.path_and_query().map_or("/", |p| p.as_str());
    Some(format!("{prefix}{rest}"))
}

/// Serves a proxy request to pod or Service `id` in `ns`.
pub async fn serve(
    state: AppState,
    user: User,
    through: Through,
    ns: String,
    id: String,
    req: Request,
) -> Response {
    let resource = through.plural();
    let result = async {
        let verb = super::authz::verb(req.method(), true, false);
        super::authz::check(
            &state.registry,
            &user,
            &super::authz::resource(verb, "", resource, Some("proxy"), Some(&ns), Some(&id)),
        )?;
        let (scheme, name, port) = split_scheme_name_port(&id)
            .ok_or_else(|| Error::BadRequest(format!("invalid {resource} request {id:?}")))?;
        let target = match through {
            Through::Pod => pod_location(&state, &ns, name, port)?,
            Through::Service => service_location(&state, &ns, name, port)?,
        };
        forward(req, scheme == "https", target).await
    }
    .await;
    result.unwrap_or_else(IntoResponse::into_response)
}

/// Sends `req` to `target` over a connection of its own and gives back the answer.
async fn forward(mut req: Request, tls: bool, target: SocketAddr) -> Result<Response> {
    let unreachable = |e: &dyn std::fmt::Display| {
        Error::Unavailable(format!("error trying to reach {target}: {e}"))
    };
    let (prefix, rest) = split_path(req.uri().path());
    let path_and_query = match req.uri().query() {
        Some(q) => format!("{rest}?{q}"),
        None => rest,
    };
    let mut headers = pass_on(req.headers(), true);
    let host = HeaderValue::from_str(&target.to_string()).map_err(|e| unreachable(&e))?;
    headers.insert(header::HOST, host);
    let wants_upgrade = headers.contains_key(header::UPGRADE);
    let client_upgrade = wants_upgrade.then(|| hyper::upgrade::on(&mut req));
    let mut out = axum::http::Request::builder()
        .method(req.method())
        .uri(path_and_query)
        .body(req.into_body())
        .map_err(|e| Error::BadRequest(e.to_string()))?;
    *out.headers_mut() = headers;

    let tcp = tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(target))
        .await
        .map_err(|_| unreachable(&"connection timed out"))?
        .map_err(|e| unreachable(&e))?;
    let _ = tcp.set_nodelay(true);
    let answer = if tls {
        let name = rustls::pki_types::ServerName::IpAddress(target.ip().into());
        let stream = tokio_rustls::TlsConnector::from(crate::types::tls::insecure_client())
            .connect(name, tcp)
            .await
            .map_err(|e| unreachable(&e))?;
        send(TokioIo::new(stream), out).await
    } else {
        send(TokioIo::new(tcp), out).await
    }
    .map_err(|e| unreachable(&e))?;

    let mut answer = answer;
    let pod_side = (answer.status() == StatusCode::SWITCHING_PROTOCOLS)
        .then(|| hyper::upgrade::on(&mut answer));
    let (mut parts, body) = answer.into_parts();
    let mut headers = pass_on(&parts.headers, false);
    if let Some(location) = parts.headers.get(header::LOCATION) {
        let rewritten = location
            .to_str()
            .ok()
            .and_then(|l| rewrite_location(l, &prefix, target))
            .and_then(|l| HeaderValue::from_str(&l).ok());
        if let Some(l) = rewritten {
            headers.insert(header::LOCATION, l);
        }
    }
    if let (Some(pod_side), Some(client)) = (pod_side, client_upgrade) {
        tokio::spawn(async move {
            let (Ok(client), Ok(pod)) = (client.await, pod_side.await) else {
                return;
            };
            let (mut a, mut b) = (TokioIo::new(client), TokioIo::new(pod));
            let _ = tokio::io::copy_bidirectional(&mut a, &mut b).await;
        });
        let mut response = Response::new(Body::empty());
        *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
        *response.headers_mut() = headers;
        return Ok(response);
    }
    parts.headers = headers;
    Ok(Response::from_parts(parts, Body::new(body)))
}

/// One request over a new HTTP/1.1 connection, the connection driven until it ends
/// (or is upgraded).
async fn send<S>(
    io: TokioIo<S>,
    req: axum::http::Request<Body>,
) -> std::result::Result<axum::http::Response<hyper::body::Incoming>, hyper::Error>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await?;
    tokio::spawn(async move {
        if let Err(e) = conn.with_upgrades().await {
            tracing::debug!(error = %e, "a proxied connection ended with an error");
        }
    });
    sender.send_request(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_split_as_upstream() {
        assert_eq!(split_scheme_name_port("web"), Some(("", "web", "")));
        assert_eq!(split_scheme_name_port("web:80"), Some(("", "web", "80")));
        assert_eq!(
            split_scheme_name_port("https:web:tls"),
            Some(("https", "web", "tls"))
        );
        assert_eq!(split_scheme_name_port("ftp:web:21"), None);
        assert_eq!(split_scheme_name_port(":80"), None);
        assert_eq!(split_scheme_name_port("a:b:c:d"), None);
    }

    #[test]
    fn the_nodes_own_addresses_are_not_proxied_to() {
        for ip in [
            "127.0.0.1",
            "169.254.169.254",
            "0.0.0.0",
            "::1",
            "fe80::1",
            "224.0.0.1",
        ] {
            assert!(!allowed(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["10.42.0.7", "192.168.1.9", "fd42::7"] {
            assert!(allowed(ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn the_path_below_proxy_is_kept_whole() {
        let (prefix, rest) = split_path("/api/v1/namespaces/default/pods/web:80/proxy/a/b/");
        assert_eq!(prefix, "/api/v1/namespaces/default/pods/web:80/proxy");
        assert_eq!(rest, "/a/b/");
        let (_, rest) = split_path("/api/v1/namespaces/default/services/web/proxy");
        assert_eq!(rest, "/");
    }

    #[test]
    fn hop_by_hop_headers_and_the_callers_token_stay_behind() {
        let mut h = HeaderMap::new();
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer admin"),
        );
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, x-private"),
        );
        h.insert("x-private", HeaderValue::from_static("1"));
        h.insert("x-kept", HeaderValue::from_static("2"));
        h.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        let out = pass_on(&h, true);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out["x-kept"], "2");
        // An upgrade keeps what makes it one.
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        let out = pass_on(&h, true);
        assert_eq!(out[header::UPGRADE], "websocket");
        assert_eq!(out[header::CONNECTION], "Upgrade");
    }

    #[test]
    fn a_redirect_to_the_pod_stays_in_the_proxy() {
        let prefix = "/api/v1/namespaces/default/pods/web/proxy";
        let target: SocketAddr = "10.42.0.7:8080".parse().unwrap();
        assert_eq!(
            rewrite_location("/login?next=/", prefix, target).as_deref(),
            Some("/api/v1/namespaces/default/pods/web/proxy/login?next=/")
        );
        assert_eq!(
            rewrite_location("http://10.42.0.7:8080/x", prefix, target).as_deref(),
            Some("/api/v1/namespaces/default/pods/web/proxy/x")
        );
        assert_eq!(
            rewrite_location("https://example.com/", prefix, target),
            None
        );
        assert_eq!(rewrite_location("//example.com/", prefix, target), None);
    }
}
