//! `[[policy]]`: the one place that decides what a principal may see and
//! use, and how fast.
//!
//! - [`Policies::view`]: a session's catalog with what its principal may
//!   not use taken out (lists, and so `list_changed`, are per principal);
//! - [`Policies::admit`]: whether one call (`tools/call`, `resources/read`,
//!   `prompts/get`) may go ahead, or is denied, or over a rate. Every call
//!   path asks it; a denied name is answered exactly like an unknown one,
//!   so a caller cannot tell a tool it may not use from one that does not
//!   exist.
//!
//! The first entry whose `principals` names the caller decides; a caller
//! no entry names may use nothing; without entries everyone may use
//! everything. A [`Policies`] never changes: a reload makes the next one
//! ([`Policies::next`]), in which entries that did not change keep their
//! rate buckets, and publishes it in the next generation
//! (`backend::generation`), so one call reads one set.
//!
//! Where the buckets live is not decided here: [`Policies::with_rates`]
//! takes a [`Rates`] (`cluster::rate`), one replica's memory by default.

mod glob;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::auth::{CallerKey, Principal};
use crate::catalog::{Catalog, Kind};
use crate::cluster::rate::{self, LocalRates, RateLimits, Rates};
use crate::config::{PolicyConfig, PolicyIssuer, Rate};

pub use glob::matches;

/// Why [`Policies::admit`] refused a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// The principal may not use the name: answer as for an unknown name.
    Denied,
    /// Over `rate` (`per_tool`: the entry's `rate_per_tool`) of entry
    /// `policy`; the next call is possible in `retry_after`.
    RateLimited {
        rate: Rate,
        per_tool: bool,
        policy: usize,
        retry_after: Duration,
    },
}

/// One compiled `[[policy]]` entry.
pub struct Rule {
    /// Its place in the file (`policy[N]`).
    pub index: usize,
    pub config: PolicyConfig,
    /// `rate` and its buckets.
    per_principal: Option<(Rate, Box<dyn RateLimits<CallerKey>>)>,
    /// `rate_per_tool` and its buckets.
    per_tool: Option<(Rate, Box<dyn RateLimits<rate::ToolKey>>)>,
}

impl Rule {
    fn new(index: usize, config: PolicyConfig, rates: &dyn Rates) -> Rule {
        let entry = rate::Entry {
            index,
            config: &config,
        };
        Rule {
            index,
            per_principal: config.rate.map(|r| (r, rates.per_caller(entry, r))),
            per_tool: config.rate_per_tool.map(|r| (r, rates.per_tool(entry, r))),
            config,
        }
    }

    /// Whether the entry is for `p`: one of its patterns matches, and
    /// when it names an issuer, that issuer vouched for `p`.
    fn names(&self, p: &Principal) -> bool {
        if let Some(PolicyIssuer::Is(issuer)) = &self.config.issuer
            && p.issuer() != Some(issuer.as_str())
        {
            return false;
        }
        self.config.principals.iter().any(|pattern| {
            pattern == "*"
                || matches(pattern, p.id())
                || p.memberships().iter().any(|m| matches(pattern, m))
        })
    }

    /// `allow = ["*"]` without `deny`: its view is the catalog itself.
    fn allows_all(&self) -> bool {
        self.config.deny.is_empty() && self.config.allow.iter().any(|g| g == "*")
    }

    /// Whether the entry lets its principals use `name`.
    pub fn permits(&self, name: &str) -> bool {
        self.config.allow.iter().any(|g| matches(g, name))
            && !self.config.deny.iter().any(|g| matches(g, name))
    }
}

/// What a principal may use.
#[derive(Clone)]
pub enum Access {
    /// No `[[policy]]` at all.
    Everything,
    /// The first entry naming it.
    Rule(Arc<Rule>),
    /// No entry names it.
    Nothing,
}

impl Access {
    pub fn permits(&self, name: &str) -> bool {
        match self {
            Access::Everything => true,
            Access::Rule(r) => r.permits(name),
            Access::Nothing => false,
        }
    }
}

/// One cached view: (base snapshot, the entry, the base filtered by it).
type View = (Arc<Catalog>, Arc<Rule>, Arc<Catalog>);

/// One `[[policy]]` set, and the per-entry views built from it.
pub struct Policies {
    rules: Vec<Arc<Rule>>,
    /// Filtered catalogs by (base snapshot, entry): sessions under the same
    /// entry share one view, so a catalog change filters once per entry,
    /// not once per session (and their diffs compare the same snapshots).
    views: Mutex<Vec<View>>,
    nothing: Arc<Catalog>,
    /// Where the rate buckets of new and edited entries are made.
    rates: Arc<dyn Rates>,
}

impl Default for Policies {
    /// No entries: everyone may use everything.
    fn default() -> Self {
        Policies::new(Vec::new())
    }
}

/// Views kept: a few per entry across two catalog generations.
const VIEWS_KEPT: usize = 64;

impl Policies {
    /// `configs` in force, their rate buckets in this replica's memory.
    pub fn new(configs: Vec<PolicyConfig>) -> Self {
        Policies::with_rates(configs, Arc::new(LocalRates))
    }

    /// `configs` in force, their rate buckets kept by `rates` (for this
    /// set and every set a reload makes next).
    pub fn with_rates(configs: Vec<PolicyConfig>, rates: Arc<dyn Rates>) -> Self {
        let rules = configs
            .into_iter()
            .enumerate()
            .map(|(i, c)| Arc::new(Rule::new(i, c, rates.as_ref())))
            .collect();
        Self::compiled(rules, rates)
    }

    fn compiled(rules: Vec<Arc<Rule>>, rates: Arc<dyn Rates>) -> Self {
        Policies {
            rules,
            views: Mutex::default(),
            nothing: Arc::new(Catalog::default()),
            rates,
        }
    }

    /// The set that puts `next` in force after this one; `None` when it
    /// is this set already. Entries equal to one of this set (same place,
    /// same text) keep its rate buckets.
    pub fn next(&self, next: Vec<PolicyConfig>) -> Option<Policies> {
        let old = &self.rules;
        if old.len() == next.len() && old.iter().zip(&next).all(|(r, c)| r.config == *c) {
            return None;
        }
        let rules = next
            .into_iter()
            .enumerate()
            .map(|(i, c)| match old.get(i).filter(|r| r.config == c) {
                Some(kept) => kept.clone(),
                None => Arc::new(Rule::new(i, c, self.rates.as_ref())),
            })
            .collect();
        Some(Self::compiled(rules, self.rates.clone()))
    }

    /// Whether any `[[policy]]` entry is configured.
    pub fn configured(&self) -> bool {
        !self.rules.is_empty()
    }

    fn lock_views(&self) -> std::sync::MutexGuard<'_, Vec<View>> {
        self.views.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The entry that decides for `p`.
    pub fn access(&self, p: &Principal) -> Access {
        let rules = &self.rules;
        if rules.is_empty() {
            return Access::Everything;
        }
        match rules.iter().find(|r| r.names(p)) {
            Some(r) => Access::Rule(r.clone()),
            None => Access::Nothing,
        }
    }

    /// What `p` sees of `base`: `base` itself without policies.
    pub fn view(&self, p: &Principal, base: Arc<Catalog>) -> Arc<Catalog> {
        let rule = match self.access(p) {
            Access::Everything => return base,
            Access::Nothing => return self.nothing.clone(),
            Access::Rule(r) if r.allows_all() => return base,
            Access::Rule(r) => r,
        };
        let mut views = self.lock_views();
        if let Some((_, _, v)) = views
            .iter()
            .find(|(b, r, _)| Arc::ptr_eq(b, &base) && Arc::ptr_eq(r, &rule))
        {
            return v.clone();
        }
        let view = Arc::new(base.filtered(|_, name| rule.permits(name)));
        if views.len() >= VIEWS_KEPT {
            views.remove(0);
        }
        views.push((base, rule, view.clone()));
        view
    }

    /// Whether `p` may call `name` (a tool or prompt's client-visible
    /// name, a resource URI) now; takes one token of each rate that
    /// applies. Counted in `vigil_rate_limited_total` when over a rate.
    /// (`kind` does not change the decision today: one glob list covers
    /// names and URIs; it is part of the question every call path asks.)
    pub fn admit(&self, p: &Principal, _kind: Kind, name: &str) -> Result<(), Refused> {
        let rule = match self.access(p) {
            Access::Everything => return Ok(()),
            Access::Nothing => return Err(Refused::Denied),
            Access::Rule(r) => r,
        };
        if !rule.permits(name) {
            return Err(Refused::Denied);
        }
        let over = |rate: Rate, per_tool: bool, retry_after: Duration| {
            crate::metrics::get()
                .rate_limited
                .get_or_create(&crate::metrics::PrincipalLabel {
                    principal: p.id().to_owned(),
                })
                .inc();
            Refused::RateLimited {
                rate,
                per_tool,
                policy: rule.index,
                retry_after,
            }
        };
        let caller = p.caller();
        if let Some((rate, b)) = &rule.per_principal {
            b.take(caller).map_err(|wait| over(*rate, false, wait))?;
        }
        if let Some((rate, b)) = &rule.per_tool {
            b.take(&(caller.clone(), name.to_owned()))
                .map_err(|wait| over(*rate, true, wait))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
