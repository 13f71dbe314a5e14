//! Reading a typed object's metadata: the one place that says what an absent name,
//! namespace or uid reads as (`""`, Go's zero value) and when an object is being deleted,
//! for every typed view a controller decodes (`Deployment`, `Job`, a StatefulSet's pass…).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

/// Anything that carries an `ObjectMeta`: implement [`Meta::meta`], read the rest.
pub trait Meta {
    fn meta(&self) -> &ObjectMeta;

    /// `metadata.name`, `""` when absent.
    fn name(&self) -> &str {
        self.meta().name.as_deref().unwrap_or("")
    }

    /// `metadata.namespace`, `""` when absent (a cluster-scoped object).
    fn namespace(&self) -> &str {
        self.meta().namespace.as_deref().unwrap_or("")
    }

    /// `metadata.uid`, `""` when absent.
    fn uid(&self) -> &str {
        self.meta().uid.as_deref().unwrap_or("")
    }

    /// Whether a delete has started (`deletionTimestamp` is set).
    fn is_deleting(&self) -> bool {
        self.meta().deletion_timestamp.is_some()
    }

    /// An annotation's value.
    fn annotation(&self, key: &str) -> Option<&str> {
        lookup(&self.meta().annotations, key)
    }

    /// A label's value.
    fn label(&self, key: &str) -> Option<&str> {
        lookup(&self.meta().labels, key)
    }

    /// The ownerReference of the object's managing controller.
    fn controller_ref(&self) -> Option<&OwnerReference> {
        self.meta()
            .owner_references
            .as_ref()?
            .iter()
            .find(|r| r.controller == Some(true))
    }
}

impl Meta for ObjectMeta {
    fn meta(&self) -> &ObjectMeta {
        self
    }
}

fn lookup<'a>(map: &'a Option<BTreeMap<String, String>>, key: &str) -> Option<&'a str> {
    map.as_ref()?.get(key).map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    #[test]
    fn absent_metadata_reads_as_go_zero_values() {
        let empty = ObjectMeta::default();
        assert_eq!((empty.name(), empty.namespace(), empty.uid()), ("", "", ""));
        assert!(!empty.is_deleting());
        assert_eq!(empty.annotation("a"), None);
        assert!(empty.controller_ref().is_none());

        let meta = ObjectMeta {
            name: Some("web".into()),
            namespace: Some("default".into()),
            uid: Some("u1".into()),
            deletion_timestamp: Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)),
            labels: Some([("app".to_string(), "web".to_string())].into()),
            owner_references: Some(vec![
                OwnerReference {
                    name: "other".into(),
                    ..Default::default()
                },
                OwnerReference {
                    name: "rs".into(),
                    controller: Some(true),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        };
        assert_eq!(
            (meta.name(), meta.namespace(), meta.uid()),
            ("web", "default", "u1")
        );
        assert!(meta.is_deleting());
        assert_eq!(meta.label("app"), Some("web"));
        assert_eq!(meta.controller_ref().map(|r| r.name.as_str()), Some("rs"));
    }
}
