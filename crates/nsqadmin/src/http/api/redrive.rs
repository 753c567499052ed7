//! `POST /api/redrive/:topic/:channel` (ours, beyond NSQ; nsqd's side is crates/nsqd's
//! redrive.rs): with `{"n": N, "to": "topic"}` (both optional; admins only) it POSTs
//! `/channel/redrive` to every producer of the topic, which moves up to `n` of the channel's
//! queued messages (default: all) back into the channel each was dead-lettered from, or
//! publishes them to `to`. Answers each node's counts and their sums:
//! `{"topic","channel","moved","skipped","failed","nodes":[{"node","hostname","moved",
//! "skipped","failed"} | {"node","hostname","error"}],"message"}`.
//!
//! `n` and `to` are checked here as nsqd checks them (`400 INVALID_N`, `INVALID_TO`), so
//! that no node is asked with values every node refuses. Every node is asked, whatever the
//! others answered: a node's refusal (its channel paused there, `CHANNEL_PAUSED`, or absent,
//! `CHANNEL_NOT_FOUND`) is listed as its `error`, a pause also a warning in `message`; when
//! every node refuses, the answer is the first refusal, as the settings API's is.

use super::settings::{judge, queue_query};
use super::*;
use crate::cluster::NodeAnswer;
use nsq_go::url::query_escape;

/// The largest body read (`{"n":…,"to":…}` is tens of bytes).
const MAX_BODY: usize = 4 << 10;

/// What nsqd answered, or why it did not.
#[derive(Serialize)]
struct NodeResult {
    node: String,
    hostname: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    moved: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    skipped: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    failed: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

#[derive(Serialize)]
struct RedriveAnswer {
    topic: String,
    channel: String,
    moved: u64,
    skipped: u64,
    failed: u64,
    nodes: Vec<NodeResult>,
    message: String,
}

/// The body's `n` and `to` (`null`, absent and, for `to`, `""` mean none).
#[derive(Debug, PartialEq, Eq)]
struct Params {
    n: Option<u64>,
    to: Option<String>,
}

fn parse_body(body: &[u8]) -> Result<Params, &'static str> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Params { n: None, to: None });
    }
    let v: Value = serde_json::from_slice(body).map_err(|_| "INVALID_BODY")?;
    let Value::Object(o) = v else {
        return Err("INVALID_BODY");
    };
    let n = match o.get("n") {
        None | Some(Value::Null) => None,
        Some(v) => Some(v.as_u64().filter(|n| *n >= 1).ok_or("INVALID_N")?),
    };
    let to = match o.get("to") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(Value::String(s)) if is_valid_topic_name(s) => Some(s.clone()),
        Some(_) => return Err("INVALID_TO"),
    };
    Ok(Params { n, to })
}

/// `POST /api/redrive/:topic/:channel`.
pub(super) async fn redrive(
    admin: &Arc<Admin>,
    ctx: &Ctx,
    topic: &str,
    channel: &str,
) -> ApiResult {
    require_admin(admin, ctx)?;
    let body = read_limited(ctx, MAX_BODY + 1)
        .await
        .map_err(|_| err(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL_ERROR"))?;
    if body.len() > MAX_BODY {
        return Err(err(StatusCode::BAD_REQUEST, "INVALID_BODY"));
    }
    let params = parse_body(&body).map_err(|m| err(StatusCode::BAD_REQUEST, m))?;
    let mut path_query = format!("channel/redrive?{}", queue_query(topic, Some(channel)));
    if let Some(n) = params.n {
        path_query.push_str(&format!("&n={n}"));
    }
    if let Some(to) = &params.to {
        path_query.push_str(&format!("&to={}", query_escape(to)));
    }
    let mut warn = Vec::new();
    let ci = admin.cluster();
    let ps = ci
        .topic_producers(topic, &mut warn)
        .await
        .map_err(upstream)?;
    let answers = ci.post_every(&ps, &path_query).await;
    judge(&answers, false, &mut warn)?;
    notify(admin, ctx, "redrive_channel", topic, channel, "");
    let count = |v: &Value, k: &str| v.get(k).and_then(Value::as_u64).unwrap_or(0);
    let mut out = RedriveAnswer {
        topic: topic.to_string(),
        channel: channel.to_string(),
        moved: 0,
        skipped: 0,
        failed: 0,
        nodes: Vec::new(),
        message: String::new(),
    };
    let mut refused = Vec::new();
    for (n, a) in answers {
        let mut r = NodeResult {
            node: n.node.clone(),
            hostname: n.hostname,
            moved: None,
            skipped: None,
            failed: None,
            error: None,
        };
        match a {
            NodeAnswer::Ok(v) => {
                let (m, s, f) = (
                    count(&v, "moved"),
                    count(&v, "skipped"),
                    count(&v, "failed"),
                );
                out.moved += m;
                out.skipped += s;
                out.failed += f;
                (r.moved, r.skipped, r.failed) = (Some(m), Some(s), Some(f));
            }
            NodeAnswer::Refused { status, message } => {
                // A node without the channel is no news (as in the settings API); a paused
                // one left its messages where they are.
                if status != 404 {
                    refused.push(format!("{}: {message}", n.node));
                }
                r.error = Some(message);
            }
            NodeAnswer::Failed(e) => r.error = Some(e.to_string()),
        }
        out.nodes.push(r);
    }
    if !refused.is_empty() {
        warn.push(refused.join("\n"));
    }
    out.message = warn_msg(&warn);
    Ok(Reply::json(&out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies() {
        let p = |b: &str| parse_body(b.as_bytes());
        let none = Params { n: None, to: None };
        assert_eq!(p(""), Ok(none));
        assert_eq!(p("{}"), Ok(Params { n: None, to: None }));
        assert_eq!(
            p(r#"{"n": 5, "to": "orders"}"#),
            Ok(Params {
                n: Some(5),
                to: Some("orders".into())
            })
        );
        assert_eq!(
            p(r#"{"n": null, "to": ""}"#),
            Ok(Params { n: None, to: None })
        );
        for (b, e) in [
            (r#"{"n": 0}"#, "INVALID_N"),
            (r#"{"n": -1}"#, "INVALID_N"),
            (r#"{"n": 1.5}"#, "INVALID_N"),
            (r#"{"n": "3"}"#, "INVALID_N"),
            (r#"{"to": "bad topic"}"#, "INVALID_TO"),
            (r#"{"to": 3}"#, "INVALID_TO"),
            ("[]", "INVALID_BODY"),
            ("{", "INVALID_BODY"),
        ] {
            assert_eq!(p(b), Err(e), "{b}");
        }
    }
}
