//! `nsq_stat` against the real nsqd and nsqlookupd: the table (headers, columns, numbers summed
//! across nsqd) compared byte for byte, `--count`, producers from `--nsqd-http-address` or via
//! `--lookupd-http-address`, and the validation and runtime error messages of nsq's
//! apps/nsq_stat/nsq_stat.go.
//!
//! Build first: `cargo build -p nsqd-bin -p nsqlookupd-bin -p nsq_stat-bin`.

use std::time::Duration;

use nsq_integration_tests::util::{
    argv0, assert_exit, assert_fatal, assert_help_header, assert_version, nsqd_registered_with,
    wait_registered,
};
use nsq_integration_tests::{http_post, nsq_stat_bin, run_tool, Nsqd, Nsqlookupd};

const TIMEOUT: Duration = Duration::from_secs(60);

const HEADER: &str = "------rate------+----------------depth----------------+--------------metadata---------------\n\
ingress  egress |   total     mem    disk inflt   def |     req     t-o         msgs clients\n";

fn setup(nsqd: &Nsqd, topic: &str, channel: &str, messages: usize) {
    assert_eq!(
        http_post(nsqd.http_addr, &format!("/topic/create?topic={topic}"), b"").status,
        200
    );
    assert_eq!(
        http_post(
            nsqd.http_addr,
            &format!("/channel/create?topic={topic}&channel={channel}"),
            b""
        )
        .status,
        200
    );
    for i in 0..messages {
        nsqd.http_pub(topic, format!("m{i}").as_bytes());
    }
}

#[test]
fn table_from_nsqd_addresses_summed() {
    let (a, b) = (Nsqd::start(&[]), Nsqd::start(&[]));
    setup(&a, "st", "ch", 3);
    setup(&b, "st", "ch", 2);
    let (ah, bh) = (a.http_addr.to_string(), b.http_addr.to_string());
    let out = run_tool(
        &nsq_stat_bin(),
        &[
            "--topic=st",
            "--channel=ch",
            "--nsqd-http-address",
            &ah,
            "--nsqd-http-address",
            &bh,
            "--count",
            "2",
            "--interval",
            "100ms",
        ],
        b"",
        TIMEOUT,
    );
    assert_exit(&out, 0);
    let line = "      0       0 |       5       5       0     0     0 |       0       0            5       0\n";
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("{HEADER}{line}{line}")
    );
}

#[test]
fn table_via_lookupd_and_errors() {
    let lookupd = Nsqlookupd::start(&[]);
    let nsqd = nsqd_registered_with(&lookupd);
    setup(&nsqd, "lt", "ch", 1);
    wait_registered(&lookupd, "lt");
    let lh = lookupd.http_addr.to_string();
    let out = run_tool(
        &nsq_stat_bin(),
        &[
            "--topic=lt",
            "--channel=ch",
            "--lookupd-http-address",
            &lh,
            "--count=1",
            "--interval=50ms",
        ],
        b"",
        TIMEOUT,
    );
    assert_exit(&out, 0);
    let line = "      0       0 |       1       1       0     0     0 |       0       0            1       0\n";
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("{HEADER}{line}")
    );

    let nh = nsqd.http_addr.to_string();
    let out = run_tool(
        &nsq_stat_bin(),
        &["--topic=lt", "--channel=nope", "--nsqd-http-address", &nh],
        b"",
        TIMEOUT,
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr)
        .ends_with(" ERROR: failed to find channel(nope) in stats metadata for topic(lt)\n"));
    let out = run_tool(
        &nsq_stat_bin(),
        &["--topic=none", "--channel=ch", "--nsqd-http-address", &nh],
        b"",
        TIMEOUT,
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr)
        .ends_with(" ERROR: failed to get nsqd stats - failed to query any nsqd: \n"));
}

#[test]
fn validation_messages_and_exit_codes() {
    let bin = nsq_stat_bin();
    let cases: &[(&[&str], &str)] = &[
        (&["--topic=t"], "--topic and --channel are required"),
        (
            &["--topic=t", "--channel=c", "--interval=0"],
            "--interval should be positive",
        ),
        (
            &[
                "--topic=t",
                "--channel=c",
                "--http-client-connect-timeout=0",
            ],
            "--http-client-connect-timeout should be positive",
        ),
        (
            &[
                "--topic=t",
                "--channel=c",
                "--http-client-request-timeout=0",
            ],
            "--http-client-request-timeout should be positive",
        ),
        (
            &["--topic=t", "--channel=c", "--count=0"],
            "--count should be positive",
        ),
        // Go's `flag.Duration` takes negative values; the checks after parsing refuse them
        // (issue 23, item 3), also written as the next argument.
        (
            &["--topic=t", "--channel=c", "--interval", "-1s"],
            "--interval should be positive",
        ),
        (
            &[
                "--topic=t",
                "--channel=c",
                "--http-client-connect-timeout=-1.5s",
            ],
            "--http-client-connect-timeout should be positive",
        ),
        (
            &[
                "--topic=t",
                "--channel=c",
                "--http-client-request-timeout=-1ns",
            ],
            "--http-client-request-timeout should be positive",
        ),
        (
            &["--topic=t", "--channel=c"],
            "--nsqd-http-address or --lookupd-http-address required",
        ),
        (
            &[
                "--topic=t",
                "--channel=c",
                "--nsqd-http-address=a:1",
                "--lookupd-http-address=b:2",
            ],
            "use --nsqd-http-address or --lookupd-http-address not both",
        ),
        (
            &["--topic=t", "--channel=c", "--nsqd-http-address=http://a:1"],
            "--nsqd-http-address error - address should not contain scheme",
        ),
        (
            &[
                "--topic=t",
                "--channel=c",
                "--lookupd-http-address=http://a:1",
            ],
            "--lookupd-http-address error - address should not contain scheme",
        ),
    ];
    for (args, msg) in cases {
        assert_fatal(&bin, args, msg);
    }
    assert_version(&bin, "nsq_stat");
    assert_help_header(&bin, &argv0(&bin));
    let out = run_tool(&bin, &["--count", "x"], b"", TIMEOUT);
    assert_eq!(out.status.code(), Some(2));
    // A bad duration is still a flag error (usage, exit 2).
    let out = run_tool(&bin, &["--interval", "-x"], b"", TIMEOUT);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr)
        .starts_with("invalid value \"-x\" for flag -interval: parse error\n"));
}

/// nsq_stat.go declares `-version` with the usage "print version" (the other tools say
/// "print version string"), and the durations' defaults in Go's `Duration.String()`.
#[test]
fn help_text_of_version_and_durations() {
    let bin = nsq_stat_bin();
    let out = run_tool(&bin, &["-h"], b"", TIMEOUT);
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8_lossy(&out.stderr);
    assert!(
        help.ends_with("  -version\n    \tprint version\n"),
        "{help}"
    );
    assert!(
        help.contains("  -interval duration\n    \tduration of time between polling/printing output (default 2s)\n"),
        "{help}"
    );
    assert!(
        help.contains("  -http-client-request-timeout duration\n    \ttimeout for HTTP request (default 5s)\n"),
        "{help}"
    );
}

/// internal/clusterinfo (data.go): when every address fails the error is
/// `failed to query any nsqd: <errors>` (`... nsqlookupd: ...` for lookupd), with Go's
/// `*url.Error` text for a refused connection; nsq_stat exits 1 with it.
#[test]
fn unreachable_addresses_fail_with_clusterinfos_texts() {
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let out = run_tool(
        &nsq_stat_bin(),
        &["--topic=t", "--channel=c", "--nsqd-http-address", &closed],
        b"",
        TIMEOUT,
    );
    assert_eq!(out.status.code(), Some(1));
    let url = format!("http://{closed}/stats?format=json&topic=t&include_clients=false");
    assert!(
        String::from_utf8_lossy(&out.stderr).ends_with(&format!(
            " ERROR: failed to get topic producers - failed to query any nsqd: \
             Get \"{url}\": dial tcp {closed}: connect: connection refused\n"
        )),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run_tool(
        &nsq_stat_bin(),
        &[
            "--topic=t",
            "--channel=c",
            "--lookupd-http-address",
            &closed,
        ],
        b"",
        TIMEOUT,
    );
    assert_eq!(out.status.code(), Some(1));
    let url = format!("http://{closed}/lookup?topic=t");
    assert!(
        String::from_utf8_lossy(&out.stderr).ends_with(&format!(
            " ERROR: failed to get topic producers - failed to query any nsqlookupd: \
             Get \"{url}\": dial tcp {closed}: connect: connection refused\n"
        )),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
