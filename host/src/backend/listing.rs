//! Listing what a backend advertises, within bounds.
//!
//! A listing follows `nextCursor` page by page. Each page is one request
//! with the backend's request timeout, and the whole listing is capped in
//! pages, items and bytes ([`ListLimits`], `[limits]` in the config): a
//! backend that never answers, or pages without end, fails the listing
//! with a reason naming the method and the limit, instead of holding its
//! caller forever or growing Vigil's memory without bound. The caller keeps
//! the catalog it had.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    Cursor, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, Prompt, Resource, ResourceTemplate, ServerCapabilities, Tool,
};
use rmcp::service::{Peer, RoleClient, ServiceError};
use serde::Serialize;

use super::error::BackendError;
use crate::catalog::BackendCatalog;

pub use crate::config::ListLimits;

/// One page of a paginated list result.
trait Page {
    type Item: Serialize;
    fn into_page(self) -> (Vec<Self::Item>, Option<Cursor>);
}

macro_rules! page {
    ($t:ty, $field:ident, $item:ty) => {
        impl Page for $t {
            type Item = $item;
            fn into_page(self) -> (Vec<Self::Item>, Option<Cursor>) {
                (self.$field, self.next_cursor)
            }
        }
    };
}
page!(ListToolsResult, tools, Tool);
page!(ListResourcesResult, resources, Resource);
page!(
    ListResourceTemplatesResult,
    resource_templates,
    ResourceTemplate
);
page!(ListPromptsResult, prompts, Prompt);

/// What one listing has taken so far, checked against the limits.
struct Budget<'a> {
    backend: &'a Arc<str>,
    /// A failed page request as the connection reports it.
    lost: &'a (dyn Fn(ServiceError) -> BackendError + Sync),
    limits: ListLimits,
    timeout: Duration,
    items: usize,
    bytes: usize,
}

impl Budget<'_> {
    fn refused(&self, method: &'static str, reason: String) -> BackendError {
        BackendError::Listing {
            backend: self.backend.clone(),
            method,
            reason,
        }
    }

    /// Counts `items` of a page of `method`.
    fn take<T: Serialize>(
        &mut self,
        method: &'static str,
        items: &[T],
    ) -> Result<(), BackendError> {
        self.items += items.len();
        if self.items > self.limits.items {
            return Err(self.refused(
                method,
                format!(
                    "more than {} items in one listing (limits.list_items); raise it if this backend really offers that many",
                    self.limits.items
                ),
            ));
        }
        for item in items {
            self.bytes += serialized_len(item);
            if self.bytes > self.limits.bytes {
                return Err(self.refused(
                    method,
                    format!(
                        "more than {} bytes in one listing (limits.list_bytes); raise it if this backend really offers that much",
                        self.limits.bytes
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Every page of one list method, each within the timeout.
    async fn all_pages<P, F, Fut>(
        &mut self,
        method: &'static str,
        list_page: F,
    ) -> Result<Vec<P::Item>, BackendError>
    where
        P: Page,
        F: Fn(Option<PaginatedRequestParams>) -> Fut,
        Fut: Future<Output = Result<P, ServiceError>>,
    {
        let mut all = Vec::new();
        let mut cursor: Option<Cursor> = None;
        for page in 1..=self.limits.pages {
            let params = cursor
                .take()
                .map(|c| PaginatedRequestParams::default().with_cursor(Some(c)));
            let answer = match tokio::time::timeout(self.timeout, list_page(params)).await {
                Ok(answer) => answer,
                Err(_) => {
                    return Err(self.refused(
                        method,
                        format!(
                            "no answer to page {page} within {} (request_timeout)",
                            humantime::format_duration(self.timeout)
                        ),
                    ));
                }
            };
            let (items, next) = answer.map_err(self.lost)?.into_page();
            self.take(method, &items)?;
            all.extend(items);
            match next {
                Some(next) => cursor = Some(next),
                None => return Ok(all),
            }
        }
        Err(self.refused(
            method,
            format!(
                "still paging after {} pages (limits.list_pages): a backend whose every page has a nextCursor is refused",
                self.limits.pages
            ),
        ))
    }
}

/// Bytes of `item` as JSON, counted without building the text.
fn serialized_len<T: Serialize>(item: &T) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    let _ = serde_json::to_writer(&mut count, item);
    count.0
}

/// Lists every kind the backend declared in `caps`, within `timeout` per
/// page and `limits` for the whole listing; `lost` turns a failed request
/// into the connection's error.
pub async fn list_catalog(
    backend: &Arc<str>,
    peer: &Peer<RoleClient>,
    caps: &ServerCapabilities,
    timeout: Duration,
    limits: ListLimits,
    lost: &(dyn Fn(ServiceError) -> BackendError + Sync),
) -> Result<BackendCatalog, BackendError> {
    let mut budget = Budget {
        backend,
        lost,
        limits,
        timeout,
        items: 0,
        bytes: 0,
    };
    let mut c = BackendCatalog::default();
    if caps.tools.is_some() {
        c.tools = budget
            .all_pages("tools/list", |p| peer.list_tools(p))
            .await?;
    }
    if caps.resources.is_some() {
        c.resources = budget
            .all_pages("resources/list", |p| peer.list_resources(p))
            .await?;
        c.templates = budget
            .all_pages("resources/templates/list", |p| {
                peer.list_resource_templates(p)
            })
            .await?;
    }
    if caps.prompts.is_some() {
        c.prompts = budget
            .all_pages("prompts/list", |p| peer.list_prompts(p))
            .await?;
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lost(e: ServiceError) -> BackendError {
        BackendError::Mcp(rmcp::ErrorData::internal_error(e.to_string(), None))
    }

    fn budget(backend: &Arc<str>, limits: ListLimits) -> Budget<'_> {
        Budget {
            backend,
            lost: &lost,
            limits,
            timeout: Duration::from_secs(1),
            items: 0,
            bytes: 0,
        }
    }

    fn tool_page(n: usize, next: Option<&str>) -> ListToolsResult {
        let tools = (0..n)
            .map(|i| {
                rmcp::model::Tool::new(format!("t{i}"), "a tool", Arc::new(serde_json::Map::new()))
            })
            .collect();
        let mut page = ListToolsResult::with_all_items(tools);
        page.next_cursor = next.map(str::to_owned);
        page
    }

    #[tokio::test]
    async fn pages_are_followed_to_the_last() {
        let b: Arc<str> = "b".into();
        let mut budget = budget(&b, ListLimits::default());
        let items = budget
            .all_pages(
                "tools/list",
                |p: Option<PaginatedRequestParams>| async move {
                    let at = p
                        .and_then(|p| p.cursor)
                        .map_or(0, |c| c.parse::<usize>().unwrap());
                    let next = (at < 3).then(|| (at + 1).to_string());
                    Ok::<_, ServiceError>(tool_page(2, next.as_deref()))
                },
            )
            .await
            .unwrap();
        assert_eq!(items.len(), 8);
    }

    #[tokio::test]
    async fn endless_pages_are_refused_at_the_page_limit() {
        let b: Arc<str> = "b".into();
        let limits = ListLimits {
            pages: 5,
            ..ListLimits::default()
        };
        let calls = std::sync::atomic::AtomicU32::new(0);
        let err = budget(&b, limits)
            .all_pages("tools/list", |_| {
                calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                async { Ok::<_, ServiceError>(tool_page(1, Some("again"))) }
            })
            .await
            .unwrap_err();
        assert_eq!(calls.into_inner(), 5);
        assert_eq!(
            err.to_string(),
            "backend 'b': tools/list: still paging after 5 pages (limits.list_pages): a backend whose every page has a nextCursor is refused"
        );
    }

    #[tokio::test]
    async fn items_and_bytes_are_capped_across_pages() {
        let b: Arc<str> = "b".into();
        let limits = ListLimits {
            items: 5,
            ..ListLimits::default()
        };
        let err = budget(&b, limits)
            .all_pages("tools/list", |_| async {
                Ok::<_, ServiceError>(tool_page(3, Some("x")))
            })
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("more than 5 items in one listing (limits.list_items)"),
            "{err}"
        );
        let limits = ListLimits {
            bytes: 100,
            ..ListLimits::default()
        };
        let err = budget(&b, limits)
            .all_pages("tools/list", |_| async {
                Ok::<_, ServiceError>(tool_page(3, Some("x")))
            })
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("more than 100 bytes in one listing (limits.list_bytes)"),
            "{err}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_page_that_never_comes_times_out_naming_the_method() {
        let b: Arc<str> = "b".into();
        let err = budget(&b, ListLimits::default())
            .all_pages("prompts/list", |_| {
                std::future::pending::<Result<ListPromptsResult, ServiceError>>()
            })
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "backend 'b': prompts/list: no answer to page 1 within 1s (request_timeout)"
        );
    }

    #[test]
    fn serialized_len_counts_json_bytes() {
        assert_eq!(
            serialized_len(&serde_json::json!({"a": "bc"})),
            r#"{"a":"bc"}"#.len()
        );
    }
}
