//! Finding the consumer's nsqd through nsqlookupd: one query of the topic's producers, tried
//! on up to three lookupds in turn (go-nsq consumer.go, `queryLookupd`), its answer handed to
//! the coordinator as an [`Event`].

use std::sync::Arc;

use crate::error::Error;
use crate::golog::LogLevel;
use crate::lookupd;

use super::{ConsumerShared, Event};

/// Queries the lookupds in `order` (the first is this poll's turn) and reports to the
/// coordinator: [`Event::Lookup`] with the producers' addresses, or [`Event::LookupFailed`].
pub(super) async fn query(shared: Arc<ConsumerShared>, order: Vec<String>) {
    // Up to 3 tries, each with the next lookupd (go-nsq consumer.go, queryLookupd).
    for (i, addr) in order.iter().cycle().take(3).enumerate() {
        // go-nsq logs the endpoint: the lookup URL with the topic.
        let endpoint = lookupd::lookup_url(addr, &shared.topic)
            .map_or_else(|_| addr.clone(), |u| u.to_string());
        shared
            .golog
            .log(LogLevel::Info, || format!("querying nsqlookupd {endpoint}"));
        match lookupd::query(addr, &shared.topic, &shared.config).await {
            Ok(addrs) => {
                let _ = shared.events.send(Event::Lookup(addrs));
                return;
            }
            Err(e) => {
                tracing::error!("error querying nsqlookupd ({addr}) - {e}");
                // go-nsq logs the error of `apiRequestNegotiateV1` as it is.
                let why = match &e {
                    Error::Lookupd { reason, .. } => reason.clone(),
                    other => other.to_string(),
                };
                shared.golog.log(LogLevel::Error, || {
                    format!("error querying nsqlookupd ({endpoint}) - {why}")
                });
                if i < 2 {
                    shared
                        .golog
                        .log(LogLevel::Info, || "retrying with next nsqlookupd".into());
                }
            }
        }
    }
    let _ = shared.events.send(Event::LookupFailed);
}
