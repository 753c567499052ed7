//! The shared state of one nsqlookupd (nsqlookupd/nsqlookupd.go, `NSQLookupd`): the options,
//! the registration database and the bound addresses, held in an `Arc` by every TCP
//! connection and HTTP request. Starting and stopping is `server.rs`.

use std::net::SocketAddr;

use crate::db::RegistrationDb;
use crate::options::NsqlookupdOptions;

/// Shared daemon state, handed to every connection and HTTP request.
#[derive(Debug)]
pub struct Nsqlookupd {
    pub opts: NsqlookupdOptions,
    pub db: RegistrationDb,
    /// The bound TCP address (its port goes into the IDENTIFY reply).
    pub tcp_addr: SocketAddr,
    /// The bound HTTP address (its port goes into the IDENTIFY reply).
    pub http_addr: SocketAddr,
    /// The OS host name, reported as `hostname` in the IDENTIFY reply.
    pub hostname: String,
}
