//! Field selectors: `fieldSelector=metadata.name=web-1,status.phase!=Running`.

/// One `field=value` or `field!=value` term.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Term {
    pub field: String,
    pub value: String,
    pub negated: bool,
}

/// A conjunction of terms; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector {
    pub terms: Vec<Term>,
}

impl Selector {
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut terms = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (field, value, negated) = if let Some((f, v)) = part.split_once("!=") {
                (f, v, true)
            } else if let Some((f, v)) = part.split_once("==") {
                (f, v, false)
            } else if let Some((f, v)) = part.split_once('=') {
                (f, v, false)
            } else {
                return Err(format!(
                    "invalid field selector term {part:?}: expected field=value"
                ));
            };
            if field.trim().is_empty() {
                return Err(format!("invalid field selector term {part:?}: empty field"));
            }
            terms.push(Term {
                field: field.trim().to_string(),
                value: value.trim().to_string(),
                negated,
            });
        }
        Ok(Self { terms })
    }

    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// Whether an object matches, given how to read each field (absent reads as "").
    pub fn matches(&self, get: impl Fn(&str) -> Option<String>) -> bool {
        self.terms.iter().all(|t| {
            let v = get(&t.field).unwrap_or_default();
            (v == t.value) != t.negated
        })
    }

    /// The value required for `field` by an equality term, if any.
    pub fn required(&self, field: &str) -> Option<&str> {
        self.terms
            .iter()
            .find(|t| t.field == field && !t.negated)
            .map(|t| t.value.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_matches() {
        let s = Selector::parse("metadata.name=web-1,status.phase!=Running").unwrap();
        let get = |phase: &'static str| {
            move |f: &str| match f {
                "metadata.name" => Some("web-1".to_string()),
                "status.phase" => Some(phase.to_string()),
                _ => None,
            }
        };
        assert!(s.matches(get("Pending")));
        assert!(!s.matches(get("Running")));
        assert_eq!(s.required("metadata.name"), Some("web-1"));
        assert!(Selector::parse("").unwrap().is_empty());
        assert!(
            Selector::parse("spec.nodeName==")
                .unwrap()
                .matches(|_| None)
        );
        assert!(Selector::parse("nonsense").is_err());
    }
}
