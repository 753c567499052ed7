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
        V1Body::Text(b) => {
            let empty = b.is_empty();
            let mut r = raw(StatusCode::OK, b);
            if !empty {
                set(&mut r, header::CONTENT_TYPE, CT_TEXT);
            }
            r
        }
        V1Body::Json(b) => {
            let mut r = raw(StatusCode::OK, b);
            set(&mut r, header::CONTENT_TYPE, CT_JSON);
            r
        }
    };
    set_nsq(&mut r);
    r
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
