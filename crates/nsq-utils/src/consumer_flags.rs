//! The consumer flags nsq_tail, nsq_to_file, nsq_to_http and nsq_to_nsq all declare (nsq's
//! apps/nsq_tail/nsq_tail.go, apps/nsq_to_file/nsq_to_file.go, apps/nsq_to_http/nsq_to_http.go
//! and apps/nsq_to_nsq/nsq_to_nsq.go, each in its own `main`/`flagSet`): `--channel`,
//! `--max-in-flight`, `--nsqd-tcp-address`, `--lookupd-http-address` and `--consumer-opt`.
//!
//! [`ConsumerFlags`] holds them, [`consumer_flags!`](macro@crate::consumer_flags) declares
//! them into a tool's flag table, [`ConsumerFlags::check_addresses`] is the "one of the two
//! address kinds" check every tool makes, [`ConsumerFlags::config`] the go-nsq config each
//! tool builds from them (with go-nsq's default logger, which no tool replaces) and
//! [`ConsumerFlags::connect`] the connecting of one consumer.
//!
//! `--topic` is not among them: nsq_to_http takes one topic (`flag.String`), the others
//! several (`StringArray`), with different usage texts, so each tool declares its own.

use nsq_client::{Config, ConfigError, Consumer};
use nsq_go::flag::Value;

use crate::ConfigFlag;

/// The usage texts of the shared flags that differ between the tools.
#[derive(Debug, Clone, Copy)]
pub struct Usage {
    /// `--channel`: nsq_tail writes `NSQ channel`.
    pub channel: &'static str,
    /// `--consumer-opt`: nsq_to_nsq writes `see http://…`.
    pub consumer_opt: &'static str,
}

/// The usage texts most of the tools use.
pub const USAGE: Usage = Usage {
    channel: "nsq channel",
    consumer_opt: "option to passthrough to nsq.Consumer (may be given multiple times, http://godoc.org/github.com/nsqio/go-nsq#Config)",
};

/// Declares a flag table like `nsq_go::flags!` that starts with the consumer flags of
/// [`ConsumerFlags`] held in the field `$field` of the options struct:
/// `consumer_flags![Options; consumer, USAGE; "n" => total: Int, None, "…"; …]`.
/// The usage output is sorted by name, so where they stand in the table does not show.
#[macro_export]
macro_rules! consumer_flags {
    ($O:ty; $field:ident, $usage:expr; $($rest:tt)*) => {
        $crate::__nsq_go::flags![$O;
            "channel" => $field.channel: Str, None, $usage.channel;
            "max-in-flight" => $field.max_in_flight: Int, None,
                "max number of messages to allow in flight";
            "nsqd-tcp-address" => $field.nsqd_tcp_addresses: StrList, None,
                "nsqd TCP address (may be given multiple times)";
            "lookupd-http-address" => $field.lookupd_http_addresses: StrList, None,
                "lookupd HTTP address (may be given multiple times)";
            "consumer-opt" => $field.consumer_opt: Custom, None, $usage.consumer_opt;
            $($rest)*
        ]
    };
}

/// `--channel`, `--max-in-flight`, `--nsqd-tcp-address`, `--lookupd-http-address` and
/// `--consumer-opt` as parsed.
#[derive(Debug, Clone)]
pub struct ConsumerFlags {
    pub channel: String,
    pub max_in_flight: i64,
    pub nsqd_tcp_addresses: Vec<String>,
    pub lookupd_http_addresses: Vec<String>,
    pub consumer_opt: ConsumerOpt,
}

/// `--consumer-opt key[,value]`, applied to a go-nsq config as it is parsed.
#[derive(Debug, Clone, Default)]
pub struct ConsumerOpt {
    pub flag: ConfigFlag,
    /// nsq_to_file collects the values as strings and applies them after parsing without
    /// looking at the error (nsq_to_file.go, `main`: `cfgFlag.Set(opt)`), so an invalid one
    /// is skipped there instead of refused as the other tools' `nsq.ConfigFlag` does.
    pub ignore_invalid: bool,
}

impl Value for ConsumerOpt {
    fn set(&mut self, text: &str) -> Result<(), nsq_go::flag::ValueError> {
        match self.flag.apply(text) {
            Err(e) if !self.ignore_invalid => Err(e.into()),
            _ => Ok(()),
        }
    }

    fn usage_default(&self) -> Option<String> {
        self.flag.usage_default()
    }

    fn to_json(&self) -> serde_json::Value {
        self.flag.to_json()
    }
}

/// Neither or both of `--nsqd-tcp-address` and `--lookupd-http-address` (every tool's
/// `main` refuses both cases in this order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    /// nsq_to_file.go's text has a period at the end; that tool writes its own.
    #[error("--nsqd-tcp-address or --lookupd-http-address required")]
    Missing,
    #[error("use --nsqd-tcp-address or --lookupd-http-address not both")]
    Both,
}

impl ConsumerFlags {
    /// The defaults: `channel`, `--max-in-flight` 200, no addresses, go-nsq's default config.
    pub fn new(channel: &str) -> Self {
        ConsumerFlags {
            channel: channel.to_string(),
            max_in_flight: 200,
            nsqd_tcp_addresses: Vec::new(),
            lookupd_http_addresses: Vec::new(),
            consumer_opt: ConsumerOpt::default(),
        }
    }

    /// Exactly one of `--nsqd-tcp-address` and `--lookupd-http-address` must be given.
    pub fn check_addresses(&self) -> Result<(), AddressError> {
        match (
            self.nsqd_tcp_addresses.is_empty(),
            self.lookupd_http_addresses.is_empty(),
        ) {
            (true, true) => Err(AddressError::Missing),
            (false, false) => Err(AddressError::Both),
            _ => Ok(()),
        }
    }

    /// The consumer config: `--consumer-opt` applied to go-nsq's defaults, then the tool's
    /// user agent and `--max-in-flight` over them (the tools set `cfg.UserAgent` and
    /// `cfg.MaxInFlight` after the options, so those win). A negative `--max-in-flight` is
    /// the error go-nsq's `NewConsumer` returns from `config.Validate()`
    /// (`invalid MaxInFlight ! -1 < 0`), which each tool reports where it reports that one.
    pub fn config(&self, tool: &str) -> Result<Config, ConfigError> {
        let mut cfg = self.consumer_opt.flag.0.clone();
        cfg.user_agent = crate::user_agent(tool);
        cfg.max_in_flight = Config::max_in_flight_from(self.max_in_flight)?;
        cfg.logger = Some(crate::go_nsq_logger());
        Ok(cfg)
    }

    /// Connects `consumer` to every `--nsqd-tcp-address`, then every
    /// `--lookupd-http-address` (go-nsq's `ConnectToNSQDs` / `ConnectToNSQLookupds`); the
    /// first failure is returned.
    pub async fn connect(&self, consumer: &Consumer) -> Result<(), nsq_client::Error> {
        for addr in &self.nsqd_tcp_addresses {
            consumer.connect_to_nsqd(addr.clone()).await?;
        }
        for addr in &self.lookupd_http_addresses {
            consumer.connect_to_lookupd(addr.clone())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nsq_go::flag::{FlagSet, ParseOutcome};

    #[derive(Debug, Clone)]
    struct Opts {
        consumer: ConsumerFlags,
        n: i64,
    }

    static SET: FlagSet<Opts> = FlagSet {
        program: "demo",
        flags: crate::consumer_flags![Opts; consumer, USAGE;
            "n" => n: Int, None, "how many";
        ],
        config_checks: &[],
    };

    fn parse(set: &FlagSet<Opts>, defaults: Opts, args: &[&str]) -> Result<Opts, String> {
        let mut v = vec!["demo".to_string()];
        v.extend(args.iter().map(|s| s.to_string()));
        match set.parse(v, defaults) {
            Ok(ParseOutcome::Run(o)) => Ok(o),
            Ok(other) => panic!("{other:?}"),
            Err(e) => Err(e.to_string()),
        }
    }

    fn defaults() -> Opts {
        Opts {
            consumer: ConsumerFlags::new("ch"),
            n: 0,
        }
    }

    #[test]
    fn declares_the_shared_flags_with_their_usage() {
        assert_eq!(
            SET.usage(&defaults()),
            "Usage of demo:
  -channel string
    \tnsq channel (default \"ch\")
  -consumer-opt value
    \toption to passthrough to nsq.Consumer (may be given multiple times, http://godoc.org/github.com/nsqio/go-nsq#Config)
  -lookupd-http-address value
    \tlookupd HTTP address (may be given multiple times)
  -max-in-flight int
    \tmax number of messages to allow in flight (default 200)
  -n int
    \thow many
  -nsqd-tcp-address value
    \tnsqd TCP address (may be given multiple times)
  -version
    \tprint version string
"
        );
    }

    #[test]
    fn parses_into_the_nested_struct_and_builds_the_config() {
        let o = parse(
            &SET,
            defaults(),
            &[
                "--channel=c",
                "--max-in-flight=7",
                "--nsqd-tcp-address=a:1",
                "--nsqd-tcp-address=b:2",
                "--consumer-opt=max_attempts,9",
                "--consumer-opt=max_in_flight,3",
                "-n=4",
            ],
        )
        .unwrap();
        assert_eq!(o.n, 4);
        assert_eq!(o.consumer.channel, "c");
        assert_eq!(o.consumer.nsqd_tcp_addresses, ["a:1", "b:2"]);
        assert_eq!(o.consumer.check_addresses(), Ok(()));
        let cfg = o.consumer.config("nsq_tail").unwrap();
        assert_eq!(cfg.max_attempts, 9);
        // --max-in-flight wins over the consumer option.
        assert_eq!(cfg.max_in_flight, 7);
        assert_eq!(cfg.user_agent, "nsq_tail/1.3.0 go-nsq/1.1.0");
        let mut o = o;
        o.consumer.max_in_flight = -5;
        assert_eq!(
            o.consumer.config("x").unwrap_err().to_string(),
            "invalid MaxInFlight ! -5 < 0"
        );
    }

    #[test]
    fn invalid_consumer_opt_refused_or_ignored() {
        assert_eq!(
            parse(&SET, defaults(), &["--consumer-opt=bogus,1"]).unwrap_err(),
            "invalid value \"bogus,1\" for flag -consumer-opt: invalid option bogus"
        );
        let mut lenient = defaults();
        lenient.consumer.consumer_opt.ignore_invalid = true;
        let o = parse(
            &SET,
            lenient,
            &["--consumer-opt=bogus,1", "--consumer-opt=max_attempts,2"],
        )
        .unwrap();
        assert_eq!(o.consumer.config("x").unwrap().max_attempts, 2);
    }

    #[test]
    fn address_checks() {
        let mut c = ConsumerFlags::new("ch");
        assert_eq!(c.check_addresses(), Err(AddressError::Missing));
        c.lookupd_http_addresses.push("l:1".into());
        assert_eq!(c.check_addresses(), Ok(()));
        c.nsqd_tcp_addresses.push("n:1".into());
        assert_eq!(
            c.check_addresses().unwrap_err().to_string(),
            "use --nsqd-tcp-address or --lookupd-http-address not both"
        );
    }
}
