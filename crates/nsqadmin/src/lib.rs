//! nsqadmin as a library: the NSQ cluster's web UI and JSON API (nsqadmin.md). It asks
//! nsqlookupd and nsqd over HTTP ([`cluster`], [`client`]), aggregates `/stats` ([`stats`]),
//! serves the API, the embedded single-page UI and the Graphite proxy ([`http`]), sends
//! admin-action notifications ([`notify`]) and keeps its own short stats history for charts
//! ([`history`]). `apps/nsqadmin` only parses flags ([`options`]) and calls [`server::start`].

pub mod admin;
pub mod client;
pub mod cluster;
pub mod history;
pub mod http;
pub mod metrics;
/// Go-compatible JSON bytes.
pub use nsq_go::json;
pub mod notify;
pub mod options;
pub mod server;
pub mod stats;

pub use admin::Admin;
pub use server::{start, AdminHandle, StartError};
