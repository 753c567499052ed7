//! Cluster data acquisition (nsq's internal/clusterinfo/data.go, `ClusterInfo`): the primitive fetches from nsqlookupd and nsqd,
//! producers (`GetLookupdProducers`), the stats fan-out (`GetNSQDStats`), and the mutations (`CreateTopicChannel`, `DeleteTopic`, …), with the reference's
//! error aggregation: a GET fan-out fails only when every upstream failed (or there were none);
//! otherwise failures become a *partial error*; POST fan-outs only ever produce partial errors.
//!
//! Every function takes a `warn` list: each step that had partial failures pushes one entry
//! (its errors joined by `\n`); API handlers join the entries with `"; "`.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tokio::task::JoinSet;

use crate::client::HttpClient;
use crate::stats::{ClusterStats, RawStats};
use nsq_go::url::query_escape;
use nsq_http::client::HttpError;

mod mutations;
mod settings;

pub use settings::{NodeAnswer, NodeRef};

/// Which kind of upstream a fan-out talked to (for `failed to query any <kind>`).
#[derive(Debug, Clone, Copy)]
enum Kind {
    Lookupd,
    Nsqd,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Lookupd => "nsqlookupd",
            Kind::Nsqd => "nsqd",
        }
    }
}

/// A topic in a producer's list.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ProducerTopic {
    pub topic: String,
    pub tombstoned: bool,
}

/// An nsqd as nsqadmin knows it (`/api/nodes` entries).
#[derive(Debug, Clone, Serialize)]
pub struct Producer {
    pub remote_addresses: Option<Vec<String>>,
    pub remote_address: String,
    pub hostname: String,
    pub broadcast_address: String,
    pub tcp_port: i64,
    pub http_port: i64,
    pub version: String,
    pub topics: Option<Vec<ProducerTopic>>,
    pub out_of_date: bool,
}

impl Producer {
    /// `broadcast_address:http_port`, IPv6 bracketed.
    pub fn http_address(&self) -> String {
        join_host_port(&self.broadcast_address, self.http_port)
    }

    /// `broadcast_address:tcp_port`, IPv6 bracketed.
    pub fn tcp_address(&self) -> String {
        join_host_port(&self.broadcast_address, self.tcp_port)
    }
}

/// Go's `net.JoinHostPort`.
pub fn join_host_port(host: &str, port: i64) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// A producer as nsqlookupd reports it (`/lookup` and `/nodes`).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct LookupdProducer {
    remote_address: String,
    hostname: String,
    broadcast_address: String,
    tcp_port: i64,
    http_port: i64,
    version: String,
    topics: Vec<String>,
    tombstones: Vec<bool>,
}

impl LookupdProducer {
    fn into_producer(self) -> Producer {
        let mut topics: Vec<ProducerTopic> = self
            .topics
            .iter()
            .enumerate()
            .map(|(i, t)| ProducerTopic {
                topic: t.clone(),
                tombstoned: self.tombstones.get(i).copied().unwrap_or(false),
            })
            .collect();
        topics.sort_by(|a, b| a.topic.cmp(&b.topic));
        Producer {
            remote_addresses: None,
            remote_address: self.remote_address,
            hostname: self.hostname,
            broadcast_address: self.broadcast_address,
            tcp_port: self.tcp_port,
            http_port: self.http_port,
            version: self.version,
            topics: (!topics.is_empty()).then_some(topics),
            out_of_date: false,
        }
    }
}

/// nsqd's `/info`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct NsqdInfo {
    version: String,
    broadcast_address: Option<String>,
    hostname: Option<String>,
    http_port: i64,
    tcp_port: i64,
}

/// `major.minor.patch` (pre-release and build suffixes ignored); unparsable → 0.0.0.
pub fn semver(v: &str) -> (u64, u64, u64) {
    let core = v
        .trim_start_matches('v')
        .split(['-', '+'])
        .next()
        .unwrap_or("");
    let mut it = core.split('.').map(|p| p.parse::<u64>());
    match (it.next(), it.next(), it.next(), it.next()) {
        (Some(Ok(a)), Some(Ok(b)), Some(Ok(c)), None) => (a, b, c),
        _ => (0, 0, 0),
    }
}

fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// The upstream view: which lookupds/nsqds to ask and how.
#[derive(Debug, Clone)]
pub struct ClusterInfo {
    pub client: HttpClient,
    pub lookupds: Vec<String>,
    pub nsqds: Vec<String>,
}

/// Runs `f` for every item concurrently; results in input order.
pub(crate) async fn fan_out<I, T, F, Fut>(items: Vec<I>, f: F) -> Vec<T>
where
    I: Send + 'static,
    T: Send + 'static,
    F: Fn(I) -> Fut,
    Fut: std::future::Future<Output = T> + Send + 'static,
{
    let mut set = JoinSet::new();
    for (i, item) in items.into_iter().enumerate() {
        let fut = f(item);
        set.spawn(async move { (i, fut.await) });
    }
    let mut out = Vec::new();
    while let Some(r) = set.join_next().await {
        if let Ok(v) = r {
            out.push(v);
        }
    }
    out.sort_by_key(|(i, _)| *i);
    out.into_iter().map(|(_, v)| v).collect()
}

/// Why a cluster query failed, in the reference's words (nsqadmin's internal/clusterinfo).
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The request failed or was refused (Go's `http_api` texts).
    #[error(transparent)]
    Http(#[from] HttpError),
    #[error("failed to decode {url} - {source}")]
    Decode {
        url: String,
        source: serde_json::Error,
    },
    /// Not one upstream of a kind answered: `failed to query any nsqd: <errors, a line each>`.
    #[error("failed to query any {kind}: {}", lines(.errors))]
    NoneAnswered {
        kind: &'static str,
        errors: Vec<ClusterError>,
    },
}

/// `topic=<t>[&channel=<c>]`, escaped.
fn topic_query(topic: &str, channel: Option<&str>) -> String {
    let mut qs = format!("topic={}", query_escape(topic));
    if let Some(c) = channel {
        qs.push_str(&format!("&channel={}", query_escape(c)));
    }
    qs
}

/// Errors one a line, as the reference joins them.
fn lines(errs: &[ClusterError]) -> String {
    errs.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Applies the GET fan-out rule to per-upstream results.
fn gather<T>(
    kind: Kind,
    results: Vec<Result<T, ClusterError>>,
    warn: &mut Vec<String>,
) -> Result<Vec<T>, ClusterError> {
    let total = results.len();
    let mut ok = Vec::new();
    let mut errs = Vec::new();
    for r in results {
        match r {
            Ok(v) => ok.push(v),
            Err(e) => errs.push(e),
        }
    }
    if errs.len() == total {
        return Err(ClusterError::NoneAnswered {
            kind: kind.name(),
            errors: errs,
        });
    }
    if !errs.is_empty() {
        warn.push(lines(&errs));
    }
    Ok(ok)
}

/// `GET url` (a V1 answer, `GETV1`) decoded as `T`.
pub(crate) async fn get_json<T: for<'de> Deserialize<'de>>(
    c: HttpClient,
    url: String,
) -> Result<T, ClusterError> {
    let body = c.get_v1(&url).await?;
    serde_json::from_slice(&body).map_err(|source| ClusterError::Decode { url, source })
}

impl ClusterInfo {
    /// L-mode when lookupds are configured (they win when both are set; nsqadmin/http.go).
    pub fn lookupd_mode(&self) -> bool {
        !self.lookupds.is_empty()
    }

    /// `GET <path>` of every upstream of `kind` (concurrently), gathered by the fan-out rule,
    /// and the names `names` takes from each answer as one sorted list without repeats.
    async fn union_of<R>(
        &self,
        kind: Kind,
        path: String,
        names: fn(R) -> Vec<String>,
        warn: &mut Vec<String>,
    ) -> Result<Vec<String>, ClusterError>
    where
        R: for<'de> Deserialize<'de> + Send + 'static,
    {
        let addrs = match kind {
            Kind::Lookupd => self.lookupds.clone(),
            Kind::Nsqd => self.nsqds.clone(),
        };
        let c = self.client.clone();
        let rs = fan_out(addrs, move |a| {
            get_json::<R>(c.clone(), format!("http://{a}{path}"))
        })
        .await;
        let mut all: Vec<String> = gather(kind, rs, warn)?
            .into_iter()
            .flat_map(names)
            .collect();
        all.sort();
        all.dedup();
        Ok(all)
    }

    // ---- lookupd fetches ----

    pub async fn lookupd_topics(
        &self,
        warn: &mut Vec<String>,
    ) -> Result<Vec<String>, ClusterError> {
        #[derive(Deserialize)]
        struct R {
            #[serde(default)]
            topics: Vec<String>,
        }
        self.union_of(Kind::Lookupd, "/topics".into(), |r: R| r.topics, warn)
            .await
    }

    pub async fn lookupd_topic_channels(
        &self,
        topic: &str,
        warn: &mut Vec<String>,
    ) -> Result<Vec<String>, ClusterError> {
        #[derive(Deserialize)]
        struct R {
            #[serde(default)]
            channels: Vec<String>,
        }
        let path = format!("/channels?topic={}", query_escape(topic));
        self.union_of(Kind::Lookupd, path, |r: R| r.channels, warn)
            .await
    }

    pub async fn lookupd_producers(
        &self,
        warn: &mut Vec<String>,
    ) -> Result<Vec<Producer>, ClusterError> {
        #[derive(Deserialize)]
        struct R {
            #[serde(default)]
            producers: Vec<LookupdProducer>,
        }
        let c = self.client.clone();
        let rs = fan_out(self.lookupds.clone(), move |a| {
            let c = c.clone();
            async move {
                get_json::<R>(c, format!("http://{a}/nodes"))
                    .await
                    .map(|r| (a, r))
            }
        })
        .await;
        let mut producers: Vec<Producer> = Vec::new();
        for (addr, r) in gather(Kind::Lookupd, rs, warn)? {
            for lp in r.producers {
                let remote = if lp.remote_address.is_empty() {
                    "N/A".to_string()
                } else {
                    lp.remote_address.clone()
                };
                let p = lp.into_producer();
                let key = p.tcp_address();
                let idx = match producers.iter().position(|x| x.tcp_address() == key) {
                    Some(i) => i,
                    None => {
                        producers.push(p);
                        producers.len() - 1
                    }
                };
                producers[idx]
                    .remote_addresses
                    .get_or_insert_with(Vec::new)
                    .push(format!("{addr}/{remote}"));
            }
        }
        let max = producers.iter().map(|p| semver(&p.version)).max();
        for p in &mut producers {
            p.out_of_date = max.is_some_and(|m| semver(&p.version) < m);
        }
        producers.sort_by(|a, b| a.hostname.cmp(&b.hostname));
        Ok(producers)
    }

    pub async fn lookupd_topic_producers(
        &self,
        topic: &str,
        warn: &mut Vec<String>,
    ) -> Result<Vec<Producer>, ClusterError> {
        #[derive(Deserialize)]
        struct R {
            #[serde(default)]
            producers: Vec<LookupdProducer>,
        }
        let c = self.client.clone();
        let q = query_escape(topic);
        let rs = fan_out(self.lookupds.clone(), move |a| {
            get_json::<R>(c.clone(), format!("http://{a}/lookup?topic={q}"))
        })
        .await;
        let mut producers: Vec<Producer> = Vec::new();
        for r in gather(Kind::Lookupd, rs, warn)? {
            for lp in r.producers {
                let mut p = lp.into_producer();
                p.topics = None;
                if !producers
                    .iter()
                    .any(|x| x.http_address() == p.http_address())
                {
                    producers.push(p);
                }
            }
        }
        Ok(producers)
    }

    // ---- nsqd fetches ----

    pub async fn nsqd_topics(&self, warn: &mut Vec<String>) -> Result<Vec<String>, ClusterError> {
        let names = |r: RawStats| {
            let topics = r.topics.unwrap_or_default();
            topics.into_iter().map(|t| t.topic_name).collect()
        };
        self.union_of(Kind::Nsqd, "/stats?format=json".into(), names, warn)
            .await
    }

    /// `/info` of the nsqd at `addr`, as a producer (topics filled by the caller).
    async fn nsqd_info(c: HttpClient, addr: &str) -> Result<Producer, ClusterError> {
        let info: NsqdInfo = get_json(c, format!("http://{addr}/info")).await?;
        let (host, port) = match addr.rsplit_once(':') {
            Some((h, p)) => (
                h.trim_start_matches('[').trim_end_matches(']').to_string(),
                p.parse().unwrap_or(0),
            ),
            None => (addr.to_string(), 0),
        };
        let (broadcast_address, http_port) = match info.broadcast_address {
            Some(b) if !b.is_empty() => (b, info.http_port),
            _ => (host.clone(), port),
        };
        Ok(Producer {
            remote_addresses: None,
            remote_address: String::new(),
            hostname: info.hostname.filter(|h| !h.is_empty()).unwrap_or(host),
            broadcast_address,
            tcp_port: info.tcp_port,
            http_port,
            version: info.version,
            topics: None,
            out_of_date: false,
        })
    }

    /// One nsqd as a producer: `/info` then its topic list from `/stats`.
    pub async fn nsqd_producer(c: HttpClient, addr: String) -> Result<Producer, ClusterError> {
        let mut p = Self::nsqd_info(c.clone(), &addr).await?;
        let stats: RawStats = get_json(
            c,
            format!("http://{addr}/stats?format=json&include_clients=false"),
        )
        .await?;
        let topics: Vec<ProducerTopic> = stats
            .topics
            .unwrap_or_default()
            .into_iter()
            .map(|t| ProducerTopic {
                topic: t.topic_name,
                tombstoned: false,
            })
            .collect();
        p.topics = (!topics.is_empty()).then_some(topics);
        Ok(p)
    }

    pub async fn nsqd_producers(
        &self,
        warn: &mut Vec<String>,
    ) -> Result<Vec<Producer>, ClusterError> {
        let c = self.client.clone();
        let rs = fan_out(self.nsqds.clone(), move |a| {
            Self::nsqd_producer(c.clone(), a)
        })
        .await;
        gather(Kind::Nsqd, rs, warn)
    }

    pub async fn nsqd_topic_producers(
        &self,
        topic: &str,
        warn: &mut Vec<String>,
    ) -> Result<Vec<Producer>, ClusterError> {
        let c = self.client.clone();
        let q = query_escape(topic);
        let want = topic.to_string();
        let rs = fan_out(self.nsqds.clone(), move |a| {
            let q = q.clone();
            let want = want.clone();
            let c = c.clone();
            async move {
                let stats: RawStats = get_json(
                    c.clone(),
                    format!("http://{a}/stats?format=json&topic={q}&include_clients=false"),
                )
                .await?;
                let names: Vec<String> = stats
                    .topics
                    .unwrap_or_default()
                    .into_iter()
                    .map(|t| t.topic_name)
                    .collect();
                if !names.contains(&want) {
                    return Ok(None);
                }
                let mut p = Self::nsqd_info(c, &a).await?;
                p.topics = Some(
                    names
                        .into_iter()
                        .map(|topic| ProducerTopic {
                            topic,
                            tombstoned: false,
                        })
                        .collect(),
                );
                Ok(Some(p))
            }
        })
        .await;
        Ok(gather(Kind::Nsqd, rs, warn)?
            .into_iter()
            .flatten()
            .collect())
    }

    // ---- mode-dependent ----

    pub async fn producers(&self, warn: &mut Vec<String>) -> Result<Vec<Producer>, ClusterError> {
        if self.lookupd_mode() {
            self.lookupd_producers(warn).await
        } else {
            self.nsqd_producers(warn).await
        }
    }

    pub async fn topic_producers(
        &self,
        topic: &str,
        warn: &mut Vec<String>,
    ) -> Result<Vec<Producer>, ClusterError> {
        if self.lookupd_mode() {
            self.lookupd_topic_producers(topic, warn).await
        } else {
            self.nsqd_topic_producers(topic, warn).await
        }
    }

    pub async fn topics(&self, warn: &mut Vec<String>) -> Result<Vec<String>, ClusterError> {
        if self.lookupd_mode() {
            self.lookupd_topics(warn).await
        } else {
            self.nsqd_topics(warn).await
        }
    }

    /// The stats fan-out (`GetNSQDStats`): every producer's `/stats`, folded.
    pub async fn stats(
        &self,
        producers: &[Producer],
        topic: Option<&str>,
        channel: Option<&str>,
        include_clients: bool,
        warn: &mut Vec<String>,
    ) -> Result<ClusterStats, ClusterError> {
        let c = self.client.clone();
        let mut suffix = String::new();
        if let Some(t) = topic {
            suffix.push_str(&format!("&topic={}", query_escape(t)));
            if let Some(ch) = channel {
                suffix.push_str(&format!("&channel={}", query_escape(ch)));
            }
        }
        if !include_clients {
            suffix.push_str("&include_clients=false");
        }
        let targets: Vec<(String, String)> = producers
            .iter()
            .map(|p| (p.http_address(), p.hostname.clone()))
            .collect();
        let rs = fan_out(targets, move |(addr, host)| {
            let url = format!("http://{addr}/stats?format=json{suffix}");
            let c = c.clone();
            async move { get_json::<RawStats>(c, url).await.map(|r| (addr, host, r)) }
        })
        .await;
        let now = now_secs();
        let mut out = ClusterStats::default();
        for (addr, host, raw) in gather(Kind::Nsqd, rs, warn)? {
            out.add_node(raw, &addr, &host, topic, now);
        }
        out.finish();
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
