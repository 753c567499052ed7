//! nsqd's command line and config file: every flag of the reference nsqd v1.3.0 with its
//! default, Go `flag`-package parsing, the TOML `--config` file with the reference's value
//! coercions and precedence (flag > config > default), startup validation, the `-h` text,
//! and the `/config/<key>` JSON view of each option.
//!
//! # Why a hand-written parser instead of clap
//!
//! Scripts written for the reference pass Go-style flags, and Go's `flag` package differs from
//! clap in ways that are visible to them: `-name` and `--name` are the same thing; bool flags
//! never consume the next argument (`-verbose foo` stops parsing at `foo`) but take `=false`;
//! any other flag consumes the next argument even when it starts with `-`; parsing stops at the
//! first non-flag argument and ignores the rest; integers take Go's base prefixes and durations
//! Go's syntax; and the error texts (`flag provided but not defined: -bogus`,
//! `invalid value "x" for flag -y: parse error`) are part of the contract. The whole algorithm
//! is ~60 lines (a transcription of Go's `FlagSet.parseOne`), so it is written out here rather
//! than bending clap into it. The flag set is one table ([`FLAGS`]) that also maps each flag to
//! its config-file key and to its field.

use std::collections::HashSet;
use std::fmt;
use std::io::Read;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use nsq_protocol::quote::go_quote;
use serde_json::Value;

/// The version nsqd reports (`-version`, `/info`, `/stats`).
pub const VERSION: &str = "1.3.0";

/// `nsqd v1.3.0 (built w/rustc1.95.0)` — the reference prints its Go version where we print the
/// compiler's (set by `build.rs`).
pub fn version_string() -> String {
    version_string_for("nsqd")
}

/// `<app> v1.3.0 (built w/rustc…)` for each of the daemons (nsqlookupd and nsqadmin too).
pub fn version_string_for(app: &str) -> String {
    let rustc = option_env!("NSQD_RUSTC_VERSION").unwrap_or("1.95.0");
    format!("{app} v{VERSION} (built w/rustc{rustc})")
}

/// The machine's host name, as Go's `os.Hostname` finds it on Linux: `/proc/sys/kernel/hostname`,
/// else `$HOSTNAME`, else `localhost`. It is the default of `--broadcast-address` and the input
/// of the default `--node-id`.
pub fn hostname() -> String {
    if let Ok(s) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
        let s = s.trim();
        if !s.is_empty() {
            return s.to_string();
        }
    }
    match std::env::var("HOSTNAME") {
        Ok(s) if !s.trim().is_empty() => s.trim().to_string(),
        _ => "localhost".to_string(),
    }
}

/// `--log-level`; the numbers are what `/config/log_level` shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogLevel {
    Debug = 1,
    Info = 2,
    Warn = 3,
    Error = 4,
    Fatal = 5,
}

impl LogLevel {
    /// Parses a level name case-insensitively (no trimming), with the reference's error text.
    pub fn parse(s: &str) -> Result<LogLevel, String> {
        match s.to_ascii_lowercase().as_str() {
            "debug" => Ok(LogLevel::Debug),
            "info" => Ok(LogLevel::Info),
            "warn" => Ok(LogLevel::Warn),
            "error" => Ok(LogLevel::Error),
            "fatal" => Ok(LogLevel::Fatal),
            _ => Err(format!(
                "invalid log level '{s}' (debug, info, warn, error, fatal)"
            )),
        }
    }

    /// 1 (debug) … 5 (fatal).
    pub fn code(self) -> i64 {
        self as i64
    }

    /// The upper-case name used in log lines (`INFO`).
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Debug => "DEBUG",
            LogLevel::Info => "INFO",
            LogLevel::Warn => "WARNING",
            LogLevel::Error => "ERROR",
            LogLevel::Fatal => "FATAL",
        }
    }
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `--tls-required`: a bool flag that also accepts `tcp-https`. The numbers are what
/// `/config/tls_required` shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TlsRequired {
    /// Plain TCP and HTTP allowed.
    #[default]
    False = 0,
    /// TCP clients must upgrade to TLS; plain HTTP is still served.
    TcpHttps = 1,
    /// TCP clients must upgrade; plain HTTP answers 403.
    True = 2,
}

impl TlsRequired {
    /// The reference's parsing: lower-case, `tcp-https`, else Go's `strconv.ParseBool`.
    pub fn parse(s: &str) -> Result<TlsRequired, String> {
        let s = s.to_ascii_lowercase();
        if s == "tcp-https" {
            return Ok(TlsRequired::TcpHttps);
        }
        match parse_go_bool(&s) {
            Some(true) => Ok(TlsRequired::True),
            Some(false) => Ok(TlsRequired::False),
            None => Err(format!(
                "strconv.ParseBool: parsing {}: invalid syntax",
                go_quote(s.as_bytes())
            )),
        }
    }

    pub fn code(self) -> i64 {
        self as i64
    }
}

/// `--tls-min-version`. The numbers are Go's `tls.VersionTLS1x` codes, shown by
/// `/config/tls_min_version`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum TlsVersion {
    #[default]
    Tls10 = 0x0301,
    Tls11 = 0x0302,
    Tls12 = 0x0303,
    Tls13 = 0x0304,
}

impl TlsVersion {
    /// `tls1.0` … `tls1.3`, case-insensitive. `Ok(None)` for `""` (keep the current value).
    pub fn parse(s: &str) -> Result<Option<TlsVersion>, String> {
        let lower = s.to_ascii_lowercase();
        match lower.as_str() {
            "" => Ok(None),
            "tls1.0" => Ok(Some(TlsVersion::Tls10)),
            "tls1.1" => Ok(Some(TlsVersion::Tls11)),
            "tls1.2" => Ok(Some(TlsVersion::Tls12)),
            "tls1.3" => Ok(Some(TlsVersion::Tls13)),
            _ => Err(format!(
                "unknown tlsVersionOption {}",
                go_quote(lower.as_bytes())
            )),
        }
    }

    /// 769 (TLS 1.0) … 772 (TLS 1.3).
    pub fn code(self) -> u16 {
        self as u16
    }

    pub fn name(self) -> &'static str {
        match self {
            TlsVersion::Tls10 => "tls1.0",
            TlsVersion::Tls11 => "tls1.1",
            TlsVersion::Tls12 => "tls1.2",
            TlsVersion::Tls13 => "tls1.3",
        }
    }
}

/// Every nsqd option, one field per flag (nsqd-flags.md §2), holding the resolved value.
///
/// Integers the reference stores as Go `int`/`int64` are `i64` here so that out-of-range values
/// survive until [`NsqdOptions::validate`] (or the consumer) can report them as the reference
/// does.
#[derive(Debug, Clone, PartialEq)]
pub struct NsqdOptions {
    // --- basic ---
    /// `-config`: path of the TOML file that was loaded (`""` = none).
    pub config: String,
    pub log_level: LogLevel,
    pub log_prefix: String,
    /// `-verbose`: deprecated, no effect.
    pub verbose: bool,
    /// `-node-id` (config `id`): node part of message IDs, must be in `[0,1024)`.
    pub node_id: i64,
    /// `-worker-id`: deprecated, no effect.
    pub worker_id: bool,

    // --- network / cluster ---
    /// `host:port`, or a unix-socket path.
    pub tcp_address: String,
    /// `host:port`, a unix-socket path, or `""` (HTTP disabled).
    pub http_address: String,
    /// Used only when TLS is configured; `""` disables HTTPS.
    pub https_address: String,
    pub broadcast_address: String,
    /// 0 = the actual TCP port (see [`NsqdOptions::apply_listeners`]).
    pub broadcast_tcp_port: i64,
    /// 0 = the actual HTTP port (see [`NsqdOptions::apply_listeners`]).
    pub broadcast_http_port: i64,
    /// `-lookupd-tcp-address` (config `nsqlookupd_tcp_addresses`).
    pub lookupd_tcp_addresses: Vec<String>,
    /// `-auth-http-address` (config `auth_http_addresses`); non-empty enables AUTH.
    pub auth_http_addresses: Vec<String>,
    pub http_client_connect_timeout: Duration,
    pub http_client_request_timeout: Duration,

    // --- disk queue / memory ---
    /// `""` = the current working directory.
    pub data_path: String,
    pub mem_queue_size: i64,
    pub max_bytes_per_file: i64,
    pub sync_every: i64,
    pub sync_timeout: Duration,
    /// `--durable` (ours, not the reference's): every OK to a publisher means fdatasync'd, and
    /// in-flight and deferred messages survive a crash; implies `--mem-queue-size=0`. See
    /// docs/durability.md.
    pub durable: bool,
    pub queue_scan_worker_pool_max: i64,
    pub queue_scan_selection_count: i64,

    // --- messages and commands ---
    pub msg_timeout: Duration,
    pub max_msg_timeout: Duration,
    pub max_msg_size: i64,
    pub max_body_size: i64,
    pub max_req_timeout: Duration,

    // --- client-negotiable limits ---
    pub max_heartbeat_interval: Duration,
    pub max_rdy_count: i64,
    pub max_output_buffer_size: i64,
    pub max_output_buffer_timeout: Duration,
    pub min_output_buffer_timeout: Duration,
    pub output_buffer_timeout: Duration,
    /// 0 = unlimited.
    pub max_channel_consumers: i64,

    // --- statsd ---
    /// UDP `host:port`; `""` disables statsd.
    pub statsd_address: String,
    pub statsd_interval: Duration,
    pub statsd_mem_stats: bool,
    /// As configured (`nsq.%s`) until [`NsqdOptions::apply_listeners`] expands it.
    pub statsd_prefix: String,
    pub statsd_udp_packet_size: i64,
    pub statsd_exclude_ephemeral: bool,

    // --- end-to-end latency ---
    /// The flag form is sorted descending; the config form keeps the written order.
    pub e2e_processing_latency_percentiles: Vec<f64>,
    pub e2e_processing_latency_window_time: Duration,

    // --- TLS ---
    pub tls_cert: String,
    pub tls_key: String,
    /// `require` or `require-verify`; non-empty forces `tls_required` to `True` if it was
    /// `False` (applied by [`parse_args`]; see [`NsqdOptions::effective_tls_required`]).
    pub tls_client_auth_policy: String,
    pub tls_root_ca_file: String,
    pub tls_required: TlsRequired,
    pub tls_min_version: TlsVersion,

    // --- compression ---
    pub deflate: bool,
    pub max_deflate_level: i64,
    pub snappy: bool,
}

impl Default for NsqdOptions {
    /// The reference defaults for this machine's host name.
    fn default() -> Self {
        NsqdOptions::with_hostname(&hostname())
    }
}

impl NsqdOptions {
    /// The reference defaults, with `hostname` as broadcast address and node-id source.
    pub fn with_hostname(hostname: &str) -> Self {
        NsqdOptions {
            config: String::new(),
            log_level: LogLevel::Info,
            log_prefix: "[nsqd] ".to_string(),
            verbose: false,
            node_id: nsq_core::message::default_node_id(hostname),
            worker_id: false,

            tcp_address: "0.0.0.0:4150".to_string(),
            http_address: "0.0.0.0:4151".to_string(),
            https_address: "0.0.0.0:4152".to_string(),
            broadcast_address: hostname.to_string(),
            broadcast_tcp_port: 0,
            broadcast_http_port: 0,
            lookupd_tcp_addresses: Vec::new(),
            auth_http_addresses: Vec::new(),
            http_client_connect_timeout: Duration::from_secs(2),
            http_client_request_timeout: Duration::from_secs(5),

            data_path: String::new(),
            mem_queue_size: 10_000,
            max_bytes_per_file: 100 * 1024 * 1024,
            sync_every: 2500,
            sync_timeout: Duration::from_secs(2),
            durable: false,
            queue_scan_worker_pool_max: 4,
            queue_scan_selection_count: 20,

            msg_timeout: Duration::from_secs(60),
            max_msg_timeout: Duration::from_secs(15 * 60),
            max_msg_size: 1024 * 1024,
            max_body_size: 5 * 1024 * 1024,
            max_req_timeout: Duration::from_secs(60 * 60),

            max_heartbeat_interval: Duration::from_secs(60),
            max_rdy_count: 2500,
            max_output_buffer_size: 64 * 1024,
            max_output_buffer_timeout: Duration::from_secs(30),
            min_output_buffer_timeout: Duration::from_millis(25),
            output_buffer_timeout: Duration::from_millis(250),
            max_channel_consumers: 0,

            statsd_address: String::new(),
            statsd_interval: Duration::from_secs(60),
            statsd_mem_stats: true,
            statsd_prefix: "nsq.%s".to_string(),
            statsd_udp_packet_size: 508,
            statsd_exclude_ephemeral: false,

            e2e_processing_latency_percentiles: Vec::new(),
            e2e_processing_latency_window_time: Duration::from_secs(10 * 60),

            tls_cert: String::new(),
            tls_key: String::new(),
            tls_client_auth_policy: String::new(),
            tls_root_ca_file: String::new(),
            tls_required: TlsRequired::False,
            tls_min_version: TlsVersion::Tls10,

            deflate: true,
            max_deflate_level: 6,
            snappy: true,
        }
    }

    /// `tls_required` after the reference's rule "a client-auth policy forces TLS": `True` when
    /// a policy is set and `tls_required` is `False`.
    pub fn effective_tls_required(&self) -> TlsRequired {
        if !self.tls_client_auth_policy.is_empty() && self.tls_required == TlsRequired::False {
            TlsRequired::True
        } else {
            self.tls_required
        }
    }

    /// The option checks the reference makes at startup (nsqd-flags.md §4), in its order, with
    /// its messages. Not checked here (the daemon does them): the data-path lock, loading the
    /// TLS cert/key/CA files (`failed to build TLS config - …`, which the reference checks
    /// between the node-id and the TLS-required rule), and binding the listeners.
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=9).contains(&self.max_deflate_level) {
            return Err("--max-deflate-level must be [1,9]".to_string());
        }
        if !(0..1024).contains(&self.node_id) {
            return Err("--node-id must be [0,1024)".to_string());
        }
        if self.effective_tls_required() != TlsRequired::False
            && self.tls_cert.is_empty()
            && self.tls_key.is_empty()
        {
            return Err(
                "cannot require TLS client connections without TLS key and cert".to_string(),
            );
        }
        for &v in &self.e2e_processing_latency_percentiles {
            if v <= 0.0 || v > 1.0 {
                return Err(format!(
                    "invalid E2E processing latency percentile: {}",
                    go_format_float(v)
                ));
            }
        }
        Ok(())
    }

    /// Startup steps 5 and 6 (nsqd-internals §10.1), given the ports actually bound (`None`
    /// when that listener is a unix socket or disabled): a broadcast port of 0 becomes the
    /// bound port, then `%s` in a non-empty statsd prefix becomes
    /// `<broadcast_address>_<broadcast_http_port>` (`.` and `:` → `_`) and a trailing `.` is
    /// added. If the HTTP port is still unknown, the port of `--http-address` is used as the
    /// reference does; when that has none either the port is left empty.
    pub fn apply_listeners(&mut self, tcp_port: Option<u16>, http_port: Option<u16>) {
        if self.broadcast_tcp_port == 0 {
            if let Some(p) = tcp_port {
                self.broadcast_tcp_port = i64::from(p);
            }
        }
        if self.broadcast_http_port == 0 {
            if let Some(p) = http_port {
                self.broadcast_http_port = i64::from(p);
            }
        }
        if self.statsd_prefix.is_empty() {
            return;
        }
        let port = if self.broadcast_http_port != 0 {
            self.broadcast_http_port.to_string()
        } else {
            self.http_address
                .rsplit_once(':')
                .map(|(_, p)| p.to_string())
                .unwrap_or_default()
        };
        let host = if self.broadcast_address.contains(':') {
            format!("[{}]:{port}", self.broadcast_address)
        } else {
            format!("{}:{port}", self.broadcast_address)
        };
        let key = host.replace(['.', ':'], "_");
        let mut prefix = self.statsd_prefix.replace("%s", &key);
        if !prefix.ends_with('.') {
            prefix.push('.');
        }
        self.statsd_prefix = prefix;
    }

    /// The queue engine's share of the options. Negative sizes/counts (which the reference
    /// accepts and then misbehaves on) become 0; `data_path` `""` becomes `.`.
    pub fn engine_options(&self) -> nsq_core::Options {
        let to_usize = |v: i64| usize::try_from(v).unwrap_or(0);
        let scan_defaults = nsq_core::ScanOptions::default();
        nsq_core::Options {
            data_path: if self.data_path.is_empty() {
                PathBuf::from(".")
            } else {
                PathBuf::from(&self.data_path)
            },
            mem_queue_size: if self.durable {
                0
            } else {
                to_usize(self.mem_queue_size)
            },
            max_bytes_per_file: self.max_bytes_per_file,
            sync_every: self.sync_every,
            sync_timeout: self.sync_timeout,
            max_msg_size: self.max_msg_size,
            max_msg_timeout: self.max_msg_timeout,
            max_channel_consumers: to_usize(self.max_channel_consumers),
            node_id: self.node_id,
            queue_scan: nsq_core::ScanOptions {
                selection_count: to_usize(self.queue_scan_selection_count),
                worker_pool_max: to_usize(self.queue_scan_worker_pool_max),
                ..scan_defaults
            },
            e2e_percentiles: self.e2e_processing_latency_percentiles.clone(),
            e2e_window: self.e2e_processing_latency_window_time,
            // `--sync-every=1` promises a sync per write: the OK waits for it too.
            durable: self.durable || self.sync_every == 1,
        }
    }

    /// The value of the option whose config-file key is `key`, shaped as the reference's
    /// `GET /config/<key>` renders it (nsqd-http-api.md §8.1): strings as
    /// [`Value::String`] (the HTTP layer sends those raw, not JSON-quoted), integers and bools
    /// as JSON, durations as integer nanoseconds, lists as arrays, `log_level` 1–5,
    /// `tls_required` 0–2, `tls_min_version` 769–772. `None` for unknown keys and for options
    /// without a config key (`node_id`, `verbose`, …) → `400 INVALID_OPTION`.
    pub fn get_json(&self, key: &str) -> Option<Value> {
        let spec = FLAGS.iter().find(|f| f.cfg_key == Some(key))?;
        if spec.name == "tls-required" {
            return Some(Value::from(self.effective_tls_required().code()));
        }
        Some(match self.field(spec.name)? {
            FieldRef::Bool(b) => Value::Bool(*b),
            FieldRef::Str(s) => Value::String(s.clone()),
            FieldRef::Int(i) => Value::from(*i),
            FieldRef::Dur(d) => Value::from(duration_nanos(*d)),
            FieldRef::StrList(l) => Value::Array(l.iter().cloned().map(Value::String).collect()),
            FieldRef::FloatList(l) => Value::Array(l.iter().map(|&f| go_json_float(f)).collect()),
            FieldRef::Level(l) => Value::from(l.code()),
            FieldRef::TlsReq(t) => Value::from(t.code()),
            FieldRef::TlsVer(v) => Value::from(v.code()),
        })
    }
}

/// What the command line asks for.
// Built once at startup and consumed at once; boxing the big variant would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum ParseOutcome {
    /// Start the daemon with these (resolved, not yet validated) options.
    Run(NsqdOptions),
    /// `-version`: print [`version_string`] to stdout, exit 0.
    Version,
    /// `-h`/`-help`: print [`usage`] to stderr, exit 0.
    Help,
}

/// Why the command line or config file was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FlagError {
    /// A command-line error (Go `flag` semantics): print the message and then [`usage`] to
    /// stderr, exit status 2.
    Usage(String),
    /// A fatal startup error (config file, value coercion, unparsable percentile): log it at
    /// FATAL level, exit status 1. (The reference prints `Could not parse: <s>` with Go's plain
    /// `log` timestamp rather than the nsqd prefix; callers may do the same or not.)
    Fatal(String),
}

impl FlagError {
    pub fn message(&self) -> &str {
        match self {
            FlagError::Usage(m) | FlagError::Fatal(m) => m,
        }
    }

    /// 2 for command-line errors, 1 for fatal ones.
    pub fn exit_code(&self) -> i32 {
        match self {
            FlagError::Usage(_) => 2,
            FlagError::Fatal(_) => 1,
        }
    }
}

impl fmt::Display for FlagError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for FlagError {}

/// Parses nsqd's command line given **with the program name first** (`std::env::args()`, the
/// clap `parse_from` convention; the first item is skipped), then loads `-config` if given, and
/// resolves every option as flag (if given, even equal to its default) > config-file value >
/// default. A `tls_client_auth_policy` forces `tls_required` to `True` here, as the
/// reference's startup does. Call [`NsqdOptions::validate`] afterwards.
///
/// On `Err`, print [`FlagError::message`] to stderr (followed by [`usage`] for
/// [`FlagError::Usage`]) and exit with [`FlagError::exit_code`].
pub fn parse_args<I: IntoIterator<Item = String>>(args: I) -> Result<ParseOutcome, FlagError> {
    parse_args_with_defaults(args, NsqdOptions::default())
}

/// [`parse_args`] starting from the given defaults (tests use a fixed host name). `args`
/// includes the program name, as for [`parse_args`].
pub fn parse_args_with_defaults<I: IntoIterator<Item = String>>(
    args: I,
    defaults: NsqdOptions,
) -> Result<ParseOutcome, FlagError> {
    let args: Vec<String> = args.into_iter().skip(1).collect();
    let mut opts = defaults;
    let mut explicit: HashSet<&'static str> = HashSet::new();
    let mut version = false;

    // Go's FlagSet.parseOne, one flag per iteration.
    let mut i = 0;
    while i < args.len() {
        let s = args[i].as_str();
        if s.len() < 2 || !s.starts_with('-') {
            break; // first non-flag argument: stop, ignore the rest
        }
        let mut minuses = 1;
        if s.as_bytes()[1] == b'-' {
            minuses = 2;
            if s.len() == 2 {
                break; // "--" terminates the flags
            }
        }
        let body = &s[minuses..];
        if body.is_empty() || body.starts_with('-') || body.starts_with('=') {
            return Err(FlagError::Usage(format!("bad flag syntax: {s}")));
        }
        i += 1;
        let (name, mut value) = match body[1..].find('=') {
            Some(p) => (&body[..p + 1], Some(&body[p + 2..])),
            None => (body, None),
        };

        if name == "version" {
            version = match value {
                None => true,
                Some(v) => parse_go_bool(v).ok_or_else(|| {
                    FlagError::Usage(format!(
                        "invalid boolean value {} for -{name}: parse error",
                        go_quote(v.as_bytes())
                    ))
                })?,
            };
            continue;
        }
        let Some(spec) = FLAGS.iter().find(|f| f.name == name) else {
            if name == "help" || name == "h" {
                return Ok(ParseOutcome::Help);
            }
            return Err(FlagError::Usage(format!(
                "flag provided but not defined: -{name}"
            )));
        };
        let field = opts
            .field_mut(spec.name)
            .expect("every FLAGS entry has a field");
        if field.is_bool() {
            let v = value.unwrap_or("true");
            if let Err(e) = field.set_flag(v) {
                return Err(FlagError::Usage(format!(
                    "invalid boolean value {} for -{name}: {e}",
                    go_quote(v.as_bytes())
                )));
            }
        } else {
            if value.is_none() && i < args.len() {
                value = Some(args[i].as_str());
                i += 1;
            }
            let Some(v) = value else {
                return Err(FlagError::Usage(format!("flag needs an argument: -{name}")));
            };
            match field.set_flag(v) {
                Ok(()) => {}
                Err(SetError::Fatal(m)) => return Err(FlagError::Fatal(m)),
                Err(e) => {
                    return Err(FlagError::Usage(format!(
                        "invalid value {} for flag -{name}: {e}",
                        go_quote(v.as_bytes())
                    )))
                }
            }
        }
        explicit.insert(spec.name);
    }

    if version {
        return Ok(ParseOutcome::Version);
    }
    if !opts.config.is_empty() {
        let path = opts.config.clone();
        let table = load_config_file(&path)?;
        apply_config(&mut opts, &table, &explicit)?;
    }
    if !opts.tls_client_auth_policy.is_empty() && opts.tls_required == TlsRequired::False {
        opts.tls_required = TlsRequired::True;
    }
    Ok(ParseOutcome::Run(opts))
}

/// Reads and parses the TOML file; errors are `failed to load config file <path> - <err>`.
fn load_config_file(path: &str) -> Result<toml::Table, FlagError> {
    let fail = |e: String| FlagError::Fatal(format!("failed to load config file {path} - {e}"));
    let mut file = std::fs::File::open(path).map_err(|e| fail(go_io_error("open", path, &e)))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|e| fail(go_io_error("read", path, &e)))?;
    let text = String::from_utf8(bytes).map_err(|_| fail("toml: invalid UTF-8".to_string()))?;
    text.parse::<toml::Table>().map_err(|e| {
        let line = e
            .span()
            .map(|r| text[..r.start.min(text.len())].matches('\n').count() + 1);
        let msg = e.message().trim_end().to_string();
        fail(match line {
            Some(l) => format!("toml: line {l}: {msg}"),
            None => format!("toml: {msg}"),
        })
    })
}

/// The reference's `cfg.Validate()` (three keys are checked even when their flag was given)
/// followed by `options.Resolve` for every key whose flag was not given.
fn apply_config(
    opts: &mut NsqdOptions,
    table: &toml::Table,
    explicit: &HashSet<&'static str>,
) -> Result<(), FlagError> {
    let fatal = |key: &str, v: &toml::Value| {
        FlagError::Fatal(format!("failed parsing {key} {}", go_format_value(v)))
    };
    let tls_required = match table.get("tls_required") {
        Some(v) => {
            Some(TlsRequired::parse(&go_format_value(v)).map_err(|_| fatal("tls_required", v))?)
        }
        None => None,
    };
    let tls_min_version = match table.get("tls_min_version") {
        Some(v) => {
            TlsVersion::parse(&go_format_value(v)).map_err(|_| fatal("tls_min_version", v))?
        }
        None => None,
    };
    let log_level = match table.get("log_level") {
        Some(v) => Some(LogLevel::parse(&go_format_value(v)).map_err(|_| fatal("log_level", v))?),
        None => None,
    };

    for spec in FLAGS {
        let Some(key) = spec.cfg_key else { continue };
        if explicit.contains(spec.name) {
            continue;
        }
        let Some(v) = table.get(key) else { continue };
        let field = opts
            .field_mut(spec.name)
            .expect("every FLAGS entry has a field");
        let r = match field {
            FieldMut::Level(l) => {
                *l = log_level.unwrap_or(*l);
                Ok(())
            }
            FieldMut::TlsReq(t) => {
                *t = tls_required.unwrap_or(*t);
                Ok(())
            }
            FieldMut::TlsVer(t) => {
                *t = tls_min_version.unwrap_or(*t);
                Ok(())
            }
            other => other.set_config(v),
        };
        if let Err(e) = r {
            return Err(FlagError::Fatal(format!(
                "option resolution failed to coerce {} for {} - {e}",
                go_format_value(v),
                spec.name
            )));
        }
    }
    Ok(())
}

/// One flag: its name (without `-`) and its config-file key (`None`: not settable from the
/// file and not readable at `/config`).
struct FlagSpec {
    name: &'static str,
    cfg_key: Option<&'static str>,
}

/// A mutable view of one option's field, typed by how it is parsed.
enum FieldMut<'a> {
    Bool(&'a mut bool),
    Str(&'a mut String),
    Int(&'a mut i64),
    Dur(&'a mut Duration),
    StrList(&'a mut Vec<String>),
    FloatList(&'a mut Vec<f64>),
    Level(&'a mut LogLevel),
    TlsReq(&'a mut TlsRequired),
    TlsVer(&'a mut TlsVersion),
}

/// A shared view of one option's field.
enum FieldRef<'a> {
    Bool(&'a bool),
    Str(&'a String),
    Int(&'a i64),
    Dur(&'a Duration),
    StrList(&'a Vec<String>),
    FloatList(&'a Vec<f64>),
    Level(&'a LogLevel),
    TlsReq(&'a TlsRequired),
    TlsVer(&'a TlsVersion),
}

/// Declares the flag table and the name → field accessors from one list, so the three cannot
/// drift apart. `version` is not in it: it is no option, the parser handles it.
macro_rules! option_fields {
    ($( $flag:literal => $field:ident : $kind:ident, $cfg:expr; )*) => {
        /// Every flag except `-version`, in `nsqd-flags.md` §2 order (also the order in which
        /// config values are resolved).
        const FLAGS: &[FlagSpec] = &[ $( FlagSpec { name: $flag, cfg_key: $cfg } ),* ];

        impl NsqdOptions {
            fn field_mut(&mut self, flag: &str) -> Option<FieldMut<'_>> {
                match flag {
                    $( $flag => Some(FieldMut::$kind(&mut self.$field)), )*
                    _ => None,
                }
            }

            fn field(&self, flag: &str) -> Option<FieldRef<'_>> {
                match flag {
                    $( $flag => Some(FieldRef::$kind(&self.$field)), )*
                    _ => None,
                }
            }
        }
    };
}

option_fields! {
    "config" => config: Str, None;
    "log-level" => log_level: Level, Some("log_level");
    "log-prefix" => log_prefix: Str, Some("log_prefix");
    "verbose" => verbose: Bool, None;
    "node-id" => node_id: Int, Some("id");
    "worker-id" => worker_id: Bool, None;

    "tcp-address" => tcp_address: Str, Some("tcp_address");
    "http-address" => http_address: Str, Some("http_address");
    "https-address" => https_address: Str, Some("https_address");
    "broadcast-address" => broadcast_address: Str, Some("broadcast_address");
    "broadcast-tcp-port" => broadcast_tcp_port: Int, Some("broadcast_tcp_port");
    "broadcast-http-port" => broadcast_http_port: Int, Some("broadcast_http_port");
    "lookupd-tcp-address" => lookupd_tcp_addresses: StrList, Some("nsqlookupd_tcp_addresses");
    "auth-http-address" => auth_http_addresses: StrList, Some("auth_http_addresses");
    "http-client-connect-timeout" => http_client_connect_timeout: Dur,
        Some("http_client_connect_timeout");
    "http-client-request-timeout" => http_client_request_timeout: Dur,
        Some("http_client_request_timeout");

    "data-path" => data_path: Str, Some("data_path");
    "mem-queue-size" => mem_queue_size: Int, Some("mem_queue_size");
    "max-bytes-per-file" => max_bytes_per_file: Int, Some("max_bytes_per_file");
    "sync-every" => sync_every: Int, Some("sync_every");
    "sync-timeout" => sync_timeout: Dur, Some("sync_timeout");
    "durable" => durable: Bool, Some("durable");
    "queue-scan-worker-pool-max" => queue_scan_worker_pool_max: Int,
        Some("queue_scan_worker_pool_max");
    "queue-scan-selection-count" => queue_scan_selection_count: Int,
        Some("queue_scan_selection_count");

    "msg-timeout" => msg_timeout: Dur, Some("msg_timeout");
    "max-msg-timeout" => max_msg_timeout: Dur, Some("max_msg_timeout");
    "max-msg-size" => max_msg_size: Int, Some("max_msg_size");
    "max-body-size" => max_body_size: Int, Some("max_body_size");
    "max-req-timeout" => max_req_timeout: Dur, Some("max_req_timeout");

    "max-heartbeat-interval" => max_heartbeat_interval: Dur, Some("max_heartbeat_interval");
    "max-rdy-count" => max_rdy_count: Int, Some("max_rdy_count");
    "max-output-buffer-size" => max_output_buffer_size: Int, Some("max_output_buffer_size");
    "max-output-buffer-timeout" => max_output_buffer_timeout: Dur,
        Some("max_output_buffer_timeout");
    "min-output-buffer-timeout" => min_output_buffer_timeout: Dur,
        Some("min_output_buffer_timeout");
    "output-buffer-timeout" => output_buffer_timeout: Dur, Some("output_buffer_timeout");
    "max-channel-consumers" => max_channel_consumers: Int, Some("max_channel_consumers");

    "statsd-address" => statsd_address: Str, Some("statsd_address");
    "statsd-interval" => statsd_interval: Dur, Some("statsd_interval");
    "statsd-mem-stats" => statsd_mem_stats: Bool, Some("statsd_mem_stats");
    "statsd-prefix" => statsd_prefix: Str, Some("statsd_prefix");
    "statsd-udp-packet-size" => statsd_udp_packet_size: Int, Some("statsd_udp_packet_size");
    "statsd-exclude-ephemeral" => statsd_exclude_ephemeral: Bool,
        Some("statsd_exclude_ephemeral");

    "e2e-processing-latency-percentile" => e2e_processing_latency_percentiles: FloatList,
        Some("e2e_processing_latency_percentiles");
    "e2e-processing-latency-window-time" => e2e_processing_latency_window_time: Dur,
        Some("e2e_processing_latency_window_time");

    "tls-cert" => tls_cert: Str, Some("tls_cert");
    "tls-key" => tls_key: Str, Some("tls_key");
    "tls-client-auth-policy" => tls_client_auth_policy: Str, Some("tls_client_auth_policy");
    "tls-root-ca-file" => tls_root_ca_file: Str, Some("tls_root_ca_file");
    "tls-required" => tls_required: TlsReq, Some("tls_required");
    "tls-min-version" => tls_min_version: TlsVer, Some("tls_min_version");

    "deflate" => deflate: Bool, Some("deflate");
    "max-deflate-level" => max_deflate_level: Int, Some("max_deflate_level");
    "snappy" => snappy: Bool, Some("snappy");
}

/// A flag value that did not parse.
#[derive(Debug)]
enum SetError {
    /// Shown after `invalid value "<v>" for flag -<name>: `.
    Invalid(String),
    /// Aborts at once (the reference's `log.Fatalf` inside the percentile flag).
    Fatal(String),
}

impl fmt::Display for SetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SetError::Invalid(m) | SetError::Fatal(m) => f.write_str(m),
        }
    }
}

impl FieldMut<'_> {
    /// Go's `IsBoolFlag`: `-name` alone sets it, and it never consumes the next argument.
    fn is_bool(&self) -> bool {
        matches!(self, FieldMut::Bool(_) | FieldMut::TlsReq(_))
    }

    /// The flag's `Value.Set` as the reference defines it for each type.
    fn set_flag(self, v: &str) -> Result<(), SetError> {
        let parse_error = || SetError::Invalid("parse error".to_string());
        match self {
            FieldMut::Bool(b) => *b = parse_go_bool(v).ok_or_else(parse_error)?,
            FieldMut::Str(s) => *s = v.to_string(),
            FieldMut::Int(i) => {
                *i = parse_go_int(v).map_err(|e| {
                    SetError::Invalid(
                        match e {
                            IntError::Syntax => "parse error",
                            IntError::Range => "value out of range",
                        }
                        .to_string(),
                    )
                })?
            }
            FieldMut::Dur(d) => {
                *d = match parse_go_duration(v) {
                    Ok(d) => d,
                    Err(DurationError::Negative) => {
                        return Err(SetError::Invalid(
                            "negative durations are not supported".to_string(),
                        ))
                    }
                    Err(DurationError::Invalid(_)) => return Err(parse_error()),
                }
            }
            FieldMut::StrList(l) => l.push(v.to_string()),
            FieldMut::FloatList(l) => {
                for part in v.split(',') {
                    let f = parse_go_float(part)
                        .ok_or_else(|| SetError::Fatal(format!("Could not parse: {part}")))?;
                    l.push(f);
                }
                // Go's FloatArray sorts descending after every Set.
                l.sort_by(|a, b| b.partial_cmp(a).unwrap_or(std::cmp::Ordering::Equal));
            }
            FieldMut::Level(l) => *l = LogLevel::parse(v).map_err(SetError::Invalid)?,
            FieldMut::TlsReq(t) => *t = TlsRequired::parse(v).map_err(SetError::Invalid)?,
            FieldMut::TlsVer(t) => {
                if let Some(ver) = TlsVersion::parse(v).map_err(SetError::Invalid)? {
                    *t = ver;
                }
            }
        }
        Ok(())
    }

    /// go-options' `coerce` of a config-file value into this field's type (nsqd-flags.md §3).
    /// `Level`/`TlsReq`/`TlsVer` are handled by the caller.
    fn set_config(self, v: &toml::Value) -> Result<(), String> {
        use toml::Value as T;
        let bad_type = || "invalid value type".to_string();
        match self {
            FieldMut::Str(s) => {
                *s = match v {
                    T::String(x) => x.clone(),
                    T::Integer(i) => i.to_string(),
                    T::Float(f) => format!("{f:.6}"),
                    T::Boolean(b) => b.to_string(),
                    _ => return Err(bad_type()),
                }
            }
            FieldMut::Bool(b) => {
                *b = match v {
                    T::Boolean(x) => *x,
                    T::Integer(i) => *i != 0,
                    T::String(x) => parse_go_bool(x).ok_or_else(|| {
                        format!(
                            "strconv.ParseBool: parsing {}: invalid syntax",
                            go_quote(x.as_bytes())
                        )
                    })?,
                    _ => return Err(bad_type()),
                }
            }
            FieldMut::Int(i) => {
                *i = match v {
                    T::Integer(x) => *x,
                    T::String(x) => x.parse::<i64>().map_err(|e| {
                        let why = match e.kind() {
                            std::num::IntErrorKind::PosOverflow
                            | std::num::IntErrorKind::NegOverflow => "value out of range",
                            _ => "invalid syntax",
                        };
                        format!(
                            "strconv.ParseInt: parsing {}: {why}",
                            go_quote(x.as_bytes())
                        )
                    })?,
                    _ => return Err(bad_type()),
                }
            }
            FieldMut::Dur(d) => {
                *d = match v {
                    // Integers (and strings of digits) are milliseconds.
                    T::Integer(ms) => u64::try_from(*ms)
                        .map(Duration::from_millis)
                        .map_err(|_| "negative durations are not supported".to_string())?,
                    T::String(x) if !x.is_empty() && x.bytes().all(|c| c.is_ascii_digit()) => {
                        let ms = x.parse::<u64>().map_err(|_| {
                            format!(
                                "strconv.Atoi: parsing {}: value out of range",
                                go_quote(x.as_bytes())
                            )
                        })?;
                        Duration::from_millis(ms)
                    }
                    T::String(x) => parse_go_duration(x).map_err(|e| match e {
                        DurationError::Invalid(m) => m,
                        DurationError::Negative => {
                            "negative durations are not supported".to_string()
                        }
                    })?,
                    _ => return Err(bad_type()),
                }
            }
            FieldMut::StrList(l) => {
                *l = match v {
                    // The reference splits on ','; an empty string is taken as an empty list
                    // (the reference would produce one empty address).
                    T::String(x) if x.is_empty() => Vec::new(),
                    T::String(x) => x.split(',').map(str::to_string).collect(),
                    T::Array(items) => items
                        .iter()
                        .map(|i| match i {
                            T::String(s) => Ok(s.clone()),
                            _ => Err(bad_type()),
                        })
                        .collect::<Result<_, _>>()?,
                    _ => return Err(bad_type()),
                }
            }
            FieldMut::FloatList(l) => {
                // Kept in the written order (no sorting), as the reference does.
                *l = match v {
                    T::String(x) => x
                        .split(',')
                        .map(|p| {
                            parse_go_float(p).ok_or_else(|| {
                                format!(
                                    "strconv.ParseFloat: parsing {}: invalid syntax",
                                    go_quote(p.as_bytes())
                                )
                            })
                        })
                        .collect::<Result<_, _>>()?,
                    // Integer elements crash the reference; they are accepted here.
                    T::Array(items) => items
                        .iter()
                        .map(|i| match i {
                            T::Float(f) => Ok(*f),
                            T::Integer(n) => Ok(*n as f64),
                            _ => Err(bad_type()),
                        })
                        .collect::<Result<_, _>>()?,
                    T::Float(f) => vec![*f],
                    _ => return Err(bad_type()),
                }
            }
            FieldMut::Level(_) | FieldMut::TlsReq(_) | FieldMut::TlsVer(_) => {
                unreachable!("pre-validated config keys are applied by apply_config")
            }
        }
        Ok(())
    }
}

/// Go's `strconv.ParseBool`.
pub fn parse_go_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// Why [`parse_go_int`] failed (Go's `strconv.ErrSyntax` / `ErrRange`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntError {
    Syntax,
    Range,
}

/// Go's `strconv.ParseInt(s, 0, 64)`: optional sign, `0x`/`0o`/`0b` prefixes, a leading `0`
/// for octal, `_` separators allowed only with a prefix (base 0 rules).
pub fn parse_go_int(s: &str) -> Result<i64, IntError> {
    if s.is_empty() {
        return Err(IntError::Syntax);
    }
    let s0 = s;
    let (neg, mut rest) = match s.as_bytes()[0] {
        b'+' => (false, &s[1..]),
        b'-' => (true, &s[1..]),
        _ => (false, s),
    };
    if rest.is_empty() {
        return Err(IntError::Syntax);
    }
    let mut base = 10u32;
    let b = rest.as_bytes();
    if b[0] == b'0' {
        let lower = b.get(1).map(|c| c.to_ascii_lowercase());
        if b.len() >= 3 && lower == Some(b'b') {
            base = 2;
            rest = &rest[2..];
        } else if b.len() >= 3 && lower == Some(b'o') {
            base = 8;
            rest = &rest[2..];
        } else if b.len() >= 3 && lower == Some(b'x') {
            base = 16;
            rest = &rest[2..];
        } else {
            base = 8;
            rest = &rest[1..];
        }
    }
    let mut n: u64 = 0;
    let mut underscores = false;
    for c in rest.chars() {
        if c == '_' {
            underscores = true;
            continue;
        }
        let d = c
            .to_digit(36)
            .filter(|&d| d < base)
            .ok_or(IntError::Syntax)?;
        n = n
            .checked_mul(u64::from(base))
            .and_then(|n| n.checked_add(u64::from(d)))
            .ok_or(IntError::Range)?;
    }
    if underscores && !underscore_ok(s0) {
        return Err(IntError::Syntax);
    }
    const CUTOFF: u64 = 1 << 63;
    if neg {
        if n > CUTOFF {
            return Err(IntError::Range);
        }
        Ok((n as i64).wrapping_neg())
    } else {
        i64::try_from(n).map_err(|_| IntError::Range)
    }
}

/// Go's `strconv.underscoreOK`: `_` only between digits or after a base prefix.
fn underscore_ok(s: &str) -> bool {
    let mut s = s.as_bytes();
    if let Some(b'+' | b'-') = s.first() {
        s = &s[1..];
    }
    let mut saw = b'^';
    let mut i = 0;
    let mut hex = false;
    if s.len() >= 2 && s[0] == b'0' && matches!(s[1].to_ascii_lowercase(), b'b' | b'o' | b'x') {
        i = 2;
        saw = b'0';
        hex = s[1].eq_ignore_ascii_case(&b'x');
    }
    while i < s.len() {
        let c = s[i];
        i += 1;
        if c.is_ascii_digit() || (hex && c.is_ascii_hexdigit()) {
            saw = b'0';
            continue;
        }
        if c == b'_' {
            if saw != b'0' {
                return false;
            }
            saw = b'_';
            continue;
        }
        if saw == b'_' {
            return false;
        }
        saw = b'!';
    }
    saw != b'_'
}

/// Why [`parse_go_duration`] failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DurationError {
    /// Go's own error text (`time: invalid duration "x"`, `time: missing unit …`).
    Invalid(String),
    /// Valid Go syntax, but negative: Go accepts it, a `std::time::Duration` cannot hold it.
    Negative,
}

/// Go's `time.ParseDuration`: `[-+]?([0-9]*(\.[0-9]*)?[a-z]+)+`, units `ns us µs μs ms s m h`,
/// a bare `0` allowed; the same rounding of fractions and the same overflow limit (2^63-1 ns).
pub fn parse_go_duration(orig: &str) -> Result<Duration, DurationError> {
    let q = go_quote(orig.as_bytes());
    let invalid = || DurationError::Invalid(format!("time: invalid duration {q}"));
    let mut s = orig;
    let mut neg = false;
    if let Some(c) = s.chars().next() {
        if c == '-' || c == '+' {
            neg = c == '-';
            s = &s[1..];
        }
    }
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err(invalid());
    }
    const LIMIT: u64 = 1 << 63;
    let mut total: u64 = 0;
    while !s.is_empty() {
        let b = s.as_bytes();
        if !(b[0] == b'.' || b[0].is_ascii_digit()) {
            return Err(invalid());
        }
        // Integer part.
        let int_len = b.iter().take_while(|c| c.is_ascii_digit()).count();
        let mut v: u64 = 0;
        for &c in &b[..int_len] {
            if v > LIMIT / 10 {
                return Err(invalid());
            }
            v = v * 10 + u64::from(c - b'0');
            if v > LIMIT {
                return Err(invalid());
            }
        }
        s = &s[int_len..];
        let pre = int_len > 0;
        // Fraction part.
        let (mut f, mut scale, mut post) = (0u64, 1f64, false);
        if s.starts_with('.') {
            s = &s[1..];
            let frac_len = s.bytes().take_while(|c| c.is_ascii_digit()).count();
            let mut overflow = false;
            for c in s[..frac_len].bytes() {
                if overflow {
                    continue;
                }
                if f > (LIMIT - 1) / 10 {
                    overflow = true;
                    continue;
                }
                let y = f * 10 + u64::from(c - b'0');
                if y > LIMIT {
                    overflow = true;
                    continue;
                }
                f = y;
                scale *= 10.0;
            }
            post = frac_len > 0;
            s = &s[frac_len..];
        }
        if !pre && !post {
            return Err(invalid());
        }
        // Unit.
        let unit_len = s
            .char_indices()
            .find(|&(_, c)| c == '.' || c.is_ascii_digit())
            .map_or(s.len(), |(i, _)| i);
        if unit_len == 0 {
            return Err(DurationError::Invalid(format!(
                "time: missing unit in duration {q}"
            )));
        }
        let u = &s[..unit_len];
        s = &s[unit_len..];
        let unit: u64 = match u {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => {
                return Err(DurationError::Invalid(format!(
                    "time: unknown unit {} in duration {q}",
                    go_quote(u.as_bytes())
                )))
            }
        };
        if v > LIMIT / unit {
            return Err(invalid());
        }
        v *= unit;
        if f > 0 {
            v += (f as f64 * (unit as f64 / scale)) as u64;
            if v > LIMIT {
                return Err(invalid());
            }
        }
        total += v;
        if total > LIMIT {
            return Err(invalid());
        }
    }
    if neg {
        return if total == 0 {
            Ok(Duration::ZERO)
        } else {
            Err(DurationError::Negative)
        };
    }
    if total > LIMIT - 1 {
        return Err(invalid());
    }
    Ok(Duration::from_nanos(total))
}

/// Go's `strconv.ParseFloat(s, 64)` for the forms that matter here (decimal, exponent,
/// `inf`/`nan`); Rust's parser accepts the same decimal grammar.
fn parse_go_float(s: &str) -> Option<f64> {
    if s.is_empty() {
        return None;
    }
    s.parse::<f64>().ok()
}

/// Go's `fmt` `%v` of a float64 (`strconv.FormatFloat(v, 'g', -1, 64)`): shortest digits,
/// exponent form when the exponent is < -4 or >= 6 (`1e+06`, `1.5e-05`).
pub fn go_format_float(v: f64) -> String {
    if v.is_nan() {
        return "NaN".to_string();
    }
    if v.is_infinite() {
        return if v > 0.0 { "+Inf" } else { "-Inf" }.to_string();
    }
    if v == 0.0 {
        return if v.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    let sci = format!("{:e}", v.abs()); // e.g. "1.5e-5", "1e6"
    let (mant, exp) = sci.split_once('e').expect("{:e} has an exponent");
    let exp: i32 = exp.parse().expect("{:e} exponent is an integer");
    let digits: String = mant.chars().filter(|c| *c != '.').collect();
    let sign = if v < 0.0 { "-" } else { "" };
    if !(-4..6).contains(&exp) {
        let mut m = digits[..1].to_string();
        if digits.len() > 1 {
            m.push('.');
            m.push_str(&digits[1..]);
        }
        let esign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{m}e{esign}{:02}", exp.abs());
    }
    let nd = digits.len() as i32;
    let out = if exp < 0 {
        format!("0.{}{digits}", "0".repeat((-exp - 1) as usize))
    } else if exp + 1 >= nd {
        format!("{digits}{}", "0".repeat((exp + 1 - nd) as usize))
    } else {
        let p = (exp + 1) as usize;
        format!("{}.{}", &digits[..p], &digits[p..])
    };
    format!("{sign}{out}")
}

/// A float as Go's `encoding/json` writes it: integral values without `.0`.
fn go_json_float(v: f64) -> Value {
    if v.is_finite() && v.fract() == 0.0 && v.abs() < 9.0e15 {
        return Value::from(v as i64);
    }
    serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number)
}

/// A Go `time.Duration` in JSON: integer nanoseconds (saturating at i64::MAX).
fn duration_nanos(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

/// A TOML value as Go's `%v` prints the decoded value (for error messages and for the keys
/// the reference re-parses from their `%v` text).
fn go_format_value(v: &toml::Value) -> String {
    use toml::Value as T;
    match v {
        T::String(s) => s.clone(),
        T::Integer(i) => i.to_string(),
        T::Float(f) => go_format_float(*f),
        T::Boolean(b) => b.to_string(),
        T::Datetime(d) => d.to_string(),
        T::Array(a) => format!(
            "[{}]",
            a.iter().map(go_format_value).collect::<Vec<_>>().join(" ")
        ),
        T::Table(t) => format!(
            "map[{}]",
            t.iter()
                .map(|(k, v)| format!("{k}:{}", go_format_value(v)))
                .collect::<Vec<_>>()
                .join(" ")
        ),
    }
}

/// An I/O error in Go's `*PathError` form: `open /x: no such file or directory`.
fn go_io_error(op: &str, path: &str, e: &std::io::Error) -> String {
    let text = e.to_string();
    let text = match text.find(" (os error") {
        Some(p) => &text[..p],
        None => &text,
    };
    let mut chars = text.chars();
    let lowered = match chars.next() {
        Some(c) => c.to_lowercase().collect::<String>() + chars.as_str(),
        None => String::new(),
    };
    format!("{op} {path}: {lowered}")
}

/// The reference's `nsqd -h` text (nsqd-flags.md §5), with this machine's host name and its
/// hash as the defaults of `-broadcast-address` and `-node-id`.
pub fn usage() -> &'static str {
    static USAGE: OnceLock<String> = OnceLock::new();
    USAGE.get_or_init(|| usage_for_hostname(&hostname()))
}

/// [`usage`] for a given host name.
pub fn usage_for_hostname(hostname: &str) -> String {
    let id = nsq_core::message::default_node_id(hostname);
    // Go omits "(default …)" for zero values.
    let id_default = if id == 0 {
        String::new()
    } else {
        format!(" (default {id})")
    };
    let host_default = if hostname.is_empty() {
        String::new()
    } else {
        format!(" (default {})", go_quote(hostname.as_bytes()))
    };
    USAGE_TEMPLATE
        .replace("{HOST_DEFAULT}", &host_default)
        .replace("{ID_DEFAULT}", &id_default)
}

const USAGE_TEMPLATE: &str = r#"Usage of nsqd:
  -auth-http-address value
    	<addr>:<port> or a full url to query auth server (may be given multiple times)
  -broadcast-address string
    	address that will be registered with lookupd (defaults to the OS hostname){HOST_DEFAULT}
  -broadcast-http-port int
    	HTTP port that will be registered with lookupd (defaults to the HTTP port that this nsqd is listening on)
  -broadcast-tcp-port int
    	TCP port that will be registered with lookupd (defaults to the TCP port that this nsqd is listening on)
  -config string
    	path to config file
  -data-path string
    	path to store disk-backed messages
  -deflate
    	enable deflate feature negotiation (client compression) (default true)
  -durable
    	acknowledge a publish only once it is fdatasync'd, and keep in-flight and deferred messages across crashes (implies -mem-queue-size=0)
  -e2e-processing-latency-percentile value
    	message processing time percentiles (as float (0, 1.0]) to track (can be specified multiple times or comma separated '1.0,0.99,0.95', default none)
  -e2e-processing-latency-window-time duration
    	calculate end to end latency quantiles for this duration of time (ie: 60s would only show quantile calculations from the past 60 seconds) (default 10m0s)
  -http-address string
    	address to listen on for HTTP clients (<addr>:<port> for TCP/IP or <path> for unix socket) (default "0.0.0.0:4151")
  -http-client-connect-timeout duration
    	timeout for HTTP connect (default 2s)
  -http-client-request-timeout duration
    	timeout for HTTP request (default 5s)
  -https-address string
    	<addr>:<port> to listen on for HTTPS clients (default "0.0.0.0:4152")
  -log-level value
    	set log verbosity: debug, info, warn, error, or fatal (default INFO)
  -log-prefix string
    	log message prefix (default "[nsqd] ")
  -lookupd-tcp-address value
    	lookupd TCP address (may be given multiple times)
  -max-body-size int
    	maximum size of a single command body (default 5242880)
  -max-bytes-per-file int
    	number of bytes per diskqueue file before rolling (default 104857600)
  -max-channel-consumers int
    	maximum channel consumer connection count per nsqd instance (default 0, i.e., unlimited)
  -max-deflate-level int
    	max deflate compression level a client can negotiate (> values == > nsqd CPU usage) (default 6)
  -max-heartbeat-interval duration
    	maximum client configurable duration of time between client heartbeats (default 1m0s)
  -max-msg-size int
    	maximum size of a single message in bytes (default 1048576)
  -max-msg-timeout duration
    	maximum duration before a message will timeout (default 15m0s)
  -max-output-buffer-size int
    	maximum client configurable size (in bytes) for a client output buffer (default 65536)
  -max-output-buffer-timeout duration
    	maximum client configurable duration of time between flushing to a client (default 30s)
  -max-rdy-count int
    	maximum RDY count for a client (default 2500)
  -max-req-timeout duration
    	maximum requeuing timeout for a message (default 1h0m0s)
  -mem-queue-size int
    	number of messages to keep in memory (per topic/channel) (default 10000)
  -min-output-buffer-timeout duration
    	minimum client configurable duration of time between flushing to a client (default 25ms)
  -msg-timeout duration
    	default duration to wait before auto-requeing a message (default 1m0s)
  -node-id int
    	unique part for message IDs, (int) in range [0,1024) (default is hash of hostname){ID_DEFAULT}
  -output-buffer-timeout duration
    	default duration of time between flushing data to clients (default 250ms)
  -queue-scan-selection-count int
    	number of channels to check per cycle (every 100ms) for in-flight and deferred timeouts (default 20)
  -queue-scan-worker-pool-max int
    	max concurrency for checking in-flight and deferred message timeouts (default 4)
  -snappy
    	enable snappy feature negotiation (client compression) (default true)
  -statsd-address string
    	UDP <addr>:<port> of a statsd daemon for pushing stats
  -statsd-exclude-ephemeral
    	Skip ephemeral topics and channels when sending stats to statsd
  -statsd-interval duration
    	duration between pushing to statsd (default 1m0s)
  -statsd-mem-stats
    	toggle sending memory and GC stats to statsd (default true)
  -statsd-prefix string
    	prefix used for keys sent to statsd (%s for host replacement) (default "nsq.%s")
  -statsd-udp-packet-size int
    	the size in bytes of statsd UDP packets (default 508)
  -sync-every int
    	number of messages per diskqueue fsync (default 2500)
  -sync-timeout duration
    	duration of time per diskqueue fsync (default 2s)
  -tcp-address string
    	address to listen on for TCP clients (<addr>:<port> for TCP/IP or <path> for unix socket) (default "0.0.0.0:4150")
  -tls-cert string
    	path to certificate file
  -tls-client-auth-policy string
    	client certificate auth policy ('require' or 'require-verify')
  -tls-key string
    	path to key file
  -tls-min-version value
    	minimum SSL/TLS version acceptable ('ssl3.0', 'tls1.0', 'tls1.1', 'tls1.2' or 'tls1.3') (default tls1.0)
  -tls-required
    	require TLS for client connections (true, false, tcp-https)
  -tls-root-ca-file string
    	path to certificate authority file
  -verbose
    	[deprecated] has no effect, use --log-level
  -version
    	print version string
  -worker-id
    	[deprecated] use --node-id
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_ints() {
        assert_eq!(parse_go_int("10"), Ok(10));
        assert_eq!(parse_go_int("010"), Ok(8));
        assert_eq!(parse_go_int("0"), Ok(0));
        assert_eq!(parse_go_int("-0x10"), Ok(-16));
        assert_eq!(parse_go_int("0o17"), Ok(15));
        assert_eq!(parse_go_int("0B101"), Ok(5));
        assert_eq!(parse_go_int("1_000"), Ok(1000));
        assert_eq!(parse_go_int("1__0"), Err(IntError::Syntax));
        assert_eq!(parse_go_int("_1"), Err(IntError::Syntax));
        assert_eq!(parse_go_int("1_"), Err(IntError::Syntax));
        assert_eq!(parse_go_int("0x_1_0"), Ok(16));
        assert_eq!(parse_go_int("0x"), Err(IntError::Syntax));
        assert_eq!(parse_go_int("08"), Err(IntError::Syntax));
        assert_eq!(parse_go_int("+"), Err(IntError::Syntax));
        assert_eq!(parse_go_int("9223372036854775807"), Ok(i64::MAX));
        assert_eq!(parse_go_int("-9223372036854775808"), Ok(i64::MIN));
        assert_eq!(parse_go_int("9223372036854775808"), Err(IntError::Range));
    }

    #[test]
    fn go_durations() {
        let ms = Duration::from_millis;
        assert_eq!(parse_go_duration("250ms"), Ok(ms(250)));
        assert_eq!(parse_go_duration("1m30s"), Ok(ms(90_000)));
        assert_eq!(parse_go_duration("1.5h"), Ok(ms(5_400_000)));
        assert_eq!(parse_go_duration(".5s"), Ok(ms(500)));
        assert_eq!(parse_go_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_go_duration("-0"), Ok(Duration::ZERO));
        assert_eq!(parse_go_duration("1µs"), Ok(Duration::from_micros(1)));
        assert_eq!(parse_go_duration("-1s"), Err(DurationError::Negative));
        assert_eq!(
            parse_go_duration("10"),
            Err(DurationError::Invalid(
                "time: missing unit in duration \"10\"".into()
            ))
        );
        assert_eq!(
            parse_go_duration("1x"),
            Err(DurationError::Invalid(
                "time: unknown unit \"x\" in duration \"1x\"".into()
            ))
        );
        assert!(parse_go_duration("").is_err());
        assert!(parse_go_duration(".s").is_err());
        assert!(parse_go_duration("3000000h").is_err());
    }

    #[test]
    fn go_float_format() {
        assert_eq!(go_format_float(1.5), "1.5");
        assert_eq!(go_format_float(0.0), "0");
        assert_eq!(go_format_float(2.0), "2");
        assert_eq!(go_format_float(-0.5), "-0.5");
        assert_eq!(go_format_float(123456.0), "123456");
        assert_eq!(go_format_float(1e6), "1e+06");
        assert_eq!(go_format_float(1234567.0), "1.234567e+06");
        assert_eq!(go_format_float(0.0001), "0.0001");
        assert_eq!(go_format_float(0.00001), "1e-05");
        assert_eq!(go_format_float(0.000015), "1.5e-05");
    }

    #[test]
    fn every_config_key_has_a_json_value() {
        let o = NsqdOptions::with_hostname("vm");
        for f in FLAGS {
            if let Some(k) = f.cfg_key {
                assert!(o.get_json(k).is_some(), "{k}");
            }
        }
    }
}
