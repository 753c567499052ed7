//! The queue-settings API (ours, beyond NSQ; nsqd's side is crates/nsqd's http/queue.rs):
//!
//! - `GET /api/settings/:topic`, `GET /api/settings/:topic/:channel`: every
//!   producer's settings as its nsqd answers them, and the merged view (a key whose nodes do
//!   not agree is `{"source":"differs","value":null}`);
//! - `POST` on the same paths with `{"settings":{"ttl":"10m","max_attempts":3,…}}` (admins
//!   only): sets them on every producer (a value of `""` or `null` clears the key), nsqd's
//!   `400` message passed through (`INVALID_TTL`), and answers as the `GET` does;
//! - `GET /api/peek/:topic/:channel?n=20` (admins only): the messages each producer's
//!   nsqd would deliver next, each tagged with its `node`; a node whose nsqd runs without
//!   `--http-peek` (its 404) is listed with `"peek":"off"`, not an error.
//!
//! Failures follow the API's rules: the producers not known, or not one of them answering,
//! is `502 UPSTREAM_ERROR`; a node that failed is listed with its `error` and is a warning in
//! `message`. A node without the topic or channel is listed with nsqd's refusal as its
//! `error` (`CHANNEL_NOT_FOUND`); when every node refuses, the answer is the first refusal.

use std::collections::BTreeSet;

use serde_json::Map;

use super::*;
use crate::cluster::{NodeAnswer, NodeRef};
use nsq_go::url::query_escape;

/// The largest body read (a settings object is a few hundred bytes).
const MAX_BODY: usize = 64 << 10;

/// Messages peeked per node when `n` is not given, and the most nsqd lists.
const PEEK_DEFAULT: u32 = 20;
const PEEK_MAX: u32 = 1000;

/// One node in an answer.
#[derive(Serialize)]
struct NodeEntry {
    node: String,
    hostname: String,
    /// Peek only: `on`, `off` (nsqd without `--http-peek`) or `error`.
    #[serde(skip_serializing_if = "Option::is_none")]
    peek: Option<&'static str>,
    /// Config only: nsqd's `settings` object.
    #[serde(skip_serializing_if = "Option::is_none")]
    settings: Option<Value>,
    /// Peek only: how many messages the node listed.
    #[serde(skip_serializing_if = "Option::is_none")]
    count: Option<usize>,
    /// nsqd's refusal (`CHANNEL_NOT_FOUND`) or the failure's text.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

impl NodeEntry {
    fn new(n: &NodeRef) -> NodeEntry {
        NodeEntry {
            node: n.node.clone(),
            hostname: n.hostname.clone(),
            peek: None,
            settings: None,
            count: None,
            error: None,
        }
    }
}

/// The config answer.
#[derive(Serialize)]
struct ConfigAnswer {
    topic: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    channel: Option<String>,
    /// Each key's merged setting.
    settings: Map<String, Value>,
    nodes: Vec<NodeEntry>,
    message: String,
}

/// `topic=T[&channel=C]` for nsqd.
pub(super) fn queue_query(topic: &str, channel: Option<&str>) -> String {
    let mut q = format!("topic={}", query_escape(topic));
    if let Some(c) = channel {
        q.push_str("&channel=");
        q.push_str(&query_escape(c));
    }
    q
}

/// Whether an answer counts as the node's (peek: its 404 `NOT_FOUND` says peek is off).
fn answered(a: &NodeAnswer, peek: bool) -> bool {
    match a {
        NodeAnswer::Ok(_) => true,
        NodeAnswer::Refused { status, message } => peek && *status == 404 && message == "NOT_FOUND",
        NodeAnswer::Failed(_) => false,
    }
}

/// `Err` when no node answered (see [`answered`]): the first refusal when every node
/// refused, else `502` with the failures; otherwise the failures become one warning.
pub(super) fn judge(
    answers: &[(NodeRef, NodeAnswer)],
    peek: bool,
    warn: &mut Vec<String>,
) -> Result<(), Reply> {
    let failures: Vec<String> = answers
        .iter()
        .filter_map(|(_, a)| match a {
            NodeAnswer::Failed(e) => Some(e.to_string()),
            _ => None,
        })
        .collect();
    if answers.is_empty() || answers.iter().any(|(_, a)| answered(a, peek)) {
        if !failures.is_empty() {
            warn.push(failures.join("\n"));
        }
        return Ok(());
    }
    if failures.is_empty() {
        if let Some((_, NodeAnswer::Refused { status, message })) = answers.first() {
            let status = StatusCode::from_u16(*status).unwrap_or(StatusCode::BAD_REQUEST);
            return Err(err(status, message));
        }
    }
    Err(err(
        StatusCode::BAD_GATEWAY,
        &format!(
            "UPSTREAM_ERROR: failed to query any nsqd: {}",
            failures.join("\n")
        ),
    ))
}

/// Each key's setting when every node that answered has the same, else `differs`.
fn merge(all: &[&Map<String, Value>]) -> Map<String, Value> {
    let keys: BTreeSet<&String> = all.iter().flat_map(|m| m.keys()).collect();
    let mut out = Map::new();
    for k in keys {
        let first = all[0].get(k);
        let v = if all.iter().all(|m| m.get(k) == first) && first.is_some() {
            first.cloned().unwrap_or(Value::Null)
        } else {
            serde_json::json!({"source": "differs", "value": null})
        };
        out.insert(k.clone(), v);
    }
    out
}

fn config_answer(
    topic: &str,
    channel: Option<&str>,
    answers: Vec<(NodeRef, NodeAnswer)>,
    warn: &[String],
) -> Reply {
    let mut nodes = Vec::new();
    let mut all: Vec<Map<String, Value>> = Vec::new();
    for (n, a) in answers {
        let mut e = NodeEntry::new(&n);
        match a {
            NodeAnswer::Ok(mut v) => {
                let s = v.get_mut("settings").map(Value::take).unwrap_or_default();
                if let Value::Object(m) = &s {
                    all.push(m.clone());
                }
                e.settings = Some(s);
            }
            NodeAnswer::Refused { message, .. } => e.error = Some(message),
            NodeAnswer::Failed(f) => e.error = Some(f.to_string()),
        }
        nodes.push(e);
    }
    let refs: Vec<&Map<String, Value>> = all.iter().collect();
    Reply::json(&ConfigAnswer {
        topic: topic.to_string(),
        channel: channel.map(str::to_string),
        settings: if refs.is_empty() {
            Map::new()
        } else {
            merge(&refs)
        },
        nodes,
        message: warn_msg(warn),
    })
}

/// `GET /api/settings/:topic[/:channel]`, and `POST` to change it.
pub(super) async fn config(
    admin: &Arc<Admin>,
    ctx: &Ctx,
    topic: &str,
    channel: Option<&str>,
) -> ApiResult {
    let post = ctx.method == Method::POST;
    let mut query = queue_query(topic, channel);
    if post {
        require_admin(admin, ctx)?;
        for (k, v) in settings_body(ctx).await? {
            query.push_str(&format!("&{}={}", query_escape(&k), query_escape(&v)));
        }
    }
    let path = match channel {
        Some(_) => "channel/config",
        None => "topic/config",
    };
    let mut warn = Vec::new();
    let ci = admin.cluster();
    let ps = ci
        .topic_producers(topic, &mut warn)
        .await
        .map_err(upstream)?;
    let path_query = format!("{path}?{query}");
    let answers = if post {
        ci.post_each(&ps, &path_query).await
    } else {
        ci.get_each(&ps, &path_query).await
    };
    if post {
        // nsqd refused the values (and changed nothing): its message, as it gave it.
        if let Some((
            _,
            NodeAnswer::Refused {
                status: 400,
                message,
            },
        )) = answers.last()
        {
            return Err(err(StatusCode::BAD_REQUEST, message));
        }
    }
    judge(&answers, false, &mut warn)?;
    if post {
        let action = match channel {
            Some(_) => "set_channel_config",
            None => "set_topic_config",
        };
        notify(admin, ctx, action, topic, channel.unwrap_or(""), "");
    }
    Ok(config_answer(topic, channel, answers, &warn))
}

/// The body's `settings` as `key=value` pairs: a string as it is, a number written out,
/// `null` as `""` (clears the key). Anything else is `400 INVALID_BODY`.
async fn settings_body(ctx: &Ctx) -> Result<Vec<(String, String)>, Reply> {
    let bad = || err(StatusCode::BAD_REQUEST, "INVALID_BODY");
    let body = read_limited(ctx, MAX_BODY + 1)
        .await
        .map_err(|_| err(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL_ERROR"))?;
    if body.len() > MAX_BODY {
        return Err(bad());
    }
    let v: Value = serde_json::from_slice(&body).map_err(|_| bad())?;
    let Some(settings) = v.get("settings").and_then(Value::as_object) else {
        return Err(bad());
    };
    settings
        .iter()
        .map(|(k, v)| {
            let v = match v {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                Value::Null => String::new(),
                _ => return Err(bad()),
            };
            Ok((k.clone(), v))
        })
        .collect()
}

/// `GET /api/peek/:topic/:channel?n=20`.
pub(super) async fn peek(admin: &Arc<Admin>, ctx: &Ctx, topic: &str, channel: &str) -> ApiResult {
    require_admin(admin, ctx)?;
    let q = Query::parse(ctx.raw_query.as_deref().unwrap_or(""))
        .map_err(|e| err(StatusCode::BAD_REQUEST, &e.to_string()))?;
    let n = match q.get("n") {
        None => PEEK_DEFAULT,
        Some(s) => s
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=PEEK_MAX).contains(n))
            .ok_or_else(|| err(StatusCode::BAD_REQUEST, "INVALID_N"))?,
    };
    let mut warn = Vec::new();
    let ci = admin.cluster();
    let ps = ci
        .topic_producers(topic, &mut warn)
        .await
        .map_err(upstream)?;
    let path_query = format!("channel/peek?{}&n={n}", queue_query(topic, Some(channel)));
    let answers = ci.get_each(&ps, &path_query).await;
    judge(&answers, true, &mut warn)?;
    let mut nodes = Vec::new();
    let mut messages = Vec::new();
    for (node, a) in answers {
        let mut e = NodeEntry::new(&node);
        match a {
            NodeAnswer::Ok(mut v) => {
                let list = match v.get_mut("messages").map(Value::take) {
                    Some(Value::Array(l)) => l,
                    _ => Vec::new(),
                };
                e.peek = Some("on");
                e.count = Some(list.len());
                for mut m in list {
                    if let Value::Object(o) = &mut m {
                        o.insert("node".to_string(), Value::String(node.node.clone()));
                    }
                    messages.push(m);
                }
            }
            NodeAnswer::Refused {
                status: 404,
                message,
            } if message == "NOT_FOUND" => {
                e.peek = Some("off");
            }
            NodeAnswer::Refused { message, .. } => {
                e.peek = Some("error");
                e.error = Some(message);
            }
            NodeAnswer::Failed(f) => {
                e.peek = Some("error");
                e.error = Some(f.to_string());
            }
        }
        nodes.push(e);
    }
    #[derive(Serialize)]
    struct PeekAnswer {
        topic: String,
        channel: String,
        nodes: Vec<NodeEntry>,
        messages: Vec<Value>,
        message: String,
    }
    Ok(Reply::json(&PeekAnswer {
        topic: topic.to_string(),
        channel: channel.to_string(),
        nodes,
        messages,
        message: warn_msg(&warn),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn merged_settings() {
        let a = m(serde_json::json!({
            "ttl": {"source": "set", "value": "1m0s"},
            "max_depth": {"source": "off", "value": null},
        }));
        let b = m(serde_json::json!({
            "ttl": {"source": "set", "value": "1m0s"},
            "max_depth": {"source": "set", "value": 5},
        }));
        let out = Value::Object(merge(&[&a, &b]));
        assert_eq!(
            out,
            serde_json::json!({
                "max_depth": {"source": "differs", "value": null},
                "ttl": {"source": "set", "value": "1m0s"},
            })
        );
        assert_eq!(Value::Object(merge(&[&a])), Value::Object(a.clone()));
    }

    #[test]
    fn judging_answers() {
        let node = |n: &str| NodeRef {
            node: n.to_string(),
            hostname: n.to_string(),
        };
        let refused = |s: u16, m: &str| NodeAnswer::Refused {
            status: s,
            message: m.to_string(),
        };
        let mut w = Vec::new();
        // Every node without the channel: its 404.
        let r = judge(
            &[(node("a"), refused(404, "CHANNEL_NOT_FOUND"))],
            false,
            &mut w,
        );
        let e = r.unwrap_err();
        assert_eq!(
            (e.status.as_u16(), &e.body[..]),
            (404, &br#"{"message":"CHANNEL_NOT_FOUND"}"#[..])
        );
        // Peek off is an answer.
        assert!(judge(&[(node("a"), refused(404, "NOT_FOUND"))], true, &mut w).is_ok());
        assert!(judge(&[(node("a"), refused(404, "NOT_FOUND"))], false, &mut w).is_err());
        // One node answered: the other's failure is a warning.
        let failed = NodeAnswer::Failed(crate::cluster::ClusterError::Http(
            nsq_http::client::HttpError::Redirect("boom".into()),
        ));
        let ok = NodeAnswer::Ok(Value::Null);
        assert!(judge(&[(node("a"), ok), (node("b"), failed)], false, &mut w).is_ok());
        assert_eq!(w, vec!["boom".to_string()]);
    }
}
