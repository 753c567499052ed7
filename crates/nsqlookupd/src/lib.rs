//! The nsqlookupd discovery daemon as a library: the V1 TCP registration protocol spoken by
//! nsqd ([`tcp`]), the in-memory registration database ([`db`]), the HTTP API used by
//! clients, nsqd and nsqadmin ([`http`]), flags and config file ([`options`]), the shared
//! state ([`nsqlookupd`]) and startup/shutdown ([`server`]). `apps/nsqlookupd` only parses flags and calls [`start`].

pub mod db;
pub mod http;
pub mod metrics;
pub mod nsqlookupd;
pub mod options;
pub mod server;
pub mod tcp;

pub use nsqlookupd::Nsqlookupd;
pub use options::NsqlookupdOptions;
pub use server::{start, NsqlookupdHandle, StartError};
