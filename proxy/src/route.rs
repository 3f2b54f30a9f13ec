//! HTTP route patterns: `POST /v1/charges` → `create_charge`,
//! `DELETE /v1/customers/{id}` → `delete_customer`. A pattern is a method
//! (or `*`) and a path of literal segments and `{name}` parameters; a
//! trailing `/*` matches any rest of the path. The action template may
//! insert parameters (`get_{kind}`).

use std::collections::BTreeMap;

/// A pattern that does not parse, with why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RuleError(String);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    Param(String),
}

/// One `match` → `action` mapping of an HTTP route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpRule {
    /// Upper case; `None` matches every method.
    method: Option<String>,
    segments: Vec<Segment>,
    /// A trailing `/*`.
    rest: bool,
    action: String,
}

/// A matched request: its action name and path parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matched {
    pub action: String,
    pub params: BTreeMap<String, String>,
}

fn param_name(segment: &str) -> Option<&str> {
    segment.strip_prefix('{')?.strip_suffix('}')
}

impl HttpRule {
    /// Parses `"METHOD /path/{param}"` and its action template.
    pub fn parse(pattern: &str, action: &str) -> Result<HttpRule, RuleError> {
        let (method, path) = pattern
            .trim()
            .split_once(' ')
            .ok_or_else(|| RuleError(format!("`{pattern}`: write it as METHOD /path")))?;
        let path = path.trim();
        if !path.starts_with('/') {
            return Err(RuleError(format!(
                "`{pattern}`: the path must start with /"
            )));
        }
        let method = match method {
            "*" => None,
            m if m.chars().all(|c| c.is_ascii_alphabetic()) => Some(m.to_ascii_uppercase()),
            m => return Err(RuleError(format!("`{m}` is not an HTTP method"))),
        };
        let mut segments = Vec::new();
        let mut rest = false;
        let parts: Vec<&str> = path[1..].split('/').filter(|s| !s.is_empty()).collect();
        for (i, part) in parts.iter().enumerate() {
            if *part == "*" && i + 1 == parts.len() {
                rest = true;
            } else if let Some(name) = param_name(part) {
                if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                    return Err(RuleError(format!("`{part}`: a parameter is {{name}}")));
                }
                segments.push(Segment::Param(name.to_owned()));
            } else if part.contains(['{', '}', '*']) {
                return Err(RuleError(format!(
                    "`{part}`: not a literal, {{name}} or a final *"
                )));
            } else {
                segments.push(Segment::Literal((*part).to_owned()));
            }
        }
        if action.is_empty() || action.len() > 255 {
            return Err(RuleError("the action name must be 1-255 characters".into()));
        }
        let rule = HttpRule {
            method,
            segments,
            rest,
            action: action.to_owned(),
        };
        // Every `{name}` in the template must be a parameter of the path.
        let mut template = action;
        while let Some(open) = template.find('{') {
            let close = template[open..]
                .find('}')
                .ok_or_else(|| RuleError(format!("`{action}`: an unclosed {{")))?;
            let name = &template[open + 1..open + close];
            if !rule.segments.contains(&Segment::Param(name.to_owned())) {
                return Err(RuleError(format!(
                    "`{action}`: {{{name}}} is not in the path"
                )));
            }
            template = &template[open + close + 1..];
        }
        Ok(rule)
    }

    /// The action `method path` maps to, if this rule matches it.
    pub fn matches(&self, method: &str, path: &str) -> Option<Matched> {
        if self.method.as_deref().is_some_and(|m| m != method) {
            return None;
        }
        let parts: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        let fits = if self.rest {
            parts.len() >= self.segments.len()
        } else {
            parts.len() == self.segments.len()
        };
        if !fits {
            return None;
        }
        let mut params = BTreeMap::new();
        for (seg, part) in self.segments.iter().zip(&parts) {
            match seg {
                Segment::Literal(l) if l == part => {}
                Segment::Literal(_) => return None,
                Segment::Param(name) => {
                    params.insert(name.clone(), (*part).to_owned());
                }
            }
        }
        let mut action = self.action.clone();
        for (name, value) in &params {
            action = action.replace(&format!("{{{name}}}"), value);
        }
        Some(Matched { action, params })
    }
}

/// The first rule of `rules` that matches.
pub fn first_match(rules: &[HttpRule], method: &str, path: &str) -> Option<Matched> {
    rules.iter().find_map(|r| r.matches(method, path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_parameters_and_rests() {
        let charge = HttpRule::parse("POST /v1/charges", "create_charge").unwrap();
        assert_eq!(
            charge.matches("POST", "/v1/charges").unwrap().action,
            "create_charge"
        );
        assert_eq!(charge.matches("GET", "/v1/charges"), None);
        assert_eq!(charge.matches("POST", "/v1/charges/x"), None);

        let by_kind = HttpRule::parse("get /v1/{kind}/{id}", "get_{kind}").unwrap();
        let m = by_kind.matches("GET", "/v1/customers/42").unwrap();
        assert_eq!(m.action, "get_customers");
        assert_eq!(m.params["id"], "42");

        let any = HttpRule::parse("* /files/*", "touch_file").unwrap();
        assert!(any.matches("DELETE", "/files/a/b/c").is_some());
        assert!(any.matches("GET", "/other").is_none());
    }

    #[test]
    fn bad_patterns_say_why() {
        for (pattern, action) in [
            ("/v1/charges", "x"),
            ("POST v1", "x"),
            ("PO-ST /x", "x"),
            ("GET /x/{}", "x"),
            ("GET /x/*/y", "x"),
            ("GET /x/{id}", "get_{name}"),
            ("GET /x", ""),
        ] {
            assert!(
                HttpRule::parse(pattern, action).is_err(),
                "{pattern} → {action}"
            );
        }
    }
}
