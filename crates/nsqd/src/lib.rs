//! The nsqd daemon as a library: the V2 TCP protocol ([`tcp`]), the HTTP API ([`http`]),
//! `nsqd.dat` ([`metadata`]) and startup/shutdown ([`server`]). `apps/nsqd` only parses flags
//! and calls [`server::start`].

pub mod auth;
pub mod client;
/// The snappy/deflate stream layers live in their own crate (shared with nsq-client).
pub use nsq_compress as compress;
pub mod http;
pub mod httpclient;
pub mod logging;
pub mod lookup;
pub mod metadata;
pub mod options;
pub mod server;
pub mod statsd;
pub mod tcp;
pub mod tls;
mod transport;

pub use server::{start, Nsqd, NsqdHandle};
