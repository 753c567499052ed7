//! An async NSQ client with go-nsq v1.1's behaviour, on tokio.
//!
//! * [`Producer`]: `PUB`, `MPUB` and `DPUB` to one nsqd, each call returning when nsqd has
//!   answered it; many calls share one connection at once (answers are matched in order), so
//!   one producer cloned into many tasks is fast. A dropped connection is dialed again on the
//!   next call.
//! * [`Consumer`]: a topic/channel from nsqd addresses and/or nsqlookupd discovery, with
//!   go-nsq's RDY distribution (including fewer `max_in_flight` slots than connections),
//!   exponential backoff, requeue delays, `max_attempts`, heartbeats and a graceful stop.
//!   Take messages as a stream ([`Consumer::next`]) or run a [`Handler`] ([`Consumer::run`]).
//! * [`Config`]: go-nsq's options with their names and defaults ([`Config::set`] takes the
//!   names tools pass as `--consumer-opt`), TLS (rustls), snappy, deflate and AUTH.
//! * [`GoLogger`] in [`Config::logger`]: go-nsq's own log lines (`INF    1 [t/c] (addr)
//!   connecting to nsqd`, …) at go-nsq's levels, for programs whose output must match a go-nsq
//!   program's; off by default.
//!
//! The wire format comes from `nsq-protocol` and the compression layers from `nsq-compress`,
//! the same code nsqd runs.
//!
//! # Publishing
//!
//! ```no_run
//! # async fn demo() -> Result<(), nsq_client::Error> {
//! use nsq_client::{Config, Producer};
//!
//! let producer = Producer::new("127.0.0.1:4150", Config::default())?;
//! producer.publish("events", b"hello").await?;
//! match producer.publish("bad topic!", b"x").await {
//!     Err(e) => assert_eq!(e.code(), Some(nsq_client::ErrorCode::BadTopic)),
//!     Ok(()) => unreachable!(),
//! }
//! # Ok(()) }
//! ```
//!
//! # Consuming with a handler
//!
//! ```no_run
//! # async fn demo() -> Result<(), nsq_client::Error> {
//! use nsq_client::{Config, Consumer, Message};
//!
//! let mut config = Config::default();
//! config.max_in_flight = 200;
//! let consumer = Consumer::new("events", "archive", config)?;
//! consumer.connect_to_lookupd("127.0.0.1:4161")?;
//! let stop = consumer.stop_handle();
//! tokio::spawn(async move {
//!     tokio::signal::ctrl_c().await.ok();
//!     stop.stop().await;
//! });
//! consumer
//!     .run(
//!         |m: &Message| {
//!             let body = m.body().clone();
//!             async move {
//!                 println!("{} bytes", body.len());
//!                 Ok::<(), std::io::Error>(())
//!             }
//!         },
//!         4,
//!     )
//!     .await;
//! # Ok(()) }
//! ```
//!
//! Runnable programs against a local nsqd are in `examples/` (`cargo run -p nsq-client
//! --example publish` / `--example tail`).

mod config;
mod conn;
mod consumer;
mod error;
mod golog;
mod lookupd;
mod message;
mod producer;
mod tls;

pub use config::{Config, ConfigError, OptionKind, OptionValue, SignedDuration, TlsOptions};
pub use conn::{AuthResponse, IdentifyResponse};
pub use consumer::{Consumer, ConsumerStats, GiveUpHook, Handler, HandlerError, StopHandle};
pub use error::{Error, ServerError};
pub use golog::{GoLogger, LogLevel};
pub use message::{Message, Toucher};
pub use nsq_protocol::{ErrorCode, MessageId};
pub use producer::Producer;
