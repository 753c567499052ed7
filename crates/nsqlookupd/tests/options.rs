//! Flag and config-file parsing (apps/nsqlookupd/main.go, nsqlookupd/options.go): Go `flag` semantics, the TOML
//! coercions and the precedence flag > config file > default.

use std::time::Duration;

use nsqlookupd::options::{
    parse_args_with_defaults, usage_for_hostname, version_string, FlagError, LogLevel,
    NsqlookupdOptions, ParseOutcome,
};

fn parse(args: &[&str]) -> Result<ParseOutcome, FlagError> {
    let mut v = vec!["nsqlookupd".to_string()];
    v.extend(args.iter().map(|s| s.to_string()));
    parse_args_with_defaults(v, NsqlookupdOptions::with_hostname("host1"))
}

fn run(args: &[&str]) -> NsqlookupdOptions {
    match parse(args).unwrap() {
        ParseOutcome::Run(o) => o,
        other => panic!("{other:?}"),
    }
}

#[test]
fn defaults() {
    let o = run(&[]);
    assert_eq!(o, NsqlookupdOptions::with_hostname("host1"));
    assert_eq!(o.tcp_address, "0.0.0.0:4160");
    assert_eq!(o.http_address, "0.0.0.0:4161");
    assert_eq!(o.broadcast_address, "host1");
    assert_eq!(o.log_prefix, "[nsqlookupd] ");
    assert_eq!(o.log_level, LogLevel::Info);
    assert_eq!(o.inactive_producer_timeout, Duration::from_secs(300));
    assert_eq!(o.tombstone_lifetime, Duration::from_secs(45));
}

#[test]
fn go_flag_forms() {
    let o = run(&[
        "-tcp-address",
        "127.0.0.1:1",
        "--http-address=127.0.0.1:2",
        "--broadcast-address",
        "-weird",
        "-inactive-producer-timeout=1m30s",
        "--tombstone-lifetime",
        "300ms",
        "-log-level=WARN",
        "-verbose",
        "-log-prefix=",
        "positional",
        "-bogus-after-positional",
    ]);
    assert_eq!(o.tcp_address, "127.0.0.1:1");
    assert_eq!(o.http_address, "127.0.0.1:2");
    assert_eq!(o.broadcast_address, "-weird");
    assert_eq!(o.inactive_producer_timeout, Duration::from_secs(90));
    assert_eq!(o.tombstone_lifetime, Duration::from_millis(300));
    assert_eq!(o.log_level, LogLevel::Warn);
    assert!(o.verbose);
    assert_eq!(o.log_prefix, "");
    assert_eq!(parse(&["-version"]).unwrap(), ParseOutcome::Version);
    assert_eq!(parse(&["--version=true"]).unwrap(), ParseOutcome::Version);
    assert!(matches!(
        parse(&["-version=false"]).unwrap(),
        ParseOutcome::Run(_)
    ));
    assert_eq!(parse(&["-h"]).unwrap(), ParseOutcome::Help);
    assert_eq!(parse(&["--help"]).unwrap(), ParseOutcome::Help);
}

#[test]
fn flag_errors() {
    let usage = |args: &[&str]| match parse(args) {
        Err(FlagError::Usage(m)) => m,
        other => panic!("{other:?}"),
    };
    assert_eq!(usage(&["-bogus"]), "flag provided but not defined: -bogus");
    assert_eq!(
        usage(&["-tcp-address"]),
        "flag needs an argument: -tcp-address"
    );
    assert_eq!(usage(&["---x"]), "bad flag syntax: ---x");
    assert_eq!(
        usage(&["-tombstone-lifetime=10"]),
        "invalid value \"10\" for flag -tombstone-lifetime: parse error"
    );
    assert_eq!(
        usage(&["-verbose=yes"]),
        "invalid boolean value \"yes\" for -verbose: parse error"
    );
    assert_eq!(
        usage(&["-log-level", "loud"]),
        "invalid value \"loud\" for flag -log-level: invalid log level 'loud' (debug, info, warn, error, fatal)"
    );
    assert_eq!(FlagError::Usage(String::new()).exit_code(), 2);
    assert_eq!(FlagError::Fatal(String::new()).exit_code(), 1);
}

#[test]
fn config_file_precedence_and_coercion() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.cfg");
    std::fs::write(
        &path,
        r#"
log_level = "debug"
log_prefix = 7
tcp_address = "127.0.0.1:7"
http_address = "127.0.0.1:8"
broadcast_address = "cfg-host"
inactive_producer_timeout = 1500
tombstone_lifetime = "2s"
unknown_key = [1, 2]
"#,
    )
    .unwrap();
    let cfg = format!("--config={}", path.display());
    let o = run(&[&cfg, "-tcp-address", "127.0.0.1:9"]);
    assert_eq!(o.tcp_address, "127.0.0.1:9", "flag beats config");
    assert_eq!(o.http_address, "127.0.0.1:8");
    assert_eq!(o.broadcast_address, "cfg-host");
    assert_eq!(o.log_level, LogLevel::Debug);
    assert_eq!(o.log_prefix, "7");
    assert_eq!(o.inactive_producer_timeout, Duration::from_millis(1500));
    assert_eq!(o.tombstone_lifetime, Duration::from_secs(2));

    // A flag equal to its default still wins.
    let o = run(&[&cfg, "-tombstone-lifetime=45s"]);
    assert_eq!(o.tombstone_lifetime, Duration::from_secs(45));
}

#[test]
fn config_file_errors() {
    let dir = tempfile::tempdir().unwrap();
    let fatal = |body: &str| {
        let path = dir.path().join("bad.cfg");
        std::fs::write(&path, body).unwrap();
        match parse(&[&format!("-config={}", path.display())]) {
            Err(FlagError::Fatal(m)) => m,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(
        fatal("log_level = \"loud\""),
        "failed parsing log_level loud"
    );
    assert!(fatal("tombstone_lifetime = \"10x\"").starts_with(
        "option resolution failed to coerce 10x for tombstone-lifetime - time: unknown unit"
    ));
    assert!(fatal("tombstone_lifetime = 1.5").contains("invalid value type"));
    assert!(fatal("a = = b").starts_with(&format!(
        "failed to load config file {}/bad.cfg - toml: line 1",
        dir.path().display()
    )));
    match parse(&["-config=/nonexistent/x.cfg"]) {
        Err(FlagError::Fatal(m)) => assert_eq!(
            m,
            "failed to load config file /nonexistent/x.cfg - open /nonexistent/x.cfg: no such file or directory"
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn version_and_usage_text() {
    let v = version_string();
    assert!(v.starts_with("nsqlookupd v1.3.0 (built w/rustc"), "{v}");
    assert!(v.ends_with(')'));
    let u = usage_for_hostname("host1");
    assert!(u.starts_with("Usage of nsqlookupd:\n"));
    assert!(u.contains("(default to the OS hostname) (default \"host1\")\n"));
    assert!(u.contains("-inactive-producer-timeout duration\n"));
}
