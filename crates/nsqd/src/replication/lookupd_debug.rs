//! What the takeover watch reads from nsqlookupd (docs/replication.md, "Takeover"): each
//! configured lookupd's `/debug` (nsqlookupd/http.go, `doDebug`), its producers and the
//! lookupd's clock read from them.

use std::collections::BTreeMap;
use std::time::Duration;

/// One producer of nsqlookupd's `/debug` (the fields the watch reads).
#[derive(serde::Deserialize)]
pub(super) struct DebugProducer {
    pub(super) broadcast_address: String,
    pub(super) tcp_port: i64,
    pub(super) last_update: i64,
}

/// What one nsqlookupd's `/debug` says: its clock — the newest `last_update` of any
/// producer, a time on the lookupd's own clock at or before the answer (this node PINGs it
/// every T/8 while it replicates, so the clock moves on with every answer) — and the
/// producers (`broadcast_address`, `tcp_port`, `last_update`).
pub(super) struct DebugAnswer {
    pub(super) clock: Duration,
    pub(super) producers: Vec<DebugProducer>,
}

/// Polls nsqlookupd `http`'s `/debug` (None: no answer, or no producer to read a clock from).
pub(super) async fn poll_debug(
    client: &nsq_http::client::HttpClient,
    http: &str,
) -> Option<DebugAnswer> {
    let url = format!("http://{http}/debug");
    let answer = match client.get_v1(&url).await {
        Ok(body) => serde_json::from_slice::<BTreeMap<String, Vec<DebugProducer>>>(&body)
            .map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    let producers = match answer {
        Ok(mut m) => m.remove("client::").unwrap_or_default(),
        Err(e) => {
            tracing::debug!("REPLICATION: lookupd {http} /debug failed - {e}");
            return None;
        }
    };
    let clock = producers.iter().map(|p| p.last_update).max()?;
    Some(DebugAnswer {
        clock: Duration::from_nanos(u64::try_from(clock).ok()?),
        producers,
    })
}
