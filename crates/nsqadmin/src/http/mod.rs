//! nsqadmin's HTTP server side (nsqadmin/http.go, `NewHTTPServer`): one fallback handler that
//! routes with the shared httprouter-style router over a fixed table prefixed with
//! `--base-path`, `500 INTERNAL_ERROR` on a handler panic, the V1 response framing
//! (`nsq_http::reply::Reply`), and gzip/deflate compression of every response.
//!
//! [`api`] has the `/api` and `/config` endpoints, [`replication`] `/api/replication` (ours),
//! [`ui`] the index page, assets and the Graphite proxy; Go's URL rules are `nsq_go::url`.

mod api;
mod replication;
mod ui;

use nsq_go::url as query;
pub(crate) use nsq_http::reply::{Reply, CT_TEXT};
use nsq_http::router::{Route, Router as RouteTable};

use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::Response;
use axum::Router;
use bytes::Bytes;

use crate::admin::Admin;

/// Builds the router (served by `nsq_http::serve::serve`, which adds `ConnectInfo<SocketAddr>`).
pub fn router(admin: Arc<Admin>) -> Router {
    Router::new().fallback(dispatch).with_state(admin)
}

// ---- route table ----------------------------------------------------------------------------

/// Every endpoint of nsqadmin/http.go, `NewHTTPServer`, plus the history API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Endpoint {
    Index,
    Ping,
    Static,
    Render,
    Topics,
    CreateTopicChannel,
    Topic,
    TopicAction,
    DeleteTopic,
    Channel,
    ChannelAction,
    DeleteChannel,
    Nodes,
    Node,
    TombstoneTopicProducer,
    Counter,
    Graphite,
    Config,
    HistoryTotal,
    HistoryTopic,
    HistoryChannel,
    /// `/metrics` (Prometheus; crate::metrics).
    Metrics,
    /// `/api/replication` (ours: every node's replication state; http/replication.rs).
    Replication,
    /// `/api/settings/:topic` (ours: queue settings, GET and POST; http/api/settings.rs).
    TopicConfig,
    /// `/api/settings/:topic/:channel` (ours, likewise).
    ChannelConfig,
    /// `/api/peek/:topic/:channel` (ours).
    ChannelPeek,
    /// `/api/redrive/:topic/:channel` (ours: POST; http/api/redrive.rs).
    ChannelRedrive,
}

const ROUTES: &[(Method, &str, Endpoint)] = &[
    (Method::GET, "/", Endpoint::Index),
    (Method::GET, "/ping", Endpoint::Ping),
    (Method::GET, "/metrics", Endpoint::Metrics),
    (Method::GET, "/topics", Endpoint::Index),
    (Method::GET, "/topics/:topic", Endpoint::Index),
    (Method::GET, "/topics/:topic/:channel", Endpoint::Index),
    (Method::GET, "/nodes", Endpoint::Index),
    (Method::GET, "/nodes/:node", Endpoint::Index),
    (Method::GET, "/counter", Endpoint::Index),
    (Method::GET, "/lookup", Endpoint::Index),
    (Method::GET, "/replication", Endpoint::Index),
    (Method::GET, "/static/:asset", Endpoint::Static),
    (Method::GET, "/fonts/:asset", Endpoint::Static),
    (Method::GET, "/render", Endpoint::Render),
    (Method::GET, "/api/topics", Endpoint::Topics),
    (Method::POST, "/api/topics", Endpoint::CreateTopicChannel),
    (Method::GET, "/api/topics/:topic", Endpoint::Topic),
    (Method::POST, "/api/topics/:topic", Endpoint::TopicAction),
    (Method::DELETE, "/api/topics/:topic", Endpoint::DeleteTopic),
    (
        Method::GET,
        "/api/topics/:topic/:channel",
        Endpoint::Channel,
    ),
    (
        Method::POST,
        "/api/topics/:topic/:channel",
        Endpoint::ChannelAction,
    ),
    (
        Method::DELETE,
        "/api/topics/:topic/:channel",
        Endpoint::DeleteChannel,
    ),
    (Method::GET, "/api/nodes", Endpoint::Nodes),
    (Method::GET, "/api/nodes/:node", Endpoint::Node),
    (
        Method::DELETE,
        "/api/nodes/:node",
        Endpoint::TombstoneTopicProducer,
    ),
    (Method::GET, "/api/counter", Endpoint::Counter),
    (Method::GET, "/api/replication", Endpoint::Replication),
    // Ours (queue settings and peek): under their own prefixes, so that every NSQ path,
    // `/api/topics/:topic/:channel` for any channel name included, keeps its NSQ meaning.
    (Method::GET, "/api/settings/:topic", Endpoint::TopicConfig),
    (Method::POST, "/api/settings/:topic", Endpoint::TopicConfig),
    (
        Method::GET,
        "/api/settings/:topic/:channel",
        Endpoint::ChannelConfig,
    ),
    (
        Method::POST,
        "/api/settings/:topic/:channel",
        Endpoint::ChannelConfig,
    ),
    (
        Method::GET,
        "/api/peek/:topic/:channel",
        Endpoint::ChannelPeek,
    ),
    (
        Method::POST,
        "/api/redrive/:topic/:channel",
        Endpoint::ChannelRedrive,
    ),
    (Method::GET, "/api/graphite", Endpoint::Graphite),
    (Method::GET, "/api/history", Endpoint::HistoryTotal),
    (
        Method::GET,
        "/api/history/topics/:topic",
        Endpoint::HistoryTopic,
    ),
    (
        Method::GET,
        "/api/history/topics/:topic/:channel",
        Endpoint::HistoryChannel,
    ),
    (Method::GET, "/config/:opt", Endpoint::Config),
    (Method::PUT, "/config/:opt", Endpoint::Config),
];

/// The route table joined with the base path (`path.Join`).
pub(crate) struct Routes {
    table: RouteTable<Endpoint>,
}

impl Routes {
    pub(crate) fn new(base_path: &str, proxy_graphite: bool) -> Routes {
        let routes = ROUTES
            .iter()
            .filter(|(_, _, ep)| proxy_graphite || *ep != Endpoint::Render)
            .map(|(m, p, ep)| {
                let full = if base_path == "/" {
                    (*p).to_string()
                } else if *p == "/" {
                    base_path.to_string()
                } else {
                    format!("{base_path}{p}")
                };
                (m.clone(), full, *ep)
            });
        Routes {
            table: RouteTable::new(routes),
        }
    }
}

// ---- requests and replies -------------------------------------------------------------------

/// What a handler sees of a request.
pub(crate) struct Ctx {
    pub method: Method,
    /// Decoded request path.
    pub path: String,
    /// Raw query string, if any.
    pub raw_query: Option<String>,
    pub headers: HeaderMap,
    pub peer: SocketAddr,
    /// The request body, unread: a handler reads as much of it as Go's reads (see
    /// [`Ctx::take_body`]). In a lock only so that `Ctx` is `Sync`.
    body: parking_lot::Mutex<Option<Body>>,
}

impl Ctx {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The request body (empty if it was taken before).
    pub(crate) fn take_body(&self) -> Body {
        self.body.lock().take().unwrap_or_default()
    }
}

/// The first of `gzip`/`deflate` among the `Accept-Encoding` tokens.
fn pick_encoding(accept: Option<&str>) -> Option<&'static str> {
    for tok in accept?.split(',') {
        let name = tok.split(';').next().unwrap_or("").trim();
        if name.eq_ignore_ascii_case("gzip") {
            return Some("gzip");
        }
        if name.eq_ignore_ascii_case("deflate") {
            return Some("deflate");
        }
    }
    None
}

/// Go's `http.DetectContentType` for what we serve.
fn sniff(body: &[u8]) -> &'static str {
    let t = body
        .iter()
        .position(|c| !c.is_ascii_whitespace())
        .map(|i| &body[i..]);
    match t {
        Some(b) if b.starts_with(b"<") => "text/html; charset=utf-8",
        Some(b) if b.starts_with(b"\x89PNG") => "image/png",
        _ => CT_TEXT,
    }
}

fn finish(mut r: Reply, accept: Option<&str>) -> Response {
    let enc = pick_encoding(accept);
    if let Some(enc) = enc {
        if !r.has(&header::CONTENT_TYPE) {
            r.headers
                .push((header::CONTENT_TYPE, sniff(&r.body).to_string()));
        }
        let compressed = compress(enc, &r.body);
        r.body = Bytes::from(compressed);
        r.headers.push((header::CONTENT_ENCODING, enc.to_string()));
        r.headers
            .push((header::VARY, "Accept-Encoding".to_string()));
    }
    let mut resp = Response::new(Body::from(r.body));
    *resp.status_mut() = r.status;
    for (k, v) in r.headers {
        if let Ok(v) = HeaderValue::from_str(&v) {
            resp.headers_mut().append(k, v);
        }
    }
    resp
}

fn compress(enc: &str, body: &[u8]) -> Vec<u8> {
    use flate2::write::{DeflateEncoder, GzEncoder};
    use flate2::Compression;
    let out = if enc == "gzip" {
        let mut e = GzEncoder::new(Vec::new(), Compression::default());
        e.write_all(body).and_then(|_| e.finish())
    } else {
        let mut e = DeflateEncoder::new(Vec::new(), Compression::default());
        e.write_all(body).and_then(|_| e.finish())
    };
    out.unwrap_or_default()
}

async fn dispatch(
    State(admin): State<Arc<Admin>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    req: Request,
) -> Response {
    let accept = req
        .headers()
        .get(header::ACCEPT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let reply = route(admin, peer, req).await;
    finish(reply, accept.as_deref())
}

async fn route(admin: Arc<Admin>, peer: SocketAddr, req: Request) -> Reply {
    let (ep, params, path) = match admin.routes.table.route(req.method(), req.uri().path()) {
        Route::Found {
            endpoint,
            params,
            path,
        } => (endpoint, params, path),
        other => return other.fallback(req.method(), req.uri().query()),
    };
    let (parts, body) = req.into_parts();
    let ctx = Ctx {
        method: parts.method,
        path,
        raw_query: parts.uri.query().map(str::to_string),
        headers: parts.headers,
        peer,
        body: parking_lot::Mutex::new(Some(body)),
    };
    // A panicking handler answers 500 instead of dropping the connection.
    let task = tokio::spawn(async move {
        match ep {
            Endpoint::Index | Endpoint::Static | Endpoint::Render | Endpoint::Ping => {
                ui::handle(&admin, ep, params, ctx).await
            }
            Endpoint::Metrics => Reply::new(StatusCode::OK, crate::metrics::render())
                .with(header::CONTENT_TYPE, nsq_prometheus::CONTENT_TYPE),
            Endpoint::Replication => replication::handle(&admin).await,
            _ => api::handle(&admin, ep, params, ctx).await,
        }
    });
    match task.await {
        Ok(r) => r,
        Err(e) => {
            tracing::error!("handler panic - {e}");
            Reply::error(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL_ERROR")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routing() {
        let r = Routes::new("/", false).table;
        assert_eq!(r.lookup(&Method::GET, "/"), Some((Endpoint::Index, vec![])));
        assert_eq!(
            r.lookup(&Method::GET, "/api/topics/t/c"),
            Some((Endpoint::Channel, vec!["t".into(), "c".into()]))
        );
        assert_eq!(r.lookup(&Method::GET, "/render"), None);
        // A channel named `config` is an ordinary channel, as in NSQ.
        assert_eq!(
            r.lookup(&Method::GET, "/api/topics/t/config"),
            Some((Endpoint::Channel, vec!["t".into(), "config".into()]))
        );
        assert_eq!(
            r.lookup(&Method::POST, "/api/topics/t/config"),
            Some((Endpoint::ChannelAction, vec!["t".into(), "config".into()]))
        );
        assert_eq!(
            r.lookup(&Method::DELETE, "/api/topics/t/config"),
            Some((Endpoint::DeleteChannel, vec!["t".into(), "config".into()]))
        );
        assert_eq!(r.lookup(&Method::GET, "/api/topics/t/c/config"), None);
        assert_eq!(r.lookup(&Method::GET, "/api/topics/t/c/peek"), None);
        assert_eq!(
            r.lookup(&Method::GET, "/api/settings/t"),
            Some((Endpoint::TopicConfig, vec!["t".into()]))
        );
        assert_eq!(
            r.lookup(&Method::POST, "/api/settings/t"),
            Some((Endpoint::TopicConfig, vec!["t".into()]))
        );
        assert_eq!(
            r.lookup(&Method::GET, "/api/settings/t/c"),
            Some((Endpoint::ChannelConfig, vec!["t".into(), "c".into()]))
        );
        assert_eq!(
            r.lookup(&Method::POST, "/api/settings/t/c"),
            Some((Endpoint::ChannelConfig, vec!["t".into(), "c".into()]))
        );
        assert_eq!(
            r.lookup(&Method::GET, "/api/peek/t/c"),
            Some((Endpoint::ChannelPeek, vec!["t".into(), "c".into()]))
        );
        assert_eq!(r.lookup(&Method::POST, "/api/peek/t/c"), None);
        assert_eq!(
            r.lookup(&Method::POST, "/api/redrive/t/c"),
            Some((Endpoint::ChannelRedrive, vec!["t".into(), "c".into()]))
        );
        // A channel named `redrive` stays an ordinary channel, as in NSQ.
        assert_eq!(
            r.lookup(&Method::POST, "/api/topics/t/redrive"),
            Some((Endpoint::ChannelAction, vec!["t".into(), "redrive".into()]))
        );
        assert_eq!(r.lookup(&Method::POST, "/api/topics/t/c/redrive"), None);
        assert_eq!(r.lookup(&Method::GET, "/api/redrive/t/c"), None);
        assert_eq!(
            r.allowed("/api/redrive/t/c", Some(&Method::GET)).as_deref(),
            Some("OPTIONS, POST")
        );
        assert_eq!(
            r.allowed("/api/settings/t", Some(&Method::DELETE))
                .as_deref(),
            Some("GET, OPTIONS, POST")
        );
        assert_eq!(
            r.lookup(&Method::GET, "/replication"),
            Some((Endpoint::Index, vec![]))
        );
        assert_eq!(
            r.lookup(&Method::GET, "/api/replication"),
            Some((Endpoint::Replication, vec![]))
        );
        assert_eq!(
            r.allowed("/api/topics/x", Some(&Method::PUT)).as_deref(),
            Some("DELETE, GET, OPTIONS, POST")
        );
        let r = Routes::new("/admin", true).table;
        assert_eq!(
            r.lookup(&Method::GET, "/admin"),
            Some((Endpoint::Index, vec![]))
        );
        assert_eq!(r.lookup(&Method::GET, "/admin/"), None);
        assert_eq!(
            r.lookup(&Method::GET, "/admin/static/main.js"),
            Some((Endpoint::Static, vec!["main.js".into()]))
        );
        assert_eq!(r.lookup(&Method::GET, "/api/topics"), None);
    }

    #[test]
    fn encodings() {
        assert_eq!(pick_encoding(Some("br, deflate, gzip")), Some("deflate"));
        assert_eq!(pick_encoding(Some("gzip;q=1.0, deflate")), Some("gzip"));
        assert_eq!(pick_encoding(Some("br")), None);
        assert_eq!(pick_encoding(None), None);
    }
}
