//! `contrib/`: the example config files and systemd units are checked against the real
//! binaries. Each `<daemon>.cfg.example` must name exactly the daemon's config keys (one per
//! flag in `--help`, under the names NSQ's `--config` files use), each after a comment line;
//! the daemon must start with it (`--config=contrib/...` plus flags for free loopback ports and
//! a temporary data dir) and, where it has `/config/<key>` (nsqd, nsqadmin), report every value
//! the file sets. Each `<daemon>.service` must start `/usr/local/bin/<daemon>` with flags the
//! binary knows and pass `systemd-analyze verify` (with the built binary substituted), when
//! systemd-analyze is installed.
//!
//! Build the binaries first: `cargo build -p nsqd-bin -p nsqlookupd-bin -p nsqadmin-bin`
//! (or set NSQD_BIN, NSQLOOKUPD_BIN, NSQADMIN_BIN).

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use nsq_integration_tests::{
    have_program, http_get, nsqadmin_bin, nsqd_bin, nsqlookupd_bin, workspace_root, Nsqadmin, Nsqd,
    Nsqlookupd, Value,
};

/// One `key = value` of an example file; `value` is `None` for a commented-out key
/// (`# key = ...`: a default that depends on the host).
#[derive(Debug)]
struct Entry {
    key: String,
    value: Option<Value>,
}

fn contrib(name: &str) -> PathBuf {
    workspace_root().join("contrib").join(name)
}

/// Parses an example file: `## ...` and `# ...` comment lines, blank lines, `key = value`
/// (value: a JSON-compatible TOML string, integer, boolean or one-line array) and
/// `# key = value`. Panics on anything else, and on a key not preceded by a comment line.
fn parse_example(path: &Path) -> Vec<Entry> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut entries = Vec::new();
    let mut prev = "";
    for (n, line) in text.lines().enumerate() {
        let where_ = || format!("{}:{}", path.display(), n + 1);
        let key_of = |s: &str| -> Option<(String, String)> {
            let (k, v) = s.split_once(" = ")?;
            let k = k.trim();
            (!k.is_empty()
                && k.bytes()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_'))
            .then(|| (k.to_string(), v.trim().to_string()))
        };
        if let Some(rest) = line.strip_prefix("# ") {
            if let Some((key, _)) = key_of(rest) {
                assert!(
                    prev.starts_with('#'),
                    "{}: `{key}` has no comment above it",
                    where_()
                );
                entries.push(Entry { key, value: None });
            }
        } else if let Some((key, v)) = key_of(line) {
            assert!(
                prev.starts_with("# "),
                "{}: `{key}` has no comment above it",
                where_()
            );
            let value = serde_json::from_str(&v)
                .unwrap_or_else(|e| panic!("{}: value {v:?} of `{key}`: {e}", where_()));
            entries.push(Entry {
                key,
                value: Some(value),
            });
        } else {
            assert!(
                line.is_empty() || line.starts_with('#'),
                "{}: unexpected line {line:?}",
                where_()
            );
        }
        prev = line;
    }
    entries
}

/// `flag name -> type word` from `<bin> --help` (`  -msg-timeout duration`; bools have none).
fn help_flags(bin: &Path) -> BTreeMap<String, String> {
    let out = Command::new(bin)
        .arg("--help")
        .output()
        .unwrap_or_else(|e| panic!("{} --help: {e}", bin.display()));
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    text.lines()
        .filter_map(|l| l.strip_prefix("  -"))
        .map(|l| {
            let mut words = l.split_whitespace();
            let name = words.next().unwrap_or_default().to_string();
            (name, words.next().unwrap_or("bool").to_string())
        })
        .collect()
}

/// The config-file key of a flag (NSQ's `cfg` struct tags); `None` for flags that have none.
fn config_key(flag: &str) -> Option<String> {
    Some(
        match flag {
            "config" | "version" | "verbose" | "worker-id" => return None,
            "node-id" => "id",
            "lookupd-tcp-address" => "nsqlookupd_tcp_addresses",
            "auth-http-address" => "auth_http_addresses",
            "e2e-processing-latency-percentile" => "e2e_processing_latency_percentiles",
            "admin-user" => "admin_users",
            "lookupd-http-address" => "nsqlookupd_http_addresses",
            "nsqd-http-address" => "nsqd_http_addresses",
            other => return Some(other.replace('-', "_")),
        }
        .to_string(),
    )
}

/// Checks that the example names exactly the binary's config keys; returns `key -> flag type`.
fn check_keys(example: &str, entries: &[Entry], bin: &Path) -> BTreeMap<String, String> {
    let want: BTreeMap<String, String> = help_flags(bin)
        .into_iter()
        .filter_map(|(flag, ty)| Some((config_key(&flag)?, ty)))
        .collect();
    assert!(
        want.len() > 5,
        "could not read the flags of {} --help",
        bin.display()
    );
    let have: BTreeSet<&str> = entries.iter().map(|e| e.key.as_str()).collect();
    let missing: Vec<&String> = want.keys().filter(|k| !have.contains(k.as_str())).collect();
    let unknown: Vec<&&str> = have.iter().filter(|k| !want.contains_key(**k)).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "contrib/{example}: keys missing (add them with their default and a comment): \
         {missing:?}; keys the daemon does not have: {unknown:?}"
    );
    assert_eq!(have.len(), entries.len(), "contrib/{example} repeats a key");
    want
}

/// A Go duration string (`1h0m0s`, `250ms`) in nanoseconds.
fn go_duration_ns(s: &str) -> u128 {
    let mut total = 0u128;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let n: u128 = rest[..digits]
            .parse()
            .unwrap_or_else(|_| panic!("duration {s:?}"));
        rest = &rest[digits..];
        let unit = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        total += n * match &rest[..unit] {
            "h" => 3_600_000_000_000,
            "m" => 60_000_000_000,
            "s" => 1_000_000_000,
            "ms" => 1_000_000,
            "us" | "µs" => 1_000,
            "ns" => 1,
            u => panic!("duration {s:?}: unit {u:?}"),
        };
        rest = &rest[unit..];
    }
    total
}

/// What `GET /config/<key>` answers for a file value (strings raw, the rest JSON; levels and
/// TLS settings as the codes NSQ shows).
fn config_text(key: &str, ty: &str, v: &Value) -> String {
    match (key, v) {
        ("log_level", Value::String(s)) => {
            let code = ["debug", "info", "warn", "error", "fatal"]
                .iter()
                .position(|l| l.eq_ignore_ascii_case(s))
                .unwrap_or_else(|| panic!("log_level {s:?}"));
            (code + 1).to_string()
        }
        ("tls_required", Value::String(s)) => match s.as_str() {
            "false" => "0",
            "tcp-https" => "1",
            "true" => "2",
            _ => panic!("tls_required {s:?}"),
        }
        .to_string(),
        ("tls_min_version", Value::String(s)) => {
            let minor = ["tls1.0", "tls1.1", "tls1.2", "tls1.3"]
                .iter()
                .position(|t| t == s)
                .unwrap_or_else(|| panic!("tls_min_version {s:?}"));
            (0x0301 + minor).to_string()
        }
        (_, Value::String(s)) if ty == "duration" => go_duration_ns(s).to_string(),
        (_, Value::String(s)) => s.clone(),
        (_, other) => other.to_string(),
    }
}

/// Every value the example sets, as the running daemon's `/config/<key>` shows it, and the
/// same as a daemon started without the file shows (the example holds the defaults). `skip`:
/// keys the test overrides with flags or the daemon resolves at startup; `not_default`: keys
/// the example must set to something else.
fn check_config_endpoint(
    http: SocketAddr,
    defaults: SocketAddr,
    entries: &[Entry],
    types: &BTreeMap<String, String>,
    skip: &[&str],
    not_default: &[&str],
) {
    let get = |addr: SocketAddr, key: &str| {
        let r = http_get(addr, &format!("/config/{key}"));
        assert_eq!(r.status, 200, "/config/{key}: {}", r.text());
        r.text()
    };
    for e in entries {
        let Some(v) = &e.value else { continue };
        let have = get(http, &e.key);
        if skip.contains(&e.key.as_str()) {
            continue;
        }
        let want = config_text(&e.key, &types[&e.key], v);
        if v.is_array() {
            let have: Value = serde_json::from_str(&have).expect("a JSON array");
            assert_eq!(&have, v, "/config/{} after loading the example", e.key);
        } else {
            assert_eq!(have, want, "/config/{} after loading the example", e.key);
        }
        if !not_default.contains(&e.key.as_str()) {
            assert_eq!(
                get(defaults, &e.key),
                get(http, &e.key),
                "the example's `{}` is not the default",
                e.key
            );
        }
    }
}

#[test]
fn nsqd_example_config_loads_with_every_key() {
    let path = contrib("nsqd.cfg.example");
    let entries = parse_example(&path);
    let types = check_keys("nsqd.cfg.example", &entries, &nsqd_bin());
    let nsqd = Nsqd::start(&[&format!("--config={}", path.display())]);
    let defaults = Nsqd::start(&[]);
    let ping = http_get(nsqd.http_addr, "/ping");
    assert_eq!((ping.status, ping.text().as_str()), (200, "OK"));
    let info = http_get(nsqd.http_addr, "/info").json();
    assert_eq!(info["tcp_port"], nsqd.tcp_addr.port());
    check_config_endpoint(
        nsqd.http_addr,
        defaults.http_addr,
        &entries,
        &types,
        // Overridden by the flags above, and values nsqd resolves at startup: the broadcast
        // ports (0 = the ports it listens on, nsqd/nsqd.go, Main) and the statsd prefix
        // (`%s` = this host, nsqd/nsqd.go, New).
        &[
            "tcp_address",
            "http_address",
            "data_path",
            "broadcast_tcp_port",
            "broadcast_http_port",
            "statsd_prefix",
        ],
        &[],
    );
}

#[test]
fn nsqlookupd_example_config_loads_with_every_key() {
    let path = contrib("nsqlookupd.cfg.example");
    let entries = parse_example(&path);
    check_keys("nsqlookupd.cfg.example", &entries, &nsqlookupd_bin());
    let lookupd = Nsqlookupd::start(&[&format!("--config={}", path.display())]);
    let ping = lookupd.get("/ping");
    assert_eq!((ping.status, ping.text().as_str()), (200, "OK"));
    let info = lookupd.get_json("/info");
    assert!(info["version"].is_string(), "/info: {info}");
}

#[test]
fn nsqadmin_example_config_loads_with_every_key() {
    let path = contrib("nsqadmin.cfg.example");
    let entries = parse_example(&path);
    let types = check_keys("nsqadmin.cfg.example", &entries, &nsqadmin_bin());
    let config = format!("--config={}", path.display());
    let admin = Nsqadmin::start(&[&config]);
    let http = admin.http_addr;
    // nsqadmin needs an upstream address to start; the example sets one in its config.
    let lookupd = Nsqlookupd::start(&[]);
    let upstream = format!("--lookupd-http-address={}", lookupd.http_addr);
    let defaults_admin = Nsqadmin::start(&[&upstream]);
    let defaults = defaults_admin.http_addr;
    let ping = http_get(http, "/ping");
    assert_eq!((ping.status, ping.text().as_str()), (200, "OK"));
    check_config_endpoint(
        http,
        defaults,
        &entries,
        &types,
        &["http_address"],
        &["nsqlookupd_http_addresses"],
    );
}

#[test]
fn systemd_units_start_the_daemons_with_known_flags() {
    let bins = [
        ("nsqd", nsqd_bin()),
        ("nsqlookupd", nsqlookupd_bin()),
        ("nsqadmin", nsqadmin_bin()),
    ];
    let verify = have_program("systemd-analyze");
    if !verify {
        eprintln!("systemd-analyze not found: checking the units' ExecStart lines only");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    for (daemon, bin) in bins {
        let unit = contrib(&format!("{daemon}.service"));
        let text = std::fs::read_to_string(&unit).expect("unit file");
        let exec: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("ExecStart="))
            .collect();
        assert_eq!(exec.len(), 1, "{daemon}.service: one ExecStart line");
        let mut words = exec[0].split_whitespace();
        let program = words.next().expect("a program");
        assert_eq!(program, format!("/usr/local/bin/{daemon}"));
        let flags = help_flags(&bin);
        let args: Vec<&str> = words.collect();
        for arg in &args {
            let name = arg
                .trim_start_matches('-')
                .split('=')
                .next()
                .unwrap_or_default();
            assert!(
                arg.starts_with('-') && flags.contains_key(name),
                "{daemon}.service: `{arg}` is not a flag of {daemon}"
            );
        }
        assert!(
            args.contains(&format!("--config=/etc/nsq/{daemon}.cfg").as_str()),
            "{daemon}.service loads /etc/nsq/{daemon}.cfg"
        );
        if verify {
            // verify checks that ExecStart's program exists: use the built binary.
            let copy = dir.path().join(format!("{daemon}.service"));
            std::fs::write(&copy, text.replace(program, &bin.display().to_string()))
                .expect("write unit");
            let out = Command::new("systemd-analyze")
                .arg("verify")
                .arg(&copy)
                .output()
                .expect("run systemd-analyze");
            let said = String::from_utf8_lossy(&out.stderr).into_owned()
                + &String::from_utf8_lossy(&out.stdout);
            // It exits 0 on unknown keys and bad values too, but names the unit when it warns.
            let about_unit: Vec<&str> = said
                .lines()
                .filter(|l| l.contains(&format!("{daemon}.service")))
                .collect();
            assert!(
                out.status.success() && about_unit.is_empty(),
                "systemd-analyze verify {daemon}.service ({}):\n{said}",
                out.status
            );
        }
    }
}
