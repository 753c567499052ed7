//! `GET /api/replication` (ours; NSQ's nsqadmin has no replication): every nsqd of the
//! cluster with the `replication` key of its `/stats` (docs/replication.md, Visibility), for
//! the UI's Replication page.
//!
//! The nodes are those of `/api/nodes`, in its order (nsqadmin/http.go, `nodesHandler`:
//! `GetProducers`); each node's `/stats` is read concurrently. The errors follow the
//! reference's `GetNSQDStats` as its handlers use it (nsqadmin/http.go, `topicHandler`): when
//! not one node answered, `502 UPSTREAM_ERROR: failed to query any nsqd: …`; when some did, a
//! 200 whose `message` is `WARNING: ` and the failures (`maybeWarnMsg`), each failed node
//! listed with its `error` and `"replication":null`.

use std::sync::Arc;

use serde::Serialize;

use super::api::{upstream, warn_msg};
use super::Reply;
use crate::admin::Admin;
use crate::cluster::{fan_out, get_json, ClusterError, Producer};
use crate::stats::{RawStats, Replication};

/// One node of the answer.
#[derive(Debug, Serialize)]
struct Node {
    /// `broadcast_address:http_port` (IPv6 bracketed): the key of `/api/nodes/:node`.
    node: String,
    hostname: String,
    broadcast_address: String,
    tcp_port: i64,
    http_port: i64,
    /// The node's `replication` key unchanged; `null` when replication is off on the node
    /// (or its `/stats` could not be read).
    replication: Option<Replication>,
    /// Why the node's `/stats` could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

#[derive(Debug, Serialize)]
struct Answer {
    nodes: Vec<Node>,
    message: String,
}

pub(super) async fn handle(admin: &Arc<Admin>) -> Reply {
    answer(admin).await.unwrap_or_else(|e| e)
}

async fn answer(admin: &Arc<Admin>) -> Result<Reply, Reply> {
    let ci = admin.cluster();
    let mut warn = Vec::new();
    let producers = ci.producers(&mut warn).await.map_err(upstream)?;
    let c = ci.client.clone();
    let targets: Vec<String> = producers.iter().map(Producer::http_address).collect();
    let results = fan_out(targets, move |addr| {
        get_json::<RawStats>(
            c.clone(),
            format!("http://{addr}/stats?format=json&include_clients=false"),
        )
    })
    .await;
    let nodes = fold(producers, results, &mut warn).map_err(upstream)?;
    Ok(Reply::json(&Answer {
        nodes,
        message: warn_msg(&warn),
    }))
}

/// The answer's nodes from the producers and their `/stats` results (in the same order), by
/// the GET fan-out rule (crate::cluster, `gather`): an error when every node failed (and
/// there was at least one; no node is an empty list here, not an error), else the failures
/// as one warning, their lines joined by `\n`.
fn fold(
    producers: Vec<Producer>,
    results: Vec<Result<RawStats, ClusterError>>,
    warn: &mut Vec<String>,
) -> Result<Vec<Node>, ClusterError> {
    if !results.is_empty() && results.iter().all(Result::is_err) {
        return Err(ClusterError::NoneAnswered {
            kind: "nsqd",
            errors: results.into_iter().filter_map(Result::err).collect(),
        });
    }
    let mut failed = Vec::new();
    let nodes = producers
        .into_iter()
        .zip(results)
        .map(|(p, r)| {
            let (replication, error) = match r {
                Ok(raw) => (raw.replication, None),
                Err(e) => {
                    let e = e.to_string();
                    failed.push(e.clone());
                    (None, Some(e))
                }
            };
            Node {
                node: p.http_address(),
                hostname: p.hostname,
                broadcast_address: p.broadcast_address,
                tcp_port: p.tcp_port,
                http_port: p.http_port,
                replication,
                error,
            }
        })
        .collect();
    if !failed.is_empty() {
        warn.push(failed.join("\n"));
    }
    Ok(nodes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nsq_http::client::HttpError;

    fn producer(host: &str, port: i64) -> Producer {
        Producer {
            remote_addresses: None,
            remote_address: String::new(),
            hostname: format!("h-{host}"),
            broadcast_address: host.to_string(),
            tcp_port: port - 1,
            http_port: port,
            version: "1.3.0".into(),
            topics: None,
            out_of_date: false,
        }
    }

    fn stats(json: &str) -> RawStats {
        serde_json::from_str(json).unwrap()
    }

    fn failure(t: &str) -> ClusterError {
        ClusterError::Http(HttpError::Redirect(t.into()))
    }

    const ON: &str = r#"{"topics":[],"replication":{"node_id":"00000000000000aa","epoch":1,
        "replicas":2,"peers":[],"replay":"done","fenced":false,"backlogs":[],
        "publish_waiting":0,"publish_failures":0,"takeovers":0,"taken_over_by_peers":0}}"#;

    /// A node with replication carries its key unchanged, one without has `null`, one that
    /// failed its error (and the answer a warning); the order is the producers'.
    #[test]
    fn nodes_in_order_with_their_key_or_error() {
        let mut warn = Vec::new();
        let nodes = fold(
            vec![
                producer("a", 4151),
                producer("::1", 4251),
                producer("c", 4351),
            ],
            vec![
                Ok(stats(ON)),
                Ok(stats(r#"{"topics":null}"#)),
                Err(failure("down")),
            ],
            &mut warn,
        )
        .unwrap();
        let json = String::from_utf8(crate::json::to_vec(&nodes)).unwrap();
        assert_eq!(
            json,
            concat!(
                r#"[{"node":"a:4151","hostname":"h-a","broadcast_address":"a","tcp_port":4150,"#,
                r#""http_port":4151,"replication":{"node_id":"00000000000000aa","epoch":1,"#,
                r#""replicas":2,"peers":[],"replay":"done","fenced":false,"backlogs":[],"#,
                r#""publish_waiting":0,"publish_failures":0,"takeovers":0,"taken_over_by_peers":0}},"#,
                r#"{"node":"[::1]:4251","hostname":"h-::1","broadcast_address":"::1","tcp_port":4250,"#,
                r#""http_port":4251,"replication":null},"#,
                r#"{"node":"c:4351","hostname":"h-c","broadcast_address":"c","tcp_port":4350,"#,
                r#""http_port":4351,"replication":null,"error":"down"}]"#
            )
        );
        assert_eq!(warn_msg(&warn), "WARNING: down");
    }

    /// Not one node answered: the stats fan-out's error; no node: an empty list.
    #[test]
    fn every_node_failed_or_none() {
        let mut warn = Vec::new();
        let e = fold(
            vec![producer("a", 1), producer("b", 2)],
            vec![Err(failure("x")), Err(failure("y"))],
            &mut warn,
        )
        .unwrap_err();
        assert_eq!(e.to_string(), "failed to query any nsqd: x\ny");
        assert!(fold(vec![], vec![], &mut warn).unwrap().is_empty());
        assert!(warn.is_empty());
    }

    /// An nsqd that does not write `fenced` (before it existed) gets none passed on.
    #[test]
    fn fenced_only_when_sent() {
        let without = ON.replace(r#""fenced":false,"#, "");
        let r = stats(&without).replication.unwrap();
        assert_eq!(r.fenced, None);
        let json = String::from_utf8(crate::json::to_vec(&r)).unwrap();
        assert!(!json.contains("fenced"), "{json}");
    }
}
