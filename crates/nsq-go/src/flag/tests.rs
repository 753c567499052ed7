use super::*;
use crate::lg::LogLevel;

#[derive(Debug, Clone, PartialEq)]
struct Opts {
    config: String,
    name: String,
    count: i64,
    on: bool,
    wait: Duration,
    list: Vec<String>,
    level: LogLevel,
}

fn defaults() -> Opts {
    Opts {
        config: String::new(),
        name: "x".into(),
        count: 3,
        on: true,
        wait: Duration::from_secs(90),
        list: Vec::new(),
        level: LogLevel::Info,
    }
}

const SET: FlagSet<Opts> = FlagSet {
    program: "demo",
    flags: crate::flags![Opts;
        "config" => config: Str, None, "path to config file";
        "name" => name: Str, Some("name"), "a name";
        "count" => count: Int, Some("count"), "how many";
        "on" => on: Bool, Some("on"), "switch";
        "wait" => wait: Dur, Some("wait"), "how long";
        "item" => list: StrList, Some("items"), "an item (may be given multiple times)";
        "log-level" => level: Custom, Some("log_level"), "set log verbosity";
    ],
    config_checks: &["log_level"],
};

fn parse(args: &[&str]) -> Result<ParseOutcome<Opts>, FlagError> {
    let mut v = vec!["demo".to_string()];
    v.extend(args.iter().map(|s| s.to_string()));
    SET.parse(v, defaults())
}

fn run(args: &[&str]) -> Opts {
    match parse(args).unwrap() {
        ParseOutcome::Run(o) => o,
        other => panic!("{other:?}"),
    }
}

#[test]
fn usage_names_the_argument_in_back_quotes() {
    let line = usage_line(
        "rotate-size",
        &Slot::Int(&mut 0),
        "rotate at `rotate-size` bytes",
    );
    assert_eq!(
        line,
        "  -rotate-size rotate-size\n    \trotate at rotate-size bytes\n"
    );
    let line = usage_line("n", &Slot::Int(&mut 0), "no quotes");
    assert_eq!(line, "  -n int\n    \tno quotes\n");
}

#[test]
fn parse_all_keeps_arguments_and_options_with_version() {
    let all = |a: &[&str]| {
        let mut v = vec!["demo".to_string()];
        v.extend(a.iter().map(|s| s.to_string()));
        SET.parse_all(v, defaults()).unwrap()
    };
    let p = all(&["-count=1", "x", "-on"]).unwrap();
    assert_eq!((p.opts.count, p.version), (1, false));
    assert_eq!(p.args, ["x", "-on"]);
    let p = all(&["-on", "--", "-count=1"]).unwrap();
    assert!(p.opts.on);
    assert_eq!(p.args, ["-count=1"]);
    let p = all(&["-version", "-count=2"]).unwrap();
    assert_eq!((p.opts.count, p.version), (2, true));
    assert!(p.args.is_empty());
    assert_eq!(all(&["-h"]), None);
}

#[test]
fn go_flag_syntax() {
    let o = run(&[
        "-name",
        "-y",
        "--count=0x10",
        "-on=false",
        "-item",
        "a",
        "--item=b",
    ]);
    assert_eq!(o.name, "-y");
    assert_eq!(o.count, 16);
    assert!(!o.on);
    assert_eq!(o.list, ["a", "b"]);
    // Bools never take the next argument; parsing stops at the first non-flag.
    let o = run(&["-on", "false", "-count=1"]);
    assert!(o.on);
    assert_eq!(o.count, 3);
    let o = run(&["--", "-count=1"]);
    assert_eq!(o.count, 3);
    assert_eq!(parse(&["-h"]).unwrap(), ParseOutcome::Help);
    assert_eq!(parse(&["--version"]).unwrap(), ParseOutcome::Version);
    let e = |a: &[&str]| parse(a).unwrap_err().to_string();
    assert_eq!(e(&["-bogus"]), "flag provided but not defined: -bogus");
    assert_eq!(e(&["---x"]), "bad flag syntax: ---x");
    assert_eq!(e(&["-count"]), "flag needs an argument: -count");
    assert_eq!(
        e(&["-count=9223372036854775808"]),
        "invalid value \"9223372036854775808\" for flag -count: value out of range"
    );
    assert_eq!(
        e(&["-on=yes"]),
        "invalid boolean value \"yes\" for -on: parse error"
    );
    assert_eq!(
            e(&["-log-level=loud"]),
            "invalid value \"loud\" for flag -log-level: invalid log level 'loud' (debug, info, warn, error, fatal)"
        );
    assert_eq!(parse(&["-count=x"]).unwrap_err().exit_code(), 2);
}

#[test]
fn usage_like_print_defaults() {
    assert_eq!(
        SET.usage(&defaults()),
        "Usage of demo:
  -config string
    \tpath to config file
  -count int
    \thow many (default 3)
  -item value
    \tan item (may be given multiple times)
  -log-level value
    \tset log verbosity (default INFO)
  -name string
    \ta name (default \"x\")
  -on
    \tswitch (default true)
  -version
    \tprint version string
  -wait duration
    \thow long (default 1m30s)
"
    );
}

#[test]
fn config_file_coercion_and_precedence() {
    let dir = std::env::temp_dir().join(format!("nsq-go-flag-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("a.toml");
    std::fs::write(
        &p,
        "name = true\ncount = \"12\"\nwait = 2000\nitems = \"a,b\"\nlog_level = \"debug\"\n",
    )
    .unwrap();
    let cfg = format!("--config={}", p.display());
    let o = run(&[&cfg, "-count=1"]);
    assert_eq!(o.name, "%!s(bool=true)");
    assert_eq!(o.count, 1);
    assert_eq!(o.wait, Duration::from_secs(2));
    assert_eq!(o.list, ["a", "b"]);
    assert_eq!(o.level, LogLevel::Debug);
    std::fs::write(&p, "log_level = \"nope\"\n").unwrap();
    let e = parse(&[&cfg, "-log-level=warn"]).unwrap_err();
    assert_eq!(e, FlagError::Fatal("failed parsing log_level nope".into()));
    assert_eq!(e.exit_code(), 1);
    std::fs::write(&p, "wait = 1.5\n").unwrap();
    assert_eq!(
        parse(&[&cfg]).unwrap_err().to_string(),
        "option resolution failed to coerce 1.5 for wait - invalid value type"
    );
    std::fs::remove_dir_all(&dir).unwrap();
    let missing = parse(&["--config=/nonexistent/x.toml"]).unwrap_err();
    assert_eq!(
            missing.to_string(),
            "failed to load config file /nonexistent/x.toml - open /nonexistent/x.toml: no such file or directory"
        );
}
