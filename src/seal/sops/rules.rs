//! A `.sops.yaml`'s `creation_rules`, as sops picks one for a file (config/config.go): the
//! first rule whose `path_regex` (RE2, like Rust's `regex`) matches the path relative to
//! the config file's directory, or that has none. spokekeeper takes its age recipients and
//! writes only what the rule would make sops write, so a rule asking for anything else
//! (another encryption rule, key groups, MAC over encrypted values only) is refused by
//! name rather than ignored.

use super::ENCRYPTED_REGEX;
use super::error::SopsError;
use super::keys::AgeRecipients;
use super::tree::{self, Node};

/// The age recipients the first rule matching `path` names. `path` is relative to the
/// directory of the `.sops.yaml` whose text is `config`.
pub fn recipients_for(config: &[u8], path: &str) -> Result<AgeRecipients, SopsError> {
    let top = tree::parse(config)?;
    let rules = match top.iter().find(|(k, _)| k == "creation_rules") {
        Some((_, Node::Seq(rules))) => rules,
        Some(_) => return Err(bad("creation_rules".into(), "is not a list")),
        None => {
            return Err(bad(
                "creation_rules".into(),
                "is missing: sops would ask for keys on the command line",
            ));
        }
    };
    for (i, rule) in rules.iter().enumerate() {
        let at = |field: &str| format!("creation_rules[{i}].{field}");
        let Node::Map(fields) = rule else {
            return Err(bad(format!("creation_rules[{i}]"), "is not a map"));
        };
        let text = |name: &str| match rule.get(name) {
            None | Some(Node::Null) => Ok(None),
            Some(Node::Str(s)) => Ok(Some(s.to_string())),
            Some(_) => Err(bad(at(name), "is not a string")),
        };
        if let Some(re) = text("path_regex")? {
            let re = regex::Regex::new(&re)
                .map_err(|_| bad(at("path_regex"), "is not a regular expression"))?;
            if !re.is_match(path) {
                continue;
            }
        }
        for (k, v) in fields {
            match (k.as_str(), v) {
                ("path_regex" | "age", _) | (_, Node::Null) => {}
                ("encrypted_regex", Node::Str(s)) if s.as_str() == ENCRYPTED_REGEX => {}
                ("mac_only_encrypted", Node::Bool(false)) => {}
                _ => {
                    return Err(SopsError::Unsupported {
                        field: "a .sops.yaml creation rule",
                        what: format!(
                            "{} (spokekeeper writes age recipients with encrypted_regex {ENCRYPTED_REGEX} only)",
                            at(k)
                        ),
                    });
                }
            }
        }
        if text("encrypted_regex")?.is_none() {
            return Err(bad(
                at("encrypted_regex"),
                &format!(
                    "is not set: sops would encrypt every value, kind and name too; add encrypted_regex: {ENCRYPTED_REGEX} (Flux's recommendation)"
                ),
            ));
        }
        let given: Vec<String> = match rule.get("age") {
            Some(Node::Str(s)) => s.split(',').map(|r| r.trim().to_string()).collect(),
            Some(Node::Seq(items)) => items
                .iter()
                .map(|n| {
                    n.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| bad(at("age"), "has an entry that is not a string"))
                })
                .collect::<Result<_, _>>()?,
            _ => {
                return Err(bad(
                    at("age"),
                    "is missing: the rule names no age recipient",
                ));
            }
        };
        return AgeRecipients::parse(&given);
    }
    Err(bad(
        "creation_rules".into(),
        &format!("has no rule whose path_regex matches {path:?}: sops -e would refuse it too"),
    ))
}

fn bad(field: String, problem: &str) -> SopsError {
    SopsError::SopsConfig {
        field,
        problem: problem.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "age1gvcf878xc52a02dxnputs7p9yegp0etdzqe93vlxxxsy9k6wdelsj3slry";
    const B: &str = "age1qpaf2m6kv9ul9advxjc73g6zarycm9ray42afsh60hw5hs6e040q3p5efh";

    fn config() -> String {
        format!(
            "creation_rules:\n  - path_regex: ^clusters/prod/.*\\.yaml$\n    encrypted_regex: ^(data|stringData)$\n    age: {A},{B}\n  - encrypted_regex: ^(data|stringData)$\n    age:\n      - {B}\n"
        )
    }

    #[test]
    fn the_first_matching_rule_gives_the_recipients() {
        let prod = recipients_for(config().as_bytes(), "clusters/prod/dev.yaml").unwrap();
        assert_eq!(prod.strings().collect::<Vec<_>>(), [A, B]);
        let other = recipients_for(config().as_bytes(), "clusters/dev/dev.yaml").unwrap();
        assert_eq!(other.strings().collect::<Vec<_>>(), [B]);
    }

    #[test]
    fn what_spokekeeper_would_not_honour_is_refused_by_name() {
        let cases = [
            (
                config().replacen("    encrypted_regex: ^(data|stringData)$\n", "", 1),
                "creation_rules[0].encrypted_regex is not set",
            ),
            (
                config().replacen("^(data|stringData)$", "^data$", 1),
                "creation_rules[0].encrypted_regex",
            ),
            (
                config().replacen("    age: ", "    pgp: x\n    age: ", 1),
                "creation_rules[0].pgp",
            ),
            (
                config().replacen("path_regex: ^clusters/prod/", "path_regex: (", 1),
                "creation_rules[0].path_regex is not a regular expression",
            ),
            (
                "creation_rules:\n  - path_regex: ^nothing$\n".into(),
                "has no rule whose path_regex matches",
            ),
            (
                format!(
                    "creation_rules:\n  - encrypted_regex: ^(data|stringData)$\n    key_groups:\n      - age: [{A}]\n"
                ),
                "creation_rules[0].key_groups",
            ),
        ];
        for (text, needle) in cases {
            let err = recipients_for(text.as_bytes(), "clusters/prod/dev.yaml")
                .unwrap_err()
                .to_string();
            assert!(err.contains(needle), "expected {needle:?} in {err}");
        }
    }
}
