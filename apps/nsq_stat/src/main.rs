//! `nsq_stat`: polls the nsqd `/stats` of one topic/channel across the cluster and prints one
//! line of aggregated numbers per `--interval` (nsq's apps/nsq_stat/nsq_stat.go, `statLoop`).
//! The topic's producers come from `--lookupd-http-address`es (`/lookup`) or from
//! `--nsqd-http-address`es that have the topic; the channel's numbers are summed across them
//! (as nsqadmin's clusterinfo `ChannelStats.Add`). Any error is fatal.

use std::time::Duration;

use nsq_go::duration::SignedDuration;
use nsq_go::flag::{FlagSet, Value};
use nsq_go::flags;
use nsq_utils::fatal;
use serde_json::Value as Json;

/// `--count`: unset unless given (nsq_stat.go's `numValue`).
#[derive(Debug, Clone, Default)]
struct Count(Option<i64>);

impl Value for Count {
    fn set(&mut self, text: &str) -> Result<(), nsq_go::flag::ValueError> {
        let v = text.parse::<i32>().map_err(|_| "parse error".to_string())?;
        self.0 = Some(i64::from(v));
        Ok(())
    }
    fn usage_default(&self) -> Option<String> {
        None
    }
    fn to_json(&self) -> Json {
        self.0.map(Json::from).unwrap_or(Json::Null)
    }
}

#[derive(Debug, Clone)]
struct Options {
    topic: String,
    channel: String,
    nsqd_http_addresses: Vec<String>,
    lookupd_http_addresses: Vec<String>,
    /// Signed, as Go's `flag.Duration`: a negative value is refused by the checks in `main`
    /// (`--interval should be positive`), not by the parser.
    interval: SignedDuration,
    count: Count,
    connect_timeout: SignedDuration,
    request_timeout: SignedDuration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            topic: String::new(),
            channel: String::new(),
            nsqd_http_addresses: Vec::new(),
            lookupd_http_addresses: Vec::new(),
            interval: SignedDuration::from_std(Duration::from_secs(2)),
            count: Count::default(),
            connect_timeout: SignedDuration::from_std(Duration::from_secs(2)),
            request_timeout: SignedDuration::from_std(Duration::from_secs(5)),
        }
    }
}

static FLAGS: FlagSet<Options> = FlagSet {
    program: "nsq_stat",
    flags: flags![Options;
        "topic" => topic: Str, None, "NSQ topic";
        "channel" => channel: Str, None, "NSQ channel";
        "nsqd-http-address" => nsqd_http_addresses: StrList, None,
            "nsqd HTTP address (may be given multiple times)";
        "lookupd-http-address" => lookupd_http_addresses: StrList, None,
            "lookupd HTTP address (may be given multiple times)";
        "interval" => interval: Custom, None, "duration of time between polling/printing output";
        "count" => count: Custom, None, "number of reports";
        "http-client-connect-timeout" => connect_timeout: Custom, None, "timeout for HTTP connect";
        "http-client-request-timeout" => request_timeout: Custom, None, "timeout for HTTP request";
    ],
    config_checks: &[],
};

fn main() {
    // nsq_stat.go: `flag.Bool("version", false, "print version")`.
    let o = nsq_utils::parse_or_exit_with(
        &FLAGS,
        Options::default(),
        std::env::args().collect(),
        Some("print version"),
    );
    if o.topic.is_empty() || o.channel.is_empty() {
        fatal("--topic and --channel are required");
    }
    if !o.interval.is_positive() {
        fatal("--interval should be positive");
    }
    if !o.connect_timeout.is_positive() {
        fatal("--http-client-connect-timeout should be positive");
    }
    if !o.request_timeout.is_positive() {
        fatal("--http-client-request-timeout should be positive");
    }
    if o.count.0.is_some_and(|c| c <= 0) {
        fatal("--count should be positive");
    }
    if o.nsqd_http_addresses.is_empty() && o.lookupd_http_addresses.is_empty() {
        fatal("--nsqd-http-address or --lookupd-http-address required");
    }
    if !o.nsqd_http_addresses.is_empty() && !o.lookupd_http_addresses.is_empty() {
        fatal("use --nsqd-http-address or --lookupd-http-address not both");
    }
    if o.nsqd_http_addresses.iter().any(|a| a.starts_with("http")) {
        fatal("--nsqd-http-address error - address should not contain scheme");
    }
    if o.lookupd_http_addresses
        .iter()
        .any(|a| a.starts_with("http"))
    {
        fatal("--lookupd-http-address error - address should not contain scheme");
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| fatal(&e.to_string()));
    runtime.block_on(async {
        let sigterm = terminations();
        tokio::select! {
            () = stat_loop(o) => {}
            () = sigterm => {}
        }
    });
    runtime.shutdown_background();
}

/// SIGHUP, SIGINT or SIGTERM.
fn terminations() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{signal, SignalKind};
    let hup = signal(SignalKind::hangup());
    let rest = nsq_utils::termination();
    async move {
        match hup {
            Ok(mut hup) => tokio::select! {
                _ = hup.recv() => {}
                () = rest => {}
            },
            Err(_) => rest.await,
        }
    }
}

/// The summed channel numbers of one poll.
#[derive(Debug, Clone, Copy, Default)]
struct ChannelStats {
    depth: i64,
    memory_depth: i64,
    backend_depth: i64,
    in_flight: i64,
    deferred: i64,
    requeue: i64,
    timeout: i64,
    messages: i64,
    clients: i64,
}

impl ChannelStats {
    fn add(&mut self, c: &Json) {
        let n = |k: &str| c[k].as_i64().unwrap_or(0);
        self.depth += n("depth");
        self.memory_depth += n("depth") - n("backend_depth");
        self.backend_depth += n("backend_depth");
        self.in_flight += n("in_flight_count");
        self.deferred += n("deferred_count");
        self.requeue += n("requeue_count");
        self.timeout += n("timeout_count");
        self.messages += n("message_count");
        self.clients += c["client_count"]
            .as_i64()
            .unwrap_or_else(|| c["clients"].as_array().map_or(0, |a| a.len() as i64));
    }
}

/// The shared HTTP client (nsq-http: Go's error texts, the `403` → HTTPS retry of `GETV1`).
struct Http {
    client: nsq_http::client::HttpClient,
}

/// One failed request (its HTTP or JSON error).
#[derive(Debug, thiserror::Error)]
enum QueryError {
    #[error(transparent)]
    Http(#[from] nsq_http::client::HttpError),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
}

/// Why the stats could not be read; `Display` is the reference's text (internal/clusterinfo,
/// data.go: every address failed → `failed to query any <nsqd|nsqlookupd>: <errors>`, some
/// failed → the `ErrList` alone; an `ErrList` joins its errors with newlines).
#[derive(Debug, thiserror::Error)]
enum StatError {
    /// Every one of the addresses failed (or there were none: `failed to query any nsqd: `
    /// for a topic no nsqd has).
    #[error("failed to query any {what}: {}", join(.errs))]
    All {
        what: &'static str,
        errs: Vec<QueryError>,
    },
    /// Some failed (clusterinfo's `PartialErr`, which nsq_stat treats as fatal too).
    #[error("{}", join(.0))]
    Partial(Vec<QueryError>),
}

fn join(errs: &[QueryError]) -> String {
    errs.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

/// The outcome of querying `total` addresses with these failures.
fn outcome(what: &'static str, total: usize, errs: Vec<QueryError>) -> Result<(), StatError> {
    if errs.len() == total {
        Err(StatError::All { what, errs })
    } else if !errs.is_empty() {
        Err(StatError::Partial(errs))
    } else {
        Ok(())
    }
}

impl Http {
    /// `GETV1 http://<addr><path>`, decoded.
    async fn get(&self, addr: &str, path: &str) -> Result<Json, QueryError> {
        let body = self.client.get_v1(&format!("http://{addr}{path}")).await?;
        Ok(serde_json::from_slice(&body)?)
    }
}

fn query_escape(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The HTTP addresses of the nsqd that have the topic (clusterinfo's
/// `GetLookupdTopicProducers` / `GetNSQDTopicProducers`).
async fn producers(http: &Http, o: &Options) -> Result<Vec<String>, StatError> {
    let t = query_escape(&o.topic);
    let mut out: Vec<String> = Vec::new();
    let mut errs = Vec::new();
    if !o.lookupd_http_addresses.is_empty() {
        for l in &o.lookupd_http_addresses {
            let j = match http.get(l, &format!("/lookup?topic={t}")).await {
                Ok(j) => j,
                Err(e) => {
                    errs.push(e);
                    continue;
                }
            };
            for p in j["producers"].as_array().into_iter().flatten() {
                let a = format!(
                    "{}:{}",
                    p["broadcast_address"].as_str().unwrap_or(""),
                    p["http_port"]
                );
                if !out.contains(&a) {
                    out.push(a);
                }
            }
        }
        outcome("nsqlookupd", o.lookupd_http_addresses.len(), errs)?;
    } else {
        for n in &o.nsqd_http_addresses {
            let s = match http
                .get(
                    n,
                    &format!("/stats?format=json&topic={t}&include_clients=false"),
                )
                .await
            {
                Ok(s) => s,
                Err(e) => {
                    errs.push(e);
                    continue;
                }
            };
            let has = s["topics"]
                .as_array()
                .is_some_and(|ts| ts.iter().any(|x| x["topic_name"] == o.topic.as_str()));
            if has && !out.contains(n) {
                out.push(n.clone());
            }
        }
        outcome("nsqd", o.nsqd_http_addresses.len(), errs)?;
    }
    Ok(out)
}

/// The channel summed across `producers`; `None` if no producer has it.
async fn channel_stats(
    http: &Http,
    o: &Options,
    producers: &[String],
) -> Result<Option<ChannelStats>, StatError> {
    let path = format!(
        "/stats?format=json&topic={}&channel={}&include_clients=false",
        query_escape(&o.topic),
        query_escape(&o.channel)
    );
    let mut sum = ChannelStats::default();
    let mut found = false;
    let mut errs = Vec::new();
    for p in producers {
        let s = match http.get(p, &path).await {
            Ok(s) => s,
            Err(e) => {
                errs.push(e);
                continue;
            }
        };
        for t in s["topics"].as_array().into_iter().flatten() {
            if t["topic_name"] != o.topic.as_str() {
                continue;
            }
            for c in t["channels"].as_array().into_iter().flatten() {
                if c["channel_name"] == o.channel.as_str() {
                    sum.add(c);
                    found = true;
                }
            }
        }
    }
    // data.go, `GetNSQDStats`: no producer at all is "every one failed" too.
    outcome("nsqd", producers.len(), errs)?;
    Ok(found.then_some(sum))
}

async fn stat_loop(o: Options) {
    let http = Http {
        client: nsq_http::client::HttpClient::plain(
            o.connect_timeout.to_std(),
            o.request_timeout.to_std(),
            &format!("nsq_stat/{}", nsq_utils::VERSION),
        ),
    };
    let secs = o.interval.to_std().as_secs_f64();
    let mut prev: Option<ChannelStats> = None;
    let mut i: i64 = 0;
    // `count` data lines after the baseline: iterations 0..=count.
    while o.count.0.is_none_or(|c| c >= i) {
        let producers = producers(&http, &o)
            .await
            .unwrap_or_else(|e| fatal(&format!("ERROR: failed to get topic producers - {e}")));
        let c = channel_stats(&http, &o, &producers)
            .await
            .unwrap_or_else(|e| fatal(&format!("ERROR: failed to get nsqd stats - {e}")))
            .unwrap_or_else(|| {
                fatal(&format!(
                    "ERROR: failed to find channel({}) in stats metadata for topic({})",
                    o.channel, o.topic
                ))
            });
        if i % 25 == 0 {
            println!(
                "------rate------+----------------depth----------------+--------------metadata---------------"
            );
            println!(
                "{:>7} {:>7} | {:>7} {:>7} {:>7} {:>5} {:>5} | {:>7} {:>7} {:>12} {:>7}",
                "ingress",
                "egress",
                "total",
                "mem",
                "disk",
                "inflt",
                "def",
                "req",
                "t-o",
                "msgs",
                "clients"
            );
        }
        if let Some(p) = prev {
            let ingress = (c.messages - p.messages) as f64 / secs;
            let egress = (c.messages - p.messages - (c.depth - p.depth)) as f64 / secs;
            println!(
                "{:7} {:7} | {:7} {:7} {:7} {:5} {:5} | {:7} {:7} {:12} {:7}",
                ingress as i64,
                egress as i64,
                c.depth,
                c.memory_depth,
                c.backend_depth,
                c.in_flight,
                c.deferred,
                c.requeue,
                c.timeout,
                c.messages,
                c.clients
            );
        }
        prev = Some(c);
        i += 1;
        if o.count.0.is_some_and(|n| i > n) {
            break;
        }
        tokio::time::sleep(o.interval.to_std()).await;
    }
}
