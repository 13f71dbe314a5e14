//! Bound service-account tokens: JWTs signed with ES256 (through `jsonwebtoken`, on
//! `ring`) by a key kept in the data directory, made by the TokenRequest API
//! (`serviceaccounts/{name}/token`, what `kubectl create token` calls) for a set of
//! audiences, an expiry and optionally an object (a Pod, Secret or Node) they end with,
//! with upstream's claims (`iss`, `sub`, `aud`, `exp`, `iat`, `nbf`, `jti`,
//! `kubernetes.io`). A request's token is checked each time: signature, expiry, the API's
//! audience, and the account (and the object it is bound to) still being there with the
//! same uid — deleting either revokes it.

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde_json::{Value, json};

use super::catalog::{self, Kind};
use super::{Cause, Error, Registry, User};

/// The issuer of berth's tokens, and the audience the API accepts (as kube-apiserver's
/// default `--service-account-issuer`).
pub const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// A token's lifetime when the request names none (upstream: one hour).
const DEFAULT_EXPIRATION_SECONDS: i64 = 3600;
/// The shortest lifetime a request may ask for.
const MIN_EXPIRATION_SECONDS: i64 = 600;
/// The longest (upstream's validation limit, 2³² seconds).
const MAX_EXPIRATION_SECONDS: i64 = 1 << 32;

/// The signing and verifying keys of the cluster's tokens, parsed once.
pub struct Keys {
    encoding: EncodingKey,
    decoding: DecodingKey,
    /// The `kid` header: a digest of the public key, so keys can be told apart.
    key_id: String,
    validation: Validation,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keys")
            .field("key_id", &self.key_id)
            .finish_non_exhaustive()
    }
}

impl Keys {
    /// Keys from a P-256 private key (PKCS#8 DER) and its public key (the uncompressed
    /// point).
    pub fn new(private_pkcs8: &[u8], public_point: &[u8]) -> Keys {
        use base64::Engine;
        use sha2::Digest;
        let digest = sha2::Sha256::digest(public_point);
        let mut validation = Validation::new(Algorithm::ES256);
        validation.set_audience(&[ISSUER]);
        validation.set_issuer(&[ISSUER]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        validation.validate_nbf = true;
        validation.leeway = 0;
        Keys {
            encoding: EncodingKey::from_ec_der(private_pkcs8),
            decoding: DecodingKey::from_ec_der(public_point),
            key_id: base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&digest[..16]),
            validation,
        }
    }

    fn sign(&self, claims: &Value) -> Result<String, Error> {
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(self.key_id.clone());
        jsonwebtoken::encode(&header, claims, &self.encoding)
            .map_err(|e| Error::Internal(format!("sign a service account token: {e}")))
    }
}

/// Whether `token` is shaped as a JWT (three base64url parts, a JSON header first).
pub fn looks_like_jwt(token: &str) -> bool {
    token.starts_with("eyJ") && token.bytes().filter(|b| *b == b'.').count() == 2
}

fn invalid(name: &str, causes: Vec<Cause>) -> Error {
    Error::Invalid {
        group: "authentication.k8s.io".into(),
        kind: "TokenRequest".into(),
        name: name.into(),
        causes,
    }
}

/// The stored object `kind`/`ns`/`name`, parsed.
fn stored(reg: &Registry, kind: Kind, ns: Option<&str>, name: &str) -> Option<Value> {
    let rec = reg.store.get(&catalog::of(kind).key(ns, name))?;
    serde_json::from_slice(&rec.value).ok()
}

/// The kinds a token may be bound to, by their `kind` and `apiVersion`.
const BINDABLE: &[(&str, Kind)] = &[
    ("Pod", Kind::Pod),
    ("Secret", Kind::Secret),
    ("Node", Kind::Node),
];

/// Carries out a TokenRequest for service account `ns`/`name`: the TokenRequest with
/// its status (the token and when it expires).
pub(super) fn request(reg: &Registry, ns: &str, name: &str, body: &Value) -> Result<Value, Error> {
    let Some(keys) = reg.token_keys.get() else {
        return Err(Error::Internal(
            "this server has no key to sign service account tokens with".into(),
        ));
    };
    if !body.is_object() || body.get("spec").is_some_and(|s| !s.is_object()) {
        return Err(Error::BadRequest(
            "a TokenRequest body is an object with a spec".into(),
        ));
    }
    let spec = &body["spec"];
    let mut causes = Vec::new();
    let audiences: Vec<String> = match spec.get("audiences") {
        None | Some(Value::Null) => vec![ISSUER.to_string()],
        Some(Value::Array(a)) if a.is_empty() => vec![ISSUER.to_string()],
        Some(Value::Array(a)) => a
            .iter()
            .enumerate()
            .filter_map(|(i, v)| match v.as_str() {
                Some(s) if !s.is_empty() => Some(s.to_string()),
                _ => {
                    causes.push(Cause::invalid(
                        &format!("spec.audiences[{i}]"),
                        v,
                        "must be a non-empty string",
                    ));
                    None
                }
            })
            .collect(),
        Some(other) => {
            causes.push(Cause::invalid(
                "spec.audiences",
                other,
                "must be a list of strings",
            ));
            Vec::new()
        }
    };
    let seconds = match spec.get("expirationSeconds") {
        None | Some(Value::Null) => DEFAULT_EXPIRATION_SECONDS,
        Some(v) => match v.as_i64() {
            Some(s) if s < MIN_EXPIRATION_SECONDS => {
                causes.push(Cause::invalid(
                    "spec.expirationSeconds",
                    v,
                    "may not specify a duration less than 10 minutes",
                ));
                0
            }
            Some(s) if s > MAX_EXPIRATION_SECONDS => {
                causes.push(Cause::invalid(
                    "spec.expirationSeconds",
                    v,
                    "may not specify a duration larger than 2^32 seconds",
                ));
                0
            }
            Some(s) => s,
            None => {
                causes.push(Cause::invalid(
                    "spec.expirationSeconds",
                    v,
                    "must be a whole number of seconds",
                ));
                0
            }
        },
    };
    // The object the token ends with.
    let mut bound = None;
    if let Some(r) = spec.get("boundObjectRef").filter(|r| !r.is_null()) {
        let kind = r["kind"].as_str().unwrap_or("");
        let obj_name = r["name"].as_str().unwrap_or("");
        match BINDABLE.iter().find(|(k, _)| *k == kind) {
            None => causes.push(Cause::not_supported(
                "spec.boundObjectRef.kind",
                kind,
                &["Pod", "Secret", "Node"],
            )),
            Some(_) if obj_name.is_empty() => {
                causes.push(Cause::required("spec.boundObjectRef.name"))
            }
            Some((kind, k)) => {
                let obj_ns = (*k != Kind::Node).then_some(ns);
                let Some(obj) = stored(reg, *k, obj_ns, obj_name) else {
                    return Err(Error::NotFound {
                        group: String::new(),
                        resource: catalog::of(*k).plural.clone(),
                        name: obj_name.to_string(),
                    });
                };
                let uid = obj["metadata"]["uid"].as_str().unwrap_or("").to_string();
                if let Some(want) = r["uid"].as_str().filter(|u| !u.is_empty())
                    && want != uid
                {
                    return Err(Error::Conflict {
                        group: String::new(),
                        resource: catalog::of(*k).plural.clone(),
                        name: obj_name.to_string(),
                        message: format!(
                            "the UID in the bound object reference ({want}) does not match the UID in record. The object might have been deleted and then recreated"
                        ),
                    });
                }
                bound = Some((*kind, obj_name.to_string(), uid, obj));
            }
        }
    }
    if !causes.is_empty() {
        return Err(invalid(name, causes));
    }
    let Some(sa) = stored(reg, Kind::ServiceAccount, Some(ns), name) else {
        return Err(Error::NotFound {
            group: String::new(),
            resource: "serviceaccounts".into(),
            name: name.to_string(),
        });
    };
    let sa_uid = sa["metadata"]["uid"].as_str().unwrap_or("");
    let now = jiff::Timestamp::now();
    let exp = now.as_second() + seconds;
    let mut private = json!({
        "namespace": ns,
        "serviceaccount": {"name": name, "uid": sa_uid},
    });
    if let Some((kind, obj_name, uid, obj)) = &bound {
        private[kind.to_ascii_lowercase()] = json!({"name": obj_name, "uid": uid});
        // A pod's token names its node too, as upstream's does.
        if *kind == "Pod"
            && let Some(node) = obj.pointer("/spec/nodeName").and_then(Value::as_str)
            && let Some(n) = stored(reg, Kind::Node, None, node)
        {
            private["node"] = json!({"name": node, "uid": n["metadata"]["uid"]});
        }
    }
    let claims = json!({
        "iss": ISSUER,
        "sub": format!("system:serviceaccount:{ns}:{name}"),
        "aud": audiences,
        "exp": exp,
        "iat": now.as_second(),
        "nbf": now.as_second(),
        "jti": uuid::Uuid::new_v4().to_string(),
        "kubernetes.io": private,
    });
    let token = keys.sign(&claims)?;
    let expires = jiff::Timestamp::from_second(exp)
        .map_err(|e| Error::Internal(format!("token expiry: {e}")))?;
    let mut spec_out = json!({"audiences": audiences, "expirationSeconds": seconds});
    if let Some(r) = spec.get("boundObjectRef").filter(|r| !r.is_null()) {
        let mut r = r.clone();
        if let Some((_, _, uid, _)) = &bound {
            r["uid"] = json!(uid);
        }
        spec_out["boundObjectRef"] = r;
    }
    Ok(json!({
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"name": name, "namespace": ns, "creationTimestamp": crate::types::now()},
        "spec": spec_out,
        "status": {
            "token": token,
            "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        },
    }))
}

/// The service account a bound token is of, when it is valid now: signed by this
/// cluster, not expired, for the API's audience, its account and bound object alive with
/// the uids it names.
pub(super) fn authenticate(reg: &Registry, token: &str) -> Option<User> {
    let keys = reg.token_keys.get()?;
    let data = jsonwebtoken::decode::<Value>(token, &keys.decoding, &keys.validation).ok()?;
    let claims = data.claims;
    let private = &claims["kubernetes.io"];
    let ns = private["namespace"].as_str()?;
    let sa_name = private.pointer("/serviceaccount/name")?.as_str()?;
    if claims["sub"].as_str()? != format!("system:serviceaccount:{ns}:{sa_name}") {
        return None;
    }
    let alive = |kind: Kind, obj_ns: Option<&str>, at: &str| -> Option<()> {
        let name = private.pointer(&format!("/{at}/name"))?.as_str()?;
        let uid = private.pointer(&format!("/{at}/uid"))?.as_str()?;
        let obj = stored(reg, kind, obj_ns, name)?;
        if obj["metadata"]["uid"].as_str() != Some(uid) {
            return None;
        }
        // A pod being deleted past its grace period no longer speaks for anyone.
        if let Some(gone) = obj
            .pointer("/metadata/deletionTimestamp")
            .and_then(Value::as_str)
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
            && gone <= jiff::Timestamp::now()
        {
            return None;
        }
        Some(())
    };
    alive(Kind::ServiceAccount, Some(ns), "serviceaccount")?;
    if private.get("pod").is_some() {
        alive(Kind::Pod, Some(ns), "pod")?;
    }
    if private.get("secret").is_some() {
        alive(Kind::Secret, Some(ns), "secret")?;
    }
    if private.get("node").is_some() && private.get("pod").is_none() {
        alive(Kind::Node, None, "node")?;
    }
    Some(User {
        name: format!("system:serviceaccount:{ns}:{sa_name}"),
        uid: private
            .pointer("/serviceaccount/uid")
            .and_then(Value::as_str)
            .map(str::to_string),
        groups: vec![
            "system:serviceaccounts".into(),
            format!("system:serviceaccounts:{ns}"),
            "system:authenticated".into(),
        ],
        namespace: Some(ns.to_string()),
    })
}

/// The strategy of core/v1 ServiceAccounts: stored as sent, with the `token`
/// subresource (TokenRequest) carried out here.
pub struct ServiceAccount;

impl super::strategy::Strategy for ServiceAccount {
    fn act<'a>(
        &'a self,
        reg: &'a Registry,
        sub: &'a str,
        ns: Option<&'a str>,
        name: &'a str,
        body: &'a Value,
        _opts: &'a super::WriteOptions,
    ) -> super::strategy::BoxFuture<'a, Result<super::strategy::Acted, Error>> {
        let answer = match sub {
            "token" => request(reg, ns.unwrap_or_default(), name, body).map(|out| {
                super::strategy::Acted::Created(
                    serde_json::to_vec(&out).expect("JSON serializes").into(),
                )
            }),
            _ => Err(Error::MethodNotAllowed(format!(
                "serviceaccounts do not serve the subresource {sub:?}"
            ))),
        };
        Box::pin(std::future::ready(answer))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_jwts_of_the_cluster_key_only() {
        let key = rcgen::KeyPair::generate().unwrap();
        let keys = Keys::new(&key.serialize_der(), key.public_key_raw());
        let claims = json!({"iss": ISSUER, "sub": "system:serviceaccount:a:b", "aud": [ISSUER],
            "exp": jiff::Timestamp::now().as_second() + 60});
        let token = keys.sign(&claims).unwrap();
        assert!(looks_like_jwt(&token));
        let back = jsonwebtoken::decode::<Value>(&token, &keys.decoding, &keys.validation).unwrap();
        assert_eq!(back.claims["sub"], "system:serviceaccount:a:b");
        // Another key's token, another audience or an expired one is refused.
        let other = rcgen::KeyPair::generate().unwrap();
        let other = Keys::new(&other.serialize_der(), other.public_key_raw());
        let forged = other.sign(&claims).unwrap();
        assert!(jsonwebtoken::decode::<Value>(&forged, &keys.decoding, &keys.validation).is_err());
        let mut elsewhere = claims.clone();
        elsewhere["aud"] = json!(["vault"]);
        let t = keys.sign(&elsewhere).unwrap();
        assert!(jsonwebtoken::decode::<Value>(&t, &keys.decoding, &keys.validation).is_err());
        let mut old = claims;
        old["exp"] = json!(jiff::Timestamp::now().as_second() - 5);
        let t = keys.sign(&old).unwrap();
        assert!(jsonwebtoken::decode::<Value>(&t, &keys.decoding, &keys.validation).is_err());
        assert!(!looks_like_jwt("0123456789abcdef"));
    }
}
