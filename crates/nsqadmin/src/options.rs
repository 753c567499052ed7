//! nsqadmin's options (nsqadmin/options.go, `NewOptions`; apps/nsqadmin/main.go): every flag of
//! the reference with its default, declared once as a [`FlagSet`] (Go `flag` parsing, the `-h`
//! text and the TOML `--config` file with precedence flag > file > default come from
//! `nsq_go::flag`), startup validation (nsqadmin/nsqadmin.go, `New`), and the `/config/<opt>`
//! view of each option.

use std::time::Duration;

use nsq_go::flag::{self, FlagSet};
use serde_json::Value;

pub use nsq_go::flag::FlagError;
pub use nsq_go::LogLevel;

/// The version nsqadmin reports (`--version`, the UI).
pub const VERSION: &str = nsq_http::version::VERSION;

/// `nsqadmin v1.3.0 (built w/rustc1.95.0)`.
pub fn version_string() -> String {
    nsq_http::version::version_string("nsqadmin")
}

/// Every option of nsqadmin, resolved (flags > config file > defaults).
#[derive(Debug, Clone, PartialEq)]
pub struct AdminOptions {
    /// `--config`: the TOML file the other values may come from.
    pub config: String,
    pub log_level: LogLevel,
    pub log_prefix: String,
    /// Deprecated, no effect.
    pub verbose: bool,
    pub http_address: String,
    /// As given; [`AdminOptions::normalized_base_path`] is what routing uses.
    pub base_path: String,
    pub dev_static_dir: String,
    pub graphite_url: String,
    pub proxy_graphite: bool,
    pub statsd_counter_format: String,
    pub statsd_gauge_format: String,
    pub statsd_prefix: String,
    pub statsd_interval: Duration,
    pub notification_http_endpoint: String,
    pub http_client_connect_timeout: Duration,
    pub http_client_request_timeout: Duration,
    pub http_client_tls_insecure_skip_verify: bool,
    pub http_client_tls_root_ca_file: String,
    pub http_client_tls_cert: String,
    pub http_client_tls_key: String,
    pub allow_config_from_cidr: String,
    pub acl_http_header: String,
    pub admin_users: Vec<String>,
    pub lookupd_http_addresses: Vec<String>,
    pub nsqd_http_addresses: Vec<String>,
    /// Beyond the reference: how often nsqadmin polls `/stats` itself for the charts
    /// (`0` disables the history).
    pub history_interval: Duration,
    /// Beyond the reference: samples kept per topic/channel series.
    pub history_size: i64,
}

impl Default for AdminOptions {
    fn default() -> Self {
        AdminOptions {
            config: String::new(),
            log_level: LogLevel::Info,
            log_prefix: "[nsqadmin] ".to_string(),
            verbose: false,
            http_address: "0.0.0.0:4171".to_string(),
            base_path: "/".to_string(),
            dev_static_dir: String::new(),
            graphite_url: String::new(),
            proxy_graphite: false,
            statsd_counter_format: "stats.counters.%s.count".to_string(),
            statsd_gauge_format: "stats.gauges.%s".to_string(),
            statsd_prefix: "nsq.%s".to_string(),
            statsd_interval: Duration::from_secs(60),
            notification_http_endpoint: String::new(),
            http_client_connect_timeout: Duration::from_secs(2),
            http_client_request_timeout: Duration::from_secs(5),
            http_client_tls_insecure_skip_verify: false,
            http_client_tls_root_ca_file: String::new(),
            http_client_tls_cert: String::new(),
            http_client_tls_key: String::new(),
            allow_config_from_cidr: "127.0.0.1/8".to_string(),
            acl_http_header: "X-Forwarded-User".to_string(),
            admin_users: Vec::new(),
            lookupd_http_addresses: Vec::new(),
            nsqd_http_addresses: Vec::new(),
            history_interval: Duration::from_secs(5),
            history_size: 720,
        }
    }
}

/// What the command line asks for.
pub type ParseOutcome = flag::ParseOutcome<AdminOptions>;

/// Every flag except `--version`, in the reference's order (apps/nsqadmin/main.go,
/// `nsqadminFlagSet`), plus our chart-history flags.
pub static FLAGS: FlagSet<AdminOptions> = FlagSet {
    program: "nsqadmin",
    flags: nsq_go::flags![AdminOptions; @daemon;
        "http-address" => http_address: Str, Some("http_address"),
            "<addr>:<port> to listen on for HTTP clients";
        "base-path" => base_path: Str, Some("base_path"),
            "URL base path";
        "dev-static-dir" => dev_static_dir: Str, Some("dev_static_dir"),
            "(development use only)";
        "graphite-url" => graphite_url: Str, Some("graphite_url"),
            "graphite HTTP address";
        "proxy-graphite" => proxy_graphite: Bool, Some("proxy_graphite"),
            "proxy HTTP requests to graphite";
        "statsd-counter-format" => statsd_counter_format: Str, Some("statsd_counter_format"),
            "The counter stats key formatting applied by the implementation of statsd. If no formatting is desired, set this to an empty string.";
        "statsd-gauge-format" => statsd_gauge_format: Str, Some("statsd_gauge_format"),
            "The gauge stats key formatting applied by the implementation of statsd. If no formatting is desired, set this to an empty string.";
        "statsd-prefix" => statsd_prefix: Str, Some("statsd_prefix"),
            "prefix used for keys sent to statsd (%s for host replacement, must match nsqd)";
        "statsd-interval" => statsd_interval: Dur, Some("statsd_interval"),
            "time interval nsqd is configured to push to statsd (must match nsqd)";
        "notification-http-endpoint" => notification_http_endpoint: Str, Some("notification_http_endpoint"),
            "HTTP endpoint (fully qualified) to which POST notifications of admin actions will be sent";
        "http-client-connect-timeout" => http_client_connect_timeout: Dur, Some("http_client_connect_timeout"),
            "timeout for HTTP connect";
        "http-client-request-timeout" => http_client_request_timeout: Dur, Some("http_client_request_timeout"),
            "timeout for HTTP request";
        "http-client-tls-insecure-skip-verify" => http_client_tls_insecure_skip_verify: Bool, Some("http_client_tls_insecure_skip_verify"),
            "configure the HTTP client to skip verification of TLS certificates";
        "http-client-tls-root-ca-file" => http_client_tls_root_ca_file: Str, Some("http_client_tls_root_ca_file"),
            "path to CA file for the HTTP client";
        "http-client-tls-cert" => http_client_tls_cert: Str, Some("http_client_tls_cert"),
            "path to certificate file for the HTTP client";
        "http-client-tls-key" => http_client_tls_key: Str, Some("http_client_tls_key"),
            "path to key file for the HTTP client";
        "allow-config-from-cidr" => allow_config_from_cidr: Str, Some("allow_config_from_cidr"),
            "A CIDR from which to allow HTTP requests to the /config endpoint";
        "acl-http-header" => acl_http_header: Str, Some("acl_http_header"),
            "HTTP header to check for authenticated admin users";
        "admin-user" => admin_users: StrList, Some("admin_users"),
            "admin user (may be given multiple times; if specified, only these users will be able to perform privileged actions; acl-http-header is used to determine the authenticated user)";
        "lookupd-http-address" => lookupd_http_addresses: StrList, Some("nsqlookupd_http_addresses"),
            "lookupd HTTP address (may be given multiple times)";
        "nsqd-http-address" => nsqd_http_addresses: StrList, Some("nsqd_http_addresses"),
            "nsqd HTTP address (may be given multiple times)";
        "history-interval" => history_interval: Dur, Some("history_interval"),
            "how often nsqadmin polls /stats for its own charts; 0 disables";
        "history-size" => history_size: Int, Some("history_size"),
            "samples kept per topic/channel chart";
    ],
    config_checks: &["log_level"],
};

/// Parses the command line (program name first), then the `--config` file.
pub fn parse_args<I: IntoIterator<Item = String>>(args: I) -> Result<ParseOutcome, FlagError> {
    FLAGS.parse(args, AdminOptions::default())
}

impl AdminOptions {
    /// Empty → `/`; leading `/` added; cleaned; trailing slash removed (nsqadmin/nsqadmin.go,
    /// `New`).
    pub fn normalized_base_path(&self) -> String {
        normalize_base_path(&self.base_path)
    }

    /// The option named by its config-file key as `/config/<opt>` shows it. `None`: unknown
    /// key.
    pub fn config_value(&self, key: &str) -> Option<ConfigValue> {
        if key == "base_path" {
            return Some(ConfigValue::Raw(self.normalized_base_path()));
        }
        let spec = FLAGS.by_config_key(key)?;
        let mut copy = self.clone();
        Some(match (spec.slot)(&mut copy).to_json() {
            Value::String(s) => ConfigValue::Raw(s),
            v => ConfigValue::Json(v),
        })
    }

    /// nsqadmin/nsqadmin.go `New`'s checks that need no I/O beyond reading the TLS files (listening is checked by
    /// the server). The text follows `failed to instantiate nsqadmin - `.
    pub fn validate(&self) -> Result<(), OptionsError> {
        if self.lookupd_http_addresses.is_empty() && self.nsqd_http_addresses.is_empty() {
            return Err(OptionsError::NoUpstream);
        }
        if !self.lookupd_http_addresses.is_empty() && !self.nsqd_http_addresses.is_empty() {
            return Err(OptionsError::BothUpstreams);
        }
        let (cert, key) = (&self.http_client_tls_cert, &self.http_client_tls_key);
        if !cert.is_empty() && key.is_empty() {
            return Err(OptionsError::KeyWithoutCert);
        }
        if cert.is_empty() && !key.is_empty() {
            return Err(OptionsError::CertWithoutKey);
        }
        if !cert.is_empty() {
            for f in [cert, key] {
                if let Err(source) = std::fs::read(f) {
                    return Err(OptionsError::KeyPair {
                        cert: cert.clone(),
                        key: key.clone(),
                        source,
                    });
                }
            }
        }
        let ca = &self.http_client_tls_root_ca_file;
        if !ca.is_empty() {
            let pem = std::fs::read_to_string(ca).map_err(|source| OptionsError::RootCa {
                path: ca.clone(),
                source,
            })?;
            if !pem.contains("-----BEGIN CERTIFICATE-----") {
                return Err(OptionsError::NoCertificates(ca.clone()));
            }
        }
        let resolve = |flag: &'static str, addrs: &[String]| {
            for a in addrs {
                check_host_port(a).map_err(|source| OptionsError::Resolve {
                    flag,
                    addr: a.clone(),
                    source,
                })?;
            }
            Ok(())
        };
        resolve("lookupd-http-address", &self.lookupd_http_addresses)?;
        resolve("nsqd-http-address", &self.nsqd_http_addresses)?;
        if self.proxy_graphite {
            nsq_http::client::parse_url(&self.graphite_url).map_err(|source| {
                OptionsError::GraphiteUrl {
                    url: self.graphite_url.clone(),
                    source,
                }
            })?;
        }
        if !self.allow_config_from_cidr.is_empty() {
            Cidr::parse(&self.allow_config_from_cidr).map_err(|source| OptionsError::Cidr {
                cidr: self.allow_config_from_cidr.clone(),
                source,
            })?;
        }
        Ok(())
    }
}

/// How `/config/<opt>` shows an option.
#[derive(Debug, Clone, PartialEq)]
pub enum ConfigValue {
    /// A string, sent raw.
    Raw(String),
    /// Anything else, as JSON.
    Json(Value),
}

/// An invalid option ([`AdminOptions::validate`]), in the reference's words (nsqadmin/nsqadmin.go,
/// `New`), which follow `failed to instantiate nsqadmin - `.
#[derive(Debug, thiserror::Error)]
pub enum OptionsError {
    #[error("--nsqd-http-address or --lookupd-http-address required")]
    NoUpstream,
    #[error("use --nsqd-http-address or --lookupd-http-address not both")]
    BothUpstreams,
    #[error("--http-client-tls-key must be specified with --http-client-tls-cert")]
    KeyWithoutCert,
    #[error("--http-client-tls-cert must be specified with --http-client-tls-key")]
    CertWithoutKey,
    #[error("failed to LoadX509KeyPair {cert}, {key} - {source}")]
    KeyPair {
        cert: String,
        key: String,
        source: std::io::Error,
    },
    #[error("failed to read TLS root CA file {path} - {source}")]
    RootCa {
        path: String,
        source: std::io::Error,
    },
    #[error("failed to AppendCertsFromPEM {0}")]
    NoCertificates(String),
    #[error("failed to resolve --{flag} ({addr}) - {source}")]
    Resolve {
        flag: &'static str,
        addr: String,
        source: AddrError,
    },
    #[error("failed to parse --graphite-url ({url}) - {source}")]
    GraphiteUrl {
        url: String,
        source: nsq_http::client::UrlError,
    },
    #[error("failed to parse --allow-config-from-cidr ({cidr}) - {source}")]
    Cidr { cidr: String, source: InvalidCidr },
}

/// A `host:port` that `net.ResolveTCPAddr` would refuse, in Go's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddrError {
    #[error("address {0}: missing port in address")]
    MissingPort(String),
    #[error("address {0}: too many colons in address")]
    TooManyColons(String),
    #[error("lookup tcp/{0}: unknown port")]
    UnknownPort(String),
}

/// An `--allow-config-from-cidr` value that is not a CIDR block (Go's `*net.ParseError`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid CIDR address: {0}")]
pub struct InvalidCidr(pub String);

/// `net.ResolveTCPAddr`-like syntax check: `host:port` with a numeric port (the host is not
/// looked up: names may become resolvable later).
fn check_host_port(a: &str) -> Result<(), AddrError> {
    let Some((host, port)) = a.rsplit_once(':') else {
        return Err(AddrError::MissingPort(a.to_string()));
    };
    if host.contains(':') && !(host.starts_with('[') && host.ends_with(']')) {
        return Err(AddrError::TooManyColons(a.to_string()));
    }
    if port.parse::<u16>().is_err() {
        return Err(AddrError::UnknownPort(port.to_string()));
    }
    Ok(())
}

/// The base-path normalisation of nsqadmin/nsqadmin.go, `New`.
pub fn normalize_base_path(p: &str) -> String {
    // A missing leading `/` is added first; cleaning a rooted path does that too.
    nsq_go::url::clean_rooted(p)
}

/// An IPv4 or IPv6 CIDR block (`--allow-config-from-cidr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    addr: std::net::IpAddr,
    bits: u8,
}

impl Cidr {
    pub fn parse(s: &str) -> Result<Cidr, InvalidCidr> {
        let err = || InvalidCidr(s.to_string());
        let (a, b) = s.split_once('/').ok_or_else(err)?;
        let addr: std::net::IpAddr = a.parse().map_err(|_| err())?;
        let bits: u8 = b.parse().map_err(|_| err())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if bits > max || b.starts_with('+') || (b.len() > 1 && b.starts_with('0')) {
            return Err(err());
        }
        Ok(Cidr { addr, bits })
    }

    /// Whether `ip` lies in the block (IPv4-mapped IPv6 addresses count as IPv4).
    pub fn contains(&self, ip: std::net::IpAddr) -> bool {
        use std::net::IpAddr;
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        match (self.addr, ip) {
            (IpAddr::V4(n), IpAddr::V4(i)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.bits)).unwrap_or(0);
                u32::from(n) & mask == u32::from(i) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(i)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.bits))
                    .unwrap_or(0);
                u128::from(n) & mask == u128::from(i) & mask
            }
            _ => false,
        }
    }
}

/// The `-h` text.
pub fn usage() -> String {
    FLAGS.usage(&AdminOptions::default())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference's text plus our two history flags, which [`usage`] must reproduce.
    const USAGE: &str = "Usage of nsqadmin:
  -acl-http-header string
    \tHTTP header to check for authenticated admin users (default \"X-Forwarded-User\")
  -admin-user value
    \tadmin user (may be given multiple times; if specified, only these users will be able to perform privileged actions; acl-http-header is used to determine the authenticated user)
  -allow-config-from-cidr string
    \tA CIDR from which to allow HTTP requests to the /config endpoint (default \"127.0.0.1/8\")
  -base-path string
    \tURL base path (default \"/\")
  -config string
    \tpath to config file
  -dev-static-dir string
    \t(development use only)
  -graphite-url string
    \tgraphite HTTP address
  -history-interval duration
    \thow often nsqadmin polls /stats for its own charts; 0 disables (default 5s)
  -history-size int
    \tsamples kept per topic/channel chart (default 720)
  -http-address string
    \t<addr>:<port> to listen on for HTTP clients (default \"0.0.0.0:4171\")
  -http-client-connect-timeout duration
    \ttimeout for HTTP connect (default 2s)
  -http-client-request-timeout duration
    \ttimeout for HTTP request (default 5s)
  -http-client-tls-cert string
    \tpath to certificate file for the HTTP client
  -http-client-tls-insecure-skip-verify
    \tconfigure the HTTP client to skip verification of TLS certificates
  -http-client-tls-key string
    \tpath to key file for the HTTP client
  -http-client-tls-root-ca-file string
    \tpath to CA file for the HTTP client
  -log-level value
    \tset log verbosity: debug, info, warn, error, or fatal (default INFO)
  -log-prefix string
    \tlog message prefix (default \"[nsqadmin] \")
  -lookupd-http-address value
    \tlookupd HTTP address (may be given multiple times)
  -notification-http-endpoint string
    \tHTTP endpoint (fully qualified) to which POST notifications of admin actions will be sent
  -nsqd-http-address value
    \tnsqd HTTP address (may be given multiple times)
  -proxy-graphite
    \tproxy HTTP requests to graphite
  -statsd-counter-format string
    \tThe counter stats key formatting applied by the implementation of statsd. If no formatting is desired, set this to an empty string. (default \"stats.counters.%s.count\")
  -statsd-gauge-format string
    \tThe gauge stats key formatting applied by the implementation of statsd. If no formatting is desired, set this to an empty string. (default \"stats.gauges.%s\")
  -statsd-interval duration
    \ttime interval nsqd is configured to push to statsd (must match nsqd) (default 1m0s)
  -statsd-prefix string
    \tprefix used for keys sent to statsd (%s for host replacement, must match nsqd) (default \"nsq.%s\")
  -verbose
    \t[deprecated] has no effect, use --log-level
  -version
    \tprint version string
";

    #[test]
    fn usage_is_the_reference_text() {
        assert_eq!(usage(), USAGE);
    }

    fn run(args: &[&str]) -> AdminOptions {
        let mut v = vec!["nsqadmin".to_string()];
        v.extend(args.iter().map(|s| s.to_string()));
        match parse_args(v).unwrap() {
            ParseOutcome::Run(o) => o,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn flags_go_style() {
        let o = run(&[
            "-lookupd-http-address",
            "a:1",
            "--lookupd-http-address=b:2",
            "--proxy-graphite",
            "-statsd-interval=30s",
            "--log-level",
            "debug",
        ]);
        assert_eq!(o.lookupd_http_addresses, vec!["a:1", "b:2"]);
        assert!(o.proxy_graphite);
        assert_eq!(o.statsd_interval, Duration::from_secs(30));
        assert_eq!(o.log_level, LogLevel::Debug);
        let e = parse_args(["x".to_string(), "-bogus".to_string()]).unwrap_err();
        assert_eq!(e.message(), "flag provided but not defined: -bogus");
        assert_eq!(e.exit_code(), 2);
        assert_eq!(
            parse_args(["x".to_string(), "--version".to_string()]).unwrap(),
            ParseOutcome::Version
        );
    }

    #[test]
    fn config_file_precedence() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.toml");
        std::fs::write(
            &p,
            "http_address = \"127.0.0.1:9\"\nnsqd_http_addresses = [\"x:1\", \"y:2\"]\n\
             statsd_interval = 2000\nadmin_users = \"a,b\"\nbase_path = \"admin/\"\n",
        )
        .unwrap();
        let cfg = format!("--config={}", p.display());
        let o = run(&[&cfg, "--http-address=0.0.0.0:1"]);
        assert_eq!(o.http_address, "0.0.0.0:1");
        assert_eq!(o.nsqd_http_addresses, vec!["x:1", "y:2"]);
        assert_eq!(o.statsd_interval, Duration::from_secs(2));
        assert_eq!(o.admin_users, vec!["a", "b"]);
        assert_eq!(o.normalized_base_path(), "/admin");
        std::fs::write(&p, "log_level = \"nope\"\n").unwrap();
        let e = parse_args(vec!["x".to_string(), cfg]).unwrap_err();
        assert_eq!(e.message(), "failed parsing log_level nope");
    }

    #[test]
    fn validation_order() {
        let o = AdminOptions::default();
        assert_eq!(
            o.validate().unwrap_err().to_string(),
            "--nsqd-http-address or --lookupd-http-address required"
        );
        let o = run(&["--nsqd-http-address=a:1", "--lookupd-http-address=b:2"]);
        assert_eq!(
            o.validate().unwrap_err().to_string(),
            "use --nsqd-http-address or --lookupd-http-address not both"
        );
        let o = run(&["--nsqd-http-address=a:1", "--http-client-tls-cert=x"]);
        assert_eq!(
            o.validate().unwrap_err().to_string(),
            "--http-client-tls-key must be specified with --http-client-tls-cert"
        );
        let o = run(&["--nsqd-http-address=nope"]);
        assert!(o
            .validate()
            .unwrap_err()
            .to_string()
            .starts_with("failed to resolve --nsqd-http-address (nope) - "));
        let o = run(&["--nsqd-http-address=a:1", "--allow-config-from-cidr=1.2.3"]);
        assert!(o
            .validate()
            .unwrap_err()
            .to_string()
            .starts_with("failed to parse --allow-config-from-cidr (1.2.3)"));
        run(&["--nsqd-http-address=127.0.0.1:4151"])
            .validate()
            .unwrap();
    }

    #[test]
    fn base_paths_and_cidr() {
        assert_eq!(normalize_base_path(""), "/");
        assert_eq!(normalize_base_path("admin/"), "/admin");
        assert_eq!(normalize_base_path("//a/./b/../c/"), "/a/c");
        let c = Cidr::parse("127.0.0.1/8").unwrap();
        assert!(c.contains("127.9.9.9".parse().unwrap()));
        assert!(c.contains("::ffff:127.0.0.1".parse().unwrap()));
        assert!(!c.contains("10.0.0.1".parse().unwrap()));
        assert!(Cidr::parse("::1/128")
            .unwrap()
            .contains("::1".parse().unwrap()));
        assert!(Cidr::parse("1.2.3.4/33").is_err());
    }

    #[test]
    fn config_values() {
        let o = run(&["--nsqd-http-address=a:1"]);
        assert_eq!(
            o.config_value("http_address"),
            Some(ConfigValue::Raw("0.0.0.0:4171".into()))
        );
        assert_eq!(
            o.config_value("http_client_request_timeout"),
            Some(ConfigValue::Json(Value::from(5_000_000_000i64)))
        );
        assert_eq!(
            o.config_value("log_level"),
            Some(ConfigValue::Json(Value::from(2)))
        );
        assert_eq!(
            o.config_value("admin_users"),
            Some(ConfigValue::Json(serde_json::json!([])))
        );
        assert_eq!(o.config_value("nope"), None);
    }
}
