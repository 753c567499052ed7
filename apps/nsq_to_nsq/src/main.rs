//! `nsq_to_nsq`: consumes topics and republishes every message to destination nsqd(s) over
//! TCP (nsq's apps/nsq_to_nsq/nsq_to_nsq.go). One consumer per `--topic` on `--channel`; the
//! destination per message is chosen by `--mode` (round-robin, hostpool, epsilon-greedy);
//! `--require-json-field` / `--require-json-value` / `--whitelist-json-field` filter and
//! reshape JSON bodies. A message is FINished only after a destination acknowledged it and
//! REQueued when publishing failed; the engine (batching into MPUB) is in
//! nsq_utils::nsq_to_nsq. SIGINT/SIGTERM stop the consumers gracefully and exit 0.

use std::sync::Arc;

use nsq_client::{Consumer, Producer};
use nsq_go::flag::FlagSet;
use nsq_protocol::names::{is_valid_channel_name, is_valid_topic_name};
use nsq_utils::consumer_flags::{self, ConsumerFlags};
use nsq_utils::nsq_to_nsq::{forward, JsonFilter, Mode, Publisher};
use nsq_utils::{fatal, ConfigFlag};

#[derive(Debug, Clone)]
struct Options {
    topics: Vec<String>,
    consumer: ConsumerFlags,
    destination_topic: String,
    status_every: i64,
    mode: String,
    destination_nsqd_tcp_addresses: Vec<String>,
    whitelist_json_fields: Vec<String>,
    require_json_field: String,
    require_json_value: String,
    producer_opt: ConfigFlag,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            topics: Vec::new(),
            consumer: ConsumerFlags::new("nsq_to_nsq"),
            destination_topic: String::new(),
            status_every: 250,
            mode: "hostpool".to_string(),
            destination_nsqd_tcp_addresses: Vec::new(),
            whitelist_json_fields: Vec::new(),
            require_json_field: String::new(),
            require_json_value: String::new(),
            producer_opt: ConfigFlag::default(),
        }
    }
}

/// nsq_to_nsq.go's `--consumer-opt` usage says "see" before the link.
const USAGE: consumer_flags::Usage = consumer_flags::Usage {
    consumer_opt: "option to passthrough to nsq.Consumer (may be given multiple times, see http://godoc.org/github.com/nsqio/go-nsq#Config)",
    ..consumer_flags::USAGE
};

/// The flags of nsq_to_nsq.go (plus the built-in `-version`).
static FLAGS: FlagSet<Options> = FlagSet {
    program: "nsq_to_nsq",
    flags: nsq_utils::consumer_flags![Options; consumer, USAGE;
        "destination-topic" => destination_topic: Str, None,
            "use this destination topic for all consumed topics (default is consumed topic name)";
        "status-every" => status_every: Int, None,
            "the # of requests between logging status (per destination), 0 disables";
        "mode" => mode: Str, None,
            "the upstream request mode options: round-robin, hostpool (default), epsilon-greedy";
        "destination-nsqd-tcp-address" => destination_nsqd_tcp_addresses: StrList, None,
            "destination nsqd TCP address (may be given multiple times)";
        "topic" => topics: StrList, None, "nsq topic (may be given multiple times)";
        "whitelist-json-field" => whitelist_json_fields: StrList, None,
            "for JSON messages: pass this field (may be given multiple times)";
        "require-json-field" => require_json_field: Str, None,
            "for JSON messages: only pass messages that contain this field";
        "require-json-value" => require_json_value: Str, None,
            "for JSON messages: only pass messages in which the required field has this value";
        "producer-opt" => producer_opt: Custom, None,
            "option to passthrough to nsq.Producer (may be given multiple times, see http://godoc.org/github.com/nsqio/go-nsq#Config)";
    ],
    config_checks: &[],
};

fn main() {
    let opts =
        nsq_utils::parse_or_exit(&FLAGS, Options::default(), std::env::args().collect(), true);
    // Validation in the reference's order (nsq_to_nsq.go, main).
    if opts.topics.is_empty() || opts.consumer.channel.is_empty() {
        fatal("--topic and --channel are required");
    }
    if opts
        .topics
        .iter()
        .any(|t| !is_valid_topic_name(t.as_bytes()))
    {
        fatal("--topic is invalid");
    }
    if !opts.destination_topic.is_empty() && !is_valid_topic_name(opts.destination_topic.as_bytes())
    {
        fatal("--destination-topic is invalid");
    }
    if !is_valid_channel_name(opts.consumer.channel.as_bytes()) {
        fatal("--channel is invalid");
    }
    if let Err(e) = opts.consumer.check_addresses() {
        fatal(&e.to_string());
    }
    if opts.destination_nsqd_tcp_addresses.is_empty() {
        fatal("--destination-nsqd-tcp-address required");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| fatal(&e.to_string()));
    runtime.block_on(run(opts));
}

async fn run(opts: Options) {
    let sigterm = nsq_utils::termination();
    // nsq_to_nsq.go, `main`: `nsq.NewConsumer` fails on config.Validate(); `log.Fatal(err)`.
    let ccfg = opts
        .consumer
        .config("nsq_to_nsq")
        .unwrap_or_else(|e| fatal(&e.to_string()));
    let mut pcfg = opts.producer_opt.0.clone();
    pcfg.user_agent = nsq_utils::user_agent("nsq_to_nsq");
    pcfg.logger = Some(nsq_utils::go_nsq_logger());

    // One producer per distinct address (the reference's map keyed by address); the address
    // list keeps its repeats for destination selection.
    let dests = &opts.destination_nsqd_tcp_addresses;
    let mut distinct: Vec<(String, Producer)> = Vec::new();
    let producers: Vec<Producer> = dests
        .iter()
        .map(|addr| {
            if let Some((_, p)) = distinct.iter().find(|(a, _)| a == addr) {
                return p.clone();
            }
            let p = Producer::new(addr.clone(), pcfg.clone())
                .unwrap_or_else(|e| fatal(&format!("failed creating producer {e}")));
            distinct.push((addr.clone(), p.clone()));
            p
        })
        .collect();
    let publisher = Arc::new(Publisher::new(
        dests,
        producers,
        Mode::parse(&opts.mode),
        opts.status_every,
    ));
    let filter = Arc::new(JsonFilter::new(
        &opts.require_json_field,
        &opts.require_json_value,
        &opts.whitelist_json_fields,
    ));

    let mut consumers = Vec::new();
    for topic in &opts.topics {
        let consumer = Consumer::new(topic.clone(), opts.consumer.channel.clone(), ccfg.clone())
            .unwrap_or_else(|e| fatal(&e.to_string()));
        let dest_topic = if opts.destination_topic.is_empty() {
            topic.clone()
        } else {
            opts.destination_topic.clone()
        };
        consumers.push((consumer, dest_topic));
    }
    // Only one of the two address lists is set (checked in `main`), so connecting each
    // consumer in turn is the reference's nsqd-then-lookupd order.
    for (consumer, _) in &consumers {
        if let Err(e) = opts.consumer.connect(consumer).await {
            fatal(&e.to_string());
        }
    }

    let mut stops = Vec::new();
    let mut tasks = Vec::new();
    for (consumer, dest_topic) in consumers {
        stops.push(consumer.stop_handle());
        tasks.push(tokio::spawn(forward(
            consumer,
            dest_topic,
            filter.clone(),
            publisher.clone(),
            ccfg.max_in_flight,
        )));
    }

    sigterm.await;
    for s in &stops {
        s.stop().await;
    }
    for t in tasks {
        let _ = t.await;
    }
    // The reference returns once its consumers have stopped, without stopping its producers
    // (nsq_to_nsq.go, `main`), so go-nsq logs no producer `stopping`; every answer was awaited
    // above and the connections close as the process exits.
    drop(publisher);
}
