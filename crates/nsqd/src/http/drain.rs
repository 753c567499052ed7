//! The HTTP side of drain mode (crate::drain): the 503 a draining node answers to publishes,
//! creates and `PUT /config/nsqlookupd_tcp_addresses`, and `/config/drain` and
//! `/config/shutdown`.

use axum::http::{header, Method, StatusCode};
use axum::response::Response;
use nsq_http::reply::{raw, set, set_nsq, v1_error, CT_JSON};

use crate::nsqd::Nsqd;

/// The `message` of the HTTP 503.
const REFUSED_HTTP: &str = "DRAINING";

/// The answer to a refused HTTP publish or create.
pub(super) fn refused() -> Response {
    v1_error(StatusCode::SERVICE_UNAVAILABLE, REFUSED_HTTP)
}

/// `GET /config/drain` (whether draining), `PUT /config/drain` (start; answers `true`) and
/// `PUT /config/shutdown` (answers `true`, then the daemon shuts down). The request body is
/// ignored.
pub(super) fn config(nsqd: &Nsqd, method: &Method, opt: &str) -> Response {
    if *method == Method::PUT {
        match opt {
            "drain" => {
                nsqd.start_drain();
            }
            _ => {
                tracing::info!("shutdown requested (PUT /config/shutdown)");
                nsqd.drain.request_shutdown();
            }
        }
    }
    let value = if opt == "drain" {
        nsqd.drain.is_draining()
    } else {
        true
    };
    let mut r = raw(StatusCode::OK, value.to_string());
    set(&mut r, header::CONTENT_TYPE, CT_JSON);
    set_nsq(&mut r);
    r
}
