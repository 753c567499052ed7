//! The JSON API (nsqadmin/http.go: `topicsHandler` … `doConfig`) and the history endpoints: each handler turns a
//! total upstream failure into `502 UPSTREAM_ERROR: …` and partial failures into a
//! `"message":"WARNING: …"` field of a 200.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::options::LogLevel;
use axum::body::HttpBody as _;
use axum::http::{Method, StatusCode};
use nsq_protocol::names::{is_valid_channel_name, is_valid_topic_name};
use serde::Serialize;
use serde_json::Value;

use super::{Ctx, Endpoint, Reply};
use crate::admin::Admin;
use crate::cluster::Producer;
use crate::notify::AdminAction;
use crate::stats::{ClusterStats, Replication, TopicStats};
use nsq_go::json::fields::{Field, StringFields};
use nsq_go::json::scan::DecodeError;
use nsq_go::url::{escape_path, Query};

pub(super) async fn handle(
    admin: &Arc<Admin>,
    ep: Endpoint,
    params: Vec<String>,
    ctx: Ctx,
) -> Reply {
    let p = |i: usize| params.get(i).map(String::as_str).unwrap_or("");
    let r = match ep {
        Endpoint::Topics => topics(admin, &ctx).await,
        Endpoint::Topic => topic(admin, p(0)).await,
        Endpoint::Channel => channel(admin, p(0), p(1)).await,
        Endpoint::Nodes => nodes(admin).await,
        Endpoint::Node => node(admin, p(0)).await,
        Endpoint::Counter => counter(admin).await,
        Endpoint::Graphite => graphite(admin, &ctx).await,
        Endpoint::CreateTopicChannel => create_topic_channel(admin, &ctx).await,
        Endpoint::TopicAction => topic_channel_action(admin, &ctx, p(0), None).await,
        Endpoint::ChannelAction => topic_channel_action(admin, &ctx, p(0), Some(p(1))).await,
        Endpoint::DeleteTopic => delete(admin, &ctx, p(0), None).await,
        Endpoint::DeleteChannel => delete(admin, &ctx, p(0), Some(p(1))).await,
        Endpoint::TombstoneTopicProducer => tombstone(admin, &ctx, p(0)).await,
        Endpoint::Config => config(admin, &ctx, p(0)).await,
        Endpoint::TopicConfig => settings::config(admin, &ctx, p(0), None).await,
        Endpoint::ChannelConfig => settings::config(admin, &ctx, p(0), Some(p(1))).await,
        Endpoint::ChannelPeek => settings::peek(admin, &ctx, p(0), p(1)).await,
        Endpoint::ChannelRedrive => redrive::redrive(admin, &ctx, p(0), p(1)).await,
        Endpoint::HistoryTotal => history(admin, None, None),
        Endpoint::HistoryTopic => history(admin, Some(p(0)), None),
        Endpoint::HistoryChannel => history(admin, Some(p(0)), Some(p(1))),
        Endpoint::Index
        | Endpoint::Static
        | Endpoint::Render
        | Endpoint::Ping
        | Endpoint::Metrics
        | Endpoint::Replication => Err(Reply::error(StatusCode::NOT_FOUND, "NOT_FOUND")),
    };
    r.unwrap_or_else(|e| e)
}

type ApiResult = Result<Reply, Reply>;

fn err(status: StatusCode, msg: &str) -> Reply {
    Reply::error(status, msg)
}

pub(super) fn upstream(e: crate::cluster::ClusterError) -> Reply {
    err(StatusCode::BAD_GATEWAY, &format!("UPSTREAM_ERROR: {e}"))
}

/// `maybeWarnMsg`: `""` or `WARNING: ` + the step messages joined by `"; "`.
pub(super) fn warn_msg(w: &[String]) -> String {
    if w.is_empty() {
        String::new()
    } else {
        format!("WARNING: {}", w.join("; "))
    }
}

#[derive(Serialize)]
struct MessageOnly {
    message: String,
}

fn message_reply(w: &[String]) -> Reply {
    Reply::json(&MessageOnly {
        message: warn_msg(w),
    })
}

// ---- read API (nsqadmin/http.go) --------------------------------------------------------------------

async fn topics(admin: &Arc<Admin>, ctx: &Ctx) -> ApiResult {
    let q = Query::parse(ctx.raw_query.as_deref().unwrap_or(""))
        .map_err(|e| err(StatusCode::BAD_REQUEST, &e.to_string()))?;
    let ci = admin.cluster();
    let mut warn = Vec::new();
    let topics = ci.topics(&mut warn).await.map_err(upstream)?;
    if q.get("inactive") == Some("true") {
        let mut map: BTreeMap<String, Option<Vec<String>>> = BTreeMap::new();
        if ci.lookupd_mode() {
            for t in &topics {
                let mut ignored = Vec::new();
                let producers = ci
                    .lookupd_topic_producers(t, &mut ignored)
                    .await
                    .unwrap_or_default();
                if producers.is_empty() {
                    let chans = ci
                        .lookupd_topic_channels(t, &mut ignored)
                        .await
                        .unwrap_or_default();
                    map.insert(t.clone(), (!chans.is_empty()).then_some(chans));
                }
            }
        }
        #[derive(Serialize)]
        struct R {
            topics: BTreeMap<String, Option<Vec<String>>>,
            message: String,
        }
        return Ok(Reply::json(&R {
            topics: map,
            message: warn_msg(&warn),
        }));
    }
    #[derive(Serialize)]
    struct R {
        topics: Option<Vec<String>>,
        message: String,
    }
    Ok(Reply::json(&R {
        topics: (!topics.is_empty()).then_some(topics),
        message: warn_msg(&warn),
    }))
}

/// The stats of `topic` (and `channel`) from every producer of the topic.
async fn topic_stats(
    admin: &Arc<Admin>,
    topic: &str,
    channel: Option<&str>,
    warn: &mut Vec<String>,
) -> Result<ClusterStats, Reply> {
    let ci = admin.cluster();
    let producers = ci.topic_producers(topic, warn).await.map_err(upstream)?;
    ci.stats(&producers, Some(topic), channel, channel.is_some(), warn)
        .await
        .map_err(upstream)
}

/// A JSON reply: `data`'s fields, then `message` (the warnings, `maybeWarnMsg`).
fn with_message<T: Serialize>(data: T, warn: &[String]) -> Reply {
    #[derive(Serialize)]
    struct R<T> {
        #[serde(flatten)]
        data: T,
        message: String,
    }
    Reply::json(&R {
        data,
        message: warn_msg(warn),
    })
}

async fn topic(admin: &Arc<Admin>, topic: &str) -> ApiResult {
    let mut warn = Vec::new();
    let stats = topic_stats(admin, topic, None, &mut warn).await?;
    Ok(with_message(
        TopicStats::aggregate(topic, &stats.topics),
        &warn,
    ))
}

async fn channel(admin: &Arc<Admin>, topic: &str, channel: &str) -> ApiResult {
    let mut warn = Vec::new();
    let stats = topic_stats(admin, topic, Some(channel), &mut warn).await?;
    Ok(with_message(stats.channel(channel), &warn))
}

async fn nodes(admin: &Arc<Admin>) -> ApiResult {
    let mut warn = Vec::new();
    let producers = admin
        .cluster()
        .producers(&mut warn)
        .await
        .map_err(upstream)?;
    #[derive(Serialize)]
    struct R {
        nodes: Option<Vec<Producer>>,
        message: String,
    }
    Ok(Reply::json(&R {
        nodes: (!producers.is_empty()).then_some(producers),
        message: warn_msg(&warn),
    }))
}

async fn node(admin: &Arc<Admin>, node: &str) -> ApiResult {
    let ci = admin.cluster();
    let mut warn = Vec::new();
    let producers = ci.producers(&mut warn).await.map_err(upstream)?;
    let Some(p) = producers.into_iter().find(|p| p.http_address() == node) else {
        return Err(err(StatusCode::NOT_FOUND, "NODE_NOT_FOUND"));
    };
    let stats = ci
        .stats(&[p], None, None, true, &mut warn)
        .await
        .map_err(upstream)?;
    let total_messages = stats.topics.iter().map(|t| t.message_count).sum();
    let total_clients = stats
        .topics
        .iter()
        .flat_map(|t| t.channels.iter().flatten())
        .map(|c| c.clients.as_ref().map_or(0, Vec::len) as i64)
        .sum();
    let replication = stats.replication(node).cloned();
    /// nsqadmin/http.go, `nodeHandler`'s answer, plus `replication`: the node's own
    /// `/stats` `replication` key unchanged (crate::stats::Replication), only when the node
    /// has one; the UI's node page shows it as its Replication panel.
    #[derive(Serialize)]
    struct R {
        node: String,
        topics: Option<Vec<TopicStats>>,
        total_messages: i64,
        total_clients: i64,
        #[serde(skip_serializing_if = "Option::is_none")]
        replication: Option<Replication>,
        message: String,
    }
    Ok(Reply::json(&R {
        node: node.to_string(),
        topics: (!stats.topics.is_empty()).then_some(stats.topics),
        total_messages,
        total_clients,
        replication,
        message: warn_msg(&warn),
    }))
}

async fn counter(admin: &Arc<Admin>) -> ApiResult {
    let ci = admin.cluster();
    let mut warn = Vec::new();
    let producers = ci.producers(&mut warn).await.map_err(upstream)?;
    let stats = ci
        .stats(&producers, None, None, false, &mut warn)
        .await
        .map_err(upstream)?;
    #[derive(Serialize)]
    struct Counter {
        node: String,
        topic_name: String,
        channel_name: String,
        message_count: i64,
    }
    let mut out: BTreeMap<String, Counter> = BTreeMap::new();
    for (_, agg) in &stats.channels {
        for n in agg.nodes.iter().flatten() {
            let key = format!("{}:{}:{}", agg.topic_name, agg.channel_name, n.node);
            out.entry(key)
                .or_insert_with(|| Counter {
                    node: n.node.clone(),
                    topic_name: agg.topic_name.clone(),
                    channel_name: agg.channel_name.clone(),
                    message_count: 0,
                })
                .message_count += n.message_count;
        }
    }
    #[derive(Serialize)]
    struct R {
        stats: BTreeMap<String, Counter>,
        message: String,
    }
    Ok(Reply::json(&R {
        stats: out,
        message: warn_msg(&warn),
    }))
}

async fn graphite(admin: &Arc<Admin>, ctx: &Ctx) -> ApiResult {
    let q = Query::parse(ctx.raw_query.as_deref().unwrap_or(""))
        .map_err(|_| err(StatusCode::BAD_REQUEST, "INVALID_REQUEST"))?;
    if q.get("metric") != Some("rate") {
        return Err(err(StatusCode::BAD_REQUEST, "INVALID_ARG_METRIC"));
    }
    let Some(target) = q.get("target") else {
        return Err(err(StatusCode::BAD_REQUEST, "INVALID_ARG_TARGET"));
    };
    let opts = admin.opts();
    let secs = opts.statsd_interval.as_secs().max(1);
    let url = format!(
        "{}/render?format=json&from=-{}sec&target={}&until=-{}sec",
        opts.graphite_url.trim_end_matches('/'),
        2 * secs,
        nsq_go::url::query_escape(target),
        secs
    );
    let internal = || err(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL_ERROR");
    let body = admin.client().get_v1(&url).await.map_err(|e| {
        tracing::error!("graphite request failed - {e}");
        internal()
    })?;
    let v: Value = serde_json::from_slice(&body).map_err(|_| internal())?;
    let rate = v
        .get(0)
        .and_then(|s| s.get("datapoints"))
        .and_then(|d| d.get(0))
        .and_then(|p| p.get(0))
        .and_then(Value::as_f64)
        .ok_or_else(internal)?;
    let rate = if rate < 0.0 {
        "N/A".to_string()
    } else {
        format!("{:.2}", rate / secs as f64)
    };
    #[derive(Serialize)]
    struct R {
        rate: String,
    }
    Ok(Reply::json(&R { rate }))
}

// ---- admin actions (nsqadmin/http.go) ---------------------------------------------------------------

/// `isAuthorizedAdminRequest`: with `--admin-user`s, the ACL header must name one of them.
pub(super) fn is_admin(admin: &Admin, ctx: &Ctx) -> bool {
    let o = admin.opts();
    if o.admin_users.is_empty() {
        return true;
    }
    match ctx.header(&o.acl_http_header) {
        Some(u) => o.admin_users.iter().any(|a| a == u),
        None => false,
    }
}

fn require_admin(admin: &Admin, ctx: &Ctx) -> Result<(), Reply> {
    if is_admin(admin, ctx) {
        Ok(())
    } else {
        Err(err(StatusCode::FORBIDDEN, "FORBIDDEN"))
    }
}

fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Enqueues the notification (nsqadmin/notify.go) for this request.
fn notify(admin: &Admin, ctx: &Ctx, action: &str, topic: &str, channel: &str, node: &str) {
    if !admin.notifier.enabled() {
        return;
    }
    let user = ctx
        .header("authorization")
        .and_then(|a| a.strip_prefix("Basic "))
        .and_then(|b| {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD_NO_PAD
                .decode(b.trim().trim_end_matches('='))
                .ok()
        })
        .and_then(|b| String::from_utf8(b).ok())
        .map(|s| s.split_once(':').map_or(s.clone(), |(u, _)| u.to_string()))
        .unwrap_or_default();
    let scheme = if ctx.header("x-scheme") == Some("https") {
        "https"
    } else {
        "http"
    };
    let mut url = format!(
        "{scheme}://{}{}",
        ctx.header("host").unwrap_or(""),
        escape_path(&ctx.path)
    );
    if let Some(q) = ctx.raw_query.as_deref().filter(|q| !q.is_empty()) {
        url.push('?');
        url.push_str(q);
    }
    admin.notifier.send(AdminAction {
        action: action.to_string(),
        topic: topic.to_string(),
        channel: channel.to_string(),
        node: node.to_string(),
        timestamp: now_secs(),
        user,
        remote_ip: ctx.peer.to_string(),
        user_agent: ctx.header("user-agent").unwrap_or("").to_string(),
        url,
        via: admin.hostname.clone(),
    });
}

/// A request body struct of nsqadmin/http.go: its Go type as `reflect` writes it (for the
/// type error of a body that is not an object) and its fields' JSON names.
struct BodyStruct {
    go_type: &'static str,
    fields: &'static [&'static str],
}

/// `createTopicChannelHandler`'s body.
const TOPIC_CHANNEL: BodyStruct = BodyStruct {
    go_type: r#"struct { Topic string "json:\"topic\""; Channel string "json:\"channel\"" }"#,
    fields: &["topic", "channel"],
};

/// `topicChannelAction`'s body.
const ACTION: BodyStruct = BodyStruct {
    go_type: r#"struct { Action string "json:\"action\"" }"#,
    fields: &["action"],
};

/// `tombstoneNodeForTopicHandler`'s body.
const TOPIC: BodyStruct = BodyStruct {
    go_type: r#"struct { Topic string "json:\"topic\"" }"#,
    fields: &["topic"],
};

/// The longest string field kept; a longer one is [`Field::TooLong`]. Every field here is a
/// topic or channel name (64 bytes at most) or an action word, so a longer value is refused
/// as Go refuses it.
const MAX_FIELD: usize = 4096;

/// Go's `json.NewDecoder(req.Body).Decode(&body)` into `st`: the body is read as it arrives,
/// only up to the end of its first JSON value and without a size limit (Go's handlers set
/// none), and a failure is Go's error text (`nsq_go::json::fields`).
async fn decode_fields(ctx: &Ctx, st: &BodyStruct) -> Result<Vec<Field>, DecodeError> {
    let mut body = ctx.take_body();
    let mut d = StringFields::new(st.go_type, st.fields, MAX_FIELD);
    while !d.is_done() {
        match std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
            None => break,
            // A body cut short (the client left, bad chunking): Go's body reader says
            // `io.ErrUnexpectedEOF`, which the decoder passes on.
            Some(Err(_)) => return Err(DecodeError::UnexpectedEof),
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    d.feed(&data);
                }
            }
        }
    }
    d.finish()
}

/// `io.ReadAll(io.LimitReader(req.Body, limit))`: at most `limit` bytes of the body.
async fn read_limited(ctx: &Ctx, limit: usize) -> Result<Vec<u8>, axum::Error> {
    let mut body = ctx.take_body();
    let mut out = Vec::new();
    while out.len() < limit {
        match std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
            None => break,
            Some(frame) => {
                if let Ok(data) = frame?.into_data() {
                    let take = data.len().min(limit - out.len());
                    out.extend_from_slice(&data[..take]);
                }
            }
        }
    }
    Ok(out)
}

async fn create_topic_channel(admin: &Arc<Admin>, ctx: &Ctx) -> ApiResult {
    require_admin(admin, ctx)?;
    let f = decode_fields(ctx, &TOPIC_CHANNEL)
        .await
        .map_err(|e| err(StatusCode::BAD_REQUEST, &e.to_string()))?;
    let Some(topic) = f[0].as_str().filter(|t| is_valid_topic_name(t)) else {
        return Err(err(StatusCode::BAD_REQUEST, "INVALID_TOPIC"));
    };
    let Some(channel) = f[1]
        .as_str()
        .filter(|c| c.is_empty() || is_valid_channel_name(c))
    else {
        return Err(err(StatusCode::BAD_REQUEST, "INVALID_CHANNEL"));
    };
    let mut warn = Vec::new();
    admin
        .cluster()
        .create_topic_channel(topic, channel, &mut warn)
        .await
        .map_err(upstream)?;
    notify(admin, ctx, "create_topic", topic, "", "");
    if !channel.is_empty() {
        notify(admin, ctx, "create_channel", topic, channel, "");
    }
    Ok(message_reply(&warn))
}

async fn topic_channel_action(
    admin: &Arc<Admin>,
    ctx: &Ctx,
    topic: &str,
    channel: Option<&str>,
) -> ApiResult {
    require_admin(admin, ctx)?;
    let f = decode_fields(ctx, &ACTION)
        .await
        .map_err(|e| err(StatusCode::BAD_REQUEST, &e.to_string()))?;
    let Some(action @ ("pause" | "unpause" | "empty")) = f[0].as_str() else {
        return Err(err(StatusCode::BAD_REQUEST, "INVALID_ACTION"));
    };
    let (kind, ch) = match channel {
        Some(c) => ("channel", c),
        None => ("topic", ""),
    };
    // Sent before the outcome is known, as the reference does.
    notify(admin, ctx, &format!("{action}_{kind}"), topic, ch, "");
    let mut warn = Vec::new();
    admin
        .cluster()
        .action(topic, channel, &format!("{kind}/{action}"), &mut warn)
        .await
        .map_err(upstream)?;
    Ok(message_reply(&warn))
}

async fn delete(admin: &Arc<Admin>, ctx: &Ctx, topic: &str, channel: Option<&str>) -> ApiResult {
    require_admin(admin, ctx)?;
    let ci = admin.cluster();
    let mut warn = Vec::new();
    match channel {
        None => {
            ci.delete_topic(topic, &mut warn).await.map_err(upstream)?;
            notify(admin, ctx, "delete_topic", topic, "", "");
        }
        Some(c) => {
            ci.delete_channel(topic, c, &mut warn)
                .await
                .map_err(upstream)?;
            notify(admin, ctx, "delete_channel", topic, c, "");
        }
    }
    Ok(message_reply(&warn))
}

async fn tombstone(admin: &Arc<Admin>, ctx: &Ctx, node: &str) -> ApiResult {
    require_admin(admin, ctx)?;
    let f = decode_fields(ctx, &TOPIC)
        .await
        .map_err(|_| err(StatusCode::BAD_REQUEST, "INVALID_BODY"))?;
    let Some(topic) = f[0].as_str().filter(|t| is_valid_topic_name(t)) else {
        return Err(err(StatusCode::BAD_REQUEST, "INVALID_TOPIC"));
    };
    let mut warn = Vec::new();
    admin
        .cluster()
        .tombstone_topic_producer(topic, node, &mut warn)
        .await
        .map_err(upstream)?;
    notify(admin, ctx, "tombstone_topic_producer", topic, "", node);
    Ok(message_reply(&warn))
}

// ---- /config (nsqadmin/http.go, `doConfig`) ---------------------------------------------------------------------

async fn config(admin: &Arc<Admin>, ctx: &Ctx, opt: &str) -> ApiResult {
    if let Some(cidr) = &admin.cidr {
        if !cidr.contains(ctx.peer.ip()) {
            return Err(err(StatusCode::FORBIDDEN, "FORBIDDEN"));
        }
    }
    if ctx.method == Method::PUT {
        // One more than the largest value, to tell a longer body (nsqadmin/http.go,
        // `doConfig`: `readMax := int64(1024*1024 + 1)`).
        const READ_MAX: usize = (1 << 20) + 1;
        let body = &read_limited(ctx, READ_MAX)
            .await
            .map_err(|_| err(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL_ERROR"))?;
        if body.is_empty() || body.len() == READ_MAX {
            return Err(err(StatusCode::PAYLOAD_TOO_LARGE, "INVALID_VALUE"));
        }
        let mut o = (*admin.opts()).clone();
        match opt {
            "nsqlookupd_http_addresses" => {
                let v: Vec<String> = serde_json::from_slice(body)
                    .map_err(|_| err(StatusCode::BAD_REQUEST, "INVALID_VALUE"))?;
                o.lookupd_http_addresses = v;
            }
            "log_level" => {
                let s = String::from_utf8_lossy(body);
                o.log_level = LogLevel::parse(&s)
                    .map_err(|_| err(StatusCode::BAD_REQUEST, "INVALID_VALUE"))?;
                nsq_http::logging::set_level(o.log_level);
            }
            _ => return Err(err(StatusCode::BAD_REQUEST, "INVALID_OPTION")),
        }
        admin.set_opts(o);
    }
    use crate::options::ConfigValue;
    match admin.opts().config_value(opt) {
        None => Err(err(StatusCode::BAD_REQUEST, "INVALID_OPTION")),
        Some(ConfigValue::Raw(s)) => Ok(Reply::v1_text(s)),
        Some(ConfigValue::Json(v)) => Ok(Reply::json(&v)),
    }
}

// ---- history (beyond the reference) ---------------------------------------------------------

fn history(admin: &Arc<Admin>, topic: Option<&str>, channel: Option<&str>) -> ApiResult {
    let Some(h) = &admin.history else {
        return Err(err(StatusCode::NOT_FOUND, "HISTORY_DISABLED"));
    };
    Ok(match (topic, channel) {
        (Some(t), Some(c)) => Reply::json(&h.channel(t, c)),
        (Some(t), None) => Reply::json(&h.topic(t)),
        _ => Reply::json(&h.total()),
    })
}

mod redrive;
mod settings;

#[cfg(test)]
mod tests;
