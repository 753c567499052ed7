//! nsqd's HTTP API (nsqd/http.go, `newHTTPServer`): one fallback handler that routes with the
//! shared httprouter-style [`Router`] over a fixed route table, and the reference's response
//! styles.
//!
//! Submodules: [`api`] has the endpoints, [`stats`] the `/stats` snapshot and renderings,
//! [`debug`] the `/debug/*` routes, `drain` drain mode's endpoints and refusals, [`tz`] the local zone for `/stats`' text. Go's URL and JSON
//! rules come from `nsq_go::{url, json}`, the reply primitives from `nsq_http::reply`.

mod api;
mod debug;
mod drain;
mod queue;
mod stats;

use nsq_go::json;

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, Method, StatusCode};
use axum::response::Response;
use axum::Router;
use nsq_http::reply::{
    plain, raw, set, set_nsq, v1, v1_error, ApiError, ApiResult, CT_HTML, CT_JSON, CT_TEXT,
};
use nsq_http::router::{self, Route};
use parking_lot::Mutex;

use crate::nsqd::Nsqd;
use crate::options::{LogLevel, TlsRequired};

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

/// Every endpoint of nsqd/http.go, `newHTTPServer`.
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
    /// Ours: a topic's or channel's queue settings (crate::queue_settings).
    TopicConfig,
    ChannelConfig,
    /// Ours, with `--http-peek`.
    ChannelPeek,
    /// Ours (crate::redrive).
    ChannelRedrive,
    Config,
    PprofIndex,
    PprofCmdline,
    PprofSymbol,
    PprofProfile(&'static str),
    SetBlockRate,
    FreeMemory,
}

const ROUTES: &[(Method, &str, Endpoint)] = &[
    (Method::GET, "/ping", Endpoint::Ping),
    (Method::GET, "/info", Endpoint::Info),
    (Method::POST, "/pub", Endpoint::Pub),
    (Method::POST, "/mpub", Endpoint::Mpub),
    (Method::GET, "/stats", Endpoint::Stats),
    (Method::GET, "/metrics", Endpoint::Metrics),
    (Method::POST, "/topic/create", Endpoint::TopicCreate),
    (Method::POST, "/topic/delete", Endpoint::TopicDelete),
    (Method::POST, "/topic/empty", Endpoint::TopicEmpty),
    (Method::POST, "/topic/pause", Endpoint::TopicPause),
    (Method::POST, "/topic/unpause", Endpoint::TopicUnpause),
    (Method::POST, "/channel/create", Endpoint::ChannelCreate),
    (Method::POST, "/channel/delete", Endpoint::ChannelDelete),
    (Method::POST, "/channel/empty", Endpoint::ChannelEmpty),
    (Method::POST, "/channel/pause", Endpoint::ChannelPause),
    (Method::POST, "/channel/unpause", Endpoint::ChannelUnpause),
    (Method::GET, "/topic/config", Endpoint::TopicConfig),
    (Method::POST, "/topic/config", Endpoint::TopicConfig),
    (Method::GET, "/channel/config", Endpoint::ChannelConfig),
    (Method::POST, "/channel/config", Endpoint::ChannelConfig),
    (Method::GET, "/channel/peek", Endpoint::ChannelPeek),
    (Method::POST, "/channel/redrive", Endpoint::ChannelRedrive),
    (Method::GET, "/config/:opt", Endpoint::Config),
    (Method::PUT, "/config/:opt", Endpoint::Config),
    (Method::GET, "/debug/pprof/", Endpoint::PprofIndex),
    (Method::GET, "/debug/pprof/cmdline", Endpoint::PprofCmdline),
    (Method::GET, "/debug/pprof/symbol", Endpoint::PprofSymbol),
    (Method::POST, "/debug/pprof/symbol", Endpoint::PprofSymbol),
    (
        Method::GET,
        "/debug/pprof/profile",
        Endpoint::PprofProfile("profile"),
    ),
    (
        Method::GET,
        "/debug/pprof/heap",
        Endpoint::PprofProfile("heap"),
    ),
    (
        Method::GET,
        "/debug/pprof/goroutine",
        Endpoint::PprofProfile("goroutine"),
    ),
    (
        Method::GET,
        "/debug/pprof/block",
        Endpoint::PprofProfile("block"),
    ),
    (
        Method::GET,
        "/debug/pprof/threadcreate",
        Endpoint::PprofProfile("threadcreate"),
    ),
    (Method::PUT, "/debug/setblockrate", Endpoint::SetBlockRate),
    (Method::POST, "/debug/freememory", Endpoint::FreeMemory),
];

/// The route table as a router (built once).
fn routes() -> &'static router::Router<Endpoint> {
    static ROUTER: std::sync::OnceLock<router::Router<Endpoint>> = std::sync::OnceLock::new();
    ROUTER.get_or_init(|| router::Router::new(ROUTES.iter().cloned()))
}

// ---- dispatch -------------------------------------------------------------------------------

async fn dispatch(State(st): State<HttpState>, req: Request) -> Response {
    // With --tls-required=true the plain listener answers 403 to everything, pointing at the
    // HTTPS port (0 when there is no HTTPS listener): nsqd/http.go, `ServeHTTP`.
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

    match routes().route(req.method(), req.uri().path()) {
        Route::Found {
            endpoint,
            mut params,
            path,
        } => api::handle(&st, endpoint, &path, params.pop(), req).await,
        other => other.fallback(req.method(), req.uri().query()).into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_table() {
        let r = routes();
        assert_eq!(
            r.lookup(&Method::PUT, "/config/x"),
            Some((Endpoint::Config, vec!["x".into()]))
        );
        assert_eq!(
            r.fixed_path(&Method::GET, "/DEBUG/PPROF"),
            Some("/debug/pprof/".into())
        );
        assert_eq!(
            r.allowed("/debug/pprof/symbol", None).as_deref(),
            Some("GET, OPTIONS, POST")
        );
    }
}
