//! nsqlookupd's HTTP API (nsqlookupd/http.go, `newHTTPServer`): the shared httprouter-style
//! router over a fixed route table, the endpoints, and the reference's "v1" response style.
//! Every request is logged at INFO as `<status> <METHOD> <uri> (<remote>) <elapsed>`
//! (nsq's internal/http_api/api_response.go, `Log`).
//!
//! The Go `net/url` and `encoding/json` details come from `nsq_go::{url, json}`.

use nsq_go::json;
use nsq_go::url::Query;
use nsq_http::reply::{
    plain, topic_channel_args, v1, v1_error, v1_json, ApiError, ApiResult, V1Body,
};
use nsq_http::router::{Route, Router as Routes};

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use axum::body::{Body, HttpBody};
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{Method, StatusCode};
use axum::response::Response;
use axum::Router;
use nsq_protocol::names::is_valid_topic_name;
use serde::Serialize;

use crate::db::{now_nanos, NodeView, ProducerView};
use crate::nsqlookupd::Nsqlookupd;

/// Builds the HTTP API; serve it with `into_make_service_with_connect_info::<SocketAddr>()`.
pub fn router(lookupd: Arc<Nsqlookupd>) -> Router {
    Router::new().fallback(dispatch).with_state(lookupd)
}

// ---- route table ----------------------------------------------------------------------------

/// Every endpoint of nsqlookupd/http.go, `newHTTPServer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Endpoint {
    Ping,
    Info,
    Debug,
    Lookup,
    Topics,
    Channels,
    Nodes,
    TopicCreate,
    TopicDelete,
    ChannelCreate,
    ChannelDelete,
    TopicTombstone,
    /// `/metrics` (Prometheus; crate::metrics).
    Metrics,
}

impl Endpoint {
    /// Whether the handler reads parameters (`http_api.NewReqParams`: query parse, then the
    /// whole body is read and ignored).
    fn takes_params(self) -> bool {
        !matches!(
            self,
            Endpoint::Ping
                | Endpoint::Info
                | Endpoint::Debug
                | Endpoint::Topics
                | Endpoint::Nodes
                | Endpoint::Metrics
        )
    }
}

/// The Go runtime profiling routes (`/debug/pprof/*`) are not served (there is no Go runtime
/// to profile): they answer 404 like any unknown path.
const ROUTES: &[(Method, &str, Endpoint)] = &[
    (Method::GET, "/ping", Endpoint::Ping),
    (Method::GET, "/info", Endpoint::Info),
    (Method::GET, "/debug", Endpoint::Debug),
    (Method::GET, "/lookup", Endpoint::Lookup),
    (Method::GET, "/topics", Endpoint::Topics),
    (Method::GET, "/channels", Endpoint::Channels),
    (Method::GET, "/nodes", Endpoint::Nodes),
    (Method::POST, "/topic/create", Endpoint::TopicCreate),
    (Method::POST, "/topic/delete", Endpoint::TopicDelete),
    (Method::POST, "/channel/create", Endpoint::ChannelCreate),
    (Method::POST, "/channel/delete", Endpoint::ChannelDelete),
    (Method::POST, "/topic/tombstone", Endpoint::TopicTombstone),
    (Method::GET, "/metrics", Endpoint::Metrics),
];

/// The route table as a router (built once).
fn routes() -> &'static Routes<Endpoint> {
    static ROUTER: std::sync::OnceLock<Routes<Endpoint>> = std::sync::OnceLock::new();
    ROUTER.get_or_init(|| Routes::new(ROUTES.iter().cloned()))
}

// ---- dispatch -------------------------------------------------------------------------------

async fn dispatch(
    State(lookupd): State<Arc<Nsqlookupd>>,
    ConnectInfo(remote): ConnectInfo<SocketAddr>,
    req: Request,
) -> Response {
    let start = Instant::now();
    let method = req.method().clone();
    let uri = req.uri().clone();
    let resp = route(&lookupd, req).await;
    tracing::info!(
        "{} {} {} ({}) {}",
        resp.status().as_u16(),
        method,
        uri.path_and_query().map_or("/", |p| p.as_str()),
        remote,
        go_duration(start.elapsed())
    );
    resp
}

async fn route(lookupd: &Nsqlookupd, req: Request) -> Response {
    match routes().route(req.method(), req.uri().path()) {
        Route::Found { endpoint, .. } => endpoint_response(lookupd, endpoint, req).await,
        other => other.fallback(req.method(), req.uri().query()).into(),
    }
}

/// Runs one endpoint: parameters first (as `NewReqParams`), then the handler, whose panic
/// becomes the reference's `500 INTERNAL_ERROR`.
async fn endpoint_response(lookupd: &Nsqlookupd, ep: Endpoint, req: Request) -> Response {
    let params = if ep.takes_params() {
        let Ok(q) = Query::parse(req.uri().query().unwrap_or("")) else {
            return v1_error(StatusCode::BAD_REQUEST, "INVALID_REQUEST");
        };
        if drain(req.into_body()).await.is_err() {
            return v1_error(StatusCode::BAD_REQUEST, "INVALID_REQUEST");
        }
        q
    } else {
        Query::default()
    };
    match std::panic::catch_unwind(AssertUnwindSafe(|| handle(lookupd, ep, &params))) {
        Ok(r) => r,
        Err(_) => {
            tracing::error!("ERROR: panic in HTTP handler");
            v1_error(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL_ERROR")
        }
    }
}

/// Reads and discards a request body.
async fn drain(mut body: Body) -> Result<(), axum::Error> {
    while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
        frame?;
    }
    Ok(())
}

// ---- endpoints ------------------------------------------------------------------------------

fn handle(lookupd: &Nsqlookupd, ep: Endpoint, q: &Query) -> Response {
    let db = &lookupd.db;
    let result: ApiResult = match ep {
        Endpoint::Ping => {
            return plain(StatusCode::OK, "OK");
        }
        Endpoint::Info => {
            #[derive(Serialize)]
            struct Info {
                version: &'static str,
            }
            v1_json(&Info {
                version: crate::options::VERSION,
            })
        }
        Endpoint::Debug => v1_json(&db.debug()),
        Endpoint::Metrics => return crate::metrics::response(lookupd),
        Endpoint::Topics => {
            let mut m = BTreeMap::new();
            m.insert("topics", db.topics());
            v1_json(&m)
        }
        Endpoint::Channels => (|| {
            let topic = q.get("topic").ok_or(ApiError::MISSING_ARG_TOPIC)?;
            let mut m = BTreeMap::new();
            m.insert("channels", db.channels(topic));
            v1_json(&m)
        })(),
        Endpoint::Lookup => (|| {
            let topic = q.get("topic").ok_or(ApiError::MISSING_ARG_TOPIC)?;
            let (channels, producers) = db
                .lookup(topic, now_nanos(), lookupd.opts.liveness())
                .ok_or(ApiError::TOPIC_NOT_FOUND)?;
            #[derive(Serialize)]
            struct Lookup {
                channels: Vec<String>,
                producers: Vec<ProducerView>,
            }
            v1_json(&Lookup {
                channels,
                producers,
            })
        })(),
        Endpoint::Nodes => {
            #[derive(Serialize)]
            struct Nodes {
                producers: Vec<NodeView>,
            }
            v1_json(&Nodes {
                producers: db.nodes(now_nanos(), lookupd.opts.liveness()),
            })
        }
        Endpoint::TopicCreate => (|| {
            let topic = q.get("topic").ok_or(ApiError::MISSING_ARG_TOPIC)?;
            if !is_valid_topic_name(topic) {
                return Err(ApiError::INVALID_ARG_TOPIC);
            }
            tracing::info!("DB: adding topic({topic})");
            db.create_topic(topic);
            Ok(V1Body::Empty)
        })(),
        Endpoint::TopicDelete => (|| {
            let topic = q.get("topic").ok_or(ApiError::MISSING_ARG_TOPIC)?;
            tracing::info!("DB: removing topic({topic})");
            db.delete_topic(topic);
            Ok(V1Body::Empty)
        })(),
        Endpoint::ChannelCreate => (|| {
            let (topic, channel) = topic_channel_args(q)?;
            tracing::info!("DB: adding channel({channel}) in topic({topic})");
            db.create_channel(topic, channel);
            Ok(V1Body::Empty)
        })(),
        Endpoint::ChannelDelete => (|| {
            let (topic, channel) = topic_channel_args(q)?;
            if !db.delete_channel(topic, channel) {
                return Err(ApiError::CHANNEL_NOT_FOUND);
            }
            tracing::info!("DB: removing channel({channel}) from topic({topic})");
            Ok(V1Body::Empty)
        })(),
        Endpoint::TopicTombstone => (|| {
            let topic = q.get("topic").ok_or(ApiError::MISSING_ARG_TOPIC)?;
            let node = q.get("node").ok_or(ApiError::MISSING_ARG_NODE)?;
            tracing::info!("DB: setting tombstone for producer@{node} of topic({topic})");
            db.tombstone(topic, node, now_nanos());
            Ok(V1Body::Empty)
        })(),
    };
    v1(result)
}

// ---- response styles ------------------------------------------------------------------------

/// Go's `encoding/json` bytes of `v` (also used for the TCP IDENTIFY reply).
pub(crate) fn go_json<T: Serialize + ?Sized>(v: &T) -> Vec<u8> {
    json::to_vec(v)
}

/// Go's `time.Duration.String` for the request log (`1.5ms`, `42.1µs`, `2s`).
fn go_duration(d: std::time::Duration) -> String {
    nsq_go::duration::format(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nsqlookupd_routes() {
        let r = routes();
        assert_eq!(
            r.lookup(&Method::GET, "/lookup"),
            Some((Endpoint::Lookup, vec![]))
        );
        assert_eq!(r.lookup(&Method::POST, "/lookup"), None);
        assert_eq!(
            r.fixed_path(&Method::GET, "/Topics/"),
            Some("/topics".into())
        );
        assert_eq!(
            r.allowed("/topic/create", None).as_deref(),
            Some("OPTIONS, POST")
        );
    }

    #[test]
    fn durations() {
        use std::time::Duration;
        assert_eq!(go_duration(Duration::from_nanos(500)), "500ns");
        assert_eq!(go_duration(Duration::from_nanos(42_100)), "42.1µs");
        assert_eq!(go_duration(Duration::from_micros(1500)), "1.5ms");
        assert_eq!(go_duration(Duration::from_secs(2)), "2s");
    }
}
