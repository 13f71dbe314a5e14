//! `GET pods/{name}/log`: a container's log as `kubectl logs` asks for it (`container`,
//! `previous`, `follow`, `tailLines`, `sinceSeconds`, `sinceTime`, `timestamps`,
//! `limitBytes`), as `text/plain`, streamed when following. The log comes from the node
//! that runs the pod, through [`NodeAccess`]. Asked for with a WebSocket upgrade, the same
//! answer goes out as WebSocket messages, as kube-apiserver streams logs to a browser or
//! to its conformance suite: raw bytes in binary messages (`binary.k8s.io`, or no
//! protocol at all), or base64 text (`base64.binary.k8s.io`), then a close.

use std::path::PathBuf;

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::error::Error;
use super::resources::flag;
use crate::runtime::logs;

/// What the API needs of the node that runs a pod: its containers' logs and a way to
/// run a command beside one.
pub trait NodeAccess: Send + Sync {
    /// The directory of the newest instance of `container` in pod `uid` (with `previous`,
    /// the one before), if the node has it.
    fn instance(&self, pod_uid: &str, container: &str, previous: bool) -> Option<PathBuf>;

    /// The environment and working directory of a running container.
    fn exec_context(&self, pod_uid: &str, container: &str) -> Option<super::exec::ExecContext>;

    /// Where to attach to a running container, and how it runs.
    fn attach_target(&self, pod_uid: &str, container: &str) -> Option<super::exec::AttachTarget>;
}

fn number(q: &super::resources::Query, name: &str) -> Result<Option<i64>, Error> {
    q.get(name)
        .map(|v| {
            v.parse::<i64>()
                .map_err(|_| Error::BadRequest(format!("{name} must be a number, not {v:?}")))
        })
        .transpose()
}

/// A plain-text answer.
pub fn text(body: String) -> Response {
    let mut r = (StatusCode::OK, body).into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    r
}

/// Serves the log of a container of `pod`.
pub fn serve(
    source: Option<&dyn NodeAccess>,
    pod: &Value,
    q: &super::resources::Query,
) -> Result<Response, Error> {
    let name = pod["metadata"]["name"].as_str().unwrap_or("");
    let containers: Vec<&str> = ["initContainers", "containers"]
        .iter()
        .filter_map(|k| pod["spec"][*k].as_array())
        .flatten()
        .filter_map(|c| c["name"].as_str())
        .collect();
    let app: Vec<&str> = pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str())
        .collect();
    let container = match q.get("container").filter(|c| !c.is_empty()) {
        Some(c) if containers.contains(&c.as_str()) => c.clone(),
        Some(c) => {
            return Err(Error::BadRequest(format!(
                "container {c} is not valid for pod {name}"
            )));
        }
        None if app.len() == 1 => app[0].to_string(),
        None => {
            return Err(Error::BadRequest(format!(
                "a container name must be specified for pod {name}, choose one of: [{}]",
                app.join(" ")
            )));
        }
    };
    if pod["spec"]["nodeName"].as_str().unwrap_or("").is_empty() {
        return Err(Error::BadRequest(format!(
            "pod {name} does not have a host assigned"
        )));
    }
    let previous = flag(q, "previous");
    let uid = pod["metadata"]["uid"].as_str().unwrap_or("");
    let Some(dir) = source.and_then(|s| s.instance(uid, &container, previous)) else {
        let message = if previous {
            format!("previous terminated container {container:?} in pod {name:?} not found")
        } else {
            let reason = pod["status"]["containerStatuses"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|c| c["name"] == container.as_str())
                .and_then(|c| c.pointer("/state/waiting/reason"))
                .and_then(Value::as_str)
                .unwrap_or("ContainerCreating");
            format!("container {container:?} in pod {name:?} is waiting to start: {reason}")
        };
        return Err(Error::BadRequest(message));
    };
    let since =
        match (q.get("sinceTime"), number(q, "sinceSeconds")?) {
            (Some(t), _) => Some(t.parse::<jiff::Timestamp>().map_err(|e| {
                Error::BadRequest(format!("sinceTime must be an RFC 3339 time: {e}"))
            })?),
            (None, Some(s)) if s > 0 => {
                Some(jiff::Timestamp::now() - jiff::SignedDuration::from_secs(s))
            }
            (None, Some(s)) => {
                return Err(Error::Registry(crate::registry::Error::Invalid {
                    group: "".into(),
                    kind: "PodLogOptions".into(),
                    name: String::new(),
                    causes: vec![crate::registry::Cause::invalid(
                        "sinceSeconds",
                        &serde_json::json!(s),
                        "must be greater than 0",
                    )],
                }));
            }
            (None, None) => None,
        };
    let opts = logs::Options {
        follow: flag(q, "follow") && !previous,
        tail_lines: number(q, "tailLines")?.map(|n| n.max(0) as usize),
        since,
        timestamps: flag(q, "timestamps"),
        limit_bytes: number(q, "limitBytes")?.map(|n| n.max(0) as usize),
    };
    let (text, position) = logs::read(&dir, &opts).map_err(|e| {
        Error::Registry(crate::registry::Error::Internal(format!(
            "read the log of {name}/{container}: {e}"
        )))
    })?;
    let body = if opts.follow {
        let sent = text.len();
        let first =
            futures_util::stream::once(
                async move { Ok::<_, std::io::Error>(bytes::Bytes::from(text)) },
            );
        let rest = logs::follow(dir, opts, position, sent);
        Body::from_stream(futures_util::StreamExt::chain(first, rest))
    } else {
        Body::from(text)
    };
    let mut r = (StatusCode::OK, body).into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    Ok(r)
}

/// The protocols a log streamed over WebSocket is offered in: (name, base64).
const WEBSOCKET_PROTOCOLS: [(&str, bool); 2] =
    [("binary.k8s.io", false), ("base64.binary.k8s.io", true)];

/// Whether the log goes out as base64 text: the client's first served offer decides;
/// binary when it offers none.
fn websocket_protocol(offered: &[String]) -> Result<Option<(&'static str, bool)>, Error> {
    if offered.is_empty() {
        return Ok(None);
    }
    offered
        .iter()
        .find_map(|o| WEBSOCKET_PROTOCOLS.iter().find(|(n, _)| n == o).copied())
        .map(Some)
        .ok_or_else(|| {
            Error::BadRequest(format!(
                "requested protocol(s) are not supported: [{}]; supports [{}]",
                offered.join(" "),
                WEBSOCKET_PROTOCOLS.map(|(n, _)| n).join(" ")
            ))
        })
}

/// Sends `answer`, a log served by [`serve`] (whole or followed), over the WebSocket the
/// client asked for: a message for each chunk of the body, then a normal close. A client
/// that goes away ends the stream, and with it the follow.
pub fn websocket(mut ws: super::exec::Upgrade, answer: Response) -> Response {
    use axum::extract::ws::{CloseFrame, Message, close_code};
    use base64::Engine as _;
    use futures_util::{SinkExt as _, StreamExt as _};
    let protocol = match websocket_protocol(&ws.offered) {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    let base64 = protocol.is_some_and(|(_, b)| b);
    if let Some((name, _)) = protocol {
        ws.ws.set_selected_protocol(HeaderValue::from_static(name));
    }
    let body = answer.into_body();
    ws.ws
        .on_upgrade(move |socket| async move {
            let (mut tx, mut rx) = socket.split();
            let mut chunks = body.into_data_stream();
            loop {
                tokio::select! {
                    chunk = chunks.next() => match chunk {
                        Some(Ok(data)) if data.is_empty() => {}
                        Some(Ok(data)) => {
                            let msg = if base64 {
                                Message::text(base64::engine::general_purpose::STANDARD.encode(&data))
                            } else {
                                Message::Binary(data)
                            };
                            if tx.send(msg).await.is_err() {
                                return;
                            }
                        }
                        Some(Err(e)) => {
                            tracing::debug!(error = %e, "a log streamed over WebSocket ended early");
                            break;
                        }
                        None => break,
                    },
                    // The client sends nothing but control frames; its close or its
                    // going away ends the stream.
                    incoming = rx.next() => match incoming {
                        Some(Ok(Message::Close(_)) | Err(_)) | None => return,
                        Some(Ok(_)) => {}
                    },
                }
            }
            let close = CloseFrame {
                code: close_code::NORMAL,
                reason: "".into(),
            };
            let _ = tx.send(Message::Close(Some(close))).await;
        })
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_over_websocket_is_binary_unless_base64_is_offered_first() {
        let offer = |o: &[&str]| o.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(websocket_protocol(&[]).unwrap(), None);
        assert_eq!(
            websocket_protocol(&offer(&["base64.binary.k8s.io", "binary.k8s.io"])).unwrap(),
            Some(("base64.binary.k8s.io", true))
        );
        assert_eq!(
            websocket_protocol(&offer(&["v4.channel.k8s.io", "binary.k8s.io"])).unwrap(),
            Some(("binary.k8s.io", false))
        );
        let err = websocket_protocol(&offer(&["v4.channel.k8s.io"])).unwrap_err();
        assert!(err.to_string().contains("not supported"), "{err}");
    }
}
