//! Container image references (`nginx`, `registry.k8s.io/pause:3.10`,
//! `quay.io/org/app@sha256:…`), parsed and normalised the way Docker,
//! containerd and the kubelet do it: the grammar of the `distribution/reference`
//! Go package plus its `ParseNormalizedNamed` rules (implicit `docker.io`
//! registry, `library/` prefix for official images, `index.docker.io` folded
//! into `docker.io`) and `TagNameOnly`'s implicit `latest` tag. Errors carry the
//! kubelet's `InvalidImageName` wording.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

/// Registry used when a reference names none.
const DEFAULT_REGISTRY: &str = "docker.io";
/// Docker Hub's historical name, canonicalised to [`DEFAULT_REGISTRY`].
const LEGACY_DEFAULT_REGISTRY: &str = "index.docker.io";
/// Namespace of Docker Hub's official images.
const OFFICIAL_PREFIX: &str = "library/";
/// Tag implied by a reference that has neither tag nor digest.
const DEFAULT_TAG: &str = "latest";
/// Maximum length of the repository path (the part after the registry).
const MAX_REPOSITORY_LEN: usize = 255;
/// Maximum length of a tag.
const MAX_TAG_LEN: usize = 128;

const ERR_INVALID_FORMAT: &str = "invalid reference format";
const ERR_UPPERCASE: &str = "repository name must be lowercase";
const ERR_EMPTY: &str = "repository name must have at least one component";
const ERR_DIGEST_FORMAT: &str = "invalid checksum digest format";
const ERR_DIGEST_LENGTH: &str = "invalid checksum digest length";

/// A fully normalised image reference.
///
/// `registry` is always set (`docker.io` when the input named none) and
/// `repository` is the path inside it (`library/nginx` for `nginx`). The tag
/// and digest are kept exactly as written; both may be present.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Reference {
    pub registry: String,
    pub repository: String,
    pub tag: Option<String>,
    pub digest: Option<String>,
}

/// Parses and normalises an image reference as the kubelet does
/// (`ParseNormalizedNamed`). No default tag is added; see
/// [`Reference::with_default_tag`].
///
/// The error is the user-facing reason, e.g.
/// `couldn't parse image name "a//b": invalid reference format`.
pub fn parse(s: &str) -> Result<Reference, String> {
    parse_normalized(s).map_err(|reason| format!("couldn't parse image name {s:?}: {reason}"))
}

/// The name an image is stored and listed under: the normalized reference, given the
/// `latest` tag when it names neither tag nor digest (`busybox` is
/// `docker.io/library/busybox:latest`).
pub fn normalize(s: &str) -> Result<String, String> {
    parse(s).map(|r| r.with_default_tag().to_string())
}

/// The Kubernetes default `imagePullPolicy` for `image`: `Always` when the
/// effective tag is `latest` (including the implicit `latest` of a reference
/// with neither tag nor digest), otherwise `IfNotPresent`. A digest-only
/// reference and an unparsable one both give `IfNotPresent`.
pub fn pull_policy_default(image: &str) -> &'static str {
    let tag = parse(image).ok().and_then(|r| r.with_default_tag().tag);
    if tag.as_deref() == Some(DEFAULT_TAG) {
        "Always"
    } else {
        "IfNotPresent"
    }
}

impl Reference {
    /// `registry/repository`, without tag or digest.
    pub fn name(&self) -> String {
        format!("{}/{}", self.registry, self.repository)
    }

    /// Adds the tag `latest` when the reference has neither a tag nor a
    /// digest (`TagNameOnly`); otherwise returns it unchanged.
    pub fn with_default_tag(mut self) -> Reference {
        if self.tag.is_none() && self.digest.is_none() {
            self.tag = Some(DEFAULT_TAG.to_string());
        }
        self
    }

    /// Docker's short form: `docker.io/` is dropped, and so is `library/` for
    /// single-level official images (`nginx:latest`, `user/app:1`). References
    /// on other registries are unchanged.
    pub fn familiar(&self) -> String {
        let mut out = if self.registry == DEFAULT_REGISTRY {
            match self.repository.strip_prefix(OFFICIAL_PREFIX) {
                Some(rest) if !rest.contains('/') => rest.to_string(),
                _ => self.repository.clone(),
            }
        } else {
            self.name()
        };
        self.push_suffix(&mut out);
        out
    }

    /// Whether the registry host (port ignored) is `localhost`, an address in
    /// 127.0.0.0/8, or the IPv6 loopback `[::1]`.
    pub fn is_loopback_registry(&self) -> bool {
        let host = self.registry_host();
        if host.eq_ignore_ascii_case("localhost") {
            return true;
        }
        if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            return inner.parse::<Ipv6Addr>().is_ok_and(|a| a.is_loopback());
        }
        host.parse::<Ipv4Addr>().is_ok_and(|a| a.is_loopback())
    }

    /// The registry without its `:port` (brackets of an IPv6 host kept).
    fn registry_host(&self) -> &str {
        let r = self.registry.as_str();
        if r.starts_with('[') {
            match r.find(']') {
                Some(end) => &r[..=end],
                None => r,
            }
        } else {
            r.split_once(':').map_or(r, |(host, _)| host)
        }
    }

    fn push_suffix(&self, out: &mut String) {
        if let Some(tag) = &self.tag {
            out.push(':');
            out.push_str(tag);
        }
        if let Some(digest) = &self.digest {
            out.push('@');
            out.push_str(digest);
        }
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = self.name();
        self.push_suffix(&mut out);
        f.write_str(&out)
    }
}

/// `ParseNormalizedNamed`, returning the bare reason on failure.
fn parse_normalized(s: &str) -> Result<Reference, String> {
    if is_identifier(s) {
        return Err(format!(
            "invalid repository name ({s}), cannot specify 64-byte hexadecimal strings"
        ));
    }
    let (registry, remainder) = split_docker_domain(s);
    // Everything up to the first ':' must be lowercase (this deliberately
    // mirrors upstream, digest algorithm included when there is no tag).
    let remote = remainder
        .split_once(':')
        .map_or(remainder.as_str(), |(r, _)| r);
    if remote.to_lowercase() != remote {
        return Err(format!(
            "{ERR_INVALID_FORMAT}: repository name ({remote}) must be lowercase"
        ));
    }
    let full = format!("{registry}/{remainder}");
    let parts = parse_strict(&full)?;
    // The grammar only leaves the domain out when the first component holds a
    // '.' yet is a path component rather than a host (e.g. `a_b.c/d`); such a
    // name has no usable registry, so it is refused here.
    let Some(domain) = parts.domain else {
        return Err(ERR_INVALID_FORMAT.to_string());
    };
    Ok(Reference {
        registry: domain.to_string(),
        repository: parts.path.to_string(),
        tag: parts.tag.map(str::to_string),
        digest: parts.digest.map(str::to_string),
    })
}

/// Splits a familiar name into registry and path, applying Docker Hub's
/// defaults. The input is not validated here.
fn split_docker_domain(name: &str) -> (&str, String) {
    let Some((first, rest)) = name.split_once('/') else {
        return (DEFAULT_REGISTRY, format!("{OFFICIAL_PREFIX}{name}"));
    };
    let (registry, remote) = if first == "localhost" {
        (first, rest)
    } else if first == LEGACY_DEFAULT_REGISTRY {
        (DEFAULT_REGISTRY, rest)
    } else if first.contains(['.', ':']) || first.to_lowercase() != first {
        (first, rest)
    } else {
        (DEFAULT_REGISTRY, name)
    };
    if registry == DEFAULT_REGISTRY && !remote.contains('/') {
        (registry, format!("{OFFICIAL_PREFIX}{remote}"))
    } else {
        (registry, remote.to_string())
    }
}

/// The pieces of a reference matched by the grammar.
struct Parts<'a> {
    domain: Option<&'a str>,
    path: &'a str,
    tag: Option<&'a str>,
    digest: Option<&'a str>,
}

/// distribution's `Parse`: grammar match plus length and digest checks.
fn parse_strict(s: &str) -> Result<Parts<'_>, String> {
    if s.is_empty() {
        return Err(ERR_EMPTY.to_string());
    }
    let Some(parts) = match_reference(s) else {
        let lower = s.to_lowercase();
        if lower != s && match_reference(&lower).is_some() {
            return Err(ERR_UPPERCASE.to_string());
        }
        return Err(ERR_INVALID_FORMAT.to_string());
    };
    if parts.path.len() > MAX_REPOSITORY_LEN {
        return Err(format!(
            "repository name must not be more than {MAX_REPOSITORY_LEN} characters"
        ));
    }
    if let Some(digest) = parts.digest {
        validate_digest(digest)?;
    }
    Ok(parts)
}

/// Matches `[domain '/'] path [':' tag] ['@' digest]`. As with the upstream
/// regular expression, the first component is taken as the domain whenever
/// it is a valid one and the rest still matches.
fn match_reference(s: &str) -> Option<Parts<'_>> {
    let (name_and_tag, digest) = match s.split_once('@') {
        Some((before, digest)) => (before, Some(digest)),
        None => (s, None),
    };
    if digest.is_some_and(|d| !is_digest_syntax(d)) {
        return None;
    }
    let with_domain = name_and_tag.split_once('/').and_then(|(first, rest)| {
        if !is_domain(first) {
            return None;
        }
        let (path, tag) = match_path_and_tag(rest)?;
        Some(Parts {
            domain: Some(first),
            path,
            tag,
            digest,
        })
    });
    with_domain.or_else(|| {
        let (path, tag) = match_path_and_tag(name_and_tag)?;
        Some(Parts {
            domain: None,
            path,
            tag,
            digest,
        })
    })
}

/// Matches `path [':' tag]`.
fn match_path_and_tag(s: &str) -> Option<(&str, Option<&str>)> {
    let (path, tag) = match s.split_once(':') {
        Some((path, tag)) => (path, Some(tag)),
        None => (s, None),
    };
    if !path.split('/').all(is_path_component) {
        return None;
    }
    if tag.is_some_and(|t| !is_tag(t)) {
        return None;
    }
    Some((path, tag))
}

/// `[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*`
fn is_path_component(c: &str) -> bool {
    let b = c.as_bytes();
    let mut i = 0;
    loop {
        let start = i;
        while i < b.len() && (b[i].is_ascii_lowercase() || b[i].is_ascii_digit()) {
            i += 1;
        }
        if i == start {
            return false;
        }
        if i == b.len() {
            return true;
        }
        match b[i] {
            b'.' => i += 1,
            b'_' => {
                i += 1;
                if b.get(i) == Some(&b'_') {
                    i += 1;
                }
            }
            b'-' => {
                while b.get(i) == Some(&b'-') {
                    i += 1;
                }
            }
            _ => return false,
        }
    }
}

/// `host [':' port]` where host is a dotted name (which covers IPv4) or a
/// bracketed IPv6 address.
fn is_domain(d: &str) -> bool {
    let (host_ok, port) = if let Some(rest) = d.strip_prefix('[') {
        let Some((inner, after)) = rest.split_once(']') else {
            return false;
        };
        let inner_ok =
            !inner.is_empty() && inner.bytes().all(|c| c.is_ascii_hexdigit() || c == b':');
        let port = match after {
            "" => None,
            _ => match after.strip_prefix(':') {
                Some(p) => Some(p),
                None => return false,
            },
        };
        (inner_ok, port)
    } else {
        let (host, port) = match d.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (d, None),
        };
        (host.split('.').all(is_domain_component), port)
    };
    host_ok && port.is_none_or(|p| !p.is_empty() && p.bytes().all(|c| c.is_ascii_digit()))
}

/// `[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]`
fn is_domain_component(c: &str) -> bool {
    let b = c.as_bytes();
    match (b.first(), b.last()) {
        (Some(first), Some(last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && b.iter().all(|&x| x.is_ascii_alphanumeric() || x == b'-')
        }
        _ => false,
    }
}

/// `[\w][\w.-]{0,127}`
fn is_tag(t: &str) -> bool {
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let b = t.as_bytes();
    match b.split_first() {
        Some((&first, rest)) => {
            b.len() <= MAX_TAG_LEN
                && word(first)
                && rest.iter().all(|&c| word(c) || c == b'.' || c == b'-')
        }
        None => false,
    }
}

/// `algorithm ':' hex` with algorithm
/// `[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*` and at least 32 hex
/// digits.
fn is_digest_syntax(d: &str) -> bool {
    let Some((algorithm, hex)) = d.split_once(':') else {
        return false;
    };
    let component_ok = |c: &str| {
        let b = c.as_bytes();
        b.first().is_some_and(u8::is_ascii_alphabetic) && b.iter().all(u8::is_ascii_alphanumeric)
    };
    algorithm.split(['-', '_', '+', '.']).all(component_ok)
        && hex.len() >= 32
        && hex.bytes().all(|c| c.is_ascii_hexdigit())
}

/// go-digest's checks for the algorithms Kubernetes registers: the encoded
/// part must have the hash's exact length and be lowercase hex. Other
/// algorithms are accepted once they pass the grammar.
fn validate_digest(d: &str) -> Result<(), String> {
    let Some((algorithm, hex)) = d.split_once(':') else {
        return Err(ERR_DIGEST_FORMAT.to_string());
    };
    let expected_len = match algorithm {
        "sha256" => 64,
        "sha384" => 96,
        "sha512" => 128,
        _ => return Ok(()),
    };
    if hex.len() != expected_len {
        return Err(ERR_DIGEST_LENGTH.to_string());
    }
    if !hex
        .bytes()
        .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
    {
        return Err(ERR_DIGEST_FORMAT.to_string());
    }
    Ok(())
}

/// A bare 64-character lowercase hex string (an image ID, not a name).
fn is_identifier(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn r(registry: &str, repository: &str, tag: Option<&str>, digest: Option<&str>) -> Reference {
        Reference {
            registry: registry.to_string(),
            repository: repository.to_string(),
            tag: tag.map(str::to_string),
            digest: digest.map(str::to_string),
        }
    }

    fn ok(s: &str) -> Reference {
        parse(s).unwrap_or_else(|e| panic!("{s:?} should parse: {e}"))
    }

    fn err(s: &str) -> String {
        match parse(s) {
            Ok(r) => panic!("{s:?} should not parse, got {r:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn normalize_gives_the_stored_name() {
        assert_eq!(
            normalize("busybox").unwrap(),
            "docker.io/library/busybox:latest"
        );
        assert_eq!(normalize("quay.io/a/b:1").unwrap(), "quay.io/a/b:1");
        assert!(normalize("Bad:Name").is_err());
    }

    #[test]
    fn docker_hub_short_names() {
        assert_eq!(ok("nginx"), r("docker.io", "library/nginx", None, None));
        assert_eq!(
            ok("nginx:1.25"),
            r("docker.io", "library/nginx", Some("1.25"), None)
        );
        assert_eq!(
            ok("library/nginx"),
            r("docker.io", "library/nginx", None, None)
        );
        assert_eq!(
            ok("docker.io/nginx"),
            r("docker.io", "library/nginx", None, None)
        );
        assert_eq!(
            ok("index.docker.io/library/nginx"),
            r("docker.io", "library/nginx", None, None)
        );
        assert_eq!(
            ok("index.docker.io/nginx"),
            r("docker.io", "library/nginx", None, None)
        );
        assert_eq!(
            ok("user/app:v1"),
            r("docker.io", "user/app", Some("v1"), None)
        );
        assert_eq!(ok("a/b/c"), r("docker.io", "a/b/c", None, None));
    }

    #[test]
    fn explicit_registries() {
        assert_eq!(ok("localhost/app"), r("localhost", "app", None, None));
        assert_eq!(
            ok("localhost:5000/app:1"),
            r("localhost:5000", "app", Some("1"), None)
        );
        assert_eq!(
            ok("127.0.0.1:5000/a/b/c:t"),
            r("127.0.0.1:5000", "a/b/c", Some("t"), None)
        );
        assert_eq!(ok("[::1]:5000/app"), r("[::1]:5000", "app", None, None));
        assert_eq!(ok("[::1]/app"), r("[::1]", "app", None, None));
        assert_eq!(
            ok("registry.k8s.io/pause:3.10"),
            r("registry.k8s.io", "pause", Some("3.10"), None)
        );
        assert_eq!(ok("myhost:5000/app"), r("myhost:5000", "app", None, None));
        // An uppercase first component is taken as a host name.
        assert_eq!(ok("MyHost/app"), r("MyHost", "app", None, None));
    }

    #[test]
    fn bare_localhost_is_a_repository() {
        assert_eq!(
            ok("localhost"),
            r("docker.io", "library/localhost", None, None)
        );
        assert_eq!(
            ok("localhost:5000"),
            r("docker.io", "library/localhost", Some("5000"), None)
        );
    }

    #[test]
    fn digests() {
        let d = format!("sha256:{HEX}");
        assert_eq!(
            ok(&format!("quay.io/org/app@{d}")),
            r("quay.io", "org/app", None, Some(&d))
        );
        assert_eq!(
            ok(&format!("app:tag@{d}")),
            r("docker.io", "library/app", Some("tag"), Some(&d))
        );
        let d512 = format!("sha512:{HEX}{HEX}");
        assert_eq!(
            ok(&format!("app@{d512}")).digest.as_deref(),
            Some(d512.as_str())
        );
        // Unregistered algorithms only need the grammar's >= 32 hex digits.
        let other = "blake3+x.y:0123456789ABCDEF0123456789abcdef";
        assert_eq!(ok(&format!("app@{other}")).digest.as_deref(), Some(other));
    }

    #[test]
    fn separators_in_path_components() {
        for name in ["a.b", "a_b", "a__b", "a-b", "a---b", "a1-b2.c3__d4"] {
            assert_eq!(ok(name).repository, format!("library/{name}"), "{name}");
        }
        for name in ["a..b", "a___b", "a.-b", "a_", "a-", ".a", "_a"] {
            err(name);
        }
    }

    #[test]
    fn invalid_format_errors() {
        for s in [
            "",
            "a//b",
            "-a",
            "a:",
            ":tag",
            "nginx:",
            "a/",
            "/a",
            "a@",
            "a:b:c",
            "a b",
            "a/b:t/c",
            "a.-b.com/x",
            "host:/x",
            "host:po/x",
            "[::1/x",
            "[]/x",
            "[::1]x/y",
            "[::1]:/x",
            "::1/x",
            "nginx:-tag",
            "nginx:.tag",
            "nginx:t@g",
            "a_b.c/d",
        ] {
            assert_eq!(
                err(s),
                format!("couldn't parse image name {s:?}: invalid reference format"),
                "{s:?}"
            );
        }
    }

    #[test]
    fn short_or_malformed_digest() {
        assert_eq!(
            err("nginx@sha256:abc"),
            "couldn't parse image name \"nginx@sha256:abc\": invalid reference format"
        );
        let forty = &HEX[..40];
        assert!(
            err(&format!("nginx@sha256:{forty}")).ends_with(": invalid checksum digest length")
        );
        let upper = HEX.to_uppercase();
        assert!(
            err(&format!("nginx@sha256:{upper}")).ends_with(": invalid checksum digest format")
        );
        assert!(err(&format!("nginx@sha512:{HEX}")).ends_with(": invalid checksum digest length"));
        err(&format!("nginx@1sha:{HEX}"));
        err(&format!("nginx@sha256:{HEX}@sha256:{HEX}"));
        err(&format!("nginx@sha256:{HEX}g"));
    }

    #[test]
    fn uppercase_repository_errors() {
        assert_eq!(
            err("Nginx"),
            "couldn't parse image name \"Nginx\": invalid reference format: \
             repository name (library/Nginx) must be lowercase"
        );
        assert!(err("user/App:v1").ends_with("repository name (user/App) must be lowercase"));
        assert!(err("localhost:5000/App").ends_with("repository name (App) must be lowercase"));
        // Uppercase first component taken as a domain but invalid as one.
        assert_eq!(
            err("My_Host/app"),
            "couldn't parse image name \"My_Host/app\": repository name must be lowercase"
        );
        // Uppercase tags are fine.
        assert_eq!(ok("nginx:V1").tag.as_deref(), Some("V1"));
    }

    #[test]
    fn identifier_is_refused() {
        assert!(err(HEX).contains("cannot specify 64-byte hexadecimal strings"));
    }

    #[test]
    fn tag_length() {
        let tag128 = format!("v{}", "1".repeat(127));
        assert_eq!(
            ok(&format!("nginx:{tag128}")).tag.as_deref(),
            Some(tag128.as_str())
        );
        let tag129 = format!("{tag128}1");
        assert!(err(&format!("nginx:{tag129}")).ends_with(": invalid reference format"));
    }

    #[test]
    fn repository_length() {
        // 8 ("library/") + 247 = 255 characters of path.
        let at_limit = "a".repeat(247);
        assert_eq!(ok(&at_limit).repository.len(), 255);
        let over = "a".repeat(248);
        assert_eq!(
            err(&over),
            format!(
                "couldn't parse image name {over:?}: repository name must not be more than 255 characters"
            )
        );
        // The registry does not count towards the limit.
        let path = "b".repeat(255);
        assert_eq!(ok(&format!("example.com/{path}")).repository, path);
        assert!(err(&format!("example.com/{path}b")).contains("more than 255 characters"));
    }

    #[test]
    fn default_tag() {
        assert_eq!(
            ok("nginx").with_default_tag().tag.as_deref(),
            Some("latest")
        );
        assert_eq!(ok("nginx:1").with_default_tag().tag.as_deref(), Some("1"));
        let digested = ok(&format!("nginx@sha256:{HEX}")).with_default_tag();
        assert_eq!(digested.tag, None);
    }

    #[test]
    fn display_and_name() {
        assert_eq!(ok("nginx").to_string(), "docker.io/library/nginx");
        assert_eq!(
            ok("nginx").with_default_tag().to_string(),
            "docker.io/library/nginx:latest"
        );
        assert_eq!(ok("user/app:v1").to_string(), "docker.io/user/app:v1");
        assert_eq!(
            ok(&format!("registry.example:5000/a/b@sha256:{HEX}")).to_string(),
            format!("registry.example:5000/a/b@sha256:{HEX}")
        );
        assert_eq!(
            ok(&format!("app:tag@sha256:{HEX}")).to_string(),
            format!("docker.io/library/app:tag@sha256:{HEX}")
        );
        assert_eq!(
            ok("index.docker.io/nginx:1").to_string(),
            "docker.io/library/nginx:1"
        );
        assert_eq!(ok("quay.io/org/app:1").name(), "quay.io/org/app");
        // Display output parses back to the same reference.
        for s in ["nginx:1", "[::1]:5000/app", "localhost/a/b:c"] {
            let parsed = ok(s);
            assert_eq!(ok(&parsed.to_string()), parsed);
        }
    }

    #[test]
    fn familiar_form() {
        assert_eq!(
            ok("docker.io/library/nginx:latest").familiar(),
            "nginx:latest"
        );
        assert_eq!(ok("nginx").familiar(), "nginx");
        assert_eq!(ok("docker.io/user/app:1").familiar(), "user/app:1");
        assert_eq!(ok("library/a/b").familiar(), "library/a/b");
        assert_eq!(
            ok("registry.k8s.io/pause:3.10").familiar(),
            "registry.k8s.io/pause:3.10"
        );
        assert_eq!(
            ok("localhost:5000/library/app").familiar(),
            "localhost:5000/library/app"
        );
        assert_eq!(
            ok(&format!("nginx:1@sha256:{HEX}")).familiar(),
            format!("nginx:1@sha256:{HEX}")
        );
    }

    #[test]
    fn loopback_registries() {
        for s in [
            "localhost/app",
            "localhost:5000/app",
            "127.0.0.1/app",
            "127.0.0.1:5000/app",
            "127.1.2.3:80/app",
            "[::1]/app",
            "[::1]:5000/app",
            "[0:0:0:0:0:0:0:1]:5000/app",
            "LOCALHOST/app",
        ] {
            assert!(ok(s).is_loopback_registry(), "{s}");
        }
        for s in [
            "nginx",
            "registry.k8s.io/pause",
            "128.0.0.1:5000/app",
            "10.0.0.1/app",
            "[::2]:5000/app",
            "localhost.example.com/app",
            "127.0.0.1.example/app",
        ] {
            assert!(!ok(s).is_loopback_registry(), "{s}");
        }
    }

    #[test]
    fn pull_policy_defaults() {
        assert_eq!(pull_policy_default("nginx"), "Always");
        assert_eq!(pull_policy_default("nginx:latest"), "Always");
        assert_eq!(pull_policy_default("localhost:5000/app"), "Always");
        assert_eq!(pull_policy_default("nginx:1.25"), "IfNotPresent");
        assert_eq!(
            pull_policy_default(&format!("nginx@sha256:{HEX}")),
            "IfNotPresent"
        );
        assert_eq!(
            pull_policy_default(&format!("nginx:1@sha256:{HEX}")),
            "IfNotPresent"
        );
        // Kubernetes looks at the tag only, so an explicit `latest` wins.
        assert_eq!(
            pull_policy_default(&format!("nginx:latest@sha256:{HEX}")),
            "Always"
        );
        assert_eq!(pull_policy_default("Nginx"), "IfNotPresent");
        assert_eq!(pull_policy_default(""), "IfNotPresent");
    }
}
