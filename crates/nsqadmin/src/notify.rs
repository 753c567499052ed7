//! Admin-action notifications (nsqadmin/notify.go, `notifyAdminAction`): each admin action enqueues a JSON body that one
//! background task POSTs to `--notification-http-endpoint`, one at a time, in order. A failed
//! POST is logged and dropped (the reference crashes on a transport error: [ref-defect]).

use serde::Serialize;
use tokio::sync::mpsc;

use crate::client::HttpClient;

/// The notification body (fields in the reference's order; empty optional fields omitted).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct AdminAction {
    pub action: String,
    pub topic: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub channel: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub node: String,
    pub timestamp: i64,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub user: String,
    pub remote_ip: String,
    pub user_agent: String,
    pub url: String,
    pub via: String,
}

/// The sending side of the queue; a no-op when no endpoint is configured.
#[derive(Debug, Clone)]
pub struct Notifier {
    tx: Option<mpsc::UnboundedSender<AdminAction>>,
}

impl Notifier {
    /// Starts the sender task for `endpoint` (nothing when it is empty).
    pub fn start(endpoint: &str, client: HttpClient) -> Notifier {
        if endpoint.is_empty() {
            return Notifier { tx: None };
        }
        let (tx, mut rx) = mpsc::unbounded_channel::<AdminAction>();
        let endpoint = endpoint.to_string();
        tokio::spawn(async move {
            while let Some(a) = rx.recv().await {
                let body = crate::json::to_vec(&a);
                let r = client.post_json(&endpoint, &body).await;
                match r {
                    Ok(resp) if resp.status >= 300 => tracing::warn!(
                        "notification endpoint {endpoint} answered {} to {}",
                        resp.status_line,
                        a.action
                    ),
                    Ok(_) => {}
                    Err(e) => tracing::error!("failed to send admin notification - {e}"),
                }
            }
        });
        Notifier { tx: Some(tx) }
    }

    pub fn enabled(&self) -> bool {
        self.tx.is_some()
    }

    /// Enqueues `a` (never blocks).
    pub fn send(&self, a: AdminAction) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(a);
        }
    }
}
