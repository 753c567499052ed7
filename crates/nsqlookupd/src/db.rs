//! The registration database (nsqlookupd/registration_db.go, `RegistrationDB`): a map from registration key
//! (`client::`, `topic:<t>:`, `channel:<t>:<c>`) to the producers (IDENTIFYed nsqd
//! connections) registered under it, with per-entry tombstones.
//!
//! Every query takes the current time (`now`, nanoseconds since the Unix epoch) as an
//! argument, so the liveness and tombstone rules (`Producer.IsTombstoned`, `FilterByActive`) are pure functions of it and can be
//! tested without sleeping; the daemon passes [`now_nanos`].

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nsq_protocol::lookup::PeerInfo;
use nsq_protocol::names::is_ephemeral;
use parking_lot::RwLock;
use serde::Serialize;

/// What the reference prints as `tombstoned_at` for a producer never tombstoned: Go's zero
/// `time.Time` (year 1) as `UnixNano()`, which overflows to this value.
pub const GO_ZERO_TIME_UNIX_NANO: i64 = -6_795_364_578_871_345_152;

/// Nanoseconds since the Unix epoch, now.
pub fn now_nanos() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// The three kinds of registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Category {
    /// Key and subkey `""`: every IDENTIFYed peer.
    Client,
    /// Key = topic name, subkey `""`.
    Topic,
    /// Key = topic name, subkey = channel name.
    Channel,
}

impl Category {
    /// The name used in `/debug` keys and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Category::Client => "client",
            Category::Topic => "topic",
            Category::Channel => "channel",
        }
    }
}

/// A registration key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Registration {
    pub category: Category,
    pub key: String,
    pub subkey: String,
}

impl Registration {
    /// `client::`.
    pub fn client() -> Self {
        Registration {
            category: Category::Client,
            key: String::new(),
            subkey: String::new(),
        }
    }

    /// `topic:<topic>:`.
    pub fn topic(topic: &str) -> Self {
        Registration {
            category: Category::Topic,
            key: topic.to_string(),
            subkey: String::new(),
        }
    }

    /// `channel:<topic>:<channel>`.
    pub fn channel(topic: &str, channel: &str) -> Self {
        Registration {
            category: Category::Channel,
            key: topic.to_string(),
            subkey: channel.to_string(),
        }
    }

    /// The reference's `IsMatch`: same category, and key/subkey equal or the query's is `*`.
    fn is_match(&self, category: Category, key: &str, subkey: &str) -> bool {
        self.category == category
            && (key == "*" || self.key == key)
            && (subkey == "*" || self.subkey == subkey)
    }
}

impl std::fmt::Display for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "category:{} key:{} subkey:{}",
            self.category.as_str(),
            self.key,
            self.subkey
        )
    }
}

/// One IDENTIFYed connection, shared by all of its producer entries.
#[derive(Debug)]
pub struct Peer {
    /// The remote `ip:port`; unique per connection, the key of every producer map.
    pub id: String,
    /// Same text as `id` (the reference keeps both; only this one is shown by `/lookup`).
    pub remote_address: String,
    /// What the nsqd said about itself in IDENTIFY.
    pub info: PeerInfo,
    /// Last IDENTIFY/PING, ns since epoch. Atomic so PING needs no DB lock.
    last_update: AtomicI64,
}

impl Peer {
    /// A peer identified at `now`.
    pub fn new(remote_address: String, info: PeerInfo, now: i64) -> Arc<Peer> {
        Arc::new(Peer {
            id: remote_address.clone(),
            remote_address,
            info,
            last_update: AtomicI64::new(now),
        })
    }

    /// PING: refresh liveness.
    pub fn touch(&self, now: i64) {
        self.last_update.store(now, Ordering::Relaxed);
    }

    pub fn last_update(&self) -> i64 {
        self.last_update.load(Ordering::Relaxed)
    }

    /// `FilterByActive`: active iff `now - last_update <= timeout`.
    fn is_active(&self, now: i64, timeout: Duration) -> bool {
        i128::from(now) - i128::from(self.last_update()) <= timeout.as_nanos() as i128
    }

    /// `<broadcast_address>:<http_port>`, as `/topic/tombstone`'s `node` is compared.
    fn node(&self) -> String {
        format!("{}:{}", self.info.broadcast_address, self.info.http_port)
    }
}

/// A peer's entry in one registration: tombstone state is per (registration, peer).
#[derive(Debug, Clone)]
struct Producer {
    peer: Arc<Peer>,
    tombstoned: bool,
    /// ns since epoch; [`GO_ZERO_TIME_UNIX_NANO`] until first tombstoned.
    tombstoned_at: i64,
}

impl Producer {
    fn new(peer: Arc<Peer>) -> Self {
        Producer {
            peer,
            tombstoned: false,
            tombstoned_at: GO_ZERO_TIME_UNIX_NANO,
        }
    }

    /// `IsTombstoned`: tombstoned iff flagged and `now - tombstoned_at < lifetime`.
    fn is_tombstoned(&self, now: i64, lifetime: Duration) -> bool {
        self.tombstoned
            && i128::from(now) - i128::from(self.tombstoned_at) < lifetime.as_nanos() as i128
    }
}

/// `--inactive-producer-timeout` and `--tombstone-lifetime`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Liveness {
    pub inactive_producer_timeout: Duration,
    pub tombstone_lifetime: Duration,
}

/// A producer as `/lookup` shows it (field order of the reference's `PeerInfo`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProducerView {
    pub remote_address: String,
    pub hostname: String,
    pub broadcast_address: String,
    pub tcp_port: i64,
    pub http_port: i64,
    pub version: String,
}

impl ProducerView {
    fn of(p: &Peer) -> Self {
        ProducerView {
            remote_address: p.remote_address.clone(),
            hostname: p.info.hostname.clone(),
            broadcast_address: p.info.broadcast_address.clone(),
            tcp_port: p.info.tcp_port,
            http_port: p.info.http_port,
            version: p.info.version.clone(),
        }
    }
}

/// One `/nodes` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeView {
    pub remote_address: String,
    pub hostname: String,
    pub broadcast_address: String,
    pub tcp_port: i64,
    pub http_port: i64,
    pub version: String,
    /// Parallel to `topics`: whether this peer is tombstoned in that topic.
    pub tombstones: Vec<bool>,
    pub topics: Vec<String>,
    /// Ours: the replication group the nsqd gave in IDENTIFY, only when it gave one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replication_group: Option<String>,
}

/// One producer in `/debug` (a Go map in the reference: keys sorted).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DebugProducer {
    pub broadcast_address: String,
    pub hostname: String,
    pub http_port: i64,
    pub id: String,
    pub last_update: i64,
    pub tcp_port: i64,
    pub tombstoned: bool,
    pub tombstoned_at: i64,
    pub version: String,
}

/// Producers of one registration, by peer id.
type ProducerMap = BTreeMap<String, Producer>;

/// The registration database.
///
/// A `parking_lot::RwLock` (not an async lock, not a task owning the map): every critical
/// section is a few map operations with no `.await` inside, and the traffic is dominated by
/// reads (consumers polling `/lookup`, nsqadmin) with rare writes (nsqd REGISTER/UNREGISTER,
/// admin actions), which a reader-writer lock serves without queuing readers behind each
/// other. `BTreeMap`s make every listing deterministic (the reference's order is unspecified).
#[derive(Debug, Default)]
pub struct RegistrationDb {
    map: RwLock<BTreeMap<Registration, ProducerMap>>,
}

/// The reference's `needFilter`.
fn wildcard(key: &str, subkey: &str) -> bool {
    key == "*" || subkey == "*"
}

impl RegistrationDb {
    pub fn new() -> Self {
        Self::default()
    }

    // ---- primitive operations (registration_db.go) ----------------------------------------------------

    /// Creates the registration if missing (no producers).
    pub fn add_registration(&self, k: Registration) {
        self.map.write().entry(k).or_default();
    }

    /// Creates the registration if missing and adds the peer unless an entry with its id is
    /// already there (which is kept unchanged, tombstone included). `true` if added.
    pub fn add_producer(&self, k: Registration, peer: &Arc<Peer>) -> bool {
        let mut map = self.map.write();
        let producers = map.entry(k).or_default();
        if producers.contains_key(&peer.id) {
            return false;
        }
        producers.insert(peer.id.clone(), Producer::new(peer.clone()));
        true
    }

    /// Removes a peer from one registration (which stays, even if empty). Returns whether it
    /// was there and how many producers are left.
    pub fn remove_producer(&self, k: &Registration, id: &str) -> (bool, usize) {
        let mut map = self.map.write();
        match map.get_mut(k) {
            Some(producers) => {
                let removed = producers.remove(id).is_some();
                (removed, producers.len())
            }
            None => (false, 0),
        }
    }

    /// Deletes a registration and its producers.
    pub fn remove_registration(&self, k: &Registration) {
        self.map.write().remove(k);
    }

    /// The reference's `FindRegistrations` (with `*` wildcards).
    pub fn find_registrations(
        &self,
        category: Category,
        key: &str,
        subkey: &str,
    ) -> Vec<Registration> {
        let map = self.map.read();
        find_in(&map, category, key, subkey)
    }

    /// Every registration the peer `id` is a producer of.
    pub fn lookup_registrations(&self, id: &str) -> Vec<Registration> {
        self.map
            .read()
            .iter()
            .filter(|(_, p)| p.contains_key(id))
            .map(|(k, _)| k.clone())
            .collect()
    }

    // ---- TCP protocol operations (lookup_protocol_v1.go) ---------------------------------------------------

    /// IDENTIFY: adds the peer to `client::`.
    pub fn identify(&self, peer: &Arc<Peer>) -> bool {
        self.add_producer(Registration::client(), peer)
    }

    /// REGISTER: the channel (if any), then the topic. Returns the registrations newly
    /// joined (for logging).
    pub fn register(
        &self,
        peer: &Arc<Peer>,
        topic: &str,
        channel: Option<&str>,
    ) -> Vec<Registration> {
        let mut added = Vec::new();
        let mut keys = Vec::with_capacity(2);
        if let Some(c) = channel {
            keys.push(Registration::channel(topic, c));
        }
        keys.push(Registration::topic(topic));
        let mut map = self.map.write();
        for k in keys {
            let producers = map.entry(k.clone()).or_default();
            if !producers.contains_key(&peer.id) {
                producers.insert(peer.id.clone(), Producer::new(peer.clone()));
                added.push(k);
            }
        }
        added
    }

    /// UNREGISTER (lookup_protocol_v1.go, `UNREGISTER`). Returns the registrations the peer was removed from, and for a
    /// topic unregistration the channel registrations among them (the reference warns about
    /// those).
    pub fn unregister(&self, id: &str, topic: &str, channel: Option<&str>) -> Vec<Registration> {
        let mut removed = Vec::new();
        let mut map = self.map.write();
        let mut remove = |map: &mut BTreeMap<Registration, ProducerMap>, k: &Registration| {
            let left = map.get_mut(k).map(|producers| {
                if producers.remove(id).is_some() {
                    removed.push(k.clone());
                }
                producers.len()
            });
            left
        };
        match channel {
            Some(c) => {
                let k = Registration::channel(topic, c);
                if remove(&mut map, &k) == Some(0) && is_ephemeral(c) {
                    map.remove(&k);
                }
            }
            None => {
                for k in find_in(&map, Category::Channel, topic, "*") {
                    remove(&mut map, &k);
                }
                let k = Registration::topic(topic);
                if remove(&mut map, &k) == Some(0) && is_ephemeral(topic) {
                    map.remove(&k);
                }
            }
        }
        removed
    }

    /// Disconnect (lookup_protocol_v1.go, end of `IOLoop`): removes the peer from every registration; registrations stay.
    /// Returns those it was removed from.
    pub fn remove_peer(&self, id: &str) -> Vec<Registration> {
        let mut map = self.map.write();
        map.iter_mut()
            .filter_map(|(k, p)| p.remove(id).map(|_| k.clone()))
            .collect()
    }

    // ---- HTTP queries (nsqlookupd/http.go) --------------------------------------------------------------

    /// `/topics`: every topic registration's name.
    pub fn topics(&self) -> Vec<String> {
        self.find_registrations(Category::Topic, "*", "")
            .into_iter()
            .map(|k| k.key)
            .collect()
    }

    /// `/channels`: the channel names registered under `topic` (`*`: under any topic).
    pub fn channels(&self, topic: &str) -> Vec<String> {
        let map = self.map.read();
        channels_in(&map, topic)
    }

    /// `/lookup`: `None` when there is no such topic registration; otherwise its channels and
    /// its active, non-tombstoned producers.
    pub fn lookup(
        &self,
        topic: &str,
        now: i64,
        live: Liveness,
    ) -> Option<(Vec<String>, Vec<ProducerView>)> {
        let map = self.map.read();
        if find_in(&map, Category::Topic, topic, "").is_empty() {
            return None;
        }
        let channels = channels_in(&map, topic);
        let producers = find_producers(&map, Category::Topic, topic, "")
            .into_iter()
            .filter(|p| {
                p.peer.is_active(now, live.inactive_producer_timeout)
                    && !p.is_tombstoned(now, live.tombstone_lifetime)
            })
            .map(|p| ProducerView::of(&p.peer))
            .collect();
        Some((channels, producers))
    }

    /// `/nodes`: every active IDENTIFYed peer with its topics and per-topic tombstones.
    pub fn nodes(&self, now: i64, live: Liveness) -> Vec<NodeView> {
        let map = self.map.read();
        let Some(clients) = map.get(&Registration::client()) else {
            return Vec::new();
        };
        clients
            .values()
            .filter(|p| p.peer.is_active(now, live.inactive_producer_timeout))
            .map(|p| {
                let peer = &p.peer;
                let mut topics = Vec::new();
                let mut tombstones = Vec::new();
                for (k, producers) in map.iter() {
                    if k.category != Category::Topic || !k.subkey.is_empty() {
                        continue;
                    }
                    if let Some(tp) = producers.get(&peer.id) {
                        topics.push(k.key.clone());
                        tombstones.push(
                            Arc::ptr_eq(&tp.peer, peer)
                                && tp.is_tombstoned(now, live.tombstone_lifetime),
                        );
                    }
                }
                NodeView {
                    remote_address: peer.remote_address.clone(),
                    hostname: peer.info.hostname.clone(),
                    broadcast_address: peer.info.broadcast_address.clone(),
                    tcp_port: peer.info.tcp_port,
                    http_port: peer.info.http_port,
                    version: peer.info.version.clone(),
                    tombstones,
                    topics,
                    replication_group: peer.info.replication.as_ref().map(|r| r.group.clone()),
                }
            })
            .collect()
    }

    /// `/debug`: every registration with at least one producer, unfiltered.
    pub fn debug(&self) -> BTreeMap<String, Vec<DebugProducer>> {
        let map = self.map.read();
        let mut out = BTreeMap::new();
        for (k, producers) in map.iter() {
            if producers.is_empty() {
                continue;
            }
            let key = format!("{}:{}:{}", k.category.as_str(), k.key, k.subkey);
            let list = producers
                .values()
                .map(|p| DebugProducer {
                    broadcast_address: p.peer.info.broadcast_address.clone(),
                    hostname: p.peer.info.hostname.clone(),
                    http_port: p.peer.info.http_port,
                    id: p.peer.id.clone(),
                    last_update: p.peer.last_update(),
                    tcp_port: p.peer.info.tcp_port,
                    tombstoned: p.tombstoned,
                    tombstoned_at: p.tombstoned_at,
                    version: p.peer.info.version.clone(),
                })
                .collect();
            out.insert(key, list);
        }
        out
    }

    /// `/topic/create`.
    pub fn create_topic(&self, topic: &str) {
        self.add_registration(Registration::topic(topic));
    }

    /// `/topic/delete`: every channel of the topic, then the topic (wildcards as the
    /// reference).
    pub fn delete_topic(&self, topic: &str) {
        let mut map = self.map.write();
        for k in find_in(&map, Category::Channel, topic, "*") {
            map.remove(&k);
        }
        for k in find_in(&map, Category::Topic, topic, "") {
            map.remove(&k);
        }
    }

    /// `/channel/create`: the channel and its topic.
    pub fn create_channel(&self, topic: &str, channel: &str) {
        let mut map = self.map.write();
        map.entry(Registration::channel(topic, channel))
            .or_default();
        map.entry(Registration::topic(topic)).or_default();
    }

    /// `/channel/delete`: `false` when no registration matched.
    pub fn delete_channel(&self, topic: &str, channel: &str) -> bool {
        let mut map = self.map.write();
        let found = find_in(&map, Category::Channel, topic, channel);
        for k in &found {
            map.remove(k);
        }
        !found.is_empty()
    }

    /// `/topic/tombstone`: tombstones, in the topic's registration, every producer whose
    /// `<broadcast_address>:<http_port>` is `node`. With the topic `*`, one entry per peer
    /// (the first found) is tombstoned, as in the reference.
    pub fn tombstone(&self, topic: &str, node: &str, now: i64) {
        let mut map = self.map.write();
        let keys = find_in(&map, Category::Topic, topic, "");
        let mut seen = HashSet::new();
        for k in keys {
            let Some(producers) = map.get_mut(&k) else {
                continue;
            };
            for (id, p) in producers.iter_mut() {
                if !seen.insert(id.clone()) {
                    continue;
                }
                if p.peer.node() == node {
                    p.tombstoned = true;
                    p.tombstoned_at = now;
                }
            }
        }
    }
}

fn find_in(
    map: &BTreeMap<Registration, ProducerMap>,
    category: Category,
    key: &str,
    subkey: &str,
) -> Vec<Registration> {
    if !wildcard(key, subkey) {
        let k = Registration {
            category,
            key: key.to_string(),
            subkey: subkey.to_string(),
        };
        return if map.contains_key(&k) {
            vec![k]
        } else {
            Vec::new()
        };
    }
    map.keys()
        .filter(|k| k.is_match(category, key, subkey))
        .cloned()
        .collect()
}

fn channels_in(map: &BTreeMap<Registration, ProducerMap>, topic: &str) -> Vec<String> {
    find_in(map, Category::Channel, topic, "*")
        .into_iter()
        .map(|k| k.subkey)
        .collect()
}

/// The reference's `FindProducers`: the producers of the matching registrations, each peer
/// id once.
fn find_producers<'a>(
    map: &'a BTreeMap<Registration, ProducerMap>,
    category: Category,
    key: &str,
    subkey: &str,
) -> Vec<&'a Producer> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for k in find_in(map, category, key, subkey) {
        if let Some(producers) = map.get(&k) {
            for (id, p) in producers {
                if seen.insert(id.as_str()) {
                    out.push(p);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests;
