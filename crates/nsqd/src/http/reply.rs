//! The reference's HTTP response primitives shared by nsqd, nsqlookupd and nsqadmin: the
//! content types, the `X-NSQ-Content-Type` header, v1 error bodies and Go's `http.Redirect`.

use axum::body::Body;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use bytes::Bytes;

use super::{json, query};

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
    #[derive(serde::Serialize)]
    struct Message<'a> {
        message: &'a str,
    }
    let mut r = raw(code, json::to_vec(&Message { message: msg }));
    set(&mut r, header::CONTENT_TYPE, CT_JSON);
    set_nsq(&mut r);
    r
}

/// `http.Redirect` to `path` (query kept): GET gets the small HTML body, others none.
pub fn redirect(code: StatusCode, path: &str, query: Option<&str>, is_get: bool) -> Response {
    let mut url = query::redirect_clean(&query::escape_path(path));
    if let Some(q) = query {
        url.push('?');
        url.push_str(q);
    }
    let body = if is_get {
        format!(
            "<a href=\"{}\">{}</a>.\n\n",
            query::html_escape(&url),
            code.canonical_reason().unwrap_or("")
        )
    } else {
        String::new()
    };
    let mut r = raw(code, body);
    if let Ok(v) = HeaderValue::from_str(&url) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    if is_get {
        set(&mut r, header::CONTENT_TYPE, CT_HTML);
    }
    r
}
