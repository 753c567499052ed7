//! Tests of nsqd's command line and config file against nsqd-flags.md: defaults, Go `flag`
//! syntax, value parsing, config precedence and coercion, startup validation, `/config` JSON
//! shapes, help and version text.

use std::io::Write;
use std::time::Duration;

use nsqd::options::{
    parse_args_with_defaults, usage_for_hostname, version_string, FlagError, LogLevel, NsqdOptions,
    ParseOutcome, TlsRequired, TlsVersion,
};
use serde_json::json;

const HOST: &str = "vm"; // default_node_id("vm") == 617

fn defaults() -> NsqdOptions {
    NsqdOptions::with_hostname(HOST)
}

fn parse(args: &[&str]) -> Result<ParseOutcome, FlagError> {
    let argv = std::iter::once("nsqd")
        .chain(args.iter().copied())
        .map(String::from);
    parse_args_with_defaults(argv, defaults())
}

fn run(args: &[&str]) -> NsqdOptions {
    match parse(args) {
        Ok(ParseOutcome::Run(o)) => o,
        other => panic!("{args:?} → {other:?}"),
    }
}

fn usage_err(args: &[&str]) -> String {
    match parse(args) {
        Err(FlagError::Usage(m)) => m,
        other => panic!("{args:?} → {other:?}"),
    }
}

fn fatal_err(args: &[&str]) -> String {
    match parse(args) {
        Err(FlagError::Fatal(m)) => m,
        other => panic!("{args:?} → {other:?}"),
    }
}

fn config_file(text: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::Builder::new().suffix(".cfg").tempfile().unwrap();
    f.write_all(text.as_bytes()).unwrap();
    f.flush().unwrap();
    f
}

fn with_config(text: &str, args: &[&str]) -> Result<ParseOutcome, FlagError> {
    let f = config_file(text);
    let path = f.path().to_str().unwrap().to_string();
    let flag = format!("--config={path}");
    let mut all = vec![flag.as_str()];
    all.extend_from_slice(args);
    parse(&all)
}

fn run_with_config(text: &str, args: &[&str]) -> NsqdOptions {
    match with_config(text, args) {
        Ok(ParseOutcome::Run(o)) => o,
        other => panic!("{text:?} {args:?} → {other:?}"),
    }
}

fn s(x: &str) -> String {
    x.to_string()
}

// ---------------------------------------------------------------- defaults

#[test]
fn defaults_match_the_flag_table() {
    let o = run(&[]);
    assert_eq!(o, defaults());
    assert_eq!(o.config, "");
    assert_eq!(o.log_level, LogLevel::Info);
    assert_eq!(o.log_prefix, "[nsqd] ");
    assert!(!o.verbose);
    assert_eq!(o.node_id, 617);
    assert!(!o.worker_id);

    assert_eq!(o.tcp_address, "0.0.0.0:4150");
    assert_eq!(o.http_address, "0.0.0.0:4151");
    assert_eq!(o.https_address, "0.0.0.0:4152");
    assert_eq!(o.broadcast_address, HOST);
    assert_eq!(o.broadcast_tcp_port, 0);
    assert_eq!(o.broadcast_http_port, 0);
    assert!(o.lookupd_tcp_addresses.is_empty());
    assert!(o.auth_http_addresses.is_empty());
    assert_eq!(o.http_client_connect_timeout, Duration::from_secs(2));
    assert_eq!(o.http_client_request_timeout, Duration::from_secs(5));

    assert_eq!(o.data_path, "");
    assert_eq!(o.mem_queue_size, 10000);
    assert_eq!(o.max_bytes_per_file, 104857600);
    assert_eq!(o.sync_every, 2500);
    assert_eq!(o.sync_timeout, Duration::from_secs(2));
    assert_eq!(o.queue_scan_worker_pool_max, 4);
    assert_eq!(o.queue_scan_selection_count, 20);

    assert_eq!(o.msg_timeout, Duration::from_secs(60));
    assert_eq!(o.max_msg_timeout, Duration::from_secs(900));
    assert_eq!(o.max_msg_size, 1048576);
    assert_eq!(o.max_body_size, 5242880);
    assert_eq!(o.max_req_timeout, Duration::from_secs(3600));

    assert_eq!(o.max_heartbeat_interval, Duration::from_secs(60));
    assert_eq!(o.max_rdy_count, 2500);
    assert_eq!(o.max_output_buffer_size, 65536);
    assert_eq!(o.max_output_buffer_timeout, Duration::from_secs(30));
    assert_eq!(o.min_output_buffer_timeout, Duration::from_millis(25));
    assert_eq!(o.output_buffer_timeout, Duration::from_millis(250));
    assert_eq!(o.max_channel_consumers, 0);
    assert!(o.parked_reads);

    assert_eq!(o.statsd_address, "");
    assert_eq!(o.statsd_interval, Duration::from_secs(60));
    assert!(o.statsd_mem_stats);
    assert_eq!(o.statsd_prefix, "nsq.%s");
    assert_eq!(o.statsd_udp_packet_size, 508);
    assert!(!o.statsd_exclude_ephemeral);

    assert!(o.e2e_processing_latency_percentiles.is_empty());
    assert_eq!(
        o.e2e_processing_latency_window_time,
        Duration::from_secs(600)
    );

    assert_eq!(o.tls_cert, "");
    assert_eq!(o.tls_key, "");
    assert_eq!(o.tls_client_auth_policy, "");
    assert_eq!(o.tls_root_ca_file, "");
    assert_eq!(o.tls_required, TlsRequired::False);
    assert_eq!(o.tls_min_version, TlsVersion::Tls10);

    assert!(o.deflate);
    assert_eq!(o.max_deflate_level, 6);
    assert!(o.snappy);

    assert_eq!(o.validate(), Ok(()));
}

#[test]
fn system_defaults_use_the_machine_hostname() {
    let h = nsqd::options::hostname();
    assert!(!h.is_empty());
    let o = NsqdOptions::default();
    assert_eq!(o.broadcast_address, h);
    assert_eq!(o.node_id, nsq_core::message::default_node_id(&h));
}

// ---------------------------------------------------------------- syntax

#[test]
fn single_and_double_dash_and_value_forms_are_equivalent() {
    for args in [
        &["-tcp-address=127.0.0.1:0"][..],
        &["--tcp-address=127.0.0.1:0"],
        &["-tcp-address", "127.0.0.1:0"],
        &["--tcp-address", "127.0.0.1:0"],
    ] {
        assert_eq!(run(args).tcp_address, "127.0.0.1:0", "{args:?}");
    }
}

#[test]
fn client_test_suite_command_lines_parse() {
    let o = run(&[
        "--verbose",
        "--tcp-address=127.0.0.1:0",
        "--http-address=127.0.0.1:0",
        "--data-path=/tmp/x",
        "-broadcast-address=127.0.0.1",
        "--lookupd-tcp-address=127.0.0.1:4160",
    ]);
    assert!(o.verbose);
    assert_eq!(o.tcp_address, "127.0.0.1:0");
    assert_eq!(o.http_address, "127.0.0.1:0");
    assert_eq!(o.data_path, "/tmp/x");
    assert_eq!(o.broadcast_address, "127.0.0.1");
    assert_eq!(o.lookupd_tcp_addresses, vec![s("127.0.0.1:4160")]);
}

#[test]
fn a_value_flag_consumes_the_next_argument_even_if_it_looks_like_a_flag() {
    assert_eq!(run(&["-log-prefix", "-x"]).log_prefix, "-x");
    assert_eq!(run(&["-data-path="]).data_path, "");
    assert_eq!(run(&["-http-address", ""]).http_address, "");
    assert_eq!(run(&["-statsd-prefix=a=b"]).statsd_prefix, "a=b");
}

#[test]
fn parsing_stops_at_the_first_non_flag_argument() {
    let o = run(&[
        "-max-rdy-count=5",
        "positional",
        "-max-rdy-count=6",
        "-bogus",
    ]);
    assert_eq!(o.max_rdy_count, 5);
    let o = run(&["-max-rdy-count=5", "--", "-max-rdy-count=6"]);
    assert_eq!(o.max_rdy_count, 5);
    let o = run(&["-", "-max-rdy-count=6"]);
    assert_eq!(o.max_rdy_count, 2500);
    // A bool flag does not take the next argument, so it stops parsing.
    let o = run(&["-deflate", "false", "-snappy=false"]);
    assert!(o.deflate);
    assert!(o.snappy);
}

#[test]
fn bool_forms() {
    for v in ["1", "t", "T", "true", "TRUE", "True"] {
        assert!(run(&[&format!("-statsd-exclude-ephemeral={v}")]).statsd_exclude_ephemeral);
    }
    for v in ["0", "f", "F", "false", "FALSE", "False"] {
        assert!(!run(&[&format!("--deflate={v}")]).deflate, "{v}");
    }
    assert!(run(&["-statsd-exclude-ephemeral"]).statsd_exclude_ephemeral);
    assert!(run(&["--worker-id"]).worker_id);
    let durable = run(&["--durable"]);
    assert!(durable.durable);
    let eo = durable.engine_options();
    assert!(eo.durable && eo.mem_queue_size == 0);
    assert!(run(&["--sync-every=1"]).engine_options().durable);
    assert!(!defaults().engine_options().durable);
    assert!(defaults().parked_reads);
    assert!(!run(&["--parked-reads=false"]).parked_reads);
    assert!(run(&["-parked-reads=true"]).parked_reads);
    assert_eq!(
        usage_err(&["-deflate=yes"]),
        "invalid boolean value \"yes\" for -deflate: parse error"
    );
}

#[test]
fn repeated_flags_last_wins_and_repeatables_append() {
    assert_eq!(
        run(&["-max-rdy-count=1", "-max-rdy-count=2"]).max_rdy_count,
        2
    );
    let o = run(&[
        "-lookupd-tcp-address=a:1",
        "--lookupd-tcp-address",
        "b:2",
        "-auth-http-address=h:1",
        "-auth-http-address=http://x/auth",
    ]);
    assert_eq!(o.lookupd_tcp_addresses, vec![s("a:1"), s("b:2")]);
    assert_eq!(o.auth_http_addresses, vec![s("h:1"), s("http://x/auth")]);
    // The flag does not split on commas (only the config file does).
    assert_eq!(
        run(&["-lookupd-tcp-address=a:1,b:2"]).lookupd_tcp_addresses,
        vec![s("a:1,b:2")]
    );
}

#[test]
fn go_integer_syntax() {
    assert_eq!(run(&["-mem-queue-size=0x10"]).mem_queue_size, 16);
    assert_eq!(run(&["-mem-queue-size=0o17"]).mem_queue_size, 15);
    assert_eq!(run(&["-mem-queue-size=0b101"]).mem_queue_size, 5);
    assert_eq!(run(&["-mem-queue-size=010"]).mem_queue_size, 8);
    assert_eq!(run(&["-mem-queue-size=-3"]).mem_queue_size, -3);
    assert_eq!(run(&["-node-id", "+12"]).node_id, 12);
    assert_eq!(run(&["-max-deflate-level=0x_9"]).max_deflate_level, 9);
    assert_eq!(
        usage_err(&["-max-rdy-count=abc"]),
        "invalid value \"abc\" for flag -max-rdy-count: parse error"
    );
    assert_eq!(
        usage_err(&["-max-rdy-count=99999999999999999999"]),
        "invalid value \"99999999999999999999\" for flag -max-rdy-count: value out of range"
    );
    assert_eq!(
        usage_err(&["-max-rdy-count=09"]),
        "invalid value \"09\" for flag -max-rdy-count: parse error"
    );
}

#[test]
fn go_duration_syntax() {
    let ms = Duration::from_millis;
    assert_eq!(run(&["-msg-timeout=250ms"]).msg_timeout, ms(250));
    assert_eq!(run(&["-msg-timeout", "1m30s"]).msg_timeout, ms(90_000));
    assert_eq!(
        run(&["-max-req-timeout=1.5h"]).max_req_timeout,
        ms(5_400_000)
    );
    assert_eq!(run(&["-sync-timeout=0"]).sync_timeout, Duration::ZERO);
    assert_eq!(
        run(&["-sync-timeout=100us"]).sync_timeout,
        ms(0) + Duration::from_micros(100)
    );
    assert_eq!(
        run(&["-sync-timeout=7ns"]).sync_timeout,
        Duration::from_nanos(7)
    );
    assert_eq!(
        usage_err(&["-msg-timeout=10"]),
        "invalid value \"10\" for flag -msg-timeout: parse error"
    );
    assert_eq!(
        usage_err(&["-msg-timeout=5 s"]),
        "invalid value \"5 s\" for flag -msg-timeout: parse error"
    );
    assert_eq!(
        usage_err(&["-msg-timeout=-1s"]),
        "invalid value \"-1s\" for flag -msg-timeout: negative durations are not supported"
    );
}

#[test]
fn percentiles_accept_repeats_and_commas_and_sort_descending() {
    let o = run(&[
        "-e2e-processing-latency-percentile=0.5,1.0",
        "--e2e-processing-latency-percentile",
        "0.99",
        "-e2e-processing-latency-percentile=0.95",
    ]);
    assert_eq!(
        o.e2e_processing_latency_percentiles,
        vec![1.0, 0.99, 0.95, 0.5]
    );
    assert_eq!(
        fatal_err(&["-e2e-processing-latency-percentile=0.9,abc"]),
        "Could not parse: abc"
    );
}

#[test]
fn enum_flags() {
    assert_eq!(run(&["-log-level=DEBUG"]).log_level, LogLevel::Debug);
    assert_eq!(run(&["-log-level", "warn"]).log_level, LogLevel::Warn);
    assert_eq!(run(&["-log-level=Error"]).log_level, LogLevel::Error);
    assert_eq!(run(&["-log-level=fatal"]).log_level, LogLevel::Fatal);
    assert_eq!(
        usage_err(&["-log-level=loud"]),
        "invalid value \"loud\" for flag -log-level: invalid log level 'loud' (debug, info, warn, error, fatal)"
    );

    assert_eq!(
        run(&["-tls-min-version=tls1.2"]).tls_min_version,
        TlsVersion::Tls12
    );
    assert_eq!(
        run(&["-tls-min-version=TLS1.3"]).tls_min_version,
        TlsVersion::Tls13
    );
    assert_eq!(
        run(&["-tls-min-version=tls1.1"]).tls_min_version,
        TlsVersion::Tls11
    );
    assert_eq!(
        run(&["-tls-min-version="]).tls_min_version,
        TlsVersion::Tls10
    );
    assert_eq!(
        usage_err(&["-tls-min-version=ssl3.0"]),
        "invalid value \"ssl3.0\" for flag -tls-min-version: unknown tlsVersionOption \"ssl3.0\""
    );
    assert_eq!(
        usage_err(&["-tls-min-version=SSL3.0"]),
        "invalid value \"SSL3.0\" for flag -tls-min-version: unknown tlsVersionOption \"ssl3.0\""
    );
}

#[test]
fn tls_required_is_a_bool_flag_with_a_third_value() {
    assert_eq!(run(&["-tls-required"]).tls_required, TlsRequired::True);
    assert_eq!(run(&["-tls-required=true"]).tls_required, TlsRequired::True);
    assert_eq!(run(&["-tls-required=TRUE"]).tls_required, TlsRequired::True);
    assert_eq!(run(&["-tls-required=1"]).tls_required, TlsRequired::True);
    assert_eq!(
        run(&["-tls-required=false"]).tls_required,
        TlsRequired::False
    );
    assert_eq!(
        run(&["-tls-required=tcp-https"]).tls_required,
        TlsRequired::TcpHttps
    );
    assert_eq!(
        run(&["-tls-required=TCP-HTTPS"]).tls_required,
        TlsRequired::TcpHttps
    );
    // Not consumed as a value: "tcp-https" is a positional argument here.
    assert_eq!(
        run(&["-tls-required", "tcp-https"]).tls_required,
        TlsRequired::True
    );
    assert_eq!(
        usage_err(&["-tls-required=maybe"]),
        "invalid boolean value \"maybe\" for -tls-required: strconv.ParseBool: parsing \"maybe\": invalid syntax"
    );
}

#[test]
fn client_auth_policy_forces_tls_required() {
    let o = run(&["-tls-client-auth-policy=require-verify"]);
    assert_eq!(o.tls_required, TlsRequired::True);
    let o = run(&["-tls-client-auth-policy=require", "-tls-required=tcp-https"]);
    assert_eq!(o.tls_required, TlsRequired::TcpHttps);
}

#[test]
fn syntax_errors() {
    assert_eq!(
        usage_err(&["-bogus"]),
        "flag provided but not defined: -bogus"
    );
    assert_eq!(
        usage_err(&["--bogus=1"]),
        "flag provided but not defined: -bogus"
    );
    assert_eq!(
        usage_err(&["-tcp-address"]),
        "flag needs an argument: -tcp-address"
    );
    assert_eq!(usage_err(&["---x"]), "bad flag syntax: ---x");
    assert_eq!(usage_err(&["-=x"]), "bad flag syntax: -=x");
    let e = parse(&["-bogus"]).unwrap_err();
    assert_eq!(e.exit_code(), 2);
    assert_eq!(e.to_string(), "flag provided but not defined: -bogus");
}

#[test]
fn help_and_version() {
    for a in ["-h", "--h", "-help", "--help"] {
        assert_eq!(parse(&[a]), Ok(ParseOutcome::Help), "{a}");
    }
    assert_eq!(parse(&["-version"]), Ok(ParseOutcome::Version));
    assert_eq!(
        parse(&["--version", "--tcp-address=x"]),
        Ok(ParseOutcome::Version)
    );
    assert_eq!(parse(&["-version=false"]).map(|_| ()), Ok(()));
    assert!(matches!(
        parse(&["-version=false"]),
        Ok(ParseOutcome::Run(_))
    ));
    // Flags are all parsed before -version is acted on.
    assert!(parse(&["-version", "-bogus"]).is_err());
    // -version wins over a broken config file (the file is read after the check).
    assert_eq!(
        parse(&["-version", "-config=/nonexistent/nsqd.cfg"]),
        Ok(ParseOutcome::Version)
    );

    let v = version_string();
    assert!(v.starts_with("nsqd v1.3.0 (built w/rustc"), "{v}");
    assert!(v.ends_with(')'), "{v}");
    let ver = &v["nsqd v1.3.0 (built w/rustc".len()..v.len() - 1];
    assert_eq!(ver.split('.').count(), 3, "{v}");
}

#[test]
fn usage_text() {
    let u = usage_for_hostname("vm");
    assert!(u.starts_with("Usage of nsqd:\n  -auth-http-address value\n"));
    assert!(u.contains(
        "  -broadcast-address string\n    \taddress that will be registered with lookupd (defaults to the OS hostname) (default \"vm\")\n"
    ));
    assert!(u.contains("(int) in range [0,1024) (default is hash of hostname) (default 617)\n"));
    assert!(u.ends_with("  -worker-id\n    \t[deprecated] use --node-id\n"));
    // Every flag appears in the help text exactly once.
    let n = u.lines().filter(|l| l.starts_with("  -")).count();
    assert_eq!(n, 68);
    assert!(
        u.contains("  -max-queue-depth int\n    \tthe most messages a topic or a channel holds")
    );
    assert!(u.contains("  -max-queue-bytes int\n    \tthe most bytes a topic or a channel holds"));
    assert!(u.contains("  -replication-peer value\n    \t<addr>:<port> (TCP) of a peer nsqd"));
    assert!(u.contains("  -replication-secret-file string\n    \tpath to a file holding the replication group's shared secret"));
    assert!(u.contains("  -replication-takeover-timeout duration\n"));
    assert!(u.contains("(default 10s)\n  -replication-max-backlog-bytes int\n"));
    assert!(u.contains("  -durable\n    \tacknowledge a publish only once it is fdatasync'd"));
    assert!(u.contains("  -parked-reads\n    \tread a consumer with most of its RDY window"));
    assert!(!nsqd::options::usage().is_empty());
}

// ---------------------------------------------------------------- config file

#[test]
fn config_file_values_and_renamed_keys() {
    let o = run_with_config(
        r#"
log_level = "warn"
id = 5
tcp_address = "127.0.0.1:5150"
nsqlookupd_tcp_addresses = ["127.0.0.1:4160", "127.0.0.1:4161"]
auth_http_addresses = "a:1,b:2"
http_client_connect_timeout = "3s"
mem_queue_size = 5
msg_timeout = 5000
max_msg_timeout = "20m"
sync_timeout = "1500"
statsd_mem_stats = false
statsd_exclude_ephemeral = "true"
deflate = 0
e2e_processing_latency_percentiles = [0.5, 1.0, 0.99]
e2e_processing_latency_window_time = "1m"
tls_required = "tcp-https"
tls_min_version = "tls1.2"
max_deflate_level = "9"
some_unknown_key = "ignored"
[some_table]
x = 1
"#,
        &[],
    );
    assert_eq!(o.log_level, LogLevel::Warn);
    assert_eq!(o.node_id, 5);
    assert_eq!(o.tcp_address, "127.0.0.1:5150");
    assert_eq!(
        o.lookupd_tcp_addresses,
        vec![s("127.0.0.1:4160"), s("127.0.0.1:4161")]
    );
    assert_eq!(o.auth_http_addresses, vec![s("a:1"), s("b:2")]);
    assert_eq!(o.http_client_connect_timeout, Duration::from_secs(3));
    assert_eq!(o.mem_queue_size, 5);
    assert_eq!(o.msg_timeout, Duration::from_secs(5));
    assert_eq!(o.max_msg_timeout, Duration::from_secs(1200));
    assert_eq!(o.sync_timeout, Duration::from_millis(1500));
    assert!(!o.statsd_mem_stats);
    assert!(o.statsd_exclude_ephemeral);
    assert!(!o.deflate);
    // Config order is kept (no sorting).
    assert_eq!(o.e2e_processing_latency_percentiles, vec![0.5, 1.0, 0.99]);
    assert_eq!(
        o.e2e_processing_latency_window_time,
        Duration::from_secs(60)
    );
    assert_eq!(o.tls_required, TlsRequired::TcpHttps);
    assert_eq!(o.tls_min_version, TlsVersion::Tls12);
    assert_eq!(o.max_deflate_level, 9);
    // Untouched options keep their defaults.
    assert_eq!(o.max_rdy_count, 2500);
    assert_eq!(o.http_address, "0.0.0.0:4151");
}

#[test]
fn flags_beat_config_beats_defaults() {
    // Observed in the reference.
    let o = run_with_config("max_rdy_count = \"77\"", &["--max-rdy-count=88"]);
    assert_eq!(o.max_rdy_count, 88);
    let o = run_with_config("max_rdy_count = \"77\"", &[]);
    assert_eq!(o.max_rdy_count, 77);
    let o = run_with_config("log_level = \"warn\"", &["--log-level=info"]);
    assert_eq!(o.log_level, LogLevel::Info);
    // A flag equal to its default still wins.
    let o = run_with_config(
        "mem_queue_size = 1\ndeflate = false",
        &["-mem-queue-size=10000", "-deflate"],
    );
    assert_eq!(o.mem_queue_size, 10000);
    assert!(o.deflate);
    // A repeatable flag replaces the config list entirely.
    let o = run_with_config(
        "nsqlookupd_tcp_addresses = [\"c:1\"]",
        &["-lookupd-tcp-address=f:1"],
    );
    assert_eq!(o.lookupd_tcp_addresses, vec![s("f:1")]);
    // The flag may come after the config flag or before it.
    let o = match parse(&["-max-rdy-count=3"]) {
        Ok(ParseOutcome::Run(o)) => o,
        other => panic!("{other:?}"),
    };
    assert_eq!(o.max_rdy_count, 3);
}

#[test]
fn config_tls_forms_and_policy() {
    let o = run_with_config("tls_required = true", &[]);
    assert_eq!(o.tls_required, TlsRequired::True);
    let o = run_with_config("tls_required = \"false\"", &[]);
    assert_eq!(o.tls_required, TlsRequired::False);
    let o = run_with_config("tls_min_version = \"\"", &["-tls-min-version=tls1.3"]);
    assert_eq!(o.tls_min_version, TlsVersion::Tls13);
    let o = run_with_config("tls_min_version = \"\"", &[]);
    assert_eq!(o.tls_min_version, TlsVersion::Tls10);
    let o = run_with_config("tls_client_auth_policy = \"require\"", &[]);
    assert_eq!(o.tls_required, TlsRequired::True);
}

#[test]
fn config_errors() {
    let err = |text: &str, args: &[&str]| match with_config(text, args) {
        Err(FlagError::Fatal(m)) => m,
        other => panic!("{text:?} → {other:?}"),
    };
    assert_eq!(
        err("log_level = \"loud\"", &[]),
        "failed parsing log_level loud"
    );
    // Checked even when the flag is given, as the reference does.
    assert_eq!(
        err("log_level = \"loud\"", &["-log-level=info"]),
        "failed parsing log_level loud"
    );
    assert_eq!(
        err("tls_required = \"x\"", &[]),
        "failed parsing tls_required x"
    );
    assert_eq!(
        err("tls_min_version = \"ssl3.0\"", &[]),
        "failed parsing tls_min_version ssl3.0"
    );
    assert_eq!(
        err("max_rdy_count = \"abc\"", &[]),
        "option resolution failed to coerce abc for max-rdy-count - strconv.ParseInt: parsing \"abc\": invalid syntax"
    );
    assert_eq!(
        err("msg_timeout = \"5x\"", &[]),
        "option resolution failed to coerce 5x for msg-timeout - time: unknown unit \"x\" in duration \"5x\""
    );
    let m = err("this is not toml", &[]);
    assert!(
        m.starts_with("failed to load config file ") && m.contains(" - toml: line 1"),
        "{m}"
    );
    // An invalid value is fine when the flag overrides it.
    assert!(with_config("max_rdy_count = \"abc\"", &["-max-rdy-count=1"]).is_ok());

    let m = fatal_err(&["-config=/nonexistent/nsqd.cfg"]);
    assert_eq!(
        m,
        "failed to load config file /nonexistent/nsqd.cfg - open /nonexistent/nsqd.cfg: no such file or directory"
    );
    assert_eq!(FlagError::Fatal(m).exit_code(), 1);
}

// ---------------------------------------------------------------- validation

#[test]
fn startup_validation_messages() {
    let check = |args: &[&str]| run(args).validate().map_err(|e| e.to_string());
    assert_eq!(
        check(&["-max-deflate-level=0"]),
        Err(s("--max-deflate-level must be [1,9]"))
    );
    assert_eq!(
        check(&["-max-deflate-level=10"]),
        Err(s("--max-deflate-level must be [1,9]"))
    );
    assert_eq!(check(&["-max-deflate-level=1"]), Ok(()));
    assert_eq!(check(&["-max-deflate-level=9"]), Ok(()));
    assert_eq!(
        check(&["-node-id=1024"]),
        Err(s("--node-id must be [0,1024)"))
    );
    assert_eq!(
        check(&["-node-id=-1"]),
        Err(s("--node-id must be [0,1024)"))
    );
    assert_eq!(check(&["-node-id=0"]), Ok(()));
    assert_eq!(check(&["-node-id=1023"]), Ok(()));
    let tls = "cannot require TLS client connections without TLS key and cert";
    assert_eq!(check(&["-tls-required"]), Err(s(tls)));
    assert_eq!(check(&["-tls-required=tcp-https"]), Err(s(tls)));
    assert_eq!(check(&["-tls-client-auth-policy=require"]), Err(s(tls)));
    assert_eq!(
        check(&["-tls-required", "-tls-cert=c.pem", "-tls-key=k.pem"]),
        Ok(())
    );
    assert_eq!(
        check(&["-e2e-processing-latency-percentile=1.5"]),
        Err(s("invalid E2E processing latency percentile: 1.5"))
    );
    assert_eq!(
        check(&["-e2e-processing-latency-percentile=0"]),
        Err(s("invalid E2E processing latency percentile: 0"))
    );
    assert_eq!(check(&["-e2e-processing-latency-percentile=1,0.5"]), Ok(()));
    // Order: deflate level is reported before the node id.
    assert_eq!(
        check(&["-node-id=5000", "-max-deflate-level=0"]),
        Err(s("--max-deflate-level must be [1,9]"))
    );
    // Not validated by the reference either.
    assert_eq!(
        check(&["-msg-timeout=1h", "-max-msg-timeout=1m", "-max-rdy-count=0"]),
        Ok(())
    );
}

/// docs/replication.md, Flags: defaults, repeatable peers, the config file's names and the
/// startup checks with their messages (each a `FATAL: …` at startup).
#[test]
fn replication_flags() {
    let o = defaults();
    assert_eq!(o.replicas, 1);
    assert!(o.replication_peers.is_empty());
    assert!(!o.replication_enabled());
    assert_eq!(o.replication_takeover_timeout, Duration::from_secs(30));
    assert_eq!(o.replication_ack_timeout, Duration::from_secs(10));
    assert_eq!(o.replication_max_backlog_bytes, 10 << 30);

    let o = run(&[
        "--replicas=2",
        "--replication-peer=10.0.0.6:4150",
        "--replication-peer",
        "b:4150",
        "--replication-takeover-timeout=1m30s",
        "--replication-ack-timeout=500ms",
        "--replication-max-backlog-bytes=1048576",
    ]);
    assert_eq!(o.replicas, 2);
    assert_eq!(o.replication_peers, vec![s("10.0.0.6:4150"), s("b:4150")]);
    assert!(o.replication_enabled());
    assert_eq!(o.replication_takeover_timeout, Duration::from_secs(90));
    assert_eq!(o.replication_ack_timeout, Duration::from_millis(500));
    assert_eq!(o.replication_max_backlog_bytes, 1 << 20);
    assert_eq!(o.validate(), Ok(()));

    let o = run_with_config(
        "replicas = 3\nreplication_peer = [\"a:1\", \"b:2\"]\nreplication_takeover_timeout = \"5s\"\nreplication_ack_timeout = \"2s\"\nreplication_max_backlog_bytes = 4096",
        &[],
    );
    assert_eq!(o.replicas, 3);
    assert_eq!(o.replication_peers, vec![s("a:1"), s("b:2")]);
    assert_eq!(o.replication_takeover_timeout, Duration::from_secs(5));
    assert_eq!(o.replication_ack_timeout, Duration::from_secs(2));
    assert_eq!(o.replication_max_backlog_bytes, 4096);
    assert_eq!(o.validate(), Ok(()));
    assert_eq!(o.get_json("replicas"), Some(json!(3)));
    assert_eq!(o.get_json("replication_peer"), Some(json!(["a:1", "b:2"])));
    assert_eq!(
        o.get_json("replication_ack_timeout"),
        Some(json!(2_000_000_000i64))
    );

    let check = |args: &[&str]| run(args).validate().map_err(|e| e.to_string());
    assert_eq!(
        check(&["--replicas=0"]),
        Err(s("--replicas must be >= 1 (got 0)"))
    );
    assert_eq!(
        check(&["--replicas=3", "--replication-peer=a:1"]),
        Err(s("--replicas=3 needs at least 2 --replication-peer"))
    );
    assert_eq!(
        check(&["--replicas=2"]),
        Err(s("--replicas=2 needs at least 1 --replication-peer"))
    );
    // --replicas=1 with peers: hosts backlogs for them, publishes acknowledged as today.
    assert_eq!(check(&["--replicas=1", "--replication-peer=a:1"]), Ok(()));
    // With an nsqlookupd the peers are found through it: no count of peers is needed, and
    // replication is on without a --replication-peer (with --replicas >= 2 only).
    let lookupd = "--lookupd-tcp-address=l:4160";
    assert_eq!(check(&["--replicas=3", lookupd]), Ok(()));
    assert_eq!(
        check(&["--replicas=3", "--replication-peer=a:1", lookupd]),
        Ok(())
    );
    assert!(run(&["--replicas=2", lookupd]).replication_enabled());
    assert!(!run(&["--replicas=1", lookupd]).replication_enabled());
    assert!(!run(&["--replicas=2"]).replication_enabled());
    assert!(run(&["--replication-peer=a:1"]).replication_enabled());
    assert_eq!(
        check(&["--replication-peer=nohost"]),
        Err(s("--replication-peer must be host:port (got \"nohost\")"))
    );
    assert_eq!(
        check(&["--replication-peer=h:0"]),
        Err(s("--replication-peer must be host:port (got \"h:0\")"))
    );
    assert_eq!(check(&["--replication-peer=[::1]:4150"]), Ok(()));
    assert_eq!(
        check(&["--replication-peer=a:1", "--replication-takeover-timeout=0"]),
        Err(s("--replication-takeover-timeout must be > 0"))
    );
    assert_eq!(
        check(&["--replication-peer=a:1", "--replication-ack-timeout=0s"]),
        Err(s("--replication-ack-timeout must be > 0"))
    );
    assert_eq!(
        check(&["--replication-max-backlog-bytes=0"]),
        Err(s("--replication-max-backlog-bytes must be > 0"))
    );
}

// ---------------------------------------------------------------- /config JSON

#[test]
fn config_json_shapes() {
    let o = defaults();
    let g = |k: &str| o.get_json(k);
    assert_eq!(g("id"), Some(json!(617)));
    assert_eq!(g("log_level"), Some(json!(2)));
    assert_eq!(g("log_prefix"), Some(json!("[nsqd] ")));
    assert_eq!(g("tcp_address"), Some(json!("0.0.0.0:4150")));
    assert_eq!(g("broadcast_address"), Some(json!("vm")));
    assert_eq!(g("nsqlookupd_tcp_addresses"), Some(json!([])));
    assert_eq!(
        g("http_client_connect_timeout"),
        Some(json!(2_000_000_000i64))
    );
    assert_eq!(g("data_path"), Some(json!("")));
    assert_eq!(g("mem_queue_size"), Some(json!(10000)));
    assert_eq!(g("msg_timeout"), Some(json!(60_000_000_000i64)));
    assert_eq!(g("max_req_timeout"), Some(json!(3_600_000_000_000i64)));
    assert_eq!(g("min_output_buffer_timeout"), Some(json!(25_000_000)));
    assert_eq!(g("statsd_mem_stats"), Some(json!(true)));
    assert_eq!(g("statsd_exclude_ephemeral"), Some(json!(false)));
    assert_eq!(g("parked_reads"), Some(json!(true)));
    assert_eq!(
        g("e2e_processing_latency_window_time"),
        Some(json!(600_000_000_000i64))
    );
    assert_eq!(g("e2e_processing_latency_percentiles"), Some(json!([])));
    assert_eq!(g("tls_required"), Some(json!(0)));
    assert_eq!(g("tls_min_version"), Some(json!(769)));
    assert_eq!(g("max_deflate_level"), Some(json!(6)));
    // Not readable: no config key.
    for k in [
        "node_id",
        "verbose",
        "worker_id",
        "config",
        "version",
        "queue_scan_interval",
        "client_timeout",
        "bogus",
    ] {
        assert_eq!(g(k), None, "{k}");
    }

    let o = run(&[
        "-e2e-processing-latency-percentile=0.99,1.0",
        "-lookupd-tcp-address=127.0.0.1:4160",
        "-tls-required=tcp-https",
        "-tls-min-version=tls1.3",
        "-log-level=debug",
    ]);
    assert_eq!(
        serde_json::to_string(&o.get_json("e2e_processing_latency_percentiles").unwrap()).unwrap(),
        "[1,0.99]"
    );
    assert_eq!(
        o.get_json("nsqlookupd_tcp_addresses"),
        Some(json!(["127.0.0.1:4160"]))
    );
    assert_eq!(o.get_json("tls_required"), Some(json!(1)));
    assert_eq!(o.get_json("tls_min_version"), Some(json!(772)));
    assert_eq!(o.get_json("log_level"), Some(json!(1)));
    let o = run(&["-tls-client-auth-policy=require"]);
    assert_eq!(o.get_json("tls_required"), Some(json!(2)));
}

// ---------------------------------------------------------------- runtime helpers

#[test]
fn listeners_fill_broadcast_ports_and_expand_the_statsd_prefix() {
    let mut o = run(&["-broadcast-address=myhost"]);
    o.apply_listeners(Some(43214), Some(43215));
    assert_eq!(o.broadcast_tcp_port, 43214);
    assert_eq!(o.broadcast_http_port, 43215);
    assert_eq!(o.statsd_prefix, "nsq.myhost_43215.");
    assert_eq!(
        o.get_json("statsd_prefix"),
        Some(json!("nsq.myhost_43215."))
    );

    let mut o = run(&[
        "-broadcast-address=10.0.0.1",
        "-broadcast-http-port=80",
        "-broadcast-tcp-port=81",
        "-statsd-prefix=stats.%s.nsqd.",
    ]);
    o.apply_listeners(Some(1), Some(2));
    assert_eq!((o.broadcast_tcp_port, o.broadcast_http_port), (81, 80));
    assert_eq!(o.statsd_prefix, "stats.10_0_0_1_80.nsqd.");

    let mut o = run(&["-statsd-prefix="]);
    o.apply_listeners(Some(1), Some(2));
    assert_eq!(o.statsd_prefix, "");
}

#[test]
fn engine_options_mapping() {
    let o = run(&[
        "-data-path=/tmp/nsq",
        "-mem-queue-size=7",
        "-max-bytes-per-file=1024",
        "-sync-every=3",
        "-sync-timeout=1s",
        "-max-msg-size=99",
        "-max-msg-timeout=2m",
        "-max-channel-consumers=4",
        "-node-id=9",
        "-queue-scan-selection-count=11",
        "-queue-scan-worker-pool-max=2",
        "-e2e-processing-latency-percentile=0.9,0.99",
        "-e2e-processing-latency-window-time=30s",
    ]);
    let e = o.engine_options();
    assert_eq!(e.data_path, std::path::PathBuf::from("/tmp/nsq"));
    assert_eq!(e.mem_queue_size, 7);
    assert_eq!(e.max_bytes_per_file, 1024);
    assert_eq!(e.sync_every, 3);
    assert_eq!(e.sync_timeout, Duration::from_secs(1));
    assert_eq!(e.max_msg_size, 99);
    assert_eq!(e.max_msg_timeout, Duration::from_secs(120));
    assert_eq!(e.max_channel_consumers, 4);
    assert_eq!(e.node_id, 9);
    assert_eq!(e.queue_scan.selection_count, 11);
    assert_eq!(e.queue_scan.worker_pool_max, 2);
    assert_eq!(e.queue_scan.interval, Duration::from_millis(100));
    assert_eq!(e.queue_scan.refresh_interval, Duration::from_secs(5));
    assert_eq!(e.queue_scan.dirty_percent, 0.25);
    assert_eq!(e.e2e_percentiles, vec![0.99, 0.9]);
    assert_eq!(e.e2e_window, Duration::from_secs(30));

    let e = run(&["-mem-queue-size=-1"]).engine_options();
    assert_eq!(e.mem_queue_size, 0);
    assert_eq!(e.data_path, std::path::PathBuf::from("."));
}
