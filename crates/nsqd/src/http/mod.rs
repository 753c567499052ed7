//! nsqd's HTTP API (nsqd-http-api.md): one fallback handler that routes like the reference's
//! httprouter (exact match per method, trailing-slash and case redirects, `405` with `Allow`,
//! `OPTIONS`, `404`) over a fixed route table, and the reference's response styles.
//!
//! Submodules: [`api`] has the endpoints, [`stats`] the `/stats` snapshot and renderings,
//! [`debug`] the `/debug/*` routes, [`query`] Go's URL parsing rules, [`json`] Go's JSON bytes, [`tz`] the local zone for `/stats`' text.

mod api;
mod debug;
pub mod json;
pub mod query;
pub mod reply;

/// Go's `time.Duration.String()` for a nanosecond count (shared with nsqlookupd's log).
pub use stats::go_duration;
mod stats;
mod tz;

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, Method, StatusCode};
use axum::response::Response;
use axum::Router;
use bytes::Bytes;
use parking_lot::Mutex;

use crate::options::{LogLevel, TlsRequired};
use crate::server::Nsqd;
use reply::{raw, redirect, set, set_nsq, v1_error, CT_HTML, CT_JSON, CT_TEXT};

/// Builds the HTTP API for `nsqd`'s plain listener (served by `server.rs`).
pub fn router(nsqd: Arc<Nsqd>) -> Router {
    routers(nsqd).0
}

/// The plain-HTTP and the HTTPS routers, sharing the run-time `/config` state. They differ
/// only in the TLS-required policy: `--tls-required=true` refuses plain HTTP, never HTTPS.
pub fn routers(nsqd: Arc<Nsqd>) -> (Router, Router) {
    let runtime = Arc::new(RuntimeOpts {
        log_level: Mutex::new(nsqd.opts.log_level),
        lookupd_tcp_addresses: Mutex::new(Some(nsqd.opts.lookupd_tcp_addresses.clone())),
    });
    let make = |over_tls: bool| {
        let state = HttpState {
            nsqd: nsqd.clone(),
            runtime: runtime.clone(),
            over_tls,
        };
        Router::new().fallback(dispatch).with_state(state)
    };
    (make(false), make(true))
}

/// Per-router state shared by every request.
#[derive(Clone)]
struct HttpState {
    nsqd: Arc<Nsqd>,
    runtime: Arc<RuntimeOpts>,
    /// Whether this router serves the HTTPS listener.
    over_tls: bool,
}

/// The two options `PUT /config/<opt>` may change at run time; `GET /config` reads them from
/// here. Plain mutexes: held only to copy a value in or out, never across an `.await`.
struct RuntimeOpts {
    log_level: Mutex<LogLevel>,
    /// `None` after `PUT` of `null` (rendered `null`, as the reference's nil slice).
    lookupd_tcp_addresses: Mutex<Option<Vec<String>>>,
}

// ---- route table ----------------------------------------------------------------------------

/// The HTTP methods that have routes (httprouter keeps one tree per method).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum M {
    Get,
    Post,
    Put,
}

impl M {
    fn of(m: &Method) -> Option<M> {
        match *m {
            Method::GET => Some(M::Get),
            Method::POST => Some(M::Post),
            Method::PUT => Some(M::Put),
            _ => None,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            M::Get => "GET",
            M::Post => "POST",
            M::Put => "PUT",
        }
    }
}

/// Every endpoint of nsqd-http-api.md §2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Endpoint {
    Ping,
    Info,
    Pub,
    Mpub,
    Stats,
    /// `/metrics` (Prometheus; crate::metrics).
    Metrics,
    TopicCreate,
    TopicDelete,
    TopicEmpty,
    TopicPause,
    TopicUnpause,
    ChannelCreate,
    ChannelDelete,
    ChannelEmpty,
    ChannelPause,
    ChannelUnpause,
    Config,
    PprofIndex,
    PprofCmdline,
    PprofSymbol,
    PprofProfile(&'static str),
    SetBlockRate,
    FreeMemory,
}

/// The only parameterised route is `/config/:opt`; `PARAM` marks its wildcard segment.
const PARAM: &str = ":opt";

const ROUTES: &[(M, &str, Endpoint)] = &[
    (M::Get, "/ping", Endpoint::Ping),
    (M::Get, "/info", Endpoint::Info),
    (M::Post, "/pub", Endpoint::Pub),
    (M::Post, "/mpub", Endpoint::Mpub),
    (M::Get, "/stats", Endpoint::Stats),
    (M::Get, "/metrics", Endpoint::Metrics),
    (M::Post, "/topic/create", Endpoint::TopicCreate),
    (M::Post, "/topic/delete", Endpoint::TopicDelete),
    (M::Post, "/topic/empty", Endpoint::TopicEmpty),
    (M::Post, "/topic/pause", Endpoint::TopicPause),
    (M::Post, "/topic/unpause", Endpoint::TopicUnpause),
    (M::Post, "/channel/create", Endpoint::ChannelCreate),
    (M::Post, "/channel/delete", Endpoint::ChannelDelete),
    (M::Post, "/channel/empty", Endpoint::ChannelEmpty),
    (M::Post, "/channel/pause", Endpoint::ChannelPause),
    (M::Post, "/channel/unpause", Endpoint::ChannelUnpause),
    (M::Get, "/config/:opt", Endpoint::Config),
    (M::Put, "/config/:opt", Endpoint::Config),
    (M::Get, "/debug/pprof/", Endpoint::PprofIndex),
    (M::Get, "/debug/pprof/cmdline", Endpoint::PprofCmdline),
    (M::Get, "/debug/pprof/symbol", Endpoint::PprofSymbol),
    (M::Post, "/debug/pprof/symbol", Endpoint::PprofSymbol),
    (
        M::Get,
        "/debug/pprof/profile",
        Endpoint::PprofProfile("profile"),
    ),
    (M::Get, "/debug/pprof/heap", Endpoint::PprofProfile("heap")),
    (
        M::Get,
        "/debug/pprof/goroutine",
        Endpoint::PprofProfile("goroutine"),
    ),
    (
        M::Get,
        "/debug/pprof/block",
        Endpoint::PprofProfile("block"),
    ),
    (
        M::Get,
        "/debug/pprof/threadcreate",
        Endpoint::PprofProfile("threadcreate"),
    ),
    (M::Put, "/debug/setblockrate", Endpoint::SetBlockRate),
    (M::Post, "/debug/freememory", Endpoint::FreeMemory),
];

/// Matches `path` against one route pattern. On success returns the route's canonical path
/// (its own spelling of the static part, the request's parameter) and the parameter.
fn match_route(pattern: &str, path: &str, ignore_case: bool) -> Option<(String, Option<String>)> {
    let eq = |a: &str, b: &str| {
        if ignore_case {
            a.eq_ignore_ascii_case(b)
        } else {
            a == b
        }
    };
    match pattern.strip_suffix(PARAM) {
        Some(prefix) => {
            let head = path.get(..prefix.len())?;
            let param = &path[prefix.len()..];
            if !eq(head, prefix) || param.is_empty() || param.contains('/') {
                return None;
            }
            Some((format!("{prefix}{param}"), Some(param.to_string())))
        }
        None => eq(pattern, path).then(|| (pattern.to_string(), None)),
    }
}

/// The exact (case-sensitive) route for `method` and `path`.
fn lookup(method: M, path: &str) -> Option<(Endpoint, Option<String>)> {
    ROUTES
        .iter()
        .filter(|(m, _, _)| *m == method)
        .find_map(|(_, pat, ep)| match_route(pat, path, false).map(|(_, p)| (*ep, p)))
}

/// httprouter's `findCaseInsensitivePath(CleanPath(path), true)`: a route of `method` that
/// matches ignoring ASCII case, possibly with a trailing slash added or removed.
fn fixed_path(method: M, path: &str) -> Option<String> {
    let clean = query::clean_path(path);
    let toggled = if clean.len() > 1 && clean.ends_with('/') {
        clean[..clean.len() - 1].to_string()
    } else {
        format!("{clean}/")
    };
    let routes = || ROUTES.iter().filter(|(m, _, _)| *m == method);
    routes()
        .find_map(|(_, pat, _)| match_route(pat, &clean, true))
        .or_else(|| routes().find_map(|(_, pat, _)| match_route(pat, &toggled, true)))
        .map(|(p, _)| p)
}

/// httprouter's `allowed`: the other methods registered for `path`, plus `OPTIONS`, sorted.
fn allowed(path: &str, req_method: Option<M>) -> Option<String> {
    let mut methods: Vec<&str> = [M::Get, M::Post, M::Put]
        .into_iter()
        .filter(|m| Some(*m) != req_method && lookup(*m, path).is_some())
        .map(M::as_str)
        .collect();
    if methods.is_empty() {
        return None;
    }
    methods.push("OPTIONS");
    methods.sort_unstable();
    Some(methods.join(", "))
}

// ---- dispatch -------------------------------------------------------------------------------

async fn dispatch(State(st): State<HttpState>, req: Request) -> Response {
    // §1.7: with --tls-required=true the plain listener answers 403 to everything, pointing
    // at the HTTPS port (0 when there is no HTTPS listener).
    if !st.over_tls && st.nsqd.opts.effective_tls_required() == TlsRequired::True {
        let port = st.nsqd.https_addr.map_or(0, |a| a.port());
        let mut r = raw(
            StatusCode::FORBIDDEN,
            format!(r#"{{"message": "TLS_REQUIRED", "https_port": {port}}}"#),
        );
        set(&mut r, header::CONTENT_TYPE, CT_JSON);
        set_nsq(&mut r);
        return r;
    }

    if req.method() == Method::OPTIONS && req.uri().path() == "*" {
        // Go's server answers `OPTIONS *` itself.
        return raw(StatusCode::OK, "");
    }
    let Some(path) = query::decode_path(req.uri().path()) else {
        let mut r = raw(StatusCode::BAD_REQUEST, "400 Bad Request");
        set(&mut r, header::CONTENT_TYPE, CT_TEXT);
        set(&mut r, header::CONNECTION, "close");
        return r;
    };
    let method = M::of(req.method());

    if let Some(m) = method {
        if let Some((ep, param)) = lookup(m, &path) {
            return api::handle(&st, ep, &path, param, req).await;
        }
        if req.method() != Method::CONNECT && path != "/" {
            let code = if m == M::Get {
                StatusCode::MOVED_PERMANENTLY
            } else {
                StatusCode::TEMPORARY_REDIRECT
            };
            let toggled = if path.len() > 1 && path.ends_with('/') {
                path[..path.len() - 1].to_string()
            } else {
                format!("{path}/")
            };
            if lookup(m, &toggled).is_some() {
                return redirect(code, &toggled, req.uri().query(), m == M::Get);
            }
            if let Some(fixed) = fixed_path(m, &path) {
                return redirect(code, &fixed, req.uri().query(), m == M::Get);
            }
        }
    }

    if req.method() == Method::OPTIONS {
        if let Some(allow) = allowed(&path, None) {
            let mut r = raw(StatusCode::OK, "");
            set(&mut r, header::ALLOW, &allow);
            return r;
        }
    } else if let Some(allow) = allowed(&path, method) {
        let mut r = v1_error(StatusCode::METHOD_NOT_ALLOWED, "METHOD_NOT_ALLOWED");
        set(&mut r, header::ALLOW, &allow);
        return r;
    }
    v1_error(StatusCode::NOT_FOUND, "NOT_FOUND")
}

// ---- response styles (§1.4) -----------------------------------------------------------------

/// What a "v1" endpoint returns on success (`RespondV1` with code 200).
enum Reply {
    /// No result: empty body, no Content-Type.
    Empty,
    /// A string result, sent verbatim (`text/plain` unless empty).
    Text(Bytes),
    /// A structured result, already encoded as Go's JSON.
    Json(Vec<u8>),
}

/// A "v1" error: the status and the `{"message":…}` text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ApiError(StatusCode, &'static str);

impl ApiError {
    const INTERNAL_ERROR: ApiError = ApiError(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL_ERROR");
    const INVALID_REQUEST: ApiError = ApiError(StatusCode::BAD_REQUEST, "INVALID_REQUEST");
    const MISSING_ARG_TOPIC: ApiError = ApiError(StatusCode::BAD_REQUEST, "MISSING_ARG_TOPIC");
    const INVALID_TOPIC: ApiError = ApiError(StatusCode::BAD_REQUEST, "INVALID_TOPIC");
    const INVALID_ARG_TOPIC: ApiError = ApiError(StatusCode::BAD_REQUEST, "INVALID_ARG_TOPIC");
    const MISSING_ARG_CHANNEL: ApiError = ApiError(StatusCode::BAD_REQUEST, "MISSING_ARG_CHANNEL");
    const INVALID_ARG_CHANNEL: ApiError = ApiError(StatusCode::BAD_REQUEST, "INVALID_ARG_CHANNEL");
    const TOPIC_NOT_FOUND: ApiError = ApiError(StatusCode::NOT_FOUND, "TOPIC_NOT_FOUND");
    const CHANNEL_NOT_FOUND: ApiError = ApiError(StatusCode::NOT_FOUND, "CHANNEL_NOT_FOUND");
    const MSG_TOO_BIG: ApiError = ApiError(StatusCode::PAYLOAD_TOO_LARGE, "MSG_TOO_BIG");
    const BODY_TOO_BIG: ApiError = ApiError(StatusCode::PAYLOAD_TOO_LARGE, "BODY_TOO_BIG");
    const MSG_EMPTY: ApiError = ApiError(StatusCode::BAD_REQUEST, "MSG_EMPTY");
    const BAD_BODY: ApiError = ApiError(StatusCode::PAYLOAD_TOO_LARGE, "BAD_BODY");
    const BAD_MESSAGE: ApiError = ApiError(StatusCode::PAYLOAD_TOO_LARGE, "BAD_MESSAGE");
    const INVALID_DEFER: ApiError = ApiError(StatusCode::BAD_REQUEST, "INVALID_DEFER");
    const EXITING: ApiError = ApiError(StatusCode::SERVICE_UNAVAILABLE, "EXITING");
    const INVALID_OPTION: ApiError = ApiError(StatusCode::BAD_REQUEST, "INVALID_OPTION");
    const INVALID_VALUE: ApiError = ApiError(StatusCode::BAD_REQUEST, "INVALID_VALUE");
    const INVALID_VALUE_413: ApiError = ApiError(StatusCode::PAYLOAD_TOO_LARGE, "INVALID_VALUE");
}

type ApiResult = Result<Reply, ApiError>;

fn v1(result: ApiResult) -> Response {
    let mut r = match result {
        Ok(Reply::Empty) => raw(StatusCode::OK, ""),
        Ok(Reply::Text(b)) => {
            let empty = b.is_empty();
            let mut r = raw(StatusCode::OK, b);
            if !empty {
                set(&mut r, header::CONTENT_TYPE, CT_TEXT);
            }
            r
        }
        Ok(Reply::Json(b)) => {
            let mut r = raw(StatusCode::OK, b);
            set(&mut r, header::CONTENT_TYPE, CT_JSON);
            r
        }
        Err(ApiError(code, msg)) => return v1_error(code, msg),
    };
    set_nsq(&mut r);
    r
}

/// The plain-text style (`/ping`, `/debug/setblockrate`): Go's sniffed `text/plain`.
fn plain(code: StatusCode, body: impl Into<Bytes>) -> Response {
    let b: Bytes = body.into();
    let empty = b.is_empty();
    let mut r = raw(code, b);
    if !empty {
        set(&mut r, header::CONTENT_TYPE, CT_TEXT);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routing_helpers() {
        assert_eq!(lookup(M::Get, "/ping"), Some((Endpoint::Ping, None)));
        assert_eq!(
            lookup(M::Put, "/config/x"),
            Some((Endpoint::Config, Some("x".into())))
        );
        assert_eq!(lookup(M::Get, "/config/"), None);
        assert_eq!(lookup(M::Get, "/config/a/b"), None);
        assert_eq!(fixed_path(M::Get, "/PING"), Some("/ping".into()));
        assert_eq!(
            fixed_path(M::Get, "/Config/Foo/"),
            Some("/config/Foo".into())
        );
        assert_eq!(
            fixed_path(M::Get, "/DEBUG/PPROF"),
            Some("/debug/pprof/".into())
        );
        assert_eq!(fixed_path(M::Post, "/PING"), None);
        assert_eq!(
            allowed("/ping", Some(M::Post)).as_deref(),
            Some("GET, OPTIONS")
        );
        assert_eq!(
            allowed("/config/x", None).as_deref(),
            Some("GET, OPTIONS, PUT")
        );
        assert_eq!(
            allowed("/debug/pprof/symbol", None).as_deref(),
            Some("GET, OPTIONS, POST")
        );
        assert_eq!(allowed("/nope", None), None);
    }
}
