//! The NSQ queue engine, without sockets: topics fan messages out to channels; channels hold a
//! bounded memory queue that overflows to a [`backend::BackendQueue`], the in-flight and
//! deferred sets, and their consumers; the queue scanner times out and un-defers messages.

pub mod backend;
pub mod diskqueue;
