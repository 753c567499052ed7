//! `nsq_to_file`: archives topics into files (nsq's apps/nsq_to_file: nsq_to_file.go `main`,
//! options.go, topic_discoverer.go, file_logger.go). One consumer and one file logger per
//! topic — the `--topic`s, or every topic matching `--topic-pattern` that nsqlookupd lists
//! (polled every `--topic-refresh`) — each appending message bodies plus `\n` to files named
//! by `--filename-format`, rotated by time bucket, size and age, optionally gzipped, written
//! in `--work-dir` and moved to `--output-dir` when closed.
//!
//! Unlike the reference, a message is FINed only once the bytes written for it are synced to
//! disk, and syncing overlaps with writing (see [`file_logger`]). SIGHUP closes every current
//! file; SIGINT/SIGTERM stop the consumers, sync, close the files and exit 0.

mod file_logger;
mod filename;
mod gzip_member;
mod logger;
mod syncer;

use std::collections::HashMap;
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use futures_util::FutureExt;
use nsq_client::{Consumer, StopHandle};
use nsq_go::duration::SignedDuration;
use nsq_go::flag::{FlagError, FlagSet};
use nsq_go::lg::LogLevel;
use nsq_utils::consumer_flags::{AddressError, ConsumerFlags, USAGE};
use nsq_utils::fatal;

use file_logger::{Input, Settings};
use filename::NameOptions;

#[derive(Debug, Clone)]
struct Options {
    topics: Vec<String>,
    topic_pattern: String,
    // The duration flags keep their sign, as Go's `flag.Duration` does: `parse` refuses a
    // non-positive timeout or sync interval after parsing, and a negative rotate interval or
    // topic refresh acts as 0 (nsq_to_file only acts on `> 0`).
    topic_refresh: SignedDuration,
    consumer: ConsumerFlags,
    http_connect_timeout: SignedDuration,
    http_request_timeout: SignedDuration,
    log_prefix: String,
    log_level: String,
    output_dir: String,
    work_dir: String,
    datetime_format: String,
    filename_format: String,
    host_identifier: String,
    gzip_level: i64,
    gzip: bool,
    skip_empty_files: bool,
    rotate_size: i64,
    rotate_interval: SignedDuration,
    sync_interval: SignedDuration,
}

/// options.go, `NewOptions`.
impl Default for Options {
    fn default() -> Self {
        let mut consumer = ConsumerFlags::new("nsq_to_file");
        // nsq_to_file.go, `main`: --consumer-opt is applied after parsing, and invalid
        // options are ignored.
        consumer.consumer_opt.ignore_invalid = true;
        Options {
            topics: Vec::new(),
            topic_pattern: String::new(),
            topic_refresh: SignedDuration::from_std(Duration::from_secs(60)),
            consumer,
            http_connect_timeout: SignedDuration::from_std(Duration::from_secs(2)),
            http_request_timeout: SignedDuration::from_std(Duration::from_secs(5)),
            log_prefix: "[nsq_to_file] ".to_string(),
            log_level: "info".to_string(),
            output_dir: "/tmp".to_string(),
            work_dir: String::new(),
            datetime_format: "%Y-%m-%d_%H".to_string(),
            filename_format: "<TOPIC>.<HOST><REV>.<DATETIME>.log".to_string(),
            host_identifier: String::new(),
            gzip_level: 6,
            gzip: false,
            skip_empty_files: false,
            rotate_size: 0,
            rotate_interval: SignedDuration::ZERO,
            sync_interval: SignedDuration::from_std(Duration::from_secs(30)),
        }
    }
}

/// nsq_to_file.go, `flagSet` (plus the built-in `-version`). That function names its set
/// `nsqd` (`flag.NewFlagSet("nsqd", flag.ExitOnError)`), so `-h` says `Usage of nsqd:`.
static FLAGS: FlagSet<Options> = FlagSet {
    program: "nsqd",
    flags: nsq_utils::consumer_flags![Options; consumer, USAGE;
        "log-level" => log_level: Str, None, "set log verbosity: debug, info, warn, error, or fatal";
        "log-prefix" => log_prefix: Str, None, "log message prefix";
        "output-dir" => output_dir: Str, None, "directory to write output files to";
        "work-dir" => work_dir: Str, None, "directory for in-progress files before moving to output-dir";
        "datetime-format" => datetime_format: Str, None,
            "strftime compatible format for <DATETIME> in filename format";
        "filename-format" => filename_format: Str, None,
            "output filename format (<TOPIC>, <HOST>, <PID>, <DATETIME>, <REV> are replaced. <REV> is increased when file already exists)";
        "host-identifier" => host_identifier: Str, None,
            "value to output in log filename in place of hostname. <SHORT_HOST> and <HOSTNAME> are valid replacement tokens";
        "gzip-level" => gzip_level: Int, None, "gzip compression level (1-9, 1=BestSpeed, 9=BestCompression)";
        "gzip" => gzip: Bool, None, "gzip output files.";
        "skip-empty-files" => skip_empty_files: Bool, None, "skip writing empty files";
        "topic-refresh" => topic_refresh: Custom, None, "how frequently the topic list should be refreshed";
        "topic-pattern" => topic_pattern: Str, None, "only log topics matching the following pattern";
        "rotate-size" => rotate_size: Int, None, "rotate the file when it grows bigger than `rotate-size` bytes";
        "rotate-interval" => rotate_interval: Custom, None, "rotate the file every duration";
        "sync-interval" => sync_interval: Custom, None, "sync file to disk every duration";
        "http-client-connect-timeout" => http_connect_timeout: Custom, None, "timeout for HTTP connect";
        "http-client-request-timeout" => http_request_timeout: Custom, None, "timeout for HTTP request";
        "topic" => topics: StrList, None, "nsq topic (may be given multiple times)";
    ],
    config_checks: &[],
};

/// Go's `%s` of a `[]string`: `[a b]`.
fn go_list(items: &[String]) -> String {
    format!("[{}]", items.join(" "))
}

/// Parses and validates the command line in the reference's order; exits on any error.
fn parse(args: Vec<String>) -> (Options, LogLevel) {
    let defaults = Options::default();
    let parsed = match FLAGS.parse_all(args, defaults.clone()) {
        Ok(Some(p)) => p,
        Ok(None) => {
            eprint!("{}", FLAGS.usage(&defaults));
            std::process::exit(0)
        }
        Err(e @ FlagError::Usage(_)) => {
            eprintln!("{e}");
            eprint!("{}", FLAGS.usage(&defaults));
            std::process::exit(2)
        }
        Err(e) => fatal(e.message()),
    };
    if !parsed.args.is_empty() {
        fatal(&format!("unknown arguments: {}", go_list(&parsed.args)));
    }
    let mut o = parsed.opts;
    let Ok(level) = LogLevel::parse(&o.log_level) else {
        fatal("--log-level is invalid")
    };
    if parsed.version {
        println!("nsq_to_file v{}", nsq_utils::VERSION);
        std::process::exit(0);
    }
    if o.consumer.channel.is_empty() {
        fatal("--channel is required");
    }
    if !o.http_connect_timeout.is_positive() {
        fatal("--http-client-connect-timeout should be positive");
    }
    if !o.http_request_timeout.is_positive() {
        fatal("--http-client-request-timeout should be positive");
    }
    match o.consumer.check_addresses() {
        Ok(()) => {}
        // nsq_to_file.go's text has a period at the end.
        Err(AddressError::Missing) => fatal(&format!("{}.", AddressError::Missing)),
        Err(e) => fatal(&e.to_string()),
    }
    if !(1..=9).contains(&o.gzip_level) {
        fatal(&format!(
            "invalid --gzip-level value ({}), should be 1-9",
            o.gzip_level
        ));
    }
    if o.topics.is_empty() && o.topic_pattern.is_empty() {
        fatal("--topic or --topic-pattern required");
    }
    if o.topics.is_empty() && o.consumer.lookupd_http_addresses.is_empty() {
        fatal("--lookupd-http-address must be specified when no --topic specified");
    }
    if o.work_dir.is_empty() {
        o.work_dir = o.output_dir.clone();
    }
    if !o.sync_interval.is_positive() {
        // Go's time.NewTicker panics on a non-positive interval.
        eprintln!("panic: non-positive interval for NewTicker");
        std::process::exit(2);
    }
    (o, level)
}

fn main() {
    let (opts, level) = parse(std::env::args().collect());
    logger::init(opts.log_prefix.clone(), level);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| fatal(&e.to_string()));
    runtime.block_on(run(opts));
    // Connections and timers left in the runtime are not waited for.
    runtime.shutdown_timeout(Duration::from_millis(100));
}

/// A running topic: its consumer's stop handle and its writer thread.
struct TopicLogger {
    tx: Sender<Input>,
    stop: StopHandle,
    writer: JoinHandle<()>,
}

/// topic_discoverer.go, `TopicDiscoverer`.
struct Discoverer {
    opts: Options,
    settings: Arc<Settings>,
    cfg: Result<nsq_client::Config, nsq_client::ConfigError>,
    pattern: Option<regex::Regex>,
    hostname: String,
    topics: HashMap<String, TopicLogger>,
}

impl Discoverer {
    /// `isTopicAllowed`: no pattern allows all; an invalid pattern allows none.
    fn is_topic_allowed(&self, topic: &str) -> bool {
        if self.opts.topic_pattern.is_empty() {
            return true;
        }
        self.pattern.as_ref().is_some_and(|p| p.is_match(topic))
    }

    /// `updateTopics`.
    async fn update_topics(&mut self, topics: &[String]) {
        for topic in topics {
            if self.topics.contains_key(topic) {
                continue;
            }
            if !self.is_topic_allowed(topic) {
                logf!(
                    Warn,
                    "skipping topic {topic} (doesn't match pattern {})",
                    self.opts.topic_pattern
                );
                continue;
            }
            match self.new_file_logger(topic).await {
                Ok(l) => {
                    self.topics.insert(topic.clone(), l);
                }
                Err(e) => logf!(Error, "couldn't create logger for new topic {topic}: {e}"),
            }
        }
    }

    /// `NewFileLogger` and starting its `router`.
    async fn new_file_logger(&self, topic: &str) -> Result<TopicLogger, String> {
        let o = &self.opts;
        let template = filename::compute_template(
            &NameOptions {
                filename_format: &o.filename_format,
                host_identifier: &o.host_identifier,
                hostname: &self.hostname,
                pid: std::process::id(),
                gzip: o.gzip,
                needs_rev: o.gzip
                    || o.rotate_size > 0
                    || o.rotate_interval.is_positive()
                    || o.work_dir != o.output_dir,
            },
            topic,
        )
        .map_err(|e| e.to_string())?;
        let cfg = self.cfg.clone().map_err(|e| e.to_string())?;
        let mut consumer =
            Consumer::new(topic, o.consumer.channel.clone(), cfg).map_err(|e| e.to_string())?;
        if let Err(e) = o.consumer.connect(&consumer).await {
            // The reference abandons the consumer without `Stop` (file_logger.go,
            // `NewFileLogger`), so go-nsq logs no stopping; dropping it closes what it opened.
            drop(consumer);
            return Err(e.to_string());
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let writer = file_logger::spawn(topic.to_string(), template, self.settings.clone(), rx);
        let stop = consumer.stop_handle();
        let forward = tx.clone();
        tokio::spawn(async move {
            // Messages go to the writer thread in the batches they arrive in.
            while let Some(m) = consumer.next().await {
                let mut batch = vec![m];
                while batch.len() < 1024 {
                    match consumer.next().now_or_never() {
                        Some(Some(m)) => batch.push(m),
                        _ => break,
                    }
                }
                let conns = consumer.stats().connections;
                if forward.send(Input::Msgs(batch, conns)).is_err() {
                    break;
                }
            }
            let _ = forward.send(Input::Stopped);
        });
        Ok(TopicLogger { tx, stop, writer })
    }

    /// The termination: every consumer stops (the writers sync what is still in flight so
    /// the stops finish), then every writer closes its file.
    async fn stop(self) {
        for l in self.topics.values() {
            let _ = l.tx.send(Input::Term);
        }
        let stops: Vec<_> = self
            .topics
            .values()
            .map(|l| {
                let s = l.stop.clone();
                tokio::spawn(async move { s.stop().await })
            })
            .collect();
        for s in stops {
            let _ = s.await;
        }
        for (_, l) in self.topics {
            let _ = tokio::task::spawn_blocking(move || l.writer.join()).await;
        }
    }
}

/// `clusterinfo.GetLookupdTopics`: the sorted union of every lookupd's `/topics`; any failed
/// lookupd makes it an error.
async fn lookupd_topics(
    http: &nsq_http::client::HttpClient,
    addrs: &[String],
) -> Result<Vec<String>, String> {
    let mut topics: Vec<String> = Vec::new();
    let mut errs: Vec<String> = Vec::new();
    for addr in addrs {
        let url = if addr.contains("://") {
            format!("{}/topics", addr.trim_end_matches('/'))
        } else {
            format!("http://{addr}/topics")
        };
        match http.get_v1(&url).await {
            Ok(body) => match serde_json::from_slice::<serde_json::Value>(&body) {
                Ok(v) => {
                    for t in v["topics"].as_array().into_iter().flatten() {
                        if let Some(t) = t.as_str() {
                            if !topics.iter().any(|x| x == t) {
                                topics.push(t.to_string());
                            }
                        }
                    }
                }
                Err(e) => errs.push(e.to_string()),
            },
            Err(e) => errs.push(e.to_string()),
        }
    }
    topics.sort();
    if errs.len() == addrs.len() && !addrs.is_empty() {
        return Err(format!(
            "Failed to query any nsqlookupd: {}",
            errs.join("\n")
        ));
    }
    if !errs.is_empty() {
        return Err(errs.join("\n"));
    }
    Ok(topics)
}

async fn run(opts: Options) {
    let term = nsq_utils::termination();
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .unwrap_or_else(|e| fatal(&e.to_string()));

    // An invalid config fails each topic's `NewFileLogger` (its `nsq.NewConsumer`), which
    // topic_discoverer.go's `updateTopics` logs and skips: the tool keeps running.
    let cfg = opts.consumer.config("nsq_to_file");

    let settings = Arc::new(Settings {
        channel: opts.consumer.channel.clone(),
        output_dir: opts.output_dir.clone(),
        work_dir: opts.work_dir.clone(),
        datetime_format: opts.datetime_format.clone(),
        gzip: opts
            .gzip
            .then(|| u32::try_from(opts.gzip_level).unwrap_or(6)),
        skip_empty_files: opts.skip_empty_files,
        rotate_size: opts.rotate_size,
        rotate_interval: opts.rotate_interval.to_std(),
        sync_interval: opts.sync_interval.to_std(),
        max_in_flight: cfg.as_ref().map_or(1, |c| c.max_in_flight.max(1)),
    });
    let http = nsq_http::client::HttpClient::plain(
        opts.http_connect_timeout.to_std(),
        opts.http_request_timeout.to_std(),
        &format!("nsq_to_file/{}", nsq_utils::VERSION),
    );
    let mut d = Discoverer {
        pattern: regex::Regex::new(&opts.topic_pattern).ok(),
        hostname: nsq_go::os::hostname(),
        topics: HashMap::new(),
        settings,
        cfg,
        opts,
    };

    // topic_discoverer.go, `run`: the --topic list at once; without it, lookupd's topics
    // every --topic-refresh (the first query after one period; 0 never polls).
    let initial = d.opts.topics.clone();
    d.update_topics(&initial).await;
    let refresh = d.opts.topic_refresh.to_std();
    let mut ticker = (d.opts.topics.is_empty() && !refresh.is_zero())
        .then(|| tokio::time::interval_at(tokio::time::Instant::now() + refresh, refresh));
    tokio::pin!(term);
    loop {
        tokio::select! {
            () = &mut term => break,
            _ = hup.recv() => {
                for l in d.topics.values() {
                    let _ = l.tx.send(Input::Hup);
                }
            }
            _ = async {
                match ticker.as_mut() {
                    Some(t) => { t.tick().await; }
                    None => std::future::pending::<()>().await,
                }
            } => {
                match lookupd_topics(&http, &d.opts.consumer.lookupd_http_addresses).await {
                    Ok(topics) => d.update_topics(&topics).await,
                    Err(e) => logf!(Error, "could not retrieve topic list: {e}"),
                }
            }
        }
    }
    d.stop().await;
}
