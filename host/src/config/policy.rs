//! `[[policy]]`: what each principal may see and use, and how fast.
//!
//! Entries are ordered; the first whose `principals` names the caller
//! decides everything for it (a caller no entry names may use nothing).
//! Without any entry every caller may use everything. Applied live by a
//! config reload.

use std::time::Duration;

use serde::Deserialize;

use super::Problems;

/// One `[[policy]]` entry as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPolicy {
    #[serde(default)]
    pub principals: Vec<String>,
    pub allow: Option<Vec<String>>,
    #[serde(default)]
    pub deny: Vec<String>,
    pub rate: Option<String>,
    pub rate_per_tool: Option<String>,
    pub issuer: Option<String>,
    pub tool_search: Option<String>,
}

/// One `[[policy]]` entry, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyConfig {
    /// `*`, `local`, `key:NAME`, `sub:SUBJECT`, `group:NAME`, `scope:NAME`;
    /// `*` and `?` match within a name (`group:eng-*`).
    pub principals: Vec<String>,
    /// Globs over client-visible tool and prompt names and resource URIs.
    pub allow: Vec<String>,
    /// Taken out of `allow`.
    pub deny: Vec<String>,
    /// Calls per principal (all tools, resources and prompts together).
    pub rate: Option<Rate>,
    /// Calls per principal and tool (or prompt, or resource).
    pub rate_per_tool: Option<Rate>,
    /// Whose principals the entry names: `None` or `Some(Issuer::Any)`
    /// for every caller its patterns match, `Some(Issuer::Is(url))` only
    /// callers whose token that `[auth.oauth]` issuer signed.
    pub issuer: Option<Issuer>,
    /// `tool_search`: the entry's principals list tools this way instead
    /// of `[tool_search] mode`.
    pub tool_search: Option<super::SearchMode>,
}

/// `[[policy]] issuer`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Issuer {
    /// `"*"`: the same subject of any configured issuer, said on purpose.
    Any,
    /// One of `[auth.oauth] issuers`.
    Is(String),
}

/// `N/unit`: at most `count` calls per `per`, a burst of `count` allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    pub count: u32,
    pub per: Duration,
}

impl std::fmt::Display for Rate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let unit = match self.per.as_secs() {
            1 => "s",
            60 => "min",
            3600 => "hour",
            _ => "day",
        };
        write!(f, "{}/{unit}", self.count)
    }
}

/// The principal kinds a pattern may name.
const KINDS: [&str; 4] = ["key:", "sub:", "group:", "scope:"];

/// What is wrong with `p` as a principal pattern, if anything.
pub(super) fn principal_problem(p: &str) -> Option<String> {
    let known =
        p == "*" || p == "local" || KINDS.iter().any(|k| p.len() > k.len() && p.starts_with(k));
    (!known).then(|| {
        format!("`{p}` is not a principal: write \"*\", \"local\", \"key:NAME\", \"sub:SUBJECT\", \"group:NAME\" or \"scope:NAME\"")
    })
}

impl Problems {
    /// The entries, checked against `issuers` (`[auth.oauth] issuers`,
    /// empty without it).
    pub(super) fn policies(
        &mut self,
        raw: Vec<RawPolicy>,
        issuers: &[String],
    ) -> Vec<PolicyConfig> {
        raw.into_iter()
            .enumerate()
            .map(|(i, r)| self.policy(&format!("policy[{i}]"), r, issuers))
            .collect()
    }

    fn policy(&mut self, at: &str, raw: RawPolicy, issuers: &[String]) -> PolicyConfig {
        let issuer = self.issuer(at, &raw, issuers);
        if raw.principals.is_empty() {
            self.add(
                format!("{at}.principals"),
                "missing: name whom the entry is for, e.g. principals = [\"group:ops\", \"key:ci-bot\"] or [\"*\"]",
            );
        }
        for (j, p) in raw.principals.iter().enumerate() {
            if let Some(problem) = principal_problem(p) {
                self.add(format!("{at}.principals[{j}]"), problem);
            }
        }
        let allow = raw.allow.unwrap_or_else(|| {
            self.add(
                format!("{at}.allow"),
                "missing: list what the entry allows, e.g. allow = [\"*\"] or [\"files__read*\"] (globs over tool and prompt names and resource URIs)",
            );
            Vec::new()
        });
        for (key, globs) in [("allow", &allow), ("deny", &raw.deny)] {
            for (j, g) in globs.iter().enumerate() {
                if g.is_empty() {
                    self.add(
                        format!("{at}.{key}[{j}]"),
                        "an empty pattern matches nothing: remove it",
                    );
                }
            }
        }
        let rate = raw.rate.and_then(|r| self.rate(&format!("{at}.rate"), &r));
        let rate_per_tool = raw
            .rate_per_tool
            .and_then(|r| self.rate(&format!("{at}.rate_per_tool"), &r));
        let tool_search = self.policy_search_mode(at, raw.tool_search.as_deref());
        PolicyConfig {
            principals: raw.principals,
            allow,
            deny: raw.deny,
            rate,
            rate_per_tool,
            issuer,
            tool_search,
        }
    }

    /// `issuer`, checked; and with several issuers configured, an entry
    /// naming principals of tokens (`sub:`, `group:`, `scope:`) must say
    /// whose: `alice` of one authorization server is not `alice` of
    /// another.
    fn issuer(&mut self, at: &str, raw: &RawPolicy, issuers: &[String]) -> Option<Issuer> {
        let key = format!("{at}.issuer");
        match raw.issuer.as_deref() {
            Some("*") => Some(Issuer::Any),
            Some(_) if issuers.is_empty() => {
                self.add(
                    key,
                    "names an issuer, but [auth.oauth] is not configured: remove it, or add [auth.oauth] with that issuer",
                );
                None
            }
            Some(i) if issuers.iter().any(|c| c == i) => Some(Issuer::Is(i.to_owned())),
            Some(i) => {
                self.add(
                    key,
                    format!(
                        "`{i}` is not one of [auth.oauth] issuers: use one of {}, or \"*\" for any",
                        quoted(issuers)
                    ),
                );
                None
            }
            None if issuers.len() > 1 => {
                let of_tokens: Vec<&String> = raw
                    .principals
                    .iter()
                    .filter(|p| {
                        ["sub:", "group:", "scope:"]
                            .iter()
                            .any(|k| p.starts_with(k))
                    })
                    .collect();
                if !of_tokens.is_empty() {
                    self.add(
                        key,
                        format!(
                            "missing: {} name principals of OAuth tokens, and {} issuers are configured, each with its own subjects, groups and scopes: \
                             say whose with issuer = one of {} (an entry per issuer), or issuer = \"*\" for any of them",
                            quoted(&of_tokens),
                            issuers.len(),
                            quoted(issuers)
                        ),
                    );
                }
                None
            }
            None => None,
        }
    }

    fn rate(&mut self, key: &str, text: &str) -> Option<Rate> {
        match parse_rate(text) {
            Ok(r) => Some(r),
            Err(why) => {
                self.add(key, why);
                None
            }
        }
    }
}

fn quoted<S: AsRef<str>>(items: &[S]) -> String {
    items
        .iter()
        .map(|s| format!("\"{}\"", s.as_ref()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `600/min`, `10/s`, `1000/hour`, `5000/day`.
pub fn parse_rate(text: &str) -> Result<Rate, String> {
    let fix = "write a rate like \"60/min\" (units: s, min, hour, day)";
    let (count, unit) = text
        .split_once('/')
        .ok_or_else(|| format!("`{text}` is not a rate: {fix}"))?;
    let count: u32 = count.trim().parse().map_err(|_| {
        format!(
            "`{text}`: `{}` is not a whole number of calls: {fix}",
            count.trim()
        )
    })?;
    if count == 0 {
        return Err(format!(
            "`{text}` allows no call at all: deny the tools instead, or {fix}"
        ));
    }
    let per = match unit.trim() {
        "s" | "sec" | "second" => 1,
        "m" | "min" | "minute" => 60,
        "h" | "hour" => 3600,
        "d" | "day" => 86_400,
        other => return Err(format!("`{text}`: `{other}` is not a unit: {fix}")),
    };
    Ok(Rate {
        count,
        per: Duration::from_secs(per),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_with_their_unit_and_refuse_nonsense() {
        assert_eq!(
            parse_rate("600/min").unwrap(),
            Rate {
                count: 600,
                per: Duration::from_secs(60)
            }
        );
        assert_eq!(parse_rate(" 10 / s ").unwrap().per, Duration::from_secs(1));
        assert_eq!(parse_rate("5/day").unwrap().to_string(), "5/day");
        assert!(parse_rate("60").unwrap_err().contains("is not a rate"));
        assert!(
            parse_rate("x/min")
                .unwrap_err()
                .contains("not a whole number")
        );
        assert!(parse_rate("0/min").unwrap_err().contains("allows no call"));
        assert!(
            parse_rate("6/fortnight")
                .unwrap_err()
                .contains("not a unit")
        );
    }
}
