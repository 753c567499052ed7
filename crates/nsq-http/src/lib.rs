//! What every HTTP-speaking NSQ binary shares (nsqd, nsqlookupd, nsqadmin, and the utilities
//! to come), on top of the Go rules of `nsq-go`:
//!
//! * [`client`]: the one outgoing HTTP(S) client, with Go's error texts.
//! * [`reply`]: the reference's response primitives (content types, `X-NSQ-Content-Type`,
//!   v1 error bodies, Go's `http.Redirect`).
//! * [`router`]: one httprouter-style router (exact match per method, case and trailing-slash
//!   redirects, `405` with `Allow`, `OPTIONS`).
//! * [`logging`]: log lines in NSQ's format on stderr.
//! * [`version`]: `<app> v1.3.0 (built w/rustc…)`.
//! * [`listen`]: binding listeners, with Go's `listen (…) failed` error.
//! * [`daemon`]: parse flags → start → wait for SIGINT/SIGTERM → shut down, for `apps/*`.

pub mod client;
pub mod daemon;
pub mod listen;
pub mod logging;
pub mod reply;
pub mod router;
pub mod serve;
pub mod version;
