//! A backend's server→client requests for a client that cannot be sent
//! them: a 2026-07-28 client, which takes such requests only as an
//! input-required result of its own call (MRTR) and answers by calling again.
//!
//! The call to the backend then runs on its own task. What it reports — a
//! question for the client, or its answer — comes through one channel
//! ([`Event`]), read by whichever client request is current: the first
//! call, then each retry (see `gateway/mrtr.rs`).

use rmcp::ErrorData as McpError;
use rmcp::model::{ClientResult, ServerRequest, ServerResult};
use tokio::sync::{mpsc, oneshot};

use super::BackendError;

/// What a backend call relayed by MRTR reports.
pub enum Event {
    /// The backend asks the client something; the answer goes to `reply`.
    Ask {
        request: ServerRequest,
        reply: oneshot::Sender<Result<ClientResult, McpError>>,
    },
    /// The backend answered the call. `recovered`: the call re-initialized
    /// a session the backend forgot (it may offer other tools now).
    Done {
        result: Result<ServerResult, BackendError>,
        recovered: bool,
    },
}

/// The sending side, carried by the call's [`super::FrontCall`].
#[derive(Clone)]
pub struct Asker(mpsc::Sender<Event>);

/// Questions a call may have waiting at once; a backend asking more
/// without an answer waits.
const BACKLOG: usize = 8;

impl Asker {
    pub fn channel() -> (Asker, mpsc::Receiver<Event>) {
        let (tx, rx) = mpsc::channel(BACKLOG);
        (Asker(tx), rx)
    }

    /// Hands `request` to the client's side and waits for its answer.
    pub async fn ask(&self, request: ServerRequest) -> Result<ClientResult, McpError> {
        let (reply, answer) = oneshot::channel();
        let gone = || {
            McpError::internal_error(
                "vigil: the client's call ended before it answered the question",
                None,
            )
        };
        self.0
            .send(Event::Ask { request, reply })
            .await
            .map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?
    }

    /// Reports the call's answer.
    pub async fn done(&self, result: Result<ServerResult, BackendError>, recovered: bool) {
        let _ = self.0.send(Event::Done { result, recovered }).await;
    }
}
