//! The endpoints: `/ping`, `/info`, `/pub`, `/mpub`, `/stats`, topic and channel
//! administration and `/config/:opt`, with the reference's checks in the reference's order
//! (nsqd/http.go, `doPUB` … `doConfig`).

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, StatusCode};
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use hyper::body::Body as _;
use nsq_core::{Channel, Topic};
use nsq_protocol::names::is_valid_topic_name;
use serde_json::Value;

use super::stats::{self, StatsQuery};
use super::{debug, json, plain, v1, ApiError, ApiResult, Endpoint, HttpState};
use crate::nsqd::Nsqd;
use crate::options::LogLevel;
use nsq_go::url::{self as query, Query};
use nsq_http::reply::topic_channel_args;
use nsq_http::reply::V1Body;

pub(super) async fn handle(
    st: &HttpState,
    ep: Endpoint,
    path: &str,
    param: Option<String>,
    req: Request,
) -> Response {
    let nsqd = &st.nsqd;
    match ep {
        Endpoint::Pub | Endpoint::Mpub | Endpoint::TopicCreate | Endpoint::ChannelCreate
            if nsqd.drain.is_draining() =>
        {
            super::drain::refused()
        }
        Endpoint::Config if matches!(param.as_deref(), Some("drain")) => {
            super::drain::config(nsqd, req.method(), "drain")
        }
        Endpoint::Config
            if param.as_deref() == Some("shutdown") && req.method() == axum::http::Method::PUT =>
        {
            super::drain::config(nsqd, req.method(), "shutdown")
        }
        // A draining node stays away from nsqlookupd.
        Endpoint::Config
            if param.as_deref() == Some("nsqlookupd_tcp_addresses")
                && req.method() == axum::http::Method::PUT
                && nsqd.drain.is_draining() =>
        {
            super::drain::refused()
        }
        Endpoint::Ping => ping(nsqd),
        Endpoint::Info => v1(info(nsqd)),
        Endpoint::Pub => v1(publish(nsqd, req).await),
        Endpoint::Mpub => v1(mpublish(nsqd, req).await),
        Endpoint::Stats => v1(stats(nsqd, req).await),
        Endpoint::Metrics => crate::metrics::response(nsqd, req.uri().query()),
        Endpoint::TopicCreate => v1(topic_create(nsqd, req).await),
        Endpoint::TopicDelete => v1(topic_delete(nsqd, req).await),
        Endpoint::TopicEmpty => v1(topic_empty(nsqd, req).await),
        Endpoint::TopicPause | Endpoint::TopicUnpause => v1(topic_pause(nsqd, path, req).await),
        Endpoint::ChannelCreate
        | Endpoint::ChannelDelete
        | Endpoint::ChannelEmpty
        | Endpoint::ChannelPause
        | Endpoint::ChannelUnpause => v1(channel_admin(nsqd, ep, req).await),
        Endpoint::TopicConfig | Endpoint::ChannelConfig => {
            super::queue::config(nsqd, ep == Endpoint::TopicConfig, req).await
        }
        Endpoint::ChannelPeek => v1(super::queue::peek(nsqd, req).await),
        Endpoint::ChannelRedrive => v1(super::queue::redrive(nsqd, req).await),
        Endpoint::Config => v1(config(st, param.as_deref().unwrap_or(""), req).await),
        Endpoint::PprofIndex
        | Endpoint::PprofCmdline
        | Endpoint::PprofSymbol
        | Endpoint::PprofProfile(_)
        | Endpoint::SetBlockRate
        | Endpoint::FreeMemory => debug::handle(ep, req).await,
    }
}

// ---- bodies ---------------------------------------------------------------------------------

/// The request's `Content-Length`, as Go's `req.ContentLength` (`-1` when unknown).
fn content_length(req: &Request) -> i64 {
    req.headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<i64>().ok())
        .unwrap_or(-1)
}

/// Streams a request body frame by frame.
struct BodyReader {
    body: Body,
    buf: BytesMut,
    eof: bool,
}

/// A body read failed (client went away mid-body, bad chunking).
#[derive(Debug)]
struct ReadError;

impl BodyReader {
    fn new(body: Body) -> Self {
        BodyReader {
            body,
            buf: BytesMut::new(),
            eof: false,
        }
    }

    /// Pulls one more data frame into `buf`; `false` at the end of the body.
    async fn fill(&mut self) -> Result<bool, ReadError> {
        while !self.eof {
            match std::future::poll_fn(|cx| Pin::new(&mut self.body).poll_frame(cx)).await {
                None => self.eof = true,
                Some(Err(_)) => return Err(ReadError),
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        if !data.is_empty() {
                            self.buf.extend_from_slice(&data);
                            return Ok(true);
                        }
                    }
                }
            }
        }
        Ok(false)
    }

    /// `io.ReadAll(io.LimitReader(body, limit))`: at most `limit` bytes.
    async fn read_limited(&mut self, limit: u64) -> Result<Bytes, ReadError> {
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        while self.buf.len() < limit && self.fill().await? {}
        let n = self.buf.len().min(limit);
        Ok(self.buf.split_to(n).freeze())
    }

    /// `io.ReadFull` of `n` bytes; `None` if the body ends first.
    async fn read_exact(&mut self, n: usize) -> Result<Option<Bytes>, ReadError> {
        while self.buf.len() < n {
            if !self.fill().await? {
                return Ok(None);
            }
        }
        Ok(Some(self.buf.split_to(n).freeze()))
    }

    /// Reads and discards the rest of the body (`NewReqParams` reads it all).
    async fn drain(&mut self) -> Result<(), ReadError> {
        loop {
            self.buf.clear();
            if !self.fill().await? {
                return Ok(());
            }
        }
    }
}

// ---- query helpers --------------------------------------------------------------------------

fn parse_query(req: &Request) -> Result<Query, ApiError> {
    let raw = req.uri().query().unwrap_or("");
    Query::parse(raw).map_err(|_| {
        tracing::error!("failed to parse request params - invalid query {raw:?}");
        ApiError::INVALID_REQUEST
    })
}

/// `http_api.NewReqParams`: the query, after reading the whole body.
pub(super) async fn req_params(req: Request) -> Result<Query, ApiError> {
    let q = parse_query(&req)?;
    BodyReader::new(req.into_body())
        .drain()
        .await
        .map_err(|_| ApiError::INVALID_REQUEST)?;
    Ok(q)
}

/// The reference's `getTopicFromQuery`: parse, require a valid `topic`, get-or-create it.
/// Takes the already parsed query: a `&Request` must not be held across an `.await` (its body
/// is not `Sync`).
async fn topic_from_query(
    nsqd: &Nsqd,
    q: Result<Query, ApiError>,
) -> Result<(Query, Arc<Topic>), ApiError> {
    let q = q?;
    let name = q.get("topic").ok_or(ApiError::MISSING_ARG_TOPIC)?;
    if !is_valid_topic_name(name) {
        return Err(ApiError::INVALID_TOPIC);
    }
    let topic = nsqd.topic(name).await.map_err(|e| {
        tracing::error!("failed to create topic {name} - {e}");
        ApiError::INTERNAL_ERROR
    })?;
    Ok((q, topic))
}

/// The reference's `getExistingTopicFromQuery` (the `/channel/*` checks).
async fn existing_topic_and_channel(
    nsqd: &Nsqd,
    req: Request,
) -> Result<(Arc<Topic>, String), ApiError> {
    let q = req_params(req).await?;
    let (topic, channel) = topic_channel_args(&q)?;
    let t = nsqd
        .engine
        .get_topic(topic)
        .ok_or(ApiError::TOPIC_NOT_FOUND)?;
    Ok((t, channel.to_string()))
}

fn ok_text(s: &'static str) -> ApiResult {
    Ok(V1Body::Text(Bytes::from_static(s.as_bytes())))
}

// ---- /ping, /info ---------------------------------------------------------------------------

fn ping(nsqd: &Nsqd) -> Response {
    let health = nsqd.health();
    if nsqd.engine.health().is_healthy() {
        plain(StatusCode::OK, health)
    } else {
        plain(StatusCode::INTERNAL_SERVER_ERROR, health)
    }
}

fn nanos(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

fn info(nsqd: &Nsqd) -> ApiResult {
    #[derive(serde::Serialize)]
    struct Info<'a> {
        version: &'static str,
        broadcast_address: &'a str,
        hostname: String,
        http_port: i64,
        tcp_port: i64,
        start_time: i64,
        max_heartbeat_interval: i64,
        max_output_buffer_size: i64,
        max_output_buffer_timeout: i64,
        max_deflate_level: i64,
        /// Drain mode (crate::drain); not in the reference.
        draining: bool,
    }
    let o = &nsqd.opts;
    let info = Info {
        version: nsq_protocol::VERSION,
        broadcast_address: &o.broadcast_address,
        hostname: crate::options::hostname(),
        http_port: nsqd.http_addr.map_or(0, |a| i64::from(a.port())),
        tcp_port: i64::from(nsqd.tcp_addr.port()),
        start_time: nsqd.start_time,
        max_heartbeat_interval: nanos(o.max_heartbeat_interval),
        max_output_buffer_size: o.max_output_buffer_size,
        max_output_buffer_timeout: nanos(o.max_output_buffer_timeout),
        max_deflate_level: o.max_deflate_level,
        draining: nsqd.drain.is_draining(),
    };
    Ok(V1Body::Json(json::to_vec(&info)))
}

// ---- /pub, /mpub ----------------------------------------------------------------------------

async fn publish(nsqd: &Nsqd, req: Request) -> ApiResult {
    let max_msg_size = nsqd.tcp.limits.max_msg_size;
    if content_length(&req) > max_msg_size {
        return Err(ApiError::MSG_TOO_BIG);
    }
    let (parts, body) = req.into_parts();
    let read_max = max_msg_size.saturating_add(1).max(0) as u64;
    let body = BodyReader::new(body)
        .read_limited(read_max)
        .await
        .map_err(|_| ApiError::INTERNAL_ERROR)?;
    if body.len() as u64 == read_max {
        return Err(ApiError::MSG_TOO_BIG);
    }
    if body.is_empty() {
        return Err(ApiError::MSG_EMPTY);
    }
    let req = Request::from_parts(parts, Body::empty());
    let (q, topic) = topic_from_query(nsqd, parse_query(&req)).await?;

    let mut defer = Duration::ZERO;
    if let Some(ds) = q.get("defer") {
        let ms = query::parse_i64_base10(ds).ok_or(ApiError::INVALID_DEFER)?;
        // time.Duration(ms) * time.Millisecond, with Go's wrapping overflow.
        let ns = ms.wrapping_mul(1_000_000);
        let max = nanos(Duration::from_millis(
            nsqd.tcp.limits.max_req_timeout_ms.max(0) as u64,
        ));
        if ns < 0 || ns > max {
            return Err(ApiError::INVALID_DEFER);
        }
        defer = Duration::from_nanos(ns as u64);
    }
    // OK only once stored (and, in durable mode, synced): docs/durability.md.
    let receipt = topic.put(body, defer).map_err(|e| put_refused(&e))?;
    let seq = receipt.replication_seq();
    receipt.durable().await.map_err(|_| ApiError::EXITING)?;
    // Replicated (docs/replication.md): and on N-1 replicas.
    if seq != 0 {
        nsqd.replicated(seq).await.map_err(|_| ApiError::EXITING)?;
    }
    ok_text("OK")
}

/// A refused publish: 503 `FULL` at a queue's bound (ours), else `EXITING` as the reference
/// answers any failed `PutMessage` (nsqd/http.go, `doPUB`).
fn put_refused(e: &nsq_core::backend::BackendError) -> ApiError {
    match e {
        nsq_core::backend::BackendError::Full(_) => ApiError::FULL,
        _ => ApiError::EXITING,
    }
}

async fn mpublish(nsqd: &Nsqd, req: Request) -> ApiResult {
    let limits = nsqd.tcp.limits;
    if content_length(&req) > limits.max_body_size {
        return Err(ApiError::BODY_TOO_BIG);
    }
    let (q, topic) = topic_from_query(nsqd, parse_query(&req)).await?;
    // Text mode by default; an unparsable `binary` value counts as true.
    let binary = q
        .get("binary")
        .is_some_and(|v| nsq_go::strconv::parse_bool(v).unwrap_or(true));
    let mut body = BodyReader::new(req.into_body());
    let msgs = if binary {
        read_mpub_binary(&mut body, limits.max_msg_size, limits.max_body_size).await?
    } else {
        read_mpub_text(&mut body, limits.max_msg_size, limits.max_body_size).await?
    };
    let receipt = topic
        .put_many(msgs, Duration::ZERO)
        .map_err(|e| put_refused(&e))?;
    let seq = receipt.replication_seq();
    receipt.durable().await.map_err(|_| ApiError::EXITING)?;
    if seq != 0 {
        nsqd.replicated(seq).await.map_err(|_| ApiError::EXITING)?;
    }
    ok_text("OK")
}

/// Text mode: newline-separated messages; `\r` is kept, empty lines are skipped.
async fn read_mpub_text(
    body: &mut BodyReader,
    max_msg_size: i64,
    max_body_size: i64,
) -> Result<Vec<Bytes>, ApiError> {
    let read_max = max_body_size.saturating_add(1).max(0) as u64;
    let (data, read_failed) = match body.read_limited(read_max).await {
        Ok(d) => (d, false),
        // What arrived before the error is processed first, as bufio.ReadBytes would.
        Err(ReadError) => (body.buf.split().freeze(), true),
    };
    let mut msgs = Vec::new();
    let mut total: u64 = 0;
    let mut rest = data;
    while !rest.is_empty() || read_failed {
        let (mut block, last) = match rest.iter().position(|&b| b == b'\n') {
            Some(i) => (rest.split_to(i + 1), false),
            None => (rest.split_to(rest.len()), true),
        };
        if last && read_failed {
            return Err(ApiError::INTERNAL_ERROR);
        }
        total += block.len() as u64;
        if total == read_max {
            return Err(ApiError::BODY_TOO_BIG);
        }
        if block.last() == Some(&b'\n') {
            block.truncate(block.len() - 1);
        }
        if block.is_empty() {
            continue;
        }
        if block.len() as i64 > max_msg_size {
            return Err(ApiError::MSG_TOO_BIG);
        }
        msgs.push(block);
    }
    Ok(msgs)
}

/// Binary mode: `[count][size][body]...`, the TCP MPUB payload without its total size.
async fn read_mpub_binary(
    body: &mut BodyReader,
    max_msg_size: i64,
    max_body_size: i64,
) -> Result<Vec<Bytes>, ApiError> {
    async fn read_len(body: &mut BodyReader) -> Option<i32> {
        let b = body.read_exact(4).await.ok()??;
        Some(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    let count = read_len(body).await.ok_or(ApiError::BAD_BODY)?;
    let max_messages = (max_body_size - 4) / 5;
    if count <= 0 || i64::from(count) > max_messages {
        return Err(ApiError::BAD_BODY);
    }
    let mut msgs = Vec::with_capacity((count as usize).min(1024));
    for _ in 0..count {
        let size = read_len(body).await.ok_or(ApiError::BAD_MESSAGE)?;
        if size <= 0 || i64::from(size) > max_msg_size {
            return Err(ApiError::BAD_MESSAGE);
        }
        let msg = body
            .read_exact(size as usize)
            .await
            .ok()
            .flatten()
            .ok_or(ApiError::BAD_MESSAGE)?;
        msgs.push(msg);
    }
    Ok(msgs)
}

// ---- /stats ---------------------------------------------------------------------------------

async fn stats(nsqd: &Nsqd, req: Request) -> ApiResult {
    let q = req_params(req).await?;
    let sq = StatsQuery {
        topic: q.get("topic").unwrap_or(""),
        channel: q.get("channel").unwrap_or(""),
        include_clients: query::stats_bool(q.get("include_clients")),
        include_mem: query::stats_bool(q.get("include_mem")),
    };
    let snapshot = stats::collect(nsqd, &sq);
    if q.get("format") == Some("json") {
        Ok(V1Body::Json(json::to_vec(&snapshot)))
    } else {
        Ok(V1Body::Text(Bytes::from(stats::render_text(&snapshot))))
    }
}

// ---- topics ---------------------------------------------------------------------------------

async fn topic_create(nsqd: &Nsqd, req: Request) -> ApiResult {
    topic_from_query(nsqd, parse_query(&req)).await?;
    Ok(V1Body::Empty)
}

/// `topic` is required but, as in the reference, not validated for delete/pause/unpause.
async fn topic_name(req: Request) -> Result<String, ApiError> {
    let q = req_params(req).await?;
    q.get("topic")
        .map(str::to_string)
        .ok_or(ApiError::MISSING_ARG_TOPIC)
}

async fn topic_delete(nsqd: &Nsqd, req: Request) -> ApiResult {
    let name = topic_name(req).await?;
    if !nsqd.engine.delete_topic(&name) {
        return Err(ApiError::TOPIC_NOT_FOUND);
    }
    Ok(V1Body::Empty)
}

async fn topic_empty(nsqd: &Nsqd, req: Request) -> ApiResult {
    let name = topic_name(req).await?;
    if !is_valid_topic_name(&name) {
        return Err(ApiError::INVALID_TOPIC);
    }
    let topic = nsqd
        .engine
        .get_topic(&name)
        .ok_or(ApiError::TOPIC_NOT_FOUND)?;
    topic.empty().map_err(|e| {
        tracing::error!("failed to empty topic {name} - {e}");
        ApiError::INTERNAL_ERROR
    })?;
    Ok(V1Body::Empty)
}

async fn topic_pause(nsqd: &Arc<Nsqd>, path: &str, req: Request) -> ApiResult {
    let name = topic_name(req).await?;
    let topic = nsqd
        .engine
        .get_topic(&name)
        .ok_or(ApiError::TOPIC_NOT_FOUND)?;
    if path.contains("unpause") {
        topic.unpause();
    } else {
        topic.pause();
    }
    persist_metadata(nsqd).await;
    Ok(V1Body::Empty)
}

/// Writes `nsqd.dat` before answering, as the reference does after pause/unpause; a failure is
/// logged only (the reference ignores it too).
pub(super) async fn persist_metadata(nsqd: &Arc<Nsqd>) {
    let n = nsqd.clone();
    match tokio::task::spawn_blocking(move || n.persist_metadata()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::error!("failed to persist metadata - {e}"),
        Err(e) => tracing::error!("failed to persist metadata - {e}"),
    }
}

// ---- channels -------------------------------------------------------------------------------

async fn channel_admin(nsqd: &Arc<Nsqd>, ep: Endpoint, req: Request) -> ApiResult {
    let (topic, name) = existing_topic_and_channel(nsqd, req).await?;
    let existing = || topic.get_channel(&name).ok_or(ApiError::CHANNEL_NOT_FOUND);
    match ep {
        Endpoint::ChannelCreate => {
            topic.get_or_create_channel(&name).map_err(|e| {
                tracing::error!("failed to create channel {}:{name} - {e}", topic.name());
                ApiError::INTERNAL_ERROR
            })?;
        }
        Endpoint::ChannelDelete => {
            if !topic.delete_channel(&name) {
                return Err(ApiError::CHANNEL_NOT_FOUND);
            }
        }
        Endpoint::ChannelEmpty => {
            let ch: Arc<Channel> = existing()?;
            ch.empty().map_err(|e| {
                tracing::error!("failed to empty channel {}:{name} - {e}", topic.name());
                ApiError::INTERNAL_ERROR
            })?;
        }
        Endpoint::ChannelPause | Endpoint::ChannelUnpause => {
            let ch = existing()?;
            if ep == Endpoint::ChannelUnpause {
                ch.unpause();
            } else {
                ch.pause();
            }
            persist_metadata(nsqd).await;
        }
        _ => unreachable!("channel_admin is only routed channel endpoints"),
    }
    Ok(V1Body::Empty)
}

// ---- /config/:opt ---------------------------------------------------------------------------

async fn config(st: &HttpState, opt: &str, req: Request) -> ApiResult {
    if req.method() == axum::http::Method::PUT {
        let read_max = st.nsqd.tcp.limits.max_msg_size.saturating_add(1).max(0) as u64;
        let body = BodyReader::new(req.into_body())
            .read_limited(read_max)
            .await
            .map_err(|_| ApiError::INTERNAL_ERROR)?;
        if body.len() as u64 == read_max || body.is_empty() {
            return Err(ApiError::INVALID_VALUE_413);
        }
        match opt {
            "nsqlookupd_tcp_addresses" => {
                let addrs: Option<Vec<String>> =
                    serde_json::from_slice(&body).map_err(|_| ApiError::INVALID_VALUE)?;
                *st.runtime.lookupd_tcp_addresses.lock() = addrs.clone();
                on_lookupd_addresses_changed(&st.nsqd, addrs.as_deref().unwrap_or(&[]));
            }
            "log_level" => {
                let level = LogLevel::parse(&String::from_utf8_lossy(&body))
                    .map_err(|_| ApiError::INVALID_VALUE)?;
                *st.runtime.log_level.lock() = level;
                nsq_http::logging::set_level(level);
                tracing::info!("log level set to {level}");
            }
            _ => return Err(ApiError::INVALID_OPTION),
        }
    }
    let value = match opt {
        "log_level" => Value::from(st.runtime.log_level.lock().code()),
        "nsqlookupd_tcp_addresses" => match &*st.runtime.lookupd_tcp_addresses.lock() {
            Some(addrs) => Value::from(addrs.clone()),
            None => Value::Null,
        },
        _ => st.nsqd.opts.get_json(opt).ok_or(ApiError::INVALID_OPTION)?,
    };
    Ok(match value {
        Value::String(s) => V1Body::Text(Bytes::from(s)),
        v => V1Body::Json(json::to_vec(&v)),
    })
}

/// `PUT /config/nsqlookupd_tcp_addresses` took effect in the options; the reference then
/// disconnects removed lookupd peers and connects (and registers with) new ones.
// lookupd: apply at run time (the lookupd connector hooks in here).
fn on_lookupd_addresses_changed(nsqd: &Nsqd, addrs: &[String]) {
    tracing::info!("nsqlookupd_tcp_addresses changed to {addrs:?}");
    nsqd.lookup.set_addresses(addrs.to_vec());
}
