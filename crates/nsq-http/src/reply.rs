//! The reference's HTTP response primitives shared by nsqd, nsqlookupd and nsqadmin: the
//! content types, the `X-NSQ-Content-Type` header, v1 error bodies (nsq's
//! internal/http_api/api_response.go, `RespondV1`) and Go's `http.Redirect`.
//!
//! Two shapes: functions that build an axum [`Response`] directly ([`raw`], [`v1_error`],
//! [`redirect`]), and [`Reply`], a response whose body is still bytes (nsqadmin compresses
//! every reply after the handler; the router's fallbacks are `Reply`s for that reason).

use axum::body::Body;
use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use nsq_go::{json, url};
use nsq_protocol::names::{is_valid_channel_name, is_valid_topic_name};

pub const CT_JSON: &str = "application/json; charset=utf-8";
pub const CT_TEXT: &str = "text/plain; charset=utf-8";
pub const CT_HTML: &str = "text/html; charset=utf-8";
pub const NSQ_CT_NAME: &str = "x-nsq-content-type";
pub const NSQ_CT: &str = "nsq; version=1.0";

/// A response with a status and a body, no headers.
pub fn raw(code: StatusCode, body: impl Into<Bytes>) -> Response {
    let mut r = Response::new(Body::from(body.into()));
    *r.status_mut() = code;
    r
}

/// Sets a header (values that are not valid header text are dropped).
pub fn set(r: &mut Response, name: header::HeaderName, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        r.headers_mut().insert(name, v);
    }
}

/// Adds `X-NSQ-Content-Type: nsq; version=1.0`.
pub fn set_nsq(r: &mut Response) {
    r.headers_mut()
        .insert(NSQ_CT_NAME, HeaderValue::from_static(NSQ_CT));
}

/// A v1 error: `{"message":"<msg>"}` with the JSON and NSQ content-type headers.
pub fn v1_error(code: StatusCode, msg: &str) -> Response {
    Reply::error(code, msg).into()
}

/// What a "v1" endpoint returns on success (http_api/api_response.go, `RespondV1` with
/// code 200).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum V1Body {
    /// No result: empty body, no Content-Type.
    Empty,
    /// A string result, sent verbatim (`text/plain` unless empty).
    Text(Bytes),
    /// A structured result, already encoded as Go's JSON.
    Json(Vec<u8>),
}

/// A v1 success (http_api/api_response.go, `RespondV1`): the body with its content type,
/// always the `X-NSQ-Content-Type` header.
pub fn v1_ok(body: V1Body) -> Response {
    let mut r = match body {
        V1Body::Empty => raw(StatusCode::OK, ""),
        V1Body::Text(b) => plain(StatusCode::OK, b),
        V1Body::Json(b) => {
            let mut r = raw(StatusCode::OK, b);
            set(&mut r, header::CONTENT_TYPE, CT_JSON);
            r
        }
    };
    set_nsq(&mut r);
    r
}

/// A "v1" error (http_api/api_response.go, `Err`): the status and the `{"message":…}` text.
/// The constants are the texts the reference's HTTP handlers use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiError(pub StatusCode, pub &'static str);

impl ApiError {
    pub const NOT_FOUND: ApiError = ApiError(StatusCode::NOT_FOUND, "NOT_FOUND");
    pub const INTERNAL_ERROR: ApiError =
        ApiError(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL_ERROR");
    pub const INVALID_REQUEST: ApiError = ApiError(StatusCode::BAD_REQUEST, "INVALID_REQUEST");
    pub const MISSING_ARG_TOPIC: ApiError = ApiError(StatusCode::BAD_REQUEST, "MISSING_ARG_TOPIC");
    pub const INVALID_TOPIC: ApiError = ApiError(StatusCode::BAD_REQUEST, "INVALID_TOPIC");
    pub const INVALID_ARG_TOPIC: ApiError = ApiError(StatusCode::BAD_REQUEST, "INVALID_ARG_TOPIC");
    pub const MISSING_ARG_CHANNEL: ApiError =
        ApiError(StatusCode::BAD_REQUEST, "MISSING_ARG_CHANNEL");
    pub const INVALID_ARG_CHANNEL: ApiError =
        ApiError(StatusCode::BAD_REQUEST, "INVALID_ARG_CHANNEL");
    pub const MISSING_ARG_NODE: ApiError = ApiError(StatusCode::BAD_REQUEST, "MISSING_ARG_NODE");
    pub const TOPIC_NOT_FOUND: ApiError = ApiError(StatusCode::NOT_FOUND, "TOPIC_NOT_FOUND");
    pub const CHANNEL_NOT_FOUND: ApiError = ApiError(StatusCode::NOT_FOUND, "CHANNEL_NOT_FOUND");
    pub const MSG_TOO_BIG: ApiError = ApiError(StatusCode::PAYLOAD_TOO_LARGE, "MSG_TOO_BIG");
    pub const BODY_TOO_BIG: ApiError = ApiError(StatusCode::PAYLOAD_TOO_LARGE, "BODY_TOO_BIG");
    pub const MSG_EMPTY: ApiError = ApiError(StatusCode::BAD_REQUEST, "MSG_EMPTY");
    pub const BAD_BODY: ApiError = ApiError(StatusCode::PAYLOAD_TOO_LARGE, "BAD_BODY");
    pub const BAD_MESSAGE: ApiError = ApiError(StatusCode::PAYLOAD_TOO_LARGE, "BAD_MESSAGE");
    pub const INVALID_DEFER: ApiError = ApiError(StatusCode::BAD_REQUEST, "INVALID_DEFER");
    pub const EXITING: ApiError = ApiError(StatusCode::SERVICE_UNAVAILABLE, "EXITING");
    /// Ours: `n` of `/channel/peek` out of range.
    pub const INVALID_N: ApiError = ApiError(StatusCode::BAD_REQUEST, "INVALID_N");
    /// Ours: `to` of `/channel/redrive` is not a valid topic name.
    pub const INVALID_TO: ApiError = ApiError(StatusCode::BAD_REQUEST, "INVALID_TO");
    /// Ours: `/channel/redrive` of a paused channel (it gives no message out).
    pub const CHANNEL_PAUSED: ApiError = ApiError(StatusCode::BAD_REQUEST, "CHANNEL_PAUSED");
    /// Ours: a publish past a queue's `max_depth` with `overflow=refuse`.
    pub const FULL: ApiError = ApiError(StatusCode::SERVICE_UNAVAILABLE, "FULL");
    pub const INVALID_OPTION: ApiError = ApiError(StatusCode::BAD_REQUEST, "INVALID_OPTION");
    pub const INVALID_VALUE: ApiError = ApiError(StatusCode::BAD_REQUEST, "INVALID_VALUE");
    pub const INVALID_VALUE_413: ApiError =
        ApiError(StatusCode::PAYLOAD_TOO_LARGE, "INVALID_VALUE");
}

/// What a v1 handler returns.
pub type ApiResult = Result<V1Body, ApiError>;

/// `RespondV1` of a handler's result.
pub fn v1(result: ApiResult) -> Response {
    match result {
        Ok(body) => v1_ok(body),
        Err(ApiError(code, msg)) => v1_error(code, msg),
    }
}

/// A v1 success whose data is `v` as Go's `encoding/json` writes it.
pub fn v1_json<T: serde::Serialize + ?Sized>(v: &T) -> ApiResult {
    Ok(V1Body::Json(json::to_vec(v)))
}

/// The plain-text style (`/ping`, nsqd's `/debug/setblockrate`): Go's sniffed `text/plain`
/// unless the body is empty.
pub fn plain(code: StatusCode, body: impl Into<Bytes>) -> Response {
    let b: Bytes = body.into();
    let empty = b.is_empty();
    let mut r = raw(code, b);
    if !empty {
        set(&mut r, header::CONTENT_TYPE, CT_TEXT);
    }
    r
}

/// `http_api.GetTopicChannelArgs`: a valid `topic` and `channel` from the query.
pub fn topic_channel_args(q: &url::Query) -> Result<(&str, &str), ApiError> {
    let topic = q.get("topic").ok_or(ApiError::MISSING_ARG_TOPIC)?;
    if !is_valid_topic_name(topic) {
        return Err(ApiError::INVALID_ARG_TOPIC);
    }
    let channel = q.get("channel").ok_or(ApiError::MISSING_ARG_CHANNEL)?;
    if !is_valid_channel_name(channel) {
        return Err(ApiError::INVALID_ARG_CHANNEL);
    }
    Ok((topic, channel))
}

/// `http.Redirect` to `path` (query kept): GET gets the small HTML body, others none.
pub fn redirect(code: StatusCode, path: &str, query: Option<&str>, is_get: bool) -> Response {
    Reply::redirect(code, path, query, is_get).into()
}

/// A response whose body is still in memory.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: StatusCode,
    /// In order; appended, not replaced, when converted.
    pub headers: Vec<(HeaderName, String)>,
    pub body: Bytes,
}

impl Reply {
    pub fn new(status: StatusCode, body: impl Into<Bytes>) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            body: body.into(),
        }
    }

    pub fn with(mut self, name: HeaderName, value: impl Into<String>) -> Reply {
        self.headers.push((name, value.into()));
        self
    }

    /// Whether a header is set.
    pub fn has(&self, name: &HeaderName) -> bool {
        self.headers.iter().any(|(k, _)| k == name)
    }

    /// V1 success: Go's compact JSON with the JSON and NSQ content types.
    pub fn json<T: serde::Serialize + ?Sized>(v: &T) -> Reply {
        Reply::new(StatusCode::OK, json::to_vec(v))
            .with(header::CONTENT_TYPE, CT_JSON)
            .with(HeaderName::from_static(NSQ_CT_NAME), NSQ_CT)
    }

    /// V1 error `{"message":…}`.
    pub fn error(status: StatusCode, msg: &str) -> Reply {
        #[derive(serde::Serialize)]
        struct Message<'a> {
            message: &'a str,
        }
        let mut r = Reply::json(&Message { message: msg });
        r.status = status;
        r
    }

    /// V1 success with a string value: raw, sniffed `text/plain` unless empty.
    pub fn v1_text(s: String) -> Reply {
        let empty = s.is_empty();
        let mut r =
            Reply::new(StatusCode::OK, s).with(HeaderName::from_static(NSQ_CT_NAME), NSQ_CT);
        if !empty {
            r = r.with(header::CONTENT_TYPE, CT_TEXT);
        }
        r
    }

    /// Go's `http.Redirect` to `path` (cleaned and escaped, query kept): GET gets the small
    /// HTML body, other methods none.
    pub fn redirect(code: StatusCode, path: &str, query: Option<&str>, is_get: bool) -> Reply {
        let mut url = url::redirect_clean(&url::escape_path(path));
        if let Some(q) = query {
            url.push('?');
            url.push_str(q);
        }
        let mut r = if is_get {
            Reply::new(
                code,
                format!(
                    "<a href=\"{}\">{}</a>.\n\n",
                    url::html_escape(&url),
                    code.canonical_reason().unwrap_or("")
                ),
            )
            .with(header::CONTENT_TYPE, CT_HTML)
        } else {
            Reply::new(code, "")
        };
        r.headers.insert(0, (header::LOCATION, url));
        r
    }
}

impl From<Reply> for Response {
    fn from(r: Reply) -> Response {
        let mut resp = raw(r.status, r.body);
        for (k, v) in r.headers {
            if let Ok(v) = HeaderValue::from_str(&v) {
                resp.headers_mut().append(k, v);
            }
        }
        resp
    }
}
