//! Listing what a backend advertises, within bounds.
//!
//! A listing follows `nextCursor` page by page. Each page is one request
//! with the backend's request timeout, and the whole listing is capped in
//! pages, items and bytes ([`ListLimits`], `[limits]` in the config): a
//! backend that never answers, or pages without end, fails the listing
//! with a reason naming the method and the limit, instead of holding its
//! caller forever or growing Vigil's memory without bound. The caller keeps
//! the catalog it had. A fresh instance's first listing is part of its
//! start and also ends by the start's deadline ([`StartDeadline`],
//! `connect_timeout`), however long `request_timeout` is.
//!
//! Each page's result comes as the backend wrote it (see `wire`): the
//! entries are kept as JSON ([`Entry`]), so clients see every member the
//! backend lists, in its order.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use rmcp::model::{
    ClientRequest, ListPromptsRequest, ListResourceTemplatesRequest, ListResourcesRequest,
    ListToolsRequest, PaginatedRequestParams, ServerCapabilities,
};
use serde::Serialize;
use serde_json::Value;

use super::error::BackendError;
use crate::catalog::{BackendCatalog, Entry, EntryKind};

pub use crate::config::ListLimits;

/// The list method of entries of `kind`.
fn method(kind: EntryKind) -> &'static str {
    match kind {
        EntryKind::Tool => "tools/list",
        EntryKind::Prompt => "prompts/list",
        EntryKind::Resource => "resources/list",
        EntryKind::Template => "resources/templates/list",
    }
}

/// The request for the page of `kind` after `cursor`.
fn page_request(kind: EntryKind, cursor: Option<String>) -> ClientRequest {
    let params = cursor.map(|c| PaginatedRequestParams::default().with_cursor(Some(c)));
    match kind {
        EntryKind::Tool => ClientRequest::ListToolsRequest(ListToolsRequest {
            params,
            ..Default::default()
        }),
        EntryKind::Prompt => ClientRequest::ListPromptsRequest(ListPromptsRequest {
            params,
            ..Default::default()
        }),
        EntryKind::Resource => ClientRequest::ListResourcesRequest(ListResourcesRequest {
            params,
            ..Default::default()
        }),
        EntryKind::Template => {
            ClientRequest::ListResourceTemplatesRequest(ListResourceTemplatesRequest {
                params,
                ..Default::default()
            })
        }
    }
}

/// When a start must be over: the first listing of a fresh instance is
/// part of its start, so no page of it waits past this, whatever the
/// backend's `request_timeout` (a backend that never answers its first
/// `tools/list` fails its start here instead of staying `starting`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StartDeadline {
    pub at: Instant,
    /// `connect_timeout`, which set `at`: named when it is what ran out.
    pub connect_timeout: Duration,
}

/// What one listing has taken so far, checked against the limits.
struct Budget<'a> {
    backend: &'a Arc<str>,
    limits: ListLimits,
    timeout: Duration,
    start: Option<StartDeadline>,
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

    /// One page's items and its `nextCursor`, from the result as the
    /// backend wrote it.
    fn read_page(
        &self,
        kind: EntryKind,
        page: Value,
    ) -> Result<(Vec<Value>, Option<String>), BackendError> {
        let method = method(kind);
        let Value::Object(mut page) = page else {
            return Err(self.refused(method, "the answer is not a JSON object".into()));
        };
        let items = match page.remove(kind.list_member()) {
            Some(Value::Array(items)) => items,
            Some(_) => {
                return Err(
                    self.refused(method, format!("`{}` is not an array", kind.list_member()))
                );
            }
            None => {
                return Err(self.refused(
                    method,
                    format!("the answer has no `{}`", kind.list_member()),
                ));
            }
        };
        let next = match page.remove("nextCursor") {
            None | Some(Value::Null) => None,
            Some(Value::String(c)) => Some(c),
            Some(_) => return Err(self.refused(method, "`nextCursor` is not a string".into())),
        };
        Ok((items, next))
    }

    /// How long the next page may take, and the reason to give when it
    /// does not come: the request timeout, or what is left of the start.
    fn page_wait(&self, page: u32) -> (Duration, String) {
        let per_request = (
            self.timeout,
            format!(
                "no answer to page {page} within {} (request_timeout)",
                humantime::format_duration(self.timeout)
            ),
        );
        match self.start {
            Some(start) => {
                let left = start.at.saturating_duration_since(Instant::now());
                if left < self.timeout {
                    (
                        left,
                        format!(
                            "no answer to page {page} within the start's {} (connect_timeout)",
                            humantime::format_duration(start.connect_timeout)
                        ),
                    )
                } else {
                    per_request
                }
            }
            None => per_request,
        }
    }

    /// Every page of one list method, each within the timeout (and the
    /// start's deadline), its items as the backend wrote them.
    async fn all_pages<F, Fut>(
        &mut self,
        kind: EntryKind,
        fetch: &F,
    ) -> Result<Vec<Entry>, BackendError>
    where
        F: Fn(ClientRequest) -> Fut,
        Fut: Future<Output = Result<Value, BackendError>>,
    {
        let method = method(kind);
        let mut all = Vec::new();
        let mut cursor: Option<String> = None;
        for page in 1..=self.limits.pages {
            let request = page_request(kind, cursor.take());
            let (wait, why) = self.page_wait(page);
            let answer = match tokio::time::timeout(wait, fetch(request)).await {
                Ok(answer) => answer?,
                Err(_) => return Err(self.refused(method, why)),
            };
            let (items, next) = self.read_page(kind, answer)?;
            self.take(method, &items)?;
            for item in items {
                let at = all.len();
                let entry = Entry::from_json(kind, item)
                    .map_err(|e| self.refused(method, format!("item {at} {e}")))?;
                all.push(entry);
            }
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
/// page, by `start` (a fresh instance's first listing) and within `limits`
/// for the whole listing; `fetch` sends one page's request and returns its
/// result as the backend wrote it.
pub async fn list_catalog<F, Fut>(
    backend: &Arc<str>,
    caps: &ServerCapabilities,
    timeout: Duration,
    start: Option<StartDeadline>,
    limits: ListLimits,
    fetch: F,
) -> Result<BackendCatalog, BackendError>
where
    F: Fn(ClientRequest) -> Fut,
    Fut: Future<Output = Result<Value, BackendError>>,
{
    let mut budget = Budget {
        backend,
        limits,
        timeout,
        start,
        items: 0,
        bytes: 0,
    };
    let mut c = BackendCatalog::default();
    if caps.tools.is_some() {
        c.tools = budget.all_pages(EntryKind::Tool, &fetch).await?;
    }
    if caps.resources.is_some() {
        c.resources = budget.all_pages(EntryKind::Resource, &fetch).await?;
        c.templates = budget.all_pages(EntryKind::Template, &fetch).await?;
    }
    if caps.prompts.is_some() {
        c.prompts = budget.all_pages(EntryKind::Prompt, &fetch).await?;
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(backend: &Arc<str>, limits: ListLimits) -> Budget<'_> {
        Budget {
            backend,
            limits,
            timeout: Duration::from_secs(1),
            start: None,
            items: 0,
            bytes: 0,
        }
    }

    fn tool_page(n: usize, next: Option<&str>) -> Value {
        let tools: Vec<Value> = (0..n)
            .map(|i| serde_json::json!({"name": format!("t{i}"), "description": "a tool", "inputSchema": {}}))
            .collect();
        let mut page = serde_json::json!({ "tools": tools });
        if let Some(next) = next {
            page["nextCursor"] = next.into();
        }
        page
    }

    /// The cursor of a page request.
    fn cursor(r: &ClientRequest) -> Option<String> {
        match r {
            ClientRequest::ListToolsRequest(r) => r.params.as_ref()?.cursor.clone(),
            _ => None,
        }
    }

    #[tokio::test]
    async fn pages_are_followed_to_the_last() {
        let b: Arc<str> = "b".into();
        let mut budget = budget(&b, ListLimits::default());
        let items = budget
            .all_pages(EntryKind::Tool, &|r: ClientRequest| async move {
                let at = cursor(&r).map_or(0, |c| c.parse::<usize>().unwrap());
                let next = (at < 3).then(|| (at + 1).to_string());
                Ok(tool_page(2, next.as_deref()))
            })
            .await
            .unwrap();
        assert_eq!(items.len(), 8);
        assert_eq!(items[7].key(), "t1");
    }

    #[tokio::test]
    async fn items_keep_their_members_in_the_backends_order() {
        let b: Arc<str> = "b".into();
        let page: Value = serde_json::from_str(
            r#"{"tools":[{"name":"x","inputSchema":{"type":"object"},"execution":{"taskSupport":"required"},"annotations":{"title":"X"}}]}"#,
        )
        .unwrap();
        let items = budget(&b, ListLimits::default())
            .all_pages(EntryKind::Tool, &|_| {
                let page = page.clone();
                async move { Ok(page) }
            })
            .await
            .unwrap();
        assert_eq!(
            serde_json::to_string(&items[0].to_value()).unwrap(),
            r#"{"name":"x","inputSchema":{"type":"object"},"execution":{"taskSupport":"required"},"annotations":{"title":"X"}}"#
        );
    }

    #[tokio::test]
    async fn malformed_pages_are_refused_naming_what_is_wrong() {
        let b: Arc<str> = "b".into();
        for (page, reason) in [
            (serde_json::json!([]), "the answer is not a JSON object"),
            (serde_json::json!({}), "the answer has no `tools`"),
            (serde_json::json!({"tools": {}}), "`tools` is not an array"),
            (
                serde_json::json!({"tools": [], "nextCursor": 3}),
                "`nextCursor` is not a string",
            ),
            (
                serde_json::json!({"tools": [{"name": "a"}, {"title": "b"}]}),
                "item 1 has no string `name`",
            ),
        ] {
            let err = budget(&b, ListLimits::default())
                .all_pages(EntryKind::Tool, &|_| {
                    let page = page.clone();
                    async move { Ok(page) }
                })
                .await
                .unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("backend 'b': tools/list: {reason}")
            );
        }
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
            .all_pages(EntryKind::Tool, &|_| {
                calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                async { Ok(tool_page(1, Some("again"))) }
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
            .all_pages(EntryKind::Tool, &|_| async { Ok(tool_page(3, Some("x"))) })
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
            .all_pages(EntryKind::Tool, &|_| async { Ok(tool_page(3, Some("x"))) })
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
            .all_pages(EntryKind::Prompt, &|_| {
                std::future::pending::<Result<Value, BackendError>>()
            })
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "backend 'b': prompts/list: no answer to page 1 within 1s (request_timeout)"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_start_ends_its_first_listing_at_its_deadline() {
        // A 60 s request timeout and a start with 2 s left: the page waits
        // 2 s, not 60 s, and the reason names connect_timeout.
        let b: Arc<str> = "b".into();
        let mut budget = budget(&b, ListLimits::default());
        budget.timeout = Duration::from_secs(60);
        budget.start = Some(StartDeadline {
            at: Instant::now() + Duration::from_secs(2),
            connect_timeout: Duration::from_secs(10),
        });
        let began = Instant::now();
        let err = budget
            .all_pages(EntryKind::Tool, &|_| {
                std::future::pending::<Result<Value, BackendError>>()
            })
            .await
            .unwrap_err();
        assert_eq!(began.elapsed(), Duration::from_secs(2));
        assert_eq!(
            err.to_string(),
            "backend 'b': tools/list: no answer to page 1 within the start's 10s (connect_timeout)"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_start_with_time_left_keeps_the_request_timeout_per_page() {
        let b: Arc<str> = "b".into();
        let mut budget = budget(&b, ListLimits::default());
        budget.start = Some(StartDeadline {
            at: Instant::now() + Duration::from_secs(10),
            connect_timeout: Duration::from_secs(10),
        });
        let err = budget
            .all_pages(EntryKind::Tool, &|_| {
                std::future::pending::<Result<Value, BackendError>>()
            })
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "backend 'b': tools/list: no answer to page 1 within 1s (request_timeout)"
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
