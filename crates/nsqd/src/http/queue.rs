//! nsqd's queue-settings endpoints (ours, crate::queue_settings): `GET`/`POST
//! /topic/config` and `/channel/config`, and `GET /channel/peek` with `--http-peek`.

use std::sync::Arc;

use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::Response;
use nsq_core::queue_settings::Scope;
use nsq_go::url::Query;
use nsq_http::reply::{topic_channel_args, v1_json, V1Body};
use serde_json::Value;

use super::api::{persist_metadata, req_params};
use super::{v1, ApiError, ApiResult};
use crate::nsqd::Nsqd;

/// `GET /topic/config?topic=T`, `GET /channel/config?topic=T&channel=C`: the effective
/// settings; `POST` with `key=value` parameters changes them first (an empty value clears a
/// key; all or nothing) and writes `nsqd.dat`. A bad key or value answers 400 with its name
/// (`{"message":"INVALID_MAX_DEPTH"}`), a missing topic or channel 404 as the other admin
/// endpoints do.
pub(super) async fn config(nsqd: &Arc<Nsqd>, topic: bool, req: Request) -> Response {
    let post = req.method() == axum::http::Method::POST;
    let q = match req_params(req).await {
        Ok(q) => q,
        Err(e) => return v1(Err(e)),
    };
    let answer = if topic {
        topic_config(nsqd, post, &q).await
    } else {
        channel_config(nsqd, post, &q).await
    };
    match answer {
        Ok(Ok(body)) => v1(Ok(body)),
        Ok(Err(message)) => nsq_http::reply::v1_error(StatusCode::BAD_REQUEST, &message),
        Err(e) => v1(Err(e)),
    }
}

type ConfigAnswer = Result<Result<V1Body, String>, ApiError>;

async fn topic_config(nsqd: &Arc<Nsqd>, post: bool, q: &Query) -> ConfigAnswer {
    let name = q.get("topic").ok_or(ApiError::MISSING_ARG_TOPIC)?;
    let topic = nsqd
        .engine
        .get_topic(name)
        .ok_or(ApiError::TOPIC_NOT_FOUND)?;
    if post {
        match crate::queue_settings::apply(&topic.settings(), Scope::Topic, name, q.pairs()) {
            Ok(s) => topic.set_settings(s),
            Err(message) => return Ok(Err(message)),
        }
        persist_metadata(nsqd).await;
    }
    let settings = crate::queue_settings::effective_json(
        name,
        &topic.settings(),
        None,
        &nsqd.engine.options().queue_defaults,
    );
    v1_json(&serde_json::json!({ "topic": name, "settings": settings })).map(Ok)
}

async fn channel_config(nsqd: &Arc<Nsqd>, post: bool, q: &Query) -> ConfigAnswer {
    let (topic_name, name) = topic_channel_args(q)?;
    let topic = nsqd
        .engine
        .get_topic(topic_name)
        .ok_or(ApiError::TOPIC_NOT_FOUND)?;
    let ch = topic.get_channel(name).ok_or(ApiError::CHANNEL_NOT_FOUND)?;
    if post {
        match crate::queue_settings::apply(&ch.settings(), Scope::Channel, topic_name, q.pairs()) {
            Ok(s) => {
                ch.set_settings(s);
                topic.refresh_settings();
            }
            Err(message) => return Ok(Err(message)),
        }
        persist_metadata(nsqd).await;
    }
    let settings = crate::queue_settings::effective_json(
        topic_name,
        &topic.settings(),
        Some(&ch.settings()),
        &nsqd.engine.options().queue_defaults,
    );
    v1_json(&serde_json::json!({
        "topic": topic_name,
        "channel": name,
        "settings": settings,
    }))
    .map(Ok)
}

/// The most messages of each kind a peek answers.
const PEEK_MAX: usize = 1000;

/// `GET /channel/peek?topic=T&channel=C[&n=20]` (ours, with `--http-peek`; else 404 as an
/// unknown path): up to `n` (1..=1000) of the channel's next messages, of those in flight
/// and of the deferred ones, each with its ID, timestamp, attempts, state, due time (Unix
/// ns: timeout or due), body in base64 and a printable preview. Delivery is unchanged.
pub(super) async fn peek(nsqd: &Arc<Nsqd>, req: Request) -> ApiResult {
    if !nsqd.opts.http_peek {
        return Err(ApiError::NOT_FOUND);
    }
    let q = req_params(req).await?;
    let (topic_name, name) = topic_channel_args(&q)?;
    let n = match q.get("n") {
        None => 20,
        Some(v) => v
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=PEEK_MAX).contains(n))
            .ok_or(ApiError::INVALID_N)?,
    };
    let topic = nsqd
        .engine
        .get_topic(topic_name)
        .ok_or(ApiError::TOPIC_NOT_FOUND)?;
    let ch = topic.get_channel(name).ok_or(ApiError::CHANNEL_NOT_FOUND)?;
    let peeked = {
        let ch = ch.clone();
        tokio::task::spawn_blocking(move || ch.peek(n))
            .await
            .map_err(|_| ApiError::INTERNAL_ERROR)?
            .map_err(|e| {
                tracing::error!("failed to peek at {topic_name}:{name} - {e}");
                ApiError::INTERNAL_ERROR
            })?
    };
    let messages: Vec<Value> = peeked.iter().map(|p| peeked_json(&topic, p)).collect();
    v1_json(&serde_json::json!({
        "topic": topic_name,
        "channel": name,
        "messages": messages,
    }))
}

fn peeked_json(topic: &nsq_core::Topic, p: &nsq_core::Peeked) -> Value {
    use base64::Engine as _;
    let (state, client_id) = match p.state {
        nsq_core::PeekState::Queued => ("queued", None),
        nsq_core::PeekState::InFlight { client_id } => ("in_flight", Some(client_id)),
        nsq_core::PeekState::Deferred => ("deferred", None),
    };
    let body = &p.msg.body;
    let preview: String = String::from_utf8_lossy(&body[..body.len().min(200)])
        .chars()
        .map(|c| if c.is_control() { '.' } else { c })
        .collect();
    let mut v = serde_json::json!({
        "id": String::from_utf8_lossy(p.msg.id.as_bytes()),
        "timestamp": p.msg.timestamp,
        "attempts": p.msg.attempts,
        "state": state,
        "client_id": client_id,
        "due": p.due,
        "body": base64::engine::general_purpose::STANDARD.encode(body),
        "preview": preview,
    });
    // A dead letter this node made: where it came from (nsq_core::topic::dead_letters).
    if let Some(o) = topic.dead_letter_origin(&p.msg.id) {
        v["dead_letter"] = serde_json::json!({
            "id": String::from_utf8_lossy(o.id.as_bytes()),
            "topic": o.topic,
            "channel": o.channel,
            "attempts": o.attempts,
            "reason": if o.expired { "expired" } else { "max_attempts" },
        });
    }
    v
}

/// `POST /channel/redrive?topic=T&channel=C[&n=N][&to=TOPIC]` (ours, crate::redrive): moves
/// up to `n` (default: the channel's depth) of the channel's queued messages back to the
/// channel each was dead-lettered from, or with `to` publishes them to that topic; answers
/// what it did: `{"topic","channel","moved","skipped","failed"}`.
pub(super) async fn redrive(nsqd: &Arc<Nsqd>, req: Request) -> ApiResult {
    let q = req_params(req).await?;
    let (topic_name, name) = topic_channel_args(&q)?;
    let n = match q.get("n") {
        None => None,
        Some(v) => Some(
            v.parse::<usize>()
                .ok()
                .filter(|n| *n >= 1)
                .ok_or(ApiError::INVALID_N)?,
        ),
    };
    let to = match q.get("to") {
        None => None,
        Some(t) if nsq_protocol::names::is_valid_topic_name(t) => Some(t.to_string()),
        Some(_) => return Err(ApiError::INVALID_TO),
    };
    let topic = nsqd
        .engine
        .get_topic(topic_name)
        .ok_or(ApiError::TOPIC_NOT_FOUND)?;
    let ch = topic.get_channel(name).ok_or(ApiError::CHANNEL_NOT_FOUND)?;
    if ch.is_paused() {
        return Err(ApiError::CHANNEL_PAUSED);
    }
    let n = n.unwrap_or_else(|| usize::try_from(ch.depth().max(0)).unwrap_or(usize::MAX));
    let report = crate::redrive::redrive(&nsqd.engine, &topic, &ch, n, to.as_deref()).await;
    v1_json(&serde_json::json!({
        "topic": topic_name,
        "channel": name,
        "moved": report.moved,
        "skipped": report.skipped,
        "failed": report.failed,
    }))
}
