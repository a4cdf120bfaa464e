//! Hearing the other replicas, and telling them: the store's notes
//! (`store::postgres::note`) in both directions.
//!
//! [`Listener`] keeps a connection of its own (a pooled one would drop its
//! notifications, see `store::postgres`'s driver notes) listening on the
//! notes' channel, and hands each note another replica sent to the feed
//! ([`LocalFeed::heard_elsewhere`]); for a health note it reads the
//! transitions the note names first. When the connection breaks it
//! connects again with backoff, listens again, and then tells every
//! follower to look again ([`LocalFeed::heard_everything`]): notes sent
//! meanwhile were lost, the rows they named were not.
//!
//! [`announce`] sends what this replica's feed announces
//! ([`Announce`]).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use tokio::sync::mpsc;
use tokio_postgres::{AsyncMessage, NoTls};
use tokio_util::sync::CancellationToken;

use crate::cluster::feed::{Announce, LocalFeed};
use crate::store::postgres::PostgresStore;
use crate::store::postgres::note::{CHANNEL, Note};

/// Longest wait between two connection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Listens for other replicas' notes; see the module doc.
pub struct Listener {
    pub config: tokio_postgres::Config,
    pub store: PostgresStore,
    pub replica: String,
    pub feed: Arc<LocalFeed>,
    /// The shared session book, told of sessions other replicas closed.
    pub book: Option<Arc<super::book::PgBook>>,
    /// Requests routed between replicas: their answers, operator
    /// commands, MRTR retries.
    pub route: Option<Arc<super::route::Route>>,
    pub commands: Option<Arc<super::command::Commands>>,
    pub retries: Option<Arc<super::retry::Retries>>,
    /// Who hears of approvals another replica recorded.
    pub approvals: Arc<Approvals>,
}

/// Where the notes of approvals another replica recorded go (the app's
/// pin guard desk, set once it is assembled).
#[derive(Default)]
pub struct Approvals(std::sync::OnceLock<Heard>);

/// What is called with the backend of an approval another replica made.
pub type Heard = Box<dyn Fn(&str) + Send + Sync>;

impl Approvals {
    /// Calls `heard` with the backend of each approval another replica
    /// records (set once).
    pub fn set(&self, heard: Heard) {
        let _ = self.0.set(heard);
    }

    fn heard(&self, backend: &str) {
        if let Some(heard) = self.0.get() {
            heard(backend);
        }
    }
}

/// Why a listening connection ended.
#[derive(Debug, thiserror::Error)]
enum Ended {
    #[error(transparent)]
    Postgres(#[from] tokio_postgres::Error),
    #[error("the server closed the connection")]
    Closed,
}

impl Listener {
    /// Listens until `shutdown`, connecting again whenever the connection
    /// breaks.
    pub async fn run(self, shutdown: CancellationToken) {
        let mut backoff = Duration::from_millis(100);
        let mut failing = false;
        loop {
            let mut listening = || {
                if failing {
                    tracing::info!(store = %self.store.location(), "listening to the other replicas again; followers re-read what they follow");
                    failing = false;
                }
                backoff = Duration::from_millis(100);
            };
            let ended = tokio::select! {
                _ = shutdown.cancelled() => return,
                ended = self.listen(&mut listening) => ended,
            };
            crate::metrics::get().store_op("listen", false);
            if !failing {
                tracing::warn!(store = %self.store.location(), error = %ended, "not hearing the other replicas (health changes, listings): connecting again");
                failing = true;
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// One connection: listens, then hands on notes until it breaks.
    async fn listen(&self, listening: &mut (dyn FnMut() + Send)) -> Ended {
        let (client, mut connection) = match self.config.connect(NoTls).await {
            Ok(c) => c,
            Err(e) => return e.into(),
        };
        // The connection is driven here; its notifications come out of it.
        let (notes, mut heard) = mpsc::unbounded_channel();
        let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
        let drive = async move {
            while let Some(message) = messages.next().await {
                match message {
                    Ok(AsyncMessage::Notification(n)) => {
                        let _ = notes.send(n.payload().to_owned());
                    }
                    Ok(_) => {}
                    Err(e) => return Ended::from(e),
                }
            }
            Ended::Closed
        };
        tokio::pin!(drive);
        let statement = format!("LISTEN {CHANNEL}");
        let listen = client.batch_execute(&statement);
        tokio::select! {
            ended = &mut drive => return ended,
            r = listen => if let Err(e) = r { return e.into() },
        }
        crate::metrics::get().store_op("listen", true);
        listening();
        // Whatever was said while nobody listened is lost: look again.
        self.feed.heard_everything();
        loop {
            tokio::select! {
                ended = &mut drive => return ended,
                Some(payload) = heard.recv() => self.hand_on(&payload).await,
            }
        }
    }

    /// Hands one note on to the feed, unless it is this replica's own.
    async fn hand_on(&self, payload: &str) {
        let Some(note) = Note::parse(payload) else {
            tracing::debug!(
                payload,
                "a note this build does not know (a newer replica's?)"
            );
            return;
        };
        if note.replica() == self.replica {
            return;
        }
        crate::metrics::get().notifications_heard.inc();
        match note {
            Note::Health { b, t, .. } => {
                let transitions = if t.is_empty() {
                    Vec::new()
                } else {
                    let read = self.store.transitions_by_id(&t).await;
                    crate::metrics::get().store_op("listen", read.is_ok());
                    match read {
                        Ok(rows) => rows.logged("announced transitions"),
                        Err(e) => {
                            tracing::warn!(backend = %b, error = %e, "could not read the transitions another replica announced; the event stream misses them");
                            Vec::new()
                        }
                    }
                };
                self.feed.heard_elsewhere(&b, transitions, true, false);
            }
            Note::Listing { b, .. } => self.feed.heard_elsewhere(&b, Vec::new(), false, true),
            Note::Closed { s, e, .. } => {
                if let Some(book) = &self.book {
                    book.heard_closed(&s, e);
                }
            }
            Note::Command { b, id, .. } => {
                if let Some(commands) = self.commands.clone() {
                    // Carried out beside the listener: a command may take
                    // as long as a backend's stop.
                    crate::background::spawn(async move { commands.heard(&b, id).await });
                }
            }
            Note::Retry { to, id, .. } => {
                if let Some(retries) = self.retries.clone() {
                    // Carried out beside the listener: the backend's round
                    // may take up to its request timeout.
                    crate::background::spawn(async move { retries.heard(&to, id).await });
                }
            }
            Note::Approved { b, .. } => self.approvals.heard(&b),
            Note::Answered { id, .. } => {
                if let Some(route) = &self.route {
                    route.answered(id);
                }
            }
        }
    }
}

/// Sends what this replica announces, as `replica`, until `shutdown`. A
/// note that cannot be sent is dropped (logged): the other replicas' own
/// poller lists the backend again in time.
pub async fn announce(
    store: PostgresStore,
    replica: String,
    mut announced: mpsc::UnboundedReceiver<Announce>,
    shutdown: CancellationToken,
) {
    loop {
        let a = tokio::select! {
            _ = shutdown.cancelled() => return,
            a = announced.recv() => match a { Some(a) => a, None => return },
        };
        let note = match a {
            Announce::Relisted(b) => Note::Listing {
                r: replica.clone(),
                b: b.to_string(),
            },
        };
        let sent = store.notify(&note).await;
        crate::metrics::get().store_op("announce", sent.is_ok());
        if let Err(e) = sent {
            tracing::warn!(error = %e, "could not tell the other replicas of a listing change; their poller will see it");
        }
    }
}

#[cfg(test)]
mod tests;
