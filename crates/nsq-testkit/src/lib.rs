//! What every test of the NSQ binaries shares, whatever it starts: a raw HTTP/1.1 client
//! ([`http`]), raw TCP framing on Tokio ([`frames`]) and a blocking V2 client ([`v2`]),
//! certificates made at test time ([`certs`]), a fake upstream HTTP server ([`fake`]),
//! `/stats` lookups ([`stats`]), listening-socket facts ([`sockets`]) and patient polling
//! ([`wait`]).
//!
//! It depends on no daemon crate, so each daemon crate's own integration tests can use it
//! (the in-process starters live in each crate's `tests/common/mod.rs`), and the black-box
//! kit of `tests/` re-exports it next to its binary starters.

pub mod certs;
pub mod fake;
pub mod frames;
pub mod http;
pub mod sockets;
pub mod stats;
pub mod v2;
pub mod wait;

pub use bytes::Bytes;
pub use fake::FakeHttp;
pub use frames::{frame, sized, FrameConn};
pub use http::{curl, have_program, http_get, http_post, http_request, HttpResponse};
pub use serde_json::Value;
pub use sockets::free_port;
pub use stats::{find_channel, find_topic, int};
pub use v2::{consume_all, describe, ReadError, V2Conn};
pub use wait::{eventually, wait_until};
