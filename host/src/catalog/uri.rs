//! Routing of resource URIs to backends (URIs are never renamed).

use std::collections::HashMap;
use std::sync::Arc;

#[derive(Debug, Default, Clone)]
pub(super) struct UriRoutes {
    exact: HashMap<String, Arc<str>>,
    /// (literal prefix of a template, backend), longest prefix first.
    templates: Vec<(String, Arc<str>)>,
}

impl UriRoutes {
    /// Returns false when another backend already serves `uri`.
    pub(super) fn add_resource(&mut self, uri: &str, backend: &Arc<str>) -> bool {
        if self.exact.contains_key(uri) {
            return false;
        }
        self.exact.insert(uri.to_owned(), backend.clone());
        true
    }

    pub(super) fn add_template(&mut self, template: &str, backend: &Arc<str>) {
        let prefix = template.split('{').next().unwrap_or_default().to_owned();
        let at = self
            .templates
            .partition_point(|(p, _)| p.len() >= prefix.len());
        self.templates.insert(at, (prefix, backend.clone()));
    }

    pub(super) fn route(&self, uri: &str) -> Option<&Arc<str>> {
        self.exact.get(uri).or_else(|| {
            self.templates
                .iter()
                .find(|(p, _)| uri.starts_with(p.as_str()))
                .map(|(_, b)| b)
        })
    }
}
