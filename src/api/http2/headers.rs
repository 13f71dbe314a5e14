//! Header blocks: a response's (or trailers') encoded as HPACK literals that never touch
//! the peer's table, and a request's decoded fields checked into a request head.

use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Uri};
use bytes::Bytes;

/// Appends an HPACK integer with an `prefix`-bit prefix whose other bits are `first`.
fn hpack_int(out: &mut Vec<u8>, first: u8, prefix: u8, mut n: usize) {
    let max = (1usize << prefix) - 1;
    if n < max {
        out.push(first | n as u8);
        return;
    }
    out.push(first | max as u8);
    n -= max;
    while n >= 128 {
        out.push((n % 128) as u8 | 0x80);
        n /= 128;
    }
    out.push(n as u8);
}

/// Appends a header field as a literal that is not indexed: the client's dynamic table is
/// never touched, so no table size needs agreeing on.
pub(super) fn hpack_literal(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.push(0);
    hpack_int(out, 0, 7, name.len());
    out.extend_from_slice(name);
    hpack_int(out, 0, 7, value.len());
    out.extend_from_slice(value);
}

/// The header block of a response (or, with no status, of trailers).
pub(super) fn encode_headers(
    status: Option<u16>,
    headers: &HeaderMap,
    length: Option<u64>,
) -> Vec<u8> {
    let mut block = Vec::with_capacity(64 + headers.len() * 32);
    if let Some(status) = status {
        // `:status` by its index in the static table (8), value as a literal.
        block.push(0x08);
        block.push(3);
        block.extend_from_slice(status.to_string().as_bytes());
    }
    for (name, value) in headers {
        if is_connection_specific(name) {
            continue;
        }
        hpack_literal(&mut block, name.as_str().as_bytes(), value.as_bytes());
    }
    if let Some(n) = length
        && !headers.contains_key(axum::http::header::CONTENT_LENGTH)
    {
        hpack_literal(&mut block, b"content-length", n.to_string().as_bytes());
    }
    block
}

/// Fields that HTTP/2 forbids, as they describe an HTTP/1.1 connection.
fn is_connection_specific(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection" | "keep-alive" | "proxy-connection" | "transfer-encoding" | "upgrade"
    )
}

/// A decoded request head.
#[derive(Default)]
pub(super) struct Head {
    method: Option<Method>,
    scheme: Option<Bytes>,
    authority: Option<Bytes>,
    path: Option<Bytes>,
    pub(super) headers: HeaderMap,
    /// Why the request is malformed, if it is.
    pub(super) malformed: Option<&'static str>,
}

impl Head {
    pub(super) fn field(&mut self, name: &[u8], value: &[u8], regular_seen: &mut bool) {
        if self.malformed.is_some() {
            return;
        }
        if let Some(pseudo) = name.strip_prefix(b":") {
            if *regular_seen {
                self.malformed = Some("pseudo-header after a regular header");
                return;
            }
            let slot = match pseudo {
                b"method" => {
                    if self.method.is_some() {
                        self.malformed = Some("duplicate :method");
                        return;
                    }
                    match Method::from_bytes(value) {
                        Ok(m) => self.method = Some(m),
                        Err(_) => self.malformed = Some("invalid :method"),
                    }
                    return;
                }
                b"scheme" => &mut self.scheme,
                b"authority" => &mut self.authority,
                b"path" => &mut self.path,
                _ => {
                    self.malformed = Some("unknown pseudo-header");
                    return;
                }
            };
            if slot.is_some() {
                self.malformed = Some("duplicate pseudo-header");
                return;
            }
            *slot = Some(Bytes::copy_from_slice(value));
            return;
        }
        *regular_seen = true;
        if name.iter().any(u8::is_ascii_uppercase) {
            self.malformed = Some("uppercase header name");
            return;
        }
        let (Ok(name), Ok(value)) = (HeaderName::from_bytes(name), HeaderValue::from_bytes(value))
        else {
            self.malformed = Some("invalid header field");
            return;
        };
        if is_connection_specific(&name) || (name == axum::http::header::TE && value != "trailers")
        {
            self.malformed = Some("connection-specific header field");
            return;
        }
        self.headers.append(name, value);
    }

    pub(super) fn into_request(self) -> Result<(axum::http::request::Parts, bool), &'static str> {
        if let Some(why) = self.malformed {
            return Err(why);
        }
        let method = self.method.ok_or("missing :method")?;
        if method == Method::CONNECT {
            return Err("CONNECT is not supported");
        }
        let path = self.path.filter(|p| !p.is_empty()).ok_or("missing :path")?;
        let mut uri = Uri::builder().path_and_query(&path[..]);
        if let Some(authority) = self.authority {
            let scheme = self.scheme.ok_or("missing :scheme")?;
            uri = uri.scheme(&scheme[..]).authority(&authority[..]);
        } else if self.scheme.is_none() {
            return Err("missing :scheme");
        }
        let uri = uri.build().map_err(|_| "invalid :path or :authority")?;
        let head = method == Method::HEAD;
        let mut req = Request::builder()
            .method(method)
            .uri(uri)
            .version(axum::http::Version::HTTP_2)
            .body(())
            .map_err(|_| "invalid request")?;
        *req.headers_mut() = self.headers;
        Ok((req.into_parts().0, head))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hpack_integers_use_their_prefix_and_continue_in_7_bit_groups() {
        let mut out = Vec::new();
        hpack_int(&mut out, 0, 7, 126);
        hpack_int(&mut out, 0, 7, 127);
        hpack_int(&mut out, 0, 7, 1337);
        assert_eq!(out, vec![126, 127, 0, 127, 0xba, 0x09]);
        let mut block = Vec::new();
        let mut headers = HeaderMap::new();
        headers.insert("x-long", HeaderValue::from_str(&"v".repeat(300)).unwrap());
        headers.insert("connection", HeaderValue::from_static("close"));
        block.extend(encode_headers(Some(200), &headers, Some(3)));
        let mut fields = Vec::new();
        loona_hpack::Decoder::new()
            .decode_with_cb(&block, |n, v| fields.push((n.to_vec(), v.len())))
            .unwrap();
        assert_eq!(
            fields,
            vec![
                (b":status".to_vec(), 3),
                (b"x-long".to_vec(), 300),
                (b"content-length".to_vec(), 1)
            ]
        );
    }
}
