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

    /// A plain `GET` (any status is an answer).
    pub async fn get(&self, url: &str) -> Result<Response, HttpError> {
        counted(url, self.inner.request("GET", url, &[], b"")).await
    }

    /// A `POST` of a JSON body (any status is an answer).
    pub async fn post_json(&self, url: &str, body: &[u8]) -> Result<Response, HttpError> {
        let json = [("Content-Type", "application/json")];
        counted(url, self.inner.request("POST", url, &json, body)).await
    }

    /// A `POST` without a body (any status is an answer).
    pub async fn post(&self, url: &str) -> Result<Response, HttpError> {
        counted(url, self.inner.request("POST", url, &[], b"")).await
    }

    /// `GETV1`: the body of a 200 answer.
    pub async fn get_v1(&self, url: &str) -> Result<Vec<u8>, HttpError> {
        counted(url, self.inner.get_v1(url)).await
    }

    /// `POSTV1`: success is a 200.
    pub async fn post_v1(&self, url: &str) -> Result<(), HttpError> {
        counted(url, self.inner.post_v1(url)).await
    }
}

/// Counts one call to `url` and its failure, if it fails.
async fn counted<T>(
    url: &str,
    call: impl std::future::Future<Output = Result<T, HttpError>>,
) -> Result<T, HttpError> {
    metrics::request_sent(url);
    let r = call.await;
    count(url, &r);
    r
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
