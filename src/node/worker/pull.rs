//! A container's image: pulled by its pull policy with the pod's (or its service
//! account's) pull secrets and the kubelet's events; which images are berth's built-in ones.

use serde_json::Value;

use super::{Worker, str_at};
use crate::client::{Kind, catalog};
use crate::node::status::Waiting;
use crate::runtime::Runtime;

impl<R: Runtime + Clone> Worker<R> {
    /// Pulls `image` when its policy says so (`Always`; `IfNotPresent` and it is not in
    /// the store), with the events the kubelet writes; the waiting reason when it fails.
    pub(super) async fn pull(&self, pod: &Value, image: &str, policy: &str) -> Result<(), Waiting> {
        let Ok(name) = crate::image::reference::normalize(image) else {
            // Said by the resolution, as InvalidImageName.
            return Ok(());
        };
        let present = self.shared.puller.store().image(&name).is_some();
        let pull = match policy {
            "Never" => false,
            "Always" => true,
            _ => !present,
        };
        let recorder = &self.shared.recorder;
        if !pull {
            if present {
                let message = format!("Container image {image:?} already present on machine");
                recorder.normal(pod, "Pulled", &message).await;
            }
            return Ok(());
        }
        let message = format!("Pulling image {image:?}");
        recorder.normal(pod, "Pulling", &message).await;
        let credentials = self.pull_credentials(pod).await;
        let began = tokio::time::Instant::now();
        match self.shared.puller.pull(image, credentials, None).await {
            Ok(p) => {
                // As the kubelet: the pull's own time, then the time with the wait for
                // a pull of the same image under way.
                let message = format!(
                    "Successfully pulled image {image:?} in {:.3}s ({:.3}s including waiting). Image size: {} bytes.",
                    p.took.as_secs_f64(),
                    began.elapsed().as_secs_f64(),
                    p.image.size()
                );
                recorder.normal(pod, "Pulled", &message).await;
                Ok(())
            }
            Err(e) => Err(Waiting {
                reason: "ErrImagePull".into(),
                message: format!("Failed to pull image {image:?}: {e}"),
            }),
        }
    }

    /// The registry credentials of the pod's `imagePullSecrets`, or of its service
    /// account's when it names none (as the ServiceAccount admission gives them).
    async fn pull_credentials(&self, pod: &Value) -> Vec<crate::image::pull::Credential> {
        let ns = str_at(pod, "/metadata/namespace");
        let names = |v: &Value| -> Vec<String> {
            v["imagePullSecrets"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| s["name"].as_str().map(str::to_string))
                .collect()
        };
        let mut secrets = names(&pod["spec"]);
        if secrets.is_empty() {
            let account = pod["spec"]["serviceAccountName"]
                .as_str()
                .unwrap_or("default");
            if let Ok(sa) = self
                .shared
                .client
                .get(catalog::of(Kind::ServiceAccount), Some(ns), account)
                .await
            {
                secrets = names(&sa);
            }
        }
        let mut out = Vec::new();
        for name in secrets {
            let secret = match self
                .shared
                .client
                .get(catalog::of(Kind::Secret), Some(ns), &name)
                .await
            {
                Ok(s) => s,
                Err(e) => {
                    // As the kubelet: the pull goes on without them.
                    tracing::warn!(pod = %str_at(pod, "/metadata/name"), secret = %name, error = %e, "cannot read an image pull secret");
                    continue;
                }
            };
            use base64::Engine;
            let data: std::collections::BTreeMap<String, Vec<u8>> = secret["data"]
                .as_object()
                .into_iter()
                .flatten()
                .filter_map(|(k, v)| {
                    let bytes = base64::engine::general_purpose::STANDARD
                        .decode(v.as_str()?)
                        .ok()?;
                    Some((k.clone(), bytes))
                })
                .collect();
            match crate::image::pull::credentials_of_secret(str_at(&secret, "/type"), &data) {
                Ok(c) => out.extend(c),
                Err(e) => {
                    tracing::warn!(secret = %name, error = %e, "an image pull secret holds no credentials");
                }
            }
        }
        out
    }
}

/// Whether the container image `image` is the built-in one `builtin`: the same
/// repository once both are normalized (`pause:3.10` is `registry.k8s.io/pause:3.10`
/// only if written so; `docker.io/library/x` is `x`), with the same tag unless `builtin`
/// names none (then any tag or digest of it).
pub(super) fn builtin_matches(builtin: &str, image: &str) -> bool {
    use crate::image::reference::parse;
    match (parse(builtin), parse(image)) {
        (Ok(b), Ok(i)) => {
            b.registry == i.registry
                && b.repository == i.repository
                && (b.tag.is_none() && b.digest.is_none() || b.tag == i.tag && i.digest.is_none())
        }
        _ => builtin == image,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_in_images_match_by_repository_and_any_tag_unless_one_is_named() {
        let pause = "registry.k8s.io/pause";
        assert!(builtin_matches(pause, "registry.k8s.io/pause:3.10"));
        assert!(builtin_matches(pause, "registry.k8s.io/pause"));
        assert!(builtin_matches(
            pause,
            &format!("registry.k8s.io/pause@sha256:{}", "a".repeat(64))
        ));
        assert!(
            !builtin_matches(pause, "pause:3.10"),
            "docker.io's is another"
        );
        assert!(!builtin_matches(pause, "registry.k8s.io/pause-extra:1"));
        assert!(builtin_matches(
            "berth/deployer",
            "docker.io/berth/deployer:latest"
        ));
        assert!(builtin_matches("x:1", "docker.io/library/x:1"));
        assert!(!builtin_matches("x:1", "x:2"));
        assert!(!builtin_matches("x:1", "x"));
    }
}
