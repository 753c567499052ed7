//! One nsqlookupd query: `GET /lookup?topic=<topic>` with the V1 `Accept` header, answered
//! with the producers' `broadcast_address:tcp_port` (go-nsq consumer.go, queryLookupd and
//! buildLookupAddr; api_request.go, apiRequestNegotiateV1 — which also accepts the legacy
//! `{"status_code":…,"data":…}` envelope).

use serde::Deserialize;

use crate::config::Config;
use crate::error::Error;

#[derive(Deserialize, Default)]
#[serde(default)]
struct LookupResp {
    producers: Vec<Peer>,
    data: Option<Box<LookupResp>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Peer {
    broadcast_address: String,
    tcp_port: u16,
}

/// `http://host:port/lookup?topic=…` from a lookupd address given as `host:port` or a URL
/// (a URL without a path gets `/lookup`).
pub(crate) fn lookup_url(addr: &str, topic: &str) -> Result<reqwest::Url, Error> {
    let with_scheme = if addr.contains("://") {
        addr.to_string()
    } else {
        format!("http://{addr}")
    };
    let bad = |e: String| Error::Lookupd {
        addr: addr.to_string(),
        reason: e,
    };
    let mut url = reqwest::Url::parse(&with_scheme).map_err(|e| bad(e.to_string()))?;
    if url.path() == "/" || url.path().is_empty() {
        url.set_path("/lookup");
    }
    url.query_pairs_mut().append_pair("topic", topic);
    Ok(url)
}

/// `host:port`, with brackets for an IPv6 host (Go's `net.JoinHostPort`).
fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// `host:port` as Go's dialer names it (`dial tcp <host:port>`).
fn host_port(u: &reqwest::Url) -> String {
    let host = u.host_str().unwrap_or_default();
    format!("{host}:{}", u.port_or_known_default().unwrap_or(80))
}

/// Go's `*url.Error` text of a failed `GET` (what `http.Client.Do` returns):
/// `Get "<url>": dial tcp <host:port>: connect: connection refused`, `... i/o timeout`,
/// `... (Client.Timeout exceeded while awaiting headers)`.
fn go_request_error(url: &str, host_port: &str, e: &reqwest::Error) -> String {
    let mut io = None;
    let mut parts = Vec::new();
    let mut cur: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = cur {
        if let Some(x) = s.downcast_ref::<std::io::Error>() {
            io = Some(x);
        }
        parts.push(s.to_string());
        cur = s.source();
    }
    let io_text = |x: &std::io::Error| {
        let t = x.to_string();
        let t = t.split(" (os error").next().unwrap_or(&t).to_string();
        let mut c = t.chars();
        c.next().map_or(String::new(), |f| {
            f.to_lowercase().collect::<String>() + c.as_str()
        })
    };
    let cause = if e.is_connect() {
        match io.map(|x| (x.kind(), x)) {
            Some((std::io::ErrorKind::ConnectionRefused, _)) => {
                format!("dial tcp {host_port}: connect: connection refused")
            }
            Some((std::io::ErrorKind::TimedOut, _)) => format!("dial tcp {host_port}: i/o timeout"),
            Some((_, x)) => format!("dial tcp {host_port}: {}", io_text(x)),
            None if e.is_timeout() => format!("dial tcp {host_port}: i/o timeout"),
            None => format!("dial tcp {host_port}: {}", parts.join(": ")),
        }
    } else if e.is_timeout() {
        "context deadline exceeded (Client.Timeout exceeded while awaiting headers)".to_string()
    } else if let Some(x) = io {
        io_text(x)
    } else {
        parts.join(": ")
    };
    format!("Get {}: {cause}", nsq_go::quote::go_quote(url.as_bytes()))
}

/// Queries one lookupd for the producers of `topic`.
pub(crate) async fn query(addr: &str, topic: &str, config: &Config) -> Result<Vec<String>, Error> {
    let url = lookup_url(addr, topic)?;
    let endpoint = url.to_string();
    let hp = host_port(&url);
    let bad = |e: String| Error::Lookupd {
        addr: addr.to_string(),
        reason: e,
    };
    let client = reqwest::Client::builder()
        .timeout(config.lookupd_poll_timeout)
        .build()
        .map_err(|e| bad(e.to_string()))?;
    let mut req = client
        .get(url)
        .header("Accept", "application/vnd.nsq; version=1.0");
    if let Some(secret) = &config.auth_secret {
        if config.lookupd_authorization {
            req = req.header("Authorization", format!("Bearer {secret}"));
        }
    }
    let resp = req
        .send()
        .await
        .map_err(|e| bad(go_request_error(&endpoint, &hp, &e)))?;
    let status = resp.status();
    let body = resp
        .bytes()
        .await
        .map_err(|e| bad(go_request_error(&endpoint, &hp, &e)))?;
    // api_request.go, apiRequestNegotiateV1: any status but 200 is
    // `got response <resp.Status> <%q of the body>` (`404 Not Found "{...}"`).
    if status != reqwest::StatusCode::OK {
        return Err(bad(format!(
            "got response {} {} {}",
            status.as_u16(),
            status.canonical_reason().unwrap_or("status code"),
            nsq_go::quote::go_quote(&body)
        )));
    }
    let parsed: LookupResp = serde_json::from_slice(&body).map_err(|e| bad(e.to_string()))?;
    let producers = match parsed.data {
        Some(inner) => inner.producers,
        None => parsed.producers,
    };
    Ok(producers
        .iter()
        .map(|p| join_host_port(&p.broadcast_address, p.tcp_port))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(
            lookup_url("127.0.0.1:4161", "t").unwrap().as_str(),
            "http://127.0.0.1:4161/lookup?topic=t"
        );
        assert_eq!(
            lookup_url("https://h:1/custom", "t").unwrap().as_str(),
            "https://h:1/custom?topic=t"
        );
        assert_eq!(join_host_port("::1", 5), "[::1]:5");
    }
}
