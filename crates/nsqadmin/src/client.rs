//! nsqadmin's upstream client: the shared `nsq_http::client::HttpClient` (timeouts, HTTPS with
//! `--http-client-tls-*`, Go error texts, the `403` → HTTPS retry), counting every request to
//! nsqlookupd, nsqd, Graphite and the notification endpoint, and every failure, for
//! `/metrics` ([`crate::metrics`]).

use nsq_http::client::{self, HttpError, Response};

use crate::metrics::{self, Failure};

/// A counting client; cheap to clone.
#[derive(Debug, Clone)]
pub struct HttpClient {
    inner: client::HttpClient,
}

impl HttpClient {
    pub fn new(inner: client::HttpClient) -> HttpClient {
        HttpClient { inner }
    }

    /// One request (any status is an answer).
    pub async fn request(
        &self,
        method: &str,
        url: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<Response, HttpError> {
        metrics::request_sent(url);
        let r = self.inner.request(method, url, headers, body).await;
        count(url, &r);
        r
    }

    /// `GETV1`: the body of a 200 answer.
    pub async fn get_v1(&self, url: &str) -> Result<Vec<u8>, HttpError> {
        metrics::request_sent(url);
        let r = self.inner.get_v1(url).await;
        count(url, &r);
        r
    }

    /// `POSTV1`: success is a 200.
    pub async fn post_v1(&self, url: &str) -> Result<(), HttpError> {
        metrics::request_sent(url);
        let r = self.inner.post_v1(url).await;
        count(url, &r);
        r
    }
}

fn count<T>(url: &str, r: &Result<T, HttpError>) {
    match r {
        Ok(_) => {}
        Err(HttpError::Status { .. }) => metrics::request_failed(url, Failure::Status),
        Err(_) => metrics::request_failed(url, Failure::Transport),
    }
}

/// The `host:port` an URL points at (the URL itself when it does not parse), the upstream
/// label of `/metrics`.
pub(crate) fn upstream(url: &str) -> String {
    match client::parse_url(url) {
        Ok(u) => format!(
            "{}:{}",
            u.host_str().unwrap_or_default(),
            u.port_or_known_default().unwrap_or(80)
        ),
        Err(_) => url.to_string(),
    }
}
