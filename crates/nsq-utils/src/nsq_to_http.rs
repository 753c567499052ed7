//! What `nsq_to_http` (nsq's apps/nsq_to_http) is made of, apart from its flags: the
//! destination choice ([`hostpool`], go-hostpool's standard and epsilon-greedy pools), the
//! request timings it logs every `--status-every` requests ([`timer_metrics`], bitly's
//! timer_metrics), and the forwarding of one message as GET or POST with the reference's
//! success rules ([`forward`]).

pub mod forward;
pub mod http;
pub use crate::hostpool;
pub use crate::timer_metrics;
