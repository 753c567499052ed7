//! The nsqd daemon as a library: the shared daemon state ([`nsqd`]), the V2 TCP protocol
//! ([`protocol_v2`], one connection's reader and writer; [`client`] its state; `commands.rs`
//! what each command does; `transport.rs` the byte streams and upgrades; `park.rs` when a
//! consumer's socket is read on a timer), drain mode ([`drain`]), the HTTP API
//! ([`http`]), the stats snapshot ([`stats`]) behind `/stats` and statsd ([`statsd`]),
//! `nsqd.dat` ([`metadata`]), nsqlookupd registration ([`lookup`]), TLS, AUTH and compression,
//! and startup/shutdown ([`server`]). `apps/nsqd` only calls `nsq_http::daemon::run`.

pub mod auth;
pub mod client;
mod commands;
pub mod drain;
pub mod health;
pub mod http;
mod input;
pub mod lookup;
pub mod metadata;
pub mod metrics;
pub mod nsqd;
pub mod options;
mod park;
pub mod protocol_v2;
pub mod queue_settings;
pub mod redrive;
pub mod replication;
pub mod server;
pub mod stats;
pub mod statsd;
pub mod tls;
mod transport;

pub use nsqd::Nsqd;
pub use server::{start, NsqdHandle, StartError};
