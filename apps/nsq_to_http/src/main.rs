//! `nsq_to_http`: consumes one topic/channel and sends every message as an HTTP request
//! (nsq's apps/nsq_to_http/nsq_to_http.go and http.go). `--post` URLs get the body as a POST,
//! `--get` URL templates get it query-escaped in place of their `%s`; `--mode` picks one
//! destination per message (`hostpool`, the default, `epsilon-greedy`, `round-robin`) or,
//! for any other value, sends to all of them in order. A request that fails (transport
//! error, or not 2xx for POST / not 200 for GET) requeues the message with go-nsq's backoff;
//! `-n` handlers run at once. SIGINT/SIGTERM stop the consumer gracefully and exit 0.
//!
//! The request side lives in `nsq_utils::nsq_to_http`; this file holds the flags, their
//! validation (in the reference's order) and the wiring.

use std::sync::Arc;
use std::time::Duration;

use nsq_client::{Consumer, Message};
use nsq_go::duration::SignedDuration;
use nsq_go::flag::{FlagSet, Value};
use nsq_utils::consumer_flags::{ConsumerFlags, USAGE};
use nsq_utils::fatal;
use nsq_utils::nsq_to_http::forward::{
    parse_headers, valid_get_template, Forwarder, Method, Settings,
};

/// Go's `flag.Float64` (the `--sample` flag); nsq-go's flag set has no float slot of its own.
#[derive(Debug, Clone, Copy)]
struct Float(f64);

impl Value for Float {
    fn set(&mut self, text: &str) -> Result<(), nsq_go::flag::ValueError> {
        self.0 = nsq_go::strconv::parse_float(text).ok_or("parse error")?;
        Ok(())
    }

    fn usage_default(&self) -> Option<String> {
        (self.0 != 0.0).then(|| nsq_go::strconv::format_float(self.0))
    }

    fn to_json(&self) -> serde_json::Value {
        serde_json::Value::from(self.0)
    }

    fn type_name(&self) -> &'static str {
        "float"
    }
}

#[derive(Debug, Clone)]
struct Options {
    topic: String,
    consumer: ConsumerFlags,
    publishers: i64,
    mode: String,
    sample: Float,
    /// Signed, as Go's `flag.Duration` (nsq_to_http checks neither).
    connect_timeout: SignedDuration,
    request_timeout: SignedDuration,
    status_every: i64,
    content_type: String,
    get: Vec<String>,
    post: Vec<String>,
    headers: Vec<String>,
}

/// The `--content-type` default; any other value needs `--post`.
const DEFAULT_CONTENT_TYPE: &str = "application/octet-stream";

impl Default for Options {
    fn default() -> Self {
        Options {
            topic: String::new(),
            consumer: ConsumerFlags::new("nsq_to_http"),
            publishers: 100,
            mode: "hostpool".to_string(),
            sample: Float(1.0),
            connect_timeout: SignedDuration::from_std(Duration::from_secs(2)),
            request_timeout: SignedDuration::from_std(Duration::from_secs(20)),
            status_every: 250,
            content_type: DEFAULT_CONTENT_TYPE.to_string(),
            get: Vec::new(),
            post: Vec::new(),
            headers: Vec::new(),
        }
    }
}

/// The flags of nsq_to_http.go (plus the built-in `-version`). The deprecated `--round-robin`,
/// `--http-timeout`, `--http-timeout-ms`, `--max-backoff-duration`, `--throttle-fraction` and
/// `--reader-opt` were removed in 1.0.0-compat (nsq's ChangeLog.md, #367), so v1.3 rejects
/// them as undefined flags, and so does this.
static FLAGS: FlagSet<Options> = FlagSet {
    program: "nsq_to_http",
    flags: nsq_utils::consumer_flags![Options; consumer, USAGE;
        "topic" => topic: Str, None, "nsq topic";
        "n" => publishers: Int, None, "number of concurrent publishers";
        "mode" => mode: Str, None,
            "the upstream request mode options: round-robin, hostpool (default), epsilon-greedy";
        "sample" => sample: Custom, None, "% of messages to publish (float b/w 0 -> 1)";
        "http-client-connect-timeout" => connect_timeout: Custom, None, "timeout for HTTP connect";
        "http-client-request-timeout" => request_timeout: Custom, None, "timeout for HTTP request";
        "status-every" => status_every: Int, None,
            "the # of requests between logging status (per handler), 0 disables";
        "content-type" => content_type: Str, None, "the Content-Type used for POST requests";
        "get" => get: StrList, None,
            "HTTP address to make a GET request to. '%s' will be printf replaced with data (may be given multiple times)";
        "post" => post: StrList, None,
            "HTTP address to make a POST request to.  data will be in the body (may be given multiple times)";
        "header" => headers: StrList, None,
            "Custom header for HTTP requests (may be given multiple times)";
    ],
    config_checks: &[],
};

/// The checks of nsq_to_http.go's `main`, in its order; the first failure is fatal.
fn validate(o: &Options) -> Result<Vec<(String, String)>, String> {
    let headers = parse_headers(&o.headers).map_err(|e| e.to_string())?;
    if o.topic.is_empty() || o.consumer.channel.is_empty() {
        return Err("--topic and --channel are required".into());
    }
    if o.content_type != DEFAULT_CONTENT_TYPE {
        if o.post.is_empty() {
            return Err("--content-type only used with --post".into());
        }
        if o.content_type.is_empty() {
            return Err("--content-type requires a value when used".into());
        }
    }
    o.consumer.check_addresses().map_err(|e| e.to_string())?;
    if o.get.is_empty() && o.post.is_empty() {
        return Err("--get or --post required".into());
    }
    if !o.get.is_empty() && !o.post.is_empty() {
        return Err("use --get or --post not both".into());
    }
    if !o.get.iter().all(|g| valid_get_template(g)) {
        return Err("invalid GET address - must be a printf string".into());
    }
    // NaN passes the reference's `> 1.0 || < 0.0` test too.
    if o.sample.0 > 1.0 || o.sample.0 < 0.0 {
        return Err("ERROR: --sample must be between 0.0 and 1.0".into());
    }
    Ok(headers)
}

fn main() {
    let opts =
        nsq_utils::parse_or_exit(&FLAGS, Options::default(), std::env::args().collect(), true);
    let headers = validate(&opts).unwrap_or_else(|m| fatal(&m));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| fatal(&e.to_string()));
    runtime.block_on(run(opts, headers));
}

async fn run(opts: Options, headers: Vec<(String, String)>) {
    let sigterm = nsq_utils::termination();
    let (method, addresses) = if opts.post.is_empty() {
        (Method::Get, opts.get.clone())
    } else {
        (Method::Post, opts.post.clone())
    };
    // nsq_to_http.go, `main`: `nsq.NewConsumer` fails on config.Validate(); `log.Fatal(err)`.
    let cfg = opts
        .consumer
        .config("nsq_to_http")
        .unwrap_or_else(|e| fatal(&e.to_string()));
    let consumer = Consumer::new(opts.topic.clone(), opts.consumer.channel.clone(), cfg)
        .unwrap_or_else(|e| fatal(&e.to_string()));

    let forwarder = Arc::new(Forwarder::new(Settings {
        method,
        addresses,
        mode: opts.mode.clone(),
        sample: opts.sample.0,
        status_every: opts.status_every,
        content_type: opts.content_type.clone(),
        headers,
        // internal/http_api, `NewDeadlineTransport`: a negative dial timeout is a deadline
        // already passed (every dial fails with `i/o timeout`); a response-header timeout of
        // 0 or less is none.
        connect_timeout: if opts.connect_timeout.0 < 0 {
            Duration::from_nanos(1)
        } else {
            opts.connect_timeout.to_std()
        },
        request_timeout: opts.request_timeout.to_std(),
    }));

    // `AddConcurrentHandlers(handler, n)` starts no handler for n < 1, and go-nsq's
    // `ConnectToNSQD` / `ConnectToNSQLookupd` then fail with "no handlers".
    let concurrency = usize::try_from(opts.publishers)
        .ok()
        .filter(|&n| n > 0)
        .unwrap_or_else(|| fatal("no handlers"));

    if let Err(e) = opts.consumer.connect(&consumer).await {
        fatal(&e.to_string());
    }

    let stop = consumer.stop_handle();
    tokio::spawn(async move {
        sigterm.await;
        stop.stop().await;
    });
    // `AddConcurrentHandlers(handler, n)`: Ok → FIN, Err → REQ with backoff.
    let handler = move |m: &Message| {
        let (f, body) = (forwarder.clone(), m.body().clone());
        async move { f.forward(&body).await }
    };
    consumer.run(handler, concurrency).await;
}
