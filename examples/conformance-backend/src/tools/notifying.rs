//! Tools that send notifications while they run: log messages and progress.

#![allow(deprecated)] // rmcp marks MCP logging deprecated (SEP-2577).

use std::time::Duration;

use rmcp::{
    Peer, RoleServer,
    model::{CallToolResult, ContentBlock, LoggingLevel, ProgressNotificationParam, ProgressToken},
};

use crate::logging::LogThreshold;

const STEP: Duration = Duration::from_millis(50);

/// `test_tool_with_logging`: three `info` messages, 50 ms apart (none when
/// the request's threshold is `None`: a 2026-07-28 request without a level).
pub async fn with_logging(peer: &Peer<RoleServer>, log: Option<&LogThreshold>) -> CallToolResult {
    for (index, message) in [
        "Tool execution started",
        "Tool processing data",
        "Tool execution completed",
    ]
    .into_iter()
    .enumerate()
    {
        if index > 0 {
            tokio::time::sleep(STEP).await;
        }
        if let Some(log) = log {
            log.log(peer, LoggingLevel::Info, message).await;
        }
    }
    CallToolResult::success(vec![ContentBlock::text(
        "Tool with logging executed successfully",
    )])
}

/// `test_tool_with_progress`: progress 0, 50 and 100 of 100, 50 ms apart,
/// against the caller's progress token (none are sent without one).
pub async fn with_progress(
    peer: &Peer<RoleServer>,
    token: Option<ProgressToken>,
) -> CallToolResult {
    let Some(token) = token else {
        return CallToolResult::success(vec![ContentBlock::text(
            "No progress token was given, so no progress was reported",
        )]);
    };
    for (index, progress) in [0u32, 50, 100].into_iter().enumerate() {
        if index > 0 {
            tokio::time::sleep(STEP).await;
        }
        let mut param = ProgressNotificationParam::new(token.clone(), f64::from(progress));
        param.total = Some(100.0);
        param.message = Some(format!("Completed step {progress} of 100"));
        if let Err(error) = peer.notify_progress(param).await {
            tracing::debug!(%error, "could not send progress");
        }
    }
    let token = serde_json::to_value(&token)
        .map(|t| t.to_string())
        .unwrap_or_default();
    CallToolResult::success(vec![ContentBlock::text(format!(
        "Progress reported against token {token}"
    ))])
}
