//! `nsq_to_file` against the real nsqd (and nsqlookupd): file names and contents byte for
//! byte (default template, `<HOST>`/`<PID>`/`<DATETIME>`/`<REV>`), rotation by size and by
//! interval, gzip (multi-member, decompressed and compared), `--work-dir` → `--output-dir`
//! moves (also on SIGHUP, and around an existing output file), `--topic-pattern` picking up a
//! topic created later through nsqlookupd, the user agent and `--consumer-opt`, SIGTERM and
//! SIGKILL mid-stream (every message nsqd considers finished is in a file), and the
//! command-line validation of nsq's apps/nsq_to_file/nsq_to_file.go.
//!
//! Build first: `cargo build -p nsqd-bin -p nsqlookupd-bin -p nsq_to_file-bin` (or set
//! NSQD_BIN / NSQLOOKUPD_BIN / NSQ_TO_FILE_BIN).

use std::collections::HashSet;
use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use nsq_integration_tests::util::{
    assert_fatal, assert_help_header, assert_help_lists, assert_usage_error, assert_version,
    nsqd_registered_with, publish, wait_finished, Tool,
};
use nsq_integration_tests::{
    find_channel, http_post, int, nsq_to_file_bin, Nsqd, Nsqlookupd, Value,
};

const TIMEOUT: Duration = Duration::from_secs(60);

/// A running nsq_to_file (stderr collected, killed on drop unless stopped).
fn nsq_to_file(args: &[&str]) -> Tool {
    Tool::start(&nsq_to_file_bin(), args)
}

/// nsq_to_file archiving `topic` from the nsqd at `nsqd` into `out`, plus `extra` flags.
fn to_file(topic: &str, nsqd: &str, out: &str, extra: &[&str]) -> Tool {
    let topic = format!("--topic={topic}");
    let mut args = vec![
        topic.as_str(),
        "--nsqd-tcp-address",
        nsqd,
        "--output-dir",
        out,
    ];
    args.extend_from_slice(extra);
    nsq_to_file(&args)
}

fn short_hostname() -> String {
    let h = std::fs::read_to_string("/proc/sys/kernel/hostname").expect("hostname");
    h.trim().split('.').next().unwrap_or_default().to_string()
}

/// `date +<fmt>` (local time, as the tool uses).
fn date(fmt: &str) -> String {
    let out = std::process::Command::new("date")
        .arg(format!("+{fmt}"))
        .output()
        .expect("run date");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The files of `dir` (recursively), by relative name, with their contents.
fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
                out.push((rel, std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

fn names(dir: &Path) -> Vec<String> {
    files(dir).into_iter().map(|(n, _)| n).collect()
}

/// `n` distinct bodies `<prefix>-00000` … in publish order.
fn bodies(prefix: &str, range: std::ops::Range<usize>) -> Vec<Vec<u8>> {
    range
        .map(|i| format!("{prefix}-{i:05}").into_bytes())
        .collect()
}

fn lines(bodies: &[Vec<u8>]) -> Vec<u8> {
    let mut v = Vec::new();
    for b in bodies {
        v.extend_from_slice(b);
        v.push(b'\n');
    }
    v
}

#[test]
fn default_file_name_contents_user_agent_and_sigterm() {
    let nsqd = Nsqd::start(&[]);
    let out = tempfile::tempdir().unwrap();
    let addr = nsqd.tcp_addr.to_string();
    let want: Vec<Vec<u8>> = vec![
        b"one".to_vec(),
        b"two words".to_vec(),
        b" ".to_vec(),
        b"bin\x00\xff\x01".to_vec(),
        b"tab\tend".to_vec(),
    ];
    publish(&nsqd, "orders", &want);
    let hour_before = date("%Y-%m-%d_%H");
    let tool = nsq_to_file(&[
        "--topic=orders",
        "--nsqd-tcp-address",
        &addr,
        "--output-dir",
        out.path().to_str().unwrap(),
        "--sync-interval=200ms",
        "--consumer-opt=client_id,archiver",
        // Invalid options are ignored (applied after parsing), not refused.
        "--consumer-opt=bogus,1",
        "--consumer-opt=max_in_flight,5",
    ]);
    wait_finished(&nsqd, "orders", "nsq_to_file", 5);
    let ch = find_channel(&nsqd.stats(), "orders", "nsq_to_file")
        .unwrap()
        .clone();
    let client = &ch["clients"][0];
    assert_eq!(client["user_agent"], "nsq_to_file/1.3.0 go-nsq/1.1.0");
    assert_eq!(client["client_id"], "archiver");
    // --max-in-flight (200) wins over --consumer-opt max_in_flight.
    assert_eq!(client["ready_count"], 200);
    let err = tool.stop_ok("TERM");
    let hour_after = date("%Y-%m-%d_%H");

    let got = files(out.path());
    assert_eq!(got.len(), 1, "{:?}", names(out.path()));
    let (name, content) = &got[0];
    let host = short_hostname();
    let candidates = [
        format!("orders.{host}.{hour_before}.log"),
        format!("orders.{host}.{hour_after}.log"),
    ];
    assert!(candidates.contains(name), "{name} not in {candidates:?}");
    assert_eq!(content, &lines(&want));
    let opening = err
        .lines()
        .find(|l| l.contains(" INFO: [orders/nsq_to_file] opening "))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(opening.starts_with("[nsq_to_file] "), "{opening}");
    assert!(
        opening.ends_with(&format!("opening {}/{name}", out.path().display())),
        "{opening}"
    );
}

#[test]
fn placeholders_and_size_rotation() {
    let nsqd = Nsqd::start(&[]);
    let out = tempfile::tempdir().unwrap();
    let addr = nsqd.tcp_addr.to_string();
    // 10 bytes a line: a file takes 21 lines (210 > 200 bytes), then the next revision opens.
    let want = bodies("msg", 0..100);
    publish(&nsqd, "sized", &want);
    let year = date("%Y");
    let tool = to_file(
        "sized",
        &addr,
        out.path().to_str().unwrap(),
        &[
            "--filename-format=<TOPIC>/<HOST>.<PID><REV>.<DATETIME>.txt",
            "--host-identifier=box-<SHORT_HOST>",
            "--datetime-format=%Y",
            "--rotate-size=200",
            "--sync-interval=1s",
        ],
    );
    let pid = tool.pid();
    wait_finished(&nsqd, "sized", "nsq_to_file", 100);
    tool.stop_ok("TERM");

    let host = short_hostname();
    let got = files(out.path());
    let expect_names: Vec<String> = (0..5)
        .map(|rev| format!("sized/box-{host}.{pid}-{rev:06}.{year}.txt"))
        .collect();
    assert_eq!(
        got.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>(),
        expect_names
    );
    for (i, (name, content)) in got.iter().enumerate() {
        let end = (i * 21 + 21).min(100);
        assert_eq!(content, &lines(&want[i * 21..end]), "{name}");
    }
}

#[test]
fn interval_rotation_keeps_every_message_in_order() {
    let nsqd = Nsqd::start(&[]);
    let out = tempfile::tempdir().unwrap();
    let addr = nsqd.tcp_addr.to_string();
    let first = bodies("a", 0..5);
    let second = bodies("b", 0..5);
    publish(&nsqd, "timed", &first);
    let tool = to_file(
        "timed",
        &addr,
        out.path().to_str().unwrap(),
        &[
            "--filename-format=<TOPIC><REV>.log",
            "--rotate-interval=1s",
            "--skip-empty-files",
            "--sync-interval=250ms",
        ],
    );
    wait_finished(&nsqd, "timed", "nsq_to_file", 5);
    // The file is older than --rotate-interval at the next tick: it is closed (and with
    // --skip-empty-files no empty one is opened); the next message opens revision 1.
    let f0 = out.path().join("timed-000000.log");
    tool.wait_for("the first file to be rotated", TIMEOUT, || {
        tool.stderr().contains("since last open, rotating...")
    });
    std::thread::sleep(Duration::from_millis(600));
    publish(&nsqd, "timed", &second);
    wait_finished(&nsqd, "timed", "nsq_to_file", 10);
    tool.stop_ok("TERM");

    let got = files(out.path());
    assert!(got.len() >= 2, "{:?}", names(out.path()));
    for (i, (name, _)) in got.iter().enumerate() {
        assert_eq!(name, &format!("timed-{i:06}.log"));
    }
    assert_eq!(std::fs::read(&f0).unwrap(), lines(&first));
    let all: Vec<u8> = got.iter().flat_map(|(_, c)| c.clone()).collect();
    let mut want = first.clone();
    want.extend(second.iter().cloned());
    assert_eq!(all, lines(&want));
}

#[test]
fn new_datetime_bucket_opens_a_new_file() {
    let nsqd = Nsqd::start(&[]);
    let out = tempfile::tempdir().unwrap();
    let addr = nsqd.tcp_addr.to_string();
    let first = bodies("s", 0..5);
    let second = bodies("t", 0..5);
    publish(&nsqd, "clock", &first);
    let tool = to_file(
        "clock",
        &addr,
        out.path().to_str().unwrap(),
        &[
            "--filename-format=<TOPIC>.<DATETIME>.log",
            "--datetime-format=%Y%m%d%H%M%S",
            "--skip-empty-files",
            "--sync-interval=200ms",
        ],
    );
    wait_finished(&nsqd, "clock", "nsq_to_file", 5);
    std::thread::sleep(Duration::from_millis(1100));
    publish(&nsqd, "clock", &second);
    wait_finished(&nsqd, "clock", "nsq_to_file", 10);
    tool.stop_ok("TERM");

    // One file per second that saw messages (no empty ones), in time order.
    let got = files(out.path());
    assert!(got.len() >= 2, "{:?}", names(out.path()));
    for (name, content) in &got {
        let stamp = name
            .strip_prefix("clock.")
            .and_then(|r| r.strip_suffix(".log"))
            .unwrap_or_else(|| panic!("{name}"));
        assert!(
            stamp.len() == 14 && stamp.bytes().all(|b| b.is_ascii_digit()),
            "{name}"
        );
        assert!(!content.is_empty(), "{name} is empty");
    }
    let all: Vec<u8> = got.iter().flat_map(|(_, c)| c.clone()).collect();
    let mut want = first.clone();
    want.extend(second.iter().cloned());
    assert_eq!(all, lines(&want));
}

/// The members of a multi-member gzip file, each decompressed.
fn gzip_members(data: &[u8]) -> Vec<Vec<u8>> {
    let mut rest = data;
    let mut out = Vec::new();
    while !rest.is_empty() {
        let mut d = flate2::bufread::GzDecoder::new(rest);
        let mut member = Vec::new();
        d.read_to_end(&mut member).expect("a valid gzip member");
        rest = d.into_inner();
        out.push(member);
    }
    out
}

/// What Go's `gzip.Writer.Close` writes at level 9 when nothing was written to the writer.
const EMPTY_LEVEL_9: [u8; 23] = [
    0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 2, 0xff, 0x01, 0x00, 0x00, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0,
];

/// The member layout of the reference's gzip files (apps/nsq_to_file/file_logger.go): every
/// `Sync` closes the gzip writer (ending a member with the synced messages) and opens a
/// fresh one, and `Close` closes that fresh one too, which in Go's compress/gzip writes a
/// member with no data (header, empty stored block, zero CRC and size; 23 bytes). So a file
/// synced and then closed is: members with data, then exactly that empty member. Every
/// header is Go's: no mtime, XFL 2 at level 9, OS 255. Returns the data members.
fn assert_go_gzip_layout(data: &[u8]) -> Vec<Vec<u8>> {
    assert!(
        data.ends_with(&EMPTY_LEVEL_9),
        "{:02x?}",
        &data[data.len().saturating_sub(32)..]
    );
    let mut members = gzip_members(data);
    assert!(members.len() >= 2, "{} members", members.len());
    assert_eq!(members.pop(), Some(Vec::new()));
    assert!(
        members.iter().all(|m| !m.is_empty()),
        "an empty member before the last"
    );
    // Each member's header.
    let mut rest = data;
    let mut headers = 0;
    while !rest.is_empty() {
        assert_eq!(rest[..10], [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 2, 0xff]);
        headers += 1;
        let mut d = flate2::bufread::GzDecoder::new(rest);
        std::io::copy(&mut d, &mut std::io::sink()).unwrap();
        rest = d.into_inner();
    }
    assert_eq!(headers, members.len() + 1);
    members
}

#[test]
fn gzip_multi_member_files() {
    let nsqd = Nsqd::start(&[]);
    let out = tempfile::tempdir().unwrap();
    let addr = nsqd.tcp_addr.to_string();
    let want = bodies("zipped", 0..1000);
    publish(&nsqd, "packed", &want);
    let hour_before = date("%Y-%m-%d_%H");
    let tool = to_file(
        "packed",
        &addr,
        out.path().to_str().unwrap(),
        &[
            "--gzip",
            "--gzip-level=9",
            "--host-identifier=h",
            "--sync-interval=1s",
        ],
    );
    wait_finished(&nsqd, "packed", "nsq_to_file", 1000);
    // A member holds one sync interval: the tick ends the first one.
    std::thread::sleep(Duration::from_millis(1500));
    let more = bodies("zipped", 1000..1500);
    publish(&nsqd, "packed", &more);
    wait_finished(&nsqd, "packed", "nsq_to_file", 1500);
    tool.stop_ok("TERM");
    let mut want = want;
    want.extend(more);
    let hour_after = date("%Y-%m-%d_%H");

    let got = files(out.path());
    assert_eq!(got.len(), 1, "{:?}", names(out.path()));
    let (name, data) = &got[0];
    assert!(
        [hour_before, hour_after]
            .iter()
            .any(|h| name == &format!("packed.h-000000.{h}.log.gz")),
        "{name}"
    );
    // The tick's sync ends a member (the early syncs in between only flush the deflate
    // stream); the close at shutdown adds the empty one.
    let members = assert_go_gzip_layout(data);
    assert!(members.len() >= 2, "{} data members", members.len());
    assert_eq!(members.concat(), lines(&want));
    let mut all = Vec::new();
    flate2::read::MultiGzDecoder::new(&data[..])
        .read_to_end(&mut all)
        .unwrap();
    assert_eq!(all, lines(&want));
}

#[test]
fn work_dir_files_move_to_output_dir_on_close_and_sighup() {
    let nsqd = Nsqd::start(&[]);
    let work = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    // Taken in the output dir already: the logger starts at the next revision.
    std::fs::write(out.path().join("moved-000000.log"), b"old\n").unwrap();
    let addr = nsqd.tcp_addr.to_string();
    let first = bodies("w", 0..10);
    let second = bodies("x", 0..10);
    publish(&nsqd, "moved", &first);
    let tool = to_file(
        "moved",
        &addr,
        out.path().to_str().unwrap(),
        &[
            "--work-dir",
            work.path().to_str().unwrap(),
            "--filename-format=<TOPIC><REV>.log",
            "--sync-interval=200ms",
        ],
    );
    wait_finished(&nsqd, "moved", "nsq_to_file", 10);
    // Being written: in the work dir only.
    assert_eq!(names(work.path()), ["moved-000001.log"]);
    assert_eq!(names(out.path()), ["moved-000000.log"]);
    assert!(tool.stderr().contains("output file already exists: "));

    // SIGHUP closes the file: it moves to the output dir.
    tool.signal("HUP");
    tool.wait_for("the file to move", TIMEOUT, || {
        out.path().join("moved-000001.log").exists()
    });
    assert!(names(work.path()).is_empty());
    assert_eq!(
        std::fs::read(out.path().join("moved-000001.log")).unwrap(),
        lines(&first)
    );

    publish(&nsqd, "moved", &second);
    wait_finished(&nsqd, "moved", "nsq_to_file", 20);
    assert_eq!(names(work.path()), ["moved-000002.log"]);
    tool.stop_ok("TERM");
    assert!(names(work.path()).is_empty());
    assert_eq!(
        names(out.path()),
        ["moved-000000.log", "moved-000001.log", "moved-000002.log"]
    );
    assert_eq!(
        std::fs::read(out.path().join("moved-000002.log")).unwrap(),
        lines(&second)
    );
    assert_eq!(
        std::fs::read(out.path().join("moved-000000.log")).unwrap(),
        b"old\n"
    );
}

#[test]
fn topic_pattern_picks_up_topics_created_later() {
    let lookupd = Nsqlookupd::start(&[]);
    let nsqd = nsqd_registered_with(&lookupd);
    let out = tempfile::tempdir().unwrap();
    let lh = lookupd.http_addr.to_string();
    let tool = nsq_to_file(&[
        "--lookupd-http-address",
        &lh,
        "--topic-pattern=^keep",
        "--topic-refresh=300ms",
        "--output-dir",
        out.path().to_str().unwrap(),
        "--filename-format=<TOPIC>.log",
        "--sync-interval=200ms",
        "--consumer-opt=lookupd_poll_interval,500ms",
    ]);
    // Created after the tool started.
    std::thread::sleep(Duration::from_millis(500));
    let keep = bodies("k", 0..3);
    publish(&nsqd, "keep_me", &keep);
    publish(&nsqd, "drop_me", &bodies("d", 0..3));
    wait_finished(&nsqd, "keep_me", "nsq_to_file", 3);
    tool.wait_for("drop_me to be skipped", TIMEOUT, || {
        tool.stderr()
            .contains("WARNING: skipping topic drop_me (doesn't match pattern ^keep)")
    });
    tool.stop_ok("TERM");
    assert_eq!(names(out.path()), ["keep_me.log"]);
    assert_eq!(
        std::fs::read(out.path().join("keep_me.log")).unwrap(),
        lines(&keep)
    );
    assert!(find_channel(&nsqd.stats(), "drop_me", "nsq_to_file").is_none());
}

/// Complete lines of every file of `dir`, each checked to be a published body, and how many
/// were duplicates.
fn lines_on_disk(dir: &Path, published: &HashSet<Vec<u8>>) -> (HashSet<Vec<u8>>, usize) {
    let mut seen = HashSet::new();
    let mut dups = 0;
    for (name, content) in files(dir) {
        let complete = match content.iter().rposition(|&b| b == b'\n') {
            Some(p) => &content[..=p],
            None => &content[..0],
        };
        for line in complete.split(|&b| b == b'\n') {
            if line.is_empty() {
                continue;
            }
            assert!(
                published.contains(line),
                "{name}: {:?} was never published",
                String::from_utf8_lossy(line)
            );
            if !seen.insert(line.to_vec()) {
                dups += 1;
            }
        }
    }
    (seen, dups)
}

/// Publishes `n` messages, starts the tool and waits until it has finished some of them
/// (but, with a 30 s sync interval and a large backlog, usually not all).
fn backlog_and_tool(n: usize, out: &Path) -> (Nsqd, Tool, HashSet<Vec<u8>>) {
    let nsqd = Nsqd::start(&[]);
    let all = bodies("m", 0..n);
    let mut body = Vec::new();
    for b in &all {
        body.extend_from_slice(b);
        body.push(b'\n');
    }
    let r = http_post(nsqd.http_addr, "/mpub?topic=stream", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let addr = nsqd.tcp_addr.to_string();
    let tool = to_file(
        "stream",
        &addr,
        out.to_str().unwrap(),
        &["--filename-format=<TOPIC><REV>.log", "--rotate-size=100000"],
    );
    tool.wait_for("some messages finished", TIMEOUT, || {
        find_channel(&nsqd.stats(), "stream", "nsq_to_file").is_some_and(|c| {
            int(c, "message_count") == n as i64
                && int(c, "depth") + int(c, "in_flight_count") < n as i64 - 1000
        })
    });
    (nsqd, tool, all.into_iter().collect())
}

/// `(finished, stats)` once nsqd has seen the tool's connection go away.
fn finished_after_disconnect(nsqd: &Nsqd, n: usize) -> (i64, Value) {
    let s = nsqd.wait_stats("the tool's connection to close", TIMEOUT, |s| {
        find_channel(s, "stream", "nsq_to_file")
            .is_some_and(|c| c["clients"].as_array().is_some_and(|a| a.is_empty()))
    });
    let c = find_channel(&s, "stream", "nsq_to_file").unwrap().clone();
    assert_eq!(int(&c, "message_count"), n as i64);
    let finished =
        n as i64 - int(&c, "depth") - int(&c, "in_flight_count") - int(&c, "deferred_count");
    (finished, c)
}

#[test]
fn sigterm_mid_stream_finishes_exactly_what_is_on_disk() {
    let out = tempfile::tempdir().unwrap();
    let n = 60_000;
    let (nsqd, tool, published) = backlog_and_tool(n, out.path());
    tool.stop_ok("TERM");
    let (finished, c) = finished_after_disconnect(&nsqd, n);
    // A graceful stop leaves nothing in flight: written messages were synced and finished,
    // the rest requeued.
    assert_eq!(int(&c, "in_flight_count"), 0, "{c}");
    let (seen, dups) = lines_on_disk(out.path(), &published);
    assert_eq!(dups, 0);
    assert_eq!(seen.len() as i64, finished, "{c}");
    assert!(finished > 1000);
}

#[test]
fn sigkill_mid_stream_loses_nothing_that_was_finished() {
    let out = tempfile::tempdir().unwrap();
    let n = 60_000;
    let (nsqd, tool, published) = backlog_and_tool(n, out.path());
    tool.signal("KILL");
    drop(tool);
    let (finished, c) = finished_after_disconnect(&nsqd, n);
    let (seen, dups) = lines_on_disk(out.path(), &published);
    assert_eq!(dups, 0);
    // Every message nsqd considers finished is in a file (more may be, written but not
    // yet acknowledged: nsqd will deliver those again).
    assert!(
        seen.len() as i64 >= finished,
        "{} < {finished}: {c}",
        seen.len()
    );
    assert!(finished > 1000);
}

#[test]
fn validation_messages_and_exit_codes() {
    let bin = nsq_to_file_bin();
    let fatal = |args: &[&str], msg: &str| assert_fatal(&bin, args, msg);
    let n = "--nsqd-tcp-address=127.0.0.1:1";
    let l = "--lookupd-http-address=127.0.0.1:1";
    fatal(
        &["--topic=t", n, "extra", "more"],
        "unknown arguments: [extra more]",
    );
    fatal(&["--log-level=loud", "--version"], "--log-level is invalid");
    fatal(&["--channel=", "--topic=t", n], "--channel is required");
    fatal(
        &["--topic=t", n, "--http-client-connect-timeout=0"],
        "--http-client-connect-timeout should be positive",
    );
    fatal(
        &["--topic=t", n, "--http-client-request-timeout=0s"],
        "--http-client-request-timeout should be positive",
    );
    // Negative durations parse (Go's `flag.Duration`) and fail the same checks.
    fatal(
        &["--topic=t", n, "--http-client-connect-timeout", "-2s"],
        "--http-client-connect-timeout should be positive",
    );
    fatal(
        &["--topic=t", n, "--http-client-request-timeout=-1m"],
        "--http-client-request-timeout should be positive",
    );
    fatal(
        &["--topic=t"],
        "--nsqd-tcp-address or --lookupd-http-address required.",
    );
    fatal(
        &["--topic=t", n, l],
        "use --nsqd-tcp-address or --lookupd-http-address not both",
    );
    fatal(
        &["--topic=t", n, "--gzip-level=10"],
        "invalid --gzip-level value (10), should be 1-9",
    );
    fatal(&[n], "--topic or --topic-pattern required");
    fatal(
        &[n, "--topic-pattern=x"],
        "--lookupd-http-address must be specified when no --topic specified",
    );

    assert_version(&bin, "nsq_to_file");
    assert_help_header(&bin, "nsqd");
    assert_usage_error(
        &bin,
        "nsqd",
        &["--bogus"],
        "flag provided but not defined: -bogus",
    );
    assert_help_lists(
        &bin,
        &[
            "-channel string",
            "-consumer-opt value",
            "-datetime-format string",
            "-filename-format string",
            "-gzip",
            "-gzip-level int",
            "-host-identifier string",
            "-http-client-connect-timeout duration",
            "-http-client-request-timeout duration",
            "-log-level string",
            "-log-prefix string",
            "-lookupd-http-address value",
            "-max-in-flight int",
            "-nsqd-tcp-address value",
            "-output-dir string",
            "-rotate-interval duration",
            "-rotate-size rotate-size",
            "-skip-empty-files",
            "-sync-interval duration",
            "-topic value",
            "-topic-pattern string",
            "-topic-refresh duration",
            "-version",
            "-work-dir string",
        ],
    );
}

#[test]
fn template_without_rev_skips_the_topic() {
    let nsqd = Nsqd::start(&[]);
    let out = tempfile::tempdir().unwrap();
    let addr = nsqd.tcp_addr.to_string();
    let tool = to_file(
        "t",
        &addr,
        out.path().to_str().unwrap(),
        &["--gzip", "--filename-format=<TOPIC>.log"],
    );
    tool.wait_for("the error line", TIMEOUT, || {
        tool.stderr().contains(
            "ERROR: couldn't create logger for new topic t: missing <REV> in \
             --filename-format when gzip, rotation, or work dir enabled",
        )
    });
    tool.stop_ok("TERM");
    assert!(names(out.path()).is_empty());
}

/// go-nsq's `NewConsumer` refuses a negative MaxInFlight (config.go, `Validate`); in
/// nsq_to_file that fails the topic's `NewFileLogger`, which topic_discoverer.go's
/// `updateTopics` logs and skips: the tool keeps running and exits 0 on SIGTERM.
#[test]
fn negative_max_in_flight_skips_the_topic() {
    let out = tempfile::tempdir().unwrap();
    let tool = nsq_to_file(&[
        "--topic=t",
        "--nsqd-tcp-address=127.0.0.1:1",
        "--output-dir",
        out.path().to_str().unwrap(),
        "--max-in-flight=-1",
    ]);
    tool.wait_for("the error line", TIMEOUT, || {
        tool.stderr().contains(
            "ERROR: couldn't create logger for new topic t: invalid MaxInFlight ! -1 < 0\n",
        )
    });
    tool.stop_ok("TERM");
    assert!(names(out.path()).is_empty());
}

/// SIGHUP syncs and closes the file (file_logger.go, `router`), so it too ends with Go's
/// empty member; the next message opens the next revision.
#[test]
fn gzip_files_closed_by_sighup_end_with_an_empty_member() {
    let nsqd = Nsqd::start(&[]);
    let out = tempfile::tempdir().unwrap();
    let addr = nsqd.tcp_addr.to_string();
    let first = bodies("before", 0..300);
    let second = bodies("after", 0..300);
    publish(&nsqd, "hupped", &first);
    let tool = to_file(
        "hupped",
        &addr,
        out.path().to_str().unwrap(),
        &[
            "--gzip",
            "--gzip-level=9",
            "--host-identifier=h",
            "--datetime-format=fixed",
        ],
    );
    wait_finished(&nsqd, "hupped", "nsq_to_file", 300);
    tool.signal("HUP");
    let closed = out.path().join("hupped.h-000000.fixed.log.gz");
    tool.wait_for("the file to be closed", TIMEOUT, || {
        std::fs::read(&closed).is_ok_and(|d| d.ends_with(&EMPTY_LEVEL_9))
    });
    publish(&nsqd, "hupped", &second);
    wait_finished(&nsqd, "hupped", "nsq_to_file", 600);
    tool.stop_ok("TERM");

    let got = files(out.path());
    let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "hupped.h-000000.fixed.log.gz",
            "hupped.h-000001.fixed.log.gz"
        ]
    );
    assert_eq!(assert_go_gzip_layout(&got[0].1).concat(), lines(&first));
    assert_eq!(assert_go_gzip_layout(&got[1].1).concat(), lines(&second));
}

/// A refused nsqd fails the topic's `NewFileLogger` (file_logger.go, its
/// `ConnectToNSQDs`): go-nsq logs the dial, the discoverer logs the error, and the abandoned
/// consumer is never stopped, so go-nsq logs nothing more.
#[test]
fn refused_nsqd_skips_the_topic_with_go_nsqs_lines() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let addr = format!("127.0.0.1:{port}");
    let out = tempfile::tempdir().unwrap();
    let tool = to_file("t", &addr, out.path().to_str().unwrap(), &[]);
    let error = format!(
        " ERROR: couldn't create logger for new topic t: dial tcp {addr}: connect: connection \
         refused"
    );
    tool.wait_for("the error line", TIMEOUT, || tool.stderr().contains(&error));
    let err = tool.stop_ok("TERM");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 2, "{err}");
    assert!(
        lines[0].ends_with(&format!(
            " INF    1 [t/nsq_to_file] ({addr}) connecting to nsqd"
        )),
        "{err}"
    );
    assert!(
        lines[1].starts_with("[nsq_to_file] ") && lines[1].ends_with(&error),
        "{err}"
    );
}

/// Issue 31 (issue 23 had each message FINed within 10 ms instead): the reference syncs
/// when a message opens a file and then only on its `--sync-interval` tick, a full
/// `--max-in-flight` batch, a starved connection, rotation, SIGHUP or shutdown
/// (file_logger.go, `router`), each `Sync` ending the gzip member. One message every 200 ms
/// with `--gzip` (sync interval 30 s): `syncing 1 records to disk` for the first, the other
/// six stay in flight until SIGTERM syncs them (`syncing 6 records to disk`), and the file
/// is three members: the first line, the other six, and the empty member of the close.
/// Before: `syncing 1 records to disk` seven times and one member flushed seven times.
#[test]
fn gzip_at_a_low_rate_syncs_when_the_reference_does() {
    let nsqd = Nsqd::start(&[]);
    let out = tempfile::tempdir().unwrap();
    let addr = nsqd.tcp_addr.to_string();
    let tool = to_file(
        "lowrate",
        &addr,
        out.path().to_str().unwrap(),
        &[
            "--gzip",
            "--gzip-level=9",
            "--host-identifier=h",
            "--datetime-format=fixed",
        ],
    );
    let want = bodies("slow", 0..7);
    for (i, b) in want.iter().enumerate() {
        publish(&nsqd, "lowrate", std::slice::from_ref(b));
        // Delivered; only the first is finished (synced as the file opened).
        let at = Instant::now();
        nsqd.wait_stats("the message delivered", TIMEOUT, |s| {
            find_channel(s, "lowrate", "nsq_to_file").is_some_and(|c| {
                int(c, "message_count") == i as i64 + 1
                    && int(c, "in_flight_count") == i as i64
                    && int(c, "depth") == 0
            })
        });
        std::thread::sleep(Duration::from_millis(200).saturating_sub(at.elapsed()));
    }
    std::thread::sleep(Duration::from_millis(300));
    let ch = nsqd.channel_stats("lowrate", "nsq_to_file").unwrap();
    assert_eq!(int(&ch, "in_flight_count"), 6, "{ch}");
    let stderr = tool.stop_ok("TERM");
    let syncs: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("syncing"))
        .map(|l| l.split_once(" INFO: ").map_or(l, |(_, m)| m))
        .collect();
    assert_eq!(
        syncs,
        [
            "[lowrate/nsq_to_file] syncing 1 records to disk",
            "[lowrate/nsq_to_file] syncing 6 records to disk"
        ],
        "{stderr}"
    );
    let got = files(out.path());
    let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["lowrate.h-000000.fixed.log.gz"]);
    let data = &got[0].1;
    let members = assert_go_gzip_layout(data);
    assert_eq!(members, [lines(&want[..1]), lines(&want[1..])]);
    // Each member is one deflate stream of its lines, with nothing flushed in between.
    let gz = |b: &[u8]| {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(9));
        e.write_all(b).unwrap();
        e.finish().unwrap()
    };
    let mut expect = gz(&lines(&want[..1]));
    expect.extend(gz(&lines(&want[1..])));
    expect.extend(EMPTY_LEVEL_9);
    assert_eq!(*data, expect, "{} bytes", data.len());
}
