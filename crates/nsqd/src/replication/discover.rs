//! Members found through nsqlookupd (docs/replication.md, "Membership"): with `--replicas`
//! ≥ 2 and `--lookupd-tcp-address`, this node registers its replication group with every
//! nsqlookupd (IDENTIFY's `replication` field: `server.rs`, `nsq_protocol::lookup::PeerInfo`)
//! and asks each for its `/nodes` at once and then every 5 s: every producer of the same
//! group, this node excepted, becomes a peer as a `--replication-peer` is one — dialled by
//! its own task (`origin.rs`, `run_peer`), and, without a secret, an address links are
//! accepted from (`replica.rs`). A member found is never removed (one that is down is what
//! takeover is for); it still proves its membership on every link.
//!
//! A node may be listed twice under two spellings (a `--replication-peer` by IP, the same
//! node found under its broadcast host name): the node ID its CHALLENGE proves is claimed by
//! one entry at a time ([`Replication::claim`]), and another entry reaching it is dropped
//! before it sends AUTH, as a link to oneself is.
//!
//! NSQ has no counterpart; `/nodes` is read as nsqadmin reads it (internal/clusterinfo/
//! data.go, `GetLookupdProducers`: `GETV1 http://<lookupd>/nodes`, its `producers`).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::watch;

use super::origin::HelloInfo;
use super::{Peer, Replication};

/// How often every nsqlookupd is asked for its members.
const DISCOVER_EVERY: Duration = Duration::from_secs(5);
/// How often until one nsqlookupd answered (it may not be identified yet at startup).
const FIRST_RETRY: Duration = Duration::from_millis(250);

/// Discovery's state in [`Replication`].
pub(super) struct State {
    /// `--replicas` ≥ 2 and at least one `--lookupd-tcp-address`.
    pub(super) on: bool,
    /// The ports HELLO announces, set when the links start.
    pub(super) hello: OnceLock<HelloInfo>,
    /// True once an nsqlookupd answered (or discovery is off): the startup hold after an
    /// unclean stop waits for it, so that the members found are asked too (`returning.rs`).
    pub(super) first_round: watch::Sender<bool>,
}

impl State {
    pub(super) fn new(on: bool) -> State {
        State {
            on,
            hello: OnceLock::new(),
            first_round: watch::channel(!on).0,
        }
    }
}

/// A producer of nsqlookupd's `/nodes` (nsqlookupd/http.go, `doNodes`), the fields read.
#[derive(serde::Deserialize)]
struct Node {
    broadcast_address: String,
    tcp_port: i64,
    /// Ours (`crates/nsqlookupd`): the group a replicating nsqd registered.
    #[serde(default)]
    replication_group: Option<String>,
}

#[derive(serde::Deserialize)]
struct Nodes {
    producers: Vec<Node>,
}

/// `host:port`, with brackets around an IPv6 host (Go's `net.JoinHostPort`).
fn join_host_port(host: &str, port: i64) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

impl Replication {
    /// The group this node registers with nsqlookupd (`None`: it registers none, its own
    /// publishes are not replicated): derived from the secret, `""` without one.
    pub fn lookupd_group(&self) -> Option<String> {
        self.replicates_own().then(|| {
            self.secret()
                .map_or_else(String::new, |s| s.group().to_string())
        })
    }

    /// The addresses of every peer: `--replication-peer`s and members found. Without a
    /// secret a link is accepted only from an address one of them resolves to.
    pub(super) fn peer_addrs(&self) -> Vec<String> {
        self.group
            .lock()
            .peers
            .iter()
            .map(|p| p.addr.clone())
            .collect()
    }

    /// Peer `i`'s session was answered by node `node_id` (its CHALLENGE proven): claims the
    /// node for it. `Some(address)`: another entry's session links to that node now, and
    /// entry `i` is a second spelling of it.
    pub(super) fn claim(&self, i: usize, node_id: u64) -> Option<String> {
        let mut g = self.group.lock();
        let other = g
            .peers
            .iter()
            .enumerate()
            .find(|(k, p)| *k != i && p.claimed && !p.dropped && p.node_id == node_id);
        if let Some((_, p)) = other {
            return Some(p.addr.clone());
        }
        let p = &mut g.peers[i];
        p.node_id = node_id;
        p.claimed = true;
        None
    }

    /// Adds a member found through nsqlookupd, unless an entry has its address: a new peer
    /// and its dialling task.
    fn add_found(self: &Arc<Self>, addr: &str) {
        let Some(&hello) = self.discovery.hello.get() else {
            return;
        };
        if *self.stop.borrow() {
            return;
        }
        let i = {
            let mut g = self.group.lock();
            if g.peers.iter().any(|p| p.addr == addr) {
                return;
            }
            g.peers.push(Peer::new(addr.to_string()));
            g.peers.len() - 1
        };
        tracing::info!("REPLICATION: found peer {addr} through nsqlookupd");
        // While delivery is held after an unclean stop, the new peer is waited for too.
        self.wait_for_peer(i);
        self.spawn_peer(i, hello);
    }

    /// Starts asking the nsqlookupds for members (when discovery is on).
    pub(super) fn start_discovery(
        self: &Arc<Self>,
        lookup: crate::lookup::Lookup,
        client: nsq_http::client::HttpClient,
    ) {
        if !self.discovery.on {
            return;
        }
        let r = self.clone();
        let task = tokio::spawn(async move {
            let mut stop = r.stopping();
            let mut answered = false;
            loop {
                let round = tokio::select! {
                    a = r.discover_round(&lookup, &client) => a,
                    _ = stop.wait_for(|s| *s) => return,
                };
                if round && !answered {
                    answered = true;
                    r.discovery.first_round.send_replace(true);
                }
                let wait = if answered {
                    DISCOVER_EVERY
                } else {
                    FIRST_RETRY
                };
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = stop.wait_for(|s| *s) => return,
                }
            }
        });
        self.tasks.lock().push(task);
    }

    /// Asks every identified nsqlookupd for its `/nodes` and adds the members of this node's
    /// group found there. Whether one answered.
    async fn discover_round(
        self: &Arc<Self>,
        lookup: &crate::lookup::Lookup,
        client: &nsq_http::client::HttpClient,
    ) -> bool {
        let Some(group) = self.lookupd_group() else {
            return false;
        };
        let me = join_host_port(
            &self.settings.broadcast_address,
            i64::from(self.settings.tcp_port),
        );
        let mut answered = false;
        for http in lookup.http_addresses() {
            let url = format!("http://{http}/nodes");
            let nodes = match client.get_v1(&url).await {
                Ok(body) => serde_json::from_slice::<Nodes>(&body).map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            let nodes = match nodes {
                Ok(n) => n,
                Err(e) => {
                    tracing::debug!("REPLICATION: lookupd {http} /nodes failed - {e}");
                    continue;
                }
            };
            answered = true;
            for n in nodes.producers {
                if n.replication_group.as_deref() != Some(group.as_str()) || n.tcp_port <= 0 {
                    continue;
                }
                let addr = join_host_port(&n.broadcast_address, n.tcp_port);
                if addr != me {
                    self.add_found(&addr);
                }
            }
        }
        answered
    }

    /// Whether the first answer of an nsqlookupd came (or discovery is off).
    pub(super) async fn first_round(&self) {
        let mut rx = self.discovery.first_round.subscribe();
        let _ = rx.wait_for(|d| *d).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_join_like_go() {
        assert_eq!(join_host_port("10.0.0.1", 4150), "10.0.0.1:4150");
        assert_eq!(join_host_port("nsqd-a", 4150), "nsqd-a:4150");
        assert_eq!(join_host_port("::1", 4150), "[::1]:4150");
    }

    #[test]
    fn nodes_without_a_group_have_none() {
        let n: Nodes = serde_json::from_slice(
            br#"{"producers":[{"remote_address":"r","hostname":"h","broadcast_address":"a","tcp_port":1,"http_port":2,"version":"1.3.0","tombstones":[],"topics":[]},{"broadcast_address":"b","tcp_port":3,"replication_group":"00ff"}]}"#,
        )
        .unwrap();
        assert_eq!(n.producers[0].replication_group, None);
        assert_eq!(n.producers[1].replication_group.as_deref(), Some("00ff"));
        assert_eq!(n.producers[1].broadcast_address, "b");
    }

    #[test]
    fn off_means_the_first_round_is_done() {
        assert!(*State::new(false).first_round.borrow());
        assert!(!*State::new(true).first_round.borrow());
    }
}
