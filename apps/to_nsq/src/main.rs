//! `to_nsq`: publishes stdin to nsqd (nsq's apps/to_nsq/to_nsq.go). Stdin is split on the
//! one-byte `--delimiter`; every non-empty piece is published with `PUB` to every
//! `--nsqd-tcp-address` in turn, waiting for each answer; a publish error is fatal (exit 1).
//! `--rate` throttles with the reference's token balance. EOF or SIGINT/SIGTERM stop the
//! producers and exit 0.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nsq_client::Producer;
use nsq_go::flag::FlagSet;
use nsq_go::flags;
use nsq_utils::{fatal, log, ConfigFlag};
use tokio::io::{AsyncBufReadExt, BufReader};

#[derive(Debug, Clone)]
struct Options {
    topic: String,
    delimiter: String,
    nsqd_tcp_addresses: Vec<String>,
    producer_opt: ConfigFlag,
    rate: i64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            topic: String::new(),
            delimiter: "\n".to_string(),
            nsqd_tcp_addresses: Vec::new(),
            producer_opt: ConfigFlag::default(),
            rate: 0,
        }
    }
}

/// The flags of to_nsq.go (it has no `-version`).
static FLAGS: FlagSet<Options> = FlagSet {
    program: "to_nsq",
    flags: flags![Options;
        "topic" => topic: Str, None, "NSQ topic to publish to";
        "delimiter" => delimiter: Str, None, "character to split input from stdin";
        "nsqd-tcp-address" => nsqd_tcp_addresses: StrList, None,
            "destination nsqd TCP address (may be given multiple times)";
        "producer-opt" => producer_opt: Custom, None,
            "option to passthrough to nsq.Producer (may be given multiple times, http://godoc.org/github.com/nsqio/go-nsq#Config)";
        "rate" => rate: Int, None, "Throttle messages to n/second. 0 to disable";
    ],
    config_checks: &[],
};

fn main() {
    let opts = nsq_utils::parse_or_exit(
        &FLAGS,
        Options::default(),
        std::env::args().collect(),
        false,
    );
    if opts.topic.is_empty() {
        fatal("--topic required");
    }
    if opts.delimiter.len() != 1 {
        fatal("--delimiter must be a single byte");
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| fatal(&e.to_string()));
    runtime.block_on(run(opts));
    // A stdin read may still be parked in a blocking thread (SIGTERM before EOF); the
    // runtime's drop would wait for it, so leave at once, as the reference's main returns.
    runtime.shutdown_background();
}

async fn run(opts: Options) {
    let sigterm = nsq_utils::termination();
    let mut cfg = opts.producer_opt.0.clone();
    cfg.user_agent = nsq_utils::user_agent("to_nsq");
    cfg.logger = Some(nsq_utils::go_nsq_logger());
    // to_nsq.go keeps its producers in a map keyed by address: one per distinct address.
    let producers: Vec<Producer> = nsq_utils::dedup(&opts.nsqd_tcp_addresses)
        .into_iter()
        .map(|addr| {
            Producer::new(addr, cfg.clone())
                .unwrap_or_else(|e| fatal(&format!("failed to create nsq.Producer - {e}")))
        })
        .collect();
    if producers.is_empty() {
        fatal("--nsqd-tcp-address required");
    }

    let throttle = Throttle::start(opts.rate);
    let delim = opts.delimiter.as_bytes()[0];
    let publish = read_and_publish(&opts.topic, delim, &producers, throttle);
    tokio::pin!(sigterm);
    tokio::select! {
        () = publish => {}
        () = sigterm => {}
    }
    for p in &producers {
        p.stop();
    }
}

/// Reads stdin piece by piece until EOF and publishes each piece to every producer.
async fn read_and_publish(topic: &str, delim: u8, producers: &[Producer], throttle: Throttle) {
    let mut stdin = BufReader::with_capacity(64 * 1024, tokio::io::stdin());
    let mut line = Vec::with_capacity(1024);
    loop {
        throttle.wait().await;
        line.clear();
        let n = stdin
            .read_until(delim, &mut line)
            .await
            .unwrap_or_else(|e| fatal(&e.to_string()));
        if n == 0 {
            return; // EOF
        }
        // readAndPublish trims the delimiter. The reference also cuts the last byte of a final
        // piece that has none (a defect): only an actual delimiter is removed here.
        if line.last() == Some(&delim) {
            line.pop();
        }
        if line.is_empty() {
            continue;
        }
        for p in producers {
            if let Err(e) = p.publish(topic, &line).await {
                fatal(&e.to_string());
            }
        }
        throttle.spend();
    }
}

/// `--rate`'s token balance (to_nsq.go, `main`): starts at 1, gains one token every `1/R`
/// seconds up to `R`; before a read-and-publish with no token left the loop sleeps `1/R`
/// once; each publish spends one. A shared atomic: the ticker task adds, the loop spends.
struct Throttle {
    balance: Option<(Arc<AtomicI64>, Duration)>,
}

impl Throttle {
    fn start(rate: i64) -> Throttle {
        if rate < 1 {
            return Throttle { balance: None };
        }
        let interval = Duration::from_nanos((1_000_000_000 / rate).max(1) as u64);
        let balance = Arc::new(AtomicI64::new(1));
        log(&format!("Throttling messages rate to max:{rate}/second"));
        let b = balance.clone();
        tokio::spawn(async move {
            let start = tokio::time::Instant::now() + interval;
            let mut tick = tokio::time::interval_at(start, interval);
            loop {
                tick.tick().await;
                // Bound the credit to one second's worth.
                if b.fetch_add(1, Ordering::Relaxed) + 1 > rate {
                    b.store(rate, Ordering::Relaxed);
                }
            }
        });
        Throttle {
            balance: Some((balance, interval)),
        }
    }

    async fn wait(&self) {
        if let Some((b, interval)) = &self.balance {
            if b.load(Ordering::Relaxed) <= 0 {
                tokio::time::sleep(*interval).await;
            }
        }
    }

    fn spend(&self) {
        if let Some((b, _)) = &self.balance {
            b.fetch_sub(1, Ordering::Relaxed);
        }
    }
}
