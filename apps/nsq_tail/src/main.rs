//! `nsq_tail`: prints every message body of one or more topics to stdout (nsq's
//! apps/nsq_tail/nsq_tail.go). One consumer per `--topic` on one (by default random,
//! ephemeral) channel; each message is written as `[<topic> | ]<body>\n`; with `-n N` the
//! process exits 0 as soon as any one topic has printed N messages. SIGINT/SIGTERM stop the
//! consumers gracefully and exit 0.

use std::io::Write;

use nsq_client::{Consumer, Message};
use nsq_go::flag::FlagSet;
use nsq_utils::consumer_flags::{self, ConsumerFlags};
use nsq_utils::{fatal, log};
use tokio::sync::mpsc;

#[derive(Debug, Clone)]
struct Options {
    consumer: ConsumerFlags,
    total_messages: i64,
    print_topic: bool,
    topics: Vec<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            // Empty: a random ephemeral channel (see `random_channel`).
            consumer: ConsumerFlags::new(""),
            total_messages: 0,
            print_topic: false,
            topics: Vec::new(),
        }
    }
}

/// nsq_tail.go writes "NSQ" in capitals.
const USAGE: consumer_flags::Usage = consumer_flags::Usage {
    channel: "NSQ channel",
    ..consumer_flags::USAGE
};

/// The flags of nsq_tail.go (plus the built-in `-version`).
static FLAGS: FlagSet<Options> = FlagSet {
    program: "nsq_tail",
    flags: nsq_utils::consumer_flags![Options; consumer, USAGE;
        "n" => total_messages: Int, None, "total messages to show (will wait if starved)";
        "print-topic" => print_topic: Bool, None, "print topic name where message was received";
        "topic" => topics: StrList, None, "NSQ topic (may be given multiple times)";
    ],
    config_checks: &[],
};

/// The default channel: `tail` + `rand.Int() % 999999` zero-padded to six digits +
/// `#ephemeral` (nsq_tail.go, `main`).
fn random_channel() -> String {
    format!("tail{:06}#ephemeral", rand::random::<u64>() % 999_999)
}

fn main() {
    let mut opts =
        nsq_utils::parse_or_exit(&FLAGS, Options::default(), std::env::args().collect(), true);
    let consumer = &mut opts.consumer;
    if consumer.channel.is_empty() {
        consumer.channel = random_channel();
    }
    if let Err(e) = consumer.check_addresses() {
        fatal(&e.to_string());
    }
    if opts.topics.is_empty() {
        fatal("--topic required");
    }
    // Don't ask for more messages than we want.
    if opts.total_messages > 0 && opts.total_messages < consumer.max_in_flight {
        consumer.max_in_flight = opts.total_messages;
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
    // An invalid config is `nsq.NewConsumer`'s error (config.Validate()), which nsq_tail.go's
    // `main` meets after logging the first topic, and `log.Fatal`s.
    let cfg = opts.consumer.config("nsq_tail");

    // Every consumer task forwards (topic index, message) to the one writer below, which owns
    // stdout and the per-topic counts.
    let (tx, rx) = mpsc::channel::<(usize, Message)>(1024);
    let mut stops = Vec::new();
    let mut tasks = Vec::new();
    for (i, topic) in opts.topics.iter().enumerate() {
        log(&format!("Adding consumer for topic: {topic}"));
        let cfg = cfg.clone().unwrap_or_else(|e| fatal(&e.to_string()));
        let mut consumer = Consumer::new(topic.clone(), opts.consumer.channel.clone(), cfg)
            .unwrap_or_else(|e| fatal(&e.to_string()));
        if let Err(e) = opts.consumer.connect(&consumer).await {
            fatal(&e.to_string());
        }
        stops.push(consumer.stop_handle());
        let tx = tx.clone();
        tasks.push(tokio::spawn(async move {
            while let Some(m) = consumer.next().await {
                if tx.send((i, m)).await.is_err() {
                    break;
                }
            }
        }));
    }
    drop(tx);

    let names: Vec<Vec<u8>> = opts
        .topics
        .iter()
        .map(|t| format!("{t} | ").into_bytes())
        .collect();
    let writer = tokio::task::spawn_blocking(move || {
        write_messages(rx, names, opts.print_topic, opts.total_messages)
    });

    sigterm.await;
    for s in &stops {
        s.stop().await;
    }
    for t in tasks {
        let _ = t.await;
    }
    let _ = writer.await;
}

/// Writes each message as `[<topic> | ]<body>\n` and finishes it (the reference handler's
/// `return nil`). Output is buffered while more messages are waiting and flushed whenever the
/// queue runs dry, so a terminal sees each message at once and a pipe gets large writes.
fn write_messages(
    mut rx: mpsc::Receiver<(usize, Message)>,
    names: Vec<Vec<u8>>,
    print_topic: bool,
    total: i64,
) {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(64 * 1024, stdout.lock());
    let mut shown = vec![0i64; names.len()];
    let write_failed =
        |e: std::io::Error| -> ! { fatal(&format!("ERROR: failed to write to os.Stdout - {e}")) };
    let mut next = rx.blocking_recv();
    while let Some((i, m)) = next {
        shown[i] += 1;
        if print_topic {
            out.write_all(&names[i]).unwrap_or_else(|e| write_failed(e));
        }
        out.write_all(m.body()).unwrap_or_else(|e| write_failed(e));
        out.write_all(b"\n").unwrap_or_else(|e| write_failed(e));
        m.finish();
        if total > 0 && shown[i] >= total {
            // The reference exits from inside the handler once one topic has shown `-n`.
            out.flush().unwrap_or_else(|e| write_failed(e));
            std::process::exit(0);
        }
        next = match rx.try_recv() {
            Ok(x) => Some(x),
            Err(mpsc::error::TryRecvError::Empty) => {
                out.flush().unwrap_or_else(|e| write_failed(e));
                rx.blocking_recv()
            }
            Err(mpsc::error::TryRecvError::Disconnected) => None,
        };
    }
    out.flush().unwrap_or_else(|e| write_failed(e));
}
