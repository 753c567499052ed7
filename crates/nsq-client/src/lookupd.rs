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

/// Queries one lookupd for the producers of `topic`.
pub(crate) async fn query(addr: &str, topic: &str, config: &Config) -> Result<Vec<String>, Error> {
    let url = lookup_url(addr, topic)?;
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
    let resp = req.send().await.map_err(|e| bad(e.to_string()))?;
    let status = resp.status();
    let body = resp.bytes().await.map_err(|e| bad(e.to_string()))?;
    if !status.is_success() {
        return Err(bad(format!(
            "got response {} {:?}",
            status.as_u16(),
            String::from_utf8_lossy(&body)
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
