//! nsqlookupd's options (nsqlookupd/options.go, `NewOptions`; apps/nsqlookupd/main.go,
//! `nsqlookupdFlagSet`): the flags of the reference v1.3.0 declared once as a [`FlagSet`] (Go
//! `flag` parsing, the `-h` text and the TOML `--config` file with precedence flag > config
//! file > default come from `nsq_go::flag`).

use std::time::Duration;

use nsq_go::flag::{self, FlagSet};

pub use nsq_go::flag::FlagError;
pub use nsq_go::os::hostname;
pub use nsq_go::LogLevel;

/// The version nsqlookupd reports (`-version`, `/info`, IDENTIFY).
pub const VERSION: &str = nsq_http::version::VERSION;

/// `nsqlookupd v1.3.0 (built w/rustc1.95.0)`.
pub fn version_string() -> String {
    nsq_http::version::version_string("nsqlookupd")
}

/// Every nsqlookupd option, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NsqlookupdOptions {
    /// `-config`: the TOML file that was loaded (`""` = none).
    pub config: String,
    pub log_level: LogLevel,
    pub log_prefix: String,
    /// `-verbose`: deprecated, no effect.
    pub verbose: bool,
    pub tcp_address: String,
    pub http_address: String,
    /// Reported about ourselves in the IDENTIFY reply.
    pub broadcast_address: String,
    /// A producer silent for longer is hidden from `/lookup` and `/nodes`.
    pub inactive_producer_timeout: Duration,
    /// How long `/topic/tombstone` hides a producer from `/lookup`.
    pub tombstone_lifetime: Duration,
}

impl Default for NsqlookupdOptions {
    fn default() -> Self {
        NsqlookupdOptions::with_hostname(&hostname())
    }
}

impl NsqlookupdOptions {
    /// The reference defaults with `hostname` as broadcast address.
    pub fn with_hostname(hostname: &str) -> Self {
        NsqlookupdOptions {
            config: String::new(),
            log_level: LogLevel::Info,
            log_prefix: "[nsqlookupd] ".to_string(),
            verbose: false,
            tcp_address: "0.0.0.0:4160".to_string(),
            http_address: "0.0.0.0:4161".to_string(),
            broadcast_address: hostname.to_string(),
            inactive_producer_timeout: Duration::from_secs(300),
            tombstone_lifetime: Duration::from_secs(45),
        }
    }

    /// The liveness settings of the registration DB.
    pub fn liveness(&self) -> crate::db::Liveness {
        crate::db::Liveness {
            inactive_producer_timeout: self.inactive_producer_timeout,
            tombstone_lifetime: self.tombstone_lifetime,
        }
    }
}

/// What the command line asks for.
pub type ParseOutcome = flag::ParseOutcome<NsqlookupdOptions>;

/// Every flag except `-version`, in config-resolution order.
pub static FLAGS: FlagSet<NsqlookupdOptions> = FlagSet {
    program: "nsqlookupd",
    flags: nsq_go::flags![NsqlookupdOptions; @daemon;
        "tcp-address" => tcp_address: Str, Some("tcp_address"),
            "<addr>:<port> to listen on for TCP clients";
        "http-address" => http_address: Str, Some("http_address"),
            "<addr>:<port> to listen on for HTTP clients";
        "broadcast-address" => broadcast_address: Str, Some("broadcast_address"),
            "address of this lookupd node, (default to the OS hostname)";
        "inactive-producer-timeout" => inactive_producer_timeout: Dur,
            Some("inactive_producer_timeout"),
            "duration of time a producer will remain in the active list since its last ping";
        "tombstone-lifetime" => tombstone_lifetime: Dur, Some("tombstone_lifetime"),
            "duration of time a producer will remain tombstoned if registration remains";
    ],
    config_checks: &["log_level"],
};

/// Parses the command line **with the program name first** (`std::env::args()`), then the
/// `-config` file if any, resolving flag (if given) > config value > default.
pub fn parse_args<I: IntoIterator<Item = String>>(args: I) -> Result<ParseOutcome, FlagError> {
    parse_args_with_defaults(args, NsqlookupdOptions::default())
}

/// [`parse_args`] from the given defaults (tests use a fixed host name).
pub fn parse_args_with_defaults<I: IntoIterator<Item = String>>(
    args: I,
    defaults: NsqlookupdOptions,
) -> Result<ParseOutcome, FlagError> {
    FLAGS.parse(args, defaults)
}

/// The reference's `nsqlookupd -h` text for this machine's host name.
pub fn usage() -> String {
    usage_for_hostname(&hostname())
}

/// [`usage`] for a given host name (Go omits `(default …)` for an empty string).
pub fn usage_for_hostname(hostname: &str) -> String {
    FLAGS.usage(&NsqlookupdOptions::with_hostname(hostname))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference's text, which [`usage_for_hostname`] must reproduce byte for byte.
    const USAGE_TEMPLATE: &str = r#"Usage of nsqlookupd:
  -broadcast-address string
    	address of this lookupd node, (default to the OS hostname){HOST_DEFAULT}
  -config string
    	path to config file
  -http-address string
    	<addr>:<port> to listen on for HTTP clients (default "0.0.0.0:4161")
  -inactive-producer-timeout duration
    	duration of time a producer will remain in the active list since its last ping (default 5m0s)
  -log-level value
    	set log verbosity: debug, info, warn, error, or fatal (default INFO)
  -log-prefix string
    	log message prefix (default "[nsqlookupd] ")
  -tcp-address string
    	<addr>:<port> to listen on for TCP clients (default "0.0.0.0:4160")
  -tombstone-lifetime duration
    	duration of time a producer will remain tombstoned if registration remains (default 45s)
  -verbose
    	[deprecated] has no effect, use --log-level
  -version
    	print version string
"#;

    #[test]
    fn usage_is_the_reference_text() {
        for host in ["host1", ""] {
            let host_default = if host.is_empty() {
                String::new()
            } else {
                format!(" (default {})", nsq_go::quote::go_quote(host.as_bytes()))
            };
            assert_eq!(
                usage_for_hostname(host),
                USAGE_TEMPLATE.replace("{HOST_DEFAULT}", &host_default)
            );
        }
    }
}
