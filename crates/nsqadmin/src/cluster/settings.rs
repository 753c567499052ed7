//! The queue settings of a topic or channel on every producer of the topic (ours, beyond
//! NSQ: nsqd's `/topic/config`, `/channel/config`, `/channel/peek` and `/channel/redrive`,
//! crates/nsqd's http/queue.rs). Unlike the reference's fan-outs, each node's answer is kept,
//! refusals (nsqd's 4xx `{"message":…}`) apart from failures, for the API handler to judge.

use serde_json::Value;

use super::*;

/// What one nsqd answered.
#[derive(Debug)]
pub enum NodeAnswer {
    /// A 200 and its JSON.
    Ok(Value),
    /// A 4xx with nsqd's `{"message":…}`: `404 NOT_FOUND` (peek off), `TOPIC_NOT_FOUND`,
    /// `CHANNEL_NOT_FOUND`, `400 INVALID_TTL`, ….
    Refused { status: u16, message: String },
    /// No answer, or one that is neither (the reference's error texts).
    Failed(ClusterError),
}

impl NodeAnswer {
    fn from_response(url: String, r: Result<nsq_http::client::Response, HttpError>) -> Self {
        let r = match r {
            Ok(r) => r,
            Err(e) => return NodeAnswer::Failed(e.into()),
        };
        if r.status == 200 {
            return match serde_json::from_slice(&r.body) {
                Ok(v) => NodeAnswer::Ok(v),
                Err(source) => NodeAnswer::Failed(ClusterError::Decode { url, source }),
            };
        }
        let message = serde_json::from_slice::<Value>(&r.body)
            .ok()
            .and_then(|v| v.get("message").and_then(Value::as_str).map(str::to_string));
        match message {
            Some(message) if (400..500).contains(&r.status) => NodeAnswer::Refused {
                status: r.status,
                message,
            },
            _ => NodeAnswer::Failed(ClusterError::Http(HttpError::Status {
                status: r.status,
                status_line: r.status_line,
                body: r.body,
            })),
        }
    }
}

/// One producer addressed by the answer: `broadcast_address:http_port` and its hostname.
#[derive(Debug, Clone)]
pub struct NodeRef {
    pub node: String,
    pub hostname: String,
}

impl NodeRef {
    fn of(p: &Producer) -> NodeRef {
        NodeRef {
            node: p.http_address(),
            hostname: p.hostname.clone(),
        }
    }
}

impl ClusterInfo {
    /// `GET http://<node>/<path_query>` on every producer at once; answers in producer order.
    pub async fn get_each(
        &self,
        producers: &[Producer],
        path_query: &str,
    ) -> Vec<(NodeRef, NodeAnswer)> {
        let c = self.client.clone();
        let path_query = path_query.to_string();
        let nodes: Vec<NodeRef> = producers.iter().map(NodeRef::of).collect();
        fan_out(nodes, move |n| {
            let c = c.clone();
            let url = format!("http://{}/{path_query}", n.node);
            async move {
                let r = c.get(&url).await;
                (n, NodeAnswer::from_response(url, r))
            }
        })
        .await
    }

    /// `POST http://<node>/<path_query>` on each producer in turn, stopping after the first
    /// `400` (nsqd refused the values: every nsqd judges them alike, and it changed nothing);
    /// answers in producer order, the ones not asked left out.
    pub async fn post_each(
        &self,
        producers: &[Producer],
        path_query: &str,
    ) -> Vec<(NodeRef, NodeAnswer)> {
        self.post_nodes(producers, path_query, true).await
    }

    /// `POST http://<node>/<path_query>` on every producer in turn, whatever each answers
    /// (redrive: a node's refusal, its channel paused there, says nothing of the others');
    /// answers in producer order.
    pub async fn post_every(
        &self,
        producers: &[Producer],
        path_query: &str,
    ) -> Vec<(NodeRef, NodeAnswer)> {
        self.post_nodes(producers, path_query, false).await
    }

    async fn post_nodes(
        &self,
        producers: &[Producer],
        path_query: &str,
        stop_at_400: bool,
    ) -> Vec<(NodeRef, NodeAnswer)> {
        let mut out = Vec::new();
        for p in producers {
            let n = NodeRef::of(p);
            let url = format!("http://{}/{path_query}", n.node);
            let a = NodeAnswer::from_response(url.clone(), self.client.post(&url).await);
            let stop = stop_at_400 && matches!(a, NodeAnswer::Refused { status: 400, .. });
            out.push((n, a));
            if stop {
                break;
            }
        }
        out
    }
}
