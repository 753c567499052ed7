//! `nsq_to_http` against the real nsqd and HTTP servers started here on 127.0.0.1:0 that
//! record every request: POST bodies and headers (`Content-Type`, `--header`s, the user
//! agents), GET with the query-escaped body in place of `%s` (and only 200 counts),
//! round-robin over two servers, fan-out to both, hostpool skipping a dead destination,
//! failing answers and dropped connections retried until every message arrived (each FINed
//! once, one requeue per failure), the request timeout, the `--status-every` lines, SIGTERM
//! (exit 0), and the command-line validation of nsq's apps/nsq_to_http/nsq_to_http.go.
//!
//! Build first: `cargo build -p nsqd-bin -p nsq_to_http-bin` (or set NSQD_BIN /
//! NSQ_TO_HTTP_BIN).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use nsq_integration_tests::util::{
    argv0, assert_fatal, assert_help_header, assert_usage_error, assert_version,
    nsqd_registered_with, publish, tool_lines, wait_finished, wait_registered, Tool,
};
use nsq_integration_tests::{assert_go_log_line, int, nsq_to_http_bin, run_tool, Nsqd, Nsqlookupd};

const TIMEOUT: Duration = Duration::from_secs(60);

/// Fast retries, so a requeued message comes back in milliseconds instead of go-nsq's 90 s,
/// and no message is ever given up.
const QUICK_RETRY: [&str; 8] = [
    "--consumer-opt",
    "default_requeue_delay,10ms",
    "--consumer-opt",
    "backoff_multiplier,10ms",
    "--consumer-opt",
    "max_backoff_duration,50ms",
    "--consumer-opt",
    "max_attempts,0",
];

// ---------------------------------------------------------------------------------------------
// the recording HTTP server

/// How the server answers one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reply {
    Status(u16),
    /// Read the request, then close the connection without an answer.
    Close,
    /// Answer with this status after a pause.
    Late(Duration, u16),
}

/// One request as the server read it, and what it answered (`None`: connection closed).
#[derive(Debug, Clone)]
struct Request {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    reply: Reply,
    /// When the request had been read.
    at: Instant,
}

impl Request {
    /// Every value of a header (name case-insensitive).
    fn header_values(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }

    fn header(&self, name: &str) -> Option<&str> {
        let v = self.header_values(name);
        assert!(
            v.len() <= 1,
            "{name} sent {} times: {:?}",
            v.len(),
            self.headers
        );
        v.first().copied()
    }

    fn delivered(&self) -> bool {
        self.reply == Reply::Status(200)
    }
}

type Policy = dyn Fn(usize) -> Reply + Send + Sync;

/// An HTTP/1.1 server (keep-alive, `Content-Length` bodies) answering per `policy(n)` for the
/// n-th request (from 0) and recording every request.
struct Sink {
    addr: SocketAddr,
    log: Arc<Mutex<Vec<Request>>>,
}

impl Sink {
    fn ok() -> Sink {
        Sink::start(|_| Reply::Status(200))
    }

    fn start(policy: impl Fn(usize) -> Reply + Send + Sync + 'static) -> Sink {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let policy: Arc<Policy> = Arc::new(policy);
        let counter = Arc::new(AtomicUsize::new(0));
        let l = log.clone();
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let (log, policy, counter) = (l.clone(), policy.clone(), counter.clone());
                thread::spawn(move || serve(stream, &log, &*policy, &counter));
            }
        });
        Sink { addr, log }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn requests(&self) -> Vec<Request> {
        self.log.lock().unwrap().clone()
    }

    /// Waits until `pred` holds for the requests so far; panics with them on timeout.
    fn wait(&self, what: &str, pred: impl Fn(&[Request]) -> bool) -> Vec<Request> {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let r = self.requests();
            if pred(&r) {
                return r;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; requests: {r:#?}"
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// The bodies of the requests answered 200, in arrival order.
    fn delivered_bodies(&self) -> Vec<Vec<u8>> {
        self.requests()
            .into_iter()
            .filter(Request::delivered)
            .map(|r| r.body)
            .collect()
    }
}

fn serve(stream: TcpStream, log: &Mutex<Vec<Request>>, policy: &Policy, counter: &AtomicUsize) {
    let mut out = stream.try_clone().unwrap();
    let mut rd = BufReader::new(stream);
    loop {
        let mut line = String::new();
        if rd.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.trim_end().splitn(3, ' ');
        let method = parts.next().unwrap_or_default().to_string();
        let target = parts.next().unwrap_or_default().to_string();
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            if rd.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end_matches(['\r', '\n']);
            if h.is_empty() {
                break;
            }
            let (k, v) = h.split_once(':').expect("header line");
            headers.push((k.to_string(), v.trim().to_string()));
        }
        let len: usize = headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
            .map_or(0, |(_, v)| v.parse().unwrap());
        let mut body = vec![0; len];
        if rd.read_exact(&mut body).is_err() {
            return;
        }
        let reply = policy(counter.fetch_add(1, Ordering::SeqCst));
        log.lock().unwrap().push(Request {
            method,
            target,
            headers,
            body,
            reply,
            at: Instant::now(),
        });
        let status = match reply {
            Reply::Close => {
                let _ = out.shutdown(Shutdown::Both);
                return;
            }
            Reply::Status(s) => s,
            Reply::Late(pause, s) => {
                thread::sleep(pause);
                s
            }
        };
        let answer = format!("HTTP/1.1 {status} X\r\nContent-Length: 4\r\n\r\nbody");
        if out.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// the tool

/// A running nsq_to_http (stderr collected, killed on drop unless stopped).
fn nsq_to_http(args: &[&str]) -> Tool {
    Tool::start(&nsq_to_http_bin(), args)
}

/// nsq_to_http consuming `topic` from `nsqd`, with `args` after `--topic` and
/// `--nsqd-tcp-address`.
fn from_nsqd(nsqd: &Nsqd, topic: &str, args: &[&str]) -> Tool {
    let (t, addr) = (format!("--topic={topic}"), nsqd.tcp_addr.to_string());
    let mut all = vec![t.as_str(), "--nsqd-tcp-address", &addr];
    all.extend_from_slice(args);
    nsq_to_http(&all)
}

fn numbered(prefix: &str, n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| format!("{prefix}{i}").into_bytes())
        .collect()
}

// ---------------------------------------------------------------------------------------------
// tests

#[test]
fn post_sends_body_content_type_headers_and_user_agents() {
    let nsqd = Nsqd::start(&[]);
    let sink = Sink::ok();
    let bodies: Vec<Vec<u8>> = vec![
        b"one".to_vec(),
        b"bin\x00\xff\x01".to_vec(),
        b"with space & more".to_vec(),
    ];
    publish(&nsqd, "posted", &bodies);
    let url = sink.url("/in?src=nsq");
    let tool = from_nsqd(
        &nsqd,
        "posted",
        &[
            "--post",
            &url,
            "--content-type",
            "text/plain; charset=utf-8",
            "--header",
            "X-Custom: v1",
            "--header",
            "  X-Trim :  spaced value  ",
            "--header",
            "X-Url: http://a:1/b",
            "-n",
            "1",
            "--max-in-flight",
            "7",
            "--consumer-opt",
            "max_in_flight,999",
        ],
    );
    let reqs = sink.wait("3 POSTs", |r| r.len() >= 3);
    assert_eq!(reqs.len(), 3);
    for (r, body) in reqs.iter().zip(&bodies) {
        assert_eq!(r.method, "POST");
        assert_eq!(r.target, "/in?src=nsq");
        assert_eq!(&r.body, body);
        assert_eq!(r.header("Content-Type"), Some("text/plain; charset=utf-8"));
        assert_eq!(r.header("User-Agent"), Some("nsq_to_http v1.3.0"));
        assert_eq!(r.header("X-Custom"), Some("v1"));
        assert_eq!(r.header("X-Trim"), Some("spaced value"));
        assert_eq!(r.header("X-Url"), Some("http://a:1/b"));
        let len = body.len().to_string();
        assert_eq!(r.header("Content-Length"), Some(len.as_str()));
        // Go's transport asks for gzip (issue 23, item 5), and Go sends no `Accept` (issue
        // 31: reqwest's `Accept: */*` was sent before).
        assert_eq!(r.header("Accept-Encoding"), Some("gzip"));
        assert_eq!(r.header("Accept"), None);
        // The whole head in Go's order (net/http `Request.write`): Host, User-Agent,
        // Content-Length, the request's headers sorted by name, the transport's gzip.
        let host = sink.addr.to_string();
        let head: Vec<(&str, &str)> = r
            .headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            head,
            [
                ("Host", host.as_str()),
                ("User-Agent", "nsq_to_http v1.3.0"),
                ("Content-Length", len.as_str()),
                ("Content-Type", "text/plain; charset=utf-8"),
                ("X-Custom", "v1"),
                ("X-Trim", "spaced value"),
                ("X-Url", "http://a:1/b"),
                ("Accept-Encoding", "gzip"),
            ]
        );
    }
    let ch = wait_finished(&nsqd, "posted", "nsq_to_http", 3);
    assert_eq!(int(&ch, "requeue_count"), 0);
    let client = &ch["clients"][0];
    assert_eq!(client["user_agent"], "nsq_to_http/1.3.0 go-nsq/1.1.0");
    // --max-in-flight is the RDY; --consumer-opt cannot change it.
    assert_eq!(client["ready_count"], 7);
    let (status, err) = tool.stop("TERM");
    assert_eq!(status.code(), Some(0), "{err}");
}

#[test]
fn get_substitutes_the_query_escaped_body_and_only_200_counts() {
    let nsqd = Nsqd::start(&[]);
    // The first GET is answered 201: a success for POST, a failure for GET.
    let sink = Sink::start(|n| Reply::Status(if n == 0 { 201 } else { 200 }));
    let bodies: Vec<Vec<u8>> = vec!["a b&c=d/é?".as_bytes().to_vec(), b"plain".to_vec()];
    publish(&nsqd, "got", &bodies);
    let template = sink.url("/g/x?d=%s&t=1");
    let mut args = vec![
        "--channel=getter",
        "--get",
        &template,
        "--header",
        "User-Agent: custom/2",
        "--header",
        "Accept-Encoding: identity",
        "-n=1",
    ];
    args.extend(QUICK_RETRY);
    let tool = from_nsqd(&nsqd, "got", &args);
    let reqs = sink.wait("both messages answered 200", |r| {
        r.iter().filter(|r| r.delivered()).count() >= 2
    });
    let first = "/g/x?d=a+b%26c%3Dd%2F%C3%A9%3F&t=1";
    assert_eq!(reqs[0].target, first, "the 201 one");
    let mut delivered: Vec<&str> = reqs
        .iter()
        .filter(|r| r.delivered())
        .map(|r| r.target.as_str())
        .collect();
    delivered.sort_unstable();
    assert_eq!(delivered, [first, "/g/x?d=plain&t=1"]);
    for r in &reqs {
        assert_eq!(r.method, "GET");
        assert!(r.body.is_empty());
        assert_eq!(r.header("Content-Type"), None);
        // A --header replaces the default User-Agent, and one naming an encoding keeps
        // the transport from asking for gzip; a GET has no Content-Length, and nothing else
        // is sent (no `Accept`).
        let host = sink.addr.to_string();
        let head: Vec<(&str, &str)> = r
            .headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            head,
            [
                ("Host", host.as_str()),
                ("User-Agent", "custom/2"),
                ("Accept-Encoding", "identity"),
            ]
        );
    }
    let ch = wait_finished(&nsqd, "got", "getter", 2);
    assert_eq!(int(&ch, "requeue_count"), 1, "{ch}");
    let (status, err) = tool.stop("TERM");
    assert_eq!(status.code(), Some(0), "{err}");
    assert_eq!(sink.requests().len(), 3);
}

#[test]
fn round_robin_alternates_and_other_modes_fan_out() {
    let nsqd = Nsqd::start(&[]);
    let (a, b) = (Sink::ok(), Sink::ok());
    let bodies = numbered("m", 6);
    publish(&nsqd, "spread", &bodies);
    let (ua, ub) = (a.url("/a"), b.url("/b"));
    let rr = from_nsqd(
        &nsqd,
        "spread",
        &[
            "--channel=rr",
            "--post",
            &ua,
            "--post",
            &ub,
            "--mode",
            "round-robin",
            "-n",
            "1",
        ],
    );
    wait_finished(&nsqd, "spread", "rr", 6);
    // The counter is incremented before use: the first message goes to the second address.
    let (got_a, got_b) = (a.delivered_bodies(), b.delivered_bodies());
    assert_eq!(
        got_b,
        [bodies[0].clone(), bodies[2].clone(), bodies[4].clone()]
    );
    assert_eq!(
        got_a,
        [bodies[1].clone(), bodies[3].clone(), bodies[5].clone()]
    );
    assert_eq!(rr.stop("TERM").0.code(), Some(0));

    // Any mode other than round-robin/hostpool/epsilon-greedy sends to every address.
    let (c, d) = (Sink::ok(), Sink::ok());
    let (uc, ud) = (c.url("/c"), d.url("/d"));
    publish(&nsqd, "both", &bodies);
    let fan = from_nsqd(
        &nsqd,
        "both",
        &["--post", &uc, "--post", &ud, "--mode=multicast"],
    );
    wait_finished(&nsqd, "both", "nsq_to_http", 6);
    let mut got_c = c.delivered_bodies();
    let mut got_d = d.delivered_bodies();
    got_c.sort();
    got_d.sort();
    assert_eq!(got_c, bodies);
    assert_eq!(got_d, bodies);
    assert_eq!(fan.stop("TERM").0.code(), Some(0));

    // epsilon-greedy: one destination per message, every message once.
    let (e, f) = (Sink::ok(), Sink::ok());
    let (ue, uf) = (e.url("/e"), f.url("/f"));
    publish(&nsqd, "greedy", &bodies);
    let greedy = from_nsqd(
        &nsqd,
        "greedy",
        &["--post", &ue, "--post", &uf, "--mode=epsilon-greedy"],
    );
    wait_finished(&nsqd, "greedy", "nsq_to_http", 6);
    let mut got = e.delivered_bodies();
    got.extend(f.delivered_bodies());
    got.sort();
    assert_eq!(got, bodies);
    assert_eq!(greedy.stop("TERM").0.code(), Some(0));
}

#[test]
fn discovers_nsqd_via_lookupd() {
    let lookupd = Nsqlookupd::start(&[]);
    let nsqd = nsqd_registered_with(&lookupd);
    let bodies = numbered("found", 3);
    publish(&nsqd, "found", &bodies);
    wait_registered(&lookupd, "found");
    let sink = Sink::ok();
    let (lh, url) = (lookupd.http_addr.to_string(), sink.url("/found"));
    let tool = nsq_to_http(&[
        "--topic=found",
        "--lookupd-http-address",
        &lh,
        "--post",
        &url,
        "-n=1",
    ]);
    wait_finished(&nsqd, "found", "nsq_to_http", 3);
    assert_eq!(sink.delivered_bodies(), bodies);
    assert_eq!(tool.stop("TERM").0.code(), Some(0));
}

#[test]
fn hostpool_leaves_a_dead_destination_and_requeues_its_message() {
    let nsqd = Nsqd::start(&[]);
    let dead = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/dead", l.local_addr().unwrap())
    };
    let live = Sink::ok();
    let bodies = numbered("h", 8);
    publish(&nsqd, "pool", &bodies);
    let live_url = live.url("/live");
    let mut args = vec![
        // The default mode is hostpool; the dead address comes first, so it is tried.
        "--post", &dead, "--post", &live_url, "-n", "1",
    ];
    args.extend(QUICK_RETRY);
    let tool = from_nsqd(&nsqd, "pool", &args);
    let ch = wait_finished(&nsqd, "pool", "nsq_to_http", 8);
    // Once marked dead the address is left alone for 30 s: one failure, one requeue.
    assert_eq!(int(&ch, "requeue_count"), 1, "{ch}");
    let mut got = live.delivered_bodies();
    got.sort();
    assert_eq!(got, bodies);
    assert_eq!(tool.stop("TERM").0.code(), Some(0));
}

#[test]
fn failing_answers_and_dropped_connections_are_retried_until_all_arrive() {
    let nsqd = Nsqd::start(&[]);
    // Every third request fails with 500 (and one with 404), the 5th and 11th lose their
    // connection without an answer; the rest succeed.
    let sink = Sink::start(|n| match n {
        4 | 10 => Reply::Close,
        7 => Reply::Status(404),
        n if n % 3 == 2 => Reply::Status(500),
        _ => Reply::Status(200),
    });
    let bodies = numbered("retry-", 40);
    publish(&nsqd, "flaky", &bodies);
    let url = sink.url("/flaky");
    let mut args = vec!["--post", &url, "-n", "4"];
    args.extend(QUICK_RETRY);
    let tool = from_nsqd(&nsqd, "flaky", &args);
    let ch = wait_finished(&nsqd, "flaky", "nsq_to_http", 40);
    let reqs = sink.requests();
    let failures = reqs.iter().filter(|r| !r.delivered()).count();
    assert!(
        failures >= 14,
        "{failures} failures in {} requests",
        reqs.len()
    );
    // Every failure was requeued once, and every message arrived exactly once.
    assert_eq!(int(&ch, "requeue_count"), failures as i64, "{ch}");
    let mut counts: BTreeMap<Vec<u8>, usize> = BTreeMap::new();
    for b in sink.delivered_bodies() {
        *counts.entry(b).or_default() += 1;
    }
    assert_eq!(counts.len(), 40, "{counts:?}");
    assert!(counts.values().all(|&c| c == 1), "{counts:?}");
    assert!(counts.keys().all(|k| bodies.contains(k)));
    assert_eq!(tool.stop("TERM").0.code(), Some(0));
}

#[test]
fn request_timeout_requeues_the_message() {
    let nsqd = Nsqd::start(&[]);
    // The first request is answered after 6 s, long after the client's 1 s.
    let sink = Sink::start(|n| {
        if n == 0 {
            Reply::Late(Duration::from_secs(6), 200)
        } else {
            Reply::Status(200)
        }
    });
    let bodies = numbered("slow", 3);
    publish(&nsqd, "slow", &bodies);
    let url = sink.url("/slow");
    let mut args = vec![
        "--post",
        &url,
        "--http-client-request-timeout=1s",
        "--http-client-connect-timeout=1s",
        "-n",
        "1",
    ];
    args.extend(QUICK_RETRY);
    let tool = from_nsqd(&nsqd, "slow", &args);
    let ch = wait_finished(&nsqd, "slow", "nsq_to_http", 3);
    // (More than one requeue only if the loaded machine made a prompt answer take 1 s too.)
    assert!(int(&ch, "requeue_count") >= 1, "{ch}");
    let reqs = sink.requests();
    let first = &reqs[0].body;
    assert!(
        reqs[1..].iter().any(|r| &r.body == first && r.delivered()),
        "the timed-out message was not sent again: {reqs:#?}"
    );
    let mut got = sink.delivered_bodies();
    got.sort();
    got.dedup();
    assert_eq!(got, bodies);
    assert_eq!(tool.stop("TERM").0.code(), Some(0));
}

/// `<prefix> finished <n> - 99th: <x>ms - 95th: <x>ms - avg: <x>ms`, `x` with two decimals.
fn is_status_line(msg: &str, prefix: &str, n: usize) -> bool {
    let Some(rest) = msg.strip_prefix(&format!("{prefix} finished {n} - 99th: ")) else {
        return false;
    };
    let ms = |s: &str| {
        s.split_once('.').is_some_and(|(i, f)| {
            !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()) && f.len() == 2
        })
    };
    let Some((p99, rest)) = rest.split_once("ms - 95th: ") else {
        return false;
    };
    let Some((p95, rest)) = rest.split_once("ms - avg: ") else {
        return false;
    };
    let Some(avg) = rest.strip_suffix("ms") else {
        return false;
    };
    ms(p99) && ms(p95) && ms(avg)
}

#[test]
fn status_every_lines_per_address_and_aggregate() {
    let nsqd = Nsqd::start(&[]);
    let (a, b) = (Sink::ok(), Sink::ok());
    publish(&nsqd, "timed", &numbered("t", 6));
    let (ua, ub) = (a.url("/a"), b.url("/b"));
    let tool = from_nsqd(
        &nsqd,
        "timed",
        &[
            "--post",
            &ua,
            "--post",
            &ub,
            "--mode=round-robin",
            "--status-every=2",
            "-n=1",
        ],
    );
    wait_finished(&nsqd, "timed", "nsq_to_http", 6);
    let (status, err) = tool.stop("TERM");
    assert_eq!(status.code(), Some(0), "{err}");
    let err = tool_lines(&err);
    let lines: Vec<&str> = err.lines().collect();
    for l in &lines {
        assert_go_log_line(format!("{l}\n").as_bytes(), &l[20.min(l.len())..]);
    }
    let msgs: Vec<&str> = lines.iter().map(|l| &l[20..]).collect();
    let warning =
        "Warning: use more than 100 status values for accurate percentiles (configured with 2)";
    // One series per address, then the aggregate, each warning once when created.
    assert_eq!(msgs[..3], [warning; 3], "{err}");
    let rest = &msgs[3..];
    // Six requests, alternating b, a, …: each series logs when its ring of 2 wraps
    // (the 3rd sample, then the 5th): [b] and [a] once, the aggregate twice.
    let pa = format!("[{ua}]:");
    let pb = format!("[{ub}]:");
    let count = |p: &str| rest.iter().filter(|m| is_status_line(m, p, 2)).count();
    assert_eq!(count("[aggregate]:"), 2, "{err}");
    assert_eq!(count(&pa), 1, "{err}");
    assert_eq!(count(&pb), 1, "{err}");
    assert_eq!(rest.len(), 4, "{err}");
}

#[test]
fn single_address_logs_only_the_aggregate_and_zero_disables() {
    let nsqd = Nsqd::start(&[]);
    let sink = Sink::ok();
    publish(&nsqd, "one", &numbered("o", 3));
    let url = sink.url("/");
    let tool = from_nsqd(&nsqd, "one", &["--post", &url, "--status-every=2"]);
    wait_finished(&nsqd, "one", "nsq_to_http", 3);
    let (status, err) = tool.stop("TERM");
    assert_eq!(status.code(), Some(0), "{err}");
    let err = tool_lines(&err);
    let msgs: Vec<&str> = err.lines().map(|l| &l[20..]).collect();
    assert_eq!(msgs.len(), 2, "{err}");
    assert_eq!(
        msgs[0],
        "Warning: use more than 100 status values for accurate percentiles (configured with 2)"
    );
    assert!(is_status_line(msgs[1], "[aggregate]:", 2), "{err}");

    publish(&nsqd, "quiet", &numbered("q", 3));
    let tool = from_nsqd(&nsqd, "quiet", &["--post", &url, "--status-every=0"]);
    wait_finished(&nsqd, "quiet", "nsq_to_http", 3);
    let (status, err) = tool.stop("TERM");
    assert_eq!(status.code(), Some(0));
    assert_eq!(tool_lines(&err), "", "{err}");
}

#[test]
fn validation_messages_and_exit_codes() {
    let bin = nsq_to_http_bin();
    let fatal = |args: &[&str], msg: &str| assert_fatal(&bin, args, msg);
    let nsqd = ["--nsqd-tcp-address", "127.0.0.1:4150"];
    let with = |extra: &[&'static str]| -> Vec<&'static str> {
        let mut v = vec!["--topic", "t", "--nsqd-tcp-address", "127.0.0.1:4150"];
        v.extend_from_slice(extra);
        v
    };

    // The --header check comes first, whatever else is missing.
    for h in ["novalue", "X-A:", ": v", "X-A=1"] {
        fatal(
            &["--header", h],
            "--header value format should be 'key=value'",
        );
    }
    fatal(&nsqd, "--topic and --channel are required");
    fatal(
        &["--topic", "t", "--channel", ""],
        "--topic and --channel are required",
    );
    fatal(
        &with(&["--content-type", "text/plain", "--get", "http://h/?d=%s"]),
        "--content-type only used with --post",
    );
    fatal(
        &with(&["--content-type", "", "--post", "http://h/"]),
        "--content-type requires a value when used",
    );
    fatal(
        &["--topic", "t", "--post", "http://h/"],
        "--nsqd-tcp-address or --lookupd-http-address required",
    );
    fatal(
        &[
            "--topic",
            "t",
            "--post",
            "http://h/",
            "--nsqd-tcp-address",
            "127.0.0.1:4150",
            "--lookupd-http-address",
            "127.0.0.1:4161",
        ],
        "use --nsqd-tcp-address or --lookupd-http-address not both",
    );
    fatal(&with(&[]), "--get or --post required");
    fatal(
        &with(&["--get", "http://h/?d=%s", "--post", "http://h/"]),
        "use --get or --post not both",
    );
    for get in ["http://h/", "http://h/%s?d=%s"] {
        fatal(
            &with(&["--get", "http://h/?d=%s", "--get", get]),
            "invalid GET address - must be a printf string",
        );
    }
    for s in ["1.5", "-0.1"] {
        fatal(
            &with(&["--post", "http://h/", "--sample", s]),
            "ERROR: --sample must be between 0.0 and 1.0",
        );
    }

    // What go-nsq refuses when the consumer is set up.
    fatal(
        &with(&["--post", "http://h/", "--max-in-flight", "-1"]),
        "invalid MaxInFlight ! -1 < 0",
    );
    fatal(&with(&["--post", "http://h/", "-n", "0"]), "no handlers");

    let usage_error =
        |args: &[&str], first: &str| assert_usage_error(&bin, &argv0(&bin), args, first);
    usage_error(
        &["--sample", "half"],
        "invalid value \"half\" for flag -sample: parse error",
    );
    usage_error(
        &["--consumer-opt", "bogus,1"],
        "invalid value \"bogus,1\" for flag -consumer-opt: invalid option bogus",
    );
    usage_error(
        &["--http-client-request-timeout", "5"],
        "invalid value \"5\" for flag -http-client-request-timeout: parse error",
    );
    // v1.3 no longer has the deprecated --round-robin (use --mode=round-robin).
    usage_error(
        &["--round-robin"],
        "flag provided but not defined: -round-robin",
    );

    assert_version(&bin, "nsq_to_http");
    assert_help_header(&bin, &argv0(&bin));

    let out = run_tool(&bin, &["-h"], b"", TIMEOUT);
    assert_eq!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    for flag in [
        "-channel string\n    \tnsq channel (default \"nsq_to_http\")",
        "-consumer-opt value",
        "-content-type string\n    \tthe Content-Type used for POST requests (default \"application/octet-stream\")",
        "-get value",
        "-header value",
        "-http-client-connect-timeout duration\n    \ttimeout for HTTP connect (default 2s)",
        "-http-client-request-timeout duration\n    \ttimeout for HTTP request (default 20s)",
        "-lookupd-http-address value",
        "-max-in-flight int\n    \tmax number of messages to allow in flight (default 200)",
        "-mode string",
        "(default \"hostpool\")",
        "-n int\n    \tnumber of concurrent publishers (default 100)",
        "-nsqd-tcp-address value",
        "-post value",
        "-sample float\n    \t% of messages to publish (float b/w 0 -> 1) (default 1)",
        "-status-every int",
        "-topic string",
        "-version",
    ] {
        assert!(err.contains(flag), "{flag}: {err}");
    }
}

#[test]
fn sigterm_lets_requests_in_flight_finish() {
    let nsqd = Nsqd::start(&[]);
    // Every answer takes a second: SIGTERM arrives while both requests are waiting for one.
    let sink = Sink::start(|_| Reply::Late(Duration::from_secs(1), 200));
    let bodies = numbered("late", 2);
    publish(&nsqd, "late", &bodies);
    let url = sink.url("/late");
    let tool = from_nsqd(&nsqd, "late", &["--post", &url, "-n", "2"]);
    sink.wait("both requests", |r| r.len() == 2);
    let (status, err) = tool.stop("TERM");
    assert_eq!(status.code(), Some(0), "{err}");
    // Both answers were awaited and the messages finished, not requeued.
    let ch = wait_finished(&nsqd, "late", "nsq_to_http", 2);
    assert_eq!(int(&ch, "requeue_count"), 0, "{ch}");
    assert_eq!(int(&ch, "timeout_count"), 0, "{ch}");
    assert_eq!(sink.requests().len(), 2);
}

#[test]
fn connect_timeout_requeues_the_message() {
    // A listener that never accepts: once its accept queue is full the kernel drops new SYNs,
    // so a connect hangs until the client's connect timeout.
    // A backlog of 1 so that a couple of connections fill it.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .unwrap();
    let listener = rt.block_on(async {
        let s = tokio::net::TcpSocket::new_v4().unwrap();
        s.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        s.listen(1).unwrap().into_std().unwrap()
    });
    let addr = listener.local_addr().unwrap();
    let mut held = Vec::new();
    loop {
        match TcpStream::connect_timeout(&addr, Duration::from_millis(500)) {
            Ok(s) => held.push(s),
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => break,
            Err(e) => panic!("connect {addr}: {e}"),
        }
        assert!(held.len() < 10_000, "the accept queue never filled");
    }
    let nsqd = Nsqd::start(&[]);
    publish(&nsqd, "unreachable", &numbered("u", 1));
    let url = format!("http://{addr}/never");
    let mut args = vec![
        "--post",
        &url,
        "--http-client-connect-timeout=300ms",
        // Far beyond the wait below: only the connect timeout can fail the request in time
        // (with the connect timeout at 5m too, nothing is requeued within the minute).
        "--http-client-request-timeout=5m",
    ];
    args.extend(QUICK_RETRY);
    let tool = from_nsqd(&nsqd, "unreachable", &args);
    nsqd.wait_stats("requeues after connect timeouts", TIMEOUT, |s| {
        nsq_integration_tests::find_channel(s, "unreachable", "nsq_to_http")
            .is_some_and(|c| int(c, "requeue_count") >= 2)
    });
    assert_eq!(tool.stop("TERM").0.code(), Some(0));
    drop(held);
}

#[test]
fn a_message_that_always_fails_is_given_up_after_max_attempts() {
    let nsqd = Nsqd::start(&[]);
    let sink = Sink::start(|_| Reply::Status(503));
    publish(&nsqd, "doomed", &numbered("d", 1));
    let url = sink.url("/doomed");
    let mut args = vec!["--post", &url];
    args.extend(QUICK_RETRY);
    // The later option wins over QUICK_RETRY's max_attempts,0.
    args.extend(["--consumer-opt", "max_attempts,3"]);
    let tool = from_nsqd(&nsqd, "doomed", &args);
    // Attempts 1..3 are sent and requeued; the 4th delivery is finished unsent (go-nsq's
    // "attempted 4 times, giving up").
    let ch = wait_finished(&nsqd, "doomed", "nsq_to_http", 1);
    assert_eq!(int(&ch, "requeue_count"), 3, "{ch}");
    assert_eq!(sink.requests().len(), 3);
    assert_eq!(tool.stop("TERM").0.code(), Some(0));
}

/// go-nsq's RDY around backoff (consumer.go, `startStopContinueBackoff`, `resume`; conn.go,
/// `writeLoop`, which applies a verdict's backoff signal, and so sends its `RDY 0`, before
/// it writes the REQ): 3 messages, an endpoint that answers 500 four times, backoff levels of
/// 0.5 s, 1 s, 2 s (`backoff_multiplier,250ms`). NSQ makes the 3 requests at once and no
/// more (the REQs, even with no delay, come after `RDY 0`); then one request per backoff
/// timeout (`RDY 1`): the fourth failure at 0.5 s (next level: 1 s), a success at 1.5 s
/// (back to level 1: 0.5 s), a success at 2 s that ends the backoff (`RDY` max-in-flight),
/// and the last message at once.
#[test]
fn backoff_lets_one_message_through_per_timeout() {
    for (delay, topic) in [("0s", "bo_now"), ("100ms", "bo_later")] {
        let nsqd = Nsqd::start(&[]);
        let sink = Sink::start(|n| Reply::Status(if n < 4 { 500 } else { 200 }));
        let bodies = numbered("b", 3);
        publish(&nsqd, topic, &bodies);
        let url = sink.url("/bo");
        let requeue_delay = format!("default_requeue_delay,{delay}");
        let tool = from_nsqd(
            &nsqd,
            topic,
            &[
                "--post",
                &url,
                "--consumer-opt",
                &requeue_delay,
                "--consumer-opt",
                "backoff_multiplier,250ms",
                "--consumer-opt",
                "max_attempts,0",
            ],
        );
        let reqs = sink.wait("7 requests", |r| r.len() >= 7);
        wait_finished(&nsqd, topic, "nsq_to_http", 3);
        // Nothing more comes.
        thread::sleep(Duration::from_millis(300));
        let reqs_after = sink.requests();
        assert_eq!(reqs_after.len(), 7, "{delay}: {reqs_after:#?}");
        let t0 = reqs[0].at;
        let ms: Vec<u128> = reqs.iter().map(|r| (r.at - t0).as_millis()).collect();
        let statuses: Vec<Reply> = reqs.iter().map(|r| r.reply).collect();
        let what = format!("delay {delay}: request times {ms:?} ms, answers {statuses:?}");
        // Three at once, then nothing until the first backoff (0.5 s) ends.
        assert!(ms[2] < 250, "{what}");
        assert!((400..900).contains(&ms[3]), "{what}");
        // Level 2 (1 s) after the fourth failure.
        assert!(ms[4] >= ms[3] + 900 && ms[4] < ms[3] + 1600, "{what}");
        // The first success: back to level 1 (0.5 s).
        assert!(ms[5] >= ms[4] + 400 && ms[5] < ms[4] + 1000, "{what}");
        // The second success ends the backoff: the last message follows at once.
        assert!(ms[6] < ms[5] + 250, "{what}");
        let mut got = sink.delivered_bodies();
        got.sort();
        assert_eq!(got, bodies, "{what}");
        let stderr = tool.stop_ok("TERM");
        let backoffs: Vec<String> = stderr
            .lines()
            .filter(|l| l.contains("backing off") || l.contains("exiting backoff"))
            .map(|l| l.split_once(" WRN ").map_or(l, |(_, m)| m).to_string())
            .collect();
        assert_eq!(
            backoffs,
            [
                "   1 [bo_TOPIC/nsq_to_http] backing off for 500ms (backoff level 1), setting all to RDY 0",
                "   1 [bo_TOPIC/nsq_to_http] backing off for 1s (backoff level 2), setting all to RDY 0",
                "   1 [bo_TOPIC/nsq_to_http] backing off for 500ms (backoff level 1), setting all to RDY 0",
                "   1 [bo_TOPIC/nsq_to_http] exiting backoff, returning all to RDY 200",
            ]
            .map(|l| l.replace("bo_TOPIC", topic)),
            "{what}\n{stderr}"
        );
    }
}

/// Go's `flag.Duration` takes a negative `--http-client-connect-timeout`, and nsq_to_http
/// checks none of its durations: its dialer (internal/http_api, `NewDeadlineTransport`) then
/// has a deadline that has always passed, so every request fails with `i/o timeout` and is
/// requeued, even to an endpoint that would answer. A negative request timeout is none.
#[test]
fn negative_connect_timeout_fails_every_request() {
    let nsqd = Nsqd::start(&[]);
    let sink = Sink::ok();
    publish(&nsqd, "negative", &numbered("n", 1));
    let url = sink.url("/never");
    let mut args = vec![
        "--post",
        &url,
        "--http-client-connect-timeout",
        "-1s",
        "--http-client-request-timeout=-1s",
    ];
    args.extend(QUICK_RETRY);
    let tool = from_nsqd(&nsqd, "negative", &args);
    nsqd.wait_stats("requeues after failed dials", TIMEOUT, |s| {
        nsq_integration_tests::find_channel(s, "negative", "nsq_to_http")
            .is_some_and(|c| int(c, "requeue_count") >= 2)
    });
    let (status, stderr) = tool.stop("TERM");
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(sink.requests().is_empty(), "{:?}", sink.requests());
    let addr = sink.addr;
    assert!(
        stderr.contains(&format!(
            "Handler returned error (Post \"{url}\": dial tcp {addr}: i/o timeout)"
        )),
        "{stderr}"
    );
}
