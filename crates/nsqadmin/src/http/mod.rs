//! nsqadmin's HTTP server side (nsqadmin.md §2): one fallback handler that routes like the
//! reference's httprouter over a fixed table prefixed with `--base-path` (exact match per
//! method, trailing-slash and case redirects, `405` with `Allow`, automatic `OPTIONS`, JSON
//! `404`, `500 INTERNAL_ERROR` on a handler panic), the V1 response framing, and gzip/deflate
//! compression of every response.
//!
//! [`api`] has the `/api` and `/config` endpoints, [`ui`] the index page, assets and the
//! Graphite proxy, [`query`] Go's URL rules.

mod api;
pub mod query;
mod ui;

use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::Response;
use axum::Router;
use bytes::Bytes;

use crate::server::Admin;

/// Builds the router (served with `axum::serve` and `ConnectInfo<SocketAddr>`).
pub fn router(admin: Arc<Admin>) -> Router {
    Router::new().fallback(dispatch).with_state(admin)
}

// ---- route table ----------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum M {
    Get,
    Post,
    Put,
    Delete,
}

impl M {
    fn of(m: &Method) -> Option<M> {
        match *m {
            Method::GET => Some(M::Get),
            Method::POST => Some(M::Post),
            Method::PUT => Some(M::Put),
            Method::DELETE => Some(M::Delete),
            _ => None,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            M::Get => "GET",
            M::Post => "POST",
            M::Put => "PUT",
            M::Delete => "DELETE",
        }
    }
}

/// Every endpoint of §2.3 plus the history API.
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
}

const ROUTES: &[(M, &str, Endpoint)] = &[
    (M::Get, "/", Endpoint::Index),
    (M::Get, "/ping", Endpoint::Ping),
    (M::Get, "/metrics", Endpoint::Metrics),
    (M::Get, "/topics", Endpoint::Index),
    (M::Get, "/topics/:topic", Endpoint::Index),
    (M::Get, "/topics/:topic/:channel", Endpoint::Index),
    (M::Get, "/nodes", Endpoint::Index),
    (M::Get, "/nodes/:node", Endpoint::Index),
    (M::Get, "/counter", Endpoint::Index),
    (M::Get, "/lookup", Endpoint::Index),
    (M::Get, "/static/:asset", Endpoint::Static),
    (M::Get, "/fonts/:asset", Endpoint::Static),
    (M::Get, "/render", Endpoint::Render),
    (M::Get, "/api/topics", Endpoint::Topics),
    (M::Post, "/api/topics", Endpoint::CreateTopicChannel),
    (M::Get, "/api/topics/:topic", Endpoint::Topic),
    (M::Post, "/api/topics/:topic", Endpoint::TopicAction),
    (M::Delete, "/api/topics/:topic", Endpoint::DeleteTopic),
    (M::Get, "/api/topics/:topic/:channel", Endpoint::Channel),
    (
        M::Post,
        "/api/topics/:topic/:channel",
        Endpoint::ChannelAction,
    ),
    (
        M::Delete,
        "/api/topics/:topic/:channel",
        Endpoint::DeleteChannel,
    ),
    (M::Get, "/api/nodes", Endpoint::Nodes),
    (M::Get, "/api/nodes/:node", Endpoint::Node),
    (
        M::Delete,
        "/api/nodes/:node",
        Endpoint::TombstoneTopicProducer,
    ),
    (M::Get, "/api/counter", Endpoint::Counter),
    (M::Get, "/api/graphite", Endpoint::Graphite),
    (M::Get, "/api/history", Endpoint::HistoryTotal),
    (M::Get, "/api/history/topics/:topic", Endpoint::HistoryTopic),
    (
        M::Get,
        "/api/history/topics/:topic/:channel",
        Endpoint::HistoryChannel,
    ),
    (M::Get, "/config/:opt", Endpoint::Config),
    (M::Put, "/config/:opt", Endpoint::Config),
];

/// The route table joined with the base path (`path.Join`).
pub(crate) struct Routes {
    routes: Vec<(M, String, Endpoint)>,
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
                (*m, full, *ep)
            })
            .collect();
        Routes { routes }
    }

    /// The exact route for `method` and `path`, with its parameters.
    fn lookup(&self, method: M, path: &str) -> Option<(Endpoint, Vec<String>)> {
        self.routes
            .iter()
            .filter(|(m, _, _)| *m == method)
            .find_map(|(_, pat, ep)| match_route(pat, path, false).map(|(_, p)| (*ep, p)))
    }

    /// httprouter's case-insensitive lookup of the cleaned path, with a trailing slash
    /// toggled as a second try.
    fn fixed_path(&self, method: M, path: &str) -> Option<String> {
        let clean = query::clean_path(path);
        let toggled = toggle_slash(&clean);
        let routes = || self.routes.iter().filter(|(m, _, _)| *m == method);
        routes()
            .find_map(|(_, pat, _)| match_route(pat, &clean, true))
            .or_else(|| routes().find_map(|(_, pat, _)| match_route(pat, &toggled, true)))
            .map(|(p, _)| p)
    }

    /// The other methods registered for `path`, plus `OPTIONS`, sorted.
    fn allowed(&self, path: &str, req: Option<M>) -> Option<String> {
        let mut methods: Vec<&str> = [M::Delete, M::Get, M::Post, M::Put]
            .into_iter()
            .filter(|m| Some(*m) != req && self.lookup(*m, path).is_some())
            .map(M::as_str)
            .collect();
        if methods.is_empty() {
            return None;
        }
        methods.push("OPTIONS");
        methods.sort_unstable();
        Some(methods.join(", "))
    }
}

fn toggle_slash(p: &str) -> String {
    if p.len() > 1 && p.ends_with('/') {
        p[..p.len() - 1].to_string()
    } else {
        format!("{p}/")
    }
}

/// Matches `path` against a pattern of `/`-separated segments where `:name` matches one
/// non-empty segment. Returns the canonical spelling and the parameters.
fn match_route(pattern: &str, path: &str, ignore_case: bool) -> Option<(String, Vec<String>)> {
    let ps: Vec<&str> = pattern.split('/').collect();
    let xs: Vec<&str> = path.split('/').collect();
    if ps.len() != xs.len() {
        return None;
    }
    let mut params = Vec::new();
    let mut canon = Vec::with_capacity(ps.len());
    for (p, x) in ps.iter().zip(&xs) {
        if p.starts_with(':') {
            if x.is_empty() {
                return None;
            }
            params.push((*x).to_string());
            canon.push(*x);
        } else if *p == *x || (ignore_case && p.eq_ignore_ascii_case(x)) {
            canon.push(*p);
        } else {
            return None;
        }
    }
    Some((canon.join("/"), params))
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
    pub body: Bytes,
}

impl Ctx {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// A response before compression.
pub(crate) struct Reply {
    pub status: StatusCode,
    pub headers: Vec<(HeaderName, String)>,
    pub body: Bytes,
}

pub(crate) const CT_JSON: &str = "application/json; charset=utf-8";
pub(crate) const CT_TEXT: &str = "text/plain; charset=utf-8";
const NSQ_CT_NAME: &str = "x-nsq-content-type";
const NSQ_CT: &str = "nsq; version=1.0";

impl Reply {
    pub(crate) fn new(status: StatusCode, body: impl Into<Bytes>) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            body: body.into(),
        }
    }

    pub(crate) fn with(mut self, name: HeaderName, value: impl Into<String>) -> Reply {
        self.headers.push((name, value.into()));
        self
    }

    /// V1 success: compact Go JSON.
    pub(crate) fn json<T: serde::Serialize + ?Sized>(v: &T) -> Reply {
        Reply::new(StatusCode::OK, crate::json::to_vec(v))
            .with(header::CONTENT_TYPE, CT_JSON)
            .with(HeaderName::from_static(NSQ_CT_NAME), NSQ_CT)
    }

    /// V1 error `{"message":…}`.
    pub(crate) fn error(status: StatusCode, msg: &str) -> Reply {
        #[derive(serde::Serialize)]
        struct Message<'a> {
            message: &'a str,
        }
        let mut r = Reply::json(&Message { message: msg });
        r.status = status;
        r
    }

    /// V1 success with a string value: raw, sniffed `text/plain` unless empty.
    pub(crate) fn v1_text(s: String) -> Reply {
        let empty = s.is_empty();
        let mut r =
            Reply::new(StatusCode::OK, s).with(HeaderName::from_static(NSQ_CT_NAME), NSQ_CT);
        if !empty {
            r = r.with(header::CONTENT_TYPE, CT_TEXT);
        }
        r
    }

    fn has(&self, name: &HeaderName) -> bool {
        self.headers.iter().any(|(k, _)| k == name)
    }
}

/// §2.2: the first of `gzip`/`deflate` among the `Accept-Encoding` tokens.
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

/// The largest request body read (PUT /config reads 1 MiB + 1).
const MAX_BODY: usize = (1 << 20) + 1;

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
    let Some(path) = query::decode_path(req.uri().path()) else {
        return Reply::new(StatusCode::BAD_REQUEST, "400 Bad Request")
            .with(header::CONTENT_TYPE, CT_TEXT);
    };
    let method = M::of(req.method());
    let routes = &admin.routes;
    if let Some(m) = method {
        if let Some((ep, params)) = routes.lookup(m, &path) {
            let (parts, body) = req.into_parts();
            let body = match axum::body::to_bytes(body, MAX_BODY).await {
                Ok(b) => b,
                // Over the limit: hand over a marker that is too big for every endpoint.
                Err(_) => Bytes::from(vec![b' '; MAX_BODY]),
            };
            let ctx = Ctx {
                method: parts.method,
                path,
                raw_query: parts.uri.query().map(str::to_string),
                headers: parts.headers,
                peer,
                body,
            };
            // A panicking handler answers 500 instead of dropping the connection.
            let task = tokio::spawn(async move {
                match ep {
                    Endpoint::Index | Endpoint::Static | Endpoint::Render | Endpoint::Ping => {
                        ui::handle(&admin, ep, params, ctx).await
                    }
                    Endpoint::Metrics => Reply::new(StatusCode::OK, crate::metrics::render())
                        .with(header::CONTENT_TYPE, nsq_prometheus::CONTENT_TYPE),
                    _ => api::handle(&admin, ep, params, ctx).await,
                }
            });
            return match task.await {
                Ok(r) => r,
                Err(e) => {
                    tracing::error!("handler panic - {e}");
                    Reply::error(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL_ERROR")
                }
            };
        }
        if req.method() != Method::CONNECT && path != "/" {
            let code = if m == M::Get {
                StatusCode::MOVED_PERMANENTLY
            } else {
                StatusCode::TEMPORARY_REDIRECT
            };
            let toggled = toggle_slash(&path);
            let target = if routes.lookup(m, &toggled).is_some() {
                Some(toggled)
            } else {
                routes.fixed_path(m, &path)
            };
            if let Some(t) = target {
                return redirect(code, &t, req.uri().query(), m == M::Get);
            }
        }
    }
    if req.method() == Method::OPTIONS {
        if let Some(allow) = routes.allowed(&path, None) {
            return Reply::new(StatusCode::OK, "").with(header::ALLOW, allow);
        }
    } else if let Some(allow) = routes.allowed(&path, method) {
        return Reply::error(StatusCode::METHOD_NOT_ALLOWED, "METHOD_NOT_ALLOWED")
            .with(header::ALLOW, allow);
    }
    Reply::error(StatusCode::NOT_FOUND, "NOT_FOUND")
}

/// `http.Redirect`: GET gets the small HTML body, others none.
fn redirect(code: StatusCode, path: &str, q: Option<&str>, is_get: bool) -> Reply {
    let mut url = query::escape_path(path);
    if let Some(q) = q {
        url.push('?');
        url.push_str(q);
    }
    let mut r = if is_get {
        Reply::new(
            code,
            format!(
                "<a href=\"{}\">{}</a>.\n\n",
                query::html_escape(&url),
                code.canonical_reason().unwrap_or("")
            ),
        )
        .with(header::CONTENT_TYPE, "text/html; charset=utf-8")
    } else {
        Reply::new(code, "")
    };
    r.headers.push((header::LOCATION, url));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routing() {
        let r = Routes::new("/", false);
        assert_eq!(r.lookup(M::Get, "/"), Some((Endpoint::Index, vec![])));
        assert_eq!(
            r.lookup(M::Get, "/api/topics/t/c"),
            Some((Endpoint::Channel, vec!["t".into(), "c".into()]))
        );
        assert_eq!(r.lookup(M::Get, "/render"), None);
        assert_eq!(
            r.fixed_path(M::Get, "/API/Topics"),
            Some("/api/topics".into())
        );
        assert_eq!(
            r.allowed("/api/topics/x", Some(M::Put)).as_deref(),
            Some("DELETE, GET, OPTIONS, POST")
        );
        let r = Routes::new("/admin", true);
        assert_eq!(r.lookup(M::Get, "/admin"), Some((Endpoint::Index, vec![])));
        assert_eq!(r.lookup(M::Get, "/admin/"), None);
        assert_eq!(
            r.lookup(M::Get, "/admin/render"),
            Some((Endpoint::Render, vec![]))
        );
        assert_eq!(
            r.lookup(M::Get, "/admin/static/main.js"),
            Some((Endpoint::Static, vec!["main.js".into()]))
        );
        assert_eq!(r.lookup(M::Get, "/api/topics"), None);
    }

    #[test]
    fn encodings() {
        assert_eq!(pick_encoding(Some("br, deflate, gzip")), Some("deflate"));
        assert_eq!(pick_encoding(Some("gzip;q=1.0, deflate")), Some("gzip"));
        assert_eq!(pick_encoding(Some("br")), None);
        assert_eq!(pick_encoding(None), None);
    }
}
