//! Which encoding an answer takes, from the request's Accept header, as kube-apiserver
//! negotiates it: JSON (also for `*/*` and the `as=Table` forms), YAML for answers that
//! are not streams, and 406 NotAcceptable, before anything is done, when the client takes
//! neither. berth never answers protobuf; clients that ask for it also take JSON.

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::error::{Error, Result};

/// The encoding of an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Json,
    Yaml,
}

/// The answer `headers` ask for; `stream`: the answer is a watch, which is JSON only.
pub fn negotiate(headers: &HeaderMap, stream: bool) -> Result<Answer> {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else {
        return Ok(Answer::Json);
    };
    // The acceptable range of the highest q; of equal ones, the first given.
    let mut best: Option<(f32, Answer)> = None;
    let mut named = false;
    for range in accept.split(',') {
        let mut params = range.split(';');
        let media = params.next().unwrap_or("").trim();
        if media.is_empty() {
            continue;
        }
        named = true;
        let q = params
            .filter_map(|p| p.trim().strip_prefix("q="))
            .find_map(|q| q.trim().parse::<f32>().ok())
            .unwrap_or(1.0);
        let is = |m: &str| media.eq_ignore_ascii_case(m);
        let answer = if is("application/json") || is("application/*") || is("*/*") {
            Answer::Json
        } else if is("application/yaml") && !stream {
            Answer::Yaml
        } else {
            continue;
        };
        if q > 0.0 && best.is_none_or(|(b, _)| q > b) {
            best = Some((q, answer));
        }
    }
    if let Some((_, answer)) = best {
        return Ok(answer);
    }
    if !named {
        // `Accept:` with nothing in it.
        return Ok(Answer::Json);
    }
    let accepted = if stream {
        "application/json, application/json;stream=watch"
    } else {
        "application/json, application/yaml"
    };
    Err(Error::NotAcceptable(format!(
        "only the following media types are accepted: {accepted}"
    )))
}

/// Whether `headers` accept nothing but a Table (`application/json;as=Table;...`), which
/// an answer that is no list or object of a kind cannot be.
pub fn only_tables(headers: &HeaderMap) -> bool {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let mut ranges = accept
        .split(',')
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .peekable();
    ranges.peek().is_some()
        && ranges.all(|r| {
            r.split(';')
                .skip(1)
                .any(|p| p.trim().eq_ignore_ascii_case("as=Table"))
        })
}

/// `response` in YAML, if it is JSON.
pub async fn to_yaml(response: Response) -> Response {
    let json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !json {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let bytes = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!(error = %e, "could not read an answer to encode it as YAML");
            return Error::Unavailable("the answer could not be read; try again".into())
                .into_response();
        }
    };
    let yaml = serde_json::from_slice::<Value>(&bytes)
        .ok()
        .and_then(|v| serde_yaml_ng::to_string(&v).ok());
    let Some(yaml) = yaml else {
        return Response::from_parts(parts, Body::from(bytes));
    };
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/yaml"),
    );
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(yaml))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accept(v: &str, stream: bool) -> Result<Answer> {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT, HeaderValue::from_str(v).unwrap());
        negotiate(&h, stream)
    }

    #[test]
    fn kubectls_accept_lists_are_json_and_yaml_alone_is_yaml() {
        assert_eq!(negotiate(&HeaderMap::new(), false).unwrap(), Answer::Json);
        for json in [
            "application/json",
            "application/json, */*",
            "application/vnd.kubernetes.protobuf,application/json",
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json",
            "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
            "application/yaml;q=0.5, application/json",
        ] {
            assert_eq!(accept(json, false).unwrap(), Answer::Json, "{json}");
        }
        assert_eq!(accept("application/yaml", false).unwrap(), Answer::Yaml);
        assert_eq!(
            accept("application/json;q=0.1, application/yaml", false).unwrap(),
            Answer::Yaml
        );
    }

    #[test]
    fn what_berth_cannot_answer_is_not_acceptable() {
        for v in [
            "application/xml",
            "text/plain",
            "application/vnd.kubernetes.protobuf",
            "application/json;q=0",
        ] {
            let e = accept(v, false).unwrap_err();
            assert!(matches!(e, Error::NotAcceptable(_)), "{v}");
            assert!(e.to_string().contains("application/json, application/yaml"));
        }
        // A watch is a stream of JSON lines.
        let e = accept("application/yaml", true).unwrap_err();
        assert!(
            e.to_string().contains("application/json;stream=watch"),
            "{e}"
        );
        assert_eq!(
            accept("application/json;stream=watch", true).unwrap(),
            Answer::Json
        );
    }
}
