use super::*;

#[test]
fn usage_is_the_reference_text() {
    for host in ["vm", "", "a.b"] {
        let id = nsq_core::message::default_node_id(host);
        let id_default = if id == 0 {
            String::new()
        } else {
            format!(" (default {id})")
        };
        let host_default = if host.is_empty() {
            String::new()
        } else {
            format!(" (default {})", go_quote(host.as_bytes()))
        };
        let want = USAGE_TEMPLATE
            .replace("{HOST_DEFAULT}", &host_default)
            .replace("{ID_DEFAULT}", &id_default);
        assert_eq!(usage_for_hostname(host), want);
    }
}

#[test]
fn sigterm_values() {
    assert_eq!(SigtermMode::parse("drain"), Ok(SigtermMode::Drain));
    assert_eq!(SigtermMode::parse("shutdown"), Ok(SigtermMode::Shutdown));
    assert_eq!(
        SigtermMode::parse("Drain").unwrap_err().to_string(),
        "must be 'shutdown' or 'drain'"
    );
}

#[test]
fn every_config_key_has_a_json_value() {
    let o = NsqdOptions::with_hostname("vm");
    for f in FLAGS.flags {
        if let Some(k) = f.config_key {
            assert!(o.get_json(k).is_some(), "{k}");
        }
    }
}

/// The `nsqd -h` text of the reference (nsqd v1.3.0), which [`usage_for_hostname`] must
/// reproduce byte for byte.
const USAGE_TEMPLATE: &str = r#"Usage of nsqd:
  -auth-http-address value
    	<addr>:<port> or a full url to query auth server (may be given multiple times)
  -broadcast-address string
    	address that will be registered with lookupd (defaults to the OS hostname){HOST_DEFAULT}
  -broadcast-http-port int
    	HTTP port that will be registered with lookupd (defaults to the HTTP port that this nsqd is listening on)
  -broadcast-tcp-port int
    	TCP port that will be registered with lookupd (defaults to the TCP port that this nsqd is listening on)
  -config string
    	path to config file
  -data-path string
    	path to store disk-backed messages
  -dead-letter-topic string
    	topic a message goes to when it reaches its channel's max attempts, instead of being dropped (empty: none; a channel's own dead_letter_topic, POST /channel/config, overrides it; channels of this topic itself drop theirs)
  -deflate
    	enable deflate feature negotiation (client compression) (default true)
  -durable
    	acknowledge a publish only once it is fdatasync'd, and keep in-flight and deferred messages across crashes (implies -mem-queue-size=0)
  -e2e-processing-latency-percentile value
    	message processing time percentiles (as float (0, 1.0]) to track (can be specified multiple times or comma separated '1.0,0.99,0.95', default none)
  -e2e-processing-latency-window-time duration
    	calculate end to end latency quantiles for this duration of time (ie: 60s would only show quantile calculations from the past 60 seconds) (default 10m0s)
  -http-address string
    	address to listen on for HTTP clients (<addr>:<port> for TCP/IP or <path> for unix socket) (default "0.0.0.0:4151")
  -http-client-connect-timeout duration
    	timeout for HTTP connect (default 2s)
  -http-client-request-timeout duration
    	timeout for HTTP request (default 5s)
  -http-peek
    	answer GET /channel/peek?topic=T&channel=C&n=20: a channel's next, in-flight and deferred messages with their bodies, without changing delivery (off: 404; it shows message bodies to whoever reaches the HTTP port)
  -https-address string
    	<addr>:<port> to listen on for HTTPS clients (default "0.0.0.0:4152")
  -log-level value
    	set log verbosity: debug, info, warn, error, or fatal (default INFO)
  -log-prefix string
    	log message prefix (default "[nsqd] ")
  -lookupd-tcp-address value
    	lookupd TCP address (may be given multiple times)
  -max-attempts int
    	deliveries of a message on a channel after which it is not delivered there again but moved to the dead-letter topic, or dropped without one (0: no limit; a channel's own max_attempts, POST /channel/config, overrides it)
  -max-body-size int
    	maximum size of a single command body (default 5242880)
  -max-bytes-per-file int
    	number of bytes per diskqueue file before rolling (default 104857600)
  -max-channel-consumers int
    	maximum channel consumer connection count per nsqd instance (default 0, i.e., unlimited)
  -max-deflate-level int
    	max deflate compression level a client can negotiate (> values == > nsqd CPU usage) (default 6)
  -max-heartbeat-interval duration
    	maximum client configurable duration of time between client heartbeats (default 1m0s)
  -max-msg-size int
    	maximum size of a single message in bytes (default 1048576)
  -max-msg-timeout duration
    	maximum duration before a message will timeout (default 15m0s)
  -max-output-buffer-size int
    	maximum client configurable size (in bytes) for a client output buffer (default 65536)
  -max-output-buffer-timeout duration
    	maximum client configurable duration of time between flushing to a client (default 30s)
  -max-queue-bytes int
    	the most bytes a topic or a channel holds (each queued message's size on disk, 4 + 26 + body bytes, in memory and on disk) before a publish to it fails with 'E_PUB_FAILED ... is full' (0: no bound; a topic's or channel's own max_bytes, POST /topic/config or /channel/config, overrides it)
  -max-queue-depth int
    	the most messages a topic or a channel holds, in memory and on disk, before a publish to it fails with 'E_PUB_FAILED ... is full' (0: no bound; a topic's or channel's own max_depth, POST /topic/config or /channel/config, overrides it)
  -max-rdy-count int
    	maximum RDY count for a client (default 2500)
  -max-req-timeout duration
    	maximum requeuing timeout for a message (default 1h0m0s)
  -mem-queue-size int
    	number of messages to keep in memory (per topic/channel) (default 10000)
  -message-ttl duration
    	age past which a message is not delivered but dropped (0: none; a topic's or channel's own ttl, POST /topic/config or /channel/config, overrides it)
  -min-output-buffer-timeout duration
    	minimum client configurable duration of time between flushing to a client (default 25ms)
  -msg-timeout duration
    	default duration to wait before auto-requeing a message (default 1m0s)
  -node-id int
    	unique part for message IDs, (int) in range [0,1024) (default is hash of hostname){ID_DEFAULT}
  -output-buffer-timeout duration
    	default duration of time between flushing data to clients (default 250ms)
  -parked-reads
    	read a consumer with most of its RDY window in flight every 1ms instead of on every arriving FIN (less daemon CPU per message; false: always read on arrival) (default true)
  -queue-scan-selection-count int
    	number of channels to check per cycle (every 100ms) for in-flight and deferred timeouts (default 20)
  -queue-scan-worker-pool-max int
    	max concurrency for checking in-flight and deferred message timeouts (default 4)
  -replicas int
    	copies of each acknowledged message, this node's included (1: no replication of this node's publishes) (default 1)
  -replication-ack-timeout duration
    	how long a publish waits for its replicas' acknowledgements before it fails (default 10s)
  -replication-max-backlog-bytes int
    	the most this node keeps on disk of one peer's replicated backlog (default 10737418240)
  -replication-peer value
    	<addr>:<port> (TCP) of a peer nsqd that replicates with this one (may be given multiple times; replication is on when one is given, or with --replicas >= 2 and --lookupd-tcp-address, which finds the peers)
  -replication-secret-file string
    	path to a file holding the replication group's shared secret (members prove it on every link; without it any host at a peer's address may link)
  -replication-takeover-timeout duration
    	how long a peer must be gone before this node delivers its replicated backlog (default 30s)
  -sigterm value
    	what SIGTERM does: 'shutdown' (clean shutdown) or 'drain' (accept no new messages, deliver the queued ones, then shut down) (default shutdown)
  -snappy
    	enable snappy feature negotiation (client compression) (default true)
  -statsd-address string
    	UDP <addr>:<port> of a statsd daemon for pushing stats
  -statsd-exclude-ephemeral
    	Skip ephemeral topics and channels when sending stats to statsd
  -statsd-interval duration
    	duration between pushing to statsd (default 1m0s)
  -statsd-mem-stats
    	toggle sending memory and GC stats to statsd (default true)
  -statsd-prefix string
    	prefix used for keys sent to statsd (%s for host replacement) (default "nsq.%s")
  -statsd-udp-packet-size int
    	the size in bytes of statsd UDP packets (default 508)
  -sync-every int
    	number of messages per diskqueue fsync (default 2500)
  -sync-timeout duration
    	duration of time per diskqueue fsync (default 2s)
  -tcp-address string
    	address to listen on for TCP clients (<addr>:<port> for TCP/IP or <path> for unix socket) (default "0.0.0.0:4150")
  -tls-cert string
    	path to certificate file
  -tls-client-auth-policy string
    	client certificate auth policy ('require' or 'require-verify')
  -tls-key string
    	path to key file
  -tls-min-version value
    	minimum SSL/TLS version acceptable ('ssl3.0', 'tls1.0', 'tls1.1', 'tls1.2' or 'tls1.3') (default tls1.0)
  -tls-required
    	require TLS for client connections (true, false, tcp-https)
  -tls-root-ca-file string
    	path to certificate authority file
  -verbose
    	[deprecated] has no effect, use --log-level
  -version
    	print version string
  -worker-id
    	[deprecated] use --node-id
"#;
